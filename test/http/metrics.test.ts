/**
 * GET /metrics (Prometheus text) when the app is given a Metrics: decisions counted by event,
 * decision and code, latency by route pattern and status, audit batch sizes; and X-Request-Id on
 * every answer. Without a Metrics the route does not exist.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createApp } from '../../src/http/app.js';
import { Metrics } from '../../src/http/metrics.js';
import { sql } from 'drizzle-orm';
import { DecisionWriter } from '../../src/store/writer.js';
import { openTestDatabase } from '../support/db.js';
import { mintBody, startHarness, type Harness } from '../support/app.js';

describe('metrics and request ids', () => {
  let h: Harness;
  let app: ReturnType<typeof createApp>;
  const logs: Record<string, unknown>[] = [];
  beforeAll(async () => {
    h = await startHarness('pglite');
    const metrics = new Metrics();
    const writer = new DecisionWriter(h.database.db, { now: h.clock.now, onBatch: (n) => metrics.batch(n) });
    app = createApp({ store: h.store, writer, keys: h.keys, now: h.clock.now, metrics, log: (entry) => logs.push(entry) });
  });
  afterAll(async () => h.close());

  const post = async (path: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> =>
    app.request(path, {
      method: 'POST',
      headers: { authorization: `Bearer ${h.tenants.a}`, 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
    });

  test('decisions, latencies and batch sizes are exposed; no token or id leaks into labels', async () => {
    const cap = (await (await post('/v1/capabilities', mintBody({ trajectory_id: 'm-1' }))).json()) as { token: string; capability_id: string };
    const target = { kind: 'path', path: '/workspace/t-1/a' };
    await post('/v1/approve', { token: cap.token, op: 'read', target, cost: 1 });
    await post('/v1/approve', { token: cap.token, op: 'read', target, cost: 1 });
    await post('/v1/approve', { token: cap.token, op: 'connect', target, cost: 0 });
    await app.request(`/v1/capabilities/${cap.capability_id}`, { headers: { authorization: `Bearer ${h.tenants.a}` } });
    const res = await app.request('/metrics');
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/plain/);
    const text = await res.text();
    expect(text).toContain('warrant_decisions_total{event="mint",decision="grant",code=""} 1');
    expect(text).toContain('warrant_decisions_total{event="approve",decision="grant",code=""} 2');
    expect(text).toContain('warrant_decisions_total{event="approve",decision="deny",code="right_missing"} 1');
    expect(text).toMatch(/warrant_http_request_duration_seconds_count\{method="POST",route="\/v1\/approve",status="200"\} 3/);
    expect(text).toMatch(/warrant_http_request_duration_seconds_count\{method="GET",route="\/v1\/capabilities\/:id",status="200"\} 1/);
    expect(text).toMatch(/warrant_audit_batch_size_count [1-9]\d*/);
    expect(text).not.toContain(cap.token.slice(0, 20));
    expect(text).not.toContain(cap.capability_id);
  });

  // A flood of made-up key ids past the key reads' bound (src/service/tenants.ts KEY_READS: 8 read, 256
  // waiting) is refused at once; an operator must see that shedding apart from the database failing.
  test('requests refused because too many unknown keys were being read are counted', async () => {
    // An app of its own with a deadline no read here comes near: on a loaded machine the queued reads
    // would otherwise pass the default 2 s and answer 503 too, which is no shedding.
    const metrics = new Metrics();
    const flooded = createApp({ store: h.store, writer: h.writer, keys: h.keys, now: h.clock.now, metrics, deadlineMs: 120_000 });
    const ids = Array.from({ length: 400 }, (_, i) => `wk.flood${String(i).padStart(7, '0')}.${'x'.repeat(43)}`);
    const statuses = await Promise.all(ids.map(async (key) => (await flooded.request('/v1/audit', { headers: { authorization: `Bearer ${key}` } })).status));
    const refused = statuses.filter((st) => st === 503).length;
    expect(refused).toBeGreaterThan(0);
    expect(statuses.filter((st) => st !== 503 && st !== 401)).toEqual([]);
    const text = await (await flooded.request('/metrics')).text();
    expect(text).toMatch(new RegExp(`^warrant_auth_key_reads_shed_total ${refused}$`, 'm'));
  });

  test('X-Request-Id: echoed when well formed, else generated; one JSON log line per request carries it', async () => {
    expect((await app.request('/healthz', { headers: { 'x-request-id': 'abc-123' } })).headers.get('x-request-id')).toBe('abc-123');
    expect(logs.at(-1)).toMatchObject({ msg: 'request', request_id: 'abc-123', method: 'GET', route: '/healthz', status: 200 });
    const key = h.tenants.a;
    await app.request('/v1/audit?capability_id=cap_secretish', { headers: { authorization: `Bearer ${key}` } });
    expect(logs.at(-1)).toMatchObject({ route: '/v1/audit', status: 200 });
    expect(JSON.stringify(logs)).not.toContain(key);
    expect(JSON.stringify(logs)).not.toContain('cap_secretish');
    const made = (await app.request('/healthz', { headers: { 'x-request-id': 'bad id\u0001' } })).headers.get('x-request-id');
    expect(made).toMatch(/^req_[A-Za-z0-9_-]+$/);
    // Every answer carries it: errors from auth, routing, validation and the handlers included.
    const answers = [
      await app.request('/v1/approve', { method: 'POST', headers: { 'x-request-id': 'r-401' } }),
      await app.request('/nowhere', { headers: { 'x-request-id': 'r-404' } }),
      await app.request('/v1/approve', {
        method: 'POST',
        headers: { 'x-request-id': 'r-400', authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: '{',
      }),
      await app.request('/v1/capabilities/cap_none', { headers: { 'x-request-id': 'r-404b', authorization: `Bearer ${key}` } }),
    ];
    expect(answers.map((r) => [r.status, r.headers.get('x-request-id')])).toEqual([
      [401, 'r-401'],
      [404, 'r-404'],
      [400, 'r-400'],
      [404, 'r-404b'],
    ]);
  });

  test('without a Metrics there is no /metrics route', async () => {
    expect((await h.app.request('/metrics')).status).toBe(404);
  });

  test.skipIf(process.env.TEST_DATABASE_URL === undefined)('PostgreSQL: pool connections by state, read from the server', async () => {
    const db = await openTestDatabase('postgres');
    try {
      const metrics = new Metrics();
      metrics.poolUse = db.poolUse;
      let release = (): void => {};
      const held = new Promise<void>((r) => (release = r));
      let started = (): void => {};
      const inside = new Promise<void>((r) => (started = r));
      const tx = db.db.transaction(async (t) => {
        await t.execute(sql`SELECT 1`);
        started();
        await held;
      });
      await inside;
      const text = await metrics.render();
      release();
      await tx;
      expect(text).toContain('warrant_db_pool_connections{state="idle in transaction"} 1');
      expect(text).toMatch(/warrant_db_pool_connections\{state="active"\} [1-9]/);
      expect(text).toContain('warrant_db_pool_max 10');
    } finally {
      await db.close();
    }
  });
});
