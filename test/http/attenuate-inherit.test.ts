/**
 * Attenuation that spawners can write (issue 16): a predicate field the request omits takes the
 * parent's bound (max_depth one less), the answer, the stored capability and the signed token carry
 * the effective bounds, and approve enforces them on the child; a field given looser is still
 * refused, each violation naming its field.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { BACKENDS } from '../support/db.js';
import { startHarness, type Harness } from '../support/app.js';

let seq = 0;
const traj = (): string => `inh-${++seq}`;

interface Issued {
  capability_id: string;
  token: string;
  trajectory_id: string;
  predicate: Record<string, unknown>;
}

const PARENT_PREDICATE = { max_cost: 1, budget: 10, max_calls: 3, max_depth: 3, args: [{ kind: 'max', arg: 'n', value: 10 }] };
const INHERITED = { ...PARENT_PREDICATE, max_depth: 2 };

/** The claims of a token, read without verifying (the test trusts its own authority's token). */
const payloadOf = (token: string): Record<string, unknown> =>
  JSON.parse(Buffer.from(token.split('.')[1] as string, 'base64url').toString('utf8')) as Record<string, unknown>;

describe.each(BACKENDS)('attenuate: inherited limits on %s', (backend) => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness(backend);
  });
  afterAll(async () => h.close());

  async function mintRoot(predicate: Record<string, unknown> = PARENT_PREDICATE): Promise<Issued> {
    const t = traj();
    const r = await h.call('POST', '/v1/capabilities', {
      trajectory_id: t,
      rights: ['read', 'write'],
      objects: [{ kind: 'path', prefix: `/w/${t}` }],
      predicate,
      ttl_s: 3600,
    });
    expect(r.status).toBe(201);
    return r.body as Issued;
  }

  /** A child that narrows rights and objects only, with `predicate` when given. */
  const attenuate = (parent: Issued, predicate?: Record<string, unknown>) =>
    h.call('POST', '/v1/attenuate', {
      parent_token: parent.token,
      rights: ['read'],
      objects: [{ kind: 'path', prefix: `/w/${parent.trajectory_id}/src` }],
      ...(predicate === undefined ? {} : { predicate }),
    });

  const approve = (token: string, over: Record<string, unknown> = {}) =>
    h.call('POST', '/v1/approve', { token, op: 'read', target: { kind: 'path', path: '/w/x' }, cost: 0, ...over });

  test('201: an omitted predicate is the parent bounds, in the answer, the token, the stored capability and the audit row', async () => {
    const root = await mintRoot();
    const r = await attenuate(root);
    expect(r.status).toBe(201);
    expect(r.body.predicate).toEqual(INHERITED);
    expect(payloadOf(r.body.token).p).toEqual(INHERITED);
    const stored = await h.call('GET', `/v1/capabilities/${r.body.capability_id}`);
    expect(stored.body.predicate).toEqual(INHERITED);
    const audit = await h.call('GET', `/v1/audit?capability_id=${r.body.capability_id}&event=attenuate`);
    expect(audit.body.entries[0].detail.predicate).toEqual(INHERITED);
  });

  test('only the omitted fields are inherited; the given ones are kept', async () => {
    const root = await mintRoot();
    const r = await attenuate(root, { budget: 2, max_depth: 0 });
    expect(r.status).toBe(201);
    expect(r.body.predicate).toEqual({ ...PARENT_PREDICATE, budget: 2, max_depth: 0 });
    expect(payloadOf(r.body.token).p).toEqual(r.body.predicate);
  });

  test("calls on the child beyond the parent's max_calls are denied, by the child's own inherited bound", async () => {
    const root = await mintRoot();
    const child = (await attenuate(root, {})).body as Issued;
    const target = { kind: 'path', path: `/w/${root.trajectory_id}/src/a` };
    const answers = [];
    for (let i = 0; i < 4; i++) answers.push((await approve(child.token, { target, args: { n: 1 } })).body);
    expect(answers.map((a) => [a.decision, a.reason?.code ?? null, a.calls_remaining])).toEqual([
      ['grant', null, 2],
      ['grant', null, 1],
      ['grant', null, 0],
      ['deny', 'calls_exhausted', 0],
    ]);
    const stored = await h.call('GET', `/v1/capabilities/${child.capability_id}`);
    expect(stored.body.calls).toBe(3);
  });

  test("per-call bounds the child omitted are the parent's: max_cost and args, which only the child's token carries", async () => {
    const root = await mintRoot();
    const child = (await attenuate(root)).body as Issued;
    const target = { kind: 'path', path: `/w/${root.trajectory_id}/src/a` };
    const tooDear = await approve(child.token, { target, cost: 1.5, args: { n: 1 } });
    expect([tooDear.body.decision, tooDear.body.reason?.code]).toEqual(['deny', 'cost_exceeds_max']);
    const outOfBound = await approve(child.token, { target, cost: 0.5, args: { n: 11 } });
    expect([outOfBound.body.decision, outOfBound.body.reason?.code]).toEqual(['deny', 'arg_violates_bound']);
    const fine = await approve(child.token, { target, cost: 1, args: { n: 10 } });
    expect(fine.body.decision).toBe('grant');
  });

  test("an inherited max_depth is one less than the parent's, so the chain still runs out", async () => {
    const root = await mintRoot({ max_depth: 1 });
    const child = await attenuate(root);
    expect(child.status).toBe(201);
    expect(child.body.predicate).toEqual({ max_depth: 0 });
    const grandchild = await attenuate(child.body as Issued);
    expect(grandchild.status).toBe(403);
    expect(grandchild.body.error.violations).toMatchObject([{ component: 'predicate', code: 'depth_exhausted', field: 'predicate.max_depth' }]);
  });

  test('403: an explicitly wider limit is still refused, naming its field', async () => {
    const root = await mintRoot();
    const r = await attenuate(root, { max_calls: 4 });
    expect(r.status).toBe(403);
    expect(r.body.error.code).toBe('attenuation_refused');
    expect(r.body.error.violations).toEqual([
      { component: 'predicate', code: 'predicate_widened', field: 'predicate.max_calls', detail: expect.stringContaining('predicate.max_calls') },
    ]);
    expect(r.body.error.message).toContain('predicate.max_calls');
    const parent = await h.call('GET', `/v1/capabilities/${root.capability_id}`);
    expect(parent.body.children).toEqual([]);
  });

  test('403: an explicitly empty args list is not an omission, and is refused under a parent with args bounds', async () => {
    const root = await mintRoot();
    const r = await attenuate(root, { args: [] });
    expect(r.status).toBe(403);
    expect(r.body.error.violations.map((v: { field: string }) => v.field)).toEqual(['predicate.args']);
  });

  test('two widened fields: the same code, each violation naming its own field', async () => {
    const root = await mintRoot();
    const r = await attenuate(root, { budget: 11, max_calls: 4 });
    expect(r.status).toBe(403);
    const vs = r.body.error.violations as { code: string; field: string; detail: string }[];
    expect(vs.map((v) => v.code)).toEqual(['predicate_widened', 'predicate_widened']);
    expect(vs.map((v) => v.field).sort()).toEqual(['predicate.budget', 'predicate.max_calls']);
    for (const v of vs) expect(v.detail).toContain(v.field);
    expect(r.body.error.message).toContain('predicate.budget');
    expect(r.body.error.message).toContain('predicate.max_calls');
    // The refusal's audit row keeps the fields too.
    const audit = await h.call('GET', `/v1/audit?trajectory_id=${root.trajectory_id}&event=attenuate&decision=deny`);
    expect(audit.body.entries[0].detail.violations.map((v: { field: string }) => v.field).sort()).toEqual(['predicate.budget', 'predicate.max_calls']);
  });

  test('every violation of a many-sided refusal names its field', async () => {
    const root = await mintRoot();
    const r = await h.call('POST', '/v1/attenuate', {
      parent_token: root.token,
      rights: ['read', 'execute'],
      objects: [
        { kind: 'path', prefix: `/w/${root.trajectory_id}/ok` },
        { kind: 'path', prefix: '/etc' },
      ],
      predicate: { max_cost: 2 },
      ttl_s: 3601,
      trajectory_id: 'elsewhere',
    });
    expect(r.status).toBe(403);
    const got = (r.body.error.violations as { code: string; field: string }[]).map((v) => `${v.code}@${v.field}`).sort();
    expect(got).toEqual([
      'expiry_extended@ttl_s',
      'object_widened@objects.1',
      'predicate_widened@predicate.max_cost',
      'right_widened@rights',
      'trajectory_unrelated@trajectory_id',
    ]);
  });

  test('a parent the authority cannot verify is refused naming parent_token', async () => {
    const r = await h.call('POST', '/v1/attenuate', { parent_token: 'not-a-token', rights: ['read'], objects: [{ kind: 'path', prefix: '/w' }] });
    expect(r.status).toBe(403);
    expect(r.body.error.violations).toMatchObject([{ code: 'parent_invalid', field: 'parent_token' }]);
  });
});
