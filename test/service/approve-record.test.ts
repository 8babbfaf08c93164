/**
 * An approve row's detail (src/service/approve-record.ts): the target as sent and the args, strings
 * cut at AUDIT_STRING_CHARS and marked, nested args kept whole only when their JSON is short. Held here
 * against the plain statement of that rule (the entries-and-spreads form it was first written in), on
 * generated calls, and for a `__proto__` key, which must stay a data key and never set a prototype.
 */
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { AUDIT_STRING_CHARS, approveDetail } from '../../src/service/approve-record.js';

function reference(req: { requested: Record<string, unknown> | null; args: Record<string, unknown> }, message: string | null): Record<string, unknown> {
  let truncated = false;
  const cut = (v: unknown): unknown => {
    if (typeof v !== 'string' || v.length <= AUDIT_STRING_CHARS) return v;
    truncated = true;
    return v.slice(0, AUDIT_STRING_CHARS);
  };
  const requested = req.requested === null ? null : Object.fromEntries(Object.entries(req.requested).map(([k, v]) => [k, cut(v)]));
  const args = Object.fromEntries(
    Object.entries(req.args).map(([k, v]) => [
      k,
      typeof v === 'object' && v !== null && JSON.stringify(v).length > AUDIT_STRING_CHARS ? cut(JSON.stringify(v)) : cut(v),
    ]),
  );
  return {
    ...(message === null ? {} : { message }),
    requested_target: requested,
    ...(Object.keys(args).length === 0 ? {} : { args }),
    ...(truncated ? { truncated: true } : {}),
  };
}

describe('approveDetail', () => {
  const long = fc.string({ minLength: AUDIT_STRING_CHARS - 2, maxLength: AUDIT_STRING_CHARS + 40 });
  const scalar = fc.oneof(fc.string({ maxLength: 8 }), long, fc.integer(), fc.boolean(), fc.constant(null));
  const nested = fc.oneof(fc.array(long, { maxLength: 2 }), fc.dictionary(fc.string({ maxLength: 4 }), scalar, { maxKeys: 3 }));
  const call = fc.record({
    requested: fc.option(fc.dictionary(fc.constantFrom('kind', 'path', 'url', 'host', 'repo'), fc.oneof(fc.string({ maxLength: 8 }), long)), { nil: null }),
    args: fc.dictionary(fc.string({ maxLength: 6 }), fc.oneof(scalar, nested), { maxKeys: 5 }),
  });

  test('equals the rule stated plainly, keys in the same order, on generated calls', () => {
    fc.assert(
      fc.property(call, fc.option(fc.string({ maxLength: 20 }), { nil: null }), (req, message) => {
        const got = approveDetail(req as Parameters<typeof approveDetail>[0], message);
        const want = reference(req, message);
        expect(got).toStrictEqual(want);
        expect(JSON.stringify(got)).toBe(JSON.stringify(want));
      }),
      { numRuns: 2000 },
    );
  });

  test('a __proto__ key in the args or the target stays an own data key and sets no prototype', () => {
    const args = JSON.parse('{"__proto__": {"admin": true}, "a": 1}') as Record<string, unknown>;
    const requested = JSON.parse('{"kind": "path", "__proto__": "x"}') as Record<string, unknown>;
    const d = approveDetail({ requested: requested as never, args }, null);
    const a = d.args as Record<string, unknown>;
    expect(Object.getPrototypeOf(a)).toBe(Object.prototype);
    expect(Object.keys(a)).toEqual(['__proto__', 'a']);
    expect((a as { admin?: unknown }).admin).toBeUndefined();
    expect(JSON.stringify(d)).toBe('{"requested_target":{"kind":"path","__proto__":"x"},"args":{"__proto__":{"admin":true},"a":1}}');
  });
});
