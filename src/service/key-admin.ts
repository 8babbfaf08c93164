/**
 * Key management over HTTP (admin only; the role check is the app's): create a key with roles, a
 * name and an optional lifetime; list keys without secrets or hashes; revoke one. A revocation is
 * dropped from this instance's key cache at once.
 */
import { z } from 'zod';
import type { Store } from '../store/store.js';
import { ApiError, unavailable } from './errors.js';
import { createApiKey, keyView, ROLES } from './keys.js';
import type { Reply } from './authority.js';
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

export class KeyAdmin {
  constructor(
    private readonly store: Store,
    private readonly now: () => Date,
    private readonly auth: Authenticator,
  ) {}

  async create(tenantId: string, body: CreateKeyBody): Promise<Reply> {
    const now = this.now();
    const expiresAt = body.ttl_s === undefined ? null : new Date(now.getTime() + body.ttl_s * 1000);
    const { record, apiKey } = await guard(() => createApiKey(this.store, tenantId, { name: body.name, roles: body.roles, expiresAt }, now));
    return { status: 201, body: { ...keyView(record, now), api_key: apiKey } };
  }

  async list(tenantId: string): Promise<Reply> {
    const now = this.now();
    const keys = await guard(() => this.store.listApiKeys(tenantId));
    return { status: 200, body: { keys: keys.map((k) => keyView(k, now)) } };
  }

  async revoke(tenantId: string, keyId: string): Promise<Reply> {
    const now = this.now();
    const key = await guard(() => this.store.revokeApiKey(tenantId, keyId, now));
    if (key === null) throw new ApiError(404, 'not_found', 'no such API key');
    this.auth.forget(keyId);
    return { status: 200, body: keyView(key, now) };
  }
}

async function guard<R>(f: () => Promise<R>): Promise<R> {
  try {
    return await f();
  } catch {
    throw unavailable();
  }
}
