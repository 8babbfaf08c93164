/**
 * Scoped API keys (issue 14): many keys per tenant, each with roles, a name, an optional expiry,
 * revocable. A key is `wk.<key id>.<secret>`; only the SHA-256 of the whole key is stored.
 *
 * Roles: `runtime` (mint, revoke, read capabilities), `spawner` (attenuate), `driver` (approve),
 * `auditor` (audit, verify, receipts, read capabilities), `approver` (resolve calls waiting for a
 * person, issue 17), `admin` (everything, and key management and tool registration: a tool's schema
 * and side-effect class decide what a call needs, a policy change like a key's roles).
 */
import { randomToken, sha256Hex } from '../crypto/hash.js';
import type { ApiKeyRecord } from '../store/store.js';

export const ROLES = ['runtime', 'spawner', 'driver', 'auditor', 'approver', 'admin'] as const;
export type Role = (typeof ROLES)[number];

/** What an authenticated caller is: its tenant and the key it used. */
export interface Principal {
  readonly tenantId: string;
  readonly keyId: string;
  readonly roles: readonly Role[];
  /** When the key stops being usable; null: never. A key it makes over the API may not outlive it. */
  readonly expiresAt: Date | null;
}

/** A new key: its record, and the key itself, shown once. */
export interface CreatedKey {
  readonly record: ApiKeyRecord;
  readonly apiKey: string;
}

/** The public id of a key: found in `wk.<id>.<secret>`. */
export const KEY_FORMAT = /^wk\.([A-Za-z0-9_-]{12})\.[A-Za-z0-9_-]{43}$/;

/** Makes a key record and its secret (not stored). */
export function newApiKey(
  tenantId: string,
  spec: { name: string; roles: readonly Role[]; expiresAt: Date | null; createdBy?: string | null },
  now: Date,
): CreatedKey {
  const id = randomToken(9);
  const apiKey = `wk.${id}.${randomToken(32)}`;
  const roles = ROLES.filter((r) => spec.roles.includes(r));
  return {
    apiKey,
    record: {
      id,
      tenantId,
      name: spec.name,
      roles,
      keyHash: sha256Hex(apiKey),
      createdAt: now,
      expiresAt: spec.expiresAt,
      revokedAt: null,
      createdBy: spec.createdBy ?? null,
    },
  };
}

/** A key as listed (API and CLI): never its hash. */
export function keyView(k: ApiKeyRecord, now: Date): Record<string, unknown> {
  const state = k.revokedAt !== null ? 'revoked' : k.expiresAt !== null && k.expiresAt.getTime() <= now.getTime() ? 'expired' : 'active';
  return {
    key_id: k.id,
    name: k.name,
    roles: k.roles,
    created_at: k.createdAt.toISOString(),
    expires_at: k.expiresAt?.toISOString() ?? null,
    revoked_at: k.revokedAt?.toISOString() ?? null,
    created_by: k.createdBy,
    state,
  };
}

/** Whether the key may be used at `now`. */
export function isUsable(k: ApiKeyRecord, nowMs: number): boolean {
  return k.revokedAt === null && (k.expiresAt === null || k.expiresAt.getTime() > nowMs);
}

/** The roles a request needs (any one of them; `admin` always does). Unlisted /v1 routes need admin: fail closed. */
export function rolesFor(route: string): readonly Role[] {
  const needs: Record<string, readonly Role[]> = {
    'POST /v1/capabilities': ['runtime'],
    'POST /v1/revoke': ['runtime'],
    'GET /v1/capabilities/:id': ['runtime', 'auditor'],
    'POST /v1/attenuate': ['spawner'],
    'POST /v1/approve': ['driver'],
    'GET /v1/audit': ['auditor'],
    'GET /v1/audit/trajectories': ['auditor'],
    'GET /v1/audit/verify': ['auditor'],
    'GET /v1/audit/:id/receipt': ['auditor'],
    // issue 17: anyone who calls or audits tools may read them; only admin registers them.
    'GET /v1/tools': ['runtime', 'spawner', 'driver', 'auditor', 'approver'],
    'GET /v1/tools/:name': ['runtime', 'spawner', 'driver', 'auditor', 'approver'],
    'GET /v1/approvals': ['approver', 'auditor'],
    // The driver long-polls the approval of its own call.
    'GET /v1/approvals/:id': ['approver', 'auditor', 'driver'],
    'POST /v1/approvals/:id': ['approver'],
  };
  return [...(needs[route] ?? []), 'admin'];
}

/** The route a request is for, as `rolesFor` names it (ids replaced by `:id`). */
export function routeOf(method: string, path: string): string {
  const p = path
    .replace(/^\/v1\/capabilities\/[^/]+$/, '/v1/capabilities/:id')
    .replace(/^\/v1\/tools\/[^/]+$/, '/v1/tools/:name')
    .replace(/^\/v1\/approvals\/[^/]+$/, '/v1/approvals/:id')
    .replace(/^\/v1\/audit\/(?!verify$)[^/]+\/receipt$/, '/v1/audit/:id/receipt');
  return `${method} ${p}`;
}

/** Whether a principal holds one of the roles. */
export function hasRole(p: Principal, needed: readonly Role[]): boolean {
  return p.roles.some((r) => needed.includes(r));
}
