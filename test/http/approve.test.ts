/**
 * POST /v1/approve over HTTP (API.md): the response shape, exact budget arithmetic, one test per
 * deny code (hierarchical budgets and call counts included), and an audit entry carrying the
 * audit_id of every decision, grant or deny.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { loadKeyRing } from '../../src/crypto/keys.js';
import { signToken } from '../../src/crypto/tokens.js';
import type { CapabilityClaims, CanonicalObject, CanonicalPredicate } from '../../src/core/types.js';
import { BACKENDS } from '../support/db.js';
import { KEYS, startHarness, type Called, type Harness } from '../support/app.js';

let seq = 0;
const traj = (): string => `apr-${++seq}`;

interface Issued {
  capability_id: string;
  token: string;
  trajectory_id: string;
  rights: CapabilityClaims['rights'];
  objects: { kind: string; prefix: string }[];
  predicate: Record<string, unknown>;
  expires_at: string;
}

type Body = Record<string, unknown>;
type As = 'a' | 'b';

const APPROVE_FIELDS = ['audit_id', 'budget_remaining', 'calls_remaining', 'capability_id', 'decision', 'reason'];

describe.each(BACKENDS)('approve on %s', (backend) => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness(backend);
  });
  afterAll(async () => h.close());

  async function mintRoot(predicate: Body = { budget: 10, max_calls: 100, max_depth: 3 }, over: Body = {}): Promise<Issued> {
    const t = traj();
    const r = await h.call('POST', '/v1/capabilities', {
      trajectory_id: t,
      rights: ['read', 'write'],
      objects: [{ kind: 'path', prefix: `/workspace/${t}` }],
      predicate,
      ttl_s: 3600,
      ...over,
    });
    expect(r.status).toBe(201);
    return r.body as Issued;
  }

  async function childOf(parent: Issued, predicate: Body): Promise<Issued> {
    const r = await h.call('POST', '/v1/attenuate', { parent_token: parent.token, rights: parent.rights, objects: parent.objects, predicate });
    expect(r.status).toBe(201);
    return r.body as Issued;
  }

  /** An approve of `read` on a file inside the capability's first path object. */
  const approve = (cap: Pick<Issued, 'token' | 'objects'>, over: Body = {}, as: As = 'a'): Promise<Called> =>
    h.call('POST', '/v1/approve', { token: cap.token, op: 'read', target: { kind: 'path', path: `${cap.objects[0]?.prefix}/file` }, cost: 0, ...over }, { as });

  const capability = async (id: string): Promise<Body> => (await h.call('GET', `/v1/capabilities/${id}`)).body as Body;

  /** The audit entry of a decision, found by its audit_id among the caller's approve entries. */
  async function auditEntry(auditId: string, as: As = 'a'): Promise<Body | undefined> {
    let after: string | null = null;
    do {
      const page: Called = await h.call('GET', `/v1/audit?event=approve&limit=1000${after === null ? '' : `&after=${after}`}`, undefined, { as });
      const hit = (page.body.entries as Body[]).find((e) => e.id === auditId);
      if (hit !== undefined) return hit;
      after = page.body.next as string | null;
    } while (after !== null);
    return undefined;
  }

  /** Checks the documented shape and that the decision has its audit entry; returns the reason code. */
  async function expectDecision(r: Called, decision: 'grant' | 'deny', as: As = 'a'): Promise<string | null> {
    expect(r.status).toBe(200);
    expect(Object.keys(r.body).sort()).toEqual(APPROVE_FIELDS);
    expect(r.body.decision).toBe(decision);
    if (decision === 'grant') expect(r.body.reason).toBeNull();
    else {
      expect(Object.keys(r.body.reason).sort()).toEqual(['code', 'message']);
      expect(typeof r.body.reason.message).toBe('string');
    }
    expect(r.body.budget_remaining === null || typeof r.body.budget_remaining === 'number').toBe(true);
    expect(r.body.calls_remaining === null || Number.isInteger(r.body.calls_remaining)).toBe(true);
    const entry = await auditEntry(r.body.audit_id, as);
    expect(entry).toMatchObject({ event: 'approve', decision, reason_code: r.body.reason?.code ?? null, capability_id: r.body.capability_id });
    return r.body.reason?.code ?? null;
  }

  /** Claims of an issued capability of tenant a, to sign with other keys or times. */
  function claimsOf(cap: Issued, over: Partial<CapabilityClaims> = {}): CapabilityClaims {
    const exp = Math.floor(Date.parse(cap.expires_at) / 1000);
    const iat = Math.floor(h.clock.ms / 1000);
    return {
      id: cap.capability_id,
      tenant: h.tenantIds.a,
      trajectory: cap.trajectory_id,
      parent: null,
      depth: 0,
      rights: cap.rights,
      objects: cap.objects as unknown as CanonicalObject[],
      predicate: cap.predicate as unknown as CanonicalPredicate,
      iat,
      nbf: iat,
      exp,
      ...over,
    };
  }

  test('grant: the documented shape, remaining budget and calls, and an audit entry with the request', async () => {
    const cap = await mintRoot({ budget: 2, max_calls: 5 });
    const r = await approve(cap, {
      op: 'write',
      cost: 0.25,
      call_id: 'c-1',
      args: { n: 1 },
      target: { kind: 'path', path: `${cap.objects[0]?.prefix}/./a/../b` },
    });
    await expectDecision(r, 'grant');
    expect(r.body).toMatchObject({ capability_id: cap.capability_id, budget_remaining: 1.75, calls_remaining: 4 });
    const entry = await auditEntry(r.body.audit_id);
    expect(entry).toMatchObject({
      op: 'write',
      target: { kind: 'path', path: `${cap.objects[0]?.prefix}/b` },
      cost: 0.25,
      call_id: 'c-1',
      trajectory_id: cap.trajectory_id,
      parent_id: null,
    });
  });

  test('grant without budget or max_calls: both remaining are null', async () => {
    const cap = await mintRoot({});
    const r = await approve(cap, { cost: 5 });
    await expectDecision(r, 'grant');
    expect(r.body).toMatchObject({ budget_remaining: null, calls_remaining: null });
  });

  test('budgets are summed exactly: 0.6 − 0.1 − 0.2 leaves exactly 0.3', async () => {
    const cap = await mintRoot({ budget: 0.6 });
    expect((await approve(cap, { cost: 0.1 })).body.budget_remaining).toBe(0.5);
    const second = await approve(cap, { cost: 0.2 });
    expect(second.body.budget_remaining).toBe(0.3);
    expect((await capability(cap.capability_id)).spent).toBe(0.3);
    const third = await approve(cap, { cost: 0.3 });
    expect(third.body).toMatchObject({ decision: 'grant', budget_remaining: 0 });
    const over = await approve(cap, { cost: 0.000001 });
    expect(await expectDecision(over, 'deny')).toBe('budget_exhausted');
    expect(over.body.budget_remaining).toBe(0);
    expect((await capability(cap.capability_id)).spent).toBe(0.6);
  });

  test('a cost of 0 is granted on an exhausted budget; a denial charges nothing', async () => {
    const cap = await mintRoot({ budget: 1 });
    expect((await approve(cap, { cost: 1 })).body.decision).toBe('grant');
    expect((await approve(cap, { cost: 0.5 })).body.reason.code).toBe('budget_exhausted');
    expect((await approve(cap, { cost: 0 })).body.decision).toBe('grant');
    expect(await capability(cap.capability_id)).toMatchObject({ spent: 1, calls: 2 });
  });

  // ---- deny codes -----------------------------------------------------------------------------

  test.each([
    ['garbage', (_c: Issued) => 'garbage'],
    ['three garbage parts', (_c: Issued) => 'aaa.bbb.ccc'],
    [
      'a payload widened under the original signature',
      (c: Issued) => {
        const [head, payload, sig] = c.token.split('.') as [string, string, string];
        const claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as Record<string, unknown>;
        claims.r = ['read', 'write', 'execute'];
        return `${head}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}.${sig}`;
      },
    ],
    [
      'alg none',
      (c: Issued) => {
        const payload = c.token.split('.')[1] as string;
        return `${Buffer.from(JSON.stringify({ alg: 'none', kid: h.keys.activeKid })).toString('base64url')}.${payload}.`;
      },
    ],
  ])('bad_token: %s', async (_name, tokenOf) => {
    const cap = await mintRoot();
    const r = await approve({ ...cap, token: tokenOf(cap) });
    expect(await expectDecision(r, 'deny')).toBe('bad_token');
    expect(r.body.capability_id).toBeNull();
  });

  test('unknown_key: valid-looking claims of tenant a signed by a foreign key', async () => {
    const cap = await mintRoot();
    const foreign = await loadKeyRing(KEYS.foreign);
    const token = await signToken(foreign, claimsOf(cap));
    const r = await approve({ ...cap, token });
    expect(await expectDecision(r, 'deny')).toBe('unknown_key');
    // The same claims under the authority's own key are granted: only the key is at fault.
    expect((await approve({ ...cap, token: await signToken(h.keys, claimsOf(cap)) })).body.decision).toBe('grant');
  });

  test("tenant_mismatch: tenant b presents a's token; audited under b; nothing charged", async () => {
    const cap = await mintRoot({ budget: 1 });
    const r = await approve(cap, { cost: 1 }, 'b');
    expect(await expectDecision(r, 'deny', 'b')).toBe('tenant_mismatch');
    expect(await auditEntry(r.body.audit_id, 'a')).toBeUndefined();
    expect((await capability(cap.capability_id)).spent).toBe(0);
  });

  test('expired: granted until the expiry instant, denied from it on', async () => {
    const cap = await mintRoot({}, { ttl_s: 60 });
    h.clock.advance(59);
    expect((await approve(cap)).body.decision).toBe('grant');
    h.clock.advance(1);
    expect(await expectDecision(await approve(cap), 'deny')).toBe('expired');
  });

  test('not_yet_valid: a token of a stored capability with nbf in the future', async () => {
    const cap = await mintRoot();
    const now = Math.floor(h.clock.ms / 1000);
    const token = await signToken(h.keys, claimsOf(cap, { nbf: now + 600 }));
    expect(await expectDecision(await approve({ ...cap, token }), 'deny')).toBe('not_yet_valid');
    h.clock.advance(600);
    expect((await approve({ ...cap, token })).body.decision).toBe('grant');
  });

  test('revoked: the capability itself', async () => {
    const cap = await mintRoot();
    expect((await approve(cap)).body.decision).toBe('grant');
    await h.call('POST', '/v1/revoke', { capability_id: cap.capability_id });
    expect(await expectDecision(await approve(cap), 'deny')).toBe('revoked');
  });

  test('revoked: an ancestor (grandparent) of the capability', async () => {
    const root = await mintRoot();
    const child = await childOf(root, { budget: 5, max_calls: 50, max_depth: 2 });
    const grandchild = await childOf(child, { budget: 5, max_calls: 50, max_depth: 1 });
    expect((await approve(grandchild)).body.decision).toBe('grant');
    await h.call('POST', '/v1/revoke', { capability_id: root.capability_id });
    expect(await expectDecision(await approve(grandchild), 'deny')).toBe('revoked');
    expect(await expectDecision(await approve(child), 'deny')).toBe('revoked');
  });

  test('right_missing', async () => {
    const cap = await mintRoot();
    expect(await expectDecision(await approve(cap, { op: 'execute' }), 'deny')).toBe('right_missing');
    expect(await expectDecision(await approve(cap, { op: 'connect' }), 'deny')).toBe('right_missing');
  });

  test.each([
    ['a .. escape, resolved lexically', (p: string) => ({ kind: 'path', path: `${p}/../etc/passwd` })],
    ['/workspace/t-1/../etc/passwd', (_p: string) => ({ kind: 'path', path: '/workspace/t-1/../etc/passwd' })],
    ['a sibling with the same string prefix', (p: string) => ({ kind: 'path', path: `${p}0/file` })],
    ['the parent directory', (p: string) => ({ kind: 'path', path: p.slice(0, p.lastIndexOf('/')) })],
    ['another kind of target', (_p: string) => ({ kind: 'host', name: 'example.com' })],
  ])('object_outside: %s', async (_name, target) => {
    const cap = await mintRoot();
    const r = await approve(cap, { target: target(cap.objects[0]?.prefix as string) });
    expect(await expectDecision(r, 'deny')).toBe('object_outside');
  });

  test('object_outside: /workspace/t-1/../etc/passwd against a /workspace/t-1 object; its own files are granted', async () => {
    const cap = await mintRoot({}, { objects: [{ kind: 'path', prefix: '/workspace/t-1' }] });
    expect(await expectDecision(await approve(cap, { target: { kind: 'path', path: '/workspace/t-1/../etc/passwd' } }), 'deny')).toBe('object_outside');
    expect((await approve(cap, { target: { kind: 'path', path: '/workspace/t-1/a/../passwd' } })).body.decision).toBe('grant');
  });

  test('cost_exceeds_max: max_cost is inclusive, one micro-unit more is denied', async () => {
    const cap = await mintRoot({ max_cost: 1 });
    expect((await approve(cap, { cost: 1 })).body.decision).toBe('grant');
    expect(await expectDecision(await approve(cap, { cost: 1.000001 }), 'deny')).toBe('cost_exceeds_max');
  });

  test("budget_exhausted is hierarchical: a child's spend counts against its parent; a sibling is denied", async () => {
    const root = await mintRoot({ budget: 1, max_depth: 2 });
    const a = await childOf(root, { budget: 1, max_depth: 1 });
    const b = await childOf(root, { budget: 1, max_depth: 1 });
    const first = await approve(a, { cost: 0.6 });
    expect(first.body).toMatchObject({ decision: 'grant', budget_remaining: 0.4 });
    const denied = await approve(b, { cost: 0.5 });
    expect(await expectDecision(denied, 'deny')).toBe('budget_exhausted');
    expect(denied.body.budget_remaining).toBe(0.4);
    expect((await approve(b, { cost: 0.4 })).body).toMatchObject({ decision: 'grant', budget_remaining: 0 });
    expect((await approve(root, { cost: 0.000001 })).body.reason.code).toBe('budget_exhausted');
    expect((await capability(root.capability_id)).spent).toBe(1);
    expect((await capability(a.capability_id)).spent).toBe(0.6);
    expect((await capability(b.capability_id)).spent).toBe(0.4);
  });

  test("budget_exhausted: a grandchild's spend counts against the root", async () => {
    const root = await mintRoot({ budget: 0.3, max_depth: 2 });
    const child = await childOf(root, { budget: 0.3, max_depth: 1 });
    const grandchild = await childOf(child, { budget: 0.3, max_depth: 0 });
    expect((await approve(grandchild, { cost: 0.1 })).body.budget_remaining).toBe(0.2);
    expect((await approve(grandchild, { cost: 0.2 })).body.budget_remaining).toBe(0);
    expect(await expectDecision(await approve(root, { cost: 0.1 }), 'deny')).toBe('budget_exhausted');
  });

  test("calls_exhausted is hierarchical: a sibling is denied once the parent's calls are used", async () => {
    const root = await mintRoot({ max_calls: 3, max_depth: 1 });
    const a = await childOf(root, { max_calls: 3, max_depth: 0 });
    const b = await childOf(root, { max_calls: 3, max_depth: 0 });
    expect((await approve(a)).body.calls_remaining).toBe(2);
    expect((await approve(a)).body.calls_remaining).toBe(1);
    expect((await approve(b)).body).toMatchObject({ decision: 'grant', calls_remaining: 0 });
    const denied = await approve(b);
    expect(await expectDecision(denied, 'deny')).toBe('calls_exhausted');
    expect(denied.body.calls_remaining).toBe(0);
    expect((await approve(root)).body.reason.code).toBe('calls_exhausted');
    expect(await capability(root.capability_id)).toMatchObject({ calls: 3 });
    expect(await capability(b.capability_id)).toMatchObject({ calls: 1 });
  });

  const BOUNDS = [
    { kind: 'max', arg: 'timeout_ms', value: 30000 },
    { kind: 'min', arg: 'retries', value: 1 },
    { kind: 'one_of', arg: 'branch', values: ['main', 'dev'] },
    { kind: 'max_length', arg: 'command', value: 10 },
  ];
  const GOOD_ARGS = { timeout_ms: 30000, retries: 1, branch: 'dev', command: '0123456789' };

  test('args at every bound are granted (max_length counts code points)', async () => {
    const cap = await mintRoot({ args: BOUNDS });
    expect((await approve(cap, { args: GOOD_ARGS })).body.decision).toBe('grant');
    expect((await approve(cap, { args: { ...GOOD_ARGS, command: '😀'.repeat(10), extra: 'free' } })).body.decision).toBe('grant');
  });

  test.each([
    ['max exceeded', { timeout_ms: 30001 }],
    ['max given a string', { timeout_ms: '100' }],
    ['min undercut', { retries: 0 }],
    ['one_of: another value', { branch: 'prod' }],
    ['one_of: same text, other type', { branch: true }],
    ['max_length exceeded', { command: '01234567890' }],
    ['max_length given a number', { command: 5 }],
    ['missing max arg', { timeout_ms: undefined }],
    ['missing min arg', { retries: undefined }],
    ['missing one_of arg', { branch: undefined }],
    ['missing max_length arg', { command: undefined }],
  ])('arg_violates_bound: %s', async (_name, change) => {
    const cap = await mintRoot({ args: BOUNDS });
    const args = JSON.parse(JSON.stringify({ ...GOOD_ARGS, ...change })) as Body;
    expect(await expectDecision(await approve(cap, { args }), 'deny')).toBe('arg_violates_bound');
  });

  test('arg_violates_bound with no args at all', async () => {
    const cap = await mintRoot({ args: BOUNDS });
    expect(await expectDecision(await approve(cap), 'deny')).toBe('arg_violates_bound');
  });

  test.each([
    ['cost with 7 decimals', { cost: 0.1234567 }, 'cost'],
    ['negative cost', { cost: -1 }, 'cost'],
    ['missing cost', { cost: undefined }, 'cost'],
    ['unknown op', { op: 'delete' }, 'op'],
    ['unknown field', { why: 'x' }, 'why'],
    ['relative path target', { target: { kind: 'path', path: 'etc/passwd' } }, 'target.path'],
    ['target without kind', { target: { path: '/a' } }, 'target.kind'],
    ['call_id too long', { call_id: 'x'.repeat(257) }, 'call_id'],
    ['more than 64 args', { args: Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`a${i}`, i])) }, 'args'],
    ['non-scalar arg', { args: { a: { b: 1 } } }, 'args.a'],
  ])('400 invalid_request, nothing audited: %s', async (_name, over, path) => {
    const cap = await mintRoot();
    const r = await approve(cap, over);
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('invalid_request');
    expect(r.body.error.fields.map((f: { path: string }) => f.path)).toContain(path);
    const audit = await h.call('GET', `/v1/audit?trajectory_id=${cap.trajectory_id}&event=approve`);
    expect(audit.body.entries).toEqual([]);
  });
});
