/**
 * Idempotency over HTTP (API.md): an Idempotency-Key on mint and attenuate replays the first
 * response for the same body and is a 409 for another; an approve call_id replays the first
 * decision and charges once, also under concurrent repeats, and is scoped to its token.
 */
import { and, eq, sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { audit, capabilities } from '../../src/store/schema.js';
import { BACKENDS } from '../support/db.js';
import { startHarness, type Called, type Harness } from '../support/app.js';

let seq = 0;
const traj = (): string => `idem-${++seq}`;

interface Issued {
  capability_id: string;
  token: string;
  trajectory_id: string;
  objects: { kind: string; prefix: string }[];
}

type Body = Record<string, unknown>;

/** A first approve answer as a repeat of its call_id gets it (issue 14): marked replayed, with when it was decided. */
const replayOf = (first: Record<string, unknown>): Record<string, unknown> => ({ ...first, replayed: true, decided_at: expect.any(String) });
/** An approve answer without the replay marker, to compare the decision itself. */
// eslint-disable-next-line @typescript-eslint/no-unused-vars
const firstOf = ({ replayed, decided_at, ...decision }: Record<string, unknown>): Record<string, unknown> => decision;

describe.each(BACKENDS)('idempotency on %s', (backend) => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness(backend);
  });
  afterAll(async () => h.close());

  const mintBodyFor = (t: string, over: Body = {}): Body => ({
    trajectory_id: t,
    rights: ['read', 'write'],
    objects: [{ kind: 'path', prefix: `/workspace/${t}` }],
    predicate: { budget: 10, max_calls: 100, max_depth: 3 },
    ttl_s: 3600,
    ...over,
  });

  const mint = (body: Body, key?: string, as: 'a' | 'b' = 'a'): Promise<Called> =>
    h.call('POST', '/v1/capabilities', body, { as, headers: key === undefined ? {} : { 'idempotency-key': key } });

  const attenuate = (body: Body, key?: string): Promise<Called> =>
    h.call('POST', '/v1/attenuate', body, { headers: key === undefined ? {} : { 'idempotency-key': key } });

  async function mintRoot(predicate: Body = { budget: 10, max_calls: 100, max_depth: 3 }): Promise<Issued> {
    const r = await mint(mintBodyFor(traj(), { predicate }));
    expect(r.status).toBe(201);
    return r.body as Issued;
  }

  const approve = (cap: Issued, over: Body = {}): Promise<Called> =>
    h.call('POST', '/v1/approve', { token: cap.token, op: 'read', target: { kind: 'path', path: `${cap.objects[0]?.prefix}/f` }, cost: 0.1, ...over });

  const stored = async (id: string): Promise<Body> => (await h.call('GET', `/v1/capabilities/${id}`)).body as Body;

  /** Capability rows of tenant a in a trajectory, straight from the table. */
  async function capabilityRows(trajectoryId: string): Promise<number> {
    const [row] = await h.database.db
      .select({ n: sql<number>`count(*)::int` })
      .from(capabilities)
      .where(and(eq(capabilities.tenantId, h.tenantIds.a), eq(capabilities.trajectoryId, trajectoryId)));
    return Number(row?.n);
  }

  /** Audit rows of tenant a with this call_id. */
  async function auditRowsOfCall(callId: string): Promise<string[]> {
    const rows = await h.database.db
      .select({ id: audit.id })
      .from(audit)
      .where(and(eq(audit.tenantId, h.tenantIds.a), eq(audit.callId, callId)));
    return rows.map((r) => r.id);
  }

  // ---- mint -----------------------------------------------------------------------------------

  describe('mint with an Idempotency-Key', () => {
    test('the same key and body return the first response; one capability, one audit row', async () => {
      const t = traj();
      const first = await mint(mintBodyFor(t), `k-${t}`);
      expect(first.status).toBe(201);
      h.clock.advance(5);
      const second = await mint(mintBodyFor(t), `k-${t}`);
      expect(second.status).toBe(201);
      expect(second.body).toEqual(first.body);
      expect(await capabilityRows(t)).toBe(1);
      expect((await h.call('GET', `/v1/audit?trajectory_id=${t}`)).body.entries).toHaveLength(1);
      // The replayed token is the live capability.
      expect((await approve(second.body as Issued)).body.decision).toBe('grant');
    });

    test('the same body in another key order is the same request', async () => {
      const t = traj();
      const body = mintBodyFor(t);
      const first = await mint(body, `k-${t}`);
      const reordered = Object.fromEntries(Object.entries(body).reverse());
      const second = await mint(reordered, `k-${t}`);
      expect(second.status).toBe(201);
      expect(second.body.capability_id).toBe(first.body.capability_id);
    });

    test('the same key with another body: 409 idempotency_conflict, nothing minted', async () => {
      const t = traj();
      expect((await mint(mintBodyFor(t), `k-${t}`)).status).toBe(201);
      const r = await mint(mintBodyFor(t, { ttl_s: 60 }), `k-${t}`);
      expect(r.status).toBe(409);
      expect(r.body.error.code).toBe('idempotency_conflict');
      expect(await capabilityRows(t)).toBe(1);
    });

    test('without a key, the same body mints again', async () => {
      const t = traj();
      const a = await mint(mintBodyFor(t));
      const b = await mint(mintBodyFor(t));
      expect(a.body.capability_id).not.toBe(b.body.capability_id);
      expect(await capabilityRows(t)).toBe(2);
    });

    test('keys are per tenant', async () => {
      const t = traj();
      const ofA = await mint(mintBodyFor(t), `k-${t}`, 'a');
      const ofB = await mint(mintBodyFor(t), `k-${t}`, 'b');
      expect(ofB.status).toBe(201);
      expect(ofB.body.capability_id).not.toBe(ofA.body.capability_id);
    });

    test('concurrent repeats mint once: each answer is the first response or 409 in_flight', async () => {
      const t = traj();
      const answers = await Promise.all(Array.from({ length: 8 }, () => mint(mintBodyFor(t), `k-${t}`)));
      const created = answers.filter((r) => r.status === 201);
      expect(created.length).toBeGreaterThanOrEqual(1);
      for (const r of created) expect(r.body).toEqual(created[0]?.body);
      for (const r of answers.filter((x) => x.status !== 201)) {
        expect(r.status).toBe(409);
        expect(r.body.error.code).toBe('in_flight');
      }
      expect(await capabilityRows(t)).toBe(1);
    });

    test.each([
      ['129 characters', 'k'.repeat(129)],
      ['empty', ''],
    ])('400 for a key of %s', async (_name, key) => {
      const t = traj();
      const r = await mint(mintBodyFor(t), key);
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe('invalid_request');
      expect(await capabilityRows(t)).toBe(0);
    });

    test('a key of 128 characters is accepted', async () => {
      expect((await mint(mintBodyFor(traj()), 'k'.repeat(128))).status).toBe(201);
    });
  });

  // ---- attenuate ------------------------------------------------------------------------------

  describe('attenuate with an Idempotency-Key', () => {
    const childBody = (root: Issued, over: Body = {}): Body => ({
      parent_token: root.token,
      rights: ['read'],
      objects: root.objects,
      predicate: { budget: 1, max_calls: 10, max_depth: 1 },
      ...over,
    });

    test('the same key and body return the first child; the parent has one child', async () => {
      const root = await mintRoot();
      const first = await attenuate(childBody(root), `k-${root.trajectory_id}`);
      expect(first.status).toBe(201);
      const second = await attenuate(childBody(root), `k-${root.trajectory_id}`);
      expect(second.status).toBe(201);
      expect(second.body).toEqual(first.body);
      expect((await stored(root.capability_id)).children).toEqual([first.body.capability_id]);
      const entries = (await h.call('GET', `/v1/audit?trajectory_id=${root.trajectory_id}&event=attenuate`)).body.entries;
      expect(entries).toHaveLength(1);
    });

    test('the first response is replayed even after the parent is revoked', async () => {
      const root = await mintRoot();
      const first = await attenuate(childBody(root), `k-${root.trajectory_id}`);
      await h.call('POST', '/v1/revoke', { capability_id: root.capability_id });
      const second = await attenuate(childBody(root), `k-${root.trajectory_id}`);
      expect(second.status).toBe(201);
      expect(second.body.capability_id).toBe(first.body.capability_id);
      expect((await approve(second.body as Issued)).body.reason.code).toBe('revoked');
    });

    test('a refusal is replayed as the same 403, audited once', async () => {
      const root = await mintRoot();
      const first = await attenuate(childBody(root, { rights: ['execute'] }), `k-${root.trajectory_id}`);
      expect(first.status).toBe(403);
      const second = await attenuate(childBody(root, { rights: ['execute'] }), `k-${root.trajectory_id}`);
      expect(second.status).toBe(403);
      expect(second.body).toEqual(first.body);
      const entries = (await h.call('GET', `/v1/audit?trajectory_id=${root.trajectory_id}&event=attenuate`)).body.entries;
      expect(entries).toHaveLength(1);
    });

    test('the same key with another body: 409 idempotency_conflict, no second child', async () => {
      const root = await mintRoot();
      const first = await attenuate(childBody(root), `k-${root.trajectory_id}`);
      const r = await attenuate(childBody(root, { ttl_s: 60 }), `k-${root.trajectory_id}`);
      expect(r.status).toBe(409);
      expect(r.body.error.code).toBe('idempotency_conflict');
      expect((await stored(root.capability_id)).children).toEqual([first.body.capability_id]);
    });
  });

  // ---- approve call_id ------------------------------------------------------------------------

  describe('approve with a call_id', () => {
    test('a repeat returns the first decision and audit_id, and charges nothing again', async () => {
      const cap = await mintRoot();
      const first = await approve(cap, { call_id: 'c-1' });
      expect(first.body.decision).toBe('grant');
      const second = await approve(cap, { call_id: 'c-1' });
      expect(second.status).toBe(200);
      expect(second.body).toEqual(replayOf(first.body));
      expect(await stored(cap.capability_id)).toMatchObject({ spent: 0.1, calls: 1 });
      expect(await auditRowsOfCall('c-1')).toEqual([first.body.audit_id]);
    });

    test('the first decision stands even when a fresh one would differ', async () => {
      const cap = await mintRoot({ budget: 0.2 });
      const first = await approve(cap, { call_id: 'c-late' });
      expect((await approve(cap, { cost: 0.1 })).body.budget_remaining).toBe(0);
      const repeat = await approve(cap, { call_id: 'c-late' });
      expect(repeat.body).toEqual(replayOf(first.body));
      expect(repeat.body.decision).toBe('grant');
      expect((await stored(cap.capability_id)).spent).toBe(0.2);
    });

    test('a denial is replayed too', async () => {
      const cap = await mintRoot({ budget: 0.05 });
      const first = await approve(cap, { call_id: 'c-deny' });
      expect(first.body.reason.code).toBe('budget_exhausted');
      const repeat = await approve(cap, { call_id: 'c-deny' });
      expect(repeat.body).toEqual(replayOf(first.body));
    });

    test.each([
      ['other args', { args: { n: 2 } }],
      ['another cost', { cost: 0.2 }],
      ['another op', { op: 'write' }],
      ['another target', { target: { kind: 'path', path: '/workspace/elsewhere' } }],
    ])('the same call_id with %s: 409 idempotency_conflict, nothing charged', async (_name, change) => {
      const cap = await mintRoot();
      const first = await approve(cap, { call_id: 'c-x', args: { n: 1 } });
      expect(first.body.decision).toBe('grant');
      const r = await approve(cap, { call_id: 'c-x', args: { n: 1 }, ...change });
      expect(r.status).toBe(409);
      expect(r.body.error.code).toBe('idempotency_conflict');
      expect(await stored(cap.capability_id)).toMatchObject({ spent: 0.1, calls: 1 });
    });

    test('the same request spelled differently is the same call (canonical target)', async () => {
      const cap = await mintRoot();
      const prefix = cap.objects[0]?.prefix as string;
      const first = await approve(cap, { call_id: 'c-canon', target: { kind: 'path', path: `${prefix}/f` } });
      const second = await approve(cap, { call_id: 'c-canon', target: { kind: 'path', path: `${prefix}/./x/../f` } });
      expect(second.body).toEqual(replayOf(first.body));
      expect((await stored(cap.capability_id)).calls).toBe(1);
    });

    test('10 concurrent repeats charge once and never yield two audit ids', async () => {
      const cap = await mintRoot();
      const answers = await Promise.all(Array.from({ length: 10 }, () => approve(cap, { call_id: 'c-race' })));
      const decided = answers.filter((r) => r.status === 200);
      expect(decided.length).toBeGreaterThanOrEqual(1);
      for (const r of decided) expect(firstOf(r.body)).toEqual(firstOf(decided[0]?.body));
      for (const r of answers.filter((x) => x.status !== 200)) {
        expect(r.status).toBe(409);
        expect(r.body.error.code).toBe('in_flight');
      }
      expect(decided[0]?.body.decision).toBe('grant');
      expect(await stored(cap.capability_id)).toMatchObject({ spent: 0.1, calls: 1 });
      expect(await auditRowsOfCall('c-race')).toEqual([decided[0]?.body.audit_id]);
      // Once settled, a repeat is the same decision.
      expect((await approve(cap, { call_id: 'c-race' })).body).toEqual(replayOf(firstOf(decided[0]?.body)));
    });

    test('the same call_id under different tokens is two calls', async () => {
      const one = await mintRoot();
      const two = await mintRoot();
      const a = await approve(one, { call_id: 'c-shared' });
      const b = await approve(two, { call_id: 'c-shared' });
      expect(a.body.decision).toBe('grant');
      expect(b.body.decision).toBe('grant');
      expect(b.body.audit_id).not.toBe(a.body.audit_id);
      expect((await stored(one.capability_id)).calls).toBe(1);
      expect((await stored(two.capability_id)).calls).toBe(1);
    });

    test('the same call_id under a child and its parent is two calls, both charged to the parent', async () => {
      const root = await mintRoot();
      const child = await attenuate({
        parent_token: root.token,
        rights: ['read'],
        objects: root.objects,
        predicate: { budget: 1, max_calls: 10, max_depth: 1 },
      });
      expect(child.status).toBe(201);
      const a = await approve(root, { call_id: 'c-tree' });
      const b = await approve(child.body as Issued, { call_id: 'c-tree' });
      expect(b.body.audit_id).not.toBe(a.body.audit_id);
      expect(await stored(root.capability_id)).toMatchObject({ calls: 2, spent: 0.2 });
    });

    test('without a call_id, a repeat is charged again', async () => {
      const cap = await mintRoot();
      await approve(cap);
      await approve(cap);
      expect(await stored(cap.capability_id)).toMatchObject({ calls: 2, spent: 0.2 });
    });
  });

  // ---- stored answers against whoever writes the database ---------------------------------------

  describe('a stored answer changed in the database is never replayed', () => {
    /** The idempotency record of `callId` under `cap`, changed by `set` as a database writer would. */
    const tamper = (cap: Issued, callId: string, set: ReturnType<typeof sql>): Promise<unknown> =>
      h.database.db.execute(
        sql`UPDATE idempotency SET ${set} WHERE tenant_id = ${h.tenantIds.a} AND scope = 'approve' AND key = ${`${cap.capability_id}:${callId}`}`,
      );

    test('a denial rewritten as a grant: 503, nothing granted, nothing charged', async () => {
      const cap = await mintRoot({ budget: 0.05 });
      const first = await approve(cap, { call_id: 'c-forged' });
      expect(first.body.reason.code).toBe('budget_exhausted');
      const forged = { ...first.body, decision: 'grant', reason: null };
      await tamper(cap, 'c-forged', sql`response = ${JSON.stringify(forged)}::jsonb`);
      const r = await approve(cap, { call_id: 'c-forged' });
      expect(r.status).toBe(503);
      expect(r.body.error.code).toBe('unavailable');
      expect(r.body.decision).toBeUndefined();
      expect(await stored(cap.capability_id)).toMatchObject({ spent: 0, calls: 0 });
    });

    test("a genuine grant moved onto another request by changing the record's request hash: 503", async () => {
      const cap = await mintRoot();
      expect((await approve(cap, { call_id: 'c-moved' })).body.decision).toBe('grant');
      // What the other request hashes to is what a 409 would otherwise compare against; the writer
      // makes the record claim it.
      const other = { op: 'write', target: { kind: 'path', path: '/workspace/elsewhere' } };
      const [row] = await h.database.db
        .execute(sql`SELECT request_hash FROM idempotency WHERE key = ${`${cap.capability_id}:c-moved`}`)
        .then((x) => (Array.isArray(x) ? x : (x as { rows: Record<string, unknown>[] }).rows));
      expect(row?.request_hash).toEqual(expect.any(String));
      expect((await approve(cap, { call_id: 'c-moved', ...other })).status).toBe(409);
      const { hashJson } = await import('../../src/crypto/hash.js');
      await tamper(cap, 'c-moved', sql`request_hash = ${hashJson({ op: 'write', target: other.target, cost: '100000', args: {} })}`);
      const r = await approve(cap, { call_id: 'c-moved', ...other });
      expect(r.status).toBe(503);
    });

    test('a record with its seal removed, or a seal copied from another record: 503', async () => {
      const cap = await mintRoot();
      const a = await approve(cap, { call_id: 'c-a' });
      await approve(cap, { call_id: 'c-b' });
      expect((await approve(cap, { call_id: 'c-a' })).body).toEqual(replayOf(a.body));
      await tamper(cap, 'c-b', sql`seal = (SELECT seal FROM idempotency WHERE key = ${`${cap.capability_id}:c-a`})`);
      expect((await approve(cap, { call_id: 'c-b' })).status).toBe(503);
      await tamper(cap, 'c-a', sql`seal = NULL`);
      expect((await approve(cap, { call_id: 'c-a' })).status).toBe(503);
    });
  });
});
