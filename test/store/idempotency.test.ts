/**
 * The four-state idempotency record (src/store/idempotency.ts) on a real database: unseen → claimed;
 * a repeat in flight is refused; a completed key replays its stored response; another request under
 * the same key conflicts; a failure leaves the key released or in doubt; a stale or in-doubt claim
 * is taken over, after which the old owner's decision can never commit (FenceLost), so a repeat
 * never charges twice.
 */
import { and, eq, sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import {
  CLAIM_LEASE_MS,
  claim,
  completeFences,
  lockFences,
  markInDoubt,
  release,
  type Claim,
  type Fence,
  type IdemKey,
  type StoredResponse,
} from '../../src/store/idempotency.js';
import { BatchFailed, batchRunner } from '../../src/store/batch.js';
import { idempotency } from '../../src/store/schema.js';
import { FenceLost, type DecisionUnit } from '../../src/store/writer.js';
import { BACKENDS } from '../support/db.js';
import { startHarness, type Harness } from '../support/app.js';

const HASH = 'a'.repeat(64);
const OTHER_HASH = 'b'.repeat(64);
const COST = 1_000_000n; // one unit, in micro-units

let seq = 0;
const fresh = (): string => `k-${++seq}`;

describe.each(BACKENDS)('idempotency records on %s', (backend) => {
  let h: Harness;
  let capabilityId: string;
  beforeAll(async () => {
    h = await startHarness(backend);
    const r = await h.call('POST', '/v1/capabilities', {
      trajectory_id: 'idem-store',
      rights: ['read'],
      objects: [{ kind: 'path', prefix: '/w' }],
      predicate: { budget: 1000 },
      ttl_s: 3600,
    });
    expect(r.status).toBe(201);
    capabilityId = r.body.capability_id as string;
  });
  afterAll(async () => h.close());

  const keyOf = (key = fresh(), over: Partial<IdemKey> = {}): IdemKey => ({ tenantId: h.tenantIds.a, scope: 'approve', key, ...over });
  const at = (offsetMs: number): Date => new Date(h.clock.ms + offsetMs);
  const claimAt = (k: IdemKey, owner: string, offsetMs = 0, hash = HASH): Promise<Claim> => claim(h.store.db, k, hash, owner, at(offsetMs));

  function claimed(c: Claim): Fence {
    if (c.kind !== 'claimed') throw new Error(`expected a claim, got ${c.kind}`);
    return c.fence;
  }

  async function record(k: IdemKey): Promise<{ state: string; owner: string } | null> {
    const [row] = await h.store.db
      .select({ state: idempotency.state, owner: idempotency.owner })
      .from(idempotency)
      .where(and(eq(idempotency.tenantId, k.tenantId), eq(idempotency.scope, k.scope), eq(idempotency.key, k.key)));
    return row ?? null;
  }

  const spent = async (): Promise<bigint> => BigInt((await h.store.getCapability(h.tenantIds.a, capabilityId))!.record.spent);

  /** A decision that charges the capability once and stores `response` on its key; counts its runs. */
  const runs = { n: 0 };
  const chargeUnit = (fence: Fence, response: StoredResponse): DecisionUnit<string> => ({
    tenantId: h.tenantIds.a,
    fence,
    chainOf: capabilityId,
    run: async (tx) => {
      runs.n++;
      const chain = await tx.lockChain(h.tenantIds.a, capabilityId);
      await tx.charge(
        chain.map((l) => l.id),
        COST,
      );
      return { result: 'charged', audit: null, response };
    },
  });

  /** Submits the unit; the error it fails with, or null. */
  async function submit(unit: DecisionUnit<string>): Promise<unknown> {
    try {
      await h.writer.submit(unit);
      return null;
    } catch (e) {
      return e;
    }
  }

  // ---- unseen, in flight, conflict ----------------------------------------------------------------

  test('an unseen key is claimed, and held in flight by its owner', async () => {
    const k = keyOf();
    expect(await claimAt(k, 'own-1')).toEqual({ kind: 'claimed', fence: { ...k, owner: 'own-1', requestHash: HASH } });
    expect(await record(k)).toEqual({ state: 'in_flight', owner: 'own-1' });
  });

  test.each([
    ['the same request', HASH, 'in_flight'],
    ['another request', OTHER_HASH, 'conflict'],
  ])('a repeat in flight with %s is refused: %s', async (_name, hash, kind) => {
    const k = keyOf();
    claimed(await claimAt(k, 'own-1'));
    expect(await claimAt(k, 'own-2', 1, hash)).toEqual({ kind });
    expect(await record(k)).toEqual({ state: 'in_flight', owner: 'own-1' });
  });

  test('many claims of one key at once: exactly one wins', async () => {
    const k = keyOf();
    const results = await Promise.all(Array.from({ length: 20 }, (_, i) => claimAt(k, `own-${i}`)));
    const winners = results.filter((r) => r.kind === 'claimed');
    expect(winners).toHaveLength(1);
    expect(results.filter((r) => r.kind === 'in_flight')).toHaveLength(19);
    expect((await record(k))?.owner).toBe(claimed(winners[0] as Claim).owner);
  });

  test.each([
    ['tenant', (k: IdemKey): Partial<IdemKey> => ({ tenantId: `${k.tenantId}-other` })],
    ['scope', (): Partial<IdemKey> => ({ scope: 'mint' })],
  ])('the same key under another %s is a key of its own', async (_name, other) => {
    const k = keyOf();
    claimed(await claimAt(k, 'own-1'));
    expect((await claimAt({ ...k, ...other(k) }, 'own-2')).kind).toBe('claimed');
  });

  // ---- completed ----------------------------------------------------------------------------------

  test('completed in the commit of its decision: a repeat replays the stored response and charges nothing', async () => {
    const k = keyOf();
    const fence = claimed(await claimAt(k, 'own-1'));
    const response = { status: 200, body: { decision: 'grant', audit_id: 'aud_x', budget_remaining: 9.5 } };
    const before = await spent();
    const ranBefore = runs.n;
    expect(await submit(chargeUnit(fence, response))).toBeNull();
    expect(await record(k)).toEqual({ state: 'completed', owner: 'own-1' });
    // Long after the lease too: a completed key is never taken over.
    for (const offset of [1, 3 * CLAIM_LEASE_MS])
      expect(await claimAt(k, 'own-2', offset)).toEqual({ kind: 'completed', response, requestHash: HASH, seal: null });
    expect(await claimAt(k, 'own-3', 1, OTHER_HASH)).toEqual({ kind: 'conflict' });
    expect(runs.n - ranBefore).toBe(1);
    expect((await spent()) - before).toBe(COST);
  });

  test('a completed key is neither released nor put in doubt by its owner afterwards', async () => {
    const k = keyOf();
    const fence = claimed(await claimAt(k, 'own-1'));
    expect(await submit(chargeUnit(fence, { status: 200, body: { n: 1 } }))).toBeNull();
    await release(h.store.db, fence);
    await markInDoubt(h.store.db, fence);
    expect(await record(k)).toEqual({ state: 'completed', owner: 'own-1' });
  });

  // ---- released (nothing committed) ---------------------------------------------------------------

  test('released after a failure that committed nothing: the key is unseen again', async () => {
    const k = keyOf();
    const fence = claimed(await claimAt(k, 'own-1'));
    await release(h.store.db, fence);
    expect(await record(k)).toBeNull();
    expect(await claimAt(k, 'own-2', 1, OTHER_HASH)).toEqual({ kind: 'claimed', fence: { ...k, owner: 'own-2', requestHash: OTHER_HASH } });
  });

  // ---- in doubt (outcome unknown) -----------------------------------------------------------------

  test('in doubt, the decision having not committed: a repeat takes the key over at once, the original can never commit, one charge in all', async () => {
    const k = keyOf();
    const original = claimed(await claimAt(k, 'own-1'));
    await markInDoubt(h.store.db, original);
    expect(await record(k)).toEqual({ state: 'in_doubt', owner: 'own-1' });
    // Another request under the key is still refused; the same request settles the doubt.
    expect(await claimAt(k, 'own-x', 1, OTHER_HASH)).toEqual({ kind: 'conflict' });
    const repeat = claimed(await claimAt(k, 'own-2', 1));
    expect(await record(k)).toEqual({ state: 'in_flight', owner: 'own-2' });

    const before = await spent();
    const ranBefore = runs.n;
    const lost = await submit(chargeUnit(original, { status: 200, body: { n: 1 } }));
    expect(lost).toBeInstanceOf(FenceLost);
    expect((lost as FenceLost).code).toBe('in_flight');
    expect(runs.n).toBe(ranBefore); // the original's decision never ran
    expect(await submit(chargeUnit(repeat, { status: 200, body: { n: 2 } }))).toBeNull();
    expect(await record(k)).toEqual({ state: 'completed', owner: 'own-2' });
    expect((await spent()) - before).toBe(COST);
    expect(await claimAt(k, 'own-3', 2)).toEqual({ kind: 'completed', response: { status: 200, body: { n: 2 } }, requestHash: HASH, seal: null });
  });

  test('in doubt, the decision having committed: the key stays completed and a repeat replays, never re-charging', async () => {
    const k = keyOf();
    const original = claimed(await claimAt(k, 'own-1'));
    const before = await spent();
    const ranBefore = runs.n;
    expect(await submit(chargeUnit(original, { status: 200, body: { n: 1 } }))).toBeNull();
    // The caller lost the answer (say, the connection dropped after COMMIT) and marks the key in doubt.
    await markInDoubt(h.store.db, original);
    expect(await claimAt(k, 'own-2', 1)).toEqual({ kind: 'completed', response: { status: 200, body: { n: 1 } }, requestHash: HASH, seal: null });
    expect(runs.n - ranBefore).toBe(1);
    expect((await spent()) - before).toBe(COST);
  });

  // Two sessions: the original's batch holds the fence while the caller marks it in doubt and a
  // repeat (past the lease) tries to take it over. Both must wait for the batch and then follow its
  // outcome. On PostgreSQL they block on the lock lockFences takes (the decision is written only after
  // the gate, so no other statement of the batch holds the row yet); PGlite has one session, so they queue.
  test.each([
    ['commits', 'completed', 'completed'],
    ['rolls back', 'in_doubt', 'claimed'],
  ])('racing a batch that %s: the doubt and the take-over follow its outcome', async (outcome, stateAfterDoubt, repeatKind) => {
    const k = keyOf();
    const original = claimed(await claimAt(k, 'own-1'));
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    let fenced!: () => void;
    const holding = new Promise<void>((resolve) => (fenced = resolve));
    let held = false;
    const batch = batchRunner(h.store.db)(async (c) => {
      held = (await lockFences(c, [original]))(original);
      fenced();
      await gate;
      await completeFences(c, [{ fence: original, response: { status: 200, body: { n: 1 } } }]);
      if (outcome === 'rolls back') throw new Error('rollback');
      return { value: undefined, writes: [] };
    }).catch(() => undefined);
    await holding;
    expect(held).toBe(true);
    const doubt = markInDoubt(h.store.db, original);
    const repeat = claimAt(k, 'own-2', CLAIM_LEASE_MS + 1);
    if (backend === 'postgres') await waitForLockWaits(2);
    open();
    await Promise.all([batch, doubt]);
    const r = await repeat;
    expect(r.kind).toBe(repeatKind);
    if (repeatKind === 'completed') expect(await record(k)).toEqual({ state: stateAfterDoubt, owner: 'own-1' });
    else expect(await record(k)).toEqual({ state: 'in_flight', owner: 'own-2' });
  });

  /** Waits until `n` sessions of this database wait on a lock (PostgreSQL only). */
  async function waitForLockWaits(n: number): Promise<void> {
    for (let i = 0; i < 200; i++) {
      const res = await h.store.db.execute(
        sql`SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`,
      );
      const rows = (Array.isArray(res) ? res : (res as { rows: unknown[] }).rows) as { n: number }[];
      if (Number(rows[0]?.n) >= n) return;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    throw new Error(`fewer than ${n} sessions ever waited on the fence`);
  }

  // ---- lease take-over ----------------------------------------------------------------------------

  test('a stale claim is taken over only once its lease has run out on the clock passed in, and the old owner is fenced off', async () => {
    const k = keyOf();
    const stale = claimed(await claimAt(k, 'own-1'));
    expect(await claimAt(k, 'own-2', CLAIM_LEASE_MS - 1)).toEqual({ kind: 'in_flight' });
    expect(await claimAt(k, 'own-2', CLAIM_LEASE_MS)).toEqual({ kind: 'in_flight' });
    const fresh = claimed(await claimAt(k, 'own-2', CLAIM_LEASE_MS + 1));
    expect(fresh.owner).toBe('own-2');

    // Whatever the old owner does now leaves the new claim alone.
    const ranBefore = runs.n;
    expect(await submit(chargeUnit(stale, { status: 200, body: { n: 1 } }))).toBeInstanceOf(FenceLost);
    expect(runs.n).toBe(ranBefore);
    await markInDoubt(h.store.db, stale);
    await release(h.store.db, stale);
    expect(await record(k)).toEqual({ state: 'in_flight', owner: 'own-2' });
    // Completing a record the batch does not own is refused in the database, and fails the whole batch
    // (the writer completes only the fences it found it owns: this is the database's own guard).
    const forged = batchRunner(h.store.db)(async (c) => {
      expect((await lockFences(c, [stale]))(stale)).toBe(false);
      return { value: undefined, writes: [completeFences(c, [{ fence: stale, response: { status: 500, body: { forged: true } } }])] };
    });
    await expect(forged).rejects.toBeInstanceOf(BatchFailed);
    expect(await record(k)).toEqual({ state: 'in_flight', owner: 'own-2' });

    expect(await submit(chargeUnit(fresh, { status: 200, body: { n: 2 } }))).toBeNull();
    expect(await claimAt(k, 'own-3', CLAIM_LEASE_MS + 2)).toEqual({
      kind: 'completed',
      response: { status: 200, body: { n: 2 } },
      requestHash: HASH,
      seal: null,
    });
  });
});
