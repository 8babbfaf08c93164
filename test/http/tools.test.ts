/**
 * The tool registry and approve by tool (issue 17): the four-tool catalog registers, every rule
 * broken once is refused (all violations listed, with their fields), rule 4 warns, versions, roles;
 * calls by tool: invalid args denied with every failing path, unknown tools, `call_id` for
 * destructive and irreversible tools, the capability's tool allow-list and approval classes, and
 * attenuation narrowing them.
 */
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { BACKENDS } from '../support/db.js';
import { startHarness, type Called, type Harness } from '../support/app.js';
import { CATALOG, EDIT, SEARCH, SHELL, VIEW, variant } from '../support/tools.js';
import { ResponseSealer } from '../../src/service/seal.js';
import { toolParts } from '../../src/service/tools.js';
import { findTool } from '../../src/store/tools.js';

type Body = Record<string, unknown>;
type Schema = { properties: Record<string, Record<string, unknown>>; required: string[]; additionalProperties?: unknown } & Record<string, unknown>;

describe.each(BACKENDS)('tools on %s', (backend) => {
  let h: Harness;
  let driver: string;
  let approver: string;
  beforeAll(async () => {
    h = await startHarness(backend);
    for (const [name, tool] of Object.entries(CATALOG)) expect((await h.call('PUT', `/v1/tools/${name}`, tool)).status).toBe(201);
    driver = (await h.call('POST', '/v1/api-keys', { name: 'driver', roles: ['driver'] })).body.api_key as string;
    approver = (await h.call('POST', '/v1/api-keys', { name: 'approver', roles: ['approver'] })).body.api_key as string;
  });
  afterAll(async () => h.close());

  const as = (key: string) => ({ headers: { authorization: `Bearer ${key}` } });
  let seq = 0;

  async function mint(predicate: Body = {}): Promise<{ token: string; capability_id: string; trajectory_id: string }> {
    const t = `tools-${++seq}`;
    const r = await h.call('POST', '/v1/capabilities', {
      trajectory_id: t,
      rights: ['read', 'write', 'execute'],
      objects: [{ kind: 'path', prefix: '/workspace' }],
      predicate: { budget: 10, max_calls: 100, max_depth: 3, ...predicate },
      ttl_s: 3600,
    });
    expect(r.status).toBe(201);
    return r.body;
  }

  const byTool = (token: string, tool: string, args: Body, over: Body = {}): Promise<Called> =>
    h.call('POST', '/v1/approve', { token, tool, args, cost: 0.5, ...over }, as(driver));

  describe('registration', () => {
    test('the catalog is registered, readable by a driver, versioned on change only', async () => {
      const list = await h.call('GET', '/v1/tools', undefined, as(driver));
      expect(list.status).toBe(200);
      expect((list.body.tools as Body[]).map((t) => [t.name, t.version, t.side_effect]).sort()).toEqual([
        ['edit', 1, 'destructive'],
        ['search', 1, 'read_only'],
        ['shell', 1, 'irreversible'],
        ['view', 1, 'read_only'],
      ]);
      const same = await h.call('PUT', '/v1/tools/search', SEARCH);
      expect([same.status, same.body.version]).toEqual([200, 1]);
      const changed = await h.call('PUT', '/v1/tools/search', { ...SEARCH, description: 'Search, v2.' });
      expect([changed.status, changed.body.version]).toEqual([201, 2]);
      expect((await h.call('GET', '/v1/tools/search?version=1')).body.description).toBe(SEARCH.description);
      expect((await h.call('GET', '/v1/tools/search')).body.version).toBe(2);
      expect((await h.call('GET', '/v1/tools/nope')).status).toBe(404);
      const audit = await h.call('GET', '/v1/audit?event=tool');
      expect((audit.body.entries as Body[]).map((e) => `${String((e.detail as Body).tool)}@${String((e.detail as Body).version)}`)).toEqual(
        expect.arrayContaining(['shell@1', 'view@1', 'edit@1', 'search@1', 'search@2']),
      );
    });

    test('only admin registers a tool (403 forbidden, audited)', async () => {
      const r = await h.call('PUT', '/v1/tools/x', SEARCH, as(driver));
      expect([r.status, r.body.error.code]).toEqual([403, 'forbidden']);
      expect((await h.call('PUT', '/v1/tools/x', SEARCH, as(approver))).status).toBe(403);
    });

    const schemaOf = (t: { input_schema: unknown }): Schema => t.input_schema as Schema;
    test.each([
      ['rule 1: an open object', () => variant(SHELL, (t) => delete schemaOf(t).additionalProperties), 'open_object', 'input_schema'],
      [
        'rule 2: a property neither required nor defaulted',
        () => variant(VIEW, (t) => delete schemaOf(t).properties.limit?.default),
        'required_missing',
        'input_schema/properties/limit',
      ],
      ['rule 2: required names no property', () => variant(SEARCH, (t) => schemaOf(t).required.push('glob')), 'required_unknown', 'input_schema/required'],
      [
        'rule 3: an unbounded string',
        () => variant(EDIT, (t) => delete schemaOf(t).properties.old_str?.maxLength),
        'string_unbounded',
        'input_schema/properties/old_str',
      ],
      [
        'rule 3: a number without maximum',
        () => variant(SHELL, (t) => delete schemaOf(t).properties.timeout_ms?.maximum),
        'number_unbounded',
        'input_schema/properties/timeout_ms',
      ],
      [
        'rule 3: an unbounded array',
        () => variant(SEARCH, (t) => (schemaOf(t).properties.globs = { type: 'array', items: { type: 'string', maxLength: 64 }, default: [] })),
        'array_unbounded',
        'input_schema/properties/globs',
      ],
      [
        'rule 3: a pattern that backtracks catastrophically (ReDoS on every call)',
        () => variant(SEARCH, (t) => ((schemaOf(t).properties.path as Body).pattern = '^(a|a)*$')),
        'pattern_unsafe',
        'input_schema/properties/path/pattern',
      ],
      [
        'rule 3: an untyped property',
        () => variant(SEARCH, (t) => (schemaOf(t).properties.extra = { default: null })),
        'untyped',
        'input_schema/properties/extra',
      ],
      [
        'rule 5: an untagged union of objects',
        () =>
          variant(SEARCH, (t) => {
            const obj = (p: string) => ({ type: 'object', additionalProperties: false, required: [p], properties: { [p]: { type: 'string', maxLength: 9 } } });
            schemaOf(t).properties.mode = { oneOf: [obj('regex'), obj('literal')] };
            schemaOf(t).required.push('mode');
          }),
        'untagged_union',
        'input_schema/properties/mode/oneOf',
      ],
    ])('%s is refused naming the rule and the field', async (_name, make, code, field) => {
      const r = await h.call('PUT', '/v1/tools/broken', make());
      expect([r.status, r.body.error.code]).toEqual([422, 'tool_schema_refused']);
      expect(r.body.error.violations).toEqual([expect.objectContaining({ code, field })]);
      expect((await h.call('GET', '/v1/tools/broken')).status).toBe(404);
    });

    test('every violation is listed at once, nested objects and union alternatives included', async () => {
      const tagged = (kind: string, extra: Body) => ({
        type: 'object',
        additionalProperties: false,
        required: ['kind'],
        properties: { kind: { const: kind }, ...extra },
      });
      const tool = variant(SEARCH, (t) => {
        const s = schemaOf(t);
        delete s.additionalProperties;
        s.properties.pattern = { type: 'string' };
        s.properties.filter = {
          oneOf: [
            tagged('glob', { glob: { type: 'string' } }),
            { ...tagged('size', { max_size: { type: 'integer', minimum: 0 } }), additionalProperties: true },
          ],
          default: null,
        };
      });
      const r = await h.call('PUT', '/v1/tools/broken', tool);
      expect(r.status).toBe(422);
      expect((r.body.error.violations as Body[]).map((v) => [v.code, v.field])).toEqual([
        ['open_object', 'input_schema'],
        ['string_unbounded', 'input_schema/properties/pattern'],
        ['required_missing', 'input_schema/properties/filter/oneOf/0/properties/glob'],
        ['string_unbounded', 'input_schema/properties/filter/oneOf/0/properties/glob'],
        ['open_object', 'input_schema/properties/filter/oneOf/1'],
        ['required_missing', 'input_schema/properties/filter/oneOf/1/properties/max_size'],
        ['number_unbounded', 'input_schema/properties/filter/oneOf/1/properties/max_size'],
      ]);
    });

    test('a target pointer must name a required string', async () => {
      const r = await h.call('PUT', '/v1/tools/broken', { ...VIEW, target: { pointer: '/offset', kind: 'path' } });
      expect([r.status, r.body.error.violations[0].code, r.body.error.violations[0].field]).toEqual([422, 'target_invalid', 'target.pointer']);
    });

    test('rule 4 is a warning: a duration without a unit registers, and says so', async () => {
      const tool = variant(SHELL, (t) => {
        const s = schemaOf(t);
        s.properties.timeout = s.properties.timeout_ms as Record<string, unknown>;
        delete s.properties.timeout_ms;
        s.required = ['command', 'cwd', 'timeout'];
      });
      const r = await h.call('PUT', '/v1/tools/shell-unitless', tool);
      expect(r.status).toBe(201);
      expect(r.body.warnings).toEqual([expect.objectContaining({ rule: 4, code: 'unit_missing', field: 'input_schema/properties/timeout' })]);
      expect((await h.call('GET', '/v1/tools/shell')).body.warnings).toEqual([]);
    });
  });

  describe('approve by tool', () => {
    test('valid args: op and target come from the tool', async () => {
      const cap = await mint();
      const r = await byTool(cap.token, 'view', { path: '/workspace/src/a.ts', offset: 10 });
      expect([r.status, r.body.decision, r.body.budget_remaining]).toEqual([200, 'grant', 9.5]);
      const row = (await h.call('GET', `/v1/audit?trajectory_id=${cap.trajectory_id}&event=approve`)).body.entries[0] as Body;
      expect([row.op, row.target, (row.detail as Body).tool, (row.detail as Body).tool_version]).toEqual([
        'read',
        { kind: 'path', path: '/workspace/src/a.ts' },
        'view',
        1,
      ]);
      const outside = await byTool(cap.token, 'view', { path: '/etc/passwd' });
      expect([outside.body.decision, outside.body.reason.code]).toEqual(['deny', 'object_outside']);
    });

    test('invalid args are denied naming every failing path, and charge nothing', async () => {
      const cap = await mint();
      const r = await byTool(cap.token, 'shell', { command: '', timeout_ms: 999_999, verbose: true }, { call_id: 'c-1' });
      expect([r.body.decision, r.body.reason.code]).toEqual(['deny', 'args_invalid']);
      expect((r.body.reason.fields as { path: string }[]).map((f) => f.path).sort()).toEqual(['args.command', 'args.cwd', 'args.timeout_ms', 'args.verbose']);
      for (const p of ['args.command', 'args.cwd', 'args.timeout_ms', 'args.verbose']) expect(r.body.reason.message).toContain(p);
      const edit = await byTool(cap.token, 'edit', { path: 'relative/file', old_str: 'a', new_str: 'b' }, { call_id: 'c-2' });
      expect([edit.body.reason.code, edit.body.reason.fields.map((f: Body) => f.path)]).toEqual(['args_invalid', ['args.path']]);
      expect((await h.call('GET', `/v1/capabilities/${cap.capability_id}`)).body.spent).toBe(0);
    });

    test('a stored tool whose pattern could stall a call (registered before such patterns were refused) denies every call', async () => {
      const tool = variant(VIEW, (t) => {
        (t.input_schema as Schema).properties.path!.pattern = '^/workspace/[a-z/.]+$';
      });
      expect((await h.call('PUT', '/v1/tools/old-view', tool)).status).toBe(201);
      // As a registration from before the check left it (or a database writer wrote it); the args
      // below match the pattern, so without the check they would be granted.
      await h.database.db.execute(
        sql`UPDATE tools SET input_schema = jsonb_set(input_schema, '{properties,path,pattern}', '"^/workspace/(a|a)*$"') WHERE name = 'old-view'`,
      );
      // Sealed as the authority itself would have sealed such a registration.
      const old = (await findTool(h.store.db, h.tenantIds.a, 'old-view'))!;
      const seal = (await ResponseSealer.from(h.keys)).sealOf('tool', toolParts(old));
      await h.database.db.execute(sql`UPDATE tools SET seal = ${seal} WHERE name = 'old-view'`);
      const cap = await mint();
      const r = await byTool(cap.token, 'old-view', { path: '/workspace/aaaa' });
      expect([r.body.decision, r.body.reason.code, r.body.reason.fields]).toEqual([
        'deny',
        'args_invalid',
        [{ path: 'args', message: expect.stringContaining('input_schema/properties/path/pattern (pattern_unsafe)') }],
      ]);
    });

    test('a tool changed in the database (irreversible made read-only) is neither used nor shown: 503 until registered again', async () => {
      expect((await h.call('PUT', '/v1/tools/rm-rf', { ...SHELL, side_effect: 'irreversible' })).status).toBe(201);
      await h.database.db.execute(sql`UPDATE tools SET side_effect = 'read_only' WHERE tenant_id = ${h.tenantIds.a} AND name = 'rm-rf'`);
      const cap = await mint();
      const args = { command: 'rm -rf /workspace', cwd: '/workspace/app', timeout_ms: 1000 };
      const r = await h.call('POST', '/v1/approve', { token: cap.token, tool: 'rm-rf', args, cost: 0, call_id: 'rm-1' }, as(driver));
      expect([r.status, r.body.error?.code]).toEqual([503, 'unavailable']);
      expect((await h.call('GET', '/v1/tools/rm-rf')).status).toBe(503);
      expect((await h.call('GET', '/v1/tools')).status).toBe(503);
      // The same definition registered again is a new, sealed version, and a person is asked again.
      const again = await h.call('PUT', '/v1/tools/rm-rf', { ...SHELL, side_effect: 'irreversible' });
      expect([again.status, again.body.version]).toEqual([201, 2]);
      const asked = await h.call('POST', '/v1/approve', { token: cap.token, tool: 'rm-rf', args, cost: 0, call_id: 'rm-2' }, as(driver));
      expect(asked.body.decision).toBe('pending');
    });

    test('a newer version removed from the database, leaving an older sealed one latest, is not used: 503 until registered again', async () => {
      const args = { command: 'rm -rf /workspace', cwd: '/workspace/app', timeout_ms: 1000 };
      const cap = await mint();
      const call = (name: string, callId: string): Promise<Called> =>
        h.call('POST', '/v1/approve', { token: cap.token, tool: name, args, cost: 0, call_id: callId }, as(driver));
      for (const name of ['rb-seen', 'rb-cold']) {
        // Version 1 asked nobody; version 2 made the tool irreversible, so a person is asked.
        expect((await h.call('PUT', `/v1/tools/${name}`, { ...SHELL, side_effect: 'destructive' })).status).toBe(201);
        expect((await h.call('PUT', `/v1/tools/${name}`, { ...SHELL, side_effect: 'irreversible' })).body.version).toBe(2);
      }
      // rb-seen is used before the removal (this instance remembers version 2); rb-cold is not (the audit tells).
      expect((await call('rb-seen', 'rb-0')).body.decision).toBe('pending');
      await h.database.db.execute(sql`DELETE FROM tools WHERE tenant_id = ${h.tenantIds.a} AND name IN ('rb-seen', 'rb-cold') AND version = 2`);
      for (const name of ['rb-seen', 'rb-cold']) {
        const r = await call(name, `${name}-1`);
        expect([r.status, r.body.error?.code]).toEqual([503, 'unavailable']);
        expect(r.body.error.message).toMatch(/stored at version 1, but version 2 was registered/);
      }
      expect((await h.call('PUT', '/v1/tools/rb-cold', { ...SHELL, side_effect: 'irreversible' })).status).toBe(201);
      expect((await call('rb-cold', 'rb-cold-2')).body.decision).toBe('pending');
    });

    test('an unknown tool is denied unknown_tool; op and tool together are a 400', async () => {
      const cap = await mint();
      const r = await byTool(cap.token, 'rm', { path: '/workspace/x' });
      expect([r.body.decision, r.body.reason.code]).toEqual(['deny', 'unknown_tool']);
      const both = await h.call('POST', '/v1/approve', { token: cap.token, tool: 'view', op: 'read', args: { path: '/workspace/a' }, cost: 0 }, as(driver));
      expect([both.status, both.body.error.fields[0].path]).toEqual([400, 'op']);
      const nested = await h.call('POST', '/v1/approve', {
        token: cap.token,
        op: 'read',
        target: { kind: 'path', path: '/workspace/a' },
        args: { o: { a: 1 } },
        cost: 0,
      });
      expect([nested.status, nested.body.error.fields[0].path]).toEqual([400, 'args.o']);
    });

    // PostgreSQL's jsonb refuses \u0000 and unpaired surrogates, in keys as in strings: a nested key
    // reaching the audit row would fail the batch's one insert, and with it every decision batched beside it.
    test.each([
      ['NUL', '\u0000'],
      ['a lone high surrogate', '\ud800'],
      ['a lone low surrogate', '\udc00'],
    ])('a nested args key with %s is a 400 naming its parent; decisions beside it still commit', async (_, bad) => {
      const cap = await mint();
      const good = { path: '/workspace/ok.txt' };
      const [refused, unknownTool, granted] = await Promise.all([
        byTool(cap.token, 'view', { ...good, o: { [`k${bad}`]: 1 } }),
        byTool('not-a-token', 'nope', { o: { p: { [bad]: 'x' } } }),
        byTool(cap.token, 'view', good),
      ]);
      expect([refused.status, refused.body.error.code, refused.body.error.fields[0].path]).toEqual([400, 'invalid_request', 'args.o']);
      expect([unknownTool.status, unknownTool.body.error.fields[0].path]).toEqual([400, 'args.o.p']);
      expect([granted.status, granted.body.decision]).toEqual([200, 'grant']);
    });

    test('destructive and irreversible calls need a call_id', async () => {
      const cap = await mint();
      const edit = await byTool(cap.token, 'edit', { path: '/workspace/a.ts', old_str: 'x', new_str: 'y' });
      expect([edit.body.decision, edit.body.reason.code]).toEqual(['deny', 'call_id_required']);
      const shell = await byTool(cap.token, 'shell', { command: 'ls', cwd: '/workspace', timeout_ms: 5000 });
      expect(shell.body.reason.code).toBe('call_id_required');
      const ok = await byTool(cap.token, 'edit', { path: '/workspace/a.ts', old_str: 'x', new_str: 'y' }, { call_id: 'e-1' });
      expect(ok.body.decision).toBe('grant');
      const again = await byTool(cap.token, 'edit', { path: '/workspace/a.ts', old_str: 'x', new_str: 'y' }, { call_id: 'e-1' });
      expect([again.body.decision, again.body.replayed]).toEqual(['grant', true]);
      expect((await h.call('GET', `/v1/capabilities/${cap.capability_id}`)).body.calls).toBe(1);
      const view = await byTool(cap.token, 'view', { path: '/workspace/a.ts' });
      expect(view.body.decision).toBe('grant');
    });

    test("a capability's tool allow-list covers only its tools, and no call by op", async () => {
      const cap = await mint({ tools: ['view', 'search'] });
      expect((await byTool(cap.token, 'view', { path: '/workspace/a' })).body.decision).toBe('grant');
      const other = await byTool(cap.token, 'edit', { path: '/workspace/a', old_str: 'a', new_str: 'b' }, { call_id: 'x' });
      expect([other.body.decision, other.body.reason.code]).toEqual(['deny', 'tool_not_allowed']);
      const byOp = await h.call('POST', '/v1/approve', { token: cap.token, op: 'read', target: { kind: 'path', path: '/workspace/a' }, cost: 0 });
      expect(byOp.body.reason.code).toBe('tool_not_allowed');
    });

    test('a class the capability names waits for approval', async () => {
      const cap = await mint({ approval_required: ['destructive'] });
      const r = await byTool(cap.token, 'edit', { path: '/workspace/a', old_str: 'a', new_str: 'b' }, { call_id: 'p-1' });
      expect(r.body.decision).toBe('pending');
      expect(r.body.approval_id).toMatch(/^apv_/);
      expect((await byTool(cap.token, 'view', { path: '/workspace/a' })).body.decision).toBe('grant');
      // The same write by op would carry no class: it is refused, so the approval cannot be skipped.
      const byOp = await h.call(
        'POST',
        '/v1/approve',
        { token: cap.token, op: 'write', target: { kind: 'path', path: '/workspace/a' }, cost: 0.5 },
        as(driver),
      );
      expect([byOp.body.decision, byOp.body.reason.code]).toEqual(['deny', 'tool_not_allowed']);
      expect((await h.call('GET', `/v1/capabilities/${cap.capability_id}`)).body.calls).toBe(1);
    });

    // A read-only call the capability sends to a person: a retry without a call_id would ask again, and
    // each approval granted would charge and run the call once more.
    test('a call that waits for a person needs a call_id whatever its class; its dry run does not, and a dry-run denial asks nobody', async () => {
      const cap = await mint({ approval_required: ['read_only'] });
      const bare = await byTool(cap.token, 'view', { path: '/workspace/a' });
      expect([bare.body.decision, bare.body.reason.code]).toEqual(['deny', 'call_id_required']);
      const pending = async (): Promise<Body[]> =>
        (await h.call('GET', '/v1/approvals?state=pending&limit=500')).body.approvals.filter((a: Body) => a.capability_id === cap.capability_id);
      expect(await pending()).toEqual([]);
      const asked = await byTool(cap.token, 'view', { path: '/workspace/a' }, { call_id: 'ro-1' });
      expect(asked.body.decision).toBe('pending');
      expect((await pending()).map((a) => a.approval_id)).toEqual([asked.body.approval_id]);
      const again = await byTool(cap.token, 'view', { path: '/workspace/a' }, { call_id: 'ro-1' });
      expect([again.body.decision, again.body.approval_id, again.body.replayed]).toEqual(['pending', asked.body.approval_id, true]);
      const preview = await byTool(cap.token, 'view', { path: '/workspace/a' }, { dry_run: true });
      expect(preview.body).toMatchObject({ decision: 'grant', dry_run: true, approval_required: true });
      const outside = await byTool(cap.token, 'view', { path: '/etc/passwd' }, { dry_run: true });
      expect(outside.body).toMatchObject({ decision: 'deny', reason: { code: 'object_outside' }, dry_run: true });
      expect(outside.body).not.toHaveProperty('approval_required');
      // Without approval_required the same tool takes calls without one, as before.
      expect((await byTool((await mint()).token, 'view', { path: '/workspace/a' })).body.decision).toBe('grant');
    });
  });

  describe('attenuation of tool bounds', () => {
    const attenuate = (parent: string, predicate: Body): Promise<Called> =>
      h.call('POST', '/v1/attenuate', { parent_token: parent, rights: ['read', 'write'], objects: [{ kind: 'path', prefix: '/workspace' }], predicate });

    test('a child may narrow the tool list and add approval classes', async () => {
      const root = await mint({ tools: ['view', 'edit'], approval_required: ['destructive'] });
      const child = await attenuate(root.token, { tools: ['view'], approval_required: ['destructive', 'idempotent'] });
      expect(child.status).toBe(201);
      expect(child.body.predicate).toMatchObject({ tools: ['view'], approval_required: ['idempotent', 'destructive'] });
      // Omitted: inherited.
      const inherited = await attenuate(root.token, {});
      expect(inherited.body.predicate).toMatchObject({ tools: ['view', 'edit'], approval_required: ['destructive'] });
    });

    test('a child that drops an approval requirement or widens the tool list is refused, each with its field', async () => {
      const root = await mint({ tools: ['view'], approval_required: ['destructive'] });
      const r = await attenuate(root.token, { tools: ['view', 'shell'], approval_required: [] });
      expect([r.status, r.body.error.code]).toEqual([403, 'attenuation_refused']);
      expect((r.body.error.violations as Body[]).map((v) => [v.code, v.field])).toEqual([
        ['predicate_widened', 'predicate.tools'],
        ['predicate_widened', 'predicate.approval_required'],
      ]);
    });
  });
});
