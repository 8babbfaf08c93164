/**
 * Key management over HTTP (admin only; the role check is the app's): create a key with roles, a
 * name and an optional lifetime; list keys without secrets or hashes; revoke one. A revocation is
 * dropped from this instance's key cache at once.
 *
 * Creating and revoking a key are decisions like any other: each is an audit row (event `access`,
 * under the acting key's id), committed in the same transaction as the key's change and before the
 * answer. Otherwise a key that asked for a call could make an approver key and approve its own call
 * with it (the self-approval rule is per key), and the audit would show another key approving, with
 * nothing to tie the two together.
 */
import { z } from 'zod';
import { newId } from '../crypto/hash.js';
import type { ApiKeyRecord, Store } from '../store/store.js';
import { tenantDraft, type AuditDraft, type DecisionUnit } from '../store/writer.js';
import { ApiError, invalidRequest, unavailable } from './errors.js';
import { keyView, newApiKey, ROLES, type CreatedKey, type Role } from './keys.js';
import type { Authority, Reply, RequestContext } from './authority.js';
import type { Authenticator } from './tenants.js';

/** The longest lifetime of a key: ten years. */
const MAX_KEY_TTL_S = 10 * 365 * 24 * 3600;

export const KeyName = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[A-Za-z0-9._-]+$/);
export const KeyId = z
  .string()
  .length(12)
  .regex(/^[A-Za-z0-9_-]+$/);
export const CreateKeyBody = z.strictObject({
  name: KeyName,
  roles: z.array(z.enum(ROLES)).min(1).max(ROLES.length),
  /** Seconds until the key expires; absent: it does not expire. */
  ttl_s: z.int().min(1).max(MAX_KEY_TTL_S).optional(),
});
export type CreateKeyBody = z.infer<typeof CreateKeyBody>;

/**
 * The audit row of a key created or revoked: who it is, what it may do and until when. A key revoked
 * because a key it was made from was revoked names that key (`revoked_with`).
 */
const keyRow = (action: 'api_key_created' | 'api_key_revoked', k: ApiKeyRecord, revokedWith?: string, mark: { via?: Via } = {}): AuditDraft =>
  tenantDraft(newId('aud'), 'access', 'grant', null, {
    action,
    api_key_id: k.id,
    name: k.name,
    roles: [...k.roles],
    expires_at: k.expiresAt?.toISOString() ?? null,
    ...(revokedWith === undefined ? {} : { revoked_with: revokedWith }),
    ...mark,
  });

/** Who made a key change: a key over the API (its id is the audit row's `key_id`), or the host's operator with the CLI. */
type Via = 'api' | 'cli';

/**
 * Making a key, as a decision: inserted only while its maker (`maker`, null for the operator's CLI)
 * is usable, and never past `creatorExpiresAt`; audited either way. Null: the maker was revoked or
 * expired meanwhile, nothing made.
 */
export function keyCreation(
  tenantId: string,
  spec: { name: string; roles: readonly Role[]; ttl_s?: number | undefined; maker: string | null; creatorExpiresAt: Date | null },
  via: Via = 'api',
): DecisionUnit<CreatedKey | null> {
  const mark = via === 'cli' ? { via } : {};
  return {
    tenantId,
    fence: null,
    // It reads its maker's row under a share lock (`insertKeyIn`), which a revocation elsewhere may hold.
    writesSubtree: true,
    run: async (tx, now) => {
      const asked = spec.ttl_s === undefined ? null : new Date(now.getTime() + spec.ttl_s * 1000);
      // Checked against the clock before; the decision's own time may be a moment later.
      const expiresAt = spec.creatorExpiresAt !== null && asked !== null && asked > spec.creatorExpiresAt ? spec.creatorExpiresAt : asked;
      const created = newApiKey(tenantId, { name: spec.name, roles: spec.roles, expiresAt, createdBy: spec.maker }, now);
      if (await tx.insertApiKey(created.record, now)) return { result: created, audit: keyRow('api_key_created', created.record, undefined, mark) };
      // The maker was revoked (or expired) since this request was let in: refused, on the record.
      return {
        result: null,
        audit: tenantDraft(newId('aud'), 'access', 'deny', 'unauthorized', { action: 'api_key_created', name: spec.name, roles: [...spec.roles] }),
      };
    },
  };
}

/** Revoking a key and the keys made from it, as a decision: a row per key revoked now. Null: no such key. */
export function keyRevocation(
  tenantId: string,
  keyId: string,
  via: Via = 'api',
): DecisionUnit<{ key: ApiKeyRecord; made: readonly ApiKeyRecord[]; now: Date } | null> {
  const mark = via === 'cli' ? { via } : {};
  return {
    tenantId,
    fence: null,
    // It revokes the keys made from this one too, rows it must wait for when another holds them.
    writesSubtree: true,
    run: async (tx, now) => {
      const r = await tx.revokeApiKey(tenantId, keyId, now);
      if (r === null) return { result: null, audit: null };
      // Each key revoked now is on the record; a key revoked before, with nothing made from it left, decides nothing.
      const rows = [
        ...(r.revokedNow ? [keyRow('api_key_revoked', r.key, undefined, mark)] : []),
        ...r.made.map((k) => keyRow('api_key_revoked', k, keyId, mark)),
      ];
      return { result: { key: r.key, made: r.made, now }, audit: rows.length === 0 ? null : rows };
    },
  };
}

export class KeyAdmin {
  constructor(
    private readonly store: Store,
    /** Decisions go through the authority's writer and failure guard, as every other decision does. */
    private readonly kit: Pick<Authority, 'guard' | 'submitAs'>,
    private readonly auth: Authenticator,
    private readonly now: () => Date,
  ) {}

  /**
   * `creatorExpiresAt`: when the key asking expires (null: never). The new key may not outlive it: a
   * leaked key with a short life must not be turned into one that never expires (400 on ttl_s).
   */
  async create(tenantId: string, body: CreateKeyBody, creatorExpiresAt: Date | null, ctx: RequestContext = {}): Promise<Reply> {
    if (creatorExpiresAt !== null) {
      const left = Math.floor((creatorExpiresAt.getTime() - this.now().getTime()) / 1000);
      if (body.ttl_s === undefined || body.ttl_s > left)
        throw invalidRequest([
          { path: 'ttl_s', message: `must be given and at most ${left}: a key may not outlive the key that makes it (${creatorExpiresAt.toISOString()})` },
        ]);
    }
    const maker = ctx.caller?.keyId ?? null;
    const made = await this.decide(keyCreation(tenantId, { ...body, maker, creatorExpiresAt }), ctx);
    if (made === null) {
      if (maker !== null) this.auth.forget(maker);
      throw new ApiError(401, 'unauthorized', 'the API key making this one was revoked or expired');
    }
    const { record, apiKey } = made;
    return { status: 201, body: { ...keyView(record, record.createdAt), api_key: apiKey } };
  }

  async list(tenantId: string, now: Date): Promise<Reply> {
    const keys = await guard(() => this.store.listApiKeys(tenantId));
    return { status: 200, body: { keys: keys.map((k) => keyView(k, now)) } };
  }

  async revoke(tenantId: string, keyId: string, ctx: RequestContext = {}): Promise<Reply> {
    const found = await this.decide(keyRevocation(tenantId, keyId), ctx);
    if (found === null) throw new ApiError(404, 'not_found', 'no such API key');
    for (const id of [keyId, ...found.made.map((k) => k.id)]) this.auth.forget(id);
    return { status: 200, body: { ...keyView(found.key, found.now), revoked_with_it: found.made.map((k) => k.id) } };
  }

  /** The unit through the decision writer, under the caller's ids: answered once its audit row (if any) has committed. */
  private decide<R>(unit: DecisionUnit<R>, { caller, deadline }: RequestContext): Promise<R> {
    return this.kit.guard(() => this.kit.submitAs(caller, unit, deadline));
  }
}

async function guard<R>(f: () => Promise<R>): Promise<R> {
  try {
    return await f();
  } catch {
    throw unavailable();
  }
}
