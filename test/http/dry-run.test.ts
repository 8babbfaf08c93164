/**
 * `"dry_run": true` on POST /v1/approve (issue 16): the full decision and what would remain, with
 * nothing charged; the answer and the audit row (in its hashed detail) are marked; a dry run never
 * claims a call_id nor answers for one, and a real call never answers for a dry run.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createApp } from '../../src/http/app.js';
import { Metrics } from '../../src/http/metrics.js';
import { rowHash } from '../../src/store/audit.js';
import { BACKENDS } from '../support/db.js';
import { mintBody, startHarness, type Harness } from '../support/app.js';

let seq = 0;
const traj = (): string => `dry-${++seq}`;

interface Issued {
  capability_id: string;
  token: string;
  trajectory_id: string;
}

describe.each(BACKENDS)('approve dry runs on %s', (backend) => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness(backend);
  });
  afterAll(async () => h.close());

  /** A root with budget 1 and 3 calls, read only. */
  async function mintRoot(): Promise<Issued> {
    const t = traj();
    const r = await h.call('POST', '/v1/capabilities', {
      trajectory_id: t,
      rights: ['read'],
      objects: [{ kind: 'path', prefix: `/w/${t}` }],
      predicate: { budget: 1, max_calls: 3 },
      ttl_s: 3600,
    });
    expect(r.status).toBe(201);
    return r.body as Issued;
  }

  const approve = (cap: Issued, over: Record<string, unknown> = {}) =>
    h.call('POST', '/v1/approve', { token: cap.token, op: 'read', target: { kind: 'path', path: `/w/${cap.trajectory_id}/f` }, cost: 0.25, ...over });
  const usage = async (cap: Issued) => {
    const r = await h.call('GET', `/v1/capabilities/${cap.capability_id}`);
    return { spent: r.body.spent, calls: r.body.calls };
  };
  const auditOf = async (cap: Issued) => (await h.call('GET', `/v1/audit?capability_id=${cap.capability_id}&event=approve`)).body.entries;

  test('a dry-run grant tells what would remain and charges nothing; real calls then get exactly the budget', async () => {
    const cap = await mintRoot();
    for (let i = 0; i < 5; i++) {
      const dry = await approve(cap, { dry_run: true });
      expect(dry.status).toBe(200);
      expect(dry.body).toMatchObject({ decision: 'grant', reason: null, dry_run: true, budget_remaining: 0.75, calls_remaining: 2 });
    }
    expect(await usage(cap)).toEqual({ spent: 0, calls: 0 });
    const real = [];
    for (let i = 0; i < 4; i++) real.push((await approve(cap)).body);
    expect(real.map((r) => [r.decision, r.reason?.code ?? null, r.budget_remaining, r.calls_remaining])).toEqual([
      ['grant', null, 0.75, 2],
      ['grant', null, 0.5, 1],
      ['grant', null, 0.25, 0],
      ['deny', 'calls_exhausted', 0.25, 0],
    ]);
    // A real answer is not marked.
    for (const r of real) expect(r).not.toHaveProperty('dry_run');
    expect(await usage(cap)).toEqual({ spent: 0.75, calls: 3 });
  });

  test('a dry-run deny: the code a real call would get, what remains, and still nothing charged', async () => {
    const cap = await mintRoot();
    expect((await approve(cap, { cost: 0.5 })).body.decision).toBe('grant');
    const over = await approve(cap, { cost: 0.75, dry_run: true });
    expect(over.body).toMatchObject({ decision: 'deny', reason: { code: 'budget_exhausted' }, dry_run: true, budget_remaining: 0.5, calls_remaining: 2 });
    const notHeld = await approve(cap, { op: 'write', dry_run: true });
    expect(notHeld.body).toMatchObject({ decision: 'deny', reason: { code: 'right_missing' }, dry_run: true });
    const badToken = await h.call('POST', '/v1/approve', { token: 'not-a-token', op: 'read', target: { kind: 'path', path: '/w' }, cost: 0, dry_run: true });
    expect(badToken.body).toMatchObject({ decision: 'deny', reason: { code: 'bad_token' }, dry_run: true });
    expect(await usage(cap)).toEqual({ spent: 0.5, calls: 1 });
    const rows = await auditOf(cap);
    expect(
      rows.map((r: { decision: string; reason_code: string | null; detail: { dry_run?: boolean } }) => [r.decision, r.reason_code, r.detail.dry_run ?? false]),
    ).toEqual([
      ['grant', null, false],
      ['deny', 'budget_exhausted', true],
      ['deny', 'right_missing', true],
    ]);
  });

  test('the dry-run audit row is marked in its hashed detail, and the chain verifies', async () => {
    const cap = await mintRoot();
    const dry = await approve(cap, { dry_run: true, call_id: 'preview-1' });
    const real = await approve(cap, { call_id: 'real-1' });
    const [dryRow, realRow] = await auditOf(cap);
    expect(dryRow).toMatchObject({ id: dry.body.audit_id, decision: 'grant', call_id: null, detail: { dry_run: true, call_id: 'preview-1' } });
    expect(realRow).toMatchObject({ id: real.body.audit_id, decision: 'grant', call_id: 'real-1' });
    expect(realRow.detail).not.toHaveProperty('dry_run');
    // The mark is hashed: the same row without it would not match its stored hash.
    const stored = await h.store.auditRow(h.tenantIds.a, dry.body.audit_id);
    if (stored === null) throw new Error('the dry run has no audit row');
    expect(rowHash(stored)).toBe(stored.hash);
    const { dry_run: _mark, ...unmarked } = stored.detail as Record<string, unknown>;
    expect(rowHash({ ...stored, detail: unmarked })).not.toBe(stored.hash);
    expect((await h.call('GET', '/v1/audit/verify')).body.ok).toBe(true);
  });

  test('a dry run does not occupy a call_id: the real call with it is decided and charged, not answered by the dry run', async () => {
    const cap = await mintRoot();
    const dry = await approve(cap, { call_id: 'c-1', dry_run: true });
    expect(dry.body).toMatchObject({ decision: 'grant', dry_run: true });
    // Another body under the same call_id in a dry run is no conflict: dry runs claim nothing.
    expect((await approve(cap, { call_id: 'c-1', dry_run: true, cost: 0.5 })).status).toBe(200);
    const real = await approve(cap, { call_id: 'c-1' });
    expect(real.body.decision).toBe('grant');
    expect(real.body.audit_id).not.toBe(dry.body.audit_id);
    expect(real.body).not.toHaveProperty('replayed');
    expect(real.body).not.toHaveProperty('dry_run');
    expect(await usage(cap)).toEqual({ spent: 0.25, calls: 1 });
  });

  test("a dry run after a real call_id is decided afresh, not answered by the real call's replay; the real replay still holds", async () => {
    const cap = await mintRoot();
    const real = await approve(cap, { call_id: 'c-2', cost: 0.75 });
    expect(real.body.decision).toBe('grant');
    const dry = await approve(cap, { call_id: 'c-2', cost: 0.75, dry_run: true });
    // Decided now: the budget the real call spent is gone, which the replay would not say.
    expect(dry.body).toMatchObject({ decision: 'deny', reason: { code: 'budget_exhausted' }, dry_run: true });
    expect(dry.body).not.toHaveProperty('replayed');
    expect(dry.body.audit_id).not.toBe(real.body.audit_id);
    const replay = await approve(cap, { call_id: 'c-2', cost: 0.75 });
    expect(replay.body).toMatchObject({ decision: 'grant', replayed: true, audit_id: real.body.audit_id });
    expect(replay.body).not.toHaveProperty('dry_run');
    expect(await usage(cap)).toEqual({ spent: 0.75, calls: 1 });
  });

  test('the OpenAPI document shows dry_run on the approve body, described', async () => {
    const doc = (await h.call('GET', '/openapi.json')).body;
    const schema = doc.paths['/v1/approve'].post.requestBody.content['application/json'].schema;
    const props = (schema.$ref === undefined ? schema : doc.components.schemas[String(schema.$ref).split('/').pop() as string]).properties;
    expect(props.dry_run).toMatchObject({ type: 'boolean', description: expect.stringContaining('charge nothing') });
    expect(doc.paths['/v1/approve'].post.description).toContain('dry_run');
  });

  test('400 names dry_run when it is not a boolean, and nothing is decided', async () => {
    const cap = await mintRoot();
    const r = await approve(cap, { dry_run: 'yes' });
    expect(r.status).toBe(400);
    expect(r.body.error.fields.map((f: { path: string }) => f.path)).toEqual(['dry_run']);
    expect(await auditOf(cap)).toEqual([]);
  });
});

describe('dry runs in the metrics', () => {
  let h: Harness;
  afterAll(async () => h.close());

  test('are counted apart from real decisions, so they never swell the grants', async () => {
    h = await startHarness('pglite');
    const metrics = new Metrics();
    const app = createApp({ store: h.store, writer: h.writer, keys: h.keys, now: h.clock.now, metrics });
    const post = async (path: string, body: unknown): Promise<Record<string, unknown>> =>
      (await (
        await app.request(path, {
          method: 'POST',
          headers: { authorization: `Bearer ${h.tenants.a}`, 'content-type': 'application/json' },
          body: JSON.stringify(body),
        })
      ).json()) as Record<string, unknown>;
    const cap = await post('/v1/capabilities', mintBody({ trajectory_id: 'dry-metrics' }));
    const call = { token: cap.token, op: 'read', target: { kind: 'path', path: '/workspace/t-1/a' }, cost: 1 };
    await post('/v1/approve', { ...call, dry_run: true });
    await post('/v1/approve', { ...call, dry_run: true });
    await post('/v1/approve', { ...call, op: 'connect', dry_run: true });
    await post('/v1/approve', call);
    const text = await (await app.request('/metrics')).text();
    expect(text).toContain('warrant_decisions_total{event="approve",decision="grant",code=""} 1');
    expect(text).toContain('warrant_decisions_total{event="approve_dry_run",decision="grant",code=""} 2');
    expect(text).toContain('warrant_decisions_total{event="approve_dry_run",decision="deny",code="right_missing"} 1');
    expect(text).not.toContain('warrant_decisions_total{event="approve",decision="deny"');
  });
});
