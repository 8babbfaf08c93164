/**
 * The recent-trajectories summary (GET /v1/audit/trajectories, the operator's page): the delegation
 * trees with the latest audit activity, each with its whole counts. Two index-bounded reads: the
 * tenant's newest rows (audit_pos_idx) name the trees, then each named tree's rows
 * (audit_root_trajectory_idx) are counted in full.
 */
import { and, desc, eq, inArray, isNotNull, max, min, sql } from 'drizzle-orm';
import { audit } from './schema.js';
import type { Db } from './store.js';

/** How many of the tenant's newest audit rows are looked at to find the recently active trees. */
export const RECENT_WINDOW_ROWS = 10_000;

/** One delegation tree's audit counts, named by its root's trajectory. */
export interface TrajectorySummary {
  readonly rootTrajectoryId: string;
  readonly firstAt: Date;
  readonly lastAt: Date;
  readonly grants: number;
  readonly denials: number;
  /** Granted approvals: the calls charged. */
  readonly calls: number;
  /** Sum of the granted approvals' costs, in micro-units (as the cost column holds them). */
  readonly spentMicro: bigint;
}

/**
 * The trees with rows among the tenant's newest RECENT_WINDOW_ROWS, most recently active first.
 * Rows written before root trajectories were recorded (root_trajectory_id null) belong to none.
 */
export async function recentTrajectories(db: Db, tenantId: string, limit: number): Promise<TrajectorySummary[]> {
  const newest = db
    .select({ root: audit.rootTrajectoryId, pos: audit.pos })
    .from(audit)
    .where(eq(audit.tenantId, tenantId))
    .orderBy(desc(audit.pos))
    .limit(RECENT_WINDOW_ROWS)
    .as('newest');
  const recent = await db
    .select({ root: newest.root })
    .from(newest)
    .where(isNotNull(newest.root))
    .groupBy(newest.root)
    .orderBy(desc(max(newest.pos)))
    .limit(limit);
  const roots = recent.map((r) => r.root).filter((r): r is string => r !== null);
  if (roots.length === 0) return [];
  // A dry run (approve with dry_run) decided nothing that happened: counted neither as a decision nor as a charge.
  const real = sql`(${audit.detail}->>'dry_run') is null`;
  const isApproveGrant = sql`${audit.event} = 'approve' and ${audit.decision} = 'grant' and ${real}`;
  // A person's resolution of an approval (issue 17) is not a decision of its own: the call's outcome row is.
  const decided = sql`${real} and ${audit.event} <> 'approval'`;
  const counts = await db
    .select({
      root: audit.rootTrajectoryId,
      firstAt: min(audit.at),
      lastAt: max(audit.at),
      grants: sql<number>`count(*) filter (where ${audit.decision} = 'grant' and ${decided})`.mapWith(Number),
      denials: sql<number>`count(*) filter (where ${audit.decision} = 'deny' and ${decided})`.mapWith(Number),
      calls: sql<number>`count(*) filter (where ${isApproveGrant})`.mapWith(Number),
      spent: sql<string>`coalesce(sum(${audit.cost}) filter (where ${isApproveGrant}), 0)::text`,
    })
    .from(audit)
    .where(and(eq(audit.tenantId, tenantId), inArray(audit.rootTrajectoryId, roots)))
    .groupBy(audit.rootTrajectoryId);
  const byRoot = new Map(counts.map((c) => [c.root, c]));
  return roots.flatMap((root) => {
    const c = byRoot.get(root);
    if (c === undefined || c.firstAt === null || c.lastAt === null) return [];
    return [
      { rootTrajectoryId: root, firstAt: c.firstAt, lastAt: c.lastAt, grants: c.grants, denials: c.denials, calls: c.calls, spentMicro: BigInt(c.spent) },
    ];
  });
}
