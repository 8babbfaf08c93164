/**
 * GET /v1/audit/trajectories (issue 16, the operator's page): the recently active delegation trees,
 * most recent first, each with its grants, denials, granted calls and spend counted from the audit
 * log; the auditor role reads it, a driver is refused; the limit is bounded; tenants stay apart.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { BACKENDS } from '../support/db.js';
import { mintBody, startHarness, type Harness } from '../support/app.js';

describe.each(BACKENDS)('recent trajectories on %s', (backend) => {
  let h: Harness;

  const approve = (token: string, path: string, cost: number) => h.call('POST', '/v1/approve', { token, op: 'read', target: { kind: 'path', path }, cost });

  beforeAll(async () => {
    h = await startHarness(backend);
    const a = (await h.call('POST', '/v1/capabilities', mintBody({ trajectory_id: 'tr-a', objects: [{ kind: 'path', prefix: '/w/a' }] }))).body;
    const child = (
      await h.call('POST', '/v1/attenuate', {
        parent_token: a.token,
        trajectory_id: 'tr-a.sub',
        rights: ['read'],
        objects: [{ kind: 'path', prefix: '/w/a/src' }],
        predicate: { budget: 1, max_calls: 5, max_depth: 0 },
      })
    ).body;
    expect((await approve(a.token, '/w/a/x', 0.25)).body.decision).toBe('grant');
    expect((await approve(child.token, '/w/a/src/y', 0.5)).body.decision).toBe('grant');
    expect((await approve(child.token, '/etc/passwd', 0)).body.decision).toBe('deny');
    const refused = await h.call('POST', '/v1/attenuate', { parent_token: child.token, rights: ['write'], objects: child.objects, predicate: { budget: 1 } });
    expect(refused.status).toBe(403);
    h.clock.advance(5);
    const b = (await h.call('POST', '/v1/capabilities', mintBody({ trajectory_id: 'tr-b', objects: [{ kind: 'path', prefix: '/w/b' }] }))).body;
    expect((await approve(b.token, '/w/b/z', 1.5)).body.decision).toBe('grant');
    h.clock.advance(5);
    // tr-a acts last, so it is the most recently active tree
    expect((await approve(child.token, '/w/a/src/z', 0.125)).body.decision).toBe('grant');
  });
  afterAll(async () => h.close());

  test('lists the trees most recently active first, with their counts and spend', async () => {
    const r = await h.call('GET', '/v1/audit/trajectories');
    expect(r.status).toBe(200);
    expect(r.headers.get('cache-control')).toBe('no-store');
    expect(r.body.trajectories).toEqual([
      {
        root_trajectory_id: 'tr-a',
        first_at: '2026-06-01T12:00:00.000Z',
        last_at: '2026-06-01T12:00:10.000Z',
        grants: 5,
        denials: 2,
        calls: 3,
        spent: 0.875,
      },
      { root_trajectory_id: 'tr-b', first_at: '2026-06-01T12:00:05.000Z', last_at: '2026-06-01T12:00:05.000Z', grants: 2, denials: 0, calls: 1, spent: 1.5 },
    ]);
  });

  test('the counts are those of the tree view of GET /v1/audit', async () => {
    const view = (await h.call('GET', '/v1/audit?root_trajectory_id=tr-a&limit=1000')).body.entries as {
      decision: string;
      event: string;
      cost: number | null;
    }[];
    const [summary] = (await h.call('GET', '/v1/audit/trajectories')).body.trajectories;
    expect(summary.grants).toBe(view.filter((e) => e.decision === 'grant').length);
    expect(summary.denials).toBe(view.filter((e) => e.decision === 'deny').length);
    const spent = view.filter((e) => e.event === 'approve' && e.decision === 'grant').reduce((s, e) => s + (e.cost ?? 0), 0);
    expect(summary.spent).toBe(spent);
  });

  test('limit bounds the list; a bad limit or an unknown parameter is a 400 naming it', async () => {
    const one = await h.call('GET', '/v1/audit/trajectories?limit=1');
    expect(one.body.trajectories.map((t: { root_trajectory_id: string }) => t.root_trajectory_id)).toEqual(['tr-a']);
    for (const [query, field] of [
      ['limit=0', 'query.limit'],
      ['limit=101', 'query.limit'],
      ['limit=x', 'query.limit'],
      ['since=1', 'query.since'],
    ]) {
      const r = await h.call('GET', `/v1/audit/trajectories?${query}`);
      expect(r.status, query).toBe(400);
      expect(r.body.error.code).toBe('invalid_request');
      expect(r.body.error.fields.map((f: { path: string }) => f.path)).toContain(field);
    }
  });

  test('another tenant sees none of these trees', async () => {
    const r = await h.call('GET', '/v1/audit/trajectories', undefined, { as: 'b' });
    expect(r.status).toBe(200);
    expect(r.body.trajectories).toEqual([]);
  });

  test('an auditor key reads it; a driver key is refused (403 naming the roles, audited); no key is 401', async () => {
    const key = async (role: string): Promise<string> => (await h.call('POST', '/v1/api-keys', { name: `k-${role}`, roles: [role] })).body.api_key;
    const auditor = await h.call('GET', '/v1/audit/trajectories', undefined, { headers: { authorization: `Bearer ${await key('auditor')}` } });
    expect(auditor.status).toBe(200);
    expect(auditor.body.trajectories).toHaveLength(2);
    const driver = await h.call('GET', '/v1/audit/trajectories', undefined, { headers: { authorization: `Bearer ${await key('driver')}` } });
    expect(driver.status).toBe(403);
    expect(driver.body.error.code).toBe('forbidden');
    expect(driver.body.error.required_roles).toEqual(['auditor', 'admin']);
    const denied = (await h.call('GET', '/v1/audit?event=access&decision=deny')).body.entries;
    expect(denied.map((e: { reason_code: string }) => e.reason_code)).toEqual(['forbidden']);
    expect((await h.call('GET', '/v1/audit/trajectories', undefined, { as: 'none' })).status).toBe(401);
  });
});
