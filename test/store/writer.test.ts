/**
 * The group-commit writer's batch transaction (src/store/writer.ts, src/store/batch.ts) on a real
 * database: its writes are sent behind the decisions and followed by COMMIT without being awaited
 * first, so these tests make a write fail and check that nothing of the batch is answered as done
 * and nothing of it is left in the database. They also check that one batch carries many units.
 */
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { StoreUnavailable } from '../../src/store/store.js';
import { DecisionWriter, type AuditDraft, type DecisionUnit } from '../../src/store/writer.js';
import { startHarness, type Harness } from '../support/app.js';
import { BACKENDS } from '../support/db.js';

let n = 0;

describe.each(BACKENDS)('the decision writer on %s', (backend) => {
  let h: Harness;
  let capabilityId: string;
  beforeAll(async () => {
    h = await startHarness(backend);
    const r = await h.call('POST', '/v1/capabilities', {
      trajectory_id: 'writer',
      rights: ['read'],
      objects: [{ kind: 'path', prefix: '/w' }],
      predicate: { budget: 10 }, // 10_000_000 micro-units
      ttl_s: 3600,
    });
    expect(r.status).toBe(201);
    capabilityId = r.body.capability_id as string;
  });
  afterAll(async () => h.close());

  const draft = (): AuditDraft => ({
    id: `aud_writer_${backend}_${++n}`,
    event: 'approve',
    decision: 'grant',
    reasonCode: null,
    capabilityId,
    parentId: null,
    trajectoryId: 'writer',
    op: 'read',
    target: { kind: 'path', path: '/w/x' },
    cost: 1n,
    callId: null,
    detail: null,
  });

  /** A unit that charges `cost` micro-units without checking the budget (the CHECK constraint must stop it). */
  const charge = (cost: bigint, audit = draft()): DecisionUnit<string> => ({
    tenantId: h.tenantIds.a,
    fence: null,
    chainOf: capabilityId,
    run: async (tx) => {
      const chain = await tx.lockChain(h.tenantIds.a, capabilityId);
      await tx.charge(
        chain.map((l) => l.id),
        cost,
      );
      return { result: audit.id, audit };
    },
  });

  const state = async (): Promise<{ spent: bigint; calls: number; auditIds: string[] }> => {
    const view = await h.store.getCapability(h.tenantIds.a, capabilityId);
    const { entries } = await h.store.listAudit(h.tenantIds.a, { capabilityId, limit: 1000 });
    return { spent: BigInt(view!.record.spent), calls: Number(view!.record.calls), auditIds: entries.map((e) => e.id) };
  };

  test('many units share one batch: all are answered, each charge and audit row is committed', async () => {
    const sizes: number[] = [];
    const writer = new DecisionWriter(h.database.db, { now: h.clock.now, onBatch: (s) => sizes.push(s) });
    const before = await state();
    const ids = await Promise.all(Array.from({ length: 20 }, () => writer.submit(charge(1n))));
    const after = await state();
    expect(sizes.reduce((a, b) => a + b, 0)).toBe(20);
    expect(sizes.length).toBeLessThan(20); // they were batched
    expect(after.spent - before.spent).toBe(20n);
    expect(after.calls - before.calls).toBe(20);
    expect(after.auditIds.slice(before.auditIds.length)).toEqual(ids);
    expect((await h.call('GET', '/v1/audit/verify')).body.ok).toBe(true);
  });

  test('units that arrive in separate turns of the event loop, as requests do, still share a batch', async () => {
    const sizes: number[] = [];
    const writer = new DecisionWriter(h.database.db, { now: h.clock.now, onBatch: (s) => sizes.push(s) });
    // Each submit runs in its own setImmediate callback (microtasks drain between them), so a batch
    // that began and ran to its end without waiting for I/O would hold one unit each.
    const ids = await Promise.all(
      Array.from({ length: 10 }, () => new Promise<string>((resolve, reject) => setImmediate(() => void writer.submit(charge(1n)).then(resolve, reject)))),
    );
    expect(new Set(ids).size).toBe(10);
    expect(sizes.reduce((a, b) => a + b, 0)).toBe(10);
    expect(sizes.length).toBeLessThanOrEqual(2);
  });

  test('two lanes: the next batch begins while one commits; every unit is answered once, in one intact chain', async () => {
    const sizes: number[] = [];
    // Both lanes want the same tree: a lane that finds its head locked by the other defers its units,
    // which are batched again (and counted again in `sizes`), so the sizes add up to 40 plus those.
    let deferred = 0;
    const writer = new DecisionWriter(h.database.db, {
      now: h.clock.now,
      lanes: 2,
      onBatch: (s) => sizes.push(s),
      onDefer: (retried, waited) => (deferred += retried + waited),
    });
    const before = await state();
    const ids: Promise<string>[] = [];
    for (let wave = 0; wave < 5; wave++) {
      for (let i = 0; i < 8; i++) ids.push(writer.submit(charge(1n)));
      await new Promise((r) => setTimeout(r, 1)); // waves arrive while earlier batches are in flight
    }
    const answered = await Promise.all(ids);
    await writer.flush();
    const after = await state();
    expect(sizes.reduce((a, b) => a + b, 0)).toBe(40 + deferred);
    expect(sizes.length).toBeGreaterThan(1);
    expect(after.spent - before.spent).toBe(40n);
    expect(after.calls - before.calls).toBe(40);
    expect(new Set(after.auditIds.slice(before.auditIds.length))).toEqual(new Set(answered));
    expect((await h.call('GET', '/v1/audit/verify')).body.ok).toBe(true);
  });

  test('a write refused by the database fails the whole batch: no unit is answered, nothing is committed', async () => {
    const sizes: number[] = [];
    const writer = new DecisionWriter(h.database.db, { now: h.clock.now, onBatch: (s) => sizes.push(s) });
    const before = await state();
    // Submitted together, the three share a batch (all are queued before the lane takes its units);
    // the third charge takes spent past the budget, so the batch's one UPDATE of its charges violates
    // capabilities_spent_ck. Its COMMIT then answers ROLLBACK: nothing committed, and it says so.
    const outcomes = await Promise.allSettled([writer.submit(charge(1n)), writer.submit(charge(1n)), writer.submit(charge(100_000_000n))]);
    expect(sizes).toEqual([3]);
    for (const o of outcomes) {
      expect(o.status).toBe('rejected');
      expect((o as PromiseRejectedResult).reason).toBeInstanceOf(StoreUnavailable);
      expect((o as PromiseRejectedResult).reason.outcome).toBe('rolled_back');
    }
    expect(await state()).toEqual(before);
    expect((await h.call('GET', '/v1/audit/verify')).body.ok).toBe(true);
    // The writer and its connections are usable afterwards.
    const id = await writer.submit(charge(1n));
    expect((await state()).auditIds.at(-1)).toBe(id);
  });

  test('a unit still deciding at its deadline abandons its batch: answered not committed, and nothing of it commits later', async () => {
    const writer = new DecisionWriter(h.database.db, { now: h.clock.now, deadlineMs: 100 });
    const before = await state();
    const slow = charge(1n);
    const outcome = writer.submit({ ...slow, run: async (tx, now) => (await new Promise((r) => setTimeout(r, 300)), slow.run(tx, now)) });
    await expect(outcome).rejects.toMatchObject({ outcome: 'rolled_back' });
    await writer.flush();
    await new Promise((r) => setTimeout(r, 400));
    expect(await state()).toEqual(before);
    // The writer goes on: the next decision commits.
    const id = await writer.submit(charge(1n));
    expect((await state()).auditIds.at(-1)).toBe(id);
  });

  test('beyond maxPending a decision is refused at once, not committed; those admitted commit', async () => {
    const writer = new DecisionWriter(h.database.db, { now: h.clock.now, maxPending: 2 });
    const before = await state();
    const outcomes = await Promise.allSettled([writer.submit(charge(1n)), writer.submit(charge(1n)), writer.submit(charge(1n))]);
    expect(outcomes.map((o) => o.status)).toEqual(['fulfilled', 'fulfilled', 'rejected']);
    expect((outcomes[2] as PromiseRejectedResult).reason).toMatchObject({ outcome: 'rolled_back' });
    expect((await state()).calls - before.calls).toBe(2);
  });

  test('an audit row the database refuses (a duplicate id) fails its batch the same way', async () => {
    const sizes: number[] = [];
    const writer = new DecisionWriter(h.database.db, { now: h.clock.now, onBatch: (s) => sizes.push(s) });
    const used = draft();
    await writer.submit(charge(1n, used));
    const before = await state();
    const outcomes = await Promise.allSettled([writer.submit(charge(1n)), writer.submit(charge(1n, { ...used }))]);
    expect(sizes).toEqual([1, 2]);
    expect(outcomes.map((o) => o.status)).toEqual(['rejected', 'rejected']);
    for (const o of outcomes) expect((o as PromiseRejectedResult).reason.outcome).toBe('rolled_back');
    expect(await state()).toEqual(before);
    expect((await h.call('GET', '/v1/audit/verify')).body.ok).toBe(true);
  });

  test.each<{ name: string; bad: () => DecisionUnit<string> }>([
    {
      name: 'its run throws after charging',
      bad: () => {
        const c = charge(1n);
        return { ...c, run: async (tx, now) => (await c.run(tx, now), Promise.reject(new TypeError('a bug in one unit'))) };
      },
    },
    // jsonb refuses both; the writer must find them before the batch's one insert does.
    { name: 'its audit row holds a NUL', bad: () => charge(1n, { ...draft(), detail: { note: 'nul \u0000 here' } }) },
    { name: 'its audit row holds an unpaired surrogate', bad: () => charge(1n, { ...draft(), detail: { note: 'half \ud83d' } }) },
  ])('a unit that fails on its own ($name) fails alone: the others of its batch commit in the next', async ({ bad }) => {
    const sizes: number[] = [];
    const writer = new DecisionWriter(h.database.db, { now: h.clock.now, onBatch: (s) => sizes.push(s) });
    const before = await state();
    const outcomes = await Promise.allSettled([writer.submit(charge(1n)), writer.submit(bad()), writer.submit(charge(1n))]);
    // One batch held all three; the two went on without the third (on PostgreSQL a batch may find
    // their rows still locked by the first one's rollback and retry them once more).
    expect(sizes[0]).toBe(3);
    expect(sizes.slice(1).every((s) => s <= 2)).toBe(true);
    expect(outcomes.map((o) => o.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    const after = await state();
    expect([after.spent - before.spent, after.calls - before.calls]).toEqual([2n, 2]);
    expect(after.auditIds.slice(before.auditIds.length)).toEqual([
      (outcomes[0] as PromiseFulfilledResult<string>).value,
      (outcomes[2] as PromiseFulfilledResult<string>).value,
    ]);
    expect((await h.call('GET', '/v1/audit/verify')).body.ok).toBe(true);
  });

  test('a literal backslash before u0000 in a row is text, not a NUL: it commits', async () => {
    const writer = new DecisionWriter(h.database.db, { now: h.clock.now });
    const id = await writer.submit(charge(1n, { ...draft(), detail: { note: 'C:\\u0000 and \\\\u0000' } }));
    const { entries } = await h.store.listAudit(h.tenantIds.a, { capabilityId, limit: 1000 });
    expect(entries.find((e) => e.id === id)?.detail).toEqual({ note: 'C:\\u0000 and \\\\u0000' });
  });
});

// A connection that closes while its batch is still deciding: postgres.js rejects the transaction
// at once and may reconnect the same connection for other work, where a statement the unit sends
// afterwards would run on its own, committed outside any batch and without an audit row.
describe.runIf(BACKENDS.includes('postgres'))('the decision writer on postgres, when its connection closes mid-batch', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness('postgres');
  });
  afterAll(async () => h.close());

  const mint = async (trajectory: string): Promise<string> => {
    const r = await h.call('POST', '/v1/capabilities', { trajectory_id: trajectory, rights: ['read'], objects: [{ kind: 'path', prefix: '/c' }], ttl_s: 3600 });
    expect(r.status).toBe(201);
    return r.body.capability_id as string;
  };

  /** Closes every other session of the test database from outside and waits until that is seen. */
  const cut = async (): Promise<void> => {
    const admin = postgres(h.database.url as string, { max: 1, onnotice: () => {} });
    await admin`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`;
    await admin.end();
    await new Promise((r) => setTimeout(r, 200));
  };

  test('with every connection of the pool closed, the next batch reconnects and commits (a reserve on a cold pool)', async () => {
    const target = await mint('cold');
    await cut();
    // Nothing else runs on the pool first: the batch's own reserve must open a connection. Unpatched
    // postgres.js never settles that reserve with fetch_types off (porsager/postgres#751).
    const writer = new DecisionWriter(h.database.db, { now: h.clock.now, deadlineMs: 5000 });
    const id = `aud_cold_${Date.now()}`;
    const audit: AuditDraft = {
      id,
      event: 'approve',
      decision: 'deny',
      reasonCode: 'revoked',
      capabilityId: target,
      parentId: null,
      trajectoryId: 'cold',
      op: 'read',
      target: { kind: 'path', path: '/c/x' },
      cost: null,
      callId: null,
      detail: null,
    };
    await expect(writer.submit({ tenantId: h.tenantIds.a, fence: null, chainOf: target, run: async () => ({ result: 'written', audit }) })).resolves.toBe(
      'written',
    );
    const { entries } = await h.store.listAudit(h.tenantIds.a, { capabilityId: target, limit: 10 });
    expect(entries.map((e) => e.id)).toContain(id);
  });

  for (const via of ['raw statement', 'drizzle statement'] as const) {
    test(`a ${via} sent after the close never runs: the unit fails and nothing it wrote is committed`, async () => {
      const target = await mint(`cut-${via.split(' ')[0]}`);
      const writer = new DecisionWriter(h.database.db, { now: h.clock.now });
      let sent = false;
      const outcome = writer.submit({
        tenantId: h.tenantIds.a,
        fence: null,
        chainOf: target,
        run: async (tx, now) => {
          await cut();
          sent = true;
          if (via === 'drizzle statement') await tx.revokeSubtree(h.tenantIds.a, target, now, 'cut');
          else await tx.lockChain(h.tenantIds.a, `${target}-unknown`);
          return { result: 'done', audit: null };
        },
      });
      await expect(outcome).rejects.toBeInstanceOf(StoreUnavailable);
      expect(sent).toBe(true);
      // The pool recovers; the capability was not revoked behind the failed batch's back.
      await new Promise((r) => setTimeout(r, 300));
      const view = await h.store.getCapability(h.tenantIds.a, target);
      expect(view?.record.revokedAt ?? null).toBeNull();
      expect((await h.call('GET', '/v1/audit/verify')).body.ok).toBe(true);
      // The writer is not left waiting on the lost batch: the next decision goes through.
      const next = writer.submit({ tenantId: h.tenantIds.a, fence: null, run: async () => ({ result: 'next', audit: null }) });
      await expect(next).resolves.toBe('next');
    });
  }
});
