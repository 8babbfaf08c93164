/**
 * The re-seal sweep (src/service/reseal.ts) across a key rotation: a tool registered under key A,
 * and a call waiting for a person under A, still work once A is retired from the ring, if the
 * sweep ran while the ring held A and the new active key B; without it they answer 503. A row whose
 * seal does not hold (changed in the database, or made under a key not in the ring) is never sealed
 * again. Each test has a database of its own: the sweep reads every tenant's rows.
 */
import { sql } from 'drizzle-orm';
import type { JWK } from 'jose';
import { afterEach, beforeEach, describe, expect, test } from 'vitest';
import { generateSigningJwk, loadKeyRing } from '../../src/crypto/keys.js';
import { createApp } from '../../src/http/app.js';
import { resealAll, resealLogged } from '../../src/service/reseal.js';
import { ResponseSealer } from '../../src/service/seal.js';
import { createTenant } from '../../src/service/tenants.js';
import { toolParts } from '../../src/service/tools.js';
import { tools } from '../../src/store/schema.js';
import { Store } from '../../src/store/store.js';
import { findTool } from '../../src/store/tools.js';
import { DecisionWriter } from '../../src/store/writer.js';
import { Clock, TEST_DEADLINE_MS } from '../support/app.js';
import { BACKENDS, openTestDatabase, type TestDatabase } from '../support/db.js';
import { EDIT, SEARCH, SHELL, VIEW } from '../support/tools.js';

type Body = Record<string, unknown>;
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- bodies are read freely; assertions check them
type Answer = { status: number; body: any };

describe.each(BACKENDS)('re-sealing after a key rotation on %s', (backend) => {
  let database: TestDatabase;
  let store: Store;
  let writer: DecisionWriter;
  let tenantId: string;
  let admin: string;
  const clock = new Clock();
  let A: JWK;
  let B: JWK;

  beforeEach(async () => {
    database = await openTestDatabase(backend);
    store = new Store(database.db);
    writer = new DecisionWriter(database.db, { now: clock.now, deadlineMs: TEST_DEADLINE_MS });
    const made = await createTenant(store, 'a', clock.now());
    [tenantId, admin] = [made.tenant.id, made.apiKey];
    [A, B] = [await generateSigningJwk(), await generateSigningJwk()];
  });
  afterEach(async () => {
    await writer.flush();
    await database.close();
  });

  /** An instance of the authority signing and sealing with the ring `keys` (the last one active). */
  async function instance(...keys: JWK[]): Promise<(method: string, path: string, body?: unknown, key?: string) => Promise<Answer>> {
    const app = createApp({ store, writer, keys: await loadKeyRing({ keys }), now: clock.now, deadlineMs: TEST_DEADLINE_MS });
    return async (method, path, body, key = admin) => {
      const res = await app.request(path, {
        method,
        headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      return { status: res.status, body: await res.json() };
    };
  }
  const sweep = async (...keys: JWK[]) => resealAll(database.db, await loadKeyRing({ keys }));
  const mint = { trajectory_id: 't-1', rights: ['read', 'write', 'execute'], objects: [{ kind: 'path', prefix: '/workspace' }], predicate: {}, ttl_s: 3600 };
  const seals = async (table: 'tools' | 'approvals'): Promise<string[]> => {
    const res: unknown = await database.db.execute(sql.raw(`SELECT seal FROM ${table} ORDER BY 1`));
    return (Array.isArray(res) ? (res as Body[]) : (res as { rows: Body[] }).rows).map((r) => String(r.seal));
  };

  test('every version of a tool sealed under A is sealed under B, and works once A is retired', async () => {
    const onA = await instance(A);
    expect((await onA('PUT', '/v1/tools/view', VIEW)).status).toBe(201);
    expect((await onA('PUT', '/v1/tools/view', { ...VIEW, description: 'Show a window, v2.' })).body.version).toBe(2);

    const onB = await instance(B);
    const token = (await onB('POST', '/v1/capabilities', mint)).body.token as string;
    const call = (): Promise<Answer> => onB('POST', '/v1/approve', { token, tool: 'view', args: { path: '/workspace/a' }, cost: 0 });
    // The defect: A retired before any sweep strands the tool.
    expect((await call()).status).toBe(503);
    expect((await onB('GET', '/v1/tools/view')).status).toBe(503);

    expect(await sweep(A, B)).toEqual({ tools: 2, approvals: 0, notHeld: 0 });
    expect((await seals('tools')).map((s) => s.startsWith(`${String(B.kid)}.`))).toEqual([true, true]);
    const r = await call();
    expect([r.status, r.body.decision]).toEqual([200, 'grant']);
    expect((await onB('GET', '/v1/tools/view')).body).toMatchObject({ version: 2, description: 'Show a window, v2.' });
    expect((await onB('GET', '/v1/tools/view?version=1')).body).toMatchObject({ version: 1, description: VIEW.description });
    expect((await onB('GET', '/v1/tools')).status).toBe(200);
    // Nothing is left to do, under either ring.
    expect(await sweep(A, B)).toEqual({ tools: 0, approvals: 0, notHeld: 0 });
    expect(await sweep(B)).toEqual({ tools: 0, approvals: 0, notHeld: 0 });

    // Only seals change, never versions: the newest version removed, the older one is still refused.
    await database.db.execute(sql`DELETE FROM tools WHERE tenant_id = ${tenantId} AND name = 'view' AND version = 2`);
    const rolledBack = await (await instance(B))('POST', '/v1/approve', { token, tool: 'view', args: { path: '/workspace/a' }, cost: 0 });
    expect([rolledBack.status, rolledBack.body.error?.message]).toEqual([503, expect.stringMatching(/stored at version 1, but version 2 was registered/)]);
  });

  test('a row whose seal does not hold, or was made under a key not in the ring, is not sealed again and still answers 503', async () => {
    const onA = await instance(A);
    for (const [name, tool] of Object.entries({ view: VIEW, edit: EDIT, search: SEARCH, shell: SHELL }))
      expect((await onA('PUT', `/v1/tools/${name}`, tool)).status).toBe(201);
    // edit: its row changed under its seal; search: sealed over its genuine content, but by a key the
    // ring does not hold; shell: its seal removed.
    await database.db.execute(sql`UPDATE tools SET side_effect = 'read_only' WHERE name = 'edit'`);
    const foreign = await ResponseSealer.from(await loadKeyRing({ keys: [await generateSigningJwk()] }));
    const forged = foreign.sealOf('tool', toolParts((await findTool(store.db, tenantId, 'search'))!));
    await database.db.execute(sql`UPDATE tools SET seal = ${forged} WHERE name = 'search'`);
    await database.db.execute(sql`UPDATE tools SET seal = NULL WHERE name = 'shell'`);
    const before = await seals('tools');

    expect(await sweep(A, B)).toEqual({ tools: 1, approvals: 0, notHeld: 2 });
    const after = await seals('tools');
    expect(after.filter((s) => !before.includes(s))).toEqual([expect.stringMatching(new RegExp(`^${String(B.kid)}\\.`))]);
    expect((await findTool(store.db, tenantId, 'search'))?.seal).toBe(forged);
    expect((await findTool(store.db, tenantId, 'shell'))?.seal).toBeNull();

    for (const ring of [[A, B], [B]]) {
      const on = await instance(...ring);
      expect((await on('GET', '/v1/tools/view')).status).toBe(200);
      for (const name of ['edit', 'search', 'shell']) expect([name, (await on('GET', `/v1/tools/${name}`)).status]).toEqual([name, 503]);
    }
  });

  test('more rows than a page, rows that do not hold among them, are all swept, each once', async () => {
    const sealer = await ResponseSealer.from(await loadKeyRing({ keys: [A] }));
    const rows = Array.from({ length: 300 }, (_, i) => {
      const columns = {
        tenantId,
        name: `t${i % 3}`,
        version: Math.floor(i / 3) + 1,
        description: `version ${i}`,
        inputSchema: VIEW.input_schema,
        sideEffect: 'read_only' as const,
        right: 'read',
        target: VIEW.target,
        warnings: [],
        keyId: null,
        createdAt: clock.now(),
      };
      // Every 50th row's seal does not hold: the sweep must pass it by and go on.
      return {
        ...columns,
        seal: i % 50 === 7 ? sealer.sealOf('tool', toolParts({ ...columns, description: 'other' })) : sealer.sealOf('tool', toolParts(columns)),
      };
    });
    await database.db.insert(tools).values(rows);
    expect(await sweep(A, B)).toEqual({ tools: 294, approvals: 0, notHeld: 6 });
    expect((await seals('tools')).filter((s) => s.startsWith(`${String(B.kid)}.`))).toHaveLength(294);
    expect(await sweep(A, B)).toEqual({ tools: 0, approvals: 0, notHeld: 6 });
  });

  test('a pending approval sealed under A is sealed under B, and is resolved once A is retired', async () => {
    const onA = await instance(A);
    expect((await onA('PUT', '/v1/tools/shell', SHELL)).status).toBe(201);
    const driver = (await onA('POST', '/v1/api-keys', { name: 'driver', roles: ['driver'] })).body.api_key as string;
    const approver = (await onA('POST', '/v1/api-keys', { name: 'approver', roles: ['approver'] })).body.api_key as string;
    const { token } = (await onA('POST', '/v1/capabilities', mint)).body as { token: string };
    const args = { command: 'rm -rf build', cwd: '/workspace/app', timeout_ms: 30000 };
    const asked = await onA('POST', '/v1/approve', { token, tool: 'shell', args, cost: 0.5, call_id: 'run-1' }, driver);
    expect(asked.body.decision).toBe('pending');
    const id = asked.body.approval_id as string;

    const onB = await instance(B);
    expect((await onB('GET', `/v1/approvals/${id}`, undefined, approver)).status).toBe(503);
    expect(await sweep(A, B)).toEqual({ tools: 1, approvals: 1, notHeld: 0 });
    expect((await seals('approvals'))[0]?.startsWith(`${String(B.kid)}.`)).toBe(true);
    expect((await onB('GET', `/v1/approvals/${id}`, undefined, approver)).body).toMatchObject({ state: 'pending', call_id: 'run-1' });
    const resolved = await onB('POST', `/v1/approvals/${id}`, { decision: 'approve' }, approver);
    expect([resolved.status, resolved.body.state, resolved.body.outcome?.decision]).toEqual([200, 'approved', 'grant']);
  });

  test('a sweep that fails (its database closed, or a statement refused) is logged as a warning, as the database said it, and rejects nothing', async () => {
    const closed = await openTestDatabase(backend);
    await closed.close();
    const lines: Record<string, unknown>[] = [];
    await expect(resealLogged(closed.db, await loadKeyRing({ keys: [A, B] }), (e) => lines.push(e))).resolves.toBeUndefined();
    expect(lines).toEqual([expect.objectContaining({ level: 'warn', msg: expect.stringMatching(/re-seal sweep failed/) })]);
    // A refused statement, which drizzle wraps in an error quoting the query: the database's own words are logged.
    const broken = await openTestDatabase(backend);
    try {
      await broken.db.execute(sql`DROP TABLE tools CASCADE`);
      lines.length = 0;
      await expect(resealLogged(broken.db, await loadKeyRing({ keys: [A, B] }), (e) => lines.push(e))).resolves.toBeUndefined();
      expect(lines).toEqual([expect.objectContaining({ level: 'warn', code: '42P01', error: expect.stringMatching(/tools.*does not exist/) })]);
      expect(String(lines[0]?.error)).not.toMatch(/Failed query|params|SELECT/);
    } finally {
      await broken.close();
    }
  });
});
