/**
 * Human approval of tool calls (issue 17). An irreversible call (or one of a class its capability
 * names) is answered `pending` and recorded as an approval; a key with the approver role (or admin)
 * approves or rejects it; past `expires_at` unresolved it is denied `approval_expired`.
 *
 * Every change to an approval is a decision unit on its capability's delegation tree: the writer
 * holds that tree's chain-head lock (and the capability chain's row locks) across all instances, and
 * the unit locks the approval row too, so an approval is resolved once, and its grant charged once,
 * in the same transaction as the grant's audit row, however often the driver repeats and however
 * many instances answer. Each step is an audit row: asked (`approve`, `pending`), resolved
 * (`approval`, by the approver's key), and the call's outcome (`approve`, grant or deny).
 *
 * The key that asked for a call may not resolve it (403 `self_approval`, audited): a person's
 * approval must come from another key, so a driver key that also holds the approver role cannot
 * approve its own calls. The rule is per key: an admin key can create another key and approve with
 * it, so a leaked admin key still needs revoking. Approvals asked before the rule (migration 0005)
 * name no asking key and are not held to it.
 *
 * Each approval row is sealed (src/service/seal.ts) when it is asked and again when it is settled,
 * over everything in it: whoever writes the database could otherwise mark a rejected or unanswered
 * call approved with a grant as its outcome, which its driver would act on with no grant in the
 * audit, or change what an approver is shown and what the resolution is decided on. A row whose
 * seal does not hold is never shown nor resolved: 503, nothing granted.
 */
import { chainMatches, evaluateApprove, deny } from '../core/approve.js';
import { fromMicro } from '../core/money.js';
import type { CanonicalTarget, Deny, Right, Scalar, SideEffect, VerifiedCapability } from '../core/types.js';
import { newId } from '../crypto/hash.js';
import { within, type Deadline } from '../store/deadline.js';
import type { DecisionTx, Store } from '../store/store.js';
import { EARLIER_OUTCOME, findApproval, INSERT_APPROVAL, listApprovals, LOCK_APPROVAL, SETTLE_APPROVAL, type ApprovalRecord } from '../store/tools.js';
import type { AuditDraft, CallerIds, DecisionWriter } from '../store/writer.js';
import { ApiError, readAfterCommit, unavailableFrom } from './errors.js';
import type { Reply } from './authority.js';
import { asStored, type ResponseSealer } from './seal.js';
import type { Role } from './keys.js';

/** The roles that read every approval of their tenant; a driver reads those of its own calls. */
const SEES_ALL: ReadonlySet<Role> = new Set(['approver', 'auditor', 'admin']);

/** The key reading an approval over the API. */
export interface Viewer {
  readonly keyId: string;
  readonly roles: readonly Role[];
}

/** How long a call waits for a person before it is denied `approval_expired` (capped by its capability's expiry). */
export const APPROVAL_TTL_S = 900;
/** The longest long-poll of `GET /v1/approvals/{id}?wait_s=`. */
export const MAX_WAIT_S = 30;
const POLL_MS = 200;
/**
 * Long-polls one instance holds at once: each reads the database every POLL_MS, so beyond this many a
 * request with `wait_s` is answered at once, as it stands (the driver asks again).
 */
export const MAX_LONG_POLLS = 64;

/** A call by tool asked for approval, as the approve unit hands it over. */
export interface AskedCall {
  readonly cap: VerifiedCapability;
  readonly tool: { readonly name: string; readonly version: number; readonly sideEffect: SideEffect };
  readonly callId: string | null;
  readonly op: Right;
  readonly target: CanonicalTarget;
  readonly args: Readonly<Record<string, unknown>>;
  readonly cost: bigint;
  /** The API key (public id) that asked: it may not resolve the approval itself. */
  readonly requestedBy: string | null;
}

const iso = (d: Date): string => d.toISOString();

/** What an approval row's seal covers: every column but the seal, as read back from the database. */
export function approvalParts(r: Omit<ApprovalRecord, 'seal'>): unknown[] {
  return [
    r.id,
    r.tenantId,
    r.capabilityId,
    r.trajectoryId,
    r.tool,
    Number(r.toolVersion),
    r.sideEffect,
    r.callId,
    r.op,
    r.target,
    r.args,
    BigInt(r.cost).toString(),
    r.claims,
    r.state,
    iso(r.createdAt),
    iso(r.expiresAt),
    r.resolvedAt === null ? null : iso(r.resolvedAt),
    r.resolvedBy,
    r.note,
    r.outcome ?? null,
    r.requestedBy,
  ];
}

/** A read found the row changed: this request decided nothing (after its own write, `readAfterCommit` says `unknown`). */
const unsealed = (): ApiError =>
  new ApiError(
    503,
    'unavailable',
    'the approval record does not hold its seal (changed in the database, or sealed under a retired signing key); nothing is granted',
    {
      outcome: 'not_committed',
    },
  );

/** The approve answer to a call waiting for a person. */
export function pendingBody(approvalId: string, expiresAt: Date, capabilityId: string, auditId: string): Record<string, unknown> {
  return {
    decision: 'pending',
    reason: null,
    approval_id: approvalId,
    expires_at: iso(expiresAt),
    capability_id: capabilityId,
    audit_id: auditId,
    budget_remaining: null,
    calls_remaining: null,
  };
}

/** An approval as the API shows it. */
export function approvalBody(r: ApprovalRecord): Record<string, unknown> {
  return {
    approval_id: r.id,
    state: r.state,
    tool: r.tool,
    tool_version: r.toolVersion,
    side_effect: r.sideEffect,
    capability_id: r.capabilityId,
    trajectory_id: r.trajectoryId,
    call_id: r.callId,
    op: r.op,
    target: r.target,
    args: r.args,
    cost: fromMicro(BigInt(r.cost)),
    requested_by: r.requestedBy,
    created_at: iso(r.createdAt),
    expires_at: iso(r.expiresAt),
    resolved_at: r.resolvedAt === null ? null : iso(r.resolvedAt),
    resolved_by: r.resolvedBy,
    note: r.note,
    outcome: r.outcome ?? null,
  };
}

/** Inserts the approval row of a call asked now, sealed; returns its id and expiry. Runs inside the approve unit. */
export async function askApproval(
  tx: DecisionTx,
  tenantId: string,
  call: AskedCall,
  now: Date,
  sealer: ResponseSealer,
): Promise<{ id: string; expiresAt: Date }> {
  const id = newId('apv');
  const expiresAt = new Date(Math.min(now.getTime() + APPROVAL_TTL_S * 1000, call.cap.exp * 1000));
  const record: Omit<ApprovalRecord, 'seal'> = {
    id,
    tenantId,
    capabilityId: call.cap.id,
    trajectoryId: call.cap.trajectory,
    tool: call.tool.name,
    toolVersion: call.tool.version,
    sideEffect: call.tool.sideEffect,
    callId: call.callId,
    op: call.op,
    target: asStored(call.target),
    args: asStored(call.args),
    cost: call.cost.toString(),
    claims: asStored(call.cap),
    state: 'pending',
    createdAt: now,
    expiresAt,
    resolvedAt: null,
    resolvedBy: null,
    note: null,
    outcome: null,
    requestedBy: call.requestedBy,
  };
  await tx.query(INSERT_APPROVAL, [
    id,
    tenantId,
    call.cap.id,
    call.cap.trajectory,
    call.tool.name,
    String(call.tool.version),
    call.tool.sideEffect,
    call.callId,
    call.op,
    JSON.stringify(call.target),
    JSON.stringify(call.args),
    call.cost.toString(),
    JSON.stringify(call.cap),
    iso(now),
    iso(expiresAt),
    call.requestedBy,
    sealer.sealOf('approval', approvalParts(record)),
  ]);
  return { id, expiresAt };
}

type Resolution = 'approve' | 'reject';
const STATE_OF: Record<Resolution, ApprovalRecord['state']> = { approve: 'approved', reject: 'rejected' };

export class Approvals {
  /** Long-polls waiting now (see MAX_LONG_POLLS). */
  private polling = 0;

  /** Long-polls waiting now, at most MAX_LONG_POLLS (the gauge `warrant_approvals_long_polls`). */
  get waiting(): number {
    return this.polling;
  }

  constructor(
    private readonly store: Store,
    private readonly writer: DecisionWriter,
    private readonly now: () => Date,
    readonly sealing: () => Promise<ResponseSealer>,
  ) {}

  /** The approval, read within `deadline` when there is one (a stalled database never answers a read). */
  private async find(tenantId: string, id: string, deadline: Deadline | undefined): Promise<ApprovalRecord> {
    const read = findApproval(this.store.db, tenantId, id);
    const r = await (deadline === undefined ? read : within(deadline, read));
    if (r === null) throw new ApiError(404, 'not_found', 'no such approval');
    await this.check(r);
    return r;
  }

  /** Refuses (503) a row whose seal does not hold. */
  private async check(r: ApprovalRecord): Promise<void> {
    if (!(await this.sealing()).holdsOf('approval', approvalParts(r), r.seal)) throw unsealed();
  }

  /**
   * Approves or rejects a pending call (an approver's or admin's key other than the one that asked
   * for it: 403 `self_approval` otherwise). Approving decides the call as approve would now (the
   * capability may have been revoked or spent meanwhile) and charges it. Repeating the same
   * resolution answers the approval as it stands; another one is 409.
   */
  async resolve(
    tenantId: string,
    id: string,
    how: { decision: Resolution; note?: string },
    caller: CallerIds | undefined,
    deadline?: Deadline,
  ): Promise<Reply> {
    const r = await this.guard(() => this.find(tenantId, id, deadline));
    // requested_by is written once, with the row, so reading it outside the unit's lock is enough.
    if (r.requestedBy !== null && caller?.keyId === r.requestedBy) throw await this.refuseSelf(r, how.decision, caller, deadline);
    if (r.state === 'pending' && r.expiresAt.getTime() <= this.now().getTime()) await this.settle(r, null, caller, deadline);
    else if (r.state === 'pending') await this.settle(r, how, caller, deadline);
    // Once settled here, the resolution may have committed: a failure reading it back is not `not_committed`.
    const after =
      r.state === 'pending' ? await readAfterCommit(() => this.find(tenantId, id, deadline)) : await this.guard(() => this.find(tenantId, id, deadline));
    if (after.state !== STATE_OF[how.decision]) throw new ApiError(409, 'approval_resolved', `the approval is already ${after.state}`, { state: after.state });
    return { status: 200, body: approvalBody(after) };
  }

  /**
   * The approval, expired first when its time has passed; with `waitS`, held until it is resolved,
   * expires, or `waitS` seconds pass (a bounded long-poll), reading the database every 200 ms.
   */
  /**
   * An approval, long-polled for up to `waitS`. `viewer`: the key reading it over the API. A key that
   * reads approvals only as a driver sees the approval of a call it asked for itself, no other (404
   * as for an unknown id): a call's args may be another driver's business. Approvers and auditors
   * see them all; so does the replay of a repeated call_id (no viewer).
   */
  async view(tenantId: string, id: string, waitS = 0, options: { signal?: AbortSignal; viewer?: Viewer; deadline?: Deadline } = {}): Promise<Reply> {
    const { deadline } = options;
    const waits = waitS > 0 && this.polling < MAX_LONG_POLLS;
    const until = waits ? Date.now() + Math.min(waitS, MAX_WAIT_S) * 1000 : 0;
    if (waits) this.polling++;
    try {
      for (;;) {
        let r = await this.guard(() => this.find(tenantId, id, deadline));
        const { viewer } = options;
        // Calls asked before requested_by was kept (null) are not checked, as for self-approval.
        if (viewer !== undefined && !viewer.roles.some((role) => SEES_ALL.has(role)) && r.requestedBy !== null && r.requestedBy !== viewer.keyId)
          throw new ApiError(404, 'not_found', 'no such approval');
        if (r.state === 'pending' && r.expiresAt.getTime() <= this.now().getTime()) {
          // The expiry is a decision of its own: bounded by the same deadline, and once it may have
          // committed, a failure reading the approval back is not `not_committed`.
          await this.settle(r, null, undefined, deadline);
          r = await readAfterCommit(() => this.find(tenantId, id, deadline));
        }
        // A caller that went away is not polled for.
        if (r.state !== 'pending' || Date.now() + POLL_MS > until || options.signal?.aborted === true) return { status: 200, body: approvalBody(r) };
        await new Promise((done) => setTimeout(done, POLL_MS));
      }
    } finally {
      if (waits) this.polling--;
    }
  }

  /** The answer to a repeated approve whose first answer was `pending`: the outcome once there is one. */
  async outcomeOf(tenantId: string, id: string, pending: Record<string, unknown>, deadline?: Deadline): Promise<Record<string, unknown>> {
    const view = (await this.view(tenantId, id, 0, deadline === undefined ? {} : { deadline })).body as { outcome: Record<string, unknown> | null };
    return view.outcome ?? pending;
  }

  async list(tenantId: string, state: ApprovalRecord['state'], limit: number): Promise<Reply> {
    const rows = await this.guard(() => listApprovals(this.store.db, tenantId, state, limit));
    // A row whose seal fails is left out, not allowed to close the whole queue (rows from before
    // seals, or one changed in the database); read alone, it is a 503.
    const sealer = await this.sealing();
    const sealed = rows.filter((r) => sealer.holdsOf('approval', approvalParts(r), r.seal));
    return { status: 200, body: { approvals: sealed.map(approvalBody) } };
  }

  /**
   * One unit on the capability's tree: lock the approval; if it is still pending, resolve it (`how`)
   * or expire it (`how` null, or its time has passed by the unit's clock), write the audit rows, and
   * charge a grant. A unit that finds it settled (another instance, a repeat) changes nothing.
   */
  private async settle(
    r: ApprovalRecord,
    how: { decision: Resolution; note?: string } | null,
    caller: CallerIds | undefined,
    deadline?: Deadline,
  ): Promise<void> {
    const cap = r.claims as VerifiedCapability;
    const sealer = await this.sealing();
    const reopened = await this.guard(() =>
      this.writer.submit<string | null>(
        {
          tenantId: r.tenantId,
          fence: null,
          chainOf: r.capabilityId,
          ...(caller === undefined ? {} : { caller }),
          run: async (tx, now) => {
            const [locked] = await tx.query(LOCK_APPROVAL, [r.tenantId, r.id]);
            if (locked === undefined || locked.state !== 'pending') return { result: null, audit: null };
            // A pending row whose call already has its outcome in the audit was put back (its sealed
            // pending copy restored): settling it again would grant and charge a second time.
            const [earlier] = await tx.query(EARLIER_OUTCOME, [r.tenantId, r.id]);
            if (earlier !== undefined) return { result: String(earlier.id), audit: null };
            const lapsed = new Date(locked.expires_at as string).getTime() <= now.getTime();
            const expired = how === null || lapsed;
            const base = {
              capabilityId: r.capabilityId,
              parentId: cap.parent,
              trajectoryId: r.trajectoryId,
              op: r.op,
              target: r.target,
              cost: BigInt(r.cost),
              callId: r.callId,
            };
            const about = { approval_id: r.id, tool: r.tool, tool_version: r.toolVersion };
            const rows: AuditDraft[] = [];
            let outcome: Record<string, unknown>;
            let state: ApprovalRecord['state'];
            if (how === null || lapsed) {
              state = 'expired';
              const d = deny('approval_expired', `no one approved the call by ${iso(r.expiresAt)}`);
              const auditId = newId('aud');
              rows.push({ id: auditId, event: 'approve', decision: 'deny', reasonCode: d.code, ...base, detail: { ...about, message: d.message } });
              outcome = denyBody(d, r.capabilityId, auditId);
            } else if (how.decision === 'reject') {
              state = 'rejected';
              const d = deny('approval_rejected', how.note === undefined ? 'an approver rejected the call' : `an approver rejected the call: ${how.note}`);
              rows.push(resolutionRow(base, about, 'deny', how.note));
              const auditId = newId('aud');
              rows.push({ id: auditId, event: 'approve', decision: 'deny', reasonCode: d.code, ...base, detail: { ...about, message: d.message } });
              outcome = denyBody(d, r.capabilityId, auditId);
            } else {
              state = 'approved';
              rows.push(resolutionRow(base, about, 'grant', how.note));
              const chain = await tx.lockChain(r.tenantId, r.capabilityId);
              const req = {
                op: r.op as Right,
                target: r.target as CanonicalTarget,
                cost: BigInt(r.cost),
                args: r.args as Record<string, Scalar>,
                tool: { name: r.tool, sideEffect: r.sideEffect as SideEffect },
              };
              // As approve does: a stored chain that is not the token's (its ancestors rewritten) decides nothing.
              const d = chainMatches(cap, chain)
                ? evaluateApprove(cap, req, now.getTime(), chain)
                : deny('bad_token', "the capability's stored chain does not match its token");
              const auditId = newId('aud');
              if (d.decision === 'grant') {
                // Charged here, in the transaction that writes the grant's row, and only here: the row lock above makes it once.
                await tx.charge(
                  chain.map((l) => l.id),
                  req.cost,
                );
                outcome = {
                  decision: 'grant',
                  reason: null,
                  capability_id: r.capabilityId,
                  audit_id: auditId,
                  budget_remaining: d.budgetRemaining === null ? null : fromMicro(d.budgetRemaining),
                  calls_remaining: d.callsRemaining,
                  approval_id: r.id,
                };
                rows.push({ id: auditId, event: 'approve', decision: 'grant', reasonCode: null, ...base, detail: about });
              } else {
                outcome = denyBody(d, r.capabilityId, auditId, r.id);
                rows.push({ id: auditId, event: 'approve', decision: 'deny', reasonCode: d.code, ...base, detail: { ...about, message: d.message } });
              }
            }
            outcome = { ...outcome, approval_id: r.id, decided_at: iso(now) };
            const settled = {
              ...r,
              state,
              resolvedAt: now,
              resolvedBy: expired ? null : (caller?.keyId ?? null),
              note: expired ? null : (how.note ?? null),
              outcome: asStored(outcome),
            };
            await tx.query(SETTLE_APPROVAL, [
              r.tenantId,
              r.id,
              state,
              iso(now),
              settled.resolvedBy,
              settled.note,
              JSON.stringify(outcome),
              sealer.sealOf('approval', approvalParts(settled)),
            ]);
            return { result: null, audit: rows };
          },
        },
        deadline,
      ),
    );
    if (reopened !== null)
      throw new ApiError(
        503,
        'unavailable',
        `the approval was settled already (audit row ${reopened}) but its row says pending: it was changed in the database; nothing is granted`,
        // The unit found the earlier outcome and wrote nothing.
        { outcome: 'not_committed' },
      );
  }

  /** Audits a resolution by the key that asked for the call (on its capability's tree), then returns the 403 to throw. */
  private async refuseSelf(r: ApprovalRecord, decision: Resolution, caller: CallerIds, deadline?: Deadline): Promise<ApiError> {
    const audit: AuditDraft = {
      id: newId('aud'),
      event: 'approval',
      decision: 'deny',
      reasonCode: 'self_approval',
      capabilityId: r.capabilityId,
      parentId: (r.claims as VerifiedCapability).parent,
      trajectoryId: r.trajectoryId,
      op: r.op,
      target: r.target,
      cost: BigInt(r.cost),
      callId: r.callId,
      detail: { approval_id: r.id, tool: r.tool, tool_version: r.toolVersion, resolution: decision === 'approve' ? 'approved' : 'rejected' },
    };
    await this.guard(() =>
      this.writer.submit({ tenantId: r.tenantId, fence: null, chainOf: r.capabilityId, caller, run: async () => ({ result: null, audit }) }, deadline),
    );
    return new ApiError(403, 'self_approval', 'the API key that asked for this call may not resolve it: another approver must');
  }

  private async guard<R>(f: () => Promise<R>): Promise<R> {
    try {
      return await f();
    } catch (e) {
      if (e instanceof ApiError) throw e;
      throw unavailableFrom(e);
    }
  }
}

function denyBody(d: Deny, capabilityId: string, auditId: string, approvalId?: string): Record<string, unknown> {
  return {
    decision: 'deny',
    reason: { code: d.code, message: d.message },
    capability_id: capabilityId,
    audit_id: auditId,
    budget_remaining: null,
    calls_remaining: null,
    ...(approvalId === undefined ? {} : { approval_id: approvalId }),
  };
}

/** The row of a person's resolution: `approval`, granted (approved) or denied (rejected), by the unit's caller key. */
function resolutionRow(
  base: Omit<AuditDraft, 'id' | 'event' | 'decision' | 'reasonCode' | 'detail'>,
  about: Record<string, unknown>,
  decision: 'grant' | 'deny',
  note: string | undefined,
): AuditDraft {
  return {
    id: newId('aud'),
    event: 'approval',
    decision,
    reasonCode: decision === 'deny' ? 'approval_rejected' : null,
    ...base,
    detail: { ...about, resolution: decision === 'grant' ? 'approved' : 'rejected', ...(note === undefined ? {} : { note }) },
  };
}
