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
import { and, eq, lt, or, sql } from 'drizzle-orm';
import type { Db, Tx } from './store.js';
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
}

export interface StoredResponse {
  readonly status: number;
  readonly body: unknown;
}

export type Claim =
  | { readonly kind: 'claimed'; readonly fence: Fence }
  | { readonly kind: 'completed'; readonly response: StoredResponse }
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
    if (inserted.length === 1) return { kind: 'claimed', fence: { ...k, owner } };
    const [row] = await db.select().from(idempotency).where(where(k));
    if (row === undefined) continue; // released between our insert and select: try again
    if (row.requestHash !== requestHash) return { kind: 'conflict' };
    if (row.state === 'completed') return { kind: 'completed', response: { status: row.status ?? 200, body: row.response } };
    if (row.state === 'in_flight' && row.claimedAt.getTime() > now.getTime() - CLAIM_LEASE_MS) return { kind: 'in_flight' };
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
    if (taken.length === 1) return { kind: 'claimed', fence: { ...k, owner } };
  }
  return { kind: 'in_flight' };
}

/** Inside the batch: lock the record and confirm this request still owns it. */
export async function holdFence(tx: Tx, f: Fence): Promise<boolean> {
  const [row] = await tx.select({ state: idempotency.state, owner: idempotency.owner }).from(idempotency).where(where(f)).for('update');
  return row !== undefined && row.state === 'in_flight' && row.owner === f.owner;
}

/** Inside the batch, after the decision: completed, in the same commit as the audit row. */
export async function complete(tx: Tx, f: Fence, response: StoredResponse): Promise<void> {
  await tx
    .update(idempotency)
    .set({ state: 'completed', status: response.status, response: sql`${JSON.stringify(response.body)}::jsonb` })
    .where(and(where(f), eq(idempotency.owner, f.owner)));
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
