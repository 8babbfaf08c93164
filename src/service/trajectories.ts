/**
 * GET /v1/audit/trajectories (auditor): the recently active delegation trees of the tenant, each
 * with its grants, denials, calls and spend, for the operator's page (src/http/ui.ts).
 */
import { fromMicro } from '../core/money.js';
import type { Store } from '../store/store.js';
import { recentTrajectories } from '../store/trajectories.js';
import type { Reply } from './authority.js';

/** Most trees one answer lists, and how many by default. */
export const MAX_TRAJECTORIES = 100;
export const DEFAULT_TRAJECTORIES = 20;

/** The tenant's recently active trees, most recent first. */
export async function trajectoriesReply(store: Store, tenantId: string, limit: number): Promise<Reply> {
  const trees = await recentTrajectories(store.db, tenantId, limit);
  return {
    status: 200,
    body: {
      trajectories: trees.map((t) => ({
        root_trajectory_id: t.rootTrajectoryId,
        first_at: t.firstAt.toISOString(),
        last_at: t.lastAt.toISOString(),
        grants: t.grants,
        denials: t.denials,
        calls: t.calls,
        spent: fromMicro(t.spentMicro),
      })),
    },
  };
}
