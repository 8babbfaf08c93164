/**
 * POST /v1/capabilities over HTTP (API.md "mint"): the exact 201 body, canonical objects, the expiry
 * from the test clock, and a 400 naming the field path of every invalid field (closed schemas).
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { verifyToken } from '../../src/crypto/tokens.js';
import { BACKENDS } from '../support/db.js';
import { mintBody, startHarness, type Harness } from '../support/app.js';

const MINT_FIELDS = ['capability_id', 'depth', 'expires_at', 'objects', 'parent_id', 'predicate', 'rights', 'token', 'trajectory_id'];

let seq = 0;
const traj = (): string => `mint-${++seq}`;

/** The field paths a 400 names. */
function paths(body: { error: { fields: { path: string }[] } }): string[] {
  return body.error.fields.map((f) => f.path);
}

describe.each(BACKENDS)('mint on %s', (backend) => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness(backend);
  });
  afterAll(async () => h.close());

  test('201 with exactly the documented fields, expires_at = clock + ttl_s in RFC 3339 UTC', async () => {
    const t = traj();
    const predicate = { max_cost: 0.5, budget: 10, max_calls: 100, max_depth: 3, args: [{ kind: 'max', arg: 'timeout_ms', value: 30000 }] };
    const r = await h.call('POST', '/v1/capabilities', mintBody({ trajectory_id: t, predicate, ttl_s: 5400 }));
    expect(r.status).toBe(201);
    expect(Object.keys(r.body).sort()).toEqual(MINT_FIELDS);
    expect(r.body).toMatchObject({
      trajectory_id: t,
      parent_id: null,
      depth: 0,
      rights: ['read', 'write'],
      objects: [{ kind: 'path', prefix: '/workspace/t-1' }],
      predicate,
    });
    expect(r.body.capability_id).toMatch(/^[A-Za-z0-9_-]{1,64}$/);
    expect(r.body.expires_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/);
    expect(Date.parse(r.body.expires_at)).toBe(h.clock.ms + 5400 * 1000);
    // The token is the capability: it verifies under the ring and carries the same id and tenant.
    const v = await verifyToken(h.keys, r.body.token);
    expect(v.ok && v.capability.id === r.body.capability_id && v.capability.tenant === h.tenantIds.a).toBe(true);
  });

  test('expiry follows the clock at issue time', async () => {
    h.clock.advance(1234);
    const r = await h.call('POST', '/v1/capabilities', mintBody({ trajectory_id: traj(), ttl_s: 1 }));
    expect(r.status).toBe(201);
    expect(Date.parse(r.body.expires_at)).toBe(h.clock.ms + 1000);
  });

  test.each([
    ['path: one trailing / dropped', { kind: 'path', prefix: '/workspace/x/' }, { kind: 'path', prefix: '/workspace/x' }],
    ['path: / is the whole filesystem', { kind: 'path', prefix: '/' }, { kind: 'path', prefix: '/' }],
    ['host: lower-cased', { kind: 'host', name: 'API.Example.COM', port: 443 }, { kind: 'host', name: 'api.example.com', port: 443 }],
    ['host: wildcard lower-cased, no port', { kind: 'host', name: '*.Example.com' }, { kind: 'host', name: '*.example.com' }],
    ['repo: case-insensitive', { kind: 'repo', name: 'GitHub.com/Org/Repo' }, { kind: 'repo', name: 'github.com/org/repo' }],
    ['url: WHATWG normalized', { kind: 'url', prefix: 'HTTPS://API.Example.com:443/v1/../v2/' }, { kind: 'url', prefix: 'https://api.example.com/v2/' }],
    ['url: explicit non-default port kept', { kind: 'url', prefix: 'http://Example.com:8080/a' }, { kind: 'url', prefix: 'http://example.com:8080/a' }],
  ])('objects canonicalized: %s', async (_name, input, expected) => {
    const r = await h.call('POST', '/v1/capabilities', mintBody({ trajectory_id: traj(), objects: [input] }));
    expect(r.status).toBe(201);
    expect(r.body.objects).toEqual([expected]);
  });

  test('rights in canonical order without duplicates; duplicate objects merged', async () => {
    const r = await h.call(
      'POST',
      '/v1/capabilities',
      mintBody({
        trajectory_id: traj(),
        rights: ['connect', 'read', 'connect', 'execute'],
        objects: [
          { kind: 'path', prefix: '/a/' },
          { kind: 'path', prefix: '/a' },
        ],
      }),
    );
    expect(r.status).toBe(201);
    expect(r.body.rights).toEqual(['read', 'execute', 'connect']);
    expect(r.body.objects).toEqual([{ kind: 'path', prefix: '/a' }]);
  });

  test.each([
    ['trajectory_id: 128 characters', { trajectory_id: 'x'.repeat(128) }],
    ['trajectory_id: every allowed character class', { trajectory_id: 'A.z-0_9:b' }],
    ['ttl_s: 1', { ttl_s: 1 }],
    ['ttl_s: 2592000', { ttl_s: 2_592_000 }],
    ['64 objects', { objects: Array.from({ length: 64 }, (_, i) => ({ kind: 'path', prefix: `/w/${i}` })) }],
    ['costs with 6 decimals', { predicate: { max_cost: 0.000001, budget: 1e12 } }],
    ['no predicate', { predicate: undefined }],
  ])('boundary accepted: %s', async (_name, over) => {
    const r = await h.call('POST', '/v1/capabilities', mintBody({ trajectory_id: traj(), ...over }));
    expect(r.status).toBe(201);
  });

  test.each([
    ['trajectory_id: bad character', { trajectory_id: 't 1' }, 'trajectory_id'],
    ['trajectory_id: slash', { trajectory_id: 't/1' }, 'trajectory_id'],
    ['trajectory_id: empty', { trajectory_id: '' }, 'trajectory_id'],
    ['trajectory_id: 129 characters', { trajectory_id: 'x'.repeat(129) }, 'trajectory_id'],
    ['trajectory_id: missing', { trajectory_id: undefined }, 'trajectory_id'],
    ['rights: empty', { rights: [] }, 'rights'],
    ['rights: unknown right', { rights: ['read', 'delete'] }, 'rights.1'],
    ['objects: empty', { objects: [] }, 'objects'],
    ['objects: more than 64', { objects: Array.from({ length: 65 }, (_, i) => ({ kind: 'path', prefix: `/w/${i}` })) }, 'objects'],
    ['objects: unknown kind', { objects: [{ kind: 'file', prefix: '/a' }] }, 'objects.0.kind'],
    ['ttl_s: 0', { ttl_s: 0 }, 'ttl_s'],
    ['ttl_s: 2592001', { ttl_s: 2_592_001 }, 'ttl_s'],
    ['ttl_s: fractional', { ttl_s: 1.5 }, 'ttl_s'],
    ['ttl_s: missing', { ttl_s: undefined }, 'ttl_s'],
    ['unknown top-level field', { extra: 1 }, 'extra'],
    ['unknown field in an object', { objects: [{ kind: 'path', prefix: '/a', recursive: true }] }, 'objects.0.recursive'],
    ['unknown field in the predicate', { predicate: { budget: 1, cap: 2 } }, 'predicate.cap'],
    ['unknown field in an args bound', { predicate: { args: [{ kind: 'max', arg: 'n', value: 1, strict: true }] } }, 'predicate.args.0.strict'],
    ['predicate.max_cost with 7 decimals', { predicate: { max_cost: 0.1234567 } }, 'predicate.max_cost'],
    ['predicate.budget with 7 decimals', { predicate: { budget: 1.0000001 } }, 'predicate.budget'],
    ['predicate.budget negative', { predicate: { budget: -1 } }, 'predicate.budget'],
    ['predicate.budget above 1e12', { predicate: { budget: 1e12 + 1 } }, 'predicate.budget'],
    ['predicate.max_calls fractional', { predicate: { max_calls: 1.5 } }, 'predicate.max_calls'],
  ])('400 invalid_request naming the field: %s', async (_name, over, path) => {
    const r = await h.call('POST', '/v1/capabilities', mintBody({ trajectory_id: traj(), ...over }));
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('invalid_request');
    expect(paths(r.body)).toContain(path);
  });

  test.each([
    ['not absolute', { kind: 'path', prefix: 'workspace/t-1' }],
    ['a .. segment', { kind: 'path', prefix: '/workspace/../etc' }],
    ['a . segment', { kind: 'path', prefix: '/workspace/./t-1' }],
    ['an empty segment', { kind: 'path', prefix: '/workspace//t-1' }],
    ['a NUL byte', { kind: 'path', prefix: '/workspace/\u0000' }],
    ['url: not absolute', { kind: 'url', prefix: 'api.example.com/v1' }],
    ['url: not http(s)', { kind: 'url', prefix: 'ftp://example.com/' }],
    ['url: with credentials', { kind: 'url', prefix: 'https://u:p@example.com/' }],
    ['url: with a query', { kind: 'url', prefix: 'https://example.com/a?b=1' }],
    ['host: not a DNS name', { kind: 'host', name: 'exa mple.com' }],
    ['repo: not host/owner/name', { kind: 'repo', name: 'github.com/org' }],
  ])('400 for an object with %s, naming objects.1', async (_name, bad) => {
    const r = await h.call('POST', '/v1/capabilities', mintBody({ trajectory_id: traj(), objects: [{ kind: 'path', prefix: '/ok' }, bad] }));
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('invalid_request');
    const named = paths(r.body);
    expect(named.length).toBeGreaterThan(0);
    expect(named.every((p) => p === 'objects.1' || p.startsWith('objects.1.'))).toBe(true);
  });

  test('400 names every failing field at once', async () => {
    const r = await h.call('POST', '/v1/capabilities', { trajectory_id: 'bad id', rights: [], objects: [], ttl_s: 0, extra: true });
    expect(r.status).toBe(400);
    expect(new Set(paths(r.body))).toEqual(new Set(['trajectory_id', 'rights', 'objects', 'ttl_s', 'extra']));
  });

  test('a refused mint creates nothing and writes no audit row', async () => {
    const t = traj();
    const r = await h.call('POST', '/v1/capabilities', mintBody({ trajectory_id: t, ttl_s: 0 }));
    expect(r.status).toBe(400);
    const audit = await h.call('GET', `/v1/audit?trajectory_id=${t}`);
    expect(audit.body.entries).toEqual([]);
  });

  test('a mint is audited (event mint, grant) with its capability and trajectory', async () => {
    const t = traj();
    const m = await h.call('POST', '/v1/capabilities', mintBody({ trajectory_id: t }));
    const audit = await h.call('GET', `/v1/audit?trajectory_id=${t}`);
    expect(audit.body.entries).toHaveLength(1);
    expect(audit.body.entries[0]).toMatchObject({ event: 'mint', decision: 'grant', capability_id: m.body.capability_id, parent_id: null, trajectory_id: t });
  });
});
