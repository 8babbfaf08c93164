/**
 * The response side of GET /openapi.json (issue 16): the document is valid OpenAPI 3.1; every
 * operation has an operationId, a typed schema and an example for each answer; error codes are
 * enums per status; the types openapi-typescript generates from it catch a wrong field name at
 * compile time; and the app's real answers, success and error, conform to the documented schemas.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Validator } from '@seriousme/openapi-schema-validator';
import { sql } from 'drizzle-orm';
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import openapiTS, { astToString } from 'openapi-typescript';
import ts from 'typescript';
import { afterAll, beforeAll, beforeEach, describe, expect, test } from 'vitest';
import { BACKENDS } from '../support/db.js';
import { mintBody, startHarness, type Called, type Harness } from '../support/app.js';
import { SHELL, VIEW } from '../support/tools.js';

type Json = Record<string, unknown>;
const isJson = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
const METHODS = ['get', 'put', 'post', 'delete', 'patch'] as const;

/** The team's contract: the deny codes of approve and the violation codes of attenuate (as a set; the core lists them in precedence order). */
const API_DENY_CODES = [
  'bad_token',
  'unknown_key',
  'tenant_mismatch',
  'expired',
  'not_yet_valid',
  'revoked',
  'right_missing',
  'object_outside',
  'cost_exceeds_max',
  'budget_exhausted',
  'calls_exhausted',
  'arg_violates_bound',
  // issue 17: approve by tool
  'unknown_tool',
  'args_invalid',
  'call_id_required',
  'tool_not_allowed',
  'approval_rejected',
  'approval_expired',
];
const API_VIOLATION_CODES = [
  'right_widened',
  'object_widened',
  'predicate_widened',
  'depth_exhausted',
  'expiry_extended',
  'parent_invalid',
  'parent_expired',
  'parent_revoked',
  'trajectory_unrelated',
];
/** The contract's "Errors" (and issue 14's `forbidden`, the receipt's `not_yet_covered`): the codes each status may carry. */
const CODES_BY_STATUS: Record<string, string[]> = {
  400: ['invalid_request'],
  401: ['unauthorized'],
  403: ['forbidden', 'attenuation_refused', 'self_approval'],
  404: ['not_found'],
  409: ['idempotency_conflict', 'in_flight', 'not_yet_covered', 'approval_resolved'],
  413: ['payload_too_large'],
  415: ['unsupported_media_type'],
  422: ['tool_schema_refused'],
  503: ['unavailable'],
};

interface Operation {
  readonly method: string;
  readonly path: string;
  readonly op: Json;
}

function operations(doc: Json): Operation[] {
  return Object.entries(doc.paths as Record<string, Json>).flatMap(([path, item]) =>
    METHODS.flatMap((method) => (isJson(item[method]) ? [{ method, path, op: item[method] }] : [])),
  );
}

function resolve(doc: Json, value: unknown): Json | null {
  if (!isJson(value)) return null;
  if (typeof value.$ref !== 'string') return value;
  let target: unknown = doc;
  for (const part of value.$ref.slice(2).split('/')) target = isJson(target) ? target[part.replace(/~1/g, '/').replace(/~0/g, '~')] : undefined;
  return resolve(doc, target);
}

/** Whether a schema says something: a type with properties or items, a const or enum, or alternatives that all do. */
function isTyped(doc: Json, schema: unknown): boolean {
  const s = resolve(doc, schema);
  if (s === null) return false;
  const union = s.oneOf ?? s.anyOf;
  if (Array.isArray(union)) return union.length > 0 && union.every((a) => isTyped(doc, a));
  if ('const' in s || Array.isArray(s.enum)) return true;
  const types = Array.isArray(s.type) ? s.type : [s.type];
  if (types.includes('object')) return isJson(s.properties) && Object.keys(s.properties).length > 0;
  if (types.includes('array')) return isTyped(doc, s.items);
  return types.some((t) => typeof t === 'string');
}

/** The `error.code` values an error response's schema allows, or null when it does not pin them to an enum. */
function errorCodes(doc: Json, schema: unknown): string[] | null {
  const s = resolve(doc, schema);
  const error = s === null || !isJson(s.properties) ? null : resolve(doc, s.properties.error);
  if (error === null) return null;
  const alts = (error.oneOf ?? error.anyOf ?? [error]) as unknown[];
  const codes: string[] = [];
  for (const alt of alts) {
    const a = resolve(doc, alt);
    const code = a === null || !isJson(a.properties) ? null : resolve(doc, a.properties.code);
    if (code === null || !Array.isArray(code.enum) || !(a?.required as string[] | undefined)?.includes('code')) return null;
    codes.push(...(code.enum as string[]));
  }
  return codes;
}

/** Everything the document leaves untyped or unnamed, one line each: empty when every answer is typed. */
function untypedAnswers(doc: Json): string[] {
  const problems: string[] = [];
  const ids = new Set<string>();
  for (const { method, path, op } of operations(doc)) {
    const at = `${method.toUpperCase()} ${path}`;
    if (typeof op.operationId !== 'string' || op.operationId === '') problems.push(`${at}: no operationId`);
    else if (ids.has(op.operationId)) problems.push(`${at}: operationId ${op.operationId} repeated`);
    else ids.add(op.operationId);
    const responses = isJson(op.responses) ? op.responses : {};
    if (Object.keys(responses).length === 0) problems.push(`${at}: no responses`);
    for (const [status, raw] of Object.entries(responses)) {
      const media = (resolve(doc, raw)?.content as Record<string, Json> | undefined)?.['application/json'];
      if (media === undefined) problems.push(`${at} ${status}: no JSON body`);
      else if (!isTyped(doc, media.schema)) problems.push(`${at} ${status}: untyped schema`);
      else if (media.example === undefined && media.examples === undefined) problems.push(`${at} ${status}: no example`);
      if (media !== undefined && Number(status) >= 400) {
        const codes = errorCodes(doc, media.schema);
        if (codes === null) problems.push(`${at} ${status}: error.code is not an enum`);
        else if (codes.some((c) => !(CODES_BY_STATUS[status] ?? []).includes(c))) problems.push(`${at} ${status}: codes ${codes.join(',')} not of this status`);
      }
    }
    const body = resolve(doc, op.requestBody);
    const reqMedia = (body?.content as Record<string, Json> | undefined)?.['application/json'];
    if (body !== null && reqMedia?.example === undefined) problems.push(`${at} request: no example`);
  }
  return problems;
}

/**
 * A copy of the document whose objects admit only their documented fields (the document itself
 * leaves responses open, so clients tolerate fields added later), with its `$ref`s made absolute so a
 * schema taken out of it compiles on its own.
 */
function closedCopy(doc: Json): Json {
  const walk = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(walk);
    if (!isJson(v)) return v;
    const out: Json = {};
    for (const [k, x] of Object.entries(v)) out[k] = k === '$ref' && typeof x === 'string' && x.startsWith('#') ? `openapi.json${x}` : walk(x);
    if ('allOf' in out) throw new Error('allOf cannot be closed part by part');
    const types = Array.isArray(out.type) ? out.type : [out.type];
    if (types.includes('object') && isJson(out.properties) && out.additionalProperties === undefined) out.additionalProperties = false;
    return out;
  };
  return { ...(walk(doc) as Json), $id: 'openapi.json' };
}

/** Validates JSON bodies against the document's schemas, closed (see closedCopy). */
class Conformance {
  private readonly ajv = new Ajv2020({ strict: false, allErrors: true });
  private readonly compiled = new Map<string, ValidateFunction>();
  private readonly closed: Json;

  constructor(doc: Json) {
    addFormats(this.ajv);
    this.closed = closedCopy(doc);
    this.ajv.addSchema(this.closed);
  }

  private validator(key: string, schema: unknown): ValidateFunction {
    let v = this.compiled.get(key);
    if (v === undefined) {
      v = this.ajv.compile(schema as Json);
      this.compiled.set(key, v);
    }
    return v;
  }

  /** What is wrong with `value` under `schema` (a schema taken from the closed copy), or []. */
  errorsOf(key: string, schema: unknown, value: unknown): string[] {
    const v = this.validator(key, schema);
    return v(value) ? [] : (v.errors ?? []).map((e) => `${e.instancePath || '/'} ${e.message ?? ''} ${JSON.stringify(e.params)}`);
  }

  /** The closed copy's operation for a documented method and path. */
  operation(method: string, path: string): Json | null {
    const item = (this.closed.paths as Record<string, Json>)[path];
    return item !== undefined && isJson(item[method]) ? item[method] : null;
  }

  /** Everything in a real answer that its operation's document does not allow. */
  check(method: string, path: string, r: Called): string[] {
    const at = `${method.toUpperCase()} ${path} ${r.status}`;
    const response = this.operation(method, path)?.responses;
    const documented = isJson(response) ? resolve(this.closed, response[String(r.status)]) : null;
    if (documented === null) return [`${at}: status not documented`];
    const problems: string[] = [];
    if (!/^application\/json/.test(r.headers.get('content-type') ?? '')) problems.push(`${at}: not JSON`);
    for (const [name, h] of Object.entries((documented.headers as Record<string, Json> | undefined) ?? {}))
      if (h.required === true && !r.headers.has(name)) problems.push(`${at}: header ${name} missing`);
    const media = (documented.content as Record<string, Json>)['application/json'];
    problems.push(...this.errorsOf(at, media?.schema, r.body).map((e) => `${at}: ${e}`));
    return problems;
  }
}

// ---- the checks on hand-made documents ---------------------------------------------------------

describe('the response checks', () => {
  const typedOp = (responses: Json): Json => ({
    openapi: '3.1.0',
    info: { title: 't', version: '1' },
    paths: { '/x': { get: { operationId: 'getX', responses } } },
  });
  const okBody = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] };
  const good = {
    200: { description: 'ok', content: { 'application/json': { schema: okBody, example: { ok: true } } } },
    404: {
      description: 'nf',
      content: {
        'application/json': {
          schema: {
            type: 'object',
            properties: { error: { type: 'object', properties: { code: { type: 'string', enum: ['not_found'] } }, required: ['code'] } },
            required: ['error'],
          },
          example: { error: { code: 'not_found' } },
        },
      },
    },
  };

  test('a typed document passes', () => {
    expect(untypedAnswers(typedOp(good))).toEqual([]);
  });

  test.each([
    ['an Any body', { 200: { description: 'x', content: { 'application/json': { schema: { type: 'object', additionalProperties: {} }, example: {} } } } }],
    ['an empty schema', { 200: { description: 'x', content: { 'application/json': { schema: {}, example: 1 } } } }],
    ['no example', { 200: { description: 'x', content: { 'application/json': { schema: okBody } } } }],
    ['no JSON body', { 200: { description: 'x' } }],
    [
      'an error code that is any string',
      { 404: { description: 'x', content: { 'application/json': { schema: { type: 'object', properties: { error: okBody } }, example: {} } } } },
    ],
    [
      'a code of another status',
      {
        ...good,
        404: {
          description: 'nf',
          content: {
            'application/json': {
              schema: {
                type: 'object',
                properties: { error: { type: 'object', properties: { code: { type: 'string', enum: ['unauthorized'] } }, required: ['code'] } },
              },
              example: {},
            },
          },
        },
      },
    ],
  ])('finds %s', (_name, responses) => {
    expect(untypedAnswers(typedOp(responses))).toHaveLength(1);
  });

  test('finds an operation without an operationId', () => {
    const doc = typedOp(good);
    delete ((doc.paths as Json)['/x'] as Record<string, Json>).get?.operationId;
    expect(untypedAnswers(doc)).toEqual(['GET /x: no operationId']);
  });

  test('conformance refuses a wrong type, an undocumented field and an undocumented status', () => {
    const c = new Conformance(typedOp(good));
    const answer = (status: number, body: unknown): Called => ({ status, body, headers: new Headers({ 'content-type': 'application/json' }) });
    expect(c.check('get', '/x', answer(200, { ok: true }))).toEqual([]);
    expect(c.check('get', '/x', answer(200, { ok: 'yes' }))).toHaveLength(1);
    expect(c.check('get', '/x', answer(200, { ok: true, extra: 1 }))).toHaveLength(1);
    expect(c.check('get', '/x', answer(500, { ok: true }))).toEqual(['GET /x 500: status not documented']);
  });
});

// ---- the document the app serves ---------------------------------------------------------------

describe('GET /openapi.json, response side', () => {
  let h: Harness;
  let doc: Json;
  let conformance: Conformance;
  beforeAll(async () => {
    h = await startHarness(BACKENDS[0] ?? 'pglite');
    const r = await h.call('GET', '/openapi.json', undefined, { as: 'none' });
    expect(r.status).toBe(200);
    doc = r.body as Json;
    conformance = new Conformance(doc);
  });
  afterAll(async () => h.close());

  test('is a valid OpenAPI 3.1 document, and the validator does refuse a broken one', async () => {
    const result = await new Validator().validate(structuredClone(doc));
    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);
    const broken = structuredClone(doc) as { paths: Record<string, Record<string, { responses: Record<string, Json> }>> };
    delete broken.paths['/v1/approve']?.post?.responses['200']?.description; // a response's description is required
    expect((await new Validator().validate(broken)).valid).toBe(false);
  });

  test('every operation has an operationId and a typed schema with an example for each answer; error codes are enums of their status', () => {
    expect(untypedAnswers(doc)).toEqual([]);
    expect(operations(doc).length).toBeGreaterThanOrEqual(16);
  });

  test('deny and violation codes are the enums the contract lists', () => {
    const schemas = (doc.components as Json).schemas as Record<string, Json>;
    expect([...(schemas.DenyCode?.enum as string[])].sort()).toEqual([...API_DENY_CODES].sort());
    expect([...(schemas.ViolationCode?.enum as string[])].sort()).toEqual([...API_VIOLATION_CODES].sort());
    const deny = resolve(doc, schemas.Deny);
    expect(resolve(doc, (resolve(doc, (deny?.properties as Json).reason)?.properties as Json).code)).toEqual(schemas.DenyCode);
  });

  test('each example matches its schema', () => {
    const problems: string[] = [];
    for (const { method, path } of operations(doc)) {
      const op = conformance.operation(method, path) as Json;
      const request = (resolve(doc, op.requestBody)?.content as Record<string, Json> | undefined)?.['application/json'];
      if (request !== undefined) problems.push(...conformance.errorsOf(`${method} ${path} request`, request.schema, request.example));
      for (const [status, response] of Object.entries(op.responses as Json)) {
        const media = ((response as Json).content as Record<string, Json>)['application/json'];
        problems.push(...conformance.errorsOf(`${method} ${path} ${status}`, media?.schema, media?.example).map((e) => `${method} ${path} ${status}: ${e}`));
      }
    }
    expect(problems).toEqual([]);
  });

  describe('real answers conform to the document', () => {
    const seen: string[] = [];
    const problems: string[] = [];
    /** Calls the app and checks the answer against `template`'s documentation. */
    const call = async (template: string, method: string, path: string, body?: unknown, options?: Parameters<Harness['call']>[3]): Promise<Called> => {
      const r = await h.call(method, path, body, options);
      seen.push(`${method} ${template} ${r.status}`);
      problems.push(...conformance.check(method.toLowerCase(), template, r));
      return r;
    };
    beforeEach(() => {
      problems.length = 0;
    });
    const approveBody = (token: string, over: Json = {}): Json => ({
      token,
      op: 'read',
      target: { kind: 'path', path: '/workspace/t-1/a' },
      cost: 0.1,
      ...over,
    });

    test('mint, attenuate, approve, revoke and the capability read', async () => {
      const root = await call('/v1/capabilities', 'POST', '/v1/capabilities', mintBody(), { headers: { 'idempotency-key': 'k-1' } });
      expect(root.status).toBe(201);
      expect((await call('/v1/capabilities', 'POST', '/v1/capabilities', mintBody(), { headers: { 'idempotency-key': 'k-1' } })).status).toBe(201);
      expect((await call('/v1/capabilities', 'POST', '/v1/capabilities', mintBody({ ttl_s: 60 }), { headers: { 'idempotency-key': 'k-1' } })).status).toBe(409);
      expect((await call('/v1/capabilities', 'POST', '/v1/capabilities', mintBody({ ttl_s: 0 }))).status).toBe(400);
      expect((await call('/v1/capabilities', 'POST', '/v1/capabilities', mintBody(), { as: 'none' })).status).toBe(401);
      expect((await call('/v1/capabilities', 'POST', '/v1/capabilities', undefined, { raw: 'x', headers: { 'content-type': 'text/plain' } })).status).toBe(415);
      expect((await call('/v1/capabilities', 'POST', '/v1/capabilities', undefined, { raw: `"${'x'.repeat(70_000)}"` })).status).toBe(413);

      const token = root.body.token as string;
      const child = await call('/v1/attenuate', 'POST', '/v1/attenuate', {
        parent_token: token,
        trajectory_id: 't-1.sub',
        rights: ['read'],
        objects: [{ kind: 'path', prefix: '/workspace/t-1' }],
        predicate: { budget: 5, max_calls: 50, max_depth: 2 },
      });
      expect(child.status, JSON.stringify(child.body)).toBe(201);
      const refused = await call('/v1/attenuate', 'POST', '/v1/attenuate', {
        parent_token: child.body.token,
        rights: ['read', 'write'],
        objects: [{ kind: 'path', prefix: '/workspace' }],
        ttl_s: 999_999,
      });
      expect(refused.status).toBe(403);
      expect(refused.body.error.violations.length).toBeGreaterThan(1);
      expect(
        (await call('/v1/attenuate', 'POST', '/v1/attenuate', { parent_token: 'x.y.z', rights: ['read'], objects: [{ kind: 'path', prefix: '/w' }] })).status,
      ).toBe(403);

      const grant = await call('/v1/approve', 'POST', '/v1/approve', approveBody(child.body.token, { call_id: 'c-1' }));
      expect(grant.body.decision).toBe('grant');
      const replay = await call('/v1/approve', 'POST', '/v1/approve', approveBody(child.body.token, { call_id: 'c-1' }));
      expect(replay.body.replayed).toBe(true);
      expect((await call('/v1/approve', 'POST', '/v1/approve', approveBody(child.body.token, { call_id: 'c-1', cost: 0.2 }))).status).toBe(409);
      const outside = await call('/v1/approve', 'POST', '/v1/approve', approveBody(child.body.token, { target: { kind: 'path', path: '/etc/passwd' } }));
      expect(outside.body.reason.code).toBe('object_outside');
      expect((await call('/v1/approve', 'POST', '/v1/approve', approveBody('not-a-token'))).body.reason.code).toBe('bad_token');
      expect((await call('/v1/approve', 'POST', '/v1/approve', approveBody(token, { target: { kind: 'nope' } }))).status).toBe(400);

      expect((await call('/v1/capabilities/{id}', 'GET', `/v1/capabilities/${root.body.capability_id}`)).status).toBe(200);
      expect((await call('/v1/capabilities/{id}', 'GET', '/v1/capabilities/cap_unknown')).status).toBe(404);
      expect((await call('/v1/capabilities/{id}', 'GET', '/v1/capabilities/not%20an%20id')).status).toBe(400);
      expect((await call('/v1/revoke', 'POST', '/v1/revoke', { capability_id: root.body.capability_id, reason: 'done' })).status).toBe(200);
      expect((await call('/v1/revoke', 'POST', '/v1/revoke', { capability_id: 'cap_unknown' })).status).toBe(404);
      expect((await call('/v1/approve', 'POST', '/v1/approve', approveBody(child.body.token))).body.reason.code).toBe('revoked');
      const revokedView = await call('/v1/capabilities/{id}', 'GET', `/v1/capabilities/${child.body.capability_id}`);
      expect(revokedView.body.status).toBe('revoked');
      expect(problems).toEqual([]);
    });

    test('API keys, and a call outside a key’s roles', async () => {
      const created = await call('/v1/api-keys', 'POST', '/v1/api-keys', { name: 'auditor-1', roles: ['auditor'], ttl_s: 3600 });
      expect(created.status).toBe(201);
      const asAuditor = { headers: { authorization: `Bearer ${created.body.api_key}` } };
      const forbidden = await call('/v1/capabilities', 'POST', '/v1/capabilities', mintBody(), asAuditor);
      expect(forbidden.status).toBe(403);
      expect(forbidden.body.error.code).toBe('forbidden');
      expect((await call('/v1/api-keys', 'GET', '/v1/api-keys')).status).toBe(200);
      expect((await call('/v1/api-keys', 'POST', '/v1/api-keys', { name: 'x', roles: ['root'] })).status).toBe(400);
      expect((await call('/v1/api-keys/{id}', 'DELETE', `/v1/api-keys/${created.body.key_id}`)).status).toBe(200);
      expect((await call('/v1/api-keys/{id}', 'DELETE', '/v1/api-keys/AAAAAAAAAAAA')).status).toBe(404);
      expect((await call('/v1/api-keys/{id}', 'DELETE', '/v1/api-keys/short')).status).toBe(400);
      expect(problems).toEqual([]);
    });

    test('the audit: listing, verify and receipts', async () => {
      const all = await call('/v1/audit', 'GET', '/v1/audit');
      expect(all.status).toBe(200);
      // Rows of every event, refusals, a forbidden call and the keys made and revoked above among them, were held to the schema.
      expect(new Set(all.body.entries.map((e: Json) => e.event))).toEqual(new Set(['mint', 'attenuate', 'approve', 'revoke', 'access']));
      expect(all.body.entries.some((e: Json) => e.reason_code === 'forbidden')).toBe(true);
      expect((await call('/v1/audit', 'GET', '/v1/audit?limit=2')).body.next).not.toBeNull();
      expect((await call('/v1/audit', 'GET', '/v1/audit?limit=0')).status).toBe(400);
      const trees = await call('/v1/audit/trajectories', 'GET', '/v1/audit/trajectories');
      expect(trees.body.trajectories.length).toBeGreaterThan(0);
      expect((await call('/v1/audit/trajectories', 'GET', '/v1/audit/trajectories?limit=0')).status).toBe(400);
      expect((await call('/v1/audit/verify', 'GET', '/v1/audit/verify')).body.ok).toBe(true);
      const id = all.body.entries[0].id as string;
      const early = await call('/v1/audit/{id}/receipt', 'GET', `/v1/audit/${id}/receipt`);
      expect(early.status).toBe(409);
      await h.checkpoint();
      expect((await call('/v1/audit/{id}/receipt', 'GET', `/v1/audit/${id}/receipt`)).status).toBe(200);
      const approveRow = all.body.entries.find((e: Json) => e.event === 'approve' && e.cost !== null).id as string;
      expect((await call('/v1/audit/{id}/receipt', 'GET', `/v1/audit/${approveRow}/receipt`)).status).toBe(200);
      expect((await call('/v1/audit/{id}/receipt', 'GET', '/v1/audit/aud_unknown/receipt')).status).toBe(404);
      expect((await call('/v1/audit/verify', 'GET', '/v1/audit/verify')).body.checkpoint).not.toBeNull();
      // An edited row: the report of a failed check is documented too.
      await h.database.db.execute(sql`UPDATE audit SET detail = '{}'::jsonb WHERE id = ${approveRow}`);
      const failed = await call('/v1/audit/verify', 'GET', '/v1/audit/verify');
      expect(failed.body.ok).toBe(false);
      expect(problems).toEqual([]);
    });

    test('tools and approvals (issue 17)', async () => {
      expect((await call('/v1/tools/{name}', 'PUT', '/v1/tools/shell', SHELL)).status).toBe(201);
      expect((await call('/v1/tools/{name}', 'PUT', '/v1/tools/shell', SHELL)).status).toBe(200);
      expect((await call('/v1/tools/{name}', 'PUT', '/v1/tools/view', VIEW)).status).toBe(201);
      const refused = await call('/v1/tools/{name}', 'PUT', '/v1/tools/bad', {
        ...VIEW,
        input_schema: { type: 'object', properties: { p: { type: 'string' } } },
      });
      expect([refused.status, refused.body.error.violations.length]).toEqual([422, 3]);
      expect((await call('/v1/tools/{name}', 'PUT', '/v1/tools/bad', { ...VIEW, side_effect: 'maybe' })).status).toBe(400);
      expect((await call('/v1/tools', 'GET', '/v1/tools')).body.tools.length).toBe(2);
      expect((await call('/v1/tools/{name}', 'GET', '/v1/tools/shell?version=1')).status).toBe(200);
      expect((await call('/v1/tools/{name}', 'GET', '/v1/tools/none')).status).toBe(404);
      const root = await call(
        '/v1/capabilities',
        'POST',
        '/v1/capabilities',
        mintBody({ trajectory_id: 't-tools', rights: ['read', 'execute'], objects: [{ kind: 'path', prefix: '/workspace' }] }),
      );
      const token = root.body.token as string;
      const view = await call('/v1/approve', 'POST', '/v1/approve', { token, tool: 'view', args: { path: '/workspace/a' }, cost: 0 });
      expect(view.body.decision).toBe('grant');
      const invalid = await call('/v1/approve', 'POST', '/v1/approve', { token, tool: 'view', args: { path: 1 }, cost: 0 });
      expect(invalid.body.reason.fields[0].path).toBe('args.path');
      const shell = { token, tool: 'shell', args: { command: 'make', cwd: '/workspace', timeout_ms: 60000 }, cost: 0.1, call_id: 'sh-1' };
      const pending = await call('/v1/approve', 'POST', '/v1/approve', shell);
      expect(pending.body.decision).toBe('pending');
      const id = pending.body.approval_id as string;
      expect((await call('/v1/approve', 'POST', '/v1/approve', shell)).body.replayed).toBe(true);
      expect((await call('/v1/approvals', 'GET', '/v1/approvals?state=pending')).body.approvals.length).toBe(1);
      expect((await call('/v1/approvals', 'GET', '/v1/approvals?state=maybe')).status).toBe(400);
      expect((await call('/v1/approvals/{id}', 'GET', `/v1/approvals/${id}?wait_s=0`)).body.state).toBe('pending');
      expect((await call('/v1/approvals/{id}', 'GET', '/v1/approvals/apv_none')).status).toBe(404);
      // The admin key asked for the call, so it may not approve it; another approver's key may.
      expect((await call('/v1/approvals/{id}', 'POST', `/v1/approvals/${id}`, { decision: 'approve' })).body.error.code).toBe('self_approval');
      const approver = await call('/v1/api-keys', 'POST', '/v1/api-keys', { name: 'approver-1', roles: ['approver'] });
      const asApprover = { headers: { authorization: `Bearer ${approver.body.api_key}` } };
      const approved = await call('/v1/approvals/{id}', 'POST', `/v1/approvals/${id}`, { decision: 'approve', note: 'ok' }, asApprover);
      expect(approved.body.outcome.decision).toBe('grant');
      expect((await call('/v1/approvals/{id}', 'POST', `/v1/approvals/${id}`, { decision: 'reject' }, asApprover)).status).toBe(409);
      expect((await call('/v1/approvals/{id}', 'POST', `/v1/approvals/${id}`, { decision: 'maybe' }, asApprover)).status).toBe(400);
      expect((await call('/v1/approvals/{id}', 'POST', '/v1/approvals/apv_none', { decision: 'approve' }, asApprover)).status).toBe(404);
      expect((await call('/v1/approve', 'POST', '/v1/approve', shell)).body).toMatchObject({ decision: 'grant', replayed: true });
      const rows = await call('/v1/audit', 'GET', '/v1/audit?trajectory_id=t-tools');
      expect(rows.body.entries.map((e: Json) => e.decision)).toContain('pending');
      expect(problems).toEqual([]);
    });

    test('the keyless routes', async () => {
      for (const path of ['/.well-known/jwks.json', '/.well-known/warrant-audit-keys.json', '/healthz', '/readyz', '/openapi.json'])
        expect((await call(path, 'GET', path, undefined, { as: 'none' })).status).toBe(200);
      expect(problems).toEqual([]);
    });

    test('503 when the database is gone', async () => {
      const gone = await startHarness(BACKENDS[0] ?? 'pglite');
      await gone.database.close();
      for (const [template, path] of [
        ['/readyz', '/readyz'],
        ['/v1/capabilities/{id}', '/v1/capabilities/cap_x'],
      ] as const) {
        const r = await gone.call('GET', path, undefined, { as: template === '/readyz' ? 'none' : 'a' });
        expect(r.status).toBe(503);
        seen.push(`GET ${template} 503`);
        problems.push(...conformance.check('get', template, r));
      }
      expect(problems).toEqual([]);
    });

    test('every operation was exercised, with each error status of the main routes', () => {
      const ops = new Set(seen.map((s) => s.split(' ').slice(0, 2).join(' ')));
      for (const { method, path } of operations(doc)) expect(ops).toContain(`${method.toUpperCase()} ${path}`);
      for (const status of [400, 401, 403, 409, 413, 415]) expect(seen).toContain(`POST /v1/capabilities ${status}`);
      expect(seen).toEqual(expect.arrayContaining(['POST /v1/attenuate 403', 'POST /v1/approve 409', 'GET /v1/audit/{id}/receipt 409', 'GET /readyz 503']));
    });
  });

  describe('types generated by openapi-typescript', () => {
    let dir: string;
    beforeAll(async () => {
      dir = mkdtempSync(join(tmpdir(), 'warrant-openapi-'));
      writeFileSync(join(dir, 'warrant.ts'), astToString(await openapiTS(structuredClone(doc) as never)));
    });
    afterAll(() => rmSync(dir, { recursive: true, force: true }));

    const HEADER = `import type { components, paths } from './warrant';
type Approve = paths['/v1/approve']['post'];
type ApproveRequest = Approve['requestBody']['content']['application/json'];
type ApproveAnswer = Approve['responses'][200]['content']['application/json'];
type ApproveConflict = Approve['responses'][409]['content']['application/json'];
type DenyCode = components['schemas']['DenyCode'];
`;
    /** Type-checks each snippet (after HEADER) beside the generated types; the diagnostics of each, by name. */
    const compile = (snippets: Record<string, string>): Record<string, { line: number; text: string }[]> => {
      const files = Object.entries(snippets).map(([name, body]) => {
        const file = join(dir, `${name}.ts`);
        writeFileSync(file, HEADER + body);
        return file;
      });
      const program = ts.createProgram(files, {
        strict: true,
        noEmit: true,
        target: ts.ScriptTarget.ES2022,
        module: ts.ModuleKind.ESNext,
        moduleResolution: ts.ModuleResolutionKind.Bundler,
        lib: ['lib.es2022.d.ts'],
        types: [],
        skipLibCheck: true,
      });
      const out: Record<string, { line: number; text: string }[]> = Object.fromEntries(Object.keys(snippets).map((n) => [n, []]));
      for (const d of ts.getPreEmitDiagnostics(program)) {
        const name = d.file === undefined ? 'global' : (d.file.fileName.split('/').pop() ?? '').replace(/\.ts$/, '');
        const line = d.file === undefined || d.start === undefined ? 0 : d.file.getLineAndCharacterOfPosition(d.start).line + 1 - HEADER.split('\n').length + 1;
        (out[name] ??= []).push({ line, text: ts.flattenDiagnosticMessageText(d.messageText, '\n') });
      }
      return out;
    };

    test('an approve request and answer and a deny code compile; a wrong field or code does not', () => {
      const denyCodes = API_DENY_CODES.map((c) => `'${c}'`).join(' | ');
      const diagnostics = compile({
        good: `const request: ApproveRequest = { token: 't', op: 'read', target: { kind: 'path', path: '/w/f' }, cost: 0.1, call_id: 'c-1', args: { n: 1 } };
export function reasonOf(a: ApproveAnswer): DenyCode | null {
  return a.decision === 'deny' ? a.reason.code : a.reason;
}
type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
export const exact: Equal<DenyCode, ${denyCodes}> = true;
export const conflict: ApproveConflict['error']['code'] = 'in_flight';
export { request };
`,
        wrongRequestField: `export const request: ApproveRequest = { tokn: 't', op: 'read', target: { kind: 'path', path: '/w/f' }, cost: 0.1 };\n`,
        wrongAnswerField: `export const id = (a: ApproveAnswer): string => a.audit_idd;\n`,
        wrongDenyCode: `export const code: DenyCode = 'object_outsid';\n`,
        reasonOfGrant: `export const code = (a: ApproveAnswer): DenyCode => a.reason.code;\n`,
        wrongConflictCode: `export const code: ApproveConflict['error']['code'] = 'not_found';\n`,
        wrongTargetKind: `export const request: ApproveRequest = { token: 't', op: 'read', target: { kind: 'file', path: '/w/f' }, cost: 0.1 };\n`,
      });
      expect(diagnostics.good).toEqual([]);
      expect(diagnostics.global ?? []).toEqual([]);
      for (const name of ['wrongRequestField', 'wrongAnswerField', 'wrongDenyCode', 'reasonOfGrant', 'wrongConflictCode', 'wrongTargetKind']) {
        expect(diagnostics[name]?.length, name).toBeGreaterThan(0);
        expect(
          diagnostics[name]?.every((d) => d.line === 1),
          name,
        ).toBe(true);
      }
    });
  });
});
