/**
 * The approve use case (docs/api.md "POST /v1/approve"): a call is decided against the verified token
 * and the stored state of its chain, under its `call_id` when given, and answered only once its
 * audit row has committed. Moved out of authority.ts (STYLE: rooms that stay small).
 */
import { chainMatches, checkValidity, deny, evaluateApprove, needsApproval, remainingOf, type ApproveRequest } from '../core/approve.js';
import { fromMicro, toMicro } from '../core/money.js';
import { canonicalTarget } from '../core/objects.js';
import { Args, type ApproveBody } from '../core/schemas.js';
import { unstorableIn } from '../core/storable.js';
import type { ArgError } from '../core/tool-args.js';
import { atPointer } from '../core/tool-schema.js';
import type { CanonicalTarget, Deny, RawTarget, Right, Scalar, SideEffect, VerifiedCapability } from '../core/types.js';
import { hashJson, newId } from '../crypto/hash.js';
import type { Deadline } from '../store/deadline.js';
import type { Fence, StoredResponse } from '../store/idempotency.js';
import type { DecisionUnit } from '../store/writer.js';
import { approveDetail, dryRunDetail, replayedApproval } from './approve-record.js';
import { askApproval, pendingBody } from './approvals.js';
import type { Authority, Reply, RequestContext } from './authority.js';
import { invalidRequest, type FieldError } from './errors.js';

/** What approving borrows from the Authority: its token cache, idempotency (and recorded answers), failure guard, writer, tools and approvals. */
export type DecisionKit = Pick<Authority, 'tokens' | 'idempotent' | 'recorded' | 'guard' | 'submitAs' | 'tools' | 'approvals'>;

/** The deepest a call by tool's args may nest: its schema's checks, hashing and audit walk them. */
export const MAX_ARGS_DEPTH = 32;

/** The target of a call by tool: the args' value at the tool's pointer, as an object of its kind. */
function toolTarget(kind: 'path' | 'host' | 'repo' | 'url', value: string): RawTarget {
  return kind === 'path' ? { kind, path: value } : kind === 'url' ? { kind, url: value } : { kind, name: value };
}

export class Approver {
  constructor(private readonly kit: DecisionKit) {}

  async approve(tenantId: string, body: ApproveBody, ctx: RequestContext = {}): Promise<Reply> {
    const errors: FieldError[] = [];
    const cost = toMicro(body.cost);
    if (!cost.ok) errors.push({ path: 'cost', message: cost.error });
    if (body.tool !== undefined) {
      for (const f of ['op', 'target'] as const) if (body[f] !== undefined) errors.push({ path: f, message: 'not with tool: the tool decides it' });
      // Stored in the audit row's jsonb detail: keys too, and no deeper than MAX_ARGS_DEPTH.
      unstorableIn(body.args ?? {}, 'args', errors, MAX_ARGS_DEPTH);
      if (errors.length > 0 || !cost.ok) throw invalidRequest(errors);
      return this.approveByTool(tenantId, body, body.tool, cost.value, ctx);
    }
    for (const f of ['op', 'target'] as const) if (body[f] === undefined) errors.push({ path: f, message: 'required (or name a tool)' });
    // A call by op takes scalar args only (docs/api.md); nested values are for calls by tool.
    const scalars = Args.safeParse(body.args ?? {});
    if (!scalars.success) for (const i of scalars.error.issues) errors.push({ path: ['args', ...i.path.map(String)].join('.'), message: i.message });
    const raw = body.target;
    const target = raw === undefined ? null : canonicalTarget(raw);
    if (raw !== undefined && target !== null && !target.ok)
      errors.push({ path: `target.${raw.kind === 'url' ? 'url' : raw.kind === 'path' ? 'path' : 'name'}`, message: target.error });
    if (errors.length > 0 || !cost.ok || raw === undefined || target === null || !target.ok || body.op === undefined) throw invalidRequest(errors);
    const req: Call = {
      op: body.op,
      target: target.value,
      cost: cost.value,
      args: body.args ?? {},
      requested: raw,
      dryRun: body.dry_run === true,
    };
    return this.decide(tenantId, body.token, req, body.call_id ?? null, null, ctx);
  }

  /**
   * A call by tool (issue 17): the args checked against the tool's schema, op and target derived from
   * its definition, `call_id` required for destructive and irreversible tools; then decided as any call.
   */
  private async approveByTool(tenantId: string, body: ApproveBody, name: string, cost: bigint, ctx: RequestContext): Promise<Reply> {
    const callId = body.call_id ?? null;
    const args = body.args ?? {};
    const tool = await this.kit.guard(() => this.kit.tools.resolve(tenantId, name), ctx.deadline);
    // Until the tool is known, the call's op and target are not: its rows name none.
    const unknown: Call = {
      op: null,
      target: null,
      cost,
      args,
      requested: null,
      dryRun: body.dry_run === true,
      tool: { name, version: 0, sideEffect: 'read_only' },
    };
    if (tool === null) return this.decide(tenantId, body.token, unknown, callId, deny('unknown_tool', `no tool ${name} is registered for this tenant`), ctx);
    const { def, validator } = tool;
    const about = { name, version: def.version, sideEffect: def.sideEffect };
    const failures: ArgError[] = validator.check(args);
    const value = atPointer(args, def.target.pointer);
    const requested = typeof value === 'string' ? toolTarget(def.target.kind, value) : null;
    const target = requested === null ? null : canonicalTarget(requested);
    if (failures.length === 0 && target !== null && !target.ok) failures.push({ path: `args${def.target.pointer.replace(/\//g, '.')}`, message: target.error });
    const req: Call = { op: def.right, target: target?.ok === true ? target.value : null, cost, args, requested, dryRun: body.dry_run === true, tool: about };
    if (failures.length > 0 || req.target === null) {
      const d: Deny & { fields: ArgError[] } = { ...deny('args_invalid', failures.map((f) => `${f.path}: ${f.message}`).join('; ')), fields: failures };
      return this.decide(tenantId, body.token, req, callId, d, ctx);
    }
    if (callId === null && (def.sideEffect === 'destructive' || def.sideEffect === 'irreversible')) {
      const d = deny('call_id_required', `${name} is ${def.sideEffect}: a call_id must make it idempotent, so a retry cannot repeat its effect`);
      return this.decide(tenantId, body.token, req, callId, d, ctx);
    }
    return this.decide(tenantId, body.token, req, callId, null, ctx);
  }

  /** Verifies the token and decides the call under its call_id (`denied`: a denial known before the capability is read). */
  private async decide(
    tenantId: string,
    token: string,
    req: Call,
    callId: string | null,
    denied: (Deny & { fields?: readonly ArgError[] }) | null,
    ctx: RequestContext,
  ): Promise<Reply> {
    const { caller, deadline } = ctx;
    // A dry run never claims its call_id: it must neither take the place of the real call nor be answered by its replay.
    const idemKey = callId === null || req.dryRun ? undefined : callId;
    const verified = await this.kit.tokens.verify(token);
    if (!verified.ok) {
      const d = deny(verified.code, verified.message);
      return this.reply(await this.kit.guard(() => this.kit.submitAs(caller, this.unit(tenantId, null, null, req, callId, d, null), deadline)));
    }
    const cap = verified.capability;
    // A call that waits for a person is asked again by a retry: without a call_id, a second approval
    // is asked for (and, approved, charged and run) each time, whatever the tool's class.
    if (denied === null && req.tool !== undefined && !req.dryRun && callId === null && needsApproval(cap, req.tool.sideEffect)) {
      denied = deny(
        'call_id_required',
        `${req.tool.name} needs a person's approval under this capability: a call_id must make it idempotent, so a retry cannot ask again`,
      );
    }
    // Hashed only when a call_id asks for idempotency: it is on every approval's path otherwise.
    const requestHash =
      idemKey === undefined
        ? undefined
        : hashJson({ op: req.op, target: req.target, cost: req.cost.toString(), args: req.args, ...(req.tool === undefined ? {} : { tool: req.tool.name }) });
    const key = idemKey === undefined ? undefined : `${cap.id}:${idemKey}`;
    if (cap.tenant !== tenantId || denied !== null) {
      // The token's own denials come first: a foreign token learns nothing of this tenant's tools.
      const mismatch = cap.tenant !== tenantId;
      // A repeat of a call_id already decided is answered from its record, before the tool's checks:
      // its tool registered anew since (a tighter schema) must not have the call decided a second time.
      if (!mismatch && key !== undefined && requestHash !== undefined) {
        const first = await this.kit.recorded({ tenantId, scope: 'approve', key }, requestHash, deadline);
        if (first !== null) return this.replay(tenantId, first, deadline);
      }
      const d = mismatch ? deny('tenant_mismatch', 'the capability belongs to another tenant') : (denied as Deny);
      const owner = mismatch ? null : cap;
      return this.reply(await this.kit.guard(() => this.kit.submitAs(caller, this.unit(tenantId, null, owner, req, callId, d, null), deadline)));
    }
    const outcome = await this.kit.idempotent(
      { tenantId, scope: 'approve', key },
      requestHash,
      (fence) => this.kit.submitAs(caller, this.unit(tenantId, fence, cap, req, callId, null, caller?.keyId ?? null), deadline),
      deadline,
    );
    return 'replay' in outcome ? this.replay(tenantId, outcome.replay, deadline) : this.reply(outcome.result);
  }

  /** The answer to a repeated call_id: its first decision, or for a call that waited for a person, the outcome once there is one (issue 17). */
  private async replay(tenantId: string, stored: StoredResponse, deadline: Deadline | undefined): Promise<Reply> {
    const first = stored.body as Record<string, unknown>;
    if (first.decision === 'pending' && typeof first.approval_id === 'string') {
      const now = await this.kit.approvals.outcomeOf(tenantId, first.approval_id, first, deadline);
      return replayedApproval({ status: 200, body: now });
    }
    return replayedApproval(stored);
  }

  private unit(
    tenantId: string,
    fence: Fence | null,
    cap: VerifiedCapability | null,
    req: Call,
    callId: string | null,
    preDenied: (Deny & { fields?: readonly ArgError[] }) | null,
    // The asking key, kept on an approval so that it cannot resolve it itself.
    askedBy: string | null,
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
          else if (!chainMatches(cap, chain)) decision = deny('bad_token', "the capability's stored chain does not match its token");
          else {
            const d =
              req.target === null || req.op === null
                ? deny('args_invalid', 'no target')
                : evaluateApprove(cap, { ...req, op: req.op, target: req.target, args: req.args as Record<string, Scalar> }, now.getTime(), chain);
            decision = d;
            if (d.decision === 'grant' && req.tool !== undefined && !req.dryRun && needsApproval(cap, req.tool.sideEffect)) {
              // Nothing is charged until a person approves (src/service/approvals.ts charges it then).
              const asked = await askApproval(
                tx,
                tenantId,
                {
                  cap,
                  tool: req.tool,
                  callId,
                  op: req.op as Right,
                  target: req.target as CanonicalTarget,
                  args: req.args,
                  cost: req.cost,
                  requestedBy: askedBy,
                },
                now,
                await this.kit.approvals.sealing(),
              );
              decision = { decision: 'pending', approvalId: asked.id, expiresAt: asked.expiresAt };
            } else if (d.decision === 'grant') {
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
        const result: ApproveResult = {
          decision,
          remaining,
          auditId,
          capabilityId: cap?.id ?? null,
          dryRun: req.dryRun,
          // Only a dry run that would grant would wait: a denial asks nobody.
          approvalNeeded: req.dryRun && decision.decision === 'grant' && req.tool !== undefined && cap !== null && needsApproval(cap, req.tool.sideEffect),
        };
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
              ...(req.tool === undefined ? {} : { tool: req.tool.name, tool_version: req.tool.version }),
              ...(decision.decision === 'pending' ? { approval_id: decision.approvalId, expires_at: decision.expiresAt.toISOString() } : {}),
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

/**
 * A call to decide, as validated; `requested` is the target as sent (or as the tool's pointer found
 * it), for the audit row. `target` is null only for a call by tool denied before it had one.
 */
interface Call extends Omit<ApproveRequest, 'op' | 'target' | 'args' | 'tool'> {
  readonly op: Right | null;
  readonly target: CanonicalTarget | null;
  readonly args: Readonly<Record<string, unknown>>;
  readonly requested: RawTarget | null;
  /** Decide and audit, but charge nothing and claim no call_id (issue 16). */
  readonly dryRun: boolean;
  readonly tool?: { readonly name: string; readonly version: number; readonly sideEffect: SideEffect };
}

/** A call by tool waiting for a person's approval (issue 17). */
interface Pending {
  readonly decision: 'pending';
  readonly approvalId: string;
  readonly expiresAt: Date;
}

interface ApproveResult {
  readonly decision: (Deny & { fields?: readonly ArgError[] }) | { decision: 'grant' } | Pending;
  readonly remaining: { budgetRemaining: bigint | null; callsRemaining: number | null };
  readonly auditId: string;
  readonly capabilityId: string | null;
  readonly dryRun: boolean;
  /** A dry run of a call by tool that would wait for a person's approval. */
  readonly approvalNeeded: boolean;
}

function approveBody(r: ApproveResult): Record<string, unknown> {
  if (r.decision.decision === 'pending') return pendingBody(r.decision.approvalId, r.decision.expiresAt, r.capabilityId as string, r.auditId);
  return {
    decision: r.decision.decision,
    reason:
      r.decision.decision === 'deny'
        ? { code: r.decision.code, message: r.decision.message, ...(r.decision.fields === undefined ? {} : { fields: r.decision.fields }) }
        : null,
    capability_id: r.capabilityId,
    audit_id: r.auditId,
    budget_remaining: r.remaining.budgetRemaining === null ? null : fromMicro(r.remaining.budgetRemaining),
    calls_remaining: r.remaining.callsRemaining,
    ...(r.dryRun ? { dry_run: true } : {}),
    ...(r.approvalNeeded ? { approval_required: true } : {}),
  };
}
