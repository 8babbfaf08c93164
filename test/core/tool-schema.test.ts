/**
 * The five rules of a tool's input schema (src/core/tool-schema.ts) and args validation
 * (src/core/tool-args.ts), table-driven: each bad schema holds one fault and is reported at its
 * pointer; rule 4 only warns; args failures name every path, nested ones included.
 */
import { describe, expect, test } from 'vitest';
import { ArgsValidator } from '../../src/core/tool-args.js';
import { atPointer, checkToolSchema, targetProperty } from '../../src/core/tool-schema.js';
import { predicateViolations } from '../../src/core/predicate.js';
import type { CanonicalPredicate } from '../../src/core/types.js';

const str = { type: 'string', maxLength: 10 };
const closed = (properties: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
  type: 'object',
  additionalProperties: false,
  required: Object.keys(properties),
  properties,
  ...extra,
});
const tagged = (kind: string, more: Record<string, unknown> = {}) => closed({ kind: { const: kind }, ...more });

describe('checkToolSchema', () => {
  test('a schema keeping every rule passes: nested objects, arrays, enums, scalar and tagged unions, $defs, allOf, defaults', () => {
    const schema = closed(
      {
        path: { type: 'string', pattern: '^/' },
        mode: { type: 'string', enum: ['a', 'b'] },
        n: { type: ['integer', 'null'], minimum: 0, maximum: 9 },
        tags: { type: 'array', maxItems: 4, items: str },
        value: { anyOf: [str, { type: 'number', minimum: 0, maximum: 1 }, { type: 'boolean' }] },
        filter: { oneOf: [tagged('glob', { glob: str }), { $ref: '#/$defs/size' }] },
        both: { allOf: [closed({ a: str })] },
      },
      { $defs: { size: tagged('size', { max_bytes: { type: 'integer', minimum: 0, maximum: 1e9 } }) } },
    );
    schema.properties.limit = { type: 'integer', minimum: 1, maximum: 500, default: 100 };
    expect(checkToolSchema(schema)).toEqual({ violations: [], warnings: [] });
  });

  test.each([
    ['not an object at the top', { type: 'string', maxLength: 3 }, 'not_object', ''],
    ['an open nested object', closed({ o: { type: 'object', properties: {} } }), 'open_object', '/properties/o'],
    ['patternProperties', closed({ o: { type: 'object', additionalProperties: false, patternProperties: { x: str } } }), 'open_object', '/properties/o'],
    ['an optional property without default', { ...closed({ a: str }), required: [] }, 'required_missing', '/properties/a'],
    ['required names nothing', { ...closed({ a: str }), required: ['a', 'b'] }, 'required_unknown', '/required'],
    ['a schema without type', closed({ a: {} }), 'untyped', '/properties/a'],
    ['true as a schema', closed({ a: true }), 'untyped', '/properties/a'],
    ['an array without items', closed({ a: { type: 'array', maxItems: 2 } }), 'untyped', '/properties/a/items'],
    ['an unbounded string in array items', closed({ a: { type: 'array', maxItems: 2, items: { type: 'string' } } }), 'string_unbounded', '/properties/a/items'],
    ['a number without minimum', closed({ a: { type: 'number', maximum: 2 } }), 'number_unbounded', '/properties/a'],
    ['an array without maxItems', closed({ a: { type: 'array', items: str } }), 'array_unbounded', '/properties/a'],
    ['a bad pattern', closed({ a: { type: 'string', pattern: '(' } }), 'pattern_invalid', '/properties/a/pattern'],
    // Review: the validator runs each pattern on every call's args; these hang it on a long argument.
    [
      'a pattern with overlapping alternatives under a star',
      closed({ a: { type: 'string', maxLength: 64, pattern: '^(a|a)*$' } }),
      'pattern_unsafe',
      '/properties/a/pattern',
    ],
    ['a pattern with nested repeats', closed({ a: { type: 'string', maxLength: 64, pattern: '(a+)+$' } }), 'pattern_unsafe', '/properties/a/pattern'],
    [
      'an unanchored pattern that backtracks quadratically',
      closed({ a: { type: 'string', maxLength: 64, pattern: '\\s*,\\s*$' } }),
      'pattern_unsafe',
      '/properties/a/pattern',
    ],
    // The validator applies a pattern to any string, whatever the declared type, and beside enum or $ref.
    [
      'an unsafe pattern beside an integer type',
      closed({ a: { type: 'integer', minimum: 0, maximum: 9, pattern: '(a+)+$' } }),
      'pattern_unsafe',
      '/properties/a/pattern',
    ],
    ['an unsafe pattern beside an enum', closed({ a: { enum: ['x'], pattern: '(a+)+$' } }), 'pattern_unsafe', '/properties/a/pattern'],
    [
      'an unsafe pattern in a definition',
      { ...closed({ a: { $ref: '#/$defs/x' } }), $defs: { x: { type: 'string', pattern: '^(a|a)*$' } } },
      'pattern_unsafe',
      '/$defs/x/pattern',
    ],
    // Review: a property or definition named like a value keyword is a schema all the same.
    [
      'an unsafe pattern on a property named like a value keyword',
      closed({ default: { type: 'string', maxLength: 64, pattern: '^(a|a)*$' } }),
      'pattern_unsafe',
      '/properties/default/pattern',
    ],
    [
      'an unsafe pattern in a definition named like a value keyword',
      { ...closed({ a: { $ref: '#/$defs/enum' } }), $defs: { enum: { type: 'string', maxLength: 64, pattern: '(a+)+$' } } },
      'pattern_unsafe',
      '/$defs/enum/pattern',
    ],
    [
      'the url format, whose check backtracks catastrophically',
      closed({ a: { type: 'string', maxLength: 64, format: 'url' } }),
      'format_unsafe',
      '/properties/a/format',
    ],
    ['a remote $ref', closed({ a: { $ref: 'https://example.com/s.json' } }), 'ref_unsupported', '/properties/a'],
    ['a recursive $ref', { ...closed({ a: { $ref: '#/$defs/x' } }), $defs: { x: { $ref: '#/$defs/x' } } }, 'ref_unsupported', '/properties/a'],
    ['an untagged union of objects', closed({ a: { oneOf: [closed({ p: str }), closed({ q: str })] } }), 'untagged_union', '/properties/a/oneOf'],
    ['a union whose tag repeats', closed({ a: { anyOf: [tagged('x'), tagged('x', { p: str })] } }), 'untagged_union', '/properties/a/anyOf'],
    ['a union of an object and a scalar', closed({ a: { oneOf: [tagged('x'), str] } }), 'untagged_union', '/properties/a/oneOf'],
    // Found by review: keywords the checker did not walk hid unbounded values.
    ['an empty allOf', closed({ a: { allOf: [] } }), 'untyped', '/properties/a/allOf'],
    [
      'an open object beside an allOf',
      closed({ a: { type: 'object', properties: { p: str }, required: ['p'], allOf: [closed({ p: str })] } }),
      'open_object',
      '/properties/a',
    ],
    ['not', closed({ a: { not: { type: 'null' } } }), 'keyword_unsupported', '/properties/a'],
    ['prefixItems', closed({ a: { type: 'array', maxItems: 2, prefixItems: [{ type: 'string' }], items: str } }), 'keyword_unsupported', '/properties/a'],
    ['if/then', closed({ a: { if: str, then: { type: 'string' } } }), 'keyword_unsupported', '/properties/a'],
  ])('%s is refused', (_name, schema, code, field) => {
    const { violations } = checkToolSchema(schema);
    expect(violations.map((v) => [v.code, v.field])).toEqual([[code, field]]);
  });

  test.each(['^[a-z0-9-]{1,64}$', '^/', '^[a-z]+(-[a-z]+)*$', '^/[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$', '^\\d{4}-\\d{2}-\\d{2}$'])(
    'a pattern matched in linear time registers: %s',
    (pattern) => {
      expect(checkToolSchema(closed({ a: { type: 'string', maxLength: 64, pattern } }))).toEqual({ violations: [], warnings: [] });
    },
  );

  test('a string that only looks like a pattern (in const, enum, default or a property name) is data', () => {
    const schema = closed({
      pattern: { type: 'object', additionalProperties: false, required: [], properties: {}, default: { pattern: '(a+)+$' } },
      b: { const: { pattern: '(' } },
    });
    expect(checkToolSchema(schema).violations).toEqual([]);
  });

  test('many slow patterns in one schema: analysis stops at its budget and refuses the rest, so one registration cannot hold the process', () => {
    // Each of these takes the analysis its full per-pattern limit (about 250 ms) before it is refused.
    const slow = 'cdefghijklmn'.split('').map((c) => `^(${c}|${c})*$`);
    const { violations } = checkToolSchema(closed(Object.fromEntries(slow.map((pattern, i) => [`p${i}`, { type: 'string', maxLength: 64, pattern }]))));
    expect(violations.map((v) => v.code)).toEqual(slow.map(() => 'pattern_unsafe'));
    expect(violations.filter((v) => v.detail.includes('could not all be checked in time')).length).toBeGreaterThan(0);
  });

  test('a schema nested too deep is refused, not walked without end', () => {
    let s: Record<string, unknown> = str;
    for (let i = 0; i < 200; i++) s = closed({ a: s });
    expect(checkToolSchema(s).violations.map((v) => v.code)).toEqual(['too_deep']);
  });

  test.each([
    ['timeout', true],
    ['timeoutMs', false],
    ['timeout_ms', false],
    ['retry_delay', true],
    ['max_size', true],
    ['max_size_bytes', false],
    ['ttl_s', false],
    ['limit', false],
    ['count', false],
  ])('rule 4: a number named %s warns: %s', (name, warns) => {
    const report = checkToolSchema(closed({ [name]: { type: 'integer', minimum: 0, maximum: 9 } }));
    expect(report.violations).toEqual([]);
    expect(report.warnings.map((w) => [w.rule, w.code])).toEqual(warns ? [[4, 'unit_missing']] : []);
  });

  test('a target pointer must lead through required properties to a string', () => {
    const schema = closed({ o: closed({ path: str }), n: { type: 'integer', minimum: 0, maximum: 1 } });
    expect(targetProperty(schema, '/o/path')).toEqual(str);
    expect(targetProperty(schema, '/n')).toBeNull();
    expect(targetProperty(schema, '/o/none')).toBeNull();
    expect(targetProperty(schema, 'o/path')).toBeNull();
    expect(atPointer({ o: { 'a/b': 1 } }, '/o/a~1b')).toBe(1);
    expect(atPointer({ o: {} }, '/o/x')).toBeUndefined();
  });
});

describe('ArgsValidator', () => {
  const v = new ArgsValidator(
    closed({
      path: { type: 'string', maxLength: 20, pattern: '^/' },
      opts: closed({ depth: { type: 'integer', minimum: 1, maximum: 3 } }),
      filter: { oneOf: [tagged('glob', { glob: str }), tagged('size', { max_bytes: { type: 'integer', minimum: 0, maximum: 10 } })] },
    }),
  );

  test('valid args have no errors', () => {
    expect(v.check({ path: '/a', opts: { depth: 2 }, filter: { kind: 'glob', glob: '*.ts' } })).toEqual([]);
  });

  test('every failing path is named once, nested ones and unknown and missing properties included', () => {
    const errors = v.check({ path: 'rel', opts: { depth: 9, x: 1 }, extra: true });
    expect(errors.map((e) => e.path).sort()).toEqual(['args.extra', 'args.filter', 'args.opts.depth', 'args.opts.x', 'args.path']);
    expect(errors.find((e) => e.path === 'args.filter')?.message).toBe('required');
  });
});

describe('tool bounds in attenuation', () => {
  const p = (x: object): CanonicalPredicate => x as CanonicalPredicate;
  test.each([
    ['a narrower tool list', { tools: ['a', 'b'] }, { tools: ['a'] }, []],
    ['no tool list under one', { tools: ['a'] }, {}, ['predicate.tools']],
    ['a tool the parent lacks', { tools: ['a'] }, { tools: ['a', 'b'] }, ['predicate.tools']],
    ['an added approval class', { approval_required: ['destructive'] }, { approval_required: ['idempotent', 'destructive'] }, []],
    ['a dropped approval class', { approval_required: ['idempotent', 'destructive'] }, { approval_required: ['destructive'] }, ['predicate.approval_required']],
    ['all approval classes dropped', { approval_required: ['destructive'] }, {}, ['predicate.approval_required']],
  ])('%s', (_name, parent, child, fields) => {
    expect(predicateViolations(p(child), p(parent)).map((v) => v.field)).toEqual(fields);
  });
});
