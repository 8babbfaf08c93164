/**
 * No tenant-wide lock (issue 12): a decision locks only its own delegation tree (its chain of
 * capabilities and that tree's audit head). On PostgreSQL, a transaction opened here holds every
 * lock of tree A, as another instance's batch would; decisions on tree B of the same tenant, a new
 * tree and the tenant's own chain still complete, and A's decisions complete once it ends.
 */
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createApp } from '../../src/http/app.js';
import { Metrics } from '../../src/http/metrics.js';
import { Store } from '../../src/store/store.js';
import { DecisionWriter } from '../../src/store/writer.js';
import { BACKENDS } from '../support/db.js';
import { startHarness, type Harness } from '../support/app.js';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Settles to 'pending' if `p` has not settled within `ms` (a bound on waiting, not a speed check). */
async function within<T>(p: Promise<T>, ms: number): Promise<T | 'pending'> {
  return Promise.race([p, sleep(ms).then(() => 'pending' as const)]);
}

describe.skipIf(!BACKENDS.includes('postgres'))('tree locks on postgres', () => {
  let h: Harness;
  let holder: postgres.Sql;
  /** An instance of its own, whose writer reports deferrals to its metrics. */
  let app: ReturnType<typeof createApp>;
  const metrics = new Metrics();
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const call = async (method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> => {
    const headers: Record<string, string> = { authorization: `Bearer ${h.tenants.a}` };
    if (body !== undefined) headers['content-type'] = 'application/json';
    const res = await app.request(path, { method, headers, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
    return { status: res.status, body: await res.json() };
  };

  const mint = async (t: string): Promise<{ capability_id: string; token: string }> => {
    const r = await call('POST', '/v1/capabilities', {
      trajectory_id: t,
      rights: ['read'],
      objects: [{ kind: 'path', prefix: `/w/${t}` }],
      predicate: { budget: 100, max_calls: 100, max_depth: 2 },
      ttl_s: 3600,
    });
    expect(r.status).toBe(201);
    return r.body;
  };
  const approve = (token: string, path: string, callId?: string) =>
    call('POST', '/v1/approve', { token, op: 'read', target: { kind: 'path', path }, cost: 1, ...(callId === undefined ? {} : { call_id: callId }) });

  beforeAll(async () => {
    h = await startHarness('postgres');
    const writer = new DecisionWriter(h.database.db, { now: h.clock.now, onDefer: (retried, waited) => metrics.treeLocked(retried, waited) });
    app = createApp({ store: new Store(h.database.db), writer, keys: h.keys, now: h.clock.now, metrics });
    holder = postgres(h.database.url as string, { max: 1, onnotice: () => {} });
  });
  afterAll(async () => {
    await holder.end({ timeout: 5 });
    await h.close();
  });

  test('with every lock of tree A held elsewhere, tree B, a new tree and the tenant chain decide; A decides once they are released', async () => {
    const a = await mint('a');
    const child = await call('POST', '/v1/attenuate', {
      parent_token: a.token,
      rights: ['read'],
      objects: [{ kind: 'path', prefix: '/w/a/sub' }],
      predicate: { budget: 10, max_calls: 10, max_depth: 1 },
    });
    expect(child.status).toBe(201);
    // A second child, to revoke while tree A is held (revoking the first would race its approval).
    const other = await call('POST', '/v1/attenuate', {
      parent_token: a.token,
      rights: ['read'],
      objects: [{ kind: 'path', prefix: '/w/a/other' }],
      predicate: { budget: 10, max_calls: 10, max_depth: 1 },
    });
    expect(other.status).toBe(201);
    const b = await mint('b');

    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    let locked!: () => void;
    const isLocked = new Promise<void>((r) => (locked = r));
    const holding = holder.begin(async (tx) => {
      await tx`SELECT 1 FROM audit_heads WHERE tenant_id = ${h.tenantIds.a} AND tree_id = ${a.capability_id} FOR UPDATE`;
      await tx`SELECT 1 FROM capabilities WHERE id = ${a.capability_id} OR ${a.capability_id} = ANY(ancestors) FOR UPDATE`;
      locked();
      await released;
    });
    await isLocked;
    try {
      const onA = [
        approve(a.token, '/w/a/x', 'a-1'),
        approve(child.body.token, '/w/a/sub/y'),
        call('POST', '/v1/revoke', { capability_id: other.body.capability_id }),
      ];
      // Tree B, a new tree and a decision of no tree are not held up by tree A.
      const others = await within(
        Promise.all([approve(b.token, '/w/b/x', 'b-1'), approve(b.token, '/w/b/y'), mint('c'), approve('not-a-token', '/w/b/z')]),
        10_000,
      );
      expect(others).not.toBe('pending');
      const [b1, b2, c, bad] = others as [
        Awaited<ReturnType<typeof approve>>,
        Awaited<ReturnType<typeof approve>>,
        unknown,
        Awaited<ReturnType<typeof approve>>,
      ];
      expect([b1.body.decision, b2.body.decision, bad.body.reason?.code]).toEqual(['grant', 'grant', 'bad_token']);
      expect(c).toMatchObject({ capability_id: expect.any(String) });
      // Tree A's decisions are still waiting for its locks.
      expect(await within(Promise.all(onA), 300)).toBe('pending');
      release();
      await holding;
      const [a1, a2, revoked] = (await within(Promise.all(onA), 10_000)) as Awaited<ReturnType<typeof approve>>[];
      expect([a1?.body.decision, a2?.body.decision, revoked?.status]).toEqual(['grant', 'grant', 200]);
    } finally {
      release();
      await holding.catch(() => undefined);
    }
    // A's decisions were retried in the main lane, then waited for in a lane of their own.
    const text = await metrics.render();
    expect(Number(/warrant_tree_lock_deferrals_total\{then="retried"\} (\d+)/.exec(text)?.[1])).toBeGreaterThan(0);
    expect(Number(/warrant_tree_lock_deferrals_total\{then="waited"\} (\d+)/.exec(text)?.[1])).toBeGreaterThan(0);
    // Every decision is on record in its tree's chain, and the chains verify.
    expect((await call('GET', '/v1/audit/verify')).body).toMatchObject({ ok: true });
    const spent = await call('GET', `/v1/capabilities/${a.capability_id}`);
    expect(spent.body).toMatchObject({ spent: 2, calls: 2 });
  });

  // Every batch takes a tree's head before any link of its chain, so two batches never hold one each
  // and wait for the other (a deadlock). A batch waiting for the head must hold no link meanwhile:
  // the writer's one locking statement depends on UNION ALL running its branches in order for that.
  test("a batch waiting for a tree's head holds no link of its chain meanwhile", async () => {
    const a = await mint('order');
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    let locked!: () => void;
    const isLocked = new Promise<void>((r) => (locked = r));
    let linkFree: boolean | string = 'not tried';
    const holding = holder.begin(async (tx) => {
      await tx`SELECT 1 FROM audit_heads WHERE tenant_id = ${h.tenantIds.a} AND tree_id = ${a.capability_id} FOR UPDATE`;
      locked();
      await released;
      // Another batch's order: the head first (held here), then the links.
      try {
        await tx`SELECT id FROM capabilities WHERE id = ${a.capability_id} FOR UPDATE NOWAIT`;
        linkFree = true;
      } catch (e) {
        linkFree = (e as { code?: string }).code ?? String(e);
      }
    });
    await isLocked;
    try {
      const decision = approve(a.token, '/w/order/x');
      // Past the main lane's retries (RETRY_MS), the decision waits in a lane of its own for the head.
      expect(await within(decision, 600)).toBe('pending');
      release();
      await holding;
      expect(linkFree).toBe(true);
      const answered = await within(decision, 10_000);
      expect(answered).not.toBe('pending');
      expect((answered as Awaited<ReturnType<typeof approve>>).body.decision).toBe('grant');
    } finally {
      release();
      await holding.catch(() => undefined);
    }
  });
});
