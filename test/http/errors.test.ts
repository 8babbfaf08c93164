/**
 * The error contract over HTTP (API.md "Errors", "Authentication", "Without a tenant key"): 401 with
 * WWW-Authenticate and the handler not run, 404, 413, 415, 400 for malformed JSON, one error body
 * shape for all, the public keys without private parts, no-store on /v1, and 503 (fail closed,
 * no grant) once the database is gone.
 */
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { MAX_BODY_BYTES } from '../../src/http/app.js';
import { audit, capabilities } from '../../src/store/schema.js';
import { BACKENDS } from '../support/db.js';
import { KEYS, mintBody, startHarness, type Called, type Harness } from '../support/app.js';

let seq = 0;
const traj = (): string => `err-${++seq}`;

/** Every error body is `{"error": {"code", "message", ...}}` and nothing else. */
function expectError(r: Called, status: number, code: string): void {
  expect(r.status).toBe(status);
  expect(Object.keys(r.body)).toEqual(['error']);
  expect(r.body.error.code).toBe(code);
  expect(typeof r.body.error.message).toBe('string');
  expect(r.headers.get('content-type')).toMatch(/^application\/json/);
}

describe.each(BACKENDS)('errors on %s', (backend) => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness(backend);
  });
  afterAll(async () => h.close());

  /** Rows in every tenant's capabilities and audit tables: what a handler that ran would change. */
  async function counts(): Promise<{ capabilities: number; audit: number }> {
    const [c] = await h.database.db.select({ n: sql<number>`count(*)::int` }).from(capabilities);
    const [a] = await h.database.db.select({ n: sql<number>`count(*)::int` }).from(audit);
    return { capabilities: Number(c?.n), audit: Number(a?.n) };
  }

  async function mintedToken(): Promise<string> {
    const r = await h.call('POST', '/v1/capabilities', mintBody({ trajectory_id: traj() }));
    expect(r.status).toBe(201);
    return r.body.token as string;
  }

  // ---- 401 ------------------------------------------------------------------------------------

  const keyIdOf = (apiKey: string): string => apiKey.split('.')[1] as string;
  const AUTHS: [string, (keys: Harness['tenants']) => string | undefined][] = [
    ['no Authorization header', () => undefined],
    ['an empty header', () => ''],
    ['a scheme other than Bearer', (k) => `Basic ${k.a}`],
    ['Bearer without a key', () => 'Bearer '],
    ['a malformed key', () => 'Bearer not-a-key'],
    ['the key with trailing junk', (k) => `Bearer ${k.a} x`],
    ['an unknown key of the right form', () => `Bearer wk.AAAAAAAAAAAA.${'A'.repeat(43)}`],
    ['a known key id with the wrong secret', (k) => `Bearer wk.${keyIdOf(k.a)}.${'B'.repeat(43)}`],
    ["tenant a's key id with tenant b's secret", (k) => `Bearer wk.${keyIdOf(k.a)}.${k.b.split('.')[2]}`],
  ];

  test.each(AUTHS)('401 unauthorized with WWW-Authenticate, and nothing done: %s', async (_name, auth) => {
    const before = await counts();
    const token = await mintedToken();
    const afterMint = await counts();
    const header = auth(h.tenants);
    const headers: Record<string, string> = header === undefined ? {} : { authorization: header };
    const requests: [string, string, unknown][] = [
      ['POST', '/v1/capabilities', mintBody({ trajectory_id: traj() })],
      ['POST', '/v1/approve', { token, op: 'read', target: { kind: 'path', path: '/workspace/t-1/a' }, cost: 0 }],
      ['GET', '/v1/audit', undefined],
      ['GET', '/v1/audit/verify', undefined],
    ];
    for (const [method, path, body] of requests) {
      const r = await h.call(method, path, body, { as: 'none', headers });
      expectError(r, 401, 'unauthorized');
      expect(r.headers.get('www-authenticate')).toMatch(/^Bearer/);
    }
    expect(afterMint).toEqual({ capabilities: before.capabilities + 1, audit: before.audit + 1 });
    expect(await counts()).toEqual(afterMint);
  });

  test('the valid keys of both tenants are accepted', async () => {
    expect((await h.call('GET', '/v1/audit?limit=1', undefined, { as: 'a' })).status).toBe(200);
    expect((await h.call('GET', '/v1/audit?limit=1', undefined, { as: 'b' })).status).toBe(200);
  });

  test('the scheme name is case-insensitive (RFC 7235)', async () => {
    const r = await h.call('GET', '/v1/audit?limit=1', undefined, { as: 'none', headers: { authorization: `bearer ${h.tenants.a}` } });
    expect(r.status).toBe(200);
  });

  // ---- 404, 413, 415, 400 -------------------------------------------------------------------

  test.each([
    ['GET', '/v1/nothing-here'],
    ['POST', '/v1/capabilities/extra/segments'],
    ['GET', '/nothing-here'],
    ['DELETE', '/v1/capabilities'],
  ])('404 not_found: %s %s', async (method, path) => {
    const r = await h.call(method, path, method === 'POST' ? {} : undefined);
    expectError(r, 404, 'not_found');
  });

  test('413 payload_too_large for a body over 64 KiB; nothing minted', async () => {
    const before = await counts();
    const body = JSON.stringify(mintBody({ trajectory_id: traj(), pad: 'x'.repeat(MAX_BODY_BYTES) }));
    expect(body.length).toBeGreaterThan(64 * 1024);
    const r = await h.call('POST', '/v1/capabilities', undefined, { raw: body });
    expectError(r, 413, 'payload_too_large');
    expect(await counts()).toEqual(before);
  });

  test('413 also without a Content-Length (a streamed body)', async () => {
    const chunk = new TextEncoder().encode(' '.repeat(16 * 1024));
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        for (let i = 0; i < 5; i++) controller.enqueue(chunk);
        controller.enqueue(new TextEncoder().encode(JSON.stringify(mintBody({ trajectory_id: traj() }))));
        controller.close();
      },
    });
    const res = await h.app.request('/v1/capabilities', {
      method: 'POST',
      headers: { authorization: `Bearer ${h.tenants.a}`, 'content-type': 'application/json' },
      body: stream,
      duplex: 'half',
    } as RequestInit);
    expect(res.status).toBe(413);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('payload_too_large');
  });

  test('a body of just under 64 KiB is accepted', async () => {
    const base = JSON.stringify(mintBody({ trajectory_id: traj() }));
    const raw = base + ' '.repeat(MAX_BODY_BYTES - base.length);
    expect(raw.length).toBe(MAX_BODY_BYTES);
    expect((await h.call('POST', '/v1/capabilities', undefined, { raw })).status).toBe(201);
  });

  test.each([
    ['text/plain', { 'content-type': 'text/plain' }],
    ['form encoded', { 'content-type': 'application/x-www-form-urlencoded' }],
    ['application/jsonx', { 'content-type': 'application/jsonx' }],
  ])('415 unsupported_media_type: %s', async (_name, headers) => {
    const r = await h.call('POST', '/v1/capabilities', undefined, { raw: JSON.stringify(mintBody({ trajectory_id: traj() })), headers });
    expectError(r, 415, 'unsupported_media_type');
  });

  test('415 unsupported_media_type: no Content-Type at all', async () => {
    const res = await h.app.request('/v1/capabilities', {
      method: 'POST',
      headers: { authorization: `Bearer ${h.tenants.a}` },
      body: new Blob([JSON.stringify(mintBody({ trajectory_id: traj() }))]),
    });
    expect(res.headers.get('content-type') ?? '').not.toMatch(/^text\/plain/);
    expect(res.status).toBe(415);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('unsupported_media_type');
  });

  test('application/json with a charset is accepted', async () => {
    const r = await h.call('POST', '/v1/capabilities', mintBody({ trajectory_id: traj() }), { headers: { 'content-type': 'application/json; charset=utf-8' } });
    expect(r.status).toBe(201);
  });

  test.each([
    ['truncated', '{"trajectory_id": "t-1",'],
    ['not JSON', 'hello'],
    ['empty', ''],
    ['trailing garbage', '{"a":1} x'],
  ])('400 invalid_request for malformed JSON: %s', async (_name, raw) => {
    const r = await h.call('POST', '/v1/approve', undefined, { raw, headers: { 'content-type': 'application/json' } });
    expectError(r, 400, 'invalid_request');
  });

  test.each([
    ['an array', '[]'],
    ['a string', '"x"'],
    ['null', 'null'],
  ])('400 invalid_request for a JSON body that is %s', async (_name, raw) => {
    const r = await h.call('POST', '/v1/capabilities', undefined, { raw });
    expectError(r, 400, 'invalid_request');
  });

  test('error bodies never echo the token', async () => {
    const token = await mintedToken();
    const r = await h.call('POST', '/v1/approve', { token, op: 'read', target: { kind: 'path', path: 'relative' }, cost: 0 });
    expectError(r, 400, 'invalid_request');
    expect(JSON.stringify(r.body)).not.toContain(token);
    const wrong = await h.call('POST', '/v1/approve', { token, op: 'read', target: { kind: 'path', path: '/w' }, cost: 0 }, { as: 'b' });
    expect(JSON.stringify(wrong.body)).not.toContain(token);
  });

  // ---- headers and public endpoints ---------------------------------------------------------

  test.each([
    ['a 200', 'GET', '/v1/audit?limit=1', 'a'],
    ['a 201', 'POST', '/v1/capabilities', 'a'],
    ['a 400', 'GET', '/v1/audit?limit=0', 'a'],
    ['a 401', 'GET', '/v1/audit', 'none'],
    ['a 404', 'GET', '/v1/capabilities/cap_nothing', 'a'],
  ] as const)('Cache-Control: no-store on /v1 (%s)', async (_name, method, path, as) => {
    const r = await h.call(method, path, method === 'POST' ? mintBody({ trajectory_id: traj() }) : undefined, { as });
    expect(r.headers.get('cache-control')).toBe('no-store');
  });

  test('jwks serves the public half of every ring key, without any private part, without a tenant key', async () => {
    const r = await h.call('GET', '/.well-known/jwks.json', undefined, { as: 'none' });
    expect(r.status).toBe(200);
    const kids = KEYS.ring.keys.map((k) => k.kid).sort();
    expect((r.body.keys as { kid: string }[]).map((k) => k.kid).sort()).toEqual(kids);
    for (const k of r.body.keys as Record<string, string>[]) {
      expect(k).not.toHaveProperty('d');
      expect(k).toMatchObject({ kty: 'OKP', crv: 'Ed25519', alg: 'EdDSA' });
      expect(k.x).toBe(KEYS.ring.keys.find((x) => x.kid === k.kid)?.x);
    }
    expect(JSON.stringify(r.body)).not.toContain(KEYS.ring.keys.find((k) => k.d !== undefined)?.d as string);
  });

  test.each(['/healthz', '/readyz', '/openapi.json'])('%s answers 200 without a tenant key', async (path) => {
    expect((await h.call('GET', path, undefined, { as: 'none' })).status).toBe(200);
  });
});

describe.each(BACKENDS)('unavailable database on %s', (backend) => {
  let h: Harness;
  let token: string;
  beforeAll(async () => {
    h = await startHarness(backend);
    // Warm the tenant and token caches, so the requests below get past authentication.
    const m = await h.call('POST', '/v1/capabilities', mintBody({ trajectory_id: 'down-1' }));
    expect(m.status).toBe(201);
    token = m.body.token;
    expect((await h.call('POST', '/v1/approve', { token, op: 'read', target: { kind: 'path', path: '/workspace/t-1/a' }, cost: 0 })).body.decision).toBe(
      'grant',
    );
    await h.database.close();
  });
  // The database is already closed (and on a server, dropped); only pending writes remain to settle.
  afterAll(async () => h.writer.flush());

  test('approve: 503 unavailable, never a grant, and certainly not committed (error.outcome)', async () => {
    const r = await h.call('POST', '/v1/approve', { token, op: 'read', target: { kind: 'path', path: '/workspace/t-1/a' }, cost: 0 });
    expectError(r, 503, 'unavailable');
    expect(r.body).not.toHaveProperty('decision');
    expect(r.body.error.outcome).toBe('not_committed');
  });

  test('approve with a call_id: 503 unavailable, not committed', async () => {
    const r = await h.call('POST', '/v1/approve', { token, op: 'read', target: { kind: 'path', path: '/workspace/t-1/a' }, cost: 0, call_id: 'down' });
    expectError(r, 503, 'unavailable');
    expect(r.body.error.outcome).toBe('not_committed');
  });

  test('approve with a bad token: 503, since the denial cannot be audited', async () => {
    const r = await h.call('POST', '/v1/approve', { token: 'garbage', op: 'read', target: { kind: 'path', path: '/workspace/t-1/a' }, cost: 0 });
    expectError(r, 503, 'unavailable');
  });

  test.each([
    ['mint', '/v1/capabilities', () => mintBody({ trajectory_id: 'down-2' }), {}],
    ['mint with an Idempotency-Key', '/v1/capabilities', () => mintBody({ trajectory_id: 'down-3' }), { 'idempotency-key': 'k-down' }],
    [
      'attenuate',
      '/v1/attenuate',
      () => ({
        parent_token: token,
        rights: ['read'],
        objects: [{ kind: 'path', prefix: '/workspace/t-1' }],
        predicate: { budget: 1, max_calls: 1, max_depth: 0 },
      }),
      {},
    ],
  ])('%s: 503 unavailable, no token', async (_name, path, body, headers) => {
    const r = await h.call('POST', path, body(), { headers });
    expectError(r, 503, 'unavailable');
    expect(JSON.stringify(r.body)).not.toMatch(/eyJ/);
  });

  test.each([
    ['revoke', 'POST', '/v1/revoke', { capability_id: 'cap_x' }],
    ['a capability', 'GET', '/v1/capabilities/cap_x', undefined],
    ['the audit', 'GET', '/v1/audit', undefined],
    ['verify', 'GET', '/v1/audit/verify', undefined],
  ])('%s: 503 unavailable', async (_name, method, path, body) => {
    expectError(await h.call(method, path, body), 503, 'unavailable');
  });

  test('an unknown tenant key: 503, not 401 (the key cannot be checked)', async () => {
    const r = await h.call('GET', '/v1/audit', undefined, { as: 'none', headers: { authorization: `Bearer wk.AAAAAAAAAAAA.${'A'.repeat(43)}` } });
    expectError(r, 503, 'unavailable');
  });

  test('/readyz is 503, /healthz stays 200', async () => {
    expectError(await h.call('GET', '/readyz', undefined, { as: 'none' }), 503, 'unavailable');
    expect((await h.call('GET', '/healthz', undefined, { as: 'none' })).status).toBe(200);
  });
});
