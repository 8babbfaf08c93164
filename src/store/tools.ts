/**
 * Tool registry and approval rows (issue 17): the reads beside the store, and the statements the
 * decision units send inside their batch transaction (plain SQL with text parameters, as the
 * writer's own statements are, so both drivers pass them alike).
 */
import { and, asc, desc, eq, isNotNull, sql } from 'drizzle-orm';
import { approvals, audit, tools } from './schema.js';
import type { Db } from './store.js';

export type ToolRecord = typeof tools.$inferSelect;
export type ApprovalRecord = typeof approvals.$inferSelect;

/** A tool's latest version, or a given one; null when the tenant has no such tool (version). */
export async function findTool(db: Db, tenantId: string, name: string, version?: number): Promise<ToolRecord | null> {
  const where = and(eq(tools.tenantId, tenantId), eq(tools.name, name), version === undefined ? undefined : eq(tools.version, version));
  const rows = await db.select().from(tools).where(where).orderBy(desc(tools.version)).limit(1);
  return rows[0] ?? null;
}

/**
 * The highest version of a tool its registrations' audit rows name (null: none), through the partial
 * index audit_tool_idx. The audit is chained and checkpointed: a version removed from `tools` is
 * still named here.
 */
export async function latestRegistered(db: Db, tenantId: string, name: string): Promise<number | null> {
  const [row] = await db
    .select({ v: sql<number | null>`max((${audit.detail}->>'version')::int)` })
    .from(audit)
    .where(and(eq(audit.tenantId, tenantId), eq(audit.event, 'tool'), sql`(${audit.detail}->>'tool') = ${name}`));
  return row?.v === null || row?.v === undefined ? null : Number(row.v);
}

/** The latest version of every tool of the tenant, by name. */
export async function listTools(db: Db, tenantId: string): Promise<ToolRecord[]> {
  const rows = await db.selectDistinctOn([tools.name]).from(tools).where(eq(tools.tenantId, tenantId)).orderBy(asc(tools.name), desc(tools.version));
  return rows;
}

export async function findApproval(db: Db, tenantId: string, id: string): Promise<ApprovalRecord | null> {
  const rows = await db
    .select()
    .from(approvals)
    .where(and(eq(approvals.tenantId, tenantId), eq(approvals.id, id)))
    .limit(1);
  return rows[0] ?? null;
}

/** The tenant's approvals in a state (oldest first, so the longest-waiting call is on top). */
export async function listApprovals(db: Db, tenantId: string, state: ApprovalRecord['state'], limit: number): Promise<ApprovalRecord[]> {
  return (
    db
      .select()
      .from(approvals)
      // Rows without a seal (from before seals) are never shown: they would take the list's first places.
      .where(and(eq(approvals.tenantId, tenantId), eq(approvals.state, state), isNotNull(approvals.seal)))
      .orderBy(state === 'pending' ? asc(approvals.createdAt) : desc(approvals.createdAt))
      .limit(limit)
  );
}

/** The latest version of a tool, locked (its tenant's chain head is held too, so versions never race). */
export const LATEST_TOOL = `SELECT version, description, input_schema, side_effect, "right", target, warnings, key_id, created_at, seal FROM tools
WHERE tenant_id = $1 AND name = $2 ORDER BY version DESC LIMIT 1`;

export const INSERT_TOOL = `INSERT INTO tools (tenant_id, name, version, description, input_schema, side_effect, "right", target, warnings, key_id, created_at, seal)
VALUES ($1, $2, $3::int, $4, $5::jsonb, $6, $7, $8::jsonb, $9::jsonb, $10, $11::timestamptz, $12)`;

export const INSERT_APPROVAL = `INSERT INTO approvals (id, tenant_id, capability_id, trajectory_id, tool, tool_version, side_effect, call_id, op, target, args, cost, claims,
  state, created_at, expires_at, requested_by, seal)
VALUES ($1, $2, $3, $4, $5, $6::int, $7, $8, $9, $10::jsonb, $11::jsonb, $12::numeric, $13::jsonb, 'pending', $14::timestamptz, $15::timestamptz, $16, $17)`;

/** The approval row, locked for the unit that may resolve or expire it. */
export const LOCK_APPROVAL = `SELECT id, state, expires_at, outcome FROM approvals WHERE tenant_id = $1 AND id = $2 FOR UPDATE`;

/**
 * An outcome row (approve, grant or deny) of an approval already in the audit, if any. Found through
 * the partial index audit_approval_idx, which holds only rows that name an approval.
 */
export const EARLIER_OUTCOME = `SELECT id FROM audit WHERE tenant_id = $1 AND (detail->>'approval_id') = $2
  AND event = 'approve' AND decision <> 'pending' AND jsonb_exists(detail, 'approval_id') LIMIT 1`;

export const SETTLE_APPROVAL = `UPDATE approvals SET state = $3, resolved_at = $4::timestamptz, resolved_by = $5, note = $6, outcome = $7::jsonb, seal = $8
WHERE tenant_id = $1 AND id = $2 AND state = 'pending'`;
