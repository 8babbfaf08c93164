/**
 * Text the store cannot keep (NUL, half of a surrogate pair) in any of the three ways a request
 * brought it to a decision batch before: an approve arg cut through an emoji for its audit row, a
 * tool's schema, and the path of a route refused for its roles. Each is answered on its own (a
 * decision, a 400, an audited 403), and never fails the other tenant's decisions batched with it:
 * the writer commits many callers' decisions, of every tenant, in one transaction.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { AUDIT_STRING_CHARS } from '../../src/service/approve-record.js';
import { BACKENDS } from '../support/db.js';
import { startHarness, type Called, type Harness } from '../support/app.js';
import { SHELL, variant } from '../support/tools.js';

type Entry = { event: string; detail: { args: { note: string }; truncated: boolean } };

describe.each(BACKENDS)('text the store cannot keep, on %s', (backend) => {
  let h: Harness;
  let driver: string;
  let seq = 0;
  beforeAll(async () => {
    h = await startHarness(backend);
    driver = (await h.call('POST', '/v1/api-keys', { name: 'driver', roles: ['driver'] })).body.api_key as string;
  });
  afterAll(async () => h.close());

  /** `request` sent together with eight mints of tenant b, ten times: the answers, and b's mints that failed. */
  async function besideOthers(request: () => Promise<Called>): Promise<{ answers: Called[]; othersFailed: number }> {
    const answers: Called[] = [];
    let othersFailed = 0;
    for (let round = 0; round < 10; round++) {
      const mints = Array.from({ length: 8 }, () =>
        h.call(
          'POST',
          '/v1/capabilities',
          { trajectory_id: `b-${++seq}`, rights: ['read'], objects: [{ kind: 'path', prefix: '/w' }], ttl_s: 60 },
          { as: 'b' },
        ),
      );
      const [answer, ...others] = await Promise.all([request(), ...mints]);
      answers.push(answer);
      othersFailed += others.filter((r) => r.status !== 201).length;
    }
    return { answers, othersFailed };
  }

  test('an approve arg with an emoji across the audit cut is decided, its row cut before the emoji', async () => {
    const minted = await h.call('POST', '/v1/capabilities', {
      trajectory_id: 'cut',
      rights: ['read'],
      objects: [{ kind: 'path', prefix: '/workspace' }],
      ttl_s: 3600,
    });
    const note = `${'a'.repeat(AUDIT_STRING_CHARS - 1)}\u{1F600}`;
    const body = { token: minted.body.token, op: 'read', target: { kind: 'path', path: '/workspace/x' }, cost: 0, args: { note } };
    const { answers, othersFailed } = await besideOthers(() => h.call('POST', '/v1/approve', body, { headers: { authorization: `Bearer ${driver}` } }));
    expect(answers.map((r) => [r.status, r.body.decision])).toEqual(answers.map(() => [200, 'grant']));
    expect(othersFailed).toBe(0);
    const entries = ((await h.call('GET', `/v1/audit?capability_id=${minted.body.capability_id}`)).body.entries as Entry[]).filter(
      (e) => e.event === 'approve',
    );
    expect(entries.length).toBe(10);
    for (const e of entries) expect([e.detail.args.note, e.detail.truncated]).toEqual(['a'.repeat(AUDIT_STRING_CHARS - 1), true]);
  });

  test.each([
    [
      'a NUL in a description',
      'input_schema.properties.command.description',
      (t: typeof SHELL) => Object.assign(t.input_schema.properties.command, { description: 'nul \u0000' }),
    ],
    [
      'half a surrogate pair in an enum',
      'input_schema.properties.command.enum',
      (t: typeof SHELL) => Object.assign(t.input_schema.properties.command, { enum: ['ok', 'half \ud83d'] }),
    ],
    ['a NUL in the target pointer', 'target.pointer', (t: typeof SHELL) => Object.assign(t.target, { pointer: '/cwd\u0000' })],
  ])("a tool's definition holding %s is refused, 400 naming it, and fails nobody else", async (_, path, edit) => {
    const bad = variant(SHELL, edit);
    const { answers, othersFailed } = await besideOthers(() => h.call('PUT', `/v1/tools/bad${++seq}`, bad));
    for (const r of answers)
      expect([r.status, r.body.error.code, r.body.error.fields.map((f: { path: string }) => f.path)]).toEqual([
        400,
        'invalid_request',
        [path.replace(/\.enum$/, '.enum.1')],
      ]);
    expect(othersFailed).toBe(0);
  });

  test('a path holding %00 asked for with a key lacking the role: 403 audited (the NUL recorded as %00), and fails nobody else', async () => {
    const { answers, othersFailed } = await besideOthers(() =>
      h.call('GET', `/v1/nope${++seq}%00`, undefined, { headers: { authorization: `Bearer ${driver}` } }),
    );
    expect(answers.map((r) => [r.status, r.body.error.code])).toEqual(answers.map(() => [403, 'forbidden']));
    expect(othersFailed).toBe(0);
    const entries = (await h.call('GET', '/v1/audit?limit=1000')).body.entries as { reason_code: string | null; detail: { route?: string } }[];
    const routes = entries.filter((e) => e.reason_code === 'forbidden').map((e) => e.detail.route);
    expect(routes.filter((r) => /^GET \/v1\/nope\d+%00$/.test(r ?? ''))).toHaveLength(10);
  });
});
