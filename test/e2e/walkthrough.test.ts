/**
 * The README walk-through against the real server process over HTTP: mint, attenuate, approve
 * (grant and deny), idempotent call_id, hierarchical budgets, a refused attenuation, revocation of a
 * tree, the audit log and its verification; then a clean SIGTERM shutdown and a restart that keeps
 * the data and the signing key. The steps run in order and build on each other.
 */
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { BACKENDS, openTestDatabase, type TestDatabase } from '../support/db.js';
import { cleanupServers, startServer, type RunningServer } from '../support/server.js';

const kidOf = (token: string): unknown => JSON.parse(Buffer.from(token.split('.')[0] ?? '', 'base64url').toString('utf8')).kid;
const codes = (violations: { code: string }[]): string[] => violations.map((v) => v.code);

/** True once nothing answers at `url` (polled briefly: npm may exit a moment before the server). */
async function refusesConnections(url: string): Promise<boolean> {
  for (let i = 0; i < 30; i++) {
    try {
      await fetch(`${url}/healthz`);
    } catch {
      return true;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return false;
}

describe.each(BACKENDS)('README walk-through on a listening server (%s)', (backend) => {
  let database: TestDatabase | undefined;
  const env: Record<string, string> = {};
  let server: RunningServer;
  const logs: string[] = [];
  /** Every API key and token seen: no log line may contain one. */
  const secrets: string[] = [];
  /** Audit rows the steps below must have written, counted as they decide. */
  let decisions = 0;
  const cap: Record<'root' | 'child' | 'a' | 'b', { id: string; token: string }> = {} as never;

  /** A POST that makes a decision (one audit row); tokens it returns are remembered as secrets. */
  async function decide(path: string, body: unknown) {
    const r = await server.call('POST', path, body);
    decisions += 1;
    if (typeof r.body?.token === 'string') secrets.push(r.body.token);
    return r;
  }

  /** A child of the root, as `name`. */
  async function attenuate(name: 'child' | 'a' | 'b', body: Record<string, unknown>): Promise<void> {
    const r = await decide('/v1/attenuate', { parent_token: cap.root.token, ...body });
    expect(r.status).toBe(201);
    expect(r.body).toMatchObject({ parent_id: cap.root.id, depth: 1 });
    cap[name] = { id: r.body.capability_id, token: r.body.token };
  }

  async function approve(name: keyof typeof cap, path: string, cost: number, callId?: string) {
    const r = await decide('/v1/approve', {
      token: cap[name].token,
      op: 'read',
      target: { kind: 'path', path },
      cost,
      ...(callId === undefined ? {} : { call_id: callId }),
    });
    expect(r.status).toBe(200);
    return r.body;
  }

  const get = async (id: string) => (await server.call('GET', `/v1/capabilities/${id}`)).body;

  beforeAll(async () => {
    if (backend === 'postgres') {
      database = await openTestDatabase('postgres');
      env.DATABASE_URL = database.url!;
    }
    server = await startServer({ env });
    secrets.push(server.apiKey);
  });

  afterAll(async () => {
    await cleanupServers();
    await database?.close();
  });

  test('the keyless endpoints answer and /v1 needs a tenant key', async () => {
    expect((await server.call('GET', '/healthz', undefined, { key: null })).body).toEqual({ ok: true });
    expect((await server.call('GET', '/readyz', undefined, { key: null })).status).toBe(200);
    const jwks = await server.call('GET', '/.well-known/jwks.json', undefined, { key: null });
    const listening = server.logEntries().find((e) => String(e.msg).startsWith('listening on'));
    expect(jwks.body.keys.map((k: { kid: string }) => k.kid)).toEqual([listening?.kid]);
    expect(jwks.body.keys[0]).not.toHaveProperty('d');
    const doc = await server.call('GET', '/openapi.json', undefined, { key: null });
    expect(doc.body.openapi).toBe('3.1.0');
    expect(Object.keys(doc.body.paths)).toEqual(expect.arrayContaining(['/v1/capabilities', '/v1/attenuate', '/v1/approve', '/v1/audit/verify']));
    const anonymous = await server.call('GET', '/v1/audit', undefined, { key: null });
    expect([anonymous.status, anonymous.body.error.code]).toEqual([401, 'unauthorized']);
  });

  test('mint a root, then attenuate a child with less', async () => {
    const m = await decide('/v1/capabilities', {
      trajectory_id: 't-1',
      rights: ['read', 'write'],
      objects: [{ kind: 'path', prefix: '/workspace/t-1' }],
      predicate: { budget: 1, max_calls: 10, max_depth: 2 },
      ttl_s: 3600,
    });
    expect(m.status).toBe(201);
    expect(m.body).toMatchObject({ trajectory_id: 't-1', parent_id: null, depth: 0, rights: ['read', 'write'] });
    const jwks = await server.call('GET', '/.well-known/jwks.json', undefined, { key: null });
    expect(kidOf(m.body.token)).toBe(jwks.body.keys[0].kid);
    cap.root = { id: m.body.capability_id, token: m.body.token };

    await attenuate('child', {
      trajectory_id: 't-1.sub-1',
      rights: ['read'],
      objects: [{ kind: 'path', prefix: '/workspace/t-1/src' }],
      predicate: { budget: 0.5, max_calls: 5, max_depth: 1 },
      ttl_s: 600,
    });
    expect((await get(cap.root.id)).children).toEqual([cap.child.id]);
  });

  test('approve grants inside the child and denies a `..` path that leaves it', async () => {
    const grant = await approve('child', '/workspace/t-1/src/main.py', 0.1, 'call-1');
    expect(grant).toMatchObject({ decision: 'grant', reason: null, capability_id: cap.child.id, budget_remaining: 0.4 });
    const outside = await approve('child', '/workspace/t-1/src/../secrets', 0);
    expect([outside.decision, outside.reason.code]).toEqual(['deny', 'object_outside']);
  });

  test('a repeated call_id returns the first decision and charges once', async () => {
    const body = { token: cap.child.token, op: 'read', target: { kind: 'path', path: '/workspace/t-1/src/main.py' }, cost: 0.1, call_id: 'call-2' };
    const first = await decide('/v1/approve', body);
    const again = await server.call('POST', '/v1/approve', body); // a replay writes no audit row
    expect(again.body).toEqual({ ...first.body, replayed: true, decided_at: expect.any(String) });
    expect(first.body.decision).toBe('grant');
    const changed = await server.call('POST', '/v1/approve', { ...body, cost: 0.2 });
    expect([changed.status, changed.body.error.code]).toEqual([409, 'idempotency_conflict']);
    expect(await get(cap.child.id)).toMatchObject({ spent: 0.2, calls: 2 });
    expect(await get(cap.root.id)).toMatchObject({ spent: 0.2, calls: 2 });
  });

  test("children's spending exhausts the root budget, so a sibling within its own budget is denied", async () => {
    const sibling = (p: string) => ({
      rights: ['read'],
      objects: [{ kind: 'path', prefix: `/workspace/t-1/${p}` }],
      predicate: { budget: 0.7, max_calls: 5, max_depth: 1 },
    });
    await attenuate('a', sibling('a'));
    await attenuate('b', sibling('b'));
    expect((await approve('a', '/workspace/t-1/a/x', 0.5)).decision).toBe('grant');
    expect(await approve('b', '/workspace/t-1/b/x', 0.3)).toMatchObject({ decision: 'grant', budget_remaining: 0 });
    const over = await approve('b', '/workspace/t-1/b/y', 0.1);
    expect([over.decision, over.reason.code]).toEqual(['deny', 'budget_exhausted']);
    expect(await get(cap.root.id)).toMatchObject({ spent: 1, calls: 4 });
    expect(await get(cap.b.id)).toMatchObject({ spent: 0.3, calls: 1 });
  });

  test('a refused attenuation lists every violation', async () => {
    const r = await decide('/v1/attenuate', {
      parent_token: cap.child.token,
      rights: ['read', 'write'],
      objects: [{ kind: 'path', prefix: '/workspace' }],
      predicate: { budget: 5, max_depth: 1 },
      ttl_s: 7200,
    });
    expect([r.status, r.body.error.code]).toEqual([403, 'attenuation_refused']);
    expect(codes(r.body.error.violations)).toEqual(expect.arrayContaining(['right_widened', 'object_widened', 'predicate_widened', 'expiry_extended']));
    expect(new Set(r.body.error.violations.map((v: { component: string }) => v.component))).toEqual(new Set(['rights', 'objects', 'predicate', 'expiry']));
  });

  test('revoking the root revokes its whole tree at once', async () => {
    const r = await decide('/v1/revoke', { capability_id: cap.root.id, reason: 'trajectory finished' });
    expect(r.status).toBe(200);
    expect([...r.body.revoked].sort()).toEqual([cap.root.id, cap.child.id, cap.a.id, cap.b.id].sort());
    const after = await approve('child', '/workspace/t-1/src/main.py', 0);
    expect([after.decision, after.reason.code]).toEqual(['deny', 'revoked']);
    const grandchild = await decide('/v1/attenuate', {
      parent_token: cap.a.token,
      rights: ['read'],
      objects: [{ kind: 'path', prefix: '/workspace/t-1/a' }],
      predicate: { budget: 0.1, max_calls: 1, max_depth: 0 },
    });
    expect(codes(grandchild.body.error.violations)).toContain('parent_revoked');
    expect((await get(cap.child.id)).status).toBe('revoked');
  });

  test('the audit log lists every decision in a verifiable chain', async () => {
    const list = await server.call('GET', '/v1/audit?limit=1000');
    const entries = list.body.entries as { decision: string; event: string; reason_code: string | null; hash: string; prev_hash: string }[];
    expect(entries).toHaveLength(decisions);
    expect(list.body.next).toBeNull();
    expect(entries.filter((e) => e.decision === 'deny').map((e) => e.reason_code)).toEqual([
      'object_outside',
      'budget_exhausted',
      'right_widened',
      'revoked',
      'parent_revoked',
    ]);
    expect(entries.map((e) => e.event)).toEqual(expect.arrayContaining(['mint', 'attenuate', 'approve', 'revoke']));
    entries.slice(1).forEach((e, i) => expect(e.prev_hash).toBe(entries[i]?.hash));
    const denies = await server.call('GET', '/v1/audit?decision=deny&event=approve&trajectory_id=t-1.sub-1');
    expect(denies.body.entries.map((e: { reason_code: string }) => e.reason_code)).toEqual(['object_outside', 'revoked']);
    const verify = await server.call('GET', '/v1/audit/verify');
    // One delegation tree, one chain; its rows are covered or not yet by a signed checkpoint (every 10 s).
    expect(verify.body).toMatchObject({ ok: true, entries: decisions, trees: 1 });
    expect(verify.body.covered + verify.body.uncovered).toBe(decisions);
  });

  test('GET /metrics counts the decisions made so far, their batches and the process CPU', async () => {
    const text = await (await fetch(`${server.url}/metrics`)).text();
    const value = (name: string): number => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1]);
    expect(value('warrant_audit_batch_size_sum')).toBe(decisions);
    expect(value('warrant_audit_batch_size_count')).toBeGreaterThan(0);
    expect(value('process_cpu_seconds_total')).toBeGreaterThan(0);
  });

  test('SIGTERM stops the server promptly and cleanly', async () => {
    const t0 = Date.now();
    expect(await server.stop('SIGTERM')).toBe(0);
    expect(Date.now() - t0).toBeLessThan(5000);
    expect(server.logEntries().some((e) => e.msg === 'shutting down' && e.signal === 'SIGTERM')).toBe(true);
    logs.push(server.logs());
  });

  test('a restart with `npm start` on the same data keeps the audit chain and reuses the generated key', { timeout: 60_000 }, async () => {
    const first = server;
    const ring = readFileSync(join(first.keysDir, 'signing-keys.json'), 'utf8');
    expect(statSync(join(first.keysDir, 'signing-keys.json')).mode & 0o777).toBe(0o600);
    expect(first.logEntries()).toContainEqual(expect.objectContaining({ msg: 'generated a new signing key', file: join(first.keysDir, 'signing-keys.json') }));
    if (backend === 'pglite') {
      expect(first.logEntries()).toContainEqual(expect.objectContaining({ file: join(first.dataDir, 'default-api-key') }));
      expect(statSync(join(first.dataDir, 'default-api-key')).mode & 0o777).toBe(0o600);
    }

    server = await startServer({ env, dataDir: first.dataDir, keysDir: first.keysDir, apiKey: first.apiKey, via: 'npm' });
    expect(server.apiKey).toBe(first.apiKey);
    expect(server.logs()).not.toContain('generated a new signing key');
    expect(server.logs()).not.toContain('created tenant');
    expect(readFileSync(join(first.keysDir, 'signing-keys.json'), 'utf8')).toBe(ring);
    const keys = await server.call('GET', '/.well-known/jwks.json', undefined, { key: null });
    expect(keys.body.keys.map((k: { kid: string }) => k.kid)).toEqual([kidOf(cap.root.token)]);

    const verify = await server.call('GET', '/v1/audit/verify');
    expect(verify.body).toMatchObject({ ok: true, entries: decisions });
    expect(await get(cap.root.id)).toMatchObject({ status: 'revoked', spent: 1, calls: 4 });

    // SIGTERM to `npm start` (what a process manager sends) must reach the server too, not orphan it.
    expect(await server.stop('SIGTERM')).toBe(0);
    expect(await refusesConnections(server.url)).toBe(true);
    logs.push(server.logs());
  });

  test('no log line holds an API key or a token', () => {
    expect(logs).toHaveLength(2);
    expect(secrets.length).toBeGreaterThanOrEqual(5);
    for (const text of logs) for (const secret of secrets) expect(text.includes(secret)).toBe(false);
  });
});
