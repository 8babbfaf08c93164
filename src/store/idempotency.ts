/**
 * Idempotency records with four states: unseen (no row), in flight, completed and in doubt.
 *
 * A key is claimed atomically (insert, or take-over of a stale or in-doubt claim). The deciding
 * batch transaction locks the record first (the fence) and completes it in the same commit as the
 * audit row, so "completed" holds exactly when the decision committed. A failure whose outcome is
 * unknown marks the key in doubt instead of releasing it; because the original decision can only
 * commit while it still owns the key, a later repeat that takes the key over is never a second
 * charge (README "Idempotency").
 */
import { and, eq, lt, or } from 'drizzle-orm';
import type { BatchConn } from './batch.js';
import { everyRecordMatched, type Db } from './store.js';
import { idempotency } from './schema.js';

/** How long a claim is left to its owner before a repeat may take it over. */
export const CLAIM_LEASE_MS = 10_000;

export interface IdemKey {
  readonly tenantId: string;
  readonly scope: 'mint' | 'attenuate' | 'approve';
  readonly key: string;
}

export interface Fence extends IdemKey {
  readonly owner: string;
  readonly requestHash: string;
  /** The seal to store with the record's answer (src/service/seal.ts); a record stored without one is never answered from. */
  readonly seal?: (response: StoredResponse) => string;
}

export interface StoredResponse {
  readonly status: number;
  readonly body: unknown;
}

export type Claim =
  | { readonly kind: 'claimed'; readonly fence: Fence }
  | { readonly kind: 'completed'; readonly response: StoredResponse; readonly requestHash: string; readonly seal: string | null }
  | { readonly kind: 'conflict' }
  | { readonly kind: 'in_flight' };

const where = (k: IdemKey) => and(eq(idempotency.tenantId, k.tenantId), eq(idempotency.scope, k.scope), eq(idempotency.key, k.key));

/** Claims `key` for a request whose canonical hash is `requestHash`. */
export async function claim(db: Db, k: IdemKey, requestHash: string, owner: string, now: Date): Promise<Claim> {
  for (let attempt = 0; attempt < 3; attempt++) {
    const inserted = await db
      .insert(idempotency)
      .values({ ...k, requestHash, state: 'in_flight', owner, claimedAt: now })
      .onConflictDoNothing()
      .returning({ owner: idempotency.owner });
    if (inserted.length === 1) return { kind: 'claimed', fence: { ...k, owner, requestHash } };
    const [row] = await db.select().from(idempotency).where(where(k));
    if (row === undefined) continue; // released between our insert and select: try again
    const found = standing(row, requestHash, now);
    if (found !== null) return found;
    // In doubt, or a stale claim: take it over. If the old owner's batch holds the fence, this
    // waits for it to end and then matches nothing when that batch completed the key.
    const taken = await db
      .update(idempotency)
      .set({ state: 'in_flight', owner, claimedAt: now })
      .where(
        and(
          where(k),
          eq(idempotency.owner, row.owner),
          or(eq(idempotency.state, 'in_doubt'), and(eq(idempotency.state, 'in_flight'), lt(idempotency.claimedAt, new Date(now.getTime() - CLAIM_LEASE_MS)))),
        ),
      )
      .returning({ owner: idempotency.owner });
    if (taken.length === 1) return { kind: 'claimed', fence: { ...k, owner, requestHash } };
  }
  return { kind: 'in_flight' };
}

/**
 * What a claim of `k` would find, read without claiming anything: null when there is no record, or
 * one a claim would take over (in doubt, or a stale claim), so the request may be decided afresh.
 */
export async function recordOf(db: Db, k: IdemKey, requestHash: string, now: Date): Promise<Exclude<Claim, { kind: 'claimed' }> | null> {
  const [row] = await db.select().from(idempotency).where(where(k));
  return row === undefined ? null : standing(row, requestHash, now);
}

/** How an existing record answers a request hashing to `requestHash`; null when a claim may take it over. */
function standing(row: typeof idempotency.$inferSelect, requestHash: string, now: Date): Exclude<Claim, { kind: 'claimed' }> | null {
  if (row.requestHash !== requestHash) return { kind: 'conflict' };
  if (row.state === 'completed')
    return { kind: 'completed', response: { status: row.status ?? 200, body: row.response }, requestHash: row.requestHash, seal: row.seal };
  if (row.state === 'in_flight' && row.claimedAt.getTime() > now.getTime() - CLAIM_LEASE_MS) return { kind: 'in_flight' };
  return null;
}

/**
 * Each record found and locked by its primary key, in key order (a LATERAL subquery per key, which
 * the planner cannot turn into a join): as a join with the recordset, it scanned the whole table,
 * which keeps every key ever used, until that grew past some tens of thousands of rows (4.6 ms at
 * 20,000; test/store/plans.test.ts).
 */
export const LOCK_FENCES = `SELECT i.* FROM (SELECT DISTINCT tenant_id, scope, key FROM jsonb_to_recordset($1::jsonb) AS x(tenant_id text, scope text, key text)
  ORDER BY tenant_id, scope, key) AS x
CROSS JOIN LATERAL (SELECT i.tenant_id, i.scope, i.key, i.state, i.owner FROM idempotency AS i
  WHERE i.tenant_id = x.tenant_id AND i.scope = x.scope AND i.key = x.key FOR UPDATE OF i) AS i`;

/**
 * Each record found by its primary key (a LATERAL subquery per record, as in LOCK_FENCES), then
 * updated by its row address: as a join with the recordset, the planner scanned the whole table
 * while it held up to some tens of thousands of keys. The batch holds these rows locked since
 * LOCK_FENCES, so the address found is the row's current version. A record not completed would let
 * a repeat after the lease decide (and charge) again, so unless every record was, the statement
 * fails and with it the batch's COMMIT (`everyRecordMatched`, as for the charges).
 */
export const COMPLETE_FENCES = `WITH done AS (
  SELECT x.status, x.response, x.seal, i.row FROM jsonb_to_recordset($1::jsonb) AS x(tenant_id text, scope text, key text, owner text, status int, response jsonb, seal text)
  CROSS JOIN LATERAL (SELECT i.ctid AS row FROM idempotency AS i
    WHERE i.tenant_id = x.tenant_id AND i.scope = x.scope AND i.key = x.key AND i.owner = x.owner OFFSET 0) AS i
), completed AS (
  UPDATE idempotency AS i SET state = 'completed', status = done.status, response = done.response, seal = done.seal FROM done WHERE i.ctid = done.row RETURNING 1
)
SELECT ${everyRecordMatched('completed', 1, 'idempotency records completed')} AS completed`;

const fenceKey = (f: IdemKey): string => JSON.stringify([f.tenantId, f.scope, f.key]);

/**
 * Inside the batch, in one statement: lock these records and return the fences this batch still
 * owns (the record is in flight under the same owner). Locks are taken in key order.
 */
export async function lockFences(c: BatchConn, fences: readonly Fence[]): Promise<(f: Fence) => boolean> {
  if (fences.length === 0) return () => false;
  const rows = (await c.query(LOCK_FENCES, [JSON.stringify(fences.map((f) => ({ tenant_id: f.tenantId, scope: f.scope, key: f.key })))])) as {
    tenant_id: string;
    scope: string;
    key: string;
    state: string;
    owner: string;
  }[];
  const owners = new Map(rows.filter((r) => r.state === 'in_flight').map((r) => [JSON.stringify([r.tenant_id, r.scope, r.key]), r.owner]));
  return (f) => owners.get(fenceKey(f)) === f.owner;
}

/**
 * Inside the batch, after the decisions: these records completed, in the same commit as the audit
 * rows (sent, not awaited: COMMIT follows it). Only a record still held by the same owner changes.
 */
export function completeFences(c: BatchConn, done: readonly { fence: Fence; response: StoredResponse }[]): Promise<unknown> {
  if (done.length === 0) return Promise.resolve();
  const rows = done.map(({ fence: f, response: r }) => ({
    tenant_id: f.tenantId,
    scope: f.scope,
    key: f.key,
    owner: f.owner,
    status: r.status,
    response: r.body,
    seal: f.seal?.(r) ?? null,
  }));
  return c.query(COMPLETE_FENCES, [JSON.stringify(rows)]);
}

/** Nothing was committed: the key goes back to unseen. */
export async function release(db: Db, f: Fence): Promise<void> {
  await db.delete(idempotency).where(and(where(f), eq(idempotency.owner, f.owner), eq(idempotency.state, 'in_flight')));
}

/** The outcome is unknown: the key stays claimed, in doubt, until a repeat settles it. */
export async function markInDoubt(db: Db, f: Fence): Promise<void> {
  await db
    .update(idempotency)
    .set({ state: 'in_doubt' })
    .where(and(where(f), eq(idempotency.owner, f.owner), eq(idempotency.state, 'in_flight')));
}
