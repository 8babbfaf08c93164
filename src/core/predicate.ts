/**
 * The predicate P: canonicalization, implication (attenuation) and evaluation (approve).
 * docs/api.md: every field optional, all must hold; `budget` and `max_calls` are cumulative over a
 * capability and all its descendants, which the store enforces; here are the per-call bounds.
 */
import { toMicro } from './money.js';
import { ok, type ArgBound, type Canonical, type CanonicalPredicate, type RawPredicate, type Result, type Scalar, type Violation } from './types.js';

export interface PredicateError {
  readonly path: string;
  readonly message: string;
}

function sameScalar(a: Scalar, b: Scalar): boolean {
  return typeof a === typeof b && a === b;
}

function uniqueScalars(values: readonly Scalar[]): Scalar[] {
  const out: Scalar[] = [];
  for (const v of values) if (!out.some((o) => sameScalar(o, v))) out.push(v);
  return out;
}

/** Validates cost fields to exact micro-units and drops duplicate bounds; never reorders. */
export function canonicalPredicate(p: RawPredicate): Result<CanonicalPredicate> | { ok: false; errors: PredicateError[] } {
  const errors: PredicateError[] = [];
  for (const field of ['max_cost', 'budget'] as const) {
    const v = p[field];
    if (v === undefined) continue;
    const m = toMicro(v);
    if (!m.ok) errors.push({ path: field, message: m.error });
  }
  if (errors.length > 0) return { ok: false, errors };
  const out: { -readonly [K in keyof RawPredicate]: RawPredicate[K] } = {};
  if (p.max_cost !== undefined) out.max_cost = p.max_cost + 0; // + 0 turns -0 into 0
  if (p.budget !== undefined) out.budget = p.budget + 0;
  if (p.max_calls !== undefined) out.max_calls = p.max_calls;
  if (p.max_depth !== undefined) out.max_depth = p.max_depth;
  if (p.args !== undefined && p.args.length > 0) {
    const args: ArgBound[] = [];
    for (const b of p.args) {
      const bound = b.kind === 'one_of' ? { ...b, values: uniqueScalars(b.values) } : b;
      if (!args.some((a) => JSON.stringify(a) === JSON.stringify(bound))) args.push(bound);
    }
    out.args = args;
  }
  return ok(out as Canonical<RawPredicate>);
}

/** Exact micro-units of a cost field of a canonical predicate (validated at canonicalization). */
export function microOf(value: number): bigint {
  const m = toMicro(value);
  if (!m.ok) throw new RangeError('predicate cost was not canonical');
  return m.value;
}

// ---- implication ----------------------------------------------------------------------------

/** Does one child bound guarantee the parent bound (every value it lets through, the parent does)? */
function boundImplies(child: ArgBound, parent: ArgBound): boolean {
  if (child.arg !== parent.arg) return false;
  switch (parent.kind) {
    case 'max':
      if (child.kind === 'max') return child.value <= parent.value;
      return child.kind === 'one_of' && child.values.every((v) => typeof v === 'number' && v <= parent.value);
    case 'min':
      if (child.kind === 'min') return child.value >= parent.value;
      return child.kind === 'one_of' && child.values.every((v) => typeof v === 'number' && v >= parent.value);
    case 'max_length':
      if (child.kind === 'max_length') return child.value <= parent.value;
      return child.kind === 'one_of' && child.values.every((v) => typeof v === 'string' && lengthOf(v) <= parent.value);
    case 'one_of':
      return child.kind === 'one_of' && child.values.every((v) => parent.values.some((p) => sameScalar(p, v)));
  }
}

function describeBound(b: ArgBound): string {
  return b.kind === 'one_of' ? `one_of(${b.arg}, ${JSON.stringify(b.values)})` : `${b.kind}(${b.arg}, ${b.value})`;
}

function widened(detail: string): Violation {
  return { component: 'predicate', code: 'predicate_widened', detail };
}

/**
 * Every way the child predicate fails to imply the parent's. docs/api.md: "every bound the parent sets
 * is set by the child at least as tightly, and max_depth of the child < max_depth of the parent
 * when the parent sets one".
 */
export function predicateViolations(child: CanonicalPredicate, parent: CanonicalPredicate): Violation[] {
  const out: Violation[] = [];
  for (const field of ['max_cost', 'budget'] as const) {
    const p = parent[field];
    const c = child[field];
    if (p === undefined) continue;
    if (c === undefined) out.push(widened(`${field}: the parent sets ${p}; the child must set at most that`));
    else if (microOf(c) > microOf(p)) out.push(widened(`${field}: ${c} exceeds the parent's ${p}`));
  }
  if (parent.max_calls !== undefined) {
    const c = child.max_calls;
    if (c === undefined) out.push(widened(`max_calls: the parent sets ${parent.max_calls}; the child must set at most that`));
    else if (c > parent.max_calls) out.push(widened(`max_calls: ${c} exceeds the parent's ${parent.max_calls}`));
  }
  if (parent.max_depth === 0) {
    out.push({ component: 'predicate', code: 'depth_exhausted', detail: 'max_depth: the parent may not be attenuated (max_depth 0)' });
  } else if (parent.max_depth !== undefined) {
    const c = child.max_depth;
    if (c === undefined || c >= parent.max_depth) {
      out.push(widened(`max_depth: the child must set less than the parent's ${parent.max_depth}`));
    }
  }
  for (const bound of parent.args ?? []) {
    if (!(child.args ?? []).some((c) => boundImplies(c, bound))) {
      out.push(widened(`args: no bound of the child implies the parent's ${describeBound(bound)}`));
    }
  }
  return out;
}

// ---- evaluation -----------------------------------------------------------------------------

/** String length in Unicode code points, so a bound means the same whatever the encoding. */
export function lengthOf(s: string): number {
  let n = 0;
  for (const _ of s) n++;
  return n;
}

function boundHolds(b: ArgBound, v: Scalar | undefined): boolean {
  switch (b.kind) {
    case 'max':
      return typeof v === 'number' && v <= b.value;
    case 'min':
      return typeof v === 'number' && v >= b.value;
    case 'max_length':
      return typeof v === 'string' && lengthOf(v) <= b.value;
    case 'one_of':
      return v !== undefined && b.values.some((x) => sameScalar(x, v));
  }
}

/**
 * The first `args` bound the call breaks, or null. docs/api.md: "a bounded argument that is missing from
 * the call fails its bound".
 */
export function failedArgBound(p: CanonicalPredicate, args: Readonly<Record<string, Scalar>>): string | null {
  for (const b of p.args ?? []) {
    const v = Object.hasOwn(args, b.arg) ? args[b.arg] : undefined;
    if (!boundHolds(b, v)) {
      return v === undefined ? `argument ${b.arg} is missing; bound ${describeBound(b)}` : `argument ${b.arg} violates ${describeBound(b)}`;
    }
  }
  return null;
}
