/**
 * The drizzle schema; `npm run db:generate` turns it into the SQL migrations under db/migrations.
 * Money is in micro-units as numeric(39,0): exact, and no sum of charges can overflow it.
 */
import { sql } from 'drizzle-orm';
import { bigint, check, index, integer, jsonb, numeric, pgTable, primaryKey, text, timestamp } from 'drizzle-orm/pg-core';

const micro = (name: string) => numeric(name, { precision: 39, scale: 0 });
const at = (name: string) => timestamp(name, { withTimezone: true, precision: 3, mode: 'date' });

export const tenants = pgTable('tenants', {
  id: text('id').primaryKey(),
  name: text('name').notNull().unique(),
  /** Public part of the API key, used to find the tenant; the secret is stored only as SHA-256. */
  keyId: text('key_id').notNull().unique(),
  keyHash: text('key_hash').notNull(),
  createdAt: at('created_at').notNull(),
});

/** Head of each tenant's audit hash chain; its row lock orders every decision of the tenant. */
export const auditHeads = pgTable('audit_heads', {
  tenantId: text('tenant_id')
    .primaryKey()
    .references(() => tenants.id),
  seq: bigint('seq', { mode: 'number' }).notNull(),
  hash: text('hash').notNull(),
  lastId: text('last_id'),
});

export const capabilities = pgTable(
  'capabilities',
  {
    id: text('id').primaryKey(),
    tenantId: text('tenant_id')
      .notNull()
      .references(() => tenants.id),
    trajectoryId: text('trajectory_id').notNull(),
    parentId: text('parent_id'),
    /** Ids from the root down to the parent: the chain charged by every approval. */
    ancestors: text('ancestors').array().notNull(),
    depth: integer('depth').notNull(),
    rights: text('rights').array().notNull(),
    objects: jsonb('objects').notNull(),
    predicate: jsonb('predicate').notNull(),
    budget: micro('budget'),
    maxCalls: bigint('max_calls', { mode: 'number' }),
    spent: micro('spent').notNull().default('0'),
    calls: bigint('calls', { mode: 'number' }).notNull().default(0),
    kid: text('kid').notNull(),
    issuedAt: at('issued_at').notNull(),
    expiresAt: at('expires_at').notNull(),
    revokedAt: at('revoked_at'),
    revokeReason: text('revoke_reason'),
  },
  (t) => [
    index('capabilities_parent_idx').on(t.parentId),
    index('capabilities_trajectory_idx').on(t.tenantId, t.trajectoryId),
    check('capabilities_spent_ck', sql`${t.budget} IS NULL OR ${t.spent} <= ${t.budget}`),
    check('capabilities_calls_ck', sql`${t.maxCalls} IS NULL OR ${t.calls} <= ${t.maxCalls}`),
  ],
);

/** Idempotency records: absent = unseen; else in_flight, completed or in_doubt. */
export const idempotency = pgTable(
  'idempotency',
  {
    tenantId: text('tenant_id').notNull(),
    scope: text('scope').notNull(),
    key: text('key').notNull(),
    requestHash: text('request_hash').notNull(),
    state: text('state', { enum: ['in_flight', 'completed', 'in_doubt'] }).notNull(),
    owner: text('owner').notNull(),
    claimedAt: at('claimed_at').notNull(),
    status: integer('status'),
    response: jsonb('response'),
  },
  (t) => [primaryKey({ columns: [t.tenantId, t.scope, t.key] }), check('idempotency_state_ck', sql`${t.state} IN ('in_flight', 'completed', 'in_doubt')`)],
);

/** The audit log: one row per decision, hash-chained per tenant (hash = SHA-256(prev_hash ‖ row)). */
export const audit = pgTable(
  'audit',
  {
    tenantId: text('tenant_id').notNull(),
    seq: bigint('seq', { mode: 'number' }).notNull(),
    id: text('id').notNull().unique(),
    at: at('at').notNull(),
    event: text('event', { enum: ['mint', 'attenuate', 'approve', 'revoke'] }).notNull(),
    decision: text('decision', { enum: ['grant', 'deny'] }).notNull(),
    reasonCode: text('reason_code'),
    capabilityId: text('capability_id'),
    parentId: text('parent_id'),
    trajectoryId: text('trajectory_id'),
    op: text('op'),
    target: jsonb('target'),
    cost: micro('cost'),
    callId: text('call_id'),
    detail: jsonb('detail'),
    prevHash: text('prev_hash').notNull(),
    hash: text('hash').notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.seq] }),
    index('audit_capability_idx').on(t.tenantId, t.capabilityId, t.seq),
    index('audit_trajectory_idx').on(t.tenantId, t.trajectoryId, t.seq),
  ],
);
