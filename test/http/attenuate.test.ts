/**
 * POST /v1/attenuate over HTTP (API.md): a child C_c ⪯ C_p is issued with its parent and depth and
 * the parent's remaining lifetime and trajectory by default; otherwise 403 attenuation_refused lists
 * every violation, one test per violation code and one with several at once.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { loadKeyRing, type KeyRing } from '../../src/crypto/keys.js';
import { signToken } from '../../src/crypto/tokens.js';
import type { CapabilityClaims } from '../../src/core/types.js';
import { BACKENDS } from '../support/db.js';
import { KEYS, startHarness, type Harness } from '../support/app.js';

let seq = 0;
const traj = (): string => `att-${++seq}`;

interface Issued {
  capability_id: string;
  token: string;
  trajectory_id: string;
  expires_at: string;
  depth: number;
  objects: { prefix: string }[];
}

type Body = Record<string, unknown>;

/** The violations of a 403 as comparable `component/code` strings. */
function violations(body: { error: { violations: { component: string; code: string }[] } }): string[] {
  return body.error.violations.map((v) => `${v.component}/${v.code}`).sort();
}

describe.each(BACKENDS)('attenuate on %s', (backend) => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness(backend);
  });
  afterAll(async () => h.close());

  async function mintRoot(over: Body = {}, as: 'a' | 'b' = 'a'): Promise<Issued> {
    const t = traj();
    const body = {
      trajectory_id: t,
      rights: ['read', 'write'],
      objects: [{ kind: 'path', prefix: `/workspace/${t}` }],
      predicate: { max_cost: 1, budget: 10, max_calls: 100, max_depth: 3 },
      ttl_s: 3600,
      ...over,
    };
    const r = await h.call('POST', '/v1/capabilities', body, { as });
    expect(r.status).toBe(201);
    return r.body as Issued;
  }

  /** A child body that narrows the mintRoot defaults under `parent`. */
  function childBody(parent: Issued, over: Body = {}): Body {
    return {
      parent_token: parent.token,
      rights: ['read'],
      objects: [{ kind: 'path', prefix: `${parent.objects[0]?.prefix}/sub` }],
      predicate: { max_cost: 0.5, budget: 5, max_calls: 50, max_depth: Math.max(0, 2 - parent.depth) },
      ...over,
    };
  }

  const attenuate = (body: Body, as: 'a' | 'b' = 'a') => h.call('POST', '/v1/attenuate', body, { as });

  async function child(parent: Issued, over: Body = {}): Promise<Issued> {
    const r = await attenuate(childBody(parent, over));
    expect(r.status).toBe(201);
    return r.body as Issued;
  }

  test('201: the child body, with parent_id and depth', async () => {
    const root = await mintRoot();
    const r = await attenuate(childBody(root, { ttl_s: 600, trajectory_id: `${root.trajectory_id}.sub-1` }));
    expect(r.status).toBe(201);
    expect(Object.keys(r.body).sort()).toEqual([
      'capability_id',
      'depth',
      'expires_at',
      'objects',
      'parent_id',
      'predicate',
      'rights',
      'token',
      'trajectory_id',
    ]);
    expect(r.body).toMatchObject({
      parent_id: root.capability_id,
      depth: 1,
      trajectory_id: `${root.trajectory_id}.sub-1`,
      rights: ['read'],
      objects: [{ kind: 'path', prefix: `/workspace/${root.trajectory_id}/sub` }],
      predicate: { max_cost: 0.5, budget: 5, max_calls: 50, max_depth: 2 },
    });
    expect(r.body.capability_id).not.toBe(root.capability_id);
    expect(Date.parse(r.body.expires_at)).toBe(h.clock.ms + 600_000);
    const grandchild = await child(r.body as Issued);
    expect(grandchild).toMatchObject({ parent_id: r.body.capability_id, depth: 2 });
  });

  test("defaults: ttl = the parent's remaining lifetime, trajectory = the parent's", async () => {
    const root = await mintRoot({ ttl_s: 1000 });
    h.clock.advance(400);
    const c = await child(root);
    expect(c.trajectory_id).toBe(root.trajectory_id);
    expect(c.expires_at).toBe(root.expires_at);
    expect(Date.parse(c.expires_at) - h.clock.ms).toBe(600_000);
  });

  test('an equal child is allowed (⪯ is not strict, except max_depth)', async () => {
    const root = await mintRoot();
    const r = await attenuate({
      parent_token: root.token,
      rights: ['write', 'read'],
      objects: [{ kind: 'path', prefix: `/workspace/${root.trajectory_id}/` }],
      predicate: { max_cost: 1, budget: 10, max_calls: 100, max_depth: 2 },
      ttl_s: 3600,
    });
    expect(r.status).toBe(201);
  });

  test('a granted attenuation is audited with the child and its parent', async () => {
    const root = await mintRoot();
    const c = await child(root);
    const audit = await h.call('GET', `/v1/audit?capability_id=${c.capability_id}`);
    expect(audit.body.entries).toHaveLength(1);
    expect(audit.body.entries[0]).toMatchObject({ event: 'attenuate', decision: 'grant', capability_id: c.capability_id, parent_id: root.capability_id });
  });

  // ---- one test per violation code ----------------------------------------------------------

  test.each([
    ['right_widened', { rights: ['read', 'execute'] }, ['rights/right_widened']],
    ['object_widened: sibling prefix', { objects: [{ kind: 'path', prefix: '/workspace' }] }, ['objects/object_widened']],
    ['object_widened: another kind', { objects: [{ kind: 'host', name: 'example.com' }] }, ['objects/object_widened']],
    ['predicate_widened: budget raised', { predicate: { max_cost: 0.5, budget: 10.000001, max_calls: 50, max_depth: 2 } }, ['predicate/predicate_widened']],
    ['predicate_widened: max_cost raised', { predicate: { max_cost: 2, budget: 5, max_calls: 50, max_depth: 2 } }, ['predicate/predicate_widened']],
    ['predicate_widened: max_calls raised', { predicate: { max_cost: 0.5, budget: 5, max_calls: 101, max_depth: 2 } }, ['predicate/predicate_widened']],
    [
      'predicate_widened: max_depth not below the parent',
      { predicate: { max_cost: 0.5, budget: 5, max_calls: 50, max_depth: 3 } },
      ['predicate/predicate_widened'],
    ],
    ['expiry_extended', { ttl_s: 3601 }, ['expiry/expiry_extended']],
  ])('403 attenuation_refused: %s', async (_name, over, expected) => {
    const root = await mintRoot();
    const r = await attenuate(childBody(root, over));
    expect(r.status).toBe(403);
    expect(r.body.error.code).toBe('attenuation_refused');
    expect(violations(r.body)).toEqual(expected);
    for (const v of r.body.error.violations) expect(typeof v.detail).toBe('string');
  });

  test('predicate_widened: a parent args bound the child does not imply', async () => {
    const root = await mintRoot({ predicate: { args: [{ kind: 'one_of', arg: 'branch', values: ['main', 'dev'] }] } });
    const widened = await attenuate(childBody(root, { predicate: { args: [{ kind: 'one_of', arg: 'branch', values: ['main', 'prod'] }] } }));
    expect(widened.status).toBe(403);
    expect(violations(widened.body)).toEqual(['predicate/predicate_widened']);
    const narrowed = await attenuate(childBody(root, { predicate: { args: [{ kind: 'one_of', arg: 'branch', values: ['main'] }] } }));
    expect(narrowed.status).toBe(201);
  });

  test('depth_exhausted: a parent with max_depth 0', async () => {
    const root = await mintRoot({ predicate: { max_depth: 0 } });
    const r = await attenuate(childBody(root, { predicate: { max_depth: 0 } }));
    expect(r.status).toBe(403);
    expect(violations(r.body)).toEqual(['predicate/depth_exhausted']);
  });

  test('depth_exhausted: max_depth runs out along a chain', async () => {
    const root = await mintRoot({ predicate: { max_depth: 1 } });
    const c = await child(root, { predicate: { max_depth: 0 } });
    const r = await attenuate(childBody(c, { predicate: {} }));
    expect(r.status).toBe(403);
    expect(violations(r.body)).toEqual(['predicate/depth_exhausted']);
  });

  test.each([
    ['garbage', 'not-a-token'],
    ['three garbage parts', 'a.b.c'],
  ])('parent_invalid: a %s parent token', async (_name, token) => {
    const r = await attenuate({ parent_token: token, rights: ['read'], objects: [{ kind: 'path', prefix: '/w' }] });
    expect(r.status).toBe(403);
    expect(r.body.error.code).toBe('attenuation_refused');
    expect(violations(r.body)).toEqual(['parent/parent_invalid']);
  });

  test('parent_invalid: a parent token whose signature was tampered with', async () => {
    const root = await mintRoot();
    const [head, payload, sig] = root.token.split('.') as [string, string, string];
    const flipped = `${sig.slice(0, 10)}${sig[10] === 'A' ? 'B' : 'A'}${sig.slice(11)}`;
    const r = await attenuate(childBody(root, { parent_token: `${head}.${payload}.${flipped}` }));
    expect(r.status).toBe(403);
    expect(violations(r.body)).toEqual(['parent/parent_invalid']);
  });

  test('parent_invalid: a parent token of another tenant, and nothing is issued', async () => {
    const rootOfB = await mintRoot({}, 'b');
    const r = await attenuate(childBody(rootOfB), 'a');
    expect(r.status).toBe(403);
    expect(violations(r.body)).toEqual(['parent/parent_invalid']);
    const children = await h.call('GET', `/v1/capabilities/${rootOfB.capability_id}`, undefined, { as: 'b' });
    expect(children.body.children).toEqual([]);
    // Tenant b itself may attenuate it.
    expect((await attenuate(childBody(rootOfB), 'b')).status).toBe(201);
  });

  /** A token for the claims of `parent` (optionally under another id), signed by `ring`. */
  async function resign(parent: Issued, ring: KeyRing, id = parent.capability_id): Promise<string> {
    const payload = JSON.parse(Buffer.from(parent.token.split('.')[1] as string, 'base64url').toString('utf8')) as Record<string, unknown>;
    const claims = {
      id,
      tenant: payload.ten,
      trajectory: payload.sub,
      parent: null,
      depth: 0,
      rights: payload.r,
      objects: payload.o,
      predicate: payload.p,
      iat: payload.iat,
      nbf: payload.nbf,
      exp: payload.exp,
    } as unknown as CapabilityClaims;
    return signToken(ring, claims);
  }

  test('parent_invalid: a parent token signed by a foreign key', async () => {
    const root = await mintRoot();
    const token = await resign(root, await loadKeyRing(KEYS.foreign));
    const r = await attenuate(childBody(root, { parent_token: token }));
    expect(r.status).toBe(403);
    expect(violations(r.body)).toEqual(['parent/parent_invalid']);
    // Re-signed by the authority's own key, the same claims are a valid parent.
    expect((await attenuate(childBody(root, { parent_token: await resign(root, h.keys) }))).status).toBe(201);
  });

  test('parent_invalid: a well-signed parent the authority never issued', async () => {
    const root = await mintRoot();
    const token = await resign(root, h.keys, 'cap_neverissued');
    const r = await attenuate(childBody(root, { parent_token: token }));
    expect(r.status).toBe(403);
    expect(violations(r.body)).toEqual(['parent/parent_invalid']);
  });

  test('parent_expired: the clock passed the parent expiry', async () => {
    const root = await mintRoot({ ttl_s: 60 });
    h.clock.advance(60);
    const r = await attenuate(childBody(root));
    expect(r.status).toBe(403);
    // The default ttl (the parent's remaining lifetime) is not an extension: only the parent is at fault.
    expect(violations(r.body)).toEqual(['parent/parent_expired']);
  });

  test('parent_revoked: the parent itself', async () => {
    const root = await mintRoot();
    expect((await h.call('POST', '/v1/revoke', { capability_id: root.capability_id })).status).toBe(200);
    const r = await attenuate(childBody(root));
    expect(r.status).toBe(403);
    expect(violations(r.body)).toEqual(['parent/parent_revoked']);
  });

  test('parent_revoked: a grandparent', async () => {
    const root = await mintRoot();
    const c = await child(root);
    expect((await h.call('POST', '/v1/revoke', { capability_id: root.capability_id })).status).toBe(200);
    const r = await attenuate(childBody(c, { predicate: { max_cost: 0.5, budget: 5, max_calls: 50, max_depth: 0 } }));
    expect(r.status).toBe(403);
    expect(violations(r.body)).toEqual(['parent/parent_revoked']);
  });

  test('every violation is listed, with its component', async () => {
    const root = await mintRoot({ ttl_s: 600 });
    const r = await attenuate({
      parent_token: root.token,
      rights: ['read', 'execute', 'connect'],
      objects: [
        { kind: 'path', prefix: `/workspace/${root.trajectory_id}/ok` },
        { kind: 'path', prefix: '/etc' },
        { kind: 'url', prefix: 'https://example.com/' },
      ],
      predicate: { max_cost: 2, budget: 11, max_calls: 50, max_depth: 3 },
      ttl_s: 601,
    });
    expect(r.status).toBe(403);
    expect(violations(r.body)).toEqual(
      [
        'rights/right_widened', // execute
        'rights/right_widened', // connect
        'objects/object_widened', // /etc
        'objects/object_widened', // the url
        'predicate/predicate_widened', // max_cost raised
        'predicate/predicate_widened', // budget raised (an omitted one is inherited: test/http/attenuate-inherit.test.ts)
        'predicate/predicate_widened', // max_depth not lowered
        'expiry/expiry_extended',
      ].sort(),
    );
  });

  test('parent violations are listed together with the others', async () => {
    const root = await mintRoot({ ttl_s: 600 });
    expect((await h.call('POST', '/v1/revoke', { capability_id: root.capability_id })).status).toBe(200);
    h.clock.advance(600);
    const r = await attenuate(childBody(root, { rights: ['execute'], ttl_s: 10 }));
    expect(r.status).toBe(403);
    expect(violations(r.body)).toEqual(['expiry/expiry_extended', 'parent/parent_expired', 'parent/parent_revoked', 'rights/right_widened']);
  });

  test('a refusal is audited as a deny and issues nothing', async () => {
    const root = await mintRoot();
    const r = await attenuate(childBody(root, { rights: ['execute'] }));
    expect(r.status).toBe(403);
    const audit = await h.call('GET', `/v1/audit?trajectory_id=${root.trajectory_id}&event=attenuate`);
    expect(audit.body.entries).toHaveLength(1);
    expect(audit.body.entries[0]).toMatchObject({ decision: 'deny', reason_code: 'right_widened', capability_id: null, parent_id: root.capability_id });
    const parent = await h.call('GET', `/v1/capabilities/${root.capability_id}`);
    expect(parent.body.children).toEqual([]);
  });

  test.each([
    ['unknown field', { scope: 'all' }, 'scope'],
    ['ttl_s 0', { ttl_s: 0 }, 'ttl_s'],
    ['bad trajectory_id', { trajectory_id: 'a b' }, 'trajectory_id'],
    ['empty rights', { rights: [] }, 'rights'],
    ['missing parent_token', { parent_token: undefined }, 'parent_token'],
    ['budget with 7 decimals', { predicate: { budget: 0.0000001 } }, 'predicate.budget'],
  ])('400 invalid_request: %s', async (_name, over, path) => {
    const root = await mintRoot();
    const r = await attenuate(childBody(root, over));
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('invalid_request');
    expect(r.body.error.fields.map((f: { path: string }) => f.path)).toContain(path);
  });

  test('400 for an invalid path object names objects.0', async () => {
    const root = await mintRoot();
    const r = await attenuate(childBody(root, { objects: [{ kind: 'path', prefix: `/workspace/${root.trajectory_id}/../x` }] }));
    expect(r.status).toBe(400);
    expect(r.body.error.fields.every((f: { path: string }) => f.path === 'objects.0' || f.path.startsWith('objects.0.'))).toBe(true);
  });
});
