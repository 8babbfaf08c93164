/**
 * `npx warrant <command>`: one tool for operators and scripts (`warrant --help`, `warrant COMMAND
 * --help`). The database commands (tenant, api-keys, keys, audit) hand over to their own CLIs; the
 * others call a running server: WARRANT_URL (default http://127.0.0.1:8080) and WARRANT_API_KEY
 * (default: the embedded database's `<data dir>/default-api-key`). Output is JSON on stdout.
 *
 * Exit codes, so that a shell gate cannot pass a denied call (`warrant approve < call.json && run`):
 * 0 success (approve: grant), 1 the server answered with an error, 2 bad usage, 3 approve answered
 * deny, 4 the server (or the JWKS) could not be reached.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { JSONWebKeySet } from 'jose';
import { fromMcpTool, WarrantClient, WarrantError, verifyOffline, type McpTool, type ToolRegistration } from '../client/index.js';
import { httpFetch } from './http-fetch.js';

/** The documented exit codes (README "Command line"). */
export const EXIT = { ok: 0, error: 1, usage: 2, denied: 3, unreachable: 4 } as const;

const DEFAULT_URL = 'http://127.0.0.1:8080';

/** Each command's synopsis and what it does (`warrant COMMAND --help`). */
const COMMANDS: Record<string, readonly [string, string]> = {
  tenant: ['tenant create NAME | list', 'tenants, straight from the database (warrant tenant --help)'],
  'api-keys': ['api-keys create|list|revoke …', 'scoped API keys of a tenant (warrant api-keys --help)'],
  keys: ['keys rotate | list [--audit] | reseal', 'the signing and audit key rings (warrant keys --help)'],
  audit: ['audit verify|checkpoint|receipt …', 'the offline audit checks (warrant audit --help)'],
  mint: ['mint < body.json', 'POST /v1/capabilities with the JSON body on stdin'],
  attenuate: ['attenuate < body.json', 'POST /v1/attenuate with the JSON body on stdin'],
  approve: ['approve < body.json', 'POST /v1/approve with the JSON body on stdin; exit 0 on grant, 3 on deny\n(the decision is printed either way)'],
  revoke: ['revoke < body.json', 'POST /v1/revoke with the JSON body on stdin'],
  capability: ['capability ID', 'GET /v1/capabilities/ID'],
  'audit-log': ['audit-log [QUERY]', 'GET /v1/audit?QUERY (e.g. trajectory_id=t1&limit=10)'],
  'verify-audit': ['verify-audit', 'GET /v1/audit/verify'],
  tools: [
    'tools list | import FILE --right RIGHT --target POINTER:KIND',
    "the tenant's tools; import registers an MCP tools/list answer (FILE, or - for stdin),\n" +
      'each class from its annotations (docs/api.md); exit 1 when any tool was refused',
  ],
  approvals: [
    'approvals list [STATE] | get ID [--wait S] | approve ID [--note TEXT] | reject ID [--note TEXT]',
    "calls waiting for a person (an approver's key): list them, read or long-poll one, resolve one",
  ],
  inspect: [
    'inspect TOKEN|-|FILE [JWKS_URL]',
    'decode a token and verify it offline against the JWKS (default WARRANT_URL/.well-known/jwks.json);\n' +
      '- reads the token from stdin, FILE from a file (either keeps it out of `ps`)',
  ],
};

const HELP: Record<string, string> = Object.fromEntries(
  Object.entries(COMMANDS).map(([name, [synopsis, what]]) => [name, `warrant ${synopsis.padEnd(34)} ${what.replaceAll('\n', `\n${' '.repeat(43)}`)}`]),
);

const FOOTER = `
Against a server: WARRANT_URL (default ${DEFAULT_URL}), WARRANT_API_KEY (default: <data dir>/default-api-key).
Exit codes: 0 success (approve: grant), 1 the server answered with an error, 2 bad usage, 3 approve denied,
4 the server or JWKS could not be reached.`;

const USAGE = `usage: warrant COMMAND [ARGS] (warrant COMMAND --help)\n\n${Object.values(HELP).join('\n')}\n${FOOTER}`;

class UsageError extends Error {}

/** A tool import in which some tools were refused: printed as is, exit 1. */
class PartlyRefused extends Error {
  constructor(readonly out: unknown) {
    super('some tools were refused');
  }
}

/** A request that never reached the server; `url` is what was tried. */
class Unreachable extends Error {}

const isHelp = (args: readonly string[]): boolean => args.includes('--help') || args.includes('-h');

/** Hands over to one of the database CLIs, which read their arguments from process.argv. */
async function delegate(script: string, args: string[]): Promise<void> {
  process.argv = [process.argv[0] as string, script, ...args];
  await import(script);
}

function baseUrl(): string {
  return process.env.WARRANT_URL?.trim() || DEFAULT_URL;
}

/** WARRANT_API_KEY, else the embedded database's default key (config.js, and the store code it
 * pulls in, is loaded only then: a call with a key set starts faster). */
async function client(): Promise<WarrantClient> {
  let apiKey = process.env.WARRANT_API_KEY?.trim() ?? '';
  if (apiKey === '') {
    const { readConfig } = await import('./config.js');
    const keyFile = join(readConfig(process.env).dataDir, 'default-api-key');
    if (existsSync(keyFile)) apiKey = readFileSync(keyFile, 'utf8').trim();
  }
  if (apiKey === '') throw new UsageError('set WARRANT_API_KEY (or run beside an embedded database with a default-api-key)');
  return new WarrantClient({ baseUrl: baseUrl(), apiKey, fetch: httpFetch });
}

function stdinJson(): unknown {
  const text = readFileSync(0, 'utf8');
  try {
    return JSON.parse(text);
  } catch {
    throw new UsageError('stdin must hold the JSON request body');
  }
}

function decodePart(part: string | undefined): unknown {
  try {
    return JSON.parse(Buffer.from(part ?? '', 'base64url').toString('utf8'));
  } catch {
    return null;
  }
}

/** The token to inspect: `-` reads stdin, an existing file is read, anything else is the token itself. */
function tokenFrom(arg: string): string {
  if (arg === '-') return readFileSync(0, 'utf8').trim();
  if (existsSync(arg)) return readFileSync(arg, 'utf8').trim();
  return arg;
}

/** Why a fetch failed, in the words of the socket (ECONNREFUSED, ENOTFOUND, …) rather than "fetch failed". */
function networkCause(e: unknown): string {
  const cause = (e as { cause?: { code?: unknown; message?: unknown } } | null)?.cause;
  if (typeof cause?.code === 'string') return cause.code;
  if (typeof cause?.message === 'string') return cause.message;
  return e instanceof Error ? e.message : String(e);
}

/** The JWKS fetched here, so that an unreachable URL is reported as such and not as a bad token. */
async function fetchJwks(url: URL): Promise<JSONWebKeySet> {
  let res: Response;
  try {
    res = await httpFetch(url, { signal: AbortSignal.timeout(10_000) });
  } catch (e) {
    throw new Unreachable(`cannot reach ${url.href} (${networkCause(e)})`);
  }
  const body = (await res.json().catch(() => null)) as { keys?: unknown } | null;
  if (!res.ok || !Array.isArray(body?.keys)) throw new Unreachable(`${url.href} answered ${res.status} without a JWK set`);
  return body as JSONWebKeySet;
}

async function inspect(args: string[]): Promise<unknown> {
  if (args[0] === undefined || args.length > 2) throw new UsageError(`usage: ${HELP.inspect}`);
  const token = tokenFrom(args[0]);
  if (token === '') throw new UsageError('inspect: the token is empty');
  const [header, payload] = token.split('.');
  let jwks: URL;
  try {
    jwks = new URL(args[1] ?? `${baseUrl()}/.well-known/jwks.json`);
  } catch {
    throw new UsageError(`inspect: JWKS_URL is not a URL: ${args[1] ?? baseUrl()}`);
  }
  return { header: decodePart(header), payload: decodePart(payload), verification: await verifyOffline(token, await fetchJwks(jwks)) };
}

/** The value after `--flag` in args, if given. */
function option(args: readonly string[], flag: string): string | undefined {
  const at = args.indexOf(flag);
  return at < 0 ? undefined : args[at + 1];
}

const RIGHTS = ['read', 'write', 'execute', 'connect'] as const;
const KINDS = ['path', 'host', 'repo', 'url'] as const;

/** `warrant tools import FILE --right RIGHT --target POINTER:KIND`: each tool registered, refusals reported. */
async function importTools(args: string[]): Promise<{ out: unknown; refused: boolean }> {
  const file = args[0];
  const right = option(args, '--right');
  const [pointer = '', kind = ''] = (option(args, '--target') ?? '').split(':');
  if (file === undefined || !RIGHTS.includes(right as never) || !pointer.startsWith('/') || !KINDS.includes(kind as never))
    throw new UsageError(`usage: ${HELP.tools}`);
  let list: { tools?: McpTool[] };
  try {
    list = JSON.parse(readFileSync(file === '-' ? 0 : file, 'utf8')) as { tools?: McpTool[] };
  } catch {
    throw new UsageError('tools import: FILE must hold an MCP tools/list answer ({"tools": [...]})');
  }
  if (!Array.isArray(list.tools)) throw new UsageError('tools import: FILE has no "tools" list');
  const c = await client();
  const where = { right: right as ToolRegistration['right'], target: { pointer, kind: kind as ToolRegistration['target']['kind'] } };
  const results: unknown[] = [];
  let refused = false;
  for (const tool of list.tools) {
    const { name, registration } = fromMcpTool(tool, where);
    try {
      const t = await c.putTool(name, registration);
      results.push({ name, version: t.version, side_effect: t.side_effect, warnings: t.warnings });
    } catch (e) {
      if (!(e instanceof WarrantError) || e.code === 'network') throw e;
      refused = true;
      results.push({ name, error: { code: e.code, message: e.message, ...e.details } });
    }
  }
  return { out: { tools: results }, refused };
}

async function approvals(args: string[]): Promise<unknown> {
  const [sub, id] = args;
  const c = await client();
  const note = option(args, '--note');
  if (sub === 'list') return { approvals: await c.approvals((id ?? 'pending') as never) };
  if (sub === 'get' && id !== undefined) return c.approval(id, option(args, '--wait') === undefined ? {} : { waitS: Number(option(args, '--wait')) });
  if ((sub === 'approve' || sub === 'reject') && id !== undefined) return c.resolveApproval(id, sub, note);
  throw new UsageError(`usage: ${HELP.approvals}`);
}

async function run(command: string, args: string[]): Promise<unknown> {
  switch (command) {
    case 'mint':
      return (await client()).mint(stdinJson() as never);
    case 'attenuate':
      return (await client()).attenuate(stdinJson() as never);
    case 'approve':
      return (await client()).approve(stdinJson() as never);
    case 'revoke':
      return { revoked: await (await client()).revoke(stdinJson() as never) };
    case 'capability':
      if (args[0] === undefined) throw new UsageError(`usage: ${HELP.capability}`);
      return (await client()).capability(args[0]);
    case 'audit-log':
      return (await client()).audit(Object.fromEntries(new URLSearchParams(args[0] ?? '')));
    case 'verify-audit':
      return (await client()).verifyAudit();
    case 'inspect':
      return inspect(args);
    case 'tools':
      if (args[0] === 'list') return { tools: await (await client()).tools() };
      if (args[0] === 'import') {
        const { out, refused } = await importTools(args.slice(1));
        if (refused) throw new PartlyRefused(out);
        return out;
      }
      throw new UsageError(`usage: ${HELP.tools}`);
    case 'approvals':
      return approvals(args);
    default:
      throw new UsageError(USAGE);
  }
}

/** Prints the outcome and gives the exit code. */
function report(e: unknown): number {
  if (e instanceof UsageError) {
    console.error(e.message);
    return EXIT.usage;
  }
  if (e instanceof PartlyRefused) {
    console.log(JSON.stringify(e.out, null, 2));
    return EXIT.error;
  }
  if (e instanceof Unreachable) {
    console.error(`warrant: ${e.message}`);
    return EXIT.unreachable;
  }
  if (e instanceof WarrantError && e.code === 'network') {
    console.error(`warrant: ${e.message}; is the server running there? (WARRANT_URL)`);
    return EXIT.unreachable;
  }
  if (e instanceof WarrantError) {
    console.log(JSON.stringify({ error: { status: e.status, code: e.code, message: e.message, ...e.details } }, null, 2));
    return EXIT.error;
  }
  console.error(`warrant: ${e instanceof Error ? e.message : String(e)}`);
  return EXIT.error;
}

async function main(argv: string[]): Promise<number> {
  const [command = '', ...args] = argv;
  const delegated: Record<string, string> = { tenant: './tenant-cli.js', 'api-keys': './api-keys-cli.js', keys: './keys-cli.js', audit: './audit-cli.js' };
  const script = delegated[command];
  if (script !== undefined) {
    await delegate(script, args);
    return -1;
  }
  if (command === '--help' || command === '-h' || command === 'help') {
    console.log(USAGE);
    return EXIT.ok;
  }
  const help = HELP[command];
  if (help !== undefined && isHelp(args)) {
    console.log(`usage:\n${help}\n${FOOTER}`);
    return EXIT.ok;
  }
  try {
    const out = await run(command, args);
    console.log(JSON.stringify(out, null, 2));
    return command === 'approve' && (out as { decision?: unknown }).decision !== 'grant' ? EXIT.denied : EXIT.ok;
  } catch (e) {
    return report(e);
  }
}

const code = await main(process.argv.slice(2));
// A delegated CLI exits by itself once its work is done.
if (code >= 0) process.exit(code);
