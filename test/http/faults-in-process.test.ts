/**
 * Faults placed at one statement (found by helper-49's review): the reads the service makes around a
 * decision fail or stall in process while the decision writer commits through the real database
 * (PGlite). The app reads through the PGlite client wrapped so that chosen statements fail (as on a
 * lost connection) or never answer (a stalled database); the writer's client can start a transaction
 * late or never confirm its COMMIT. test/e2e/faults.test.ts does the same at the TCP level, where a
 * fault cannot be aimed at one statement.
 *
 * Each test asserts the contract of docs/api.md "Fail closed": a 503 answered by the request's
 * deadline, `not_committed` only when nothing committed, and never a hang.
 */
import type { PGlite } from '@electric-sql/pglite';
import { drizzle } from 'drizzle-orm/pglite';
import { afterEach, beforeEach, describe, expect, test } from 'vitest';
import { createApp } from '../../src/http/app.js';
import { loadKeyRing, generateSigningJwk } from '../../src/crypto/keys.js';
import { createTenant } from '../../src/service/tenants.js';
import { Store, type Db } from '../../src/store/store.js';
import { DecisionWriter } from '../../src/store/writer.js';
import { openTestDatabase, type TestDatabase } from '../support/db.js';
import { Clock, KEYS } from '../support/app.js';
import { SHELL } from '../support/tools.js';

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- bodies are read freely; assertions check them
type Answer = { status: number; body: any; ms: number } | { status: 'hung'; body: null; ms: number };
type Fault = 'pass' | 'fail' | 'stall' | 'slow';
/** What happens to a batch transaction of the writer: runs; starts SLOW_MS late; commits and its confirmation never arrives. */
type WriterFault = 'pass' | 'slow' | 'unconfirmed';
const SLOW_MS = 300;
const sleep = (ms: number): Promise<void> => new Promise((done) => setTimeout(done, ms));

/** The request's deadline in these tests: short, so a hang is told from a slow answer. */
const DEADLINE_MS = 500;
/** How long a test waits for an answer before calling it hung: the deadline with generous slack. */
const HUNG_MS = DEADLINE_MS + 2500;

interface Rig {
  database: TestDatabase;
  clock: Clock;
  writer: DecisionWriter;
  app: ReturnType<typeof createApp>;
  admin: string;
  /** Decides the fate of each statement the app's store sends (the writer's are never touched). */
  fault: (sql: string) => Fault;
  /** Decides the fate of each batch transaction of the writer. */
  writerFault: () => WriterFault;
  call(key: string, method: string, path: string, body?: unknown): Promise<Answer>;
  /** Audit rows of the tenant, read straight from the database. */
  auditRows(where: string): Promise<Record<string, unknown>[]>;
}

const lost = (): Error => Object.assign(new Error('connection lost (probe)'), { code: 'ECONNRESET' });

async function rig(): Promise<Rig> {
  const database = await openTestDatabase('pglite');
  const client = (database.db as unknown as { $client: PGlite }).$client;
  const r = { fault: (): Fault => 'pass', writerFault: (): WriterFault => 'pass' } as unknown as Rig;
  const wrapped = new Proxy(client, {
    get(target, prop) {
      if (prop === 'query')
        return (sql: string, params?: unknown[], options?: unknown) => {
          const f = r.fault(sql);
          if (f === 'fail') return Promise.reject(lost());
          if (f === 'stall') return new Promise(() => undefined);
          if (f === 'slow') return sleep(SLOW_MS).then(() => target.query(sql, params, options as never));
          return target.query(sql, params, options as never);
        };
      const v = Reflect.get(target, prop, target) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
  const reads = drizzle(wrapped) as unknown as Db;
  const writes = new Proxy(client, {
    get(target, prop) {
      if (prop === 'transaction')
        return async (fn: never) => {
          const f = r.writerFault();
          if (f === 'slow') await sleep(SLOW_MS);
          const out = await target.transaction(fn);
          if (f === 'unconfirmed') return new Promise(() => undefined);
          return out;
        };
      const v = Reflect.get(target, prop, target) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
  const writerDb = drizzle(writes) as unknown as Db;
  const clock = new Clock();
  const keys = await loadKeyRing(KEYS.ring);
  const auditKeys = await loadKeyRing({ keys: [await generateSigningJwk()] });
  const writer = new DecisionWriter(writerDb, { now: clock.now, deadlineMs: DEADLINE_MS });
  const store = new Store(reads);
  const app = createApp({ store, writer, keys, auditKeys, now: clock.now, deadlineMs: DEADLINE_MS });
  const tenant = await createTenant(new Store(database.db), 'a', clock.now());
  Object.assign(r, {
    database,
    clock,
    writer,
    app,
    admin: tenant.apiKey,
    async call(key: string, method: string, path: string, body?: unknown): Promise<Answer> {
      const started = performance.now();
      const res = app.request(path, {
        method,
        headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      const hung = new Promise<'hung'>((done) => setTimeout(() => done('hung'), HUNG_MS));
      const out = await Promise.race([res, hung]);
      if (out === 'hung') return { status: 'hung', body: null, ms: performance.now() - started };
      return { status: out.status, body: await out.json(), ms: performance.now() - started };
    },
    async auditRows(where: string) {
      return (await client.query<Record<string, unknown>>(`SELECT * FROM audit WHERE tenant_id = $1 AND ${where} ORDER BY pos`, [tenant.tenant.id])).rows;
    },
  });
  return r;
}

const outcome = (a: Answer): unknown[] => [a.status, a.body?.error?.code, a.body?.error?.outcome];

describe('faults at one statement: reads around a decision and unconfirmed commits', () => {
  let r: Rig;
  let driver: string;
  let approver: string;
  let expired = 0;

  beforeEach(async () => {
    r = await rig();
    driver = (await r.call(r.admin, 'POST', '/v1/api-keys', { name: 'driver', roles: ['driver'] })).body.api_key as string;
    approver = (await r.call(r.admin, 'POST', '/v1/api-keys', { name: 'approver', roles: ['approver'] })).body.api_key as string;
  });
  afterEach(async () => {
    r.fault = () => 'pass';
    r.writerFault = () => 'pass';
    await Promise.race([r.writer.flush(), sleep(1000)]); // a lane left waiting on purpose never ends
    await r.database.close();
  });

  /** A call of the irreversible shell tool under a fresh capability, answered `pending`; its approval's path and the call. */
  async function pendingCall(callId: string): Promise<{ path: string; call: Record<string, unknown> }> {
    expect((await r.call(r.admin, 'PUT', '/v1/tools/shell', SHELL)).status).toBeLessThan(300);
    const cap = await r.call(r.admin, 'POST', '/v1/capabilities', {
      trajectory_id: `t-${callId}`,
      rights: ['execute'],
      objects: [{ kind: 'path', prefix: '/workspace' }],
      predicate: { budget: 10 },
      ttl_s: 7200,
    });
    expect(cap.status).toBe(201);
    const call = { token: cap.body.token, tool: 'shell', args: { command: 'make', cwd: '/workspace/app', timeout_ms: 30000 }, cost: 1, call_id: callId };
    const asked = await r.call(driver, 'POST', '/v1/approve', call);
    expect(asked.body.decision).toBe('pending');
    return { path: `/v1/approvals/${asked.body.approval_id as string}`, call };
  }

  // ---- (3) waits not bounded by the request's deadline ----

  test('PUT /v1/tools: the read-back after the registration committed stalls: answered 503 unknown by the deadline, not hung', async () => {
    await r.call(r.admin, 'GET', '/v1/tools'); // the admin key is cached
    r.fault = (sql) => (/from "tools"/i.test(sql) ? 'stall' : 'pass');
    const a = await r.call(r.admin, 'PUT', '/v1/tools/shell', SHELL);
    r.fault = () => 'pass';
    expect(a.status).not.toBe('hung');
    expect(outcome(a)).toEqual([503, 'unavailable', 'unknown']);
    expect(await r.auditRows(`event = 'tool'`)).toHaveLength(1); // it did commit
  });

  test('POST /v1/approvals/{id}: the first read of the approval stalls: answered 503 by the deadline, not hung', async () => {
    const { path } = await pendingCall('c-stall-1');
    await r.call(approver, 'GET', path); // the approver key is cached
    r.fault = (sql) => (/from "approvals"/i.test(sql) ? 'stall' : 'pass');
    const a = await r.call(approver, 'POST', path, { decision: 'approve' });
    r.fault = () => 'pass';
    expect(a.status).not.toBe('hung');
    expect(outcome(a)).toEqual([503, 'unavailable', 'not_committed']);
  });

  test('POST /v1/approvals/{id}: the read-back after the resolution committed stalls: answered 503 unknown by the deadline, not hung', async () => {
    const { path } = await pendingCall('c-stall-2');
    await r.call(approver, 'GET', path);
    let reads = 0;
    r.fault = (sql) => (/from "approvals"/i.test(sql) ? (++reads === 1 ? 'pass' : 'stall') : 'pass');
    const a = await r.call(approver, 'POST', path, { decision: 'approve' });
    r.fault = () => 'pass';
    expect(a.status).not.toBe('hung');
    expect(outcome(a)).toEqual([503, 'unavailable', 'unknown']);
    expect(await r.auditRows(`event = 'approve' AND decision = 'grant'`)).toHaveLength(1); // the grant committed
  });

  test('POST /v1/approve repeated (call_id of a pending call): the approval read stalls: answered 503 by the deadline, not hung', async () => {
    const { call } = await pendingCall('c-stall-3');
    r.fault = (sql) => (/from "approvals"/i.test(sql) ? 'stall' : 'pass');
    const a = await r.call(driver, 'POST', '/v1/approve', call);
    r.fault = () => 'pass';
    expect(a.status).not.toBe('hung');
    expect(a.status).toBe(503);
  });

  // ---- (1) a failure after a write committed answered `not_committed` ----

  test.each<[string, (p: { path: string; call: Record<string, unknown> }) => Promise<Answer>]>([
    ['POST /v1/approve repeated', (p) => r.call(driver, 'POST', '/v1/approve', p.call)],
    ['GET /v1/approvals/{id}', (p) => r.call(approver, 'GET', p.path)],
  ])('%s after its approval expired: the expiry commits, the read after it fails: not `not_committed`', async (_, request) => {
    const pending = await pendingCall(`c-exp-${++expired}`);
    r.clock.advance(3600); // past the approval's expiry (15 min)
    await r.call(driver, 'GET', '/v1/tools'); // the keys are read again and cached
    await r.call(approver, 'GET', '/v1/tools');
    let reads = 0;
    r.fault = (sql) => (/from "approvals"/i.test(sql) ? (++reads === 1 ? 'pass' : 'fail') : 'pass');
    const a = await request(pending);
    r.fault = () => 'pass';
    // The expiry decision committed with its audit row:
    expect(await r.auditRows(`event = 'approve' AND reason_code = 'approval_expired'`)).toHaveLength(1);
    expect(outcome(a)).toEqual([503, 'unavailable', 'unknown']);
  });

  // ---- (4) an answer inconsistent with what committed ----

  test('GET /v1/approvals/{id} past its expiry, on a slow database: never 503 not_committed for an expiry that then commits', async () => {
    const { path } = await pendingCall('c-exp-3');
    r.clock.advance(3600);
    await r.call(approver, 'GET', '/v1/tools');
    let reads = 0;
    // The first read of the approval is slow (300 ms), and so is the start of the writer's transaction.
    r.fault = (sql) => (/from "approvals"/i.test(sql) && ++reads === 1 ? 'slow' : 'pass');
    r.writerFault = () => 'slow';
    const a = await r.call(approver, 'GET', path);
    await sleep(1000); // whatever the writer still had, it has done by now
    r.fault = () => 'pass';
    r.writerFault = () => 'pass';
    const committed = (await r.auditRows(`event = 'approve' AND reason_code = 'approval_expired'`)).length;
    // Either the expiry did not commit, or the answer does not say `not_committed`.
    expect({ answer: outcome(a), committed }).not.toEqual({ answer: [503, 'unavailable', 'not_committed'], committed: 1 });
  });

  // ---- relatives: the writer's waiting lanes ----

  test('a key change whose COMMIT is never confirmed does not block every later key change of the tenant', async () => {
    let once = true;
    r.writerFault = () => {
      if (!once) return 'pass';
      once = false;
      return 'unconfirmed';
    };
    const first = await r.call(r.admin, 'POST', '/v1/api-keys', { name: 'k1', roles: ['auditor'] });
    expect(outcome(first)).toEqual([503, 'unavailable', 'unknown']);
    // The database answers again. A leaked key must be revocable now, and keys creatable.
    const made = await r.call(r.admin, 'POST', '/v1/api-keys', { name: 'k2', roles: ['auditor'] });
    expect(made.status).toBe(201);
    const revoked = await r.call(r.admin, 'DELETE', `/v1/api-keys/${made.body.key_id as string}`);
    expect(revoked.status).toBe(200);
  });

  test('a revoke whose COMMIT is never confirmed does not block later revokes of the same capability for good', async () => {
    const cap = await r.call(r.admin, 'POST', '/v1/capabilities', {
      trajectory_id: 't-rv',
      rights: ['read'],
      objects: [{ kind: 'path', prefix: '/w' }],
      ttl_s: 3600,
    });
    let once = true;
    r.writerFault = () => {
      if (!once) return 'pass';
      once = false;
      return 'unconfirmed';
    };
    const first = await r.call(r.admin, 'POST', '/v1/revoke', { capability_id: cap.body.capability_id });
    expect(outcome(first)).toEqual([503, 'unavailable', 'unknown']);
    const again = await r.call(r.admin, 'POST', '/v1/revoke', { capability_id: cap.body.capability_id });
    expect(again.status).toBe(200);
  });
});
