/**
 * Tenants and authentication. A key is `wk.<key id>.<secret>`: the key id finds the key (and its
 * tenant), and the SHA-256 of the whole key is compared in constant time with the stored hash (the
 * key itself is never stored). Keys found are cached for `ttlMs` (30 s): a key revoked through this
 * instance is dropped from its cache at once, and so is one revoked anywhere else (another instance,
 * the CLI) on an instance told of it (AppDeps.keyRevocations: on Node, PostgreSQL's LISTEN). Instances
 * not told (Workers, or while the listening connection is down) stop accepting it within the TTL.
 */
import { constantTimeEqual, newId, sha256Hex } from '../crypto/hash.js';
import type { ApiKeyRecord, Store, TenantRecord } from '../store/store.js';
import { isUsable, KEY_FORMAT, newApiKey, ROLES, type Principal, type Role } from './keys.js';

export interface CreatedTenant {
  readonly tenant: TenantRecord;
  /** The tenant's first key (role admin, named `initial`); shown once, only its hash is kept. */
  readonly apiKey: string;
  readonly keyId: string;
}

/** Creates a tenant with one admin key. */
export async function createTenant(store: Store, name: string, now: Date): Promise<CreatedTenant> {
  const tenant = { id: newId('ten'), name };
  const key = newApiKey(tenant.id, { name: 'initial', roles: ['admin'], expiresAt: null }, now);
  await store.createTenant({ ...tenant, createdAt: now }, key.record);
  return { tenant, apiKey: key.apiKey, keyId: key.record.id };
}

/** How long another instance may keep accepting a key revoked elsewhere. */
export const KEY_CACHE_TTL_MS = 30_000;

/** Resolves API keys to principals; keys found are cached briefly (see the module comment). */
export class Authenticator {
  private readonly cache = new Map<string, { key: ApiKeyRecord; until: number }>();
  /** Bumped by forget and forgetAll: a store read begun before one is not cached. */
  private generation = 0;

  constructor(
    private readonly store: Store,
    private readonly nowMs: () => number,
    private readonly ttlMs = KEY_CACHE_TTL_MS,
  ) {}

  /** The principal of this key, or null (unknown, wrong secret, revoked or expired). Throws only when the store is unreachable. */
  async authenticate(apiKey: string): Promise<Principal | null> {
    const m = KEY_FORMAT.exec(apiKey);
    if (m === null) return null;
    const keyId = m[1] as string;
    const now = this.nowMs();
    const cached = this.cache.get(keyId);
    const hit = cached !== undefined && cached.until > now;
    // A forget during the read below may be for a revocation that committed after the read saw the
    // key: answer from the read, but do not cache it, or the revoked key would be accepted for a TTL.
    const generation = this.generation;
    const key = hit ? cached.key : ((await this.store.apiKeyById(keyId))?.key ?? null);
    if (key === null) return null;
    if (!constantTimeEqual(sha256Hex(apiKey), key.keyHash)) return null;
    if (!hit && this.generation === generation) this.cache.set(keyId, { key, until: now + this.ttlMs });
    if (!isUsable(key, now)) return null;
    return {
      tenantId: key.tenantId,
      keyId: key.id,
      roles: key.roles.filter((r): r is Role => (ROLES as readonly string[]).includes(r)),
      expiresAt: key.expiresAt,
    };
  }

  /** Drops a key from this instance's cache: its revocation holds here from the next request. */
  forget(keyId: string): void {
    this.generation++;
    this.cache.delete(keyId);
  }

  /** Drops every cached key: revocations may have been missed (the listening connection was down). */
  forgetAll(): void {
    this.generation++;
    this.cache.clear();
  }
}
