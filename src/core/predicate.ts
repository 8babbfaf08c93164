/**
 * The predicate P: canonicalization, implication (attenuation) and evaluation (approve).
 * docs/api.md: every field optional, all must hold; `budget` and `max_calls` are cumulative over a
 * capability and all its descendants, which the store enforces; here are the per-call bounds.
 */
import { toMicro } from './money.js';
import {
  ok,
  SIDE_EFFECTS,
  type ArgBound,
  type Canonical,
  type CanonicalPredicate,
  type RawPredicate,
  type Result,
  type Scalar,
  type Violation,
} from './types.js';

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
  // Sets: duplicates dropped; tools in the order given, classes in SIDE_EFFECTS order.
  if (p.tools !== undefined) out.tools = [...new Set(p.tools)];
  if (p.approval_required !== undefined && p.approval_required.length > 0) out.approval_required = SIDE_EFFECTS.filter((c) => p.approval_required?.includes(c));
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

type PredicateField = keyof RawPredicate;

/** A widened bound, naming its field in `field` and at the head of `detail`. */
function widened(field: PredicateField, detail: string): Violation {
  return { component: 'predicate', code: 'predicate_widened', field: `predicate.${field}`, detail: `predicate.${field}: ${detail}` };
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
    if (c === undefined) out.push(widened(field, `the parent sets ${p}; the child must set at most that`));
    else if (microOf(c) > microOf(p)) out.push(widened(field, `${c} exceeds the parent's ${p}`));
  }
  if (parent.max_calls !== undefined) {
    const c = child.max_calls;
    if (c === undefined) out.push(widened('max_calls', `the parent sets ${parent.max_calls}; the child must set at most that`));
    else if (c > parent.max_calls) out.push(widened('max_calls', `${c} exceeds the parent's ${parent.max_calls}`));
  }
  if (parent.max_depth === 0) {
    out.push({
      component: 'predicate',
      code: 'depth_exhausted',
      field: 'predicate.max_depth',
      detail: 'predicate.max_depth: the parent may not be attenuated (max_depth 0)',
    });
  } else if (parent.max_depth !== undefined) {
    const c = child.max_depth;
    if (c === undefined || c >= parent.max_depth) out.push(widened('max_depth', `the child must set less than the parent's ${parent.max_depth}`));
  }
  for (const bound of parent.args ?? []) {
    if (!(child.args ?? []).some((c) => boundImplies(c, bound))) {
      out.push(widened('args', `no bound of the child on argument ${bound.arg} implies the parent's ${describeBound(bound)}`));
    }
  }
  // issue 17: a tool allow-list can only narrow; approval requirements can only be added.
  if (parent.tools !== undefined) {
    if (child.tools === undefined) out.push(widened('tools', `the parent covers only ${JSON.stringify(parent.tools)}; the child must list a subset`));
    else {
      const extra = child.tools.filter((t) => !parent.tools?.includes(t));
      if (extra.length > 0) out.push(widened('tools', `${JSON.stringify(extra)} not covered by the parent`));
    }
  }
  const dropped = (parent.approval_required ?? []).filter((c) => !(child.approval_required ?? []).includes(c));
  if (dropped.length > 0) out.push(widened('approval_required', `the child would drop the parent's approval requirement for ${dropped.join(', ')}`));
  return out;
}

// ---- inheritance ----------------------------------------------------------------------------

/**
 * The child's effective predicate (issue 16): each field the request omits (`given`) takes the
 * parent's bound, so a spawner writes only what it narrows. `max_depth` inherits one less than the
 * parent's, the most a child may hold; `args` is one field, inherited only when omitted as a whole.
 * A field the request gives is kept as given, so a looser one is still refused by
 * `predicateViolations`.
 */
export function inheritPredicate(given: RawPredicate, child: CanonicalPredicate, parent: CanonicalPredicate): CanonicalPredicate {
  const pick = <K extends PredicateField>(field: K): RawPredicate[K] => (given[field] === undefined ? parent[field] : child[field]);
  const depth = given.max_depth === undefined && parent.max_depth !== undefined && parent.max_depth > 0 ? parent.max_depth - 1 : child.max_depth;
  // In canonicalPredicate's field order, so equal predicates serialize alike; absent fields left out.
  const out = {
    max_cost: pick('max_cost'),
    budget: pick('budget'),
    max_calls: pick('max_calls'),
    max_depth: depth,
    args: pick('args'),
    tools: pick('tools'),
    approval_required: pick('approval_required'),
  };
  return Object.fromEntries(Object.entries(out).filter(([, v]) => v !== undefined)) as RawPredicate as CanonicalPredicate;
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
