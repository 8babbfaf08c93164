/**
 * The drizzle schema; `npm run db:generate` turns it into the SQL migrations under db/migrations.
 * Money is in micro-units as numeric(39,0): exact, and no sum of charges can overflow it.
 */
import { sql } from 'drizzle-orm';
import { bigint, check, customType, index, integer, jsonb, numeric, pgTable, primaryKey, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core';

const micro = (name: string) => numeric(name, { precision: 39, scale: 0 });
const at = (name: string) => timestamp(name, { withTimezone: true, precision: 3, mode: 'date' });
/** A 64-bit transaction id (PostgreSQL `xid8`, never wraps), read as text. */
const xid8 = customType<{ data: string }>({ dataType: () => 'xid8' });

export const tenants = pgTable('tenants', {
  id: text('id').primaryKey(),
  name: text('name').notNull().unique(),
  createdAt: at('created_at').notNull(),
});

/**
 * A tenant's API keys (issue 14), each with roles: `runtime`, `spawner`, `driver`, `auditor`,
 * `admin`. `id` is the public part of the key (`wk.<id>.<secret>`), used to find it; the whole key is
 * stored only as SHA-256. A key stops working at `expires_at` or once `revoked_at` is set.
 */
export const apiKeys = pgTable(
  'api_keys',
  {
    id: text('id').primaryKey(),
    tenantId: text('tenant_id')
      .notNull()
      .references(() => tenants.id),
    name: text('name').notNull(),
    roles: text('roles').array().notNull(),
    keyHash: text('key_hash').notNull(),
    createdAt: at('created_at').notNull(),
    expiresAt: at('expires_at'),
    revokedAt: at('revoked_at'),
    /**
     * The key that made this one over the API (null: made by the operator's CLI, or before this was
     * kept). Revoking a key revokes the keys it made, and theirs: a leaked key's makings go with it.
     */
    createdBy: text('created_by'),
  },
  (t) => [index('api_keys_tenant_idx').on(t.tenantId), index('api_keys_created_by_idx').on(t.tenantId, t.createdBy)],
);

/**
 * Head of each audit hash chain: one per delegation tree (`tree_id` = its root capability's id), and
 * one per tenant (`tree_id` = '') for the decisions that belong to no known tree (a bad token, a
 * refused attenuation of an unknown parent). A decision locks only its own tree's head, so decisions
 * on different trees never wait on each other. `xid` is the transaction that last moved the head: the
 * checkpointer finds the trees changed since its last snapshot through it (src/audit/checkpointer.ts).
 * No index covers `xid` (nor seq, hash, last_id), so moving a head is a HOT update that touches no
 * index, and the table keeps half of each page free for them (fillfactor 50, migration 0004): every
 * batch moves a head per tree it writes, while the checkpointer reads a tenant's heads once per
 * checkpoint through the primary key's tenant_id prefix (bench/RESULTS.md).
 */
export const auditHeads = pgTable(
  'audit_heads',
  {
    tenantId: text('tenant_id')
      .notNull()
      .references(() => tenants.id),
    treeId: text('tree_id').notNull(),
    seq: bigint('seq', { mode: 'number' }).notNull(),
    hash: text('hash').notNull(),
    lastId: text('last_id'),
    xid: xid8('xid')
      .notNull()
      .default(sql`pg_current_xact_id()`),
  },
  (t) => [primaryKey({ columns: [t.tenantId, t.treeId] })],
);

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
    /** An HMAC over key, request hash and answer (src/service/seal.ts): a record whose seal fails is never answered from. */
    seal: text('seal'),
  },
  (t) => [primaryKey({ columns: [t.tenantId, t.scope, t.key] }), check('idempotency_state_ck', sql`${t.state} IN ('in_flight', 'completed', 'in_doubt')`)],
);

/**
 * The audit log: one row per decision, hash-chained per delegation tree (hash = SHA-256(prev_hash ‖
 * row), `seq` counts within the tree). `pos` orders a tenant's rows for listing; signed checkpoints
 * (audit_checkpoints) commit to every row through a Merkle tree whose leaves are the rows' hashes.
 */
export const audit = pgTable(
  'audit',
  {
    tenantId: text('tenant_id').notNull(),
    treeId: text('tree_id').notNull(),
    seq: bigint('seq', { mode: 'number' }).notNull(),
    pos: bigint('pos', { mode: 'number' }).notNull().generatedByDefaultAsIdentity(),
    id: text('id').notNull().unique(),
    at: at('at').notNull(),
    event: text('event', { enum: ['mint', 'attenuate', 'approve', 'revoke', 'access', 'approval', 'tool'] }).notNull(),
    decision: text('decision', { enum: ['grant', 'deny', 'pending'] }).notNull(),
    reasonCode: text('reason_code'),
    capabilityId: text('capability_id'),
    parentId: text('parent_id'),
    trajectoryId: text('trajectory_id'),
    op: text('op'),
    target: jsonb('target'),
    cost: micro('cost'),
    callId: text('call_id'),
    detail: jsonb('detail'),
    /** The API key that made the call (its public id, never the secret); null on rows written before keys had ids here. */
    keyId: text('key_id'),
    /** The request's id (X-Request-Id), to find its log lines. */
    requestId: text('request_id'),
    /** The trajectory of the row's delegation tree's root: a trajectory's view includes its subagents' rows. */
    rootTrajectoryId: text('root_trajectory_id'),
    prevHash: text('prev_hash').notNull(),
    hash: text('hash').notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.treeId, t.seq] }),
    uniqueIndex('audit_pos_idx').on(t.tenantId, t.pos),
    index('audit_capability_idx').on(t.tenantId, t.capabilityId, t.pos),
    index('audit_trajectory_idx').on(t.tenantId, t.trajectoryId, t.pos),
    index('audit_root_trajectory_idx').on(t.tenantId, t.rootTrajectoryId, t.pos),
    /** The rows of a call asked for approval, by its approval id: only those rows enter it. */
    index('audit_approval_idx')
      .on(t.tenantId, sql`(${t.detail}->>'approval_id')`)
      .where(sql`${t.event} = 'approve' AND jsonb_exists(${t.detail}, 'approval_id')`),
    /** A tool's registrations, by its name: only those rows enter it. */
    index('audit_tool_idx')
      .on(t.tenantId, sql`(${t.detail}->>'tool')`)
      .where(sql`${t.event} = 'tool'`),
  ],
);

/**
 * Signed checkpoints, per tenant, numbered from 1: each commits to the first `size` leaves of the
 * tenant's audit Merkle tree (RFC 9162) and names the previous one. `jws` is what was signed; the
 * same lines go to a sink outside the database. `snapshot` (a pg_snapshot as text) is where the
 * next checkpoint starts looking for changed trees.
 */
export const auditCheckpoints = pgTable(
  'audit_checkpoints',
  {
    tenantId: text('tenant_id')
      .notNull()
      .references(() => tenants.id),
    n: bigint('n', { mode: 'number' }).notNull(),
    size: bigint('size', { mode: 'number' }).notNull(),
    root: text('root').notNull(),
    jws: text('jws').notNull(),
    /** The RFC 9162 consistency proof from the previous checkpoint's tree to this one (hex). */
    consistency: jsonb('consistency').notNull(),
    snapshot: text('snapshot').notNull(),
    at: at('at').notNull(),
  },
  (t) => [primaryKey({ columns: [t.tenantId, t.n] })],
);

/**
 * Where each tree's rows sit among the leaves: rows `from_seq`..`to_seq` of tree `tree_id` are leaves
 * `leaf_start`.. in order. One row per tree per checkpoint, not per audit row.
 */
export const auditRanges = pgTable(
  'audit_ranges',
  {
    tenantId: text('tenant_id').notNull(),
    leafStart: bigint('leaf_start', { mode: 'number' }).notNull(),
    treeId: text('tree_id').notNull(),
    fromSeq: bigint('from_seq', { mode: 'number' }).notNull(),
    toSeq: bigint('to_seq', { mode: 'number' }).notNull(),
  },
  (t) => [primaryKey({ columns: [t.tenantId, t.leafStart] }), uniqueIndex('audit_ranges_tree_idx').on(t.tenantId, t.treeId, t.toSeq)],
);

/** The Merkle tree's node hashes in tiles of 256 (src/audit/tiles.ts), hex-encoded. */
export const auditTiles = pgTable(
  'audit_tiles',
  {
    tenantId: text('tenant_id').notNull(),
    level: integer('level').notNull(),
    idx: bigint('idx', { mode: 'number' }).notNull(),
    hashes: text('hashes').notNull(),
  },
  (t) => [primaryKey({ columns: [t.tenantId, t.level, t.idx] })],
);

/**
 * The tool registry (issue 17): every version of every tool of a tenant, never changed once written.
 * A change registers version n + 1; approvals record the version they were asked under.
 */
export const tools = pgTable(
  'tools',
  {
    tenantId: text('tenant_id')
      .notNull()
      .references(() => tenants.id),
    name: text('name').notNull(),
    version: integer('version').notNull(),
    description: text('description').notNull(),
    inputSchema: jsonb('input_schema').notNull(),
    sideEffect: text('side_effect', { enum: ['read_only', 'idempotent', 'destructive', 'irreversible'] }).notNull(),
    right: text('right').notNull(),
    /** `{pointer, kind}`: where in the args the call's target is, and what kind of object it is. */
    target: jsonb('target').notNull(),
    warnings: jsonb('warnings').notNull(),
    /** The API key that registered this version (its public id). */
    keyId: text('key_id'),
    createdAt: at('created_at').notNull(),
    /** An HMAC over every other column (src/service/tools.ts): a version whose seal fails is never used nor shown. */
    seal: text('seal'),
  },
  (t) => [primaryKey({ columns: [t.tenantId, t.name, t.version] })],
);

/**
 * Calls waiting for a person (issue 17): asked by a driver, resolved once by an approver key, or
 * expired. Changed only by decision units holding the capability's tree lock, so an approval is
 * resolved, and its grant charged, exactly once however many instances answer. `claims` are the
 * verified capability claims the call was asked under; `outcome` the approve answer once decided.
 */
export const approvals = pgTable(
  'approvals',
  {
    id: text('id').primaryKey(),
    tenantId: text('tenant_id')
      .notNull()
      .references(() => tenants.id),
    capabilityId: text('capability_id').notNull(),
    trajectoryId: text('trajectory_id').notNull(),
    tool: text('tool').notNull(),
    toolVersion: integer('tool_version').notNull(),
    sideEffect: text('side_effect').notNull(),
    callId: text('call_id'),
    op: text('op').notNull(),
    target: jsonb('target').notNull(),
    args: jsonb('args').notNull(),
    cost: micro('cost').notNull(),
    claims: jsonb('claims').notNull(),
    /**
     * The API key (public id) that asked for the call: it may not resolve the approval itself
     * (`self_approval`). Null on rows asked before it was kept (migration 0005).
     */
    requestedBy: text('requested_by'),
    state: text('state', { enum: ['pending', 'approved', 'rejected', 'expired'] }).notNull(),
    createdAt: at('created_at').notNull(),
    expiresAt: at('expires_at').notNull(),
    resolvedAt: at('resolved_at'),
    resolvedBy: text('resolved_by'),
    note: text('note'),
    outcome: jsonb('outcome'),
    /** An HMAC over every other column (src/service/approvals.ts): a row whose seal fails is never shown nor resolved. */
    seal: text('seal'),
  },
  (t) => [
    index('approvals_pending_idx').on(t.tenantId, t.state, t.createdAt),
    check('approvals_state_ck', sql`${t.state} IN ('pending', 'approved', 'rejected', 'expired')`),
  ],
);
