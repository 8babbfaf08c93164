/**
 * Tenants and their API keys. A key is `wk.<key id>.<secret>`: the key id finds the tenant, and the
 * SHA-256 of the whole key is compared in constant time with the stored hash (the key itself is
 * never stored).
 */
import { constantTimeEqual, newId, randomToken, sha256Hex } from '../crypto/hash.js';
import type { Store, TenantRecord } from '../store/store.js';

export interface CreatedTenant {
  readonly tenant: TenantRecord;
  /** Shown once; only its hash is kept. */
  readonly apiKey: string;
}

export async function createTenant(store: Store, name: string, now: Date): Promise<CreatedTenant> {
  const keyId = randomToken(9);
  const apiKey = `wk.${keyId}.${randomToken(32)}`;
  const tenant = { id: newId('ten'), name, keyId, keyHash: sha256Hex(apiKey) };
  await store.createTenant({ ...tenant, createdAt: now });
  return { tenant, apiKey };
}

const KEY_FORMAT = /^wk\.([A-Za-z0-9_-]{12})\.[A-Za-z0-9_-]{43}$/;

/** Resolves API keys to tenants; tenants found are cached briefly (tenants are never deleted). */
export class Authenticator {
  private readonly cache = new Map<string, { tenant: TenantRecord; until: number }>();

  constructor(
    private readonly store: Store,
    private readonly nowMs: () => number,
    private readonly ttlMs = 30_000,
  ) {}

  /** The tenant whose key this is, or null. Throws only when the store is unreachable. */
  async authenticate(apiKey: string): Promise<TenantRecord | null> {
    const m = KEY_FORMAT.exec(apiKey);
    if (m === null) return null;
    const keyId = m[1] as string;
    const cached = this.cache.get(keyId);
    const tenant = cached !== undefined && cached.until > this.nowMs() ? cached.tenant : await this.store.tenantByKeyId(keyId);
    if (tenant === null) return null;
    if (!constantTimeEqual(sha256Hex(apiKey), tenant.keyHash)) return null;
    this.cache.set(keyId, { tenant, until: this.nowMs() + this.ttlMs });
    return tenant;
  }
}
