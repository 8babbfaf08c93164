/**
 * GET /openapi.json against API.md's five rules for request schemas: closed property sets, every
 * required field listed, every string, number and array bounded, every object union tagged by
 * `kind`. A walker visits every request body, query, path and header schema (following $ref) beside
 * the zod schema that validates it; a self-test first proves the walker finds each kind of fault.
 * Also: every API.md endpoint is documented with the right security, and the args bound the
 * document shows (at most 64) is the one validation enforces.
 */
import type { RouteConfig } from '@hono/zod-openapi';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { z } from 'zod';
import { BACKENDS } from '../support/db.js';
import { startHarness, type Harness } from '../support/app.js';

type Json = Record<string, unknown>;

type Rule =
  | 'open_object'
  | 'record_unbounded'
  | 'required_missing'
  | 'required_extra'
  | 'required_unknown'
  | 'string_unbounded'
  | 'number_unbounded'
  | 'array_unbounded'
  | 'untagged_union'
  | 'untyped'
  | 'unresolved_ref'
  | 'param_required'
  | 'body_required'
  | 'zod_mismatch';

interface Problem {
  readonly at: string;
  readonly rule: Rule;
}

// Formats whose values have a bounded length by definition.
const BOUNDED_FORMATS = new Set(['date-time', 'date', 'time', 'uuid', 'ipv4', 'ipv6']);
const SCALAR_TYPES = new Set(['string', 'number', 'integer', 'boolean']);

const isJson = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
const isNumber = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);

/** The parts of zod's `def` the walker follows (zod 4 exposes `schema.def`). */
interface ZodDef {
  readonly type: string;
  readonly innerType?: z.ZodType;
  readonly in?: z.ZodType;
  readonly shape?: Record<string, z.ZodType>;
  readonly element?: z.ZodType;
  readonly options?: readonly z.ZodType[];
  readonly valueType?: z.ZodType;
}
const defOf = (s: z.ZodType): ZodDef => (s as unknown as { def: ZodDef }).def;

/** The schema under optional/nullable/default/readonly wrappers and pipes (what the document describes). */
function unwrap(s: z.ZodType): z.ZodType {
  for (;;) {
    const d = defOf(s);
    if (d.innerType !== undefined) s = d.innerType;
    else if (d.type === 'pipe' && d.in !== undefined) s = d.in;
    else return s;
  }
}

/** A field is required when the validating schema refuses it absent: asked of zod, not of the document. */
const isRequiredByZod = (s: z.ZodType): boolean => !s.safeParse(undefined).success;

/**
 * Walks OpenAPI 3.1 schemas and collects every breach of the five rules. With the zod schema that
 * validates the same value, it also checks `required` and the property names against it.
 */
class Walker {
  readonly problems: Problem[] = [];
  readonly visited: string[] = [];

  constructor(private readonly doc: Json) {}

  private report(at: string, rule: Rule): void {
    this.problems.push({ at, rule });
  }

  /** Follows `#/components/...` references; null when one does not resolve. */
  resolve(value: unknown, seen: Set<string> = new Set()): Json | null {
    if (!isJson(value)) return null;
    const ref = value.$ref;
    if (typeof ref !== 'string') return value;
    if (!ref.startsWith('#/') || seen.has(ref)) return null;
    seen.add(ref);
    let target: unknown = this.doc;
    for (const part of ref.slice(2).split('/')) target = isJson(target) ? target[part.replace(/~1/g, '/').replace(/~0/g, '~')] : undefined;
    return this.resolve(target, seen);
  }

  walk(schema: unknown, at: string, zod?: z.ZodType): void {
    const s = this.resolve(schema);
    if (s === null) return this.report(at, 'unresolved_ref');
    this.visited.push(at);
    const zs = zod === undefined ? undefined : unwrap(zod);
    const union = s.oneOf ?? s.anyOf;
    if (Array.isArray(union)) return this.union(union, at, zs);
    if (Array.isArray(s.allOf)) {
      s.allOf.forEach((part, i) => this.walk(part, `${at}.allOf[${i}]`, zs));
      return;
    }
    if ('const' in s || Array.isArray(s.enum)) return; // a closed set of values is bounded
    const types = Array.isArray(s.type) ? (s.type as unknown[]) : [s.type];
    if (types.length === 0 || types.some((t) => typeof t !== 'string')) return this.report(at, 'untyped');
    for (const type of types as string[]) this.typed(s, type, at, zs);
  }

  private typed(s: Json, type: string, at: string, zod: z.ZodType | undefined): void {
    switch (type) {
      case 'object':
        return this.object(s, at, zod);
      case 'array':
        if (!isNumber(s.maxItems)) this.report(at, 'array_unbounded');
        if (zod !== undefined && defOf(zod).type !== 'array') this.report(at, 'zod_mismatch');
        if (s.items === undefined) return this.report(`${at}[]`, 'untyped');
        return this.walk(s.items, `${at}[]`, zod === undefined ? undefined : defOf(zod).element);
      case 'string':
        if (!isNumber(s.maxLength) && !(typeof s.format === 'string' && BOUNDED_FORMATS.has(s.format))) this.report(at, 'string_unbounded');
        return;
      case 'number':
      case 'integer': {
        const low = isNumber(s.minimum) || isNumber(s.exclusiveMinimum);
        const high = isNumber(s.maximum) || isNumber(s.exclusiveMaximum);
        if (!low || !high) this.report(at, 'number_unbounded');
        return;
      }
      case 'boolean':
      case 'null':
        return;
      default:
        return this.report(at, 'untyped');
    }
  }

  private object(s: Json, at: string, zod: z.ZodType | undefined): void {
    const props = isJson(s.properties) ? s.properties : {};
    const required = Array.isArray(s.required) ? (s.required as string[]) : [];
    const extra = s.additionalProperties;
    const zdef = zod === undefined ? undefined : defOf(zod);
    if (isJson(extra)) {
      // A record: its values are described by a schema, so its size and key names must be bounded.
      if (!isNumber(s.maxProperties) || s.propertyNames === undefined) this.report(at, 'record_unbounded');
      else this.walk(s.propertyNames, `${at}{name}`);
      if (zdef !== undefined && zdef.type !== 'record') this.report(at, 'zod_mismatch');
      // A JSON value checked by the tool-schema rules instead (issue 17: a tool's input_schema, and the
      // args of a call by tool, checked against that schema): bounded in size and names, its values are not typed here.
      if (!CHECKED_BY.has(String(s['x-checked-by']))) this.walk(extra, `${at}{}`, zdef?.valueType);
    } else if (extra !== false) this.report(at, 'open_object'); // its listed properties are still checked below
    for (const name of required) if (!(name in props)) this.report(`${at}.${name}`, 'required_unknown');
    const shape = zdef?.shape;
    if (zdef !== undefined && extra === false && shape === undefined) this.report(at, 'zod_mismatch');
    if (shape !== undefined) {
      const names = new Set([...Object.keys(shape), ...Object.keys(props)]);
      for (const name of names) {
        const field = shape[name];
        if (field === undefined || !(name in props)) this.report(`${at}.${name}`, 'zod_mismatch');
        else if (isRequiredByZod(field) && !required.includes(name)) this.report(`${at}.${name}`, 'required_missing');
        else if (!isRequiredByZod(field) && required.includes(name)) this.report(`${at}.${name}`, 'required_extra');
      }
    }
    for (const [name, prop] of Object.entries(props)) this.walk(prop, `${at}.${name}`, shape?.[name]);
  }

  private union(alternatives: unknown[], at: string, zod: z.ZodType | undefined): void {
    const alts = alternatives.map((a) => this.resolve(a));
    const zodOptions = zod === undefined ? undefined : defOf(zod).options;
    if (zodOptions !== undefined && zodOptions.length !== alts.length) this.report(at, 'zod_mismatch');
    // A union of scalars (string | number | boolean, as in `args` values) holds no objects, so there
    // is nothing for a `kind` tag to tell apart; each alternative is still checked for its bounds.
    const scalar = alts.every((a) => a !== null && typeof a.type === 'string' && SCALAR_TYPES.has(a.type));
    if (!scalar) {
      const tags = alts.map((a) => (a === null ? undefined : kindTag(a)));
      if (tags.some((t) => t === undefined) || new Set(tags).size !== tags.length) this.report(at, 'untagged_union');
    }
    alternatives.forEach((a, i) => this.walk(a, `${at}|${i}`, zodOptions?.[i]));
  }
}

/** The `kind` value an object alternative is tagged with: a required `kind` of one const or enum value. */
function kindTag(alt: Json): string | undefined {
  if (alt.type !== 'object' || !isJson(alt.properties) || !Array.isArray(alt.required) || !alt.required.includes('kind')) return undefined;
  const kind = alt.properties.kind;
  if (!isJson(kind)) return undefined;
  if (typeof kind.const === 'string') return kind.const;
  if (Array.isArray(kind.enum) && kind.enum.length === 1 && typeof kind.enum[0] === 'string') return kind.enum[0];
  return undefined;
}

const METHODS = ['get', 'put', 'post', 'delete', 'patch', 'head', 'options'] as const;
const LOCATIONS = { query: 'query', path: 'params', header: 'headers', cookie: 'cookies' } as const;

/** Walks every request schema of every operation, each beside the zod schema its route validates with. */
function walkRequests(doc: Json, routes: readonly RouteConfig[]): Walker {
  const w = new Walker(doc);
  for (const [path, item] of Object.entries(doc.paths as Record<string, Json>)) {
    for (const method of METHODS) {
      const op = item[method];
      if (!isJson(op)) continue;
      const at = `${method.toUpperCase()} ${path}`;
      const request = routes.find((r) => r.method === method && r.path === path)?.request;
      const params = [...((item.parameters as unknown[] | undefined) ?? []), ...((op.parameters as unknown[] | undefined) ?? [])];
      const documented = new Map<string, Set<string>>();
      for (const raw of params) {
        const p = w.resolve(raw);
        if (p === null) {
          w.problems.push({ at: `${at} parameter`, rule: 'unresolved_ref' });
          continue;
        }
        const where = p.in as keyof typeof LOCATIONS;
        const name = String(p.name);
        const pat = `${at} ${where}.${name}`;
        documented.set(where, (documented.get(where) ?? new Set()).add(name));
        if (where === 'path' && p.required !== true) w.problems.push({ at: pat, rule: 'param_required' });
        const zodParams = request?.[LOCATIONS[where]] as z.ZodType | undefined;
        const field = zodParams === undefined ? undefined : defOf(zodParams).shape?.[name];
        if (zodParams !== undefined && field === undefined) w.problems.push({ at: pat, rule: 'zod_mismatch' });
        if (field !== undefined && isRequiredByZod(field) !== (p.required === true))
          w.problems.push({ at: pat, rule: isRequiredByZod(field) ? 'required_missing' : 'required_extra' });
        w.walk(p.schema, pat, field);
      }
      for (const where of Object.keys(LOCATIONS) as (keyof typeof LOCATIONS)[]) {
        const zodParams = request?.[LOCATIONS[where]] as z.ZodType | undefined;
        for (const name of Object.keys((zodParams === undefined ? undefined : defOf(zodParams).shape) ?? {})) {
          if (!documented.get(where)?.has(name)) w.problems.push({ at: `${at} ${where}.${name}`, rule: 'zod_mismatch' });
        }
      }
      if (op.requestBody === undefined) continue;
      const body = w.resolve(op.requestBody);
      const content = body === null ? null : body.content;
      if (!isJson(content)) {
        w.problems.push({ at: `${at} body`, rule: 'unresolved_ref' });
        continue;
      }
      for (const [type, media] of Object.entries(content)) {
        const zodBody = (request?.body?.content as Record<string, { schema?: z.ZodType }> | undefined)?.[type]?.schema;
        if (zodBody !== undefined && isRequiredByZod(zodBody) && body?.required !== true) w.problems.push({ at: `${at} body`, rule: 'body_required' });
        w.walk(isJson(media) ? media.schema : undefined, `${at} body`, zodBody);
      }
    }
  }
  return w;
}

// ---- the walker on hand-written schemas -----------------------------------------------------

describe('the schema walker', () => {
  const closed = (properties: Json, required: string[] = Object.keys(properties)): Json => ({
    type: 'object',
    properties,
    required,
    additionalProperties: false,
  });
  const str = { type: 'string', maxLength: 8 };
  const tagged = (kind: string, extra: Json = {}): Json => closed({ kind: { type: 'string', enum: [kind] }, ...extra });

  const walkOne = (schema: Json, zod?: z.ZodType, components: Json = {}): Walker => {
    const w = new Walker({ components: { schemas: components } });
    w.walk(schema, 'body', zod);
    return w;
  };

  test('a schema that keeps every rule passes, $refs and scalar unions included', () => {
    const good = closed({
      name: str,
      n: { type: 'integer', minimum: 0, maximum: 9 },
      x: { type: 'number', exclusiveMinimum: 0, maximum: 1 },
      when: { type: 'string', format: 'date-time' },
      tags: { type: 'array', items: str, maxItems: 4 },
      mode: { type: 'string', enum: ['a', 'b'] },
      target: { oneOf: [tagged('a', { p: str }), { $ref: '#/components/schemas/B' }] },
      scalar: { anyOf: [str, { type: 'number', minimum: 0, maximum: 1 }, { type: 'boolean' }] },
      args: { type: 'object', additionalProperties: str, maxProperties: 3, propertyNames: str },
      json: { type: 'object', additionalProperties: {}, maxProperties: 3, propertyNames: str, 'x-checked-by': 'tool-schema' },
    });
    const w = walkOne(good, undefined, { B: tagged('b') });
    expect(w.problems).toEqual([]);
    expect(w.visited).toContain('body.target|1.kind'); // the $ref was followed, not skipped
  });

  // Each bad schema holds exactly one fault, so each rule is shown to be checked on its own.
  const BAD: [string, Json, Problem[]][] = [
    ['an open object', { type: 'object', properties: { a: str }, required: ['a'] }, [{ at: 'body', rule: 'open_object' }]],
    [
      'additionalProperties: true',
      { type: 'object', properties: { a: str }, required: ['a'], additionalProperties: true },
      [{ at: 'body', rule: 'open_object' }],
    ],
    ['an unbounded string', closed({ a: { type: 'string', minLength: 1 } }), [{ at: 'body.a', rule: 'string_unbounded' }]],
    ['a string with an unbounded format', closed({ a: { type: 'string', format: 'email' } }), [{ at: 'body.a', rule: 'string_unbounded' }]],
    ['a number without a maximum', closed({ a: { type: 'number', minimum: 0 } }), [{ at: 'body.a', rule: 'number_unbounded' }]],
    ['an integer without a minimum', closed({ a: { type: 'integer', maximum: 5 } }), [{ at: 'body.a', rule: 'number_unbounded' }]],
    ['an unbounded array', closed({ a: { type: 'array', items: str } }), [{ at: 'body.a', rule: 'array_unbounded' }]],
    ['an array of anything', closed({ a: { type: 'array', maxItems: 2 } }), [{ at: 'body.a[]', rule: 'untyped' }]],
    ['a schema without a type', closed({ a: {} }), [{ at: 'body.a', rule: 'untyped' }]],
    ['an untagged object union', closed({ a: { oneOf: [closed({ p: str }), closed({ q: str })] } }), [{ at: 'body.a', rule: 'untagged_union' }]],
    ['a union of an object and a scalar', closed({ a: { anyOf: [tagged('x'), str] } }), [{ at: 'body.a', rule: 'untagged_union' }]],
    [
      'a union whose tag is optional',
      closed({ a: { oneOf: [tagged('x'), closed({ kind: { type: 'string', enum: ['y'] } }, [])] } }),
      [{ at: 'body.a', rule: 'untagged_union' }],
    ],
    ['a union with a repeated tag', closed({ a: { oneOf: [tagged('x'), tagged('x', { p: str })] } }), [{ at: 'body.a', rule: 'untagged_union' }]],
    [
      'a record without maxProperties',
      closed({ a: { type: 'object', additionalProperties: str, propertyNames: str } }),
      [{ at: 'body.a', rule: 'record_unbounded' }],
    ],
    [
      'a record without propertyNames',
      closed({ a: { type: 'object', additionalProperties: str, maxProperties: 3 } }),
      [{ at: 'body.a', rule: 'record_unbounded' }],
    ],
    [
      'a record of JSON values not checked by the tool-schema rules',
      closed({ a: { type: 'object', additionalProperties: {}, maxProperties: 3, propertyNames: { type: 'string', maxLength: 9 } } }),
      [{ at: 'body.a{}', rule: 'untyped' }],
    ],
    [
      'a record with unbounded names',
      closed({ a: { type: 'object', additionalProperties: str, maxProperties: 3, propertyNames: { type: 'string' } } }),
      [{ at: 'body.a{name}', rule: 'string_unbounded' }],
    ],
    [
      'a record of anything',
      closed({ a: { type: 'object', additionalProperties: {}, maxProperties: 3, propertyNames: str } }),
      [{ at: 'body.a{}', rule: 'untyped' }],
    ],
    ['required names a missing property', closed({ a: str }, ['a', 'b']), [{ at: 'body.b', rule: 'required_unknown' }]],
    ['a dangling $ref', closed({ a: { $ref: '#/components/schemas/Missing' } }), [{ at: 'body.a', rule: 'unresolved_ref' }]],
    ['a fault behind a $ref', closed({ a: { $ref: '#/components/schemas/Open' } }), [{ at: 'body.a', rule: 'open_object' }]],
  ];
  test.each(BAD)('finds %s', (_name, schema, problems) => {
    expect(walkOne(schema, undefined, { Open: { type: 'object', properties: {} } }).problems).toEqual(problems);
  });

  test('finds a required field the document leaves optional, and the reverse, by asking zod', () => {
    const zod = z.strictObject({ name: z.string().max(8), note: z.string().max(8).optional() });
    expect(walkOne(closed({ name: str, note: str }, []), zod).problems).toEqual([{ at: 'body.name', rule: 'required_missing' }]);
    expect(walkOne(closed({ name: str, note: str }, ['name', 'note']), zod).problems).toEqual([{ at: 'body.note', rule: 'required_extra' }]);
    expect(walkOne(closed({ name: str }, ['name']), zod).problems).toEqual([{ at: 'body.note', rule: 'zod_mismatch' }]);
    expect(walkOne(closed({ name: str, note: str }, ['name']), zod).problems).toEqual([]);
  });

  test('all the faults of one bad schema together', () => {
    const bad = {
      type: 'object',
      properties: { name: { type: 'string' }, items: { type: 'array', items: str }, target: { oneOf: [closed({ p: str }), closed({ q: str })] } },
      required: ['items'],
    };
    const zod = z.strictObject({
      name: z.string(),
      items: z.array(z.string()),
      target: z.union([z.strictObject({ p: z.string() }), z.strictObject({ q: z.string() })]),
    });
    const rules = walkOne(bad, zod).problems.map((p) => `${p.at} ${p.rule}`);
    expect(rules.sort()).toEqual(
      [
        'body open_object',
        'body.name required_missing',
        'body.target required_missing',
        'body.name string_unbounded',
        'body.items array_unbounded',
        'body.target untagged_union',
      ].sort(),
    );
  });
});

// ---- the document the app serves --------------------------------------------------------------

/** API.md "Endpoints" and "Without a tenant key". */
const API_ENDPOINTS: [string, string, 'tenant' | 'none'][] = [
  ['post', '/v1/capabilities', 'tenant'],
  ['post', '/v1/attenuate', 'tenant'],
  ['post', '/v1/approve', 'tenant'],
  ['post', '/v1/revoke', 'tenant'],
  ['get', '/v1/capabilities/{id}', 'tenant'],
  ['get', '/v1/audit', 'tenant'],
  ['get', '/v1/audit/verify', 'tenant'],
  ['get', '/.well-known/jwks.json', 'none'],
  ['get', '/openapi.json', 'none'],
  ['get', '/healthz', 'none'],
  ['get', '/readyz', 'none'],
];

/** API.md: the fields each request body must carry. */
/** Where a record's values are checked by other rules than these, as its `x-checked-by` names them (src/core/tool-schema.ts). */
const CHECKED_BY = new Set(['tool-schema', 'tool-schema-rules']);

const REQUIRED_BODY_FIELDS: [string, string[]][] = [
  ['/v1/capabilities', ['trajectory_id', 'rights', 'objects', 'ttl_s']],
  ['/v1/attenuate', ['parent_token', 'rights', 'objects']],
  // issue 17: a call names op and target, or a tool (which decides them): neither is required by itself.
  ['/v1/approve', ['token', 'cost']],
  ['/v1/revoke', ['capability_id']],
];

describe('GET /openapi.json', () => {
  let h: Harness;
  let doc: Json;
  let routes: RouteConfig[];
  beforeAll(async () => {
    h = await startHarness(BACKENDS[0] ?? 'pglite');
    const r = await h.call('GET', '/openapi.json', undefined, { as: 'none' });
    expect(r.status).toBe(200);
    doc = r.body as Json;
    routes = h.app.openAPIRegistry.definitions.flatMap((d) => (d.type === 'route' ? [d.route] : []));
  });
  afterAll(async () => h.close());

  const operation = (method: string, path: string): Json => (doc.paths as Record<string, Record<string, Json>>)[path]?.[method] as Json;
  const bodySchema = (path: string): Json => {
    const content = (operation('post', path).requestBody as Json).content as Record<string, Json>;
    return new Walker(doc).resolve(content['application/json']?.schema) as Json;
  };

  test('every request schema keeps the five rules and matches the zod schema that validates it', () => {
    const w = walkRequests(doc, routes);
    expect(w.problems).toEqual([]);
    // The walk reached the deep corners, so a pass is not a walk over nothing.
    for (const at of [
      'POST /v1/capabilities body.objects[]|1.port',
      'POST /v1/capabilities body.predicate.args[]|2.values[]|0',
      'POST /v1/attenuate body.predicate.max_cost',
      'POST /v1/approve body.target|3.url',
      'POST /v1/approve body.args{name}',
      'PUT /v1/tools/{name} body.target.pointer',
      'PUT /v1/tools/{name} body.input_schema{name}',
      'POST /v1/approvals/{id} body.note',
      'POST /v1/revoke body.reason',
      'POST /v1/capabilities header.idempotency-key',
      'GET /v1/capabilities/{id} path.id',
      'GET /v1/audit query.limit',
    ]) {
      expect(w.visited).toContain(at);
    }
    expect(w.visited.length).toBeGreaterThan(100);
  });

  test.each(REQUIRED_BODY_FIELDS)('the body of POST %s requires what API.md requires', (path, fields) => {
    expect([...(bodySchema(path).required as string[])].sort()).toEqual([...fields].sort());
  });

  test('args: the record shows its size and key bounds', () => {
    const args = (bodySchema('/v1/approve').properties as Json).args as Json;
    expect(args).toMatchObject({ type: 'object', maxProperties: 64, propertyNames: { type: 'string', maxLength: 128 } });
  });

  // API.md leaves extra endpoints to the implementer, so the document may list more.
  test('lists every API.md endpoint', () => {
    const listed = Object.entries(doc.paths as Record<string, Json>).flatMap(([path, item]) => METHODS.filter((m) => m in item).map((m) => `${m} ${path}`));
    expect(listed).toEqual(expect.arrayContaining(API_ENDPOINTS.map(([m, p]) => `${m} ${p}`)));
  });

  test.each(API_ENDPOINTS)('%s %s: security is %s', (method, path, auth) => {
    const schemes = (doc.components as Json).securitySchemes as Record<string, Json>;
    const bearer = Object.keys(schemes).filter((k) => schemes[k]?.type === 'http' && /^bearer$/i.test(String(schemes[k]?.scheme)));
    expect(bearer.length).toBeGreaterThan(0);
    const security = (operation(method, path).security ?? doc.security) as Record<string, unknown>[];
    if (auth === 'none') expect(security).toEqual([]);
    else {
      expect(security.length).toBeGreaterThan(0);
      // Every alternative demands a bearer scheme: none lets a request through without a tenant key.
      for (const alt of security) expect(Object.keys(alt).some((k) => bearer.includes(k))).toBe(true);
    }
  });

  describe('args bounds over HTTP', () => {
    let token: string;
    beforeAll(async () => {
      const m = await h.call('POST', '/v1/capabilities', { trajectory_id: 'oa-1', rights: ['read'], objects: [{ kind: 'path', prefix: '/w' }], ttl_s: 60 });
      expect(m.status).toBe(201);
      token = m.body.token as string;
    });
    const approve = (args: Json) => h.call('POST', '/v1/approve', { token, op: 'read', target: { kind: 'path', path: '/w/f' }, cost: 0, args });
    const argsOf = (n: number, name = (i: number) => `a${i}`): Json => Object.fromEntries(Array.from({ length: n }, (_, i) => [name(i), i]));
    const maxProperties = (): number => ((bodySchema('/v1/approve').properties as Json).args as Json).maxProperties as number;

    test('as many arguments as the document allows are accepted', async () => {
      const r = await approve(argsOf(maxProperties()));
      expect(r.status).toBe(200);
      expect(r.body.decision).toBe('grant');
    });

    test.each([
      ['one argument more than the document allows', () => argsOf(maxProperties() + 1)],
      ['a name outside propertyNames', () => ({ 'not a name': 1 })],
      ['a name over 128 characters', () => ({ [`a${'b'.repeat(128)}`]: 1 })],
      ['an object value', () => ({ a: { b: 1 } })],
    ])('%s is a 400 on args', async (_name, args) => {
      const r = await approve(args());
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe('invalid_request');
      expect(r.body.error.fields.map((f: { path: string }) => f.path.split('.')[0])).toContain('args');
    });
  });
});
