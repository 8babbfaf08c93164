/**
 * Scoped API keys over HTTP (issue 14): roles per route, 403 `forbidden` naming the roles needed
 * (nothing granted, audited with the key id and request id), key management for admins only,
 * revocation at once on the instance that revoked, on instances listening for it, and within the cache
 * TTL elsewhere, expiry, and the key id and request id on every audit row.
 */
import { sql } from 'drizzle-orm';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest';
import { createApp } from '../../src/http/app.js';
import { openDatabase, type Database } from '../../src/node/db.js';
import { KEY_CACHE_TTL_MS } from '../../src/service/tenants.js';
import { Store } from '../../src/store/store.js';
import { DecisionWriter } from '../../src/store/writer.js';
import { BACKENDS } from '../support/db.js';
import { mintBody, startHarness, type Called, type Harness } from '../support/app.js';
import { keyRevocation } from '../../src/service/key-admin.js';

type Role = 'runtime' | 'spawner' | 'driver' | 'auditor' | 'admin';

describe.each(BACKENDS)('API keys on %s', (backend) => {
  let h: Harness;
  const keys = {} as Record<Role, { id: string; key: string }>;
  let seq = 0;

  beforeAll(async () => {
    h = await startHarness(backend);
    for (const role of ['runtime', 'spawner', 'driver', 'auditor', 'admin'] as Role[]) {
      const r = await h.call('POST', '/v1/api-keys', { name: `k-${role}`, roles: [role] });
      expect(r.status).toBe(201);
      keys[role] = { id: r.body.key_id, key: r.body.api_key };
    }
  });
  afterAll(async () => h.close());

  const as = (role: Role, method: string, path: string, body?: unknown, requestId?: string): Promise<Called> =>
    h.call(method, path, body, { headers: { authorization: `Bearer ${keys[role].key}`, ...(requestId === undefined ? {} : { 'x-request-id': requestId }) } });

  const mintAs = (role: Role, requestId?: string): Promise<Called> =>
    as(role, 'POST', '/v1/capabilities', mintBody({ trajectory_id: `k-${++seq}` }), requestId);

  test('a created key is shown once, with roles; the list never shows a secret or hash', async () => {
    const list = await h.call('GET', '/v1/api-keys');
    expect(list.status).toBe(200);
    const text = JSON.stringify(list.body);
    for (const role of Object.keys(keys) as Role[]) expect(text).not.toContain(keys[role].key.split('.')[2]);
    expect(text).not.toMatch(/hash/);
    expect(list.body.keys.find((k: { key_id: string }) => k.key_id === keys.driver.id)).toMatchObject({ name: 'k-driver', roles: ['driver'], state: 'active' });
  });

  test.each([
    ['runtime', 'POST /v1/capabilities', true],
    ['runtime', 'POST /v1/approve', false],
    ['runtime', 'POST /v1/attenuate', false],
    ['runtime', 'GET /v1/audit', false],
    ['spawner', 'POST /v1/attenuate', true],
    ['spawner', 'POST /v1/capabilities', false],
    ['driver', 'POST /v1/approve', true],
    ['driver', 'POST /v1/capabilities', false],
    ['driver', 'POST /v1/revoke', false],
    ['auditor', 'GET /v1/audit', true],
    ['auditor', 'GET /v1/audit/verify', true],
    ['auditor', 'POST /v1/capabilities', false],
    ['admin', 'POST /v1/capabilities', true],
    ['admin', 'POST /v1/approve', true],
  ] as [Role, string, boolean][])('%s on %s: allowed %s', async (role, route, allowed) => {
    const root = (await mintAs('admin')).body;
    const bodies: Record<string, unknown> = {
      'POST /v1/capabilities': mintBody({ trajectory_id: `k-${++seq}` }),
      'POST /v1/approve': { token: root.token, op: 'read', target: { kind: 'path', path: '/workspace/t-1/a' }, cost: 0 },
      'POST /v1/attenuate': { parent_token: root.token, rights: ['read'], objects: root.objects, predicate: { budget: 1, max_calls: 1, max_depth: 0 } },
      'POST /v1/revoke': { capability_id: root.capability_id },
    };
    const [method, path] = route.split(' ') as [string, string];
    const r = await as(role, method, path, bodies[route]);
    if (allowed) expect(r.status).toBeLessThan(300);
    else {
      expect(r.status).toBe(403);
      expect(r.body.error.code).toBe('forbidden');
      expect(r.body.error.required_roles).toContain('admin');
      expect(r.body.error.required_roles.length).toBeGreaterThan(1);
    }
  });

  test('reading a capability: runtime and auditor yes, driver no', async () => {
    const cap = (await mintAs('admin')).body;
    expect((await as('runtime', 'GET', `/v1/capabilities/${cap.capability_id}`)).status).toBe(200);
    expect((await as('auditor', 'GET', `/v1/capabilities/${cap.capability_id}`)).status).toBe(200);
    expect((await as('driver', 'GET', `/v1/capabilities/${cap.capability_id}`)).body.error.code).toBe('forbidden');
  });

  test('a forbidden mint grants nothing and is audited with the key id and request id', async () => {
    const before = (await h.call('GET', '/v1/audit?limit=1000')).body.entries.length;
    const r = await mintAs('driver', 'req-forbidden-1');
    expect(r.status).toBe(403);
    expect(r.body.error.required_roles).toEqual(['runtime', 'admin']);
    const entries = (await h.call('GET', '/v1/audit?limit=1000')).body.entries;
    expect(entries.length).toBe(before + 1);
    expect(entries.at(-1)).toMatchObject({
      event: 'mint',
      decision: 'deny',
      reason_code: 'forbidden',
      capability_id: null,
      key_id: keys.driver.id,
      request_id: 'req-forbidden-1',
    });
    expect((await h.call('GET', '/v1/audit/verify')).body.ok).toBe(true);
  });

  test('every decision row records the key id and request id, never the secret', async () => {
    const m = await mintAs('runtime', 'req-mint-1');
    expect(m.status).toBe(201);
    await as(
      'driver',
      'POST',
      '/v1/approve',
      { token: m.body.token, op: 'read', target: { kind: 'path', path: '/workspace/t-1/a' }, cost: 0 },
      'req-approve-1',
    );
    const rows = (await h.call('GET', `/v1/audit?capability_id=${m.body.capability_id}`)).body.entries;
    expect(rows.map((r: { key_id: string; request_id: string }) => [r.key_id, r.request_id])).toEqual([
      [keys.runtime.id, 'req-mint-1'],
      [keys.driver.id, 'req-approve-1'],
    ]);
    expect(JSON.stringify(rows)).not.toContain(keys.driver.key.split('.')[2]);
    expect((await as('auditor', 'GET', '/v1/audit/verify')).body.ok).toBe(true);
  });

  test('key management is admin only (and a refusal is audited as access)', async () => {
    const r = await as('runtime', 'POST', '/v1/api-keys', { name: 'sneaky', roles: ['admin'] });
    expect(r.status).toBe(403);
    expect(r.body.error.required_roles).toEqual(['admin']);
    expect((await as('auditor', 'GET', '/v1/api-keys')).status).toBe(403);
    const rows = (await h.call('GET', '/v1/audit?event=access&decision=deny')).body.entries;
    expect(rows.some((x: { key_id: string }) => x.key_id === keys.runtime.id)).toBe(true);
  });

  test('creating and revoking a key are audit rows under the acting key, committed with the change', async () => {
    const admin = await h.call('POST', '/v1/api-keys', { name: 'ops', roles: ['admin'] });
    const acting = { id: admin.body.key_id as string, key: admin.body.api_key as string };
    const asActing = (method: string, path: string, body?: unknown): Promise<Called> =>
      h.call(method, path, body, { headers: { authorization: `Bearer ${acting.key}`, 'x-request-id': 'keys-1' } });
    const created = await asActing('POST', '/v1/api-keys', { name: 'approver-1', roles: ['approver', 'driver'], ttl_s: 3600 });
    expect(created.status).toBe(201);
    const made = created.body.key_id as string;
    const rows = async (): Promise<Record<string, unknown>[]> =>
      ((await h.call('GET', '/v1/audit?event=access&decision=grant&limit=1000')).body.entries as Record<string, unknown>[]).filter(
        (e) => (e.detail as { api_key_id?: string }).api_key_id === made,
      );
    expect(await rows()).toEqual([
      expect.objectContaining({
        event: 'access',
        decision: 'grant',
        key_id: acting.id,
        request_id: 'keys-1',
        detail: { action: 'api_key_created', api_key_id: made, name: 'approver-1', roles: ['driver', 'approver'], expires_at: created.body.expires_at },
      }),
    ]);
    expect(created.body.expires_at).toBe(new Date(h.clock.now().getTime() + 3600_000).toISOString());
    const revoked = await asActing('DELETE', `/v1/api-keys/${made}`);
    expect(revoked.body).toMatchObject({ key_id: made, state: 'revoked' });
    // Revoking it again, or a key that does not exist, decides nothing: no row.
    expect((await asActing('DELETE', `/v1/api-keys/${made}`)).body.state).toBe('revoked');
    expect((await asActing('DELETE', '/v1/api-keys/nosuchkey123')).status).toBe(404);
    const after = await rows();
    expect(after.map((e) => (e.detail as { action: string }).action)).toEqual(['api_key_created', 'api_key_revoked']);
    expect(after[1]).toMatchObject({ key_id: acting.id, detail: { action: 'api_key_revoked', api_key_id: made, name: 'approver-1' } });
    // The rows are on the tenant's chain like any decision: the log still verifies.
    expect((await h.call('GET', '/v1/audit/verify')).body.ok).toBe(true);
  });

  test('a key made over the API may not outlive the key that makes it', async () => {
    const shortLived = await h.call('POST', '/v1/api-keys', { name: 'temp-admin', roles: ['admin'], ttl_s: 3600 });
    const asTemp = (body: unknown): Promise<Called> =>
      h.call('POST', '/v1/api-keys', body, { headers: { authorization: `Bearer ${shortLived.body.api_key as string}` } });
    h.clock.advance(600);
    // 3,000 s are left: a key that never expires, or one past it, is refused, naming ttl_s.
    for (const body of [
      { name: 'forever', roles: ['admin'] },
      { name: 'longer', roles: ['admin'], ttl_s: 3001 },
    ]) {
      const r = await asTemp(body);
      expect(r.status).toBe(400);
      expect(r.body.error.fields).toEqual([{ path: 'ttl_s', message: expect.stringContaining('at most 3000') }]);
    }
    const within = await asTemp({ name: 'within', roles: ['driver'], ttl_s: 3000 });
    expect(within.status).toBe(201);
    expect(within.body.expires_at).toBe(shortLived.body.expires_at);
    // A key that never expires makes keys as it likes.
    expect((await h.call('POST', '/v1/api-keys', { name: 'forever', roles: ['driver'] })).body.expires_at).toBeNull();
  });

  // A leaked admin key's holder makes keys of its own; revoking the leaked key must not leave them.
  test('revoking a key revokes the keys made from it, and theirs, each on the record; other keys stay', async () => {
    const make = async (by: string | null, name: string, roles: string[]): Promise<{ id: string; key: string }> => {
      h.clock.advance(1); // creation order is the revocation rows' order
      const r = await h.call('POST', '/v1/api-keys', { name, roles }, by === null ? {} : { headers: { authorization: `Bearer ${by}` } });
      expect(r.status).toBe(201);
      return { id: r.body.key_id as string, key: r.body.api_key as string };
    };
    const leaked = await make(null, 'leaked', ['admin']);
    const b = await make(leaked.key, 'made-1', ['admin']);
    const c = await make(b.key, 'made-2', ['driver', 'runtime']);
    const d = await make(leaked.key, 'made-3', ['runtime']);
    const bystander = await make(null, 'bystander', ['admin']);
    const listed = (await h.call('GET', '/v1/api-keys')).body.keys as { key_id: string; created_by: string | null }[];
    const makerOf = new Map(listed.map((k) => [k.key_id, k.created_by]));
    expect([b, c, d].map((k) => makerOf.get(k.id))).toEqual([leaked.id, b.id, leaked.id]);

    const revoked = await h.call('DELETE', `/v1/api-keys/${leaked.id}`);
    expect(revoked.body).toMatchObject({ key_id: leaked.id, state: 'revoked', revoked_with_it: [b.id, c.id, d.id] });
    const mintWith = (key: string): Promise<Called> =>
      h.call('POST', '/v1/capabilities', mintBody({ trajectory_id: `k-${++seq}` }), { headers: { authorization: `Bearer ${key}` } });
    for (const k of [leaked, b, c, d]) expect((await mintWith(k.key)).status).toBe(401);
    expect((await mintWith(bystander.key)).status).toBe(201);
    const rows = ((await h.call('GET', '/v1/audit?event=access&decision=grant&limit=1000')).body.entries as { detail: Record<string, unknown> }[])
      .map((e) => e.detail)
      .filter((x) => x.action === 'api_key_revoked' && [leaked.id, b.id, c.id, d.id].includes(x.api_key_id as string));
    expect(rows.map((x) => [x.api_key_id, x.revoked_with])).toEqual([
      [leaked.id, undefined],
      [b.id, leaked.id],
      [c.id, leaked.id],
      [d.id, leaked.id],
    ]);
    // Revoking it again revokes nothing more and writes nothing.
    expect((await h.call('DELETE', `/v1/api-keys/${leaked.id}`)).body.revoked_with_it).toEqual([]);
    // The CLI's way (no server involved) revokes the keys made from a key too.
    const e = await make(bystander.key, 'made-4', ['runtime']);
    expect((await h.writer.submit(keyRevocation(h.tenantIds.a, bystander.id, 'cli')))?.made.map((k) => k.id)).toEqual([e.id]);
    expect((await h.call('GET', '/v1/audit/verify')).body.ok).toBe(true);
  });

  // An instance from before migration 0008, or a writer outside Warrant, may have revoked a key and
  // left what it made: revoking its own maker later still revokes (and audits) them.
  test('keys made from a key revoked before, its makings left, are revoked and audited with the key above it', async () => {
    const make = async (by: string, name: string): Promise<{ id: string; key: string }> => {
      h.clock.advance(1);
      const r = await h.call('POST', '/v1/api-keys', { name, roles: ['admin'] }, by === '' ? {} : { headers: { authorization: `Bearer ${by}` } });
      expect(r.status).toBe(201);
      return { id: r.body.key_id as string, key: r.body.api_key as string };
    };
    const top = await make('', 'top');
    const middle = await make(top.key, 'middle');
    const bottom = await make(middle.key, 'bottom');
    await h.database.db.execute(sql`UPDATE api_keys SET revoked_at = now() WHERE id = ${middle.id}`);
    const revoked = await h.call('DELETE', `/v1/api-keys/${top.id}`);
    expect(revoked.body.revoked_with_it).toEqual([bottom.id]);
    expect(
      ((await h.call('GET', '/v1/audit?event=access&decision=grant&limit=1000')).body.entries as { detail: Record<string, unknown> }[])
        .map((e) => e.detail)
        .filter((d) => d.action === 'api_key_revoked' && d.api_key_id === bottom.id)
        .map((d) => d.revoked_with),
    ).toEqual([top.id]);
    const status = await h.call('POST', '/v1/capabilities', mintBody({ trajectory_id: `k-${++seq}` }), { headers: { authorization: `Bearer ${bottom.key}` } });
    expect(status.status).toBe(401);
  });

  test('a key whose maker was revoked after its request was let in is not made', async () => {
    const maker = await h.call('POST', '/v1/api-keys', { name: 'maker', roles: ['admin'] });
    const other = createApp({ store: h.store, writer: h.writer, keys: h.keys, now: h.clock.now });
    const createOnOther = async (name: string): Promise<number> =>
      (
        await other.request('/v1/api-keys', {
          method: 'POST',
          headers: { authorization: `Bearer ${maker.body.api_key as string}`, 'content-type': 'application/json' },
          body: JSON.stringify({ name, roles: ['admin'] }),
        })
      ).status;
    expect(await createOnOther('before')).toBe(201); // the maker is now in the other instance's key cache
    expect((await h.call('DELETE', `/v1/api-keys/${maker.body.key_id as string}`)).status).toBe(200);
    // The other instance still takes the maker for live (its cache, no listener here); the insert does not.
    expect(await createOnOther('after')).toBe(401);
    const names = ((await h.call('GET', '/v1/api-keys')).body.keys as { name: string; created_by: string | null; state: string }[])
      .filter((k) => k.created_by === maker.body.key_id)
      .map((k) => [k.name, k.state]);
    expect(names).toEqual([['before', 'revoked']]);
    const refused = ((await h.call('GET', '/v1/audit?event=access&decision=deny&limit=1000')).body.entries as Record<string, unknown>[]).filter(
      (e) => (e.detail as { name?: string }).name === 'after',
    );
    expect(refused).toEqual([
      expect.objectContaining({ key_id: maker.body.key_id, reason_code: 'unauthorized', detail: expect.objectContaining({ action: 'api_key_created' }) }),
    ]);
  });

  // A revocation made elsewhere (the CLI, another instance) and a key being made from the revoked key
  // at the same moment: whichever commits first, the new key does not outlive the revocation.
  test.runIf(backend === 'postgres')('a key made while its maker is being revoked elsewhere is refused, or revoked with it', async () => {
    const maker = await h.call('POST', '/v1/api-keys', { name: 'racing-maker', roles: ['admin'] });
    const makerId = maker.body.key_id as string;
    const asMaker = (name: string): Promise<Called> =>
      h.call('POST', '/v1/api-keys', { name, roles: ['runtime'] }, { headers: { authorization: `Bearer ${maker.body.api_key as string}` } });
    expect((await asMaker('warm')).status).toBe(201); // the maker is in this instance's key cache
    const raw = postgres(h.database.url as string, { max: 2, onnotice: () => {} });
    /**
     * A transaction of its own: `statements`, then its locks held 300 ms more. `ran` settles once the
     * statements have run (or failed): the request racing it is sent only then (a fixed sleep let a
     * loaded machine send it first, in CI).
     */
    const holding = (statements: (tx: postgres.TransactionSql) => Promise<unknown>): { ran: Promise<void>; committed: Promise<unknown> } => {
      let ran!: () => void;
      const hasRun = new Promise<void>((r) => (ran = r));
      const committed = raw.begin(async (tx) => {
        try {
          await statements(tx);
        } finally {
          ran();
        }
        await new Promise((r) => setTimeout(r, 300));
      });
      return { ran: hasRun, committed };
    };
    /** A key made from `makerId` by a writer outside Warrant, holding its maker's row as a create does. */
    const madeFrom = (makerId: string, name: string, hashDigit: string): { id: string; ran: Promise<void>; committed: Promise<unknown> } => {
      const id = `${name}${String(Date.now() % 1e8).padStart(8, '0')}`;
      const tx = holding(async (t) => {
        await t`SELECT 1 FROM api_keys WHERE id = ${makerId} FOR SHARE`;
        await t`INSERT INTO api_keys (id, tenant_id, name, roles, key_hash, created_at, created_by)
                VALUES (${id}, ${h.tenantIds.a}, ${name}, ${['runtime']}, ${hashDigit.repeat(64)}, now(), ${makerId})`;
      });
      return { id, ...tx };
    };
    try {
      // A revocation whose statements ran, not committed yet; the create waits on the maker's row.
      const revoking = holding((tx) => tx`UPDATE api_keys SET revoked_at = now() WHERE id = ${makerId}`);
      await revoking.ran;
      const created = asMaker('during');
      await revoking.committed;
      expect((await created).status).toBe(401);
      // The other order: a key made by a transaction that holds its maker's row (as a create does) and
      // commits after the revocation has locked the maker: the revocation waits, then revokes it.
      const second = await h.call('POST', '/v1/api-keys', { name: 'maker-2', roles: ['admin'] });
      const secondId = second.body.key_id as string;
      const late = madeFrom(secondId, 'late', '0');
      await late.ran;
      const revoked = h.call('DELETE', `/v1/api-keys/${secondId}`);
      await late.committed;
      expect((await revoked).body.revoked_with_it).toEqual([late.id]);

      // A key made two levels down by a writer outside Warrant (which queues on no audit head) while
      // the revocation runs: its statement that revokes the middle key waits for that writer, and the
      // next one sees the key it made.
      const top = await h.call('POST', '/v1/api-keys', { name: 'top-3', roles: ['admin'] });
      const mid = await h.call(
        'POST',
        '/v1/api-keys',
        { name: 'mid-3', roles: ['admin'] },
        { headers: { authorization: `Bearer ${top.body.api_key as string}` } },
      );
      const midId = mid.body.key_id as string;
      const deep = madeFrom(midId, 'deep', '1');
      await deep.ran;
      const cascade = h.call('DELETE', `/v1/api-keys/${top.body.key_id as string}`);
      await deep.committed;
      expect(((await cascade).body.revoked_with_it as string[]).sort()).toEqual([midId, deep.id].sort());
    } finally {
      await raw.end();
    }
  });

  test('bad key requests name the field', async () => {
    const r = await h.call('POST', '/v1/api-keys', { name: 'x', roles: ['root'] });
    expect(r.status).toBe(400);
    expect(r.body.error.fields[0].path).toMatch(/^roles/);
    expect((await h.call('POST', '/v1/api-keys', { name: 'x', roles: [] })).status).toBe(400);
    expect((await h.call('POST', '/v1/api-keys', { name: 'x', roles: ['driver'], ttl_s: 0 })).body.error.fields[0].path).toBe('ttl_s');
    expect((await h.call('DELETE', '/v1/api-keys/nosuchkey123')).status).toBe(404);
  });

  test('a revoked key stops at once here, and within the cache TTL on another instance', async () => {
    const created = await h.call('POST', '/v1/api-keys', { name: 'to-revoke', roles: ['runtime'] });
    const key = created.body.api_key as string;
    const other = createApp({ store: h.store, writer: h.writer, keys: h.keys, now: h.clock.now });
    const onOther = async (): Promise<number> =>
      (
        await other.request('/v1/capabilities', {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify(mintBody({ trajectory_id: `k-${++seq}` })),
        })
      ).status;
    const here = (): Promise<Called> =>
      h.call('POST', '/v1/capabilities', mintBody({ trajectory_id: `k-${++seq}` }), { headers: { authorization: `Bearer ${key}` } });
    expect((await here()).status).toBe(201);
    expect(await onOther()).toBe(201); // now cached there
    const revoked = await h.call('DELETE', `/v1/api-keys/${created.body.key_id}`);
    expect(revoked.status).toBe(200);
    expect(revoked.body.state).toBe('revoked');
    expect((await here()).status).toBe(401);
    h.clock.advance(KEY_CACHE_TTL_MS / 1000 + 1);
    expect(await onOther()).toBe(401);
  });

  test('a key revoked by another instance or straight in the database stops at once where revocations are listened to', async () => {
    // Another instance: on PostgreSQL a pool (and listening connection) of its own; PGlite has one process.
    const second: Database = backend === 'postgres' ? await openDatabase({ databaseUrl: h.database.url, poolSize: 2 }) : h.database;
    try {
      const other = createApp({
        store: new Store(second.db),
        writer: new DecisionWriter(second.db, { now: h.clock.now }),
        keys: h.keys,
        now: h.clock.now,
        keyRevocations: (forget) => second.listenKeyRevocations(forget),
      });
      const onOther = async (key: string): Promise<number> =>
        (
          await other.request('/v1/capabilities', {
            method: 'POST',
            headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
            body: JSON.stringify(mintBody({ trajectory_id: `k-${++seq}` })),
          })
        ).status;
      // Each round: a key cached there, revoked here; the clock stands still, so no TTL expires.
      const round = async (revoke: (keyId: string) => Promise<void>): Promise<void> => {
        const created = await h.call('POST', '/v1/api-keys', { name: 'revoked-elsewhere', roles: ['runtime'] });
        const key = created.body.api_key as string;
        expect(await onOther(key)).toBe(201);
        await revoke(created.body.key_id as string);
        await vi.waitFor(async () => expect(await onOther(key)).toBe(401), { timeout: 10_000, interval: 50 });
      };
      await round(async (id) => expect((await h.call('DELETE', `/v1/api-keys/${id}`)).status).toBe(200));
      // As `npm run api-keys -- revoke` does, with no server involved; the listener is up by now.
      await round(async (id) => void (await h.writer.submit(keyRevocation(h.tenantIds.a, id, 'cli'))));
      if (backend === 'postgres') {
        // The listening connection cut: it listens again, and what it may have missed is dropped.
        await second.db.execute(
          sql`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE '%-listen' AND datname = current_database()`,
        );
        await round(async (id) => void (await h.writer.submit(keyRevocation(h.tenantIds.a, id, 'cli'))));
      }
    } finally {
      if (second !== h.database) await second.close();
    }
  }, 30_000);

  test('an expired key is refused', async () => {
    const created = await h.call('POST', '/v1/api-keys', { name: 'short', roles: ['auditor'], ttl_s: 60 });
    const auth = { headers: { authorization: `Bearer ${created.body.api_key}` } };
    expect((await h.call('GET', '/v1/audit/verify', undefined, auth)).status).toBe(200);
    h.clock.advance(61);
    expect((await h.call('GET', '/v1/audit/verify', undefined, auth)).status).toBe(401);
  });
});
