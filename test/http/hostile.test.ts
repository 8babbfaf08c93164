/**
 * A hostile-input corpus (issue 3): malformed JSON, wrong types, unknown and prototype keys, deep
 * nesting, oversized bodies, wrong media types, extreme numbers, strings at and over every bound,
 * control characters, look-alikes, percent-encoding, dot segments and forged tokens. Every case must
 * end in the documented 4xx or a deny; none may grant, and the service stays healthy after all of them.
 */
import { CompactSign, importJWK, type JWK } from 'jose';
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { audit } from '../../src/store/schema.js';
import { BACKENDS } from '../support/db.js';
import { KEYS, T0, mintBody, startHarness, type Harness } from '../support/app.js';

/** What the setup provides to the cases: tokens of several kinds and one capability id. */
interface Ctx {
  readonly token: string;
  readonly tokenB: string;
  readonly capId: string;
  readonly shortLived: string;
  readonly argTokens: Map<string, string>;
  readonly forged: Record<string, string>;
}

type Expected =
  | { readonly status: number; readonly code: string; readonly field?: string; readonly notField?: string }
  | { readonly deny: string }
  | { readonly refused: string };

interface Case {
  readonly name: string;
  readonly method?: string;
  readonly path: string;
  /** JSON-encoded unless `raw` is given. */
  readonly body?: (c: Ctx) => unknown;
  readonly raw?: (c: Ctx) => string;
  /** Header overrides; `null` removes a default header. */
  readonly headers?: Record<string, string | null>;
  /** Send the raw body as a stream, without Content-Length. */
  readonly stream?: boolean;
  /** Clock offset (ms from T0) while the case runs. */
  readonly at?: number;
  readonly expect: Expected;
}

const arg = (c: Ctx, name: string): string => c.argTokens.get(name) as string;
const B64 = (s: string): string => Buffer.from(s).toString('base64url');
const bad = (field: string): Expected => ({ status: 400, code: 'invalid_request', field });
const deny = (code: string): Expected => ({ deny: code });
const INSIDE = { kind: 'path', path: '/workspace/t-1/file' } as const;
const OUTSIDE = { kind: 'path', path: '/etc/passwd' } as const;
const approveBody = (c: Ctx, over: Record<string, unknown> = {}): Record<string, unknown> => ({
  token: c.token,
  op: 'read',
  target: INSIDE,
  cost: 0.5,
  ...over,
});
const attBody = (c: Ctx, over: Record<string, unknown> = {}): Record<string, unknown> => ({
  parent_token: c.token,
  rights: ['read'],
  objects: [{ kind: 'path', prefix: '/workspace/t-1/sub' }],
  predicate: { budget: 1, max_calls: 1, max_depth: 0 },
  ttl_s: 60,
  ...over,
});
const goodMint = (): string => JSON.stringify(mintBody());
const nested = (n: number): string => '['.repeat(n) + ']'.repeat(n);
const url = (u: string): Record<string, unknown> => ({ kind: 'url', url: u });
const host = (name: string, port?: unknown): Record<string, unknown> => ({ kind: 'host', name, ...(port === undefined ? {} : { port }) });
const pathT = (p: string): Record<string, unknown> => ({ kind: 'path', path: p });

const M = '/v1/capabilities';
const A = '/v1/attenuate';
const P = '/v1/approve';
const R = '/v1/revoke';

const CASES: Case[] = [
  // ---- malformed JSON ------------------------------------------------------------------------
  { name: 'truncated JSON', path: M, raw: () => goodMint().slice(0, -5), expect: bad('body') },
  { name: 'trailing garbage', path: M, raw: () => goodMint() + 'x', expect: bad('body') },
  { name: 'two JSON values', path: M, raw: () => goodMint() + goodMint(), expect: bad('body') },
  // RFC 8259 §8.1 lets a parser ignore a BOM: tolerated, so the body's own fault is what is reported.
  { name: 'leading BOM', path: M, raw: () => '\ufeff' + JSON.stringify(mintBody({ ttl_s: 0 })), expect: bad('ttl_s') },
  { name: 'NaN literal', path: P, raw: (c) => JSON.stringify(approveBody(c)).replace('0.5', 'NaN'), expect: bad('body') },
  { name: 'Infinity literal', path: P, raw: (c) => JSON.stringify(approveBody(c)).replace('0.5', 'Infinity'), expect: bad('body') },
  { name: 'line comment', path: M, raw: () => '// hi\n' + goodMint(), expect: bad('body') },
  { name: 'block comment', path: M, raw: () => goodMint().replace('{', '{/* x */'), expect: bad('body') },
  { name: 'single quotes', path: M, raw: () => goodMint().replaceAll('"', "'"), expect: bad('body') },
  { name: 'trailing comma', path: M, raw: () => goodMint().replace(/}$/, ',}'), expect: bad('body') },
  { name: 'empty body', path: M, raw: () => '', expect: bad('body') },
  { name: 'whitespace body', path: M, raw: () => '   ', expect: bad('body') },
  { name: 'JSON null', path: M, raw: () => 'null', expect: bad('body') },
  { name: 'JSON array', path: M, raw: () => '[]', expect: bad('body') },
  { name: 'JSON string', path: M, raw: () => '"x"', expect: bad('body') },
  { name: 'JSON number', path: P, raw: () => '42', expect: bad('body') },
  { name: 'hex number', path: P, raw: (c) => JSON.stringify(approveBody(c)).replace('0.5', '0x1'), expect: bad('body') },
  { name: 'unquoted key', path: M, raw: () => goodMint().replace('"ttl_s"', 'ttl_s'), expect: bad('body') },
  { name: 'invalid escape', path: M, raw: () => goodMint().replace('t-1', 't-\\x41'), expect: bad('body') },
  { name: 'raw control char in string', path: M, raw: () => goodMint().replace('"t-1"', '"t-\u00011"'), expect: bad('body') },
  // ---- wrong types: mint --------------------------------------------------------------------
  ...(
    [
      ['trajectory_id', 5],
      ['trajectory_id', null],
      ['trajectory_id', ['t-1']],
      ['rights', 'read'],
      ['rights', [1], 'rights.0'],
      ['rights', []],
      ['rights', ['READ'], 'rights.0'],
      ['rights', ['read', 'read', 'read', 'read', 'read']],
      ['objects', {}],
      ['objects', []],
      ['objects', [null], 'objects.0'],
      ['objects', ['/workspace'], 'objects.0'],
      ['predicate', []],
      ['predicate', 'x'],
      ['ttl_s', '3600'],
      ['ttl_s', true],
      ['ttl_s', null],
    ] as [string, unknown, string?][]
  ).map(([f, v, at]): Case => ({ name: `mint ${f} = ${JSON.stringify(v)}`, path: M, body: () => mintBody({ [f]: v }), expect: bad(at ?? f) })),
  { name: 'mint missing trajectory_id', path: M, body: () => ({ ...mintBody(), trajectory_id: undefined }), expect: bad('trajectory_id') },
  { name: 'mint missing ttl_s', path: M, body: () => ({ ...mintBody(), ttl_s: undefined }), expect: bad('ttl_s') },
  { name: 'mint object without kind', path: M, body: () => mintBody({ objects: [{ prefix: '/a' }] }), expect: bad('objects.0.kind') },
  { name: 'mint object of unknown kind', path: M, body: () => mintBody({ objects: [{ kind: 'file', prefix: '/a' }] }), expect: bad('objects.0.kind') },
  { name: 'mint path object with url field', path: M, body: () => mintBody({ objects: [{ kind: 'path', url: '/a' }] }), expect: bad('objects.0.prefix') },
  {
    name: 'mint 65 objects',
    path: M,
    body: () => mintBody({ objects: Array.from({ length: 65 }, (_, i) => ({ kind: 'path', prefix: `/w/${i}` })) }),
    expect: bad('objects'),
  },
  { name: 'mint predicate max_cost string', path: M, body: () => mintBody({ predicate: { max_cost: '1' } }), expect: bad('predicate.max_cost') },
  { name: 'mint predicate max_calls 1.5', path: M, body: () => mintBody({ predicate: { max_calls: 1.5 } }), expect: bad('predicate.max_calls') },
  { name: 'mint predicate max_depth 33', path: M, body: () => mintBody({ predicate: { max_depth: 33 } }), expect: bad('predicate.max_depth') },
  { name: 'mint predicate budget negative', path: M, body: () => mintBody({ predicate: { budget: -1 } }), expect: bad('predicate.budget') },
  { name: 'mint predicate budget 1e13', path: M, body: () => mintBody({ predicate: { budget: 1e13 } }), expect: bad('predicate.budget') },
  { name: 'mint predicate budget 1e-7', path: M, body: () => mintBody({ predicate: { budget: 1e-7 } }), expect: bad('predicate.budget') },
  { name: 'mint predicate args not array', path: M, body: () => mintBody({ predicate: { args: {} } }), expect: bad('predicate.args') },
  {
    name: 'mint arg bound unknown kind',
    path: M,
    body: () => mintBody({ predicate: { args: [{ kind: 'regex', arg: 'a', value: '.*' }] } }),
    expect: bad('predicate.args.0.kind'),
  },
  {
    name: 'mint arg bound value string',
    path: M,
    body: () => mintBody({ predicate: { args: [{ kind: 'max', arg: 'a', value: '1' }] } }),
    expect: bad('predicate.args.0.value'),
  },
  {
    name: 'mint arg bound bad arg name',
    path: M,
    body: () => mintBody({ predicate: { args: [{ kind: 'max', arg: 'a b', value: 1 }] } }),
    expect: bad('predicate.args.0.arg'),
  },
  {
    name: 'mint one_of empty',
    path: M,
    body: () => mintBody({ predicate: { args: [{ kind: 'one_of', arg: 'a', values: [] }] } }),
    expect: bad('predicate.args.0.values'),
  },
  {
    name: 'mint one_of object value',
    path: M,
    body: () => mintBody({ predicate: { args: [{ kind: 'one_of', arg: 'a', values: [{}] }] } }),
    expect: bad('predicate.args.0.values.0'),
  },
  // ---- numbers: ttl_s ------------------------------------------------------------------------
  ...(
    [
      ['0', 0],
      ['-0', '-0'],
      ['2592001', 2592001],
      ['1.5', 1.5],
      ['-1', -1],
      ['1e309', '1e309'],
      ['1e-7', '1e-7'],
    ] as const
  ).map(([label, v]): Case => ({ name: `mint ttl_s ${label}`, path: M, raw: () => goodMint().replace('"ttl_s":3600', `"ttl_s":${v}`), expect: bad('ttl_s') })),
  // ---- strings at and over bounds ------------------------------------------------------------
  {
    name: 'trajectory_id of 128 chars is accepted',
    path: M,
    body: () => mintBody({ trajectory_id: 'x'.repeat(128), ttl_s: 0 }),
    expect: { status: 400, code: 'invalid_request', field: 'ttl_s', notField: 'trajectory_id' },
  },
  { name: 'trajectory_id of 129 chars', path: M, body: () => mintBody({ trajectory_id: 'x'.repeat(129) }), expect: bad('trajectory_id') },
  { name: 'trajectory_id empty', path: M, body: () => mintBody({ trajectory_id: '' }), expect: bad('trajectory_id') },
  { name: 'trajectory_id with NUL', path: M, body: () => mintBody({ trajectory_id: 't\u0000' }), expect: bad('trajectory_id') },
  { name: 'trajectory_id with newline', path: M, body: () => mintBody({ trajectory_id: 't\n1' }), expect: bad('trajectory_id') },
  { name: 'trajectory_id with slash', path: M, body: () => mintBody({ trajectory_id: '../t' }), expect: bad('trajectory_id') },
  { name: 'trajectory_id with Cyrillic а', path: M, body: () => mintBody({ trajectory_id: 'tа-1' }), expect: bad('trajectory_id') },
  { name: 'trajectory_id with fullwidth letters', path: M, body: () => mintBody({ trajectory_id: 'ｔ-1' }), expect: bad('trajectory_id') },
  {
    name: 'Idempotency-Key of 128 chars is accepted',
    path: M,
    headers: { 'idempotency-key': 'k'.repeat(128) },
    body: () => mintBody({ ttl_s: 0 }),
    expect: { status: 400, code: 'invalid_request', field: 'ttl_s', notField: 'header.idempotency-key' },
  },
  {
    name: 'Idempotency-Key of 129 chars',
    path: M,
    headers: { 'idempotency-key': 'k'.repeat(129) },
    body: () => mintBody({ ttl_s: 0 }),
    expect: bad('header.idempotency-key'),
  },
  { name: 'Idempotency-Key empty', path: M, headers: { 'idempotency-key': '' }, body: () => mintBody({ ttl_s: 0 }), expect: bad('header.idempotency-key') },
  {
    name: 'call_id of 256 chars is accepted',
    path: P,
    body: (c) => approveBody(c, { call_id: 'c'.repeat(256), target: OUTSIDE }),
    expect: deny('object_outside'),
  },
  { name: 'call_id of 257 chars', path: P, body: (c) => approveBody(c, { call_id: 'c'.repeat(257) }), expect: bad('call_id') },
  { name: 'call_id empty', path: P, body: (c) => approveBody(c, { call_id: '' }), expect: bad('call_id') },
  { name: 'call_id with NUL', path: P, body: (c) => approveBody(c, { call_id: 'a\u0000b' }), expect: bad('call_id') },
  {
    name: 'call_id with lone high surrogate',
    path: P,
    raw: (c) => JSON.stringify(approveBody(c, { call_id: 'X' })).replace('"X"', '"a\\ud800"'),
    expect: bad('call_id'),
  },
  {
    name: 'call_id with lone low surrogate',
    path: P,
    raw: (c) => JSON.stringify(approveBody(c, { call_id: 'X' })).replace('"X"', '"\\udc00a"'),
    expect: bad('call_id'),
  },
  { name: 'call_id number', path: P, body: (c) => approveBody(c, { call_id: 7 }), expect: bad('call_id') },
  {
    name: 'reason of 512 chars is accepted',
    path: R,
    body: () => ({ capability_id: 'no-such-capability', reason: 'r'.repeat(512) }),
    expect: { status: 404, code: 'not_found' },
  },
  { name: 'reason of 513 chars', path: R, body: (c) => ({ capability_id: c.capId, reason: 'r'.repeat(513) }), expect: bad('reason') },
  { name: 'reason with lone surrogate', path: R, raw: (c) => `{"capability_id":"${c.capId}","reason":"\\ud83d"}`, expect: bad('reason') },
  { name: 'reason with NUL', path: R, body: (c) => ({ capability_id: c.capId, reason: '\u0000' }), expect: bad('reason') },
  {
    name: 'args string of 65536 chars is over the body limit',
    path: P,
    body: (c) => approveBody(c, { args: { s: 's'.repeat(65536) } }),
    expect: { status: 413, code: 'payload_too_large' },
  },
  {
    name: 'args string of 65537 chars',
    path: P,
    body: (c) => approveBody(c, { args: { s: 's'.repeat(65537) } }),
    expect: { status: 413, code: 'payload_too_large' },
  },
  { name: 'token of 8192 chars is a bad token', path: P, body: (c) => approveBody(c, { token: 'a'.repeat(8192) }), expect: deny('bad_token') },
  { name: 'token of 8193 chars', path: P, body: (c) => approveBody(c, { token: 'a'.repeat(8193) }), expect: bad('token') },
  // ---- wrong types: approve -----------------------------------------------------------------
  ...(
    [
      ['token', 1],
      ['token', null],
      ['token', ['x']],
      ['op', 'READ'],
      ['op', 'delete'],
      ['op', ['read']],
      ['target', '/workspace/t-1/file'],
      ['target', null],
      ['target', []],
      ['cost', '0.5'],
      ['cost', null],
      ['cost', -1],
      ['cost', 1e13],
      ['cost', true],
      ['args', []],
      ['args', 'x=1'],
    ] as const
  ).map(([f, v]): Case => ({ name: `approve ${f} = ${JSON.stringify(v)}`, path: P, body: (c) => approveBody(c, { [f]: v }), expect: bad(f) })),
  { name: 'approve missing cost', path: P, body: (c) => ({ ...approveBody(c), cost: undefined }), expect: bad('cost') },
  { name: 'approve missing token', path: P, body: (c) => ({ ...approveBody(c), token: undefined }), expect: bad('token') },
  { name: 'approve cost 1e309 raw', path: P, raw: (c) => JSON.stringify(approveBody(c)).replace('0.5', '1e309'), expect: bad('cost') },
  { name: 'approve cost -1e309 raw', path: P, raw: (c) => JSON.stringify(approveBody(c)).replace('0.5', '-1e309'), expect: bad('cost') },
  { name: 'approve cost 1e-7', path: P, raw: (c) => JSON.stringify(approveBody(c)).replace('0.5', '1e-7'), expect: bad('cost') },
  { name: 'approve cost 0.0000001', path: P, raw: (c) => JSON.stringify(approveBody(c)).replace('0.5', '0.0000001'), expect: bad('cost') },
  {
    name: 'approve cost -0 parses (outside target)',
    path: P,
    raw: (c) => JSON.stringify(approveBody(c, { target: OUTSIDE })).replace('0.5', '-0'),
    expect: deny('object_outside'),
  },
  { name: 'approve cost over max_cost', path: P, body: (c) => approveBody(c, { cost: 1.000001 }), expect: deny('cost_exceeds_max') },
  { name: 'approve target of unknown kind', path: P, body: (c) => approveBody(c, { target: { kind: 'file', path: '/a' } }), expect: bad('target.kind') },
  {
    name: 'approve path target with prefix field',
    path: P,
    body: (c) => approveBody(c, { target: { kind: 'path', prefix: '/workspace/t-1' } }),
    expect: bad('target.path'),
  },
  { name: 'approve args nested object', path: P, body: (c) => approveBody(c, { args: { a: { b: 1 } } }), expect: bad('args.a') },
  { name: 'approve args array value', path: P, body: (c) => approveBody(c, { args: { a: [1] } }), expect: bad('args.a') },
  { name: 'approve args null value', path: P, body: (c) => approveBody(c, { args: { a: null } }), expect: bad('args.a') },
  {
    name: 'approve args 1e309 value',
    path: P,
    raw: (c) => JSON.stringify(approveBody(c, { args: { a: 1 } })).replace('"a":1', '"a":1e309'),
    expect: bad('args.a'),
  },
  {
    name: 'approve args 65 keys',
    path: P,
    body: (c) => approveBody(c, { args: Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`k${i}`, i])) }),
    expect: bad('args'),
  },
  { name: 'approve args bad key', path: P, body: (c) => approveBody(c, { args: { 'a b': 1 } }), expect: bad('args.a b') },
  // ---- wrong types: attenuate and revoke ----------------------------------------------------
  ...(
    [
      ['parent_token', 5],
      ['parent_token', ''],
      ['rights', 'read'],
      ['rights', ['root'], 'rights.0'],
      ['objects', [{ kind: 'path' }], 'objects.0.prefix'],
      ['predicate', 1],
      ['ttl_s', 0],
      ['ttl_s', 2592001],
      ['ttl_s', 1.5],
      ['ttl_s', '60'],
      ['trajectory_id', 'a b'],
      ['trajectory_id', 'x'.repeat(129)],
    ] as [string, unknown, string?][]
  ).map(([f, v, at]): Case => ({ name: `attenuate ${f} = ${JSON.stringify(v)}`, path: A, body: (c) => attBody(c, { [f]: v }), expect: bad(at ?? f) })),
  { name: 'attenuate missing parent_token', path: A, body: (c) => ({ ...attBody(c), parent_token: undefined }), expect: bad('parent_token') },
  ...(
    [
      ['capability_id', 5],
      ['capability_id', ''],
      ['capability_id', '../x'],
      ['capability_id', 'x'.repeat(65)],
      ['capability_id', null],
      ['reason', 5],
      ['reason', ['r']],
    ] as const
  ).map(([f, v]): Case => ({ name: `revoke ${f} = ${JSON.stringify(v)}`, path: R, body: (c) => ({ capability_id: c.capId, [f]: v }), expect: bad(f) })),
  { name: 'revoke missing capability_id', path: R, body: () => ({ reason: 'x' }), expect: bad('capability_id') },
  // ---- unknown fields at every level ---------------------------------------------------------
  { name: 'mint unknown top-level field', path: M, body: () => mintBody({ admin: true }), expect: bad('admin') },
  {
    name: 'mint unknown field in object',
    path: M,
    body: () => mintBody({ objects: [{ kind: 'path', prefix: '/a', recursive: true }] }),
    expect: bad('objects.0.recursive'),
  },
  { name: 'mint unknown field in predicate', path: M, body: () => mintBody({ predicate: { budget: 1, unlimited: true } }), expect: bad('predicate.unlimited') },
  {
    name: 'mint unknown field in arg bound',
    path: M,
    body: () => mintBody({ predicate: { args: [{ kind: 'max', arg: 'a', value: 1, inclusive: false }] } }),
    expect: bad('predicate.args.0.inclusive'),
  },
  { name: 'mint parent_id smuggled', path: M, body: () => mintBody({ parent_id: 'x', depth: 0 }), expect: bad('parent_id') },
  { name: 'approve unknown top-level field', path: P, body: (c) => approveBody(c, { force: true }), expect: bad('force') },
  {
    name: 'approve unknown field in target',
    path: P,
    body: (c) => approveBody(c, { target: { kind: 'path', path: '/workspace/t-1/f', follow: true } }),
    expect: bad('target.follow'),
  },
  { name: 'attenuate unknown top-level field', path: A, body: (c) => attBody(c, { depth: 0 }), expect: bad('depth') },
  {
    name: 'attenuate unknown field in object',
    path: A,
    body: (c) => attBody(c, { objects: [{ kind: 'host', name: 'a.b', ports: [1] }] }),
    expect: bad('objects.0.ports'),
  },
  { name: 'revoke unknown field', path: R, body: (c) => ({ capability_id: c.capId, cascade: false }), expect: bad('cascade') },
  // ---- prototype keys -------------------------------------------------------------------------
  { name: 'mint __proto__ at top level', path: M, raw: () => goodMint().replace('{', '{"__proto__":{"admin":true},'), expect: bad('__proto__') },
  { name: 'mint constructor at top level', path: M, raw: () => goodMint().replace('{', '{"constructor":{"prototype":{"x":1}},'), expect: bad('constructor') },
  { name: 'mint prototype at top level', path: M, raw: () => goodMint().replace('{', '{"prototype":1,'), expect: bad('prototype') },
  {
    name: 'mint __proto__ in predicate',
    path: M,
    raw: () => goodMint().replace('"predicate":{', '"predicate":{"__proto__":{"max_cost":0},'),
    expect: bad('predicate.__proto__'),
  },
  {
    name: 'mint constructor in predicate',
    path: M,
    raw: () => goodMint().replace('"predicate":{', '"predicate":{"constructor":1,'),
    expect: bad('predicate.constructor'),
  },
  {
    name: 'mint __proto__ in object',
    path: M,
    raw: () => goodMint().replace('{"kind":"path"', '{"__proto__":{},"kind":"path"'),
    expect: bad('objects.0.__proto__'),
  },
  {
    name: 'approve __proto__ at top level',
    path: P,
    raw: (c) => JSON.stringify(approveBody(c)).replace('{', '{"__proto__":{"decision":"grant"},'),
    expect: bad('__proto__'),
  },
  {
    name: 'approve __proto__ in target',
    path: P,
    raw: (c) => JSON.stringify(approveBody(c)).replace('{"kind":"path"', '{"__proto__":{"path":"/"},"kind":"path"'),
    expect: bad('target.__proto__'),
  },
  {
    name: 'approve args __proto__ object',
    path: P,
    raw: (c) => JSON.stringify(approveBody(c, { args: { a: 1 } })).replace('"args":{', '"args":{"__proto__":{"polluted":true},'),
    expect: bad('args.__proto__'),
  },
  {
    name: 'approve args constructor object',
    path: P,
    raw: (c) => JSON.stringify(approveBody(c, { args: { a: 1 } })).replace('"args":{', '"args":{"constructor":{"prototype":{"polluted":true}},'),
    expect: bad('args.constructor'),
  },
  {
    name: 'args __proto__ scalar under a __proto__ bound',
    path: P,
    raw: (c) => JSON.stringify(approveBody(c, { token: arg(c, '__proto__'), args: { a: 1 } })).replace('"args":{', '"args":{"__proto__":"xx",'),
    expect: bad('args.__proto__'),
  },
  { name: 'missing __proto__ arg fails its bound', path: P, body: (c) => approveBody(c, { token: arg(c, '__proto__') }), expect: deny('arg_violates_bound') },
  { name: 'missing constructor arg is not Object', path: P, body: (c) => approveBody(c, { token: arg(c, 'constructor') }), expect: deny('arg_violates_bound') },
  { name: 'missing toString arg is not inherited', path: P, body: (c) => approveBody(c, { token: arg(c, 'toString') }), expect: deny('arg_violates_bound') },
  {
    name: 'missing hasOwnProperty arg is not inherited',
    path: P,
    body: (c) => approveBody(c, { token: arg(c, 'hasOwnProperty') }),
    expect: deny('arg_violates_bound'),
  },
  {
    name: 'constructor arg given as a string',
    path: P,
    body: (c) => approveBody(c, { token: arg(c, 'constructor'), args: { constructor: 'Object' } }),
    expect: deny('arg_violates_bound'),
  },
  // ---- repeated keys (JSON.parse keeps the last; a first-wins parser in front of the tool would act on the first) ----
  {
    name: 'approve target repeated, outside first',
    path: P,
    raw: (c) => JSON.stringify(approveBody(c)).replace('"target":', `"target":${JSON.stringify(OUTSIDE)},"target":`),
    expect: bad('target'),
  },
  {
    name: 'approve target path repeated',
    path: P,
    raw: (c) => JSON.stringify(approveBody(c)).replace('"path":', '"path":"/etc/shadow","path":'),
    expect: bad('target.path'),
  },
  {
    name: 'approve args key repeated',
    path: P,
    raw: (c) => JSON.stringify(approveBody(c, { args: { timeout_ms: 1 } })).replace('"timeout_ms":', '"timeout_ms":999999,"timeout_ms":'),
    expect: bad('args.timeout_ms'),
  },
  {
    name: 'mint predicate budget repeated',
    path: M,
    raw: () => goodMint().replace('"predicate":{', '"predicate":{"budget":1e9,'),
    expect: bad('predicate.budget'),
  },
  {
    name: 'mint object prefix repeated',
    path: M,
    raw: () => goodMint().replace('{"kind":"path"', '{"prefix":"/","kind":"path"'),
    expect: bad('objects.0.prefix'),
  },
  // ---- deep nesting ----------------------------------------------------------------------------
  { name: '10k nested arrays in rights', path: M, raw: () => goodMint().replace('["read","write"]', nested(10_000)), expect: bad('rights.0') },
  {
    name: '10k nested arrays in predicate',
    path: M,
    raw: () => goodMint().replace(/"predicate":\{[^}]*\}/, `"predicate":${nested(10_000)}`),
    expect: bad('predicate'),
  },
  {
    name: '10k nested objects in args',
    path: P,
    raw: (c) => JSON.stringify(approveBody(c, { args: { a: 1 } })).replace('"a":1', `"a":${'{"a":'.repeat(10_000)}1${'}'.repeat(10_000)}`),
    expect: bad('args.a'),
  },
  {
    name: '30k nested arrays in target',
    path: P,
    raw: (c) => JSON.stringify(approveBody(c)).replace(/"target":\{[^}]*\}/, `"target":${nested(30_000)}`),
    expect: bad('target'),
  },
  // ---- bodies over 64 KiB -------------------------------------------------------------------
  { name: 'mint body over 64 KiB', path: M, raw: () => goodMint() + ' '.repeat(64 * 1024), expect: { status: 413, code: 'payload_too_large' } },
  {
    name: 'approve body over 64 KiB',
    path: P,
    raw: (c) => JSON.stringify(approveBody(c, { call_id: 'x' })).replace('"x"', `"${'x'.repeat(70_000)}"`),
    expect: { status: 413, code: 'payload_too_large' },
  },
  {
    name: 'chunked mint body over 64 KiB',
    path: M,
    stream: true,
    raw: () => ' '.repeat(70_000) + goodMint(),
    expect: { status: 413, code: 'payload_too_large' },
  },
  {
    name: 'chunked approve body over 64 KiB',
    path: P,
    stream: true,
    raw: (c) => ' '.repeat(70_000) + JSON.stringify(approveBody(c)),
    expect: { status: 413, code: 'payload_too_large' },
  },
  {
    name: 'oversized body with no tenant key',
    path: M,
    headers: { authorization: null },
    raw: () => ' '.repeat(70_000),
    expect: { status: 401, code: 'unauthorized' },
  },
  // ---- content type ---------------------------------------------------------------------------
  { name: 'text/plain', path: M, headers: { 'content-type': 'text/plain' }, raw: goodMint, expect: { status: 415, code: 'unsupported_media_type' } },
  {
    name: 'form encoded',
    path: M,
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    raw: () => 'trajectory_id=t-1',
    expect: { status: 415, code: 'unsupported_media_type' },
  },
  {
    name: 'multipart',
    path: P,
    headers: { 'content-type': 'multipart/form-data; boundary=x' },
    raw: (c) => JSON.stringify(approveBody(c)),
    expect: { status: 415, code: 'unsupported_media_type' },
  },
  {
    name: 'missing content type',
    path: P,
    headers: { 'content-type': null },
    raw: (c) => JSON.stringify(approveBody(c)),
    expect: { status: 415, code: 'unsupported_media_type' },
  },
  {
    name: 'json-patch+json',
    path: M,
    headers: { 'content-type': 'application/json-patch+json' },
    raw: goodMint,
    expect: { status: 415, code: 'unsupported_media_type' },
  },
  {
    name: 'application/jsonp',
    path: R,
    headers: { 'content-type': 'application/jsonp' },
    raw: (c) => JSON.stringify({ capability_id: c.capId }),
    expect: { status: 415, code: 'unsupported_media_type' },
  },
  // ---- path targets: dot segments, backslashes, look-alikes ---------------------------------
  { name: 'path target with leading ..', path: P, body: (c) => approveBody(c, { target: pathT('../workspace/t-1/file') }), expect: bad('target.path') },
  {
    name: 'path target with .. in the middle',
    path: P,
    body: (c) => approveBody(c, { target: pathT('/workspace/t-1/../t-2/file') }),
    expect: deny('object_outside'),
  },
  { name: 'path target with trailing ..', path: P, body: (c) => approveBody(c, { target: pathT('/workspace/t-1/..') }), expect: deny('object_outside') },
  {
    name: 'path target with many ..',
    path: P,
    body: (c) => approveBody(c, { target: pathT('/workspace/t-1/a/../../../../etc/passwd') }),
    expect: deny('object_outside'),
  },
  {
    name: 'path target sibling with common prefix',
    path: P,
    body: (c) => approveBody(c, { target: pathT('/workspace/t-10/file') }),
    expect: deny('object_outside'),
  },
  {
    name: 'path target with backslash dot segments',
    path: P,
    body: (c) => approveBody(c, { target: pathT('/workspace/t-2\\..\\t-1\\file') }),
    expect: deny('object_outside'),
  },
  {
    name: 'path target with fullwidth solidus',
    path: P,
    body: (c) => approveBody(c, { target: pathT('/workspace/t-2／..／t-1/file') }),
    expect: deny('object_outside'),
  },
  {
    name: 'path target with one-dot leaders',
    path: P,
    body: (c) => approveBody(c, { target: pathT('/workspace/t-2/․․/t-1/file') }),
    expect: deny('object_outside'),
  },
  {
    name: 'path target with %2e%2e',
    path: P,
    body: (c) => approveBody(c, { target: pathT('/workspace/t-2/%2e%2e/t-1/file') }),
    expect: deny('object_outside'),
  },
  { name: 'path target with %2F', path: P, body: (c) => approveBody(c, { target: pathT('/workspace%2Ft-1/file') }), expect: deny('object_outside') },
  { name: 'path target with NUL', path: P, body: (c) => approveBody(c, { target: pathT('/workspace/t-1/file\u0000.txt') }), expect: bad('target.path') },
  { name: 'path target relative', path: P, body: (c) => approveBody(c, { target: pathT('workspace/t-1/file') }), expect: bad('target.path') },
  { name: 'path target empty', path: P, body: (c) => approveBody(c, { target: pathT('') }), expect: bad('target.path') },
  // ---- path objects on mint -------------------------------------------------------------------
  ...(
    [
      ['leading ..', '../workspace'],
      ['middle ..', '/workspace/../etc'],
      ['trailing ..', '/workspace/..'],
      ['many ..', '/../../..'],
      ['dot segment', '/workspace/./t-1'],
      ['empty segment', '/workspace//t-1'],
      ['relative', 'workspace/t-1'],
      ['NUL', '/workspace/\u0000', 'objects.0.prefix'],
      ['empty', '', 'objects.0.prefix'],
    ] as [string, string, string?][]
  ).map(([label, p, at]): Case => ({
    name: `mint path object: ${label}`,
    path: M,
    body: () => mintBody({ objects: [{ kind: 'path', prefix: p }] }),
    expect: bad(at ?? 'objects.0'),
  })),
  // ---- host targets and objects ---------------------------------------------------------------
  { name: 'host target with Cyrillic а', path: P, body: (c) => approveBody(c, { target: host('аpi.example.com', 443) }), expect: bad('target.name') },
  { name: 'host target IDN', path: P, body: (c) => approveBody(c, { target: host('api.exämple.com', 443) }), expect: bad('target.name') },
  { name: 'host target suffix trick', path: P, body: (c) => approveBody(c, { target: host('api.example.com.evil.com', 443) }), expect: deny('object_outside') },
  { name: 'host target percent-encoded dot', path: P, body: (c) => approveBody(c, { target: host('api%2Eexample.com', 443) }), expect: bad('target.name') },
  { name: 'host target other port', path: P, body: (c) => approveBody(c, { target: host('api.example.com', 8443) }), expect: deny('object_outside') },
  ...(
    [
      ['0', 0],
      ['65536', 65536],
      ['-1', -1],
      ['"443"', '443'],
      ['443.5', 443.5],
    ] as const
  ).map(([label, port]): Case => ({
    name: `host target port ${label}`,
    path: P,
    body: (c) => approveBody(c, { target: host('api.example.com', port) }),
    expect: bad('target.port'),
  })),
  ...(
    [
      ['0', 0],
      ['65536', 65536],
      ['-1', -1],
      ['"443"', '443'],
    ] as const
  ).map(([label, port]): Case => ({
    name: `mint host object port ${label}`,
    path: M,
    body: () => mintBody({ objects: [{ kind: 'host', name: 'a.example.com', port }] }),
    expect: bad('objects.0.port'),
  })),
  {
    name: 'mint host name with NUL',
    path: M,
    body: () => mintBody({ objects: [{ kind: 'host', name: 'a.example.com\u0000' }] }),
    expect: bad('objects.0.name'),
  },
  { name: 'mint host name of 256 chars', path: M, body: () => mintBody({ objects: [{ kind: 'host', name: 'a'.repeat(256) }] }), expect: bad('objects.0.name') },
  // ---- URL targets ----------------------------------------------------------------------------
  {
    name: 'url target %2e%2e escape',
    path: P,
    body: (c) => approveBody(c, { op: 'read', target: url('https://api.example.com/v1/%2e%2e/admin') }),
    expect: deny('object_outside'),
  },
  {
    name: 'url target .. in the middle',
    path: P,
    body: (c) => approveBody(c, { target: url('https://api.example.com/v1/../admin') }),
    expect: deny('object_outside'),
  },
  { name: 'url target trailing ..', path: P, body: (c) => approveBody(c, { target: url('https://api.example.com/v1/..') }), expect: deny('object_outside') },
  {
    name: 'url target many ..',
    path: P,
    body: (c) => approveBody(c, { target: url('https://api.example.com/v1/a/../../../admin') }),
    expect: deny('object_outside'),
  },
  { name: 'url target leading ..', path: P, body: (c) => approveBody(c, { target: url('../https://api.example.com/v1/x') }), expect: bad('target.url') },
  { name: 'url target %2F', path: P, body: (c) => approveBody(c, { target: url('https://api.example.com/v1%2F..%2Fadmin') }), expect: bad('target.url') },
  // Review: Tomcat drops `;` parameters before resolving `..`, and serves this as /admin.
  { name: 'url target ..;', path: P, body: (c) => approveBody(c, { target: url('https://api.example.com/v1/..;/admin') }), expect: bad('target.url') },
  {
    name: 'url target %252e%252e',
    path: P,
    body: (c) => approveBody(c, { target: url('https://api.example.com/v1/%252e%252e/admin') }),
    expect: bad('target.url'),
  },
  {
    name: 'url target %252F in userinfo',
    path: P,
    body: (c) => approveBody(c, { target: url('https://api.example.com%252F@evil.com/v1/x') }),
    expect: bad('target.url'),
  },
  {
    name: 'url target userinfo trick',
    path: P,
    body: (c) => approveBody(c, { target: url('https://api.example.com@evil.com/v1/x') }),
    expect: bad('target.url'),
  },
  {
    name: 'url target backslash trick',
    path: P,
    body: (c) => approveBody(c, { target: url('https://evil.com\\@api.example.com/v1/x') }),
    expect: bad('target.url'),
  },
  // Review: WHATWG reads this as api.example.com (so it was granted); other clients call 169.254.169.254.
  {
    name: 'url target backslash before @',
    path: P,
    body: (c) => approveBody(c, { target: url('https://api.example.com\\@169.254.169.254/v1/x') }),
    expect: bad('target.url'),
  },
  { name: 'url target tab in host', path: P, body: (c) => approveBody(c, { target: url('https://api.exa\tmple.com/v1/x') }), expect: bad('target.url') },
  {
    name: 'url target %00 in host',
    path: P,
    body: (c) => approveBody(c, { target: url('https://api.example.com%00.evil.com/v1/x') }),
    expect: bad('target.url'),
  },
  {
    name: 'url target %2F in host',
    path: P,
    body: (c) => approveBody(c, { target: url('https://api.example.com%2F.evil.com/v1/x') }),
    expect: bad('target.url'),
  },
  { name: 'url target Cyrillic host', path: P, body: (c) => approveBody(c, { target: url('https://аpi.example.com/v1/x') }), expect: bad('target.url') },
  {
    name: 'url target trailing-dot suffix host',
    path: P,
    body: (c) => approveBody(c, { target: url('https://api.example.com.evil.com./v1/x') }),
    expect: deny('object_outside'),
  },
  { name: 'url target other scheme', path: P, body: (c) => approveBody(c, { target: url('http://api.example.com/v1/x') }), expect: deny('object_outside') },
  { name: 'url target other port', path: P, body: (c) => approveBody(c, { target: url('https://api.example.com:8443/v1/x') }), expect: deny('object_outside') },
  { name: 'url target port 0', path: P, body: (c) => approveBody(c, { target: url('https://api.example.com:0/v1/x') }), expect: deny('object_outside') },
  { name: 'url target port 65536', path: P, body: (c) => approveBody(c, { target: url('https://api.example.com:65536/v1/x') }), expect: bad('target.url') },
  { name: 'url target segment prefix', path: P, body: (c) => approveBody(c, { target: url('https://api.example.com/v10/x') }), expect: deny('object_outside') },
  { name: 'url target fullwidth solidus', path: P, body: (c) => approveBody(c, { target: url('https://api.example.com／v1/x') }), expect: bad('target.url') },
  { name: 'url target javascript:', path: P, body: (c) => approveBody(c, { target: url('javascript:alert(1)') }), expect: bad('target.url') },
  { name: 'url target file:', path: P, body: (c) => approveBody(c, { target: url('file:///etc/passwd') }), expect: bad('target.url') },
  { name: 'url target not a URL', path: P, body: (c) => approveBody(c, { target: url('not a url') }), expect: bad('target.url') },
  { name: 'mint url object not absolute', path: M, body: () => mintBody({ objects: [{ kind: 'url', prefix: '/v1/' }] }), expect: bad('objects.0') },
  {
    name: 'mint url object ..;',
    path: M,
    body: () => mintBody({ objects: [{ kind: 'url', prefix: 'https://a.example.com/v1/..;/' }] }),
    expect: bad('objects.0'),
  },
  {
    name: 'mint url object ftp scheme',
    path: M,
    body: () => mintBody({ objects: [{ kind: 'url', prefix: 'ftp://a.example.com/' }] }),
    expect: bad('objects.0'),
  },
  // ---- repo targets ---------------------------------------------------------------------------
  {
    name: 'repo target with .. escape',
    path: P,
    body: (c) => approveBody(c, { target: { kind: 'repo', name: 'github.com/org/repo/../other' } }),
    expect: bad('target.name'),
  },
  {
    name: 'repo target other owner',
    path: P,
    body: (c) => approveBody(c, { target: { kind: 'repo', name: 'github.com/org2/repo' } }),
    expect: deny('object_outside'),
  },
  { name: 'repo target Cyrillic', path: P, body: (c) => approveBody(c, { target: { kind: 'repo', name: 'github.com/оrg/repo' } }), expect: bad('target.name') },
  // ---- tokens ---------------------------------------------------------------------------------
  { name: 'token empty', path: P, body: (c) => approveBody(c, { token: '' }), expect: bad('token') },
  { name: 'token truncated', path: P, body: (c) => approveBody(c, { token: c.token.slice(0, -10) }), expect: deny('bad_token') },
  {
    name: 'token missing signature',
    path: P,
    body: (c) => approveBody(c, { token: c.token.slice(0, c.token.lastIndexOf('.') + 1) }),
    expect: deny('bad_token'),
  },
  { name: 'token signature char changed', path: P, body: (c) => approveBody(c, { token: c.forged.sigChanged }), expect: deny('bad_token') },
  { name: 'token payload char changed', path: P, body: (c) => approveBody(c, { token: c.forged.payloadChanged }), expect: deny('bad_token') },
  { name: 'token with whitespace', path: P, body: (c) => approveBody(c, { token: ` ${c.token}` }), expect: deny('bad_token') },
  { name: 'token with Bearer prefix', path: P, body: (c) => approveBody(c, { token: `Bearer ${c.token}` }), expect: deny('bad_token') },
  { name: 'token HS256 with the public key', path: P, body: (c) => approveBody(c, { token: c.forged.hs256 }), expect: deny('bad_token') },
  { name: 'token alg none', path: P, body: (c) => approveBody(c, { token: c.forged.none }), expect: deny('bad_token') },
  { name: 'token foreign key and kid', path: P, body: (c) => approveBody(c, { token: c.forged.foreign }), expect: deny('unknown_key') },
  { name: 'token foreign key under our kid', path: P, body: (c) => approveBody(c, { token: c.forged.foreignOurKid }), expect: deny('bad_token') },
  { name: 'token with no kid', path: P, body: (c) => approveBody(c, { token: c.forged.noKid }), expect: deny('unknown_key') },
  { name: 'token of another tenant', path: P, body: (c) => approveBody(c, { token: c.tokenB }), expect: deny('tenant_mismatch') },
  { name: 'token expired by 1 s', path: P, at: 11_000, body: (c) => approveBody(c, { token: c.shortLived }), expect: deny('expired') },
  { name: 'token not yet valid', path: P, at: -1_000, body: (c) => approveBody(c, { token: c.shortLived }), expect: deny('not_yet_valid') },
  { name: 'attenuate a forged parent', path: A, body: (c) => attBody(c, { parent_token: c.forged.hs256 }), expect: { refused: 'parent_invalid' } },
  { name: 'attenuate an alg none parent', path: A, body: (c) => attBody(c, { parent_token: c.forged.none }), expect: { refused: 'parent_invalid' } },
  {
    name: 'attenuate an expired parent',
    path: A,
    at: 11_000,
    body: (c) => attBody(c, { parent_token: c.shortLived, ttl_s: undefined }),
    expect: { refused: 'parent_expired' },
  },
  { name: 'attenuate widening rights', path: A, body: (c) => attBody(c, { rights: ['execute'] }), expect: { refused: 'right_widened' } },
  // ---- authentication and routing --------------------------------------------------------------
  { name: 'no tenant key', path: P, headers: { authorization: null }, body: (c) => approveBody(c), expect: { status: 401, code: 'unauthorized' } },
  { name: 'capability read with ..%2F', method: 'GET', path: '/v1/capabilities/..%2F..%2Fetc', expect: bad('param.id') },
  { name: 'capability read with %00', method: 'GET', path: '/v1/capabilities/%00', expect: bad('param.id') },
  { name: 'audit limit 0', method: 'GET', path: '/v1/audit?limit=0', expect: bad('query.limit') },
  { name: 'audit limit 1001', method: 'GET', path: '/v1/audit?limit=1001', expect: bad('query.limit') },
  { name: 'audit decision GRANT', method: 'GET', path: '/v1/audit?decision=GRANT', expect: bad('query.decision') },
  { name: 'audit cursor garbage', method: 'GET', path: '/v1/audit?after=%00%2e%2e', expect: bad('query.after') },
  { name: 'audit unknown query parameter', method: 'GET', path: '/v1/audit?tenant=b', expect: bad('query.tenant') },
];

/** Bounds on arguments named like Object.prototype members: a missing one must not be inherited. */
const ARG_BOUNDS: [string, unknown][] = [
  ['__proto__', { kind: 'max_length', arg: '__proto__', value: 3 }],
  ['constructor', { kind: 'one_of', arg: 'constructor', values: ['x'] }],
  ['toString', { kind: 'max', arg: 'toString', value: 5 }],
  ['hasOwnProperty', { kind: 'max_length', arg: 'hasOwnProperty', value: 100 }],
];

async function forge(token: string, activeKid: string): Promise<Record<string, string>> {
  const [header, payload, sig] = token.split('.') as [string, string, string];
  const flip = (s: string, i: number): string => s.slice(0, i) + (s[i] === 'A' ? 'B' : 'A') + s.slice(i + 1);
  const claims = Buffer.from(payload, 'base64url');
  const active = KEYS.ring.keys.find((k) => k.kid === activeKid) as Record<string, string>;
  const foreignJwk = KEYS.foreign.keys[0] as Record<string, string>;
  const foreignKey = await importJWK(foreignJwk as JWK, 'EdDSA');
  return {
    sigChanged: `${header}.${payload}.${flip(sig, 10)}`,
    payloadChanged: `${header}.${flip(payload, 10)}.${sig}`,
    hs256: await new CompactSign(claims).setProtectedHeader({ alg: 'HS256', kid: activeKid }).sign(Buffer.from(active.x as string, 'base64url')),
    none: `${B64(JSON.stringify({ alg: 'none', kid: activeKid }))}.${payload}.`,
    foreign: await new CompactSign(claims).setProtectedHeader({ alg: 'EdDSA', kid: foreignJwk.kid }).sign(foreignKey),
    foreignOurKid: await new CompactSign(claims).setProtectedHeader({ alg: 'EdDSA', kid: activeKid }).sign(foreignKey),
    noKid: await new CompactSign(claims).setProtectedHeader({ alg: 'EdDSA' }).sign(foreignKey),
  };
}

describe.each(BACKENDS)('hostile inputs on %s', (backend) => {
  let h: Harness;
  let ctx: Ctx;
  let setupGrants = 0;

  async function grants(): Promise<number> {
    const [r] = await h.database.db
      .select({ n: sql<number>`count(*)::int` })
      .from(audit)
      .where(sql`decision = 'grant'`);
    return Number(r?.n);
  }

  beforeAll(async () => {
    h = await startHarness(backend);
    const objects = [
      { kind: 'path', prefix: '/workspace/t-1' },
      { kind: 'host', name: 'api.example.com', port: 443 },
      { kind: 'url', prefix: 'https://api.example.com/v1/' },
      { kind: 'repo', name: 'github.com/org/repo' },
    ];
    const mint = async (over: Record<string, unknown>, as: 'a' | 'b' = 'a'): Promise<{ token: string; capability_id: string }> => {
      const r = await h.call('POST', M, mintBody({ objects, predicate: { max_cost: 1, budget: 10, max_calls: 100, max_depth: 3 }, ...over }), { as });
      expect(r.status).toBe(201);
      return r.body;
    };
    const root = await mint({});
    const argTokens = new Map<string, string>();
    for (const [name, bound] of ARG_BOUNDS) argTokens.set(name, (await mint({ predicate: { args: [bound] } })).token);
    ctx = {
      token: root.token,
      capId: root.capability_id,
      tokenB: (await mint({}, 'b')).token,
      shortLived: (await mint({ ttl_s: 10 })).token,
      argTokens,
      forged: await forge(root.token, h.keys.activeKid),
    };
    await h.writer.flush();
    setupGrants = await grants();
  });
  afterAll(async () => h.close());

  test.each(CASES)('$name', async (c) => {
    const headers: Record<string, string> = { authorization: `Bearer ${h.tenants.a}`, 'content-type': 'application/json' };
    for (const [k, v] of Object.entries(c.headers ?? {})) {
      if (v === null) delete headers[k];
      else headers[k] = v;
    }
    const payload = c.raw ? c.raw(ctx) : c.body ? JSON.stringify(c.body(ctx)) : undefined;
    if (payload === undefined) delete headers['content-type'];
    const body =
      payload === undefined
        ? undefined
        : c.stream
          ? new ReadableStream<Uint8Array>({
              start(controller) {
                const bytes = new TextEncoder().encode(payload);
                for (let i = 0; i < bytes.length; i += 8192) controller.enqueue(bytes.slice(i, i + 8192));
                controller.close();
              },
            })
          : payload;
    if (c.at !== undefined) h.clock.ms = T0 + c.at;
    let res: Response;
    try {
      res = await h.app.request(c.path, { method: c.method ?? 'POST', headers, ...(body === undefined ? {} : { body, duplex: 'half' }) });
    } finally {
      h.clock.ms = T0;
    }
    const text = await res.text();
    let parsed: Record<string, any> = {}; // eslint-disable-line @typescript-eslint/no-explicit-any
    try {
      parsed = JSON.parse(text);
    } catch {
      // not JSON: the assertions below fail on it
    }
    if (process.env.HOSTILE_DISCOVER) console.log(`${c.name} => ${res.status} ${JSON.stringify(parsed).slice(0, 300)}`);
    // No case may ever grant or mint.
    expect(parsed.decision).not.toBe('grant');
    expect(parsed.token).toBeUndefined();
    expect(res.status).toBeLessThan(500);
    const e = c.expect;
    if ('deny' in e) {
      expect(res.status).toBe(200);
      expect(parsed.decision).toBe('deny');
      expect(parsed.reason.code).toBe(e.deny);
    } else if ('refused' in e) {
      expect(res.status).toBe(403);
      expect(parsed.error.code).toBe('attenuation_refused');
      expect(parsed.error.violations.map((v: { code: string }) => v.code)).toContain(e.refused);
    } else {
      expect(res.status).toBe(e.status);
      expect(parsed.error.code).toBe(e.code);
      const paths = ((parsed.error.fields ?? []) as { path: string }[]).map((f) => f.path);
      if (e.field !== undefined) expect(paths).toContain(e.field);
      if (e.notField !== undefined) expect(paths).not.toContain(e.notField);
    }
  });

  test('the corpus granted nothing, polluted nothing, and the service is still healthy', async () => {
    await h.writer.flush();
    expect(await grants()).toBe(setupGrants);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(({} as Record<string, unknown>).admin).toBeUndefined();
    expect((await h.call('GET', '/healthz')).status).toBe(200);
    const ok = await h.call('POST', P, approveBody(ctx));
    expect(ok.body.decision).toBe('grant');
  });
});
