/**
 * The authority's use cases: mint, attenuate, approve, revoke (the reads are in reads.ts). Each turns a
 * schema-validated request into canonical form, asks the pure core for the decision, and has the
 * decision written (with its audit row) through the group-commit writer before it answers.
 */
import { checkAttenuation, extendsTrajectory, type ChildSpec } from '../core/attenuate.js';
import { chainMatches } from '../core/approve.js';
import { toMicro } from '../core/money.js';
import { canonicalObject } from '../core/objects.js';
import { canonicalPredicate, inheritPredicate } from '../core/predicate.js';
import { MAX_TOKEN_CHARS, type ApproveBody, type AttenuateBody, type MintBody, type RevokeBody } from '../core/schemas.js';
import {
  RIGHTS,
  type CapabilityClaims,
  type CanonicalObject,
  type CanonicalPredicate,
  type RawObject,
  type RawPredicate,
  type Right,
  type Violation,
} from '../core/types.js';
import { hashJson, newId } from '../crypto/hash.js';
import type { KeyRing } from '../crypto/keys.js';
import { signToken } from '../crypto/tokens.js';
import { claim, markInDoubt, recordOf, release, type Fence, type IdemKey, type StoredResponse } from '../store/idempotency.js';
import { within, type Deadline } from '../store/deadline.js';
import { StoreUnavailable, type Store } from '../store/store.js';
import { FenceLost, type CallerIds, type DecisionUnit, type DecisionWriter } from '../store/writer.js';
import { ApiError, invalidRequest, unavailableFrom, type FieldError } from './errors.js';
import { TokenCache } from './token-cache.js';
import { ResponseSealer } from './seal.js';
import { Approver } from './approve.js';
import { Approvals } from './approvals.js';
import { ToolRegistry } from './tools.js';

export interface AuthorityDeps {
  readonly store: Store;
  readonly writer: DecisionWriter;
  readonly keys: KeyRing;
  readonly now: () => Date;
}

export interface Reply {
  readonly status: number;
  readonly body: unknown;
}

/** Who asks (recorded in the audit row) and by when the answer is due (503 `unavailable` if it cannot commit by then). */
export interface RequestContext {
  readonly caller?: CallerIds;
  readonly deadline?: Deadline;
}

const seconds = (d: Date): number => Math.floor(d.getTime() / 1000);
export const rfc3339 = (epochSeconds: number): string => new Date(epochSeconds * 1000).toISOString().replace('.000Z', 'Z');

function canonicalRights(rights: readonly Right[]): Right[] {
  return RIGHTS.filter((r) => rights.includes(r));
}

function canonicalObjects(objects: readonly RawObject[], errors: FieldError[]): CanonicalObject[] {
  const out: CanonicalObject[] = [];
  objects.forEach((o, i) => {
    const c = canonicalObject(o);
    if (!c.ok) errors.push({ path: `objects.${i}`, message: c.error });
    else if (!out.some((x) => JSON.stringify(x) === JSON.stringify(c.value))) out.push(c.value);
  });
  return out;
}

function canonicalPred(p: RawPredicate | undefined, errors: FieldError[]): CanonicalPredicate {
  const c = canonicalPredicate(p ?? {});
  if (c.ok) return c.value;
  if ('errors' in c) errors.push(...c.errors.map((e) => ({ path: `predicate.${e.path}`, message: e.message })));
  return {} as CanonicalPredicate;
}

/**
 * Refuses (400) a capability whose token would be longer than approve accepts: issuing it would
 * hand out a capability no call can use. Names the field that makes most of the size.
 */
function checkTokenLength(token: string, c: CapabilityClaims): void {
  if (token.length <= MAX_TOKEN_CHARS) return;
  const sizes: [string, number][] = [
    ['objects', JSON.stringify(c.objects).length],
    ['predicate', JSON.stringify(c.predicate).length],
    ['trajectory_id', c.trajectory.length],
  ];
  const [path] = sizes.reduce((a, b) => (b[1] > a[1] ? b : a));
  throw invalidRequest([
    { path, message: `the capability's token would be ${token.length} characters, over the ${MAX_TOKEN_CHARS} that approve accepts: make ${path} smaller` },
  ]);
}

/** The API form of a capability (docs/api.md mint response, without the token). */
function capabilityBody(c: CapabilityClaims): Record<string, unknown> {
  return {
    capability_id: c.id,
    trajectory_id: c.trajectory,
    parent_id: c.parent,
    depth: c.depth,
    rights: c.rights,
    objects: c.objects,
    predicate: c.predicate,
    expires_at: rfc3339(c.exp),
  };
}

/** A stored answer whose seal does not hold: never answered from (README "Idempotency"). */
const unsealedAnswer = (): ApiError =>
  new ApiError(
    503,
    'unavailable',
    'the stored answer for this idempotency key does not hold its seal (changed in the database, or sealed under a retired signing key); nothing is granted now. A decision was recorded under this key: find it in the audit log (by call_id) before asking again under a new one',
    { outcome: 'unknown' },
  );

const conflict = (): ApiError => new ApiError(409, 'idempotency_conflict', 'this idempotency key was used with a different request');
const stillDeciding = (): ApiError => new ApiError(409, 'in_flight', 'a request with this idempotency key is still being decided');

export class Authority {
  /** Verified tokens, shared by the use cases. */
  readonly tokens: TokenCache;
  /** The tool registry and the approvals of calls by tool (issue 17). */
  readonly tools: ToolRegistry;
  readonly approvals: Approvals;
  private readonly approver: Approver;
  /** Made from the signing key on first use (an async signature), then shared. */
  private sealer: Promise<ResponseSealer> | undefined;
  readonly sealing = (): Promise<ResponseSealer> => (this.sealer ??= ResponseSealer.from(this.deps.keys));

  constructor(private readonly deps: AuthorityDeps) {
    this.tokens = new TokenCache(deps.keys);
    this.tools = new ToolRegistry(deps.store, deps.writer, this.sealing);
    this.approvals = new Approvals(deps.store, deps.writer, deps.now, this.sealing);
    this.approver = new Approver(this);
  }

  // ---- mint -----------------------------------------------------------------------------------

  async mint(tenantId: string, body: MintBody, idempotencyKey: string | undefined, ctx: RequestContext = {}): Promise<Reply> {
    const { caller, deadline } = ctx;
    const errors: FieldError[] = [];
    const objects = canonicalObjects(body.objects, errors);
    const predicate = canonicalPred(body.predicate, errors);
    if (errors.length > 0) throw invalidRequest(errors);
    const iat = seconds(this.deps.now());
    const claims: CapabilityClaims = {
      id: newId('cap'),
      tenant: tenantId,
      trajectory: body.trajectory_id,
      parent: null,
      depth: 0,
      rights: canonicalRights(body.rights),
      objects,
      predicate,
      iat,
      nbf: iat,
      exp: iat + body.ttl_s,
    };
    const token = await signToken(this.deps.keys, claims);
    checkTokenLength(token, claims);
    return this.issue(tenantId, 'mint', { key: idempotencyKey, deadline }, body, async (fence) => {
      return this.submitAs(
        caller,
        {
          tenantId,
          fence,
          newTree: claims.id,
          run: async (tx) => {
            await tx.insertCapability(this.newRow(claims, []));
            return this.issued('mint', claims, token);
          },
        },
        deadline,
      );
    });
  }

  // ---- attenuate ------------------------------------------------------------------------------

  async attenuate(tenantId: string, body: AttenuateBody, idempotencyKey: string | undefined, ctx: RequestContext = {}): Promise<Reply> {
    const { caller, deadline } = ctx;
    const errors: FieldError[] = [];
    const objects = canonicalObjects(body.objects, errors);
    const predicate = canonicalPred(body.predicate, errors);
    if (errors.length > 0) throw invalidRequest(errors);
    const verified = await this.tokens.verify(body.parent_token);
    return this.issue(tenantId, 'attenuate', { key: idempotencyKey, deadline }, body, async (fence) => {
      if (!verified.ok || verified.capability.tenant !== tenantId) {
        const detail = !verified.ok ? verified.message : 'the parent capability belongs to another tenant';
        return this.submitAs(
          caller,
          this.refusal(tenantId, fence, null, body.trajectory_id ?? null, [{ component: 'parent', code: 'parent_invalid', field: 'parent_token', detail }]),
          deadline,
        );
      }
      const parent = verified.capability;
      const iat = seconds(this.deps.now());
      // Omitted predicate fields inherit the parent's, as an omitted ttl_s does (issue 16): the child, its token and the answer carry the effective bounds.
      const child: ChildSpec = {
        rights: canonicalRights(body.rights),
        objects,
        predicate: inheritPredicate(body.predicate ?? {}, predicate, parent.predicate),
        exp: body.ttl_s === undefined ? parent.exp : iat + body.ttl_s,
      };
      const claims: CapabilityClaims = {
        ...child,
        id: newId('cap'),
        tenant: tenantId,
        trajectory: body.trajectory_id ?? parent.trajectory,
        parent: parent.id,
        depth: parent.depth + 1,
        iat,
        nbf: iat,
      };
      const violations = checkAttenuation(parent, child, iat * 1000);
      if (!extendsTrajectory(parent.trajectory, claims.trajectory))
        violations.push({
          component: 'trajectory',
          code: 'trajectory_unrelated',
          field: 'trajectory_id',
          detail: `trajectory_id must equal the parent's (${parent.trajectory}) or extend it (${parent.trajectory}.<suffix>)`,
        });
      const token = violations.length === 0 ? await signToken(this.deps.keys, claims) : '';
      if (violations.length === 0) checkTokenLength(token, claims);
      return this.submitAs(
        caller,
        {
          tenantId,
          fence,
          chainOf: parent.id,
          run: async (tx, now) => {
            const chain = await tx.lockChain(tenantId, parent.id);
            const all = [...violations];
            if (chain.length === 0 || !chainMatches(parent, chain)) {
              all.unshift({
                component: 'parent',
                code: 'parent_invalid',
                field: 'parent_token',
                detail: 'the parent capability is not known to this authority',
              });
            } else {
              const revoked = chain.find((l) => l.revoked);
              if (revoked !== undefined)
                all.unshift({
                  component: 'parent',
                  code: 'parent_revoked',
                  field: 'parent_token',
                  detail: revoked.id === parent.id ? 'the parent capability is revoked' : `ancestor ${revoked.id} is revoked`,
                });
              if (parent.exp * 1000 <= now.getTime() && !all.some((v) => v.code === 'parent_expired')) {
                all.unshift({ component: 'parent', code: 'parent_expired', field: 'parent_token', detail: 'the parent capability has expired' });
              }
            }
            // Filed under the parent's trajectory when the child asked for an unrelated one: the tree's view shows the attempt.
            const filedUnder = extendsTrajectory(parent.trajectory, claims.trajectory) ? claims.trajectory : parent.trajectory;
            if (all.length > 0) return this.refusal(tenantId, fence, parent.id, filedUnder, all, body.trajectory_id).run(tx, now);
            await tx.insertCapability(
              this.newRow(
                claims,
                chain.map((l) => l.id),
              ),
            );
            return this.issued('attenuate', claims, token);
          },
        },
        deadline,
      );
    });
  }

  private refusal(
    tenantId: string,
    fence: Fence | null,
    parentId: string | null,
    trajectoryId: string | null,
    violations: Violation[],
    requestedTrajectory?: string,
  ): DecisionUnit<IssueResult> {
    const error = new ApiError(
      403,
      'attenuation_refused',
      `the child would hold more than its parent: ${violations.map((v) => `${v.code} (${v.field})`).join(', ')}`,
      {
        violations,
      },
    );
    const response = { status: 403, body: error.toBody() };
    return {
      tenantId,
      fence,
      run: async () => ({
        result: { response },
        response,
        audit: {
          id: newId('aud'),
          event: 'attenuate',
          decision: 'deny',
          reasonCode: violations[0]?.code ?? null,
          capabilityId: null,
          parentId,
          trajectoryId,
          op: null,
          target: null,
          cost: null,
          callId: null,
          detail:
            requestedTrajectory === undefined || requestedTrajectory === trajectoryId
              ? { violations }
              : { violations, requested_trajectory_id: requestedTrajectory },
        },
      }),
    };
  }

  private newRow(c: CapabilityClaims, ancestors: string[]) {
    return {
      id: c.id,
      tenantId: c.tenant,
      trajectoryId: c.trajectory,
      parentId: c.parent,
      ancestors,
      depth: c.depth,
      rights: c.rights,
      objects: c.objects,
      predicate: c.predicate,
      budget: c.predicate.budget === undefined ? null : (toMicro(c.predicate.budget) as { value: bigint }).value,
      maxCalls: c.predicate.max_calls ?? null,
      kid: this.deps.keys.activeKid,
      issuedAt: new Date(c.iat * 1000),
      expiresAt: new Date(c.exp * 1000),
    };
  }

  private issued(event: 'mint' | 'attenuate', claims: CapabilityClaims, token: string) {
    const body = capabilityBody(claims);
    const response: StoredResponse = { status: 201, body: { ...body, claims } };
    return {
      result: { response: { status: 201, body: { ...body, token } } },
      response,
      audit: {
        id: newId('aud'),
        event,
        decision: 'grant' as const,
        reasonCode: null,
        capabilityId: claims.id,
        parentId: claims.parent,
        trajectoryId: claims.trajectory,
        op: null,
        target: null,
        cost: null,
        callId: null,
        detail: { rights: claims.rights, objects: claims.objects, predicate: claims.predicate, expires_at: rfc3339(claims.exp) },
      },
    };
  }

  /** Runs an issuing decision under its Idempotency-Key (docs/api.md: same key and body → first response). */
  private async issue(
    tenantId: string,
    scope: 'mint' | 'attenuate',
    { key, deadline }: { key: string | undefined; deadline: Deadline | undefined },
    body: unknown,
    decide: (fence: Fence | null) => Promise<IssueResult>,
  ): Promise<Reply> {
    const outcome = await this.idempotent({ tenantId, scope, key }, key === undefined ? undefined : hashJson(body), decide, deadline);
    if ('replay' in outcome) return this.replayIssued(outcome.replay);
    return outcome.result.response;
  }

  /**
   * Stored responses of issuing decisions keep the claims, not the token: a replay signs them
   * again (Ed25519 is deterministic, so with the same key it is the same token), and no bearer
   * token sits in the database.
   */
  private async replayIssued(stored: StoredResponse): Promise<Reply> {
    const body = stored.body as Record<string, unknown>;
    if (stored.status !== 201) return stored;
    const { claims, ...rest } = body as { claims: CapabilityClaims };
    return { status: 201, body: { ...rest, token: await signToken(this.deps.keys, claims) } };
  }

  // ---- approve (src/service/approve.ts) -------------------------------------------------------

  approve(tenantId: string, body: ApproveBody, ctx: RequestContext = {}): Promise<Reply> {
    return this.approver.approve(tenantId, body, ctx);
  }

  // ---- revoke ---------------------------------------------------------------------------------

  async revoke(tenantId: string, body: RevokeBody, ctx: RequestContext = {}): Promise<Reply> {
    const { caller, deadline } = ctx;
    const reason = body.reason ?? null;
    // A capability's trajectory never changes: read it first, so the revoke row is found by trajectory.
    const target = await this.guard(() => this.deps.store.getCapability(tenantId, body.capability_id), deadline);
    if (target === null) throw new ApiError(404, 'not_found', 'no such capability');
    const revoked = await this.guard(() =>
      this.submitAs<string[] | null>(
        caller,
        {
          tenantId,
          fence: null,
          chainOf: body.capability_id,
          writesSubtree: true,
          run: async (tx, now) => {
            const chain = await tx.lockChain(tenantId, body.capability_id);
            const self = chain[chain.length - 1];
            if (self?.id !== body.capability_id) return { result: null, audit: null };
            const ids = await tx.revokeSubtree(tenantId, body.capability_id, now, reason);
            return {
              result: ids,
              audit: {
                id: newId('aud'),
                event: 'revoke',
                decision: 'grant',
                reasonCode: null,
                capabilityId: body.capability_id,
                parentId: chain[chain.length - 2]?.id ?? null,
                trajectoryId: target.record.trajectoryId,
                op: null,
                target: null,
                cost: null,
                callId: null,
                detail: { revoked: ids, reason },
              },
            };
          },
        },
        deadline,
      ),
    );
    if (revoked === null) throw new ApiError(404, 'not_found', 'no such capability');
    return { status: 200, body: { revoked } };
  }

  // ---- idempotency and failure ----------------------------------------------------------------

  /** Runs `decide` under an idempotency key (when given): claim, decide, and settle on failure. */
  async idempotent<R>(
    k: Omit<IdemKey, 'key'> & { key: string | undefined },
    requestHash: string | undefined,
    decide: (fence: Fence | null) => Promise<R>,
    deadline: Deadline | undefined,
  ): Promise<{ result: R } | { replay: StoredResponse }> {
    // The writer bounds `decide` by the deadline itself, knowing whether COMMIT was sent.
    if (k.key === undefined || requestHash === undefined) return { result: await this.guard(() => decide(null)) };
    const key: IdemKey = { tenantId: k.tenantId, scope: k.scope, key: k.key };
    const sealer = await this.sealing();
    const claiming = claim(this.deps.store.db, key, requestHash, newId('own'), this.deps.now());
    const c = await this.guard(() => claiming, deadline).catch((e: unknown) => {
      // A claim that lands after the deadline decided nothing: give the key back for the repeat.
      void claiming.then((late) => (late.kind === 'claimed' ? release(this.deps.store.db, late.fence) : undefined)).catch(() => undefined);
      throw e;
    });
    switch (c.kind) {
      case 'completed':
        // Answered only when the record is the one this authority stored for this very request.
        if (c.requestHash !== requestHash || !sealer.holds(key, requestHash, c.response, c.seal)) throw unsealedAnswer();
        return { replay: c.response };
      case 'conflict':
        throw conflict();
      case 'in_flight':
        throw stillDeciding();
      case 'claimed':
        try {
          const fence: Fence = { ...c.fence, seal: (r) => sealer.seal(key, requestHash, r) };
          return { result: await decide(fence) };
        } catch (e) {
          // Settled in the background once the deadline has passed: the answer must not wait for it.
          const settling = this.settleFailure(c.fence, e);
          if (deadline === undefined) await settling;
          else await within(deadline, settling).catch(() => undefined);
          if (e instanceof FenceLost) throw new ApiError(409, 'in_flight', 'the idempotency key was taken over by a repeat of this request');
          throw e instanceof ApiError ? e : e instanceof StoreUnavailable ? unavailableFrom(e) : e;
        }
    }
  }

  /**
   * The answer already recorded under an idempotency key for this very request, read without
   * claiming the key: for a request denied before it could claim one (a call by tool its tool's
   * checks deny). As a claim would: the record of another request is 409 idempotency_conflict, one
   * still being decided 409 in_flight; null when the request may be decided afresh.
   */
  async recorded(k: IdemKey, requestHash: string, deadline: Deadline | undefined): Promise<StoredResponse | null> {
    const found = await this.guard(() => recordOf(this.deps.store.db, k, requestHash, this.deps.now()), deadline);
    switch (found?.kind) {
      case undefined:
        return null;
      case 'conflict':
        throw conflict();
      case 'in_flight':
        throw stillDeciding();
      case 'completed':
        if (!(await this.sealing()).holds(k, requestHash, found.response, found.seal)) throw unsealedAnswer();
        return found.response;
    }
  }

  private async settleFailure(fence: Fence, e: unknown): Promise<void> {
    try {
      if (e instanceof StoreUnavailable && e.outcome === 'unknown') await markInDoubt(this.deps.store.db, fence);
      else if (!(e instanceof FenceLost)) await release(this.deps.store.db, fence);
    } catch {
      // The database is unreachable: the claim stays in flight and a repeat takes it over after the lease.
    }
  }

  /** Submits a decision, its audit row recording who asked (key id and request id). */
  submitAs<R>(caller: CallerIds | undefined, unit: DecisionUnit<R>, deadline?: Deadline): Promise<R> {
    return this.deps.writer.submit(caller === undefined ? unit : { ...unit, caller }, deadline);
  }

  /**
   * Any store failure becomes 503: fail closed, saying whether the outcome is unknown. With a
   * deadline, the wait is bounded by it (for reads and claims, which decide nothing).
   */
  async guard<R>(f: () => Promise<R>, deadline?: Deadline): Promise<R> {
    try {
      return await (deadline === undefined ? f() : within(deadline, f()));
    } catch (e) {
      if (e instanceof ApiError) throw e;
      throw unavailableFrom(e);
    }
  }
}

interface IssueResult {
  readonly response: Reply;
}
