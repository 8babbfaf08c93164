// The WHATWG URL class is a web-platform global on Node, Workers and browsers alike. The core
// compiles with `"types": []` so that Node globals cannot leak in; this declares only what it uses.
declare class URL {
  constructor(input: string);
  readonly protocol: string;
  readonly username: string;
  readonly password: string;
  readonly host: string;
  readonly hostname: string;
  readonly port: string;
  readonly pathname: string;
  readonly search: string;
  readonly origin: string;
}
