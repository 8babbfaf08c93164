/**
 * The approve use case (docs/api.md "POST /v1/approve"): a call is decided against the verified token
 * and the stored state of its chain, under its `call_id` when given, and answered only once its
 * audit row has committed. Moved out of authority.ts (STYLE: rooms that stay small).
 */
import { checkValidity, deny, evaluateApprove, remainingOf, type ApproveRequest } from '../core/approve.js';
import { fromMicro, toMicro } from '../core/money.js';
import { canonicalTarget } from '../core/objects.js';
import type { ApproveBody } from '../core/schemas.js';
import type { Deny, VerifiedCapability } from '../core/types.js';
import { hashJson, newId } from '../crypto/hash.js';
import type { Fence } from '../store/idempotency.js';
import type { DecisionUnit } from '../store/writer.js';
import { approveDetail, dryRunDetail, replayedApproval } from './approve-record.js';
import type { Authority, Reply, RequestContext } from './authority.js';
import { invalidRequest, type FieldError } from './errors.js';

/** What approving borrows from the Authority: its token cache, idempotency, failure guard and writer. */
export type DecisionKit = Pick<Authority, 'tokens' | 'idempotent' | 'guard' | 'submitAs'>;

export class Approver {
  constructor(private readonly kit: DecisionKit) {}

  async approve(tenantId: string, body: ApproveBody, ctx: RequestContext = {}): Promise<Reply> {
    const { caller, deadline } = ctx;
    const errors: FieldError[] = [];
    const target = canonicalTarget(body.target);
    if (!target.ok)
      errors.push({ path: `target.${body.target.kind === 'url' ? 'url' : body.target.kind === 'path' ? 'path' : 'name'}`, message: target.error });
    const cost = toMicro(body.cost);
    if (!cost.ok) errors.push({ path: 'cost', message: cost.error });
    if (!target.ok || !cost.ok) throw invalidRequest(errors);
    const req: Call = {
      op: body.op,
      target: target.value,
      cost: cost.value,
      args: body.args ?? {},
      requested: body.target,
      dryRun: body.dry_run === true,
    };
    // A dry run never claims its call_id: it must neither take the place of the real call nor be answered by its replay.
    const callId = body.call_id ?? null;
    const idemKey = callId === null || req.dryRun ? undefined : callId;

    const verified = await this.kit.tokens.verify(body.token);
    if (!verified.ok) {
      const d = deny(verified.code, verified.message);
      return this.reply(await this.kit.guard(() => this.kit.submitAs(caller, this.unit(tenantId, null, null, req, callId, d), deadline)));
    }
    const cap = verified.capability;
    if (cap.tenant !== tenantId) {
      const d = deny('tenant_mismatch', 'the capability belongs to another tenant');
      return this.reply(await this.kit.guard(() => this.kit.submitAs(caller, this.unit(tenantId, null, null, req, callId, d), deadline)));
    }
    // Hashed only when a call_id asks for idempotency: it is on every approval's path otherwise.
    const requestHash = idemKey === undefined ? undefined : hashJson({ op: req.op, target: req.target, cost: req.cost.toString(), args: req.args });
    const outcome = await this.kit.idempotent(
      { tenantId, scope: 'approve', key: idemKey === undefined ? undefined : `${cap.id}:${idemKey}` },
      requestHash,
      (fence) => this.kit.submitAs(caller, this.unit(tenantId, fence, cap, req, callId, null), deadline),
      deadline,
    );
    return 'replay' in outcome ? replayedApproval(outcome.replay) : this.reply(outcome.result);
  }

  private unit(
    tenantId: string,
    fence: Fence | null,
    cap: VerifiedCapability | null,
    req: Call,
    callId: string | null,
    preDenied: Deny | null,
  ): DecisionUnit<ApproveResult> {
    return {
      tenantId,
      fence,
      ...(cap !== null && preDenied === null ? { chainOf: cap.id } : {}),
      run: async (tx, now) => {
        let decision: ApproveResult['decision'] = preDenied ?? deny('bad_token', 'no capability');
        let remaining: { budgetRemaining: bigint | null; callsRemaining: number | null } = { budgetRemaining: null, callsRemaining: null };
        if (cap !== null && preDenied === null) {
          const invalid = checkValidity(cap, now.getTime());
          const chain = invalid === null ? await tx.lockChain(tenantId, cap.id) : [];
          if (invalid !== null) decision = invalid;
          else if (chain[chain.length - 1]?.id !== cap.id) decision = deny('bad_token', 'the capability is not known to this authority');
          else {
            const d = evaluateApprove(cap, req, now.getTime(), chain);
            decision = d;
            if (d.decision === 'grant') {
              // A dry run answers what the call would leave (remaining after it) and charges nothing.
              if (!req.dryRun)
                await tx.charge(
                  chain.map((l) => l.id),
                  req.cost,
                );
              remaining = { budgetRemaining: d.budgetRemaining, callsRemaining: d.callsRemaining };
            } else remaining = remainingOf(chain);
          }
        }
        const auditId = newId('aud');
        const result: ApproveResult = { decision, remaining, auditId, capabilityId: cap?.id ?? null, dryRun: req.dryRun };
        return {
          result,
          // Stored on the idempotency record only; without a call_id nothing would read it.
          ...(fence === null ? {} : { response: { status: 200, body: { ...approveBody(result), decided_at: now.toISOString() } } }),
          audit: {
            id: auditId,
            event: 'approve',
            decision: decision.decision,
            reasonCode: decision.decision === 'deny' ? decision.code : null,
            capabilityId: cap?.id ?? null,
            parentId: cap?.parent ?? null,
            trajectoryId: cap?.trajectory ?? null,
            op: req.op,
            target: req.target,
            cost: req.cost,
            // A dry run's row keeps its call_id in detail only: looking a call_id up must find real decisions alone.
            callId: req.dryRun ? null : callId,
            detail: {
              ...approveDetail(req, decision.decision === 'deny' ? decision.message : null),
              ...(req.dryRun ? dryRunDetail(callId) : {}),
            },
          },
        };
      },
    };
  }

  private reply(r: ApproveResult): Reply {
    return { status: 200, body: approveBody(r) };
  }
}

/** A call to decide, as validated; `requested` is the target as sent, for the audit row. */
interface Call extends ApproveRequest {
  readonly requested: ApproveBody['target'];
  /** Decide and audit, but charge nothing and claim no call_id (issue 16). */
  readonly dryRun: boolean;
}

interface ApproveResult {
  readonly decision: Deny | { decision: 'grant' };
  readonly remaining: { budgetRemaining: bigint | null; callsRemaining: number | null };
  readonly auditId: string;
  readonly capabilityId: string | null;
  readonly dryRun: boolean;
}

function approveBody(r: ApproveResult): Record<string, unknown> {
  return {
    decision: r.decision.decision,
    reason: r.decision.decision === 'deny' ? { code: r.decision.code, message: r.decision.message } : null,
    capability_id: r.capabilityId,
    audit_id: r.auditId,
    budget_remaining: r.remaining.budgetRemaining === null ? null : fromMicro(r.remaining.budgetRemaining),
    calls_remaining: r.remaining.callsRemaining,
    ...(r.dryRun ? { dry_run: true } : {}),
  };
}
