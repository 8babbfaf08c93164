/**
 * The attenuation check C_c ⪯ C_p of docs/api.md ("Attenuation rule"), returning every violation, not only the first.
 * Revocation of the parent is the store's to know; the caller adds `parent_revoked`.
 */
import { describe, isObjectWithin } from './objects.js';
import { predicateViolations } from './predicate.js';
import type { CanonicalObject, CanonicalPredicate, Right, VerifiedCapability, Violation } from './types.js';

/** No delegation tree grows deeper than this, whatever `max_depth` says. */
export const MAX_TREE_DEPTH = 32;

export interface ChildSpec {
  readonly rights: readonly Right[];
  readonly objects: readonly CanonicalObject[];
  readonly predicate: CanonicalPredicate;
  /** Expiry of the child, in seconds since the epoch. */
  readonly exp: number;
}

/** Every component in which `child` would hold more than `parent`, at time `nowMs`. */
export function checkAttenuation(parent: VerifiedCapability, child: ChildSpec, nowMs: number): Violation[] {
  const out: Violation[] = [];
  if (parent.exp * 1000 <= nowMs) {
    out.push({ component: 'parent', code: 'parent_expired', detail: `the parent expired at ${new Date(parent.exp * 1000).toISOString()}` });
  }
  // docs/api.md: "the parent is valid now". A child cut before its parent's nbf would be valid earlier.
  if (parent.nbf * 1000 > nowMs) {
    out.push({ component: 'parent', code: 'parent_invalid', detail: `the parent is valid from ${new Date(parent.nbf * 1000).toISOString()}` });
  }
  for (const r of child.rights) {
    if (!parent.rights.includes(r)) out.push({ component: 'rights', code: 'right_widened', detail: `right ${r} is not held by the parent` });
  }
  child.objects.forEach((o, i) => {
    if (!parent.objects.some((p) => isObjectWithin(o, p))) {
      out.push({ component: 'objects', code: 'object_widened', detail: `objects[${i}] (${describe(o)}) lies within no object of the parent` });
    }
  });
  out.push(...predicateViolations(child.predicate, parent.predicate));
  if (parent.depth + 1 > MAX_TREE_DEPTH && !out.some((v) => v.code === 'depth_exhausted')) {
    out.push({ component: 'predicate', code: 'depth_exhausted', detail: `delegation trees are at most ${MAX_TREE_DEPTH} deep` });
  }
  if (child.exp > parent.exp) {
    out.push({
      component: 'expiry',
      code: 'expiry_extended',
      detail: `the child would expire after the parent (${new Date(parent.exp * 1000).toISOString()})`,
    });
  }
  return out;
}

/**
 * A child's trajectory equals its parent's or extends it (`<parent>.<suffix>`), so a subagent's
 * decisions stay filed under the trajectory that delegated to it (issue 14).
 */
export function extendsTrajectory(parent: string, child: string): boolean {
  return child === parent || child.startsWith(`${parent}.`);
}
