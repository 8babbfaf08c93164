/**
 * Human approval of tool calls (issue 17): an irreversible call answers `pending` and charges
 * nothing; an approver's key approves it and the call is granted and charged exactly once, however
 * often the driver repeats and on however many instances (two apps with writers of their own on one
 * database; on PostgreSQL, two connection pools); rejected and expired calls are denied; the driver
 * long-polls; every step is an audit row, the resolution under the approver's key.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createApp } from '../../src/http/app.js';
import { Metrics } from '../../src/http/metrics.js';
import { openDatabase, type Database } from '../../src/node/db.js';
import { APPROVAL_TTL_S, MAX_LONG_POLLS } from '../../src/service/approvals.js';
import { Store } from '../../src/store/store.js';
import { DecisionWriter } from '../../src/store/writer.js';
import { BACKENDS } from '../support/db.js';
import { startHarness, TEST_DEADLINE_MS, type Harness } from '../support/app.js';
import { CATALOG, SHELL, variant } from '../support/tools.js';

type Body = Record<string, unknown>;
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- bodies are read freely; assertions check them
type Answer = { status: number; body: any };
type App = ReturnType<typeof createApp>;

async function callOn(app: App, key: string, method: string, path: string, body?: unknown): Promise<Answer> {
  const res = await app.request(path, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: res.status, body: await res.json() };
}

describe.each(BACKENDS)('approvals on %s', (backend) => {
  let h: Harness;
  /** A second instance: its own app, writer and metrics (and, on PostgreSQL, its own pool) on the same database. */
  let other: { app: App; writer: DecisionWriter; metrics: Metrics; database?: Database };
  let driver: string;
  let approver: { key: string; id: string };
  let seq = 0;

  beforeAll(async () => {
    h = await startHarness(backend);
    const database = backend === 'postgres' ? await openDatabase({ databaseUrl: String(h.database.url), poolSize: 4 }) : undefined;
    const db = database?.db ?? h.database.db;
    const writer = new DecisionWriter(db, { now: h.clock.now, deadlineMs: TEST_DEADLINE_MS });
    const metrics = new Metrics();
    other = {
      app: createApp({ store: new Store(db), writer, metrics, keys: h.keys, auditKeys: h.auditKeys, now: h.clock.now, deadlineMs: TEST_DEADLINE_MS }),
      writer,
      metrics,
      ...(database === undefined ? {} : { database }),
    };
    for (const [name, tool] of Object.entries(CATALOG)) expect((await h.call('PUT', `/v1/tools/${name}`, tool)).status).toBe(201);
    driver = (await h.call('POST', '/v1/api-keys', { name: 'driver', roles: ['driver'] })).body.api_key as string;
    const made = await h.call('POST', '/v1/api-keys', { name: 'approver', roles: ['approver'] });
    approver = { key: made.body.api_key as string, id: made.body.key_id as string };
  });
  afterAll(async () => {
    await other.writer.flush();
    await other.database?.close();
    await h.close();
  });

  const on = (which: 'a' | 'b'): App => (which === 'a' ? h.app : other.app);

  async function mint(): Promise<{ token: string; capability_id: string; trajectory_id: string }> {
    const r = await h.call('POST', '/v1/capabilities', {
      trajectory_id: `apv-${++seq}`,
      rights: ['read', 'write', 'execute'],
      objects: [{ kind: 'path', prefix: '/workspace' }],
      predicate: { budget: 10, max_calls: 100 },
      ttl_s: 7200,
    });
    expect(r.status).toBe(201);
    return r.body;
  }

  const shell = (token: string, callId: string, which: 'a' | 'b' = 'a'): Promise<Answer> =>
    callOn(on(which), driver, 'POST', '/v1/approve', {
      token,
      tool: 'shell',
      args: { command: 'rm -rf build', cwd: '/workspace/app', timeout_ms: 30000 },
      cost: 0.5,
      call_id: callId,
    });
  const resolve = (id: string, decision: 'approve' | 'reject', which: 'a' | 'b' = 'a', note?: string): Promise<Answer> =>
    callOn(on(which), approver.key, 'POST', `/v1/approvals/${id}`, { decision, ...(note === undefined ? {} : { note }) });
  const spend = async (id: string): Promise<[number, number]> => {
    const c = (await h.call('GET', `/v1/capabilities/${id}`)).body as Body;
    return [c.spent as number, c.calls as number];
  };
  const rows = async (trajectory: string): Promise<Body[]> => (await h.call('GET', `/v1/audit?trajectory_id=${trajectory}&limit=1000`)).body.entries as Body[];
  const summary = async (trajectory: string): Promise<Body | undefined> =>
    ((await h.call('GET', '/v1/audit/trajectories?limit=100')).body.trajectories as Body[]).find((t) => t.root_trajectory_id === trajectory);
  const steps = (entries: Body[]): string[] => entries.map((e) => [e.event, e.decision, e.reason_code ?? ''].join(':'));

  test('an irreversible call waits; approved, it is granted and charged once, whatever repeats on two instances', async () => {
    const cap = await mint();
    const asked = await shell(cap.token, 'run-1');
    expect(asked.status).toBe(200);
    expect(asked.body).toMatchObject({ decision: 'pending', reason: null, capability_id: cap.capability_id });
    expect(asked.body.approval_id).toMatch(/^apv_/);
    expect(Date.parse(asked.body.expires_at as string)).toBe(h.clock.ms + APPROVAL_TTL_S * 1000);
    const id = asked.body.approval_id as string;
    expect(await spend(cap.capability_id)).toEqual([0, 0]);

    // Seen by the driver (its own call) and listed for approvers.
    expect((await callOn(h.app, driver, 'GET', `/v1/approvals/${id}`)).body).toMatchObject({
      state: 'pending',
      tool: 'shell',
      tool_version: 1,
      call_id: 'run-1',
      outcome: null,
    });
    const listed = await callOn(other.app, approver.key, 'GET', '/v1/approvals');
    expect((listed.body.approvals as Body[]).map((a) => a.approval_id)).toContain(id);
    // A repeat before approval: still pending, on the other instance too.
    expect((await shell(cap.token, 'run-1', 'b')).body).toMatchObject({ decision: 'pending', approval_id: id, replayed: true });
    // A driver may not resolve its own call.
    expect((await callOn(h.app, driver, 'POST', `/v1/approvals/${id}`, { decision: 'approve' })).status).toBe(403);

    // Approvers on both instances, and the driver repeating on both, all at once.
    const answers = await Promise.all([
      resolve(id, 'approve', 'a', 'ok'),
      resolve(id, 'approve', 'b', 'ok'),
      shell(cap.token, 'run-1', 'a'),
      shell(cap.token, 'run-1', 'b'),
      resolve(id, 'approve', 'b'),
      shell(cap.token, 'run-1', 'b'),
    ]);
    for (const r of [answers[0], answers[1], answers[4]]) expect([r?.status, r?.body.state]).toEqual([200, 'approved']);
    for (const r of [answers[2], answers[3], answers[5]]) expect(['pending', 'grant']).toContain(r?.body.decision);

    const after = await shell(cap.token, 'run-1', 'b');
    expect(after.body).toMatchObject({ decision: 'grant', approval_id: id, replayed: true, budget_remaining: 9.5, calls_remaining: 99 });
    expect(await spend(cap.capability_id)).toEqual([0.5, 1]);
    const view = await callOn(other.app, driver, 'GET', `/v1/approvals/${id}`);
    expect(view.body).toMatchObject({ state: 'approved', resolved_by: approver.id, outcome: { decision: 'grant', approval_id: id } });

    const entries = await rows(cap.trajectory_id);
    expect(steps(entries)).toEqual(['mint:grant:', 'approve:pending:', 'approval:grant:', 'approve:grant:']);
    expect(entries[2]).toMatchObject({ key_id: approver.id, detail: { approval_id: id, resolution: 'approved' } });
    expect(entries[3]).toMatchObject({ key_id: approver.id, call_id: 'run-1', op: 'execute', cost: 0.5, id: view.body.outcome.audit_id });
    expect((await h.call('GET', '/v1/audit/verify')).body.ok).toBe(true);
    // The trajectory's summary counts the call once: the person's resolution is not a decision of its own.
    expect(await summary(cap.trajectory_id)).toMatchObject({ grants: 2, denials: 0, calls: 1, spent: 0.5 });

    const late = await resolve(id, 'reject');
    expect([late.status, late.body.error.code, late.body.error.state]).toEqual([409, 'approval_resolved', 'approved']);
  });

  test('the key that asked for a call may not resolve it (403 self_approval, audited); another approver may', async () => {
    // A key holding both roles (or a leaked driver key that was also made an approver) asks, then tries to approve.
    const made = await h.call('POST', '/v1/api-keys', { name: 'driver-approver', roles: ['driver', 'approver'] });
    const both = { key: made.body.api_key as string, id: made.body.key_id as string };
    const cap = await mint();
    const args = { command: 'rm -rf build', cwd: '/workspace/app', timeout_ms: 30000 };
    const asked = await callOn(h.app, both.key, 'POST', '/v1/approve', { token: cap.token, tool: 'shell', args, cost: 0.5, call_id: 'run-self' });
    expect(asked.body.decision).toBe('pending');
    const id = asked.body.approval_id as string;
    expect((await callOn(h.app, approver.key, 'GET', `/v1/approvals/${id}`)).body).toMatchObject({ state: 'pending', requested_by: both.id });

    for (const [which, decision] of [
      ['a', 'approve'],
      ['b', 'approve'],
      ['a', 'reject'],
    ] as const) {
      const r = await callOn(on(which), both.key, 'POST', `/v1/approvals/${id}`, { decision });
      expect([r.status, r.body.error?.code]).toEqual([403, 'self_approval']);
    }
    // The admin key asks too, and may not approve its own call either.
    const own = (await h.call('POST', '/v1/approve', { token: cap.token, tool: 'shell', args, cost: 0.5, call_id: 'run-self-admin' })).body;
    const byAdmin = await h.call('POST', `/v1/approvals/${own.approval_id as string}`, { decision: 'approve' });
    expect([byAdmin.status, byAdmin.body.error?.code]).toEqual([403, 'self_approval']);
    const admin = (await h.call('GET', `/v1/approvals/${own.approval_id as string}`)).body.requested_by as string;
    expect(admin).not.toBe(both.id);

    expect((await callOn(h.app, approver.key, 'GET', `/v1/approvals/${id}`)).body).toMatchObject({ state: 'pending', resolved_by: null, outcome: null });
    expect(await spend(cap.capability_id)).toEqual([0, 0]);
    const refused = (await rows(cap.trajectory_id)).filter((e) => e.reason_code === 'self_approval');
    expect(refused.map((e) => [e.event, e.decision, e.key_id, (e.detail as Body).approval_id])).toEqual([
      ['approval', 'deny', both.id, id],
      ['approval', 'deny', both.id, id],
      ['approval', 'deny', both.id, id],
      ['approval', 'deny', admin, own.approval_id],
    ]);
    expect((await h.call('GET', '/v1/audit/verify')).body.ok).toBe(true);

    // Another approver's key resolves it as usual.
    const r = await resolve(id, 'approve');
    expect(r.body).toMatchObject({ state: 'approved', requested_by: both.id, resolved_by: approver.id, outcome: { decision: 'grant' } });
    expect(await spend(cap.capability_id)).toEqual([0.5, 1]);
  });

  // The rule is per key (README "Tenants and API keys"): an admin key that asked for a call can make an
  // approver key on the spot and approve its own call with it. That escape is documented; what is not
  // is that nothing in the audit then ties the approving key to the asking one: creating (and
  // revoking) an API key writes no audit row, so the approval reads as another person's. Fix: audit
  // key management (event `access`, a grant naming the new key's id, roles and expiry, under the
  // creating key's key_id), with the key's insert in the same transaction as its row.
  test('an approver key made by the key that asked for the call is on the record: the audit names who made it', async () => {
    const made = await h.call('POST', '/v1/api-keys', { name: 'ops-admin', roles: ['admin'] });
    const admin = { key: made.body.api_key as string, id: made.body.key_id as string };
    const cap = await mint();
    const args = { command: 'rm -rf build', cwd: '/workspace/app', timeout_ms: 30000 };
    const asked = await callOn(h.app, admin.key, 'POST', '/v1/approve', { token: cap.token, tool: 'shell', args, cost: 0.5, call_id: 'own-1' });
    const id = asked.body.approval_id as string;
    const second = await callOn(h.app, admin.key, 'POST', '/v1/api-keys', { name: 'rubber-stamp', roles: ['approver'] });
    expect(second.status).toBe(201);
    const approved = await callOn(h.app, second.body.api_key as string, 'POST', `/v1/approvals/${id}`, { decision: 'approve' });
    expect(approved.body).toMatchObject({ state: 'approved', requested_by: admin.id, resolved_by: second.body.key_id, outcome: { decision: 'grant' } });
    // The approving key's creation is on the record, by the key that asked.
    const entries = (await h.call('GET', '/v1/audit?limit=1000')).body.entries as Body[];
    expect(entries.some((e) => e.key_id === admin.id && JSON.stringify(e.detail).includes(second.body.key_id as string))).toBe(true);
  });

  test("a driver reads the approval of its own call, not another driver's; approvers and auditors read any", async () => {
    const cap = await mint();
    const id = (await shell(cap.token, 'own-read')).body.approval_id as string;
    const other = (await h.call('POST', '/v1/api-keys', { name: 'driver-2', roles: ['driver'] })).body.api_key as string;
    const auditor = (await h.call('POST', '/v1/api-keys', { name: 'auditor-2', roles: ['auditor'] })).body.api_key as string;
    const read = async (key: string): Promise<[number, unknown]> => {
      const r = await callOn(h.app, key, 'GET', `/v1/approvals/${id}`);
      return [r.status, r.body.state ?? r.body.error?.code];
    };
    expect(await read(driver)).toEqual([200, 'pending']);
    // As for an id that does not exist: the other driver learns nothing of the call's args.
    expect(await read(other)).toEqual([404, 'not_found']);
    expect(await read(auditor)).toEqual([200, 'pending']);
    expect(await read(approver.key)).toEqual([200, 'pending']);
  });

  test('a rejected call is denied approval_rejected, with the note, and charges nothing', async () => {
    const cap = await mint();
    const id = (await shell(cap.token, 'run-r')).body.approval_id as string;
    const r = await resolve(id, 'reject', 'b', 'not on prod');
    expect(r.body).toMatchObject({
      state: 'rejected',
      note: 'not on prod',
      resolved_by: approver.id,
      outcome: { decision: 'deny', reason: { code: 'approval_rejected' } },
    });
    const again = await shell(cap.token, 'run-r');
    expect([again.body.decision, again.body.reason.code, again.body.replayed]).toEqual(['deny', 'approval_rejected', true]);
    expect(await spend(cap.capability_id)).toEqual([0, 0]);
    expect(steps(await rows(cap.trajectory_id))).toEqual([
      'mint:grant:',
      'approve:pending:',
      'approval:deny:approval_rejected',
      'approve:deny:approval_rejected',
    ]);
    expect((await resolve(id, 'approve')).status).toBe(409);
    expect(await summary(cap.trajectory_id)).toMatchObject({ grants: 1, denials: 1, calls: 0, spent: 0 });
  });

  test('unresolved by expires_at, the call is denied approval_expired, once', async () => {
    const cap = await mint();
    const id = (await shell(cap.token, 'run-x')).body.approval_id as string;
    h.clock.advance(APPROVAL_TTL_S + 1);
    const [seen, repeated, approving] = await Promise.all([
      callOn(other.app, driver, 'GET', `/v1/approvals/${id}`),
      shell(cap.token, 'run-x'),
      resolve(id, 'approve', 'b'),
    ]);
    expect(seen.body).toMatchObject({ state: 'expired', resolved_by: null, outcome: { decision: 'deny', reason: { code: 'approval_expired' } } });
    expect([repeated.body.decision, repeated.body.reason.code]).toEqual(['deny', 'approval_expired']);
    expect([approving.status, approving.body.error.state]).toEqual([409, 'expired']);
    expect(await spend(cap.capability_id)).toEqual([0, 0]);
    expect(steps(await rows(cap.trajectory_id))).toEqual(['mint:grant:', 'approve:pending:', 'approve:deny:approval_expired']);
  });

  test('the driver long-polls until the call is resolved', async () => {
    const cap = await mint();
    const id = (await shell(cap.token, 'run-p')).body.approval_id as string;
    const started = Date.now();
    const polling = callOn(h.app, driver, 'GET', `/v1/approvals/${id}?wait_s=10`);
    await new Promise((r) => setTimeout(r, 400));
    await resolve(id, 'approve', 'b');
    const polled = await polling;
    expect(polled.body).toMatchObject({ state: 'approved', outcome: { decision: 'grant' } });
    expect(Date.now() - started).toBeLessThan(8000);
    // Unresolved, the wait ends on time with the approval still pending.
    const waiting = (await shell(cap.token, 'run-q')).body.approval_id as string;
    const t0 = Date.now();
    expect((await callOn(h.app, driver, 'GET', `/v1/approvals/${waiting}?wait_s=1`)).body.state).toBe('pending');
    expect(Date.now() - t0).toBeGreaterThanOrEqual(700);
    expect((await callOn(h.app, driver, 'GET', `/v1/approvals/${waiting}?wait_s=31`)).status).toBe(400);
  });

  test('beyond MAX_LONG_POLLS waiting at once, a long-poll is answered at once, as the approval stands', async () => {
    const cap = await mint();
    const id = (await shell(cap.token, 'run-many')).body.approval_id as string;
    /** The instance's gauge of waiting long-polls, as a scrape reads it. */
    const waiting = async (): Promise<number> => {
      const text = await (await other.app.request('/metrics')).text();
      return Number(/^warrant_approvals_long_polls (\d+)$/m.exec(text)?.[1]);
    };
    expect(await waiting()).toBe(0);
    const polls = Array.from({ length: MAX_LONG_POLLS }, () => callOn(other.app, driver, 'GET', `/v1/approvals/${id}?wait_s=10`));
    for (let i = 0; i < 250 && (await waiting()) < MAX_LONG_POLLS; i++) await new Promise((r) => setTimeout(r, 20));
    expect(await waiting()).toBe(MAX_LONG_POLLS);
    // Uncapped, this one would wait its 10 s like the others; capped, it answers at once. The approval
    // is resolved only once it has answered (or has plainly been kept waiting).
    const extra = callOn(other.app, driver, 'GET', `/v1/approvals/${id}?wait_s=10`);
    const early = await Promise.race([extra.then((r) => r.body.state as string), new Promise((r) => setTimeout(() => r('kept waiting'), 5000))]);
    await resolve(id, 'approve', 'a');
    expect(early).toBe('pending');
    for (const p of await Promise.all(polls)) expect(p.body.state).toBe('approved');
    expect(await waiting()).toBe(0);
  });

  test('a capability revoked while its call waits: approval decides it as approve would now', async () => {
    const cap = await mint();
    const id = (await shell(cap.token, 'run-v')).body.approval_id as string;
    expect((await h.call('POST', '/v1/revoke', { capability_id: cap.capability_id })).status).toBe(200);
    const r = await resolve(id, 'approve');
    expect(r.body).toMatchObject({ state: 'approved', outcome: { decision: 'deny', reason: { code: 'revoked' } } });
    expect(await spend(cap.capability_id)).toEqual([0, 0]);
  });

  test('approvals of another tenant are not found', async () => {
    const cap = await mint();
    const id = (await shell(cap.token, 'run-t')).body.approval_id as string;
    expect((await h.call('GET', `/v1/approvals/${id}`, undefined, { as: 'b' })).status).toBe(404);
    expect((await h.call('POST', `/v1/approvals/${id}`, { decision: 'approve' }, { as: 'b' })).status).toBe(404);
  });

  // Whoever writes the database could mark a call approved with a grant as its outcome (its driver
  // acts on it with no grant in the audit), or change what the approver is shown and decides on.
  test('an approval row changed in the database is never shown, answered from nor resolved: 503, nothing granted', async () => {
    const { sql } = await import('drizzle-orm');
    const exec = (q: ReturnType<typeof sql>): Promise<unknown> => h.database.db.execute(q);
    const cap = await mint();
    const asked = await shell(cap.token, 'forged-1');
    const id = asked.body.approval_id as string;
    const granted = { decision: 'grant', reason: null, capability_id: cap.capability_id, audit_id: 'aud_forged', approval_id: id };
    await exec(sql`UPDATE approvals SET state = 'approved', outcome = ${JSON.stringify(granted)}::jsonb, resolved_at = now() WHERE id = ${id}`);
    // Reads that found the change: nothing was decided, so nothing committed.
    for (const r of [await shell(cap.token, 'forged-1'), await h.call('GET', `/v1/approvals/${id}`)])
      expect([r.status, r.body.error.code, r.body.error.outcome]).toEqual([503, 'unavailable', 'not_committed']);
    // Left out of the queue, which stays open for the rest.
    const listed = await h.call('GET', '/v1/approvals?state=approved&limit=100');
    expect(listed.status).toBe(200);
    expect((listed.body.approvals as Body[]).map((a) => a.approval_id)).not.toContain(id);

    const other = await shell(cap.token, 'forged-2');
    const otherId = other.body.approval_id as string;
    await exec(sql`UPDATE approvals SET args = ${JSON.stringify({ command: 'ls', cwd: '/workspace/app', timeout_ms: 30000 })}::jsonb WHERE id = ${otherId}`);
    expect((await h.call('GET', `/v1/approvals/${otherId}`)).status).toBe(503);
    expect((await resolve(otherId, 'approve')).status).toBe(503);
    expect(await spend(cap.capability_id)).toEqual([0, 0]);
    await exec(sql`UPDATE approvals SET seal = NULL WHERE id = ${otherId}`);
    expect((await h.call('GET', `/v1/approvals/${otherId}`)).status).toBe(503);
    expect((await rows(cap.trajectory_id)).filter((e) => e.event === 'approve' && e.decision === 'grant')).toEqual([]);
  });

  test('a settled approval put back to its sealed pending copy is not settled again: 503, nothing granted twice', async () => {
    const { sql } = await import('drizzle-orm');
    const cap = await mint();
    const id = (await shell(cap.token, 'again-1')).body.approval_id as string;
    const saved: unknown = await h.database.db.execute(sql`SELECT to_jsonb(a) AS j FROM approvals a WHERE id = ${id}`);
    const copy = JSON.stringify((Array.isArray(saved) ? (saved as Body[]) : (saved as { rows: Body[] }).rows)[0]?.j);
    expect((await resolve(id, 'approve')).status).toBe(200);
    const charged = await spend(cap.capability_id);
    await h.database.db.execute(sql`DELETE FROM approvals WHERE id = ${id}`);
    await h.database.db.execute(sql`INSERT INTO approvals SELECT * FROM jsonb_populate_record(NULL::approvals, ${copy}::jsonb)`);
    const again = await resolve(id, 'approve');
    // Its unit found the earlier outcome and wrote nothing.
    expect([again.status, again.body.error?.code, again.body.error?.outcome]).toEqual([503, 'unavailable', 'not_committed']);
    expect(await spend(cap.capability_id)).toEqual(charged);
    expect((await rows(cap.trajectory_id)).filter((e) => e.event === 'approve' && e.decision === 'grant')).toHaveLength(1);
    expect((await h.call('GET', '/v1/audit/verify')).body.ok).toBe(true);
  });

  // docs/api.md "Idempotency and replays": a repeat of a call_id with the same request returns the
  // first decision and writes no audit row. The tool's checks (unknown_tool, args_invalid) ran before
  // the call_id's record was read, so a tool registered anew between the ask and its repeat had the
  // repeat decided again: a fresh deny, and a second audit row, for a call still waiting for a person,
  // which the approver then granted and charged while its driver had been told it was denied.
  test('a repeat of a waiting call_id is answered from its record even after its tool was registered anew', async () => {
    const tool = `deploy-${++seq}`;
    expect((await h.call('PUT', `/v1/tools/${tool}`, SHELL)).status).toBe(201);
    const cap = await mint();
    const body = { token: cap.token, tool, args: { command: 'make deploy', cwd: '/workspace/app', timeout_ms: 30000 }, cost: 0.5, call_id: 'dep-1' };
    const asked = await callOn(h.app, driver, 'POST', '/v1/approve', body);
    expect(asked.body.decision).toBe('pending');
    const id = asked.body.approval_id as string;
    // The tenant's admin tightens the tool meanwhile: the waiting call's args no longer keep its schema.
    const tighter = variant(SHELL, (t) => {
      t.input_schema.properties.timeout_ms.maximum = 10000;
    });
    expect((await h.call('PUT', `/v1/tools/${tool}`, tighter)).status).toBe(201);

    const repeated = await callOn(h.app, driver, 'POST', '/v1/approve', body);
    expect(repeated.body).toMatchObject({ decision: 'pending', approval_id: id, audit_id: asked.body.audit_id, replayed: true });
    expect(steps(await rows(cap.trajectory_id))).toEqual(['mint:grant:', 'approve:pending:']);

    // Approved, the repeat learns the grant it was charged for.
    expect((await resolve(id, 'approve')).body.outcome).toMatchObject({ decision: 'grant' });
    expect((await callOn(h.app, driver, 'POST', '/v1/approve', body)).body).toMatchObject({ decision: 'grant', approval_id: id, replayed: true });
    expect(await spend(cap.capability_id)).toEqual([0.5, 1]);
  });

  test('a repeat of a waiting call_id whose tool now takes another right or target is a conflict, never decided again', async () => {
    const tool = `deploy-${++seq}`;
    expect((await h.call('PUT', `/v1/tools/${tool}`, SHELL)).status).toBe(201);
    const cap = await mint();
    const body = { token: cap.token, tool, args: { command: 'make deploy', cwd: '/workspace/app', timeout_ms: 30000 }, cost: 0.5, call_id: 'dep-2' };
    expect((await callOn(h.app, driver, 'POST', '/v1/approve', body)).body.decision).toBe('pending');
    // Registered anew with a tighter schema and another right: the repeat's op (so its request hash)
    // no longer matches the record, and its args no longer keep the schema.
    const changed = variant(SHELL, (t) => {
      t.input_schema.properties.timeout_ms.maximum = 10000;
      t.right = 'write';
    });
    expect((await h.call('PUT', `/v1/tools/${tool}`, changed)).status).toBe(201);
    const repeated = await callOn(h.app, driver, 'POST', '/v1/approve', body);
    expect([repeated.status, repeated.body.error?.code]).toEqual([409, 'idempotency_conflict']);
    expect(steps(await rows(cap.trajectory_id))).toEqual(['mint:grant:', 'approve:pending:']);
  });

  test("approving a call whose capability's stored chain was rewritten (a revoked parent cut out) grants nothing", async () => {
    const { sql } = await import('drizzle-orm');
    const root = await mint();
    const sub = async (token: string, t: string): Promise<{ token: string; capability_id: string }> => {
      const r = await h.call('POST', '/v1/attenuate', {
        parent_token: token,
        trajectory_id: t,
        rights: ['execute'],
        objects: [{ kind: 'path', prefix: '/workspace' }],
        ttl_s: 3600,
      });
      expect(r.status).toBe(201);
      return r.body as { token: string; capability_id: string };
    };
    const b = await sub(root.token, `${root.trajectory_id}.b`);
    const c = await sub(b.token, `${root.trajectory_id}.b.c`);
    const id = (await shell(c.token, 'cut-1')).body.approval_id as string;
    expect((await h.call('POST', '/v1/revoke', { capability_id: b.capability_id })).status).toBe(200);
    await h.database.db.execute(sql`UPDATE capabilities SET revoked_at = NULL, ancestors = ARRAY[${root.capability_id}] WHERE id = ${c.capability_id}`);
    const r = await resolve(id, 'approve');
    expect(r.body.outcome).toMatchObject({ decision: 'deny', reason: { code: 'bad_token' } });
    expect(await spend(c.capability_id)).toEqual([0, 0]);
  });
});
