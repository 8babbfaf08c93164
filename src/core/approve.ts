/**
 * approve(op, target, cost) of docs/api.md ("Approval rule") as a pure function of a verified capability, the request,
 * the time and the stored state of the capability's chain (itself and every ancestor).
 */
import { fromMicro } from './money.js';
import { describe, isWithin } from './objects.js';
import { failedArgBound, microOf } from './predicate.js';
import type { CanonicalTarget, Deny, DenyCode, Right, Scalar, SideEffect, VerifiedCapability } from './types.js';

export interface ApproveRequest {
  readonly op: Right;
  readonly target: CanonicalTarget;
  /** Cost of this call in micro-units. */
  readonly cost: bigint;
  readonly args: Readonly<Record<string, Scalar>>;
  /** The registered tool of a call by tool (issue 17); absent for a call by op. */
  readonly tool?: { readonly name: string; readonly sideEffect: SideEffect };
}

/** Stored state of one capability of the chain, as read under lock in the deciding transaction. */
export interface ChainLink {
  readonly id: string;
  readonly revoked: boolean;
  readonly budget: bigint | null;
  readonly spent: bigint;
  readonly maxCalls: number | null;
  readonly calls: number;
}

export interface Grant {
  readonly decision: 'grant';
  /** Least budget left over the chain after this call, in micro-units; null when none is set. */
  readonly budgetRemaining: bigint | null;
  readonly callsRemaining: number | null;
}

export const deny = (code: DenyCode, message: string): Deny => ({ decision: 'deny', code, message });

/**
 * Checks that need only the token and the clock. Order of precedence for every deny code:
 * expired, not_yet_valid, revoked, tool_not_allowed, right_missing, object_outside, cost_exceeds_max,
 * arg_violates_bound, budget_exhausted, calls_exhausted.
 */
export function checkValidity(cap: VerifiedCapability, nowMs: number): Deny | null {
  if (cap.exp * 1000 <= nowMs) return deny('expired', `the capability expired at ${new Date(cap.exp * 1000).toISOString()}`);
  if (cap.nbf * 1000 > nowMs) return deny('not_yet_valid', `the capability is valid from ${new Date(cap.nbf * 1000).toISOString()}`);
  return null;
}

function checkRequest(cap: VerifiedCapability, req: ApproveRequest): Deny | null {
  const tools = cap.predicate.tools;
  if (tools !== undefined && (req.tool === undefined || !tools.includes(req.tool.name)))
    return deny(
      'tool_not_allowed',
      req.tool === undefined
        ? `the capability covers only the tools ${JSON.stringify(tools)}: approve by tool`
        : `tool ${req.tool.name} is not among ${JSON.stringify(tools)}`,
    );
  // A call by op has no side-effect class, so a class that needs approval could not hold it: a
  // capability that names one takes calls by tool only (else a holder would skip the approval, and a
  // child's inherited requirement would bind nothing).
  const classes = cap.predicate.approval_required ?? [];
  if (req.tool === undefined && classes.length > 0)
    return deny('tool_not_allowed', `the capability requires approval for ${classes.join(', ')} calls: approve by tool`);
  if (!cap.rights.includes(req.op)) return deny('right_missing', `right ${req.op} is not granted`);
  if (!cap.objects.some((o) => isWithin(req.target, o))) return deny('object_outside', `${describe(req.target)} lies within no object of the capability`);
  const max = cap.predicate.max_cost;
  if (max !== undefined && req.cost > microOf(max)) return deny('cost_exceeds_max', `cost ${fromMicro(req.cost)} exceeds max_cost ${max}`);
  const failed = failedArgBound(cap.predicate, req.args);
  return failed === null ? null : deny('arg_violates_bound', failed);
}

/** Cumulative bounds: the call must fit the budget and call count of every link of the chain. */
function checkChain(chain: readonly ChainLink[], cost: bigint): Deny | Grant {
  let budgetRemaining: bigint | null = null;
  let callsRemaining: number | null = null;
  for (const link of chain) {
    if (link.budget !== null) {
      const left = link.budget - link.spent - cost;
      if (left < 0n) return deny('budget_exhausted', `the call would exceed the budget of capability ${link.id}`);
      budgetRemaining = budgetRemaining === null || left < budgetRemaining ? left : budgetRemaining;
    }
  }
  // A second pass, so that budget_exhausted wins over calls_exhausted whichever link breaks which.
  for (const link of chain) {
    if (link.maxCalls !== null) {
      const left = link.maxCalls - link.calls - 1;
      if (left < 0) return deny('calls_exhausted', `the call would exceed max_calls of capability ${link.id}`);
      callsRemaining = callsRemaining === null || left < callsRemaining ? left : callsRemaining;
    }
  }
  return { decision: 'grant', budgetRemaining, callsRemaining };
}

/**
 * Whether `chain` (root first, as the store found it) is the chain the signed token names: as long as
 * its depth, ending in the capability under its parent. The store's `ancestors` decide which rows are
 * locked, charged and checked for revocation, and the tree the audit row joins: a database writer who
 * rewrote them could otherwise skip a revoked ancestor.
 */
export function chainMatches(
  cap: { readonly id: string; readonly parent: string | null; readonly depth: number },
  chain: readonly { readonly id: string }[],
): boolean {
  return (
    chain.length === cap.depth + 1 &&
    chain[chain.length - 1]?.id === cap.id &&
    (cap.parent === null ? chain.length === 1 : chain[chain.length - 2]?.id === cap.parent)
  );
}

/** The decision for one call. `chain` holds the capability and all its ancestors. */
export function evaluateApprove(cap: VerifiedCapability, req: ApproveRequest, nowMs: number, chain: readonly ChainLink[]): Deny | Grant {
  const invalid = checkValidity(cap, nowMs);
  if (invalid !== null) return invalid;
  const revoked = chain.find((l) => l.revoked);
  if (revoked !== undefined) return deny('revoked', revoked.id === cap.id ? 'the capability is revoked' : `ancestor ${revoked.id} is revoked`);
  return checkRequest(cap, req) ?? checkChain(chain, req.cost);
}

/**
 * Whether a call by tool must wait for a person's approval (issue 17): irreversible calls always,
 * and calls of any class the capability's predicate names in `approval_required`.
 */
export function needsApproval(cap: VerifiedCapability, sideEffect: SideEffect): boolean {
  return sideEffect === 'irreversible' || (cap.predicate.approval_required ?? []).includes(sideEffect);
}

/** Budget and calls left over the chain without charging anything (for denials). */
export function remainingOf(chain: readonly ChainLink[]): { budgetRemaining: bigint | null; callsRemaining: number | null } {
  let budgetRemaining: bigint | null = null;
  let callsRemaining: number | null = null;
  for (const link of chain) {
    if (link.budget !== null) {
      const left = link.budget > link.spent ? link.budget - link.spent : 0n;
      budgetRemaining = budgetRemaining === null || left < budgetRemaining ? left : budgetRemaining;
    }
    if (link.maxCalls !== null) {
      const left = Math.max(0, link.maxCalls - link.calls);
      callsRemaining = callsRemaining === null || left < callsRemaining ? left : callsRemaining;
    }
  }
  return { budgetRemaining, callsRemaining };
}
