/**
 * POST /v1/revoke, GET /v1/capabilities/{id}, GET /v1/audit and GET /v1/audit/verify over HTTP
 * (API.md): revocation of a subtree and its effect on approve, the stored capability view, audit
 * filters and cursor pagination, and tamper detection of the audit hash chain (an edited, deleted
 * or reordered row is reported by id).
 */
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createTenant } from '../../src/service/tenants.js';
import { BACKENDS } from '../support/db.js';
import { startHarness, type Called, type Harness } from '../support/app.js';

let seq = 0;
const traj = (): string => `rr-${++seq}`;

interface Issued {
  capability_id: string;
  token: string;
  trajectory_id: string;
  objects: { kind: string; prefix: string }[];
  expires_at: string;
}

type Body = Record<string, unknown>;

const AUDIT_ENTRY_FIELDS = [
  'id',
  'at',
  'event',
  'decision',
  'reason_code',
  'capability_id',
  'parent_id',
  'trajectory_id',
  'op',
  'target',
  'cost',
  'call_id',
  'detail',
  'hash',
  'prev_hash',
];

describe.each(BACKENDS)('revoke and reads on %s', (backend) => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness(backend);
  });
  afterAll(async () => h.close());

  /** Calls as tenant a, or with the given API key. */
  const call = (method: string, path: string, body?: unknown, apiKey?: string): Promise<Called> =>
    h.call(method, path, body, apiKey === undefined ? {} : { headers: { authorization: `Bearer ${apiKey}` } });

  async function mintRoot(over: Body = {}, apiKey?: string): Promise<Issued> {
    const t = traj();
    const r = await call(
      'POST',
      '/v1/capabilities',
      {
        trajectory_id: t,
        rights: ['read', 'write'],
        objects: [{ kind: 'path', prefix: `/workspace/${t}` }],
        predicate: { budget: 10, max_calls: 100, max_depth: 3 },
        ttl_s: 3600,
        ...over,
      },
      apiKey,
    );
    expect(r.status).toBe(201);
    return r.body as Issued;
  }

  async function childOf(parent: Issued, depth: number, predicate: Body = { budget: 10, max_calls: 100 }): Promise<Issued> {
    const r = await call('POST', '/v1/attenuate', {
      parent_token: parent.token,
      rights: ['read'],
      objects: parent.objects,
      predicate: { ...predicate, max_depth: depth },
    });
    expect(r.status).toBe(201);
    return r.body as Issued;
  }

  const approve = (cap: Issued, cost = 0, apiKey?: string): Promise<Called> =>
    call('POST', '/v1/approve', { token: cap.token, op: 'read', target: { kind: 'path', path: `${cap.objects[0]?.prefix}/f` }, cost }, apiKey);

  const revoke = (id: string, apiKey?: string, reason?: string): Promise<Called> =>
    call('POST', '/v1/revoke', reason === undefined ? { capability_id: id } : { capability_id: id, reason }, apiKey);

  /** A tree: root → a → a1, root → b. */
  async function tree(): Promise<{ root: Issued; a: Issued; a1: Issued; b: Issued }> {
    const root = await mintRoot();
    const a = await childOf(root, 2);
    const a1 = await childOf(a, 1);
    const b = await childOf(root, 2);
    return { root, a, a1, b };
  }

  // ---- revoke ---------------------------------------------------------------------------------

  describe('revoke', () => {
    test('revokes the capability and every descendant, and says which', async () => {
      const { root, a, a1, b } = await tree();
      const r = await revoke(root.capability_id);
      expect(r.status).toBe(200);
      expect(Object.keys(r.body)).toEqual(['revoked']);
      expect(r.body.revoked[0]).toBe(root.capability_id);
      expect([...r.body.revoked].sort()).toEqual([root, a, a1, b].map((c) => c.capability_id).sort());
    });

    test('a subtree only: the parent and the siblings stay active', async () => {
      const { root, a, a1, b } = await tree();
      const r = await revoke(a.capability_id);
      expect([...r.body.revoked].sort()).toEqual([a.capability_id, a1.capability_id].sort());
      expect((await approve(root)).body.decision).toBe('grant');
      expect((await approve(b)).body.decision).toBe('grant');
      expect((await approve(a1)).body.reason.code).toBe('revoked');
    });

    test('names only what was not already revoked; a repeat revokes nothing more', async () => {
      const { root, a, a1, b } = await tree();
      expect((await revoke(a.capability_id)).body.revoked).toHaveLength(2);
      const second = await revoke(root.capability_id);
      expect(second.status).toBe(200);
      expect([...second.body.revoked].sort()).toEqual([root.capability_id, b.capability_id].sort());
      const third = await revoke(root.capability_id);
      expect(third.status).toBe(200);
      expect(third.body.revoked).toEqual([]);
      expect((await revoke(a1.capability_id)).body.revoked).toEqual([]);
    });

    test('cascades to approve: every descendant is denied revoked at once', async () => {
      const { root, a, a1, b } = await tree();
      for (const c of [root, a, a1, b]) expect((await approve(c)).body.decision).toBe('grant');
      await revoke(root.capability_id);
      for (const c of [root, a, a1, b]) expect((await approve(c)).body.reason.code).toBe('revoked');
    });

    test('is audited with the ids and the reason', async () => {
      const root = await mintRoot();
      const child = await childOf(root, 2);
      await revoke(root.capability_id, undefined, 'task finished');
      const audit = await call('GET', `/v1/audit?capability_id=${root.capability_id}&event=revoke`);
      expect(audit.body.entries).toHaveLength(1);
      expect(audit.body.entries[0]).toMatchObject({ event: 'revoke', decision: 'grant', capability_id: root.capability_id });
      expect([...audit.body.entries[0].detail.revoked].sort()).toEqual([root.capability_id, child.capability_id].sort());
      expect(audit.body.entries[0].detail.reason).toBe('task finished');
      const byTrajectory = await call('GET', `/v1/audit?trajectory_id=${root.trajectory_id}&event=revoke`);
      expect(byTrajectory.body.entries.map((e: { capability_id: string }) => e.capability_id)).toEqual([root.capability_id]);
    });

    test('404 for an unknown id, and for an id of another tenant (which stays active)', async () => {
      const unknown = await revoke('cap_doesnotexist');
      expect(unknown.status).toBe(404);
      expect(unknown.body.error.code).toBe('not_found');
      const ofB = await mintRoot({}, h.tenants.b);
      const cross = await revoke(ofB.capability_id);
      expect(cross.status).toBe(404);
      expect(cross.body.error.code).toBe('not_found');
      expect((await approve(ofB, 0, h.tenants.b)).body.decision).toBe('grant');
    });

    test.each([
      ['reason over 512 characters', { reason: 'x'.repeat(513) }, 'reason'],
      ['id with bad characters', { capability_id: 'cap/1' }, 'capability_id'],
      ['missing id', { capability_id: undefined }, 'capability_id'],
      ['unknown field', { cascade: false }, 'cascade'],
    ])('400 invalid_request: %s', async (_name, over, path) => {
      const root = await mintRoot();
      const r = await call('POST', '/v1/revoke', { capability_id: root.capability_id, ...over });
      expect(r.status).toBe(400);
      expect(r.body.error.fields.map((f: { path: string }) => f.path)).toContain(path);
      expect((await approve(root)).body.decision).toBe('grant');
    });
  });

  // ---- GET /v1/capabilities/{id} ----------------------------------------------------------

  describe('GET /v1/capabilities/{id}', () => {
    test('the stored fields, spent, calls, parent_id and children', async () => {
      const root = await mintRoot({ predicate: { max_cost: 1, budget: 10, max_calls: 100, max_depth: 3 } });
      const a = await childOf(root, 2, { max_cost: 1, budget: 10, max_calls: 100 });
      const b = await childOf(root, 2, { max_cost: 1, budget: 10, max_calls: 100 });
      expect((await approve(a, 0.1)).body.decision).toBe('grant');
      expect((await approve(b, 0.2)).body.decision).toBe('grant');
      const r = await call('GET', `/v1/capabilities/${root.capability_id}`);
      expect(r.status).toBe(200);
      expect(r.body).toMatchObject({
        capability_id: root.capability_id,
        trajectory_id: root.trajectory_id,
        parent_id: null,
        depth: 0,
        rights: ['read', 'write'],
        objects: root.objects,
        predicate: { max_cost: 1, budget: 10, max_calls: 100, max_depth: 3 },
        status: 'active',
        spent: 0.3,
        calls: 2,
      });
      expect(Date.parse(r.body.expires_at)).toBe(Date.parse(root.expires_at));
      expect([...r.body.children].sort()).toEqual([a.capability_id, b.capability_id].sort());
      expect(r.body).not.toHaveProperty('token');
      const child = await call('GET', `/v1/capabilities/${a.capability_id}`);
      expect(child.body).toMatchObject({ parent_id: root.capability_id, depth: 1, spent: 0.1, calls: 1, children: [], status: 'active' });
    });

    test('status: expired once the clock passes expires_at', async () => {
      const root = await mintRoot({ ttl_s: 30 });
      h.clock.advance(29);
      expect((await call('GET', `/v1/capabilities/${root.capability_id}`)).body.status).toBe('active');
      h.clock.advance(1);
      expect((await call('GET', `/v1/capabilities/${root.capability_id}`)).body.status).toBe('expired');
    });

    test('status: revoked for the revoked capability and below a revoked ancestor', async () => {
      const { root, a, a1 } = await tree();
      await revoke(a.capability_id);
      expect((await call('GET', `/v1/capabilities/${root.capability_id}`)).body.status).toBe('active');
      expect((await call('GET', `/v1/capabilities/${a.capability_id}`)).body.status).toBe('revoked');
      expect((await call('GET', `/v1/capabilities/${a1.capability_id}`)).body.status).toBe('revoked');
    });

    test('404 for an unknown id and for an id of another tenant', async () => {
      const ofB = await mintRoot({}, h.tenants.b);
      for (const id of ['cap_doesnotexist', ofB.capability_id]) {
        const r = await call('GET', `/v1/capabilities/${id}`);
        expect(r.status).toBe(404);
        expect(r.body.error.code).toBe('not_found');
      }
      expect((await call('GET', `/v1/capabilities/${ofB.capability_id}`, undefined, h.tenants.b)).status).toBe(200);
    });
  });

  // ---- GET /v1/audit ------------------------------------------------------------------------

  describe('GET /v1/audit', () => {
    /** One trajectory with mint, attenuate, 2 grants and 1 deny: 5 entries. */
    async function history(): Promise<{ root: Issued; child: Issued; t: string }> {
      const root = await mintRoot({ predicate: { max_cost: 1, max_depth: 1 } });
      const child = await childOf(root, 0, { max_cost: 1 });
      expect((await approve(root, 0.5)).body.decision).toBe('grant');
      expect((await approve(child, 0.25)).body.decision).toBe('grant');
      expect((await approve(child, 2)).body.decision).toBe('deny');
      return { root, child, t: root.trajectory_id };
    }

    test('entries carry every documented field, oldest first', async () => {
      const { root, t } = await history();
      const r = await call('GET', `/v1/audit?trajectory_id=${t}`);
      expect(r.status).toBe(200);
      expect(r.body.next).toBeNull();
      const entries = r.body.entries as Body[];
      expect(entries.map((e) => e.event)).toEqual(['mint', 'attenuate', 'approve', 'approve', 'approve']);
      for (const e of entries) for (const f of AUDIT_ENTRY_FIELDS) expect(e).toHaveProperty(f);
      expect(entries.map((e) => Date.parse(e.at as string))).toEqual([...entries].map((e) => Date.parse(e.at as string)).sort((x, y) => x - y));
      expect(entries[2]).toMatchObject({
        capability_id: root.capability_id,
        op: 'read',
        target: { kind: 'path', path: `${root.objects[0]?.prefix}/f` },
        cost: 0.5,
        call_id: null,
        reason_code: null,
      });
      expect(entries[4]).toMatchObject({ decision: 'deny', reason_code: 'cost_exceeds_max', cost: 2 });
    });

    test.each([
      ['decision=deny', (x: { t: string }) => `trajectory_id=${x.t}&decision=deny`, ['approve/deny']],
      ['decision=grant', (x: { t: string }) => `trajectory_id=${x.t}&decision=grant`, ['mint/grant', 'attenuate/grant', 'approve/grant', 'approve/grant']],
      ['event=approve', (x: { t: string }) => `trajectory_id=${x.t}&event=approve`, ['approve/grant', 'approve/grant', 'approve/deny']],
      ['capability_id', (x: { child: Issued }) => `capability_id=${x.child.capability_id}`, ['attenuate/grant', 'approve/grant', 'approve/deny']],
      ['event and decision together', (x: { root: Issued }) => `capability_id=${x.root.capability_id}&event=approve&decision=grant`, ['approve/grant']],
    ])('filter %s', async (_name, query, expected) => {
      const x = await history();
      const r = await call('GET', `/v1/audit?${query(x)}`);
      expect(r.status).toBe(200);
      expect((r.body.entries as Body[]).map((e) => `${String(e.event)}/${String(e.decision)}`)).toEqual(expected);
    });

    test('limit and after paginate oldest first; next is null at the end', async () => {
      const { t } = await history();
      const all = (await call('GET', `/v1/audit?trajectory_id=${t}`)).body.entries as Body[];
      expect(all).toHaveLength(5);
      const pages: Body[][] = [];
      let after: string | null = null;
      do {
        const r: Called = await call('GET', `/v1/audit?trajectory_id=${t}&limit=2${after === null ? '' : `&after=${after}`}`);
        expect(r.status).toBe(200);
        pages.push(r.body.entries);
        after = r.body.next;
      } while (after !== null && pages.length < 10);
      expect(pages.map((p) => p.length)).toEqual([2, 2, 1]);
      expect(pages.flat().map((e) => e.id)).toEqual(all.map((e) => e.id));
      const exact = await call('GET', `/v1/audit?trajectory_id=${t}&limit=5`);
      expect(exact.body.next).toBeNull();
      const one = await call('GET', `/v1/audit?trajectory_id=${t}&limit=1`);
      expect(one.body.entries.map((e: Body) => e.id)).toEqual([all[0]?.id]);
      expect(one.body.next).not.toBeNull();
    });

    test('the default limit is 100', async () => {
      const key = (await createTenant(h.store, `audit-default-${backend}`, h.clock.now())).apiKey;
      const root = await mintRoot({ predicate: {} }, key);
      await Promise.all(Array.from({ length: 100 }, () => approve(root, 0, key)));
      const r = await call('GET', '/v1/audit', undefined, key);
      expect(r.body.entries).toHaveLength(100);
      expect(r.body.next).not.toBeNull();
      const rest = await call('GET', `/v1/audit?after=${r.body.next}`, undefined, key);
      expect(rest.body.entries).toHaveLength(1);
      expect(rest.body.next).toBeNull();
    });

    test('a tenant sees only its own entries', async () => {
      const ofB = await mintRoot({}, h.tenants.b);
      const asA = await call('GET', `/v1/capabilities/${ofB.capability_id}`);
      expect(asA.status).toBe(404);
      expect((await call('GET', `/v1/audit?capability_id=${ofB.capability_id}`)).body.entries).toEqual([]);
      expect((await call('GET', `/v1/audit?capability_id=${ofB.capability_id}`, undefined, h.tenants.b)).body.entries).toHaveLength(1);
    });

    test.each([
      ['limit=0', 'limit=0', 'query.limit'],
      ['limit=1001', 'limit=1001', 'query.limit'],
      ['limit=abc', 'limit=abc', 'query.limit'],
      ['decision=maybe', 'decision=maybe', 'query.decision'],
      ['event=login', 'event=login', 'query.event'],
      ['after=xyz', 'after=xyz', 'query.after'],
      ['unknown parameter', 'sort=desc', 'query.sort'],
    ])('400 invalid_request: %s', async (_name, query, path) => {
      const r = await call('GET', `/v1/audit?${query}`);
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe('invalid_request');
      expect(r.body.error.fields.map((f: { path: string }) => f.path)).toContain(path);
    });

    test('limit 1 and 1000 are accepted', async () => {
      expect((await call('GET', '/v1/audit?limit=1')).status).toBe(200);
      expect((await call('GET', '/v1/audit?limit=1000')).status).toBe(200);
    });
  });

  // ---- GET /v1/audit/verify -------------------------------------------------------------------

  // The log is chained per delegation tree (tree_id = its root's id) plus the tenant's own chain ('')
  // for decisions of no known tree; the report counts every row walked, in (tree_id, seq) order.
  describe('GET /v1/audit/verify', () => {
    /** A fresh tenant with 5 audit rows of one tree (mint, 3 approves, revoke); returns its key and the rows. */
    async function chainOfFive(name: string): Promise<{ key: string; tenantId: string; root: Issued; rows: Body[] }> {
      const created = await createTenant(h.store, `${name}-${backend}`, h.clock.now());
      const key = created.apiKey;
      const root = await mintRoot({}, key);
      for (const cost of [0.1, 0.2, 0.3]) expect((await approve(root, cost, key)).body.decision).toBe('grant');
      await revoke(root.capability_id, key);
      const rows = (await call('GET', '/v1/audit', undefined, key)).body.entries as Body[];
      expect(rows).toHaveLength(5);
      // One tree, so the listing order is the walk order and a row's index + 1 is its entry count.
      expect(rows.map((r) => [r.tree_id, r.seq])).toEqual([1, 2, 3, 4, 5].map((n) => [root.capability_id, n]));
      return { key, tenantId: created.tenant.id, root, rows };
    }

    const verify = async (key: string): Promise<Body> => {
      const r = await call('GET', '/v1/audit/verify', undefined, key);
      expect(r.status).toBe(200);
      return r.body as Body;
    };

    test('an untouched chain: ok, the count and the number of chains', async () => {
      const { key, rows } = await chainOfFive('verify-ok');
      expect(await verify(key)).toMatchObject({ ok: true, entries: 5, trees: 1 });
      for (let i = 1; i < rows.length; i++) expect(rows[i]?.prev_hash).toBe(rows[i - 1]?.hash);
    });

    test("several trees and the tenant's own chain: each chained from genesis, all counted", async () => {
      const key = (await createTenant(h.store, `verify-trees-${backend}`, h.clock.now())).apiKey;
      const [x, y] = [await mintRoot({}, key), await mintRoot({}, key)];
      for (const c of [x, y, x]) expect((await approve(c, 0.1, key)).body.decision).toBe('grant');
      expect((await approve({ ...x, token: 'not-a-token' }, 0, key)).body.decision).toBe('deny');
      const rows = (await call('GET', '/v1/audit', undefined, key)).body.entries as Body[];
      expect(rows.map((r) => [r.tree_id, r.seq])).toEqual([
        [x.capability_id, 1],
        [y.capability_id, 1],
        [x.capability_id, 2],
        [y.capability_id, 2],
        [x.capability_id, 3],
        ['', 1],
      ]);
      for (const r of rows) if (r.seq === 1) expect(r.prev_hash).toBe('0'.repeat(64));
      expect(await verify(key)).toMatchObject({ ok: true, entries: 6, trees: 3 });
    });

    test('a tenant with no decisions yet verifies', async () => {
      const key = (await createTenant(h.store, `verify-empty-${backend}`, h.clock.now())).apiKey;
      expect(await verify(key)).toMatchObject({ ok: true, entries: 0, trees: 0 });
    });

    test.each([
      ['detail edited', 4, (id: string) => sql`UPDATE audit SET detail = '{"revoked": []}'::jsonb WHERE id = ${id}`],
      ['cost edited', 2, (id: string) => sql`UPDATE audit SET cost = cost + 1 WHERE id = ${id}`],
      ['decision flipped', 1, (id: string) => sql`UPDATE audit SET decision = 'deny' WHERE id = ${id}`],
    ])('a row with its %s is reported by id', async (name, index, tamper) => {
      const { key, rows } = await chainOfFive(`tamper-${name.replace(/ /g, '-')}`);
      const victim = rows[index]?.id as string;
      await h.database.db.execute(tamper(victim));
      expect(await verify(key)).toMatchObject({ ok: false, first_bad_id: victim, entries: index + 1 });
      // Other tenants' chains are untouched.
      expect(await verify(h.tenants.a)).toMatchObject({ ok: true });
    });

    test('a deleted row: the row after it is reported', async () => {
      const { key, tenantId, rows } = await chainOfFive('tamper-delete');
      await h.database.db.execute(sql`DELETE FROM audit WHERE tenant_id = ${tenantId} AND id = ${rows[2]?.id as string}`);
      expect(await verify(key)).toMatchObject({ ok: false, first_bad_id: rows[3]?.id, entries: 3 });
    });

    test('the last row deleted: it is reported, from the chain head', async () => {
      const { key, tenantId, rows } = await chainOfFive('tamper-delete-last');
      await h.database.db.execute(sql`DELETE FROM audit WHERE tenant_id = ${tenantId} AND id = ${rows[4]?.id as string}`);
      expect(await verify(key)).toMatchObject({ ok: false, first_bad_id: rows[4]?.id, entries: 4 });
    });

    test('two rows swapped: the first out of place is reported', async () => {
      const { key, tenantId, rows } = await chainOfFive('tamper-swap');
      const [x, y] = [rows[1] as Body, rows[2] as Body];
      // Through a free seq: the primary key (tenant_id, tree_id, seq) is checked row by row.
      await h.database.db.execute(sql`UPDATE audit SET seq = -1 WHERE tenant_id = ${tenantId} AND id = ${x.id as string}`);
      await h.database.db.execute(sql`UPDATE audit SET seq = ${x.seq as number} WHERE tenant_id = ${tenantId} AND id = ${y.id as string}`);
      await h.database.db.execute(sql`UPDATE audit SET seq = ${y.seq as number} WHERE tenant_id = ${tenantId} AND id = ${x.id as string}`);
      expect(await verify(key)).toMatchObject({ ok: false, first_bad_id: y.id, entries: 2 });
    });

    test("a row moved into the tenant's own chain: reported where it landed, as that chain is walked first", async () => {
      const { key, tenantId, rows } = await chainOfFive('tamper-move');
      await h.database.db.execute(sql`UPDATE audit SET tree_id = '', seq = seq + 1000 WHERE tenant_id = ${tenantId} AND id = ${rows[2]?.id as string}`);
      expect(await verify(key)).toMatchObject({ ok: false, first_bad_id: rows[2]?.id, entries: 1 });
    });

    test("a tree's head edited: reported at the tree's last row", async () => {
      const { key, tenantId, root, rows } = await chainOfFive('tamper-head');
      await h.database.db.execute(sql`UPDATE audit_heads SET hash = ${'e'.repeat(64)} WHERE tenant_id = ${tenantId} AND tree_id = ${root.capability_id}`);
      expect(await verify(key)).toMatchObject({ ok: false, first_bad_id: rows[4]?.id, entries: 5 });
    });
  });
});
