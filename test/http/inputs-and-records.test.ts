/**
 * Issue 14, "Inputs and records", over HTTP: mint and attenuate never issue a token approve would
 * refuse; a child's trajectory equals or extends its parent's; a repeated call_id after a revocation
 * returns the first decision marked `replayed` with `decided_at`; approve rows keep the target as
 * requested and the args, bounded.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { MAX_TOKEN_CHARS } from '../../src/core/schemas.js';
import { BACKENDS } from '../support/db.js';
import { mintBody, startHarness, type Harness } from '../support/app.js';

/** A child predicate within mintBody's (budget 10, 100 calls, depth 3). */
const PRED = { budget: 1, max_calls: 10, max_depth: 1 };
let seq = 0;
const traj = (): string => `in-${++seq}`;

/** `n` path objects of about `len` characters each: a capability that signs to a long token. */
const longObjects = (n: number, len: number): { kind: string; prefix: string }[] =>
  Array.from({ length: n }, (_, i) => ({ kind: 'path', prefix: `/w/${String(i).padStart(3, '0')}/${'x'.repeat(len)}` }));

describe.each(BACKENDS)('inputs and records on %s', (backend) => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness(backend);
  });
  afterAll(async () => h.close());

  const mint = async (over: Record<string, unknown> = {}): Promise<{ capability_id: string; token: string; trajectory_id: string }> => {
    const r = await h.call('POST', '/v1/capabilities', mintBody({ trajectory_id: traj(), objects: [{ kind: 'path', prefix: '/w' }], ...over }));
    expect(r.status).toBe(201);
    return r.body;
  };

  describe('token length', () => {
    test('mint refuses (400, naming objects) a capability whose token approve would refuse, and audits nothing', async () => {
      const before = (await h.call('GET', '/v1/audit?limit=1000')).body.entries.length;
      const r = await h.call('POST', '/v1/capabilities', mintBody({ trajectory_id: traj(), objects: longObjects(64, 120) }));
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe('invalid_request');
      expect(r.body.error.fields.map((f: { path: string }) => f.path)).toEqual(['objects']);
      expect((await h.call('GET', '/v1/audit?limit=1000')).body.entries.length).toBe(before);
    });

    test('the longest token mint issues is one approve accepts', async () => {
      // Grow the objects until mint refuses; the last one it issued still approves.
      let last: { token: string } | null = null;
      for (let len = 60; len < 200; len += 10) {
        const r = await h.call('POST', '/v1/capabilities', mintBody({ trajectory_id: traj(), objects: longObjects(40, len) }));
        if (r.status !== 201) {
          expect(r.status).toBe(400);
          break;
        }
        last = r.body;
      }
      expect(last).not.toBeNull();
      const token = (last as { token: string }).token;
      expect(token.length).toBeLessThanOrEqual(MAX_TOKEN_CHARS);
      const a = await h.call('POST', '/v1/approve', { token, op: 'read', target: { kind: 'path', path: '/w/000/x' }, cost: 0 });
      expect(a.status).toBe(200);
    });

    test('attenuate refuses (400, naming the field) a child whose token would be too long', async () => {
      const root = await mint({ objects: [{ kind: 'path', prefix: '/w' }] });
      const r = await h.call('POST', '/v1/attenuate', {
        parent_token: root.token,
        rights: ['read'],
        objects: longObjects(64, 120),
        predicate: PRED,
        ttl_s: 60,
      });
      expect(r.status).toBe(400);
      expect(r.body.error.fields.map((f: { path: string }) => f.path)).toEqual(['objects']);
    });
  });

  describe('trajectory of a child', () => {
    test.each([
      ['omitted: the parent’s', undefined, (p: string) => p],
      ['equal to the parent’s', (p: string) => p, (p: string) => p],
      ['extending the parent’s', (p: string) => `${p}.sub-1`, (p: string) => `${p}.sub-1`],
    ])('%s is accepted', async (_name, given, expected) => {
      const root = await mint();
      const body = { parent_token: root.token, rights: ['read'], objects: [{ kind: 'path', prefix: '/w/a' }], predicate: PRED, ttl_s: 60 };
      const r = await h.call('POST', '/v1/attenuate', given === undefined ? body : { ...body, trajectory_id: given(root.trajectory_id) });
      expect(r.status).toBe(201);
      expect(r.body.trajectory_id).toBe(expected(root.trajectory_id));
    });

    test.each([
      ['unrelated', () => 'other-trajectory'],
      ['a prefix match without the dot', (p: string) => `${p}x`],
      ['the parent’s parent', (p: string) => p.split('.')[0] as string],
    ])('%s is refused (403 trajectory_unrelated), audited under the parent’s trajectory', async (_name, given) => {
      const root = await mint();
      const child = await h.call('POST', '/v1/attenuate', {
        parent_token: root.token,
        rights: ['read'],
        objects: [{ kind: 'path', prefix: '/w/a' }],
        predicate: PRED,
        trajectory_id: `${root.trajectory_id}.sub`,
        ttl_s: 60,
      });
      expect(child.status).toBe(201);
      const asked = given(child.body.trajectory_id);
      const r = await h.call('POST', '/v1/attenuate', {
        parent_token: child.body.token,
        rights: ['read'],
        objects: [{ kind: 'path', prefix: '/w/a' }],
        predicate: { ...PRED, max_depth: 0 },
        trajectory_id: asked,
        ttl_s: 60,
      });
      expect(r.status).toBe(403);
      expect(r.body.error.violations.map((v: { code: string }) => v.code)).toContain('trajectory_unrelated');
      const rows = (await h.call('GET', `/v1/audit?trajectory_id=${child.body.trajectory_id}&event=attenuate&decision=deny`)).body.entries;
      expect(rows).toHaveLength(1);
      expect(rows[0].detail.requested_trajectory_id).toBe(asked);
    });
  });

  describe('a repeated call_id after a revocation', () => {
    test('returns the first decision, marked replayed with decided_at; a new call is denied', async () => {
      const cap = await mint();
      const call = { token: cap.token, op: 'read', target: { kind: 'path', path: '/w/f' }, cost: 0.1, call_id: 'c-rev' };
      const first = await h.call('POST', '/v1/approve', call);
      expect(first.body.decision).toBe('grant');
      expect(first.body.replayed).toBeUndefined();
      h.clock.advance(5);
      expect((await h.call('POST', '/v1/revoke', { capability_id: cap.capability_id })).status).toBe(200);
      const again = await h.call('POST', '/v1/approve', call);
      expect(again.body).toEqual({ ...first.body, replayed: true, decided_at: new Date(h.clock.ms - 5000).toISOString() });
      const fresh = await h.call('POST', '/v1/approve', { ...call, call_id: 'c-new' });
      expect(fresh.body.reason.code).toBe('revoked');
    });
  });

  describe('approve rows', () => {
    test('keep the target as requested beside the resolved one, and the args', async () => {
      const cap = await mint();
      const r = await h.call('POST', '/v1/approve', {
        token: cap.token,
        op: 'read',
        target: { kind: 'path', path: '/w/a/../../etc/passwd' },
        cost: 0,
        args: { mode: 'r', n: 3 },
      });
      expect(r.body.reason.code).toBe('object_outside');
      const [row] = (await h.call('GET', `/v1/audit?capability_id=${cap.capability_id}&event=approve`)).body.entries;
      expect(row.target).toEqual({ kind: 'path', path: '/etc/passwd' });
      expect(row.detail.requested_target).toEqual({ kind: 'path', path: '/w/a/../../etc/passwd' });
      expect(row.detail.args).toEqual({ mode: 'r', n: 3 });
      expect((await h.call('GET', '/v1/audit/verify')).body.ok).toBe(true);
    });

    test('bound what they keep: long strings are cut and the row says so', async () => {
      const cap = await mint();
      const long = `/w/${'a'.repeat(4000)}`;
      await h.call('POST', '/v1/approve', { token: cap.token, op: 'read', target: { kind: 'path', path: long }, cost: 0, args: { cmd: 'b'.repeat(60_000) } });
      const [row] = (await h.call('GET', `/v1/audit?capability_id=${cap.capability_id}&event=approve`)).body.entries;
      expect(row.detail.requested_target.path.length).toBeLessThanOrEqual(1024);
      expect(row.detail.args.cmd.length).toBeLessThanOrEqual(1024);
      expect(row.detail.truncated).toBe(true);
    });
  });
});

describe.each(BACKENDS)('root trajectory on %s', (backend) => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness(backend);
  });
  afterAll(async () => h.close());

  test("every row records its tree's root trajectory, so the root's view includes its subagents' refused attenuations", async () => {
    const root = await h.call('POST', '/v1/capabilities', mintBody({ trajectory_id: 'rt-1', objects: [{ kind: 'path', prefix: '/w' }] }));
    const child = await h.call('POST', '/v1/attenuate', {
      parent_token: root.body.token,
      rights: ['read'],
      objects: [{ kind: 'path', prefix: '/w/a' }],
      predicate: PRED,
      trajectory_id: 'rt-1.sub',
      ttl_s: 60,
    });
    expect(child.status).toBe(201);
    // The subagent asks for more than it holds: refused, filed under its own trajectory.
    const widened = await h.call('POST', '/v1/attenuate', {
      parent_token: child.body.token,
      rights: ['write'],
      objects: [{ kind: 'path', prefix: '/w' }],
      predicate: { ...PRED, max_depth: 0 },
      trajectory_id: 'rt-1.sub.deeper',
      ttl_s: 60,
    });
    expect(widened.status).toBe(403);
    await h.call('POST', '/v1/approve', { token: child.body.token, op: 'read', target: { kind: 'path', path: '/w/a/f' }, cost: 0 });
    await h.call('POST', '/v1/revoke', { capability_id: root.body.capability_id });

    const view = (await h.call('GET', '/v1/audit?root_trajectory_id=rt-1')).body.entries;
    expect(view.map((r: { event: string; decision: string; trajectory_id: string }) => [r.event, r.decision, r.trajectory_id])).toEqual([
      ['mint', 'grant', 'rt-1'],
      ['attenuate', 'grant', 'rt-1.sub'],
      ['attenuate', 'deny', 'rt-1.sub.deeper'],
      ['approve', 'grant', 'rt-1.sub'],
      ['revoke', 'grant', 'rt-1'],
    ]);
    for (const r of view) expect(r.root_trajectory_id).toBe('rt-1');
    expect((await h.call('GET', '/v1/audit?trajectory_id=rt-1')).body.entries).toHaveLength(2);
    expect((await h.call('GET', '/v1/audit/verify')).body.ok).toBe(true);
  });
});
