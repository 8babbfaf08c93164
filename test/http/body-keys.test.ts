/**
 * The keys a body may not have (src/http/body-keys.ts): `__proto__` and a key repeated within one
 * object, found by counting members in the text against the parsed keys and named by a second parse.
 * Look-alikes (colons and quotes inside strings, equal keys in different objects) must pass.
 */
import fc from 'fast-check';
import { parseTree, type Node } from 'jsonc-parser';
import { describe, expect, test } from 'vitest';
import { refusedKey } from '../../src/http/body-keys.js';

const check = (text: string): ReturnType<typeof refusedKey> => refusedKey(text, JSON.parse(text));

describe('refusedKey', () => {
  test.each([
    ['no keys', '{}'],
    ['a scalar body', '42'],
    ['equal keys in sibling objects', '{"a":{"k":1},"b":{"k":2}}'],
    ['equal keys in array elements', '[{"k":1},{"k":2}]'],
    ['a colon inside a string value', '{"a":"x:y","b":":::"}'],
    ['an escaped quote before a colon in a string', '{"a":"x\\":y","b":1}'],
    ['an escaped backslash ending a string', '{"a":"x\\\\","b":"c:d"}'],
    ['an escaped backslash then an escaped quote before a colon', '{"a":"x\\\\\\":y","b":1}'],
    ['a string of backslashes and quotes only', '{"a":"\\\\\\"\\\\","b":"\\""}'],
    ['a key holding a colon', '{"a:b":1,"a":2}'],
    ['an escaped key unlike the others', '{"a":1,"\\u0062":2}'],
    ['numbers with exponents', '{"a":1e3,"b":[1,2,{"c":-0.5E-2}]}'],
  ])('%s passes', (_name, text) => {
    expect(check(text)).toBeUndefined();
  });

  test.each([
    ['at the top', '{"a":1,"a":2}', 'a'],
    ['in a nested object', '{"x":{"y":{"a":1,"b":2,"a":3}}}', 'x.y.a'],
    ['in an array element', '{"objects":[{"k":1},{"k":1,"k":2}]}', 'objects.1.k'],
    ['written once plainly and once escaped', '{"target":1,"t\\u0061rget":2}', 'target'],
    ['with the same value both times', '{"a":1,"a":1}', 'a'],
    ['among a colon-laden string', '{"s":"a:b:c","s":"d"}', 's'],
    ['after a string ending in escaped backslashes', '{"s":"a\\\\\\\\","s":"\\":"}', 's'],
  ])('a key repeated %s is named', (_name, text, path) => {
    expect(check(text)).toEqual({ path, message: 'repeated key' });
  });

  test('__proto__ is refused as an unknown field, before repeats', () => {
    expect(check('{"a":{"__proto__":{},"b":1,"b":2}}')).toEqual({ path: 'a.__proto__', message: 'unknown field' });
  });

  test('a deep repeat is named, and one deeper than the second parser recurses is refused as the body', () => {
    const nest = (depth: number): string => `${'{"a":'.repeat(depth)}{"k":1,"k":2}${'}'.repeat(depth)}`;
    expect(check(nest(100))).toEqual({ path: `${'a.'.repeat(100)}k`, message: 'repeated key' });
    expect(check(nest(20_000))).toEqual({ path: 'body', message: 'repeated key' });
  });

  /** Whether some object of `text` holds a key twice, by a full parse (the reference). */
  const repeats = (text: string): boolean => {
    const stack: (Node | undefined)[] = [parseTree(text)];
    for (let node = stack.pop(); node !== undefined; node = stack.pop()) {
      const keys = node.type === 'object' ? (node.children ?? []).map((m) => m.children?.[0]?.value as string) : [];
      if (new Set(keys).size !== keys.length) return true;
      if (node.type === 'object') for (const m of node.children ?? []) stack.push(m.children?.[1]);
      else stack.push(...(node.children ?? []));
    }
    return false;
  };

  test('finds a repeat exactly when a full parse does, whatever quotes, backslashes and colons the strings hold', () => {
    // Keys and strings from a small alphabet heavy in the characters the member count must step over.
    const str = fc.string({ unit: fc.constantFrom('a', 'b', '"', '\\', ':', '{', ','), maxLength: 6 });
    const value = fc.letrec<{ v: unknown }>((tie) => ({
      v: fc.oneof(
        { depthSize: 'small' },
        str,
        fc.integer(),
        fc.array(tie('v'), { maxLength: 3 }),
        fc.array(fc.tuple(str, tie('v')), { maxLength: 4 }).map((members) => ({ members })),
      ),
    })).v;
    /** JSON text with members written as given, repeats included (JSON.stringify would drop them). */
    const write = (v: unknown): string => {
      if (Array.isArray(v)) return `[${v.map(write).join(',')}]`;
      if (typeof v === 'object' && v !== null) {
        const { members } = v as { members: [string, unknown][] };
        return `{${members.map(([k, x]) => `${JSON.stringify(k)}:${write(x)}`).join(',')}}`;
      }
      return JSON.stringify(v);
    };
    fc.assert(
      fc.property(value, (v) => {
        const text = write(v);
        const refused = check(text);
        expect(refused?.message === 'repeated key').toBe(repeats(text));
      }),
      { numRuns: 2000 },
    );
  });
});
