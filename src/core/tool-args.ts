/**
 * A tool call's arguments checked against its registered input schema (JSON Schema 2020-12), with
 * every failing path named (issue 17: deny `args_invalid`). The validator is @cfworker/json-schema,
 * an interpreter: it walks the schema for each call and never compiles code at run time, which
 * Workers forbid (`new Function`, `eval`). Pure: no I/O.
 */
import { Validator, type OutputUnit } from '@cfworker/json-schema';

/** One failing argument: `path` as a 400's field paths name it (`args.timeout_ms`), and why. */
export interface ArgError {
  readonly path: string;
  readonly message: string;
}

/** Keywords that only say a child failed: the child's own error names the path. */
const CONTAINERS = new Set(['properties', 'items', 'prefixItems', 'additionalProperties', 'allOf', '$ref', 'dependentSchemas', 'unevaluatedProperties']);

/** `#/o/k` (the validator's instance location) as `args.o.k`. */
function argPath(instanceLocation: string, extra?: string): string {
  const parts = instanceLocation
    .replace(/^#\/?/, '')
    .split('/')
    .filter((p) => p !== '')
    .map((p) => decodeURIComponent(p).replace(/~1/g, '/').replace(/~0/g, '~'));
  return ['args', ...parts, ...(extra === undefined ? [] : [extra])].join('.');
}

function argError(u: OutputUnit): ArgError {
  if (u.keyword === 'required') {
    const missing = /required property "([^"]*)"/.exec(u.error)?.[1];
    return { path: argPath(u.instanceLocation, missing), message: 'required' };
  }
  if (u.keyword === 'false') return { path: argPath(u.instanceLocation), message: 'not a property of this tool' };
  return { path: argPath(u.instanceLocation), message: `${u.keyword}: ${u.error}` };
}

/** A compiled-free validator for one tool version's schema. */
export class ArgsValidator {
  private readonly validator: Validator | null;

  /** `refusal`, when not empty, is every call's answer: the schema is never run (see ToolRegistry.resolve). */
  constructor(
    schema: Record<string, unknown>,
    private readonly refusal: readonly ArgError[] = [],
  ) {
    this.validator = refusal.length > 0 ? null : new Validator(schema, '2020-12', false);
  }

  /** Every failing path of `args`, each once, in the validator's order; empty when they are valid. */
  check(args: unknown): ArgError[] {
    if (this.validator === null) return [...this.refusal];
    const result = this.validator.validate(args);
    if (result.valid) return [];
    const out: ArgError[] = [];
    for (const u of result.errors) {
      if (CONTAINERS.has(u.keyword)) continue;
      const e = argError(u);
      if (!out.some((o) => o.path === e.path)) out.push(e);
    }
    return out;
  }
}
