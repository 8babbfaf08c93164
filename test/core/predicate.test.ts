/**
 * The predicate P (API.md "P, predicate"): canonicalization, implication for attenuation ("every
 * bound the parent sets is set by the child at least as tightly") and per-call evaluation of the
 * `args` bounds ("a bounded argument that is missing from the call fails its bound").
 */
import { describe, expect, test } from 'vitest';
import { canonicalPredicate, failedArgBound, inheritPredicate, lengthOf, predicateViolations } from '../../src/core/predicate.js';
import type { ArgBound, CanonicalPredicate, RawPredicate, Scalar } from '../../src/core/types.js';

function pred(raw: RawPredicate): CanonicalPredicate {
  const c = canonicalPredicate(raw);
  if (!c.ok) throw new Error(`test predicate ${JSON.stringify(raw)} is not valid`);
  return c.value;
}

const max = (arg: string, value: number): ArgBound => ({ kind: 'max', arg, value });
const min = (arg: string, value: number): ArgBound => ({ kind: 'min', arg, value });
const maxLength = (arg: string, value: number): ArgBound => ({ kind: 'max_length', arg, value });
const oneOf = (arg: string, values: Scalar[]): ArgBound => ({ kind: 'one_of', arg, values });

describe('canonicalPredicate', () => {
  test.each<[string, RawPredicate, RawPredicate]>([
    ['the empty predicate', {}, {}],
    [
      'every field kept',
      { max_cost: 0.5, budget: 10, max_calls: 3, max_depth: 2, args: [max('n', 1)] },
      { max_cost: 0.5, budget: 10, max_calls: 3, max_depth: 2, args: [max('n', 1)] },
    ],
    ['an empty args list dropped', { args: [] }, {}],
    ['duplicate bounds dropped, order kept', { args: [max('n', 1), min('n', 0), max('n', 1)] }, { args: [max('n', 1), min('n', 0)] }],
    [
      'duplicate one_of values dropped, types kept apart',
      { args: [oneOf('b', [1, 1, '1', true, true, 'main'])] },
      { args: [oneOf('b', [1, '1', true, 'main'])] },
    ],
    ['bounds equal once their values are deduplicated', { args: [oneOf('b', ['x', 'x']), oneOf('b', ['x'])] }, { args: [oneOf('b', ['x'])] }],
  ])('%s', (_name, raw, expected) => {
    expect(canonicalPredicate(raw)).toEqual({ ok: true, value: expected });
  });

  test('-0 costs become 0', () => {
    const c = pred({ max_cost: -0, budget: -0 });
    expect(Object.is(c.max_cost, 0)).toBe(true);
    expect(Object.is(c.budget, 0)).toBe(true);
  });

  test.each<[string, RawPredicate, string[]]>([
    ['a max_cost with 7 decimals', { max_cost: 0.0000001 }, ['max_cost']],
    ['a budget over 1e12', { budget: 2e12 }, ['budget']],
    ['a negative max_cost', { max_cost: -1 }, ['max_cost']],
    ['both cost fields bad at once', { max_cost: 0.1234567, budget: Number.NaN }, ['max_cost', 'budget']],
  ])('rejects %s, naming each field', (_name, raw, paths) => {
    const c = canonicalPredicate(raw);
    expect(c.ok).toBe(false);
    expect('errors' in c ? c.errors.map((e) => e.path) : []).toEqual(paths);
  });
});

describe('predicateViolations (child implies parent)', () => {
  const W = 'predicate_widened';
  const D = 'depth_exhausted';
  test.each<[string, RawPredicate, RawPredicate, string[]]>([
    ['nothing set by either', {}, {}, []],
    ['bounds the parent does not set', { max_cost: 1, budget: 2, max_calls: 3, max_depth: 4, args: [max('n', 1)] }, {}, []],
    ['max_cost unset under a parent max_cost', {}, { max_cost: 1 }, [W]],
    ['max_cost above the parent', { max_cost: 1.000001 }, { max_cost: 1 }, [W]],
    ['max_cost equal to the parent', { max_cost: 1 }, { max_cost: 1 }, []],
    ['max_cost below the parent', { max_cost: 0 }, { max_cost: 1 }, []],
    ['budget unset under a parent budget', {}, { budget: 10 }, [W]],
    ['budget above the parent by one micro-unit', { budget: 10.000001 }, { budget: 10 }, [W]],
    ['budget equal to the parent', { budget: 0.3 }, { budget: 0.3 }, []],
    ['max_calls unset under a parent max_calls', {}, { max_calls: 10 }, [W]],
    ['max_calls above the parent', { max_calls: 11 }, { max_calls: 10 }, [W]],
    ['max_calls equal to the parent', { max_calls: 10 }, { max_calls: 10 }, []],
    ['any child of a parent with max_depth 0', { max_depth: 0 }, { max_depth: 0 }, [D]],
    ['an unbounded child of a parent with max_depth 0', {}, { max_depth: 0 }, [D]],
    ['max_depth unset under a parent max_depth', {}, { max_depth: 2 }, [W]],
    ['max_depth equal to the parent', { max_depth: 2 }, { max_depth: 2 }, [W]],
    ['max_depth one below the parent', { max_depth: 1 }, { max_depth: 2 }, []],
    ['max_depth 0 under max_depth 1', { max_depth: 0 }, { max_depth: 1 }, []],
    ['no bound on a bounded argument', {}, { args: [max('n', 10)] }, [W]],
    ['max: a tighter max', { args: [max('n', 9)] }, { args: [max('n', 10)] }, []],
    ['max: an equal max', { args: [max('n', 10)] }, { args: [max('n', 10)] }, []],
    ['max: a looser max', { args: [max('n', 11)] }, { args: [max('n', 10)] }, [W]],
    ['max: a max on another argument', { args: [max('m', 1)] }, { args: [max('n', 10)] }, [W]],
    ['max: a min does not bound above', { args: [min('n', 0)] }, { args: [max('n', 10)] }, [W]],
    ['max: a one_of of numbers under it', { args: [oneOf('n', [1, 10])] }, { args: [max('n', 10)] }, []],
    ['max: a one_of with a number over it', { args: [oneOf('n', [1, 11])] }, { args: [max('n', 10)] }, [W]],
    ['max: a one_of with a string', { args: [oneOf('n', [1, '2'])] }, { args: [max('n', 10)] }, [W]],
    ['min: a tighter min', { args: [min('n', 6)] }, { args: [min('n', 5)] }, []],
    ['min: a looser min', { args: [min('n', 4)] }, { args: [min('n', 5)] }, [W]],
    ['min: a max does not bound below', { args: [max('n', 6)] }, { args: [min('n', 5)] }, [W]],
    ['min: a one_of of numbers over it', { args: [oneOf('n', [5, 7])] }, { args: [min('n', 5)] }, []],
    ['min: a one_of with a number under it', { args: [oneOf('n', [4, 7])] }, { args: [min('n', 5)] }, [W]],
    ['min: a one_of with a boolean', { args: [oneOf('n', [true])] }, { args: [min('n', 0)] }, [W]],
    ['max_length: a tighter max_length', { args: [maxLength('s', 2)] }, { args: [maxLength('s', 3)] }, []],
    ['max_length: a looser max_length', { args: [maxLength('s', 4)] }, { args: [maxLength('s', 3)] }, [W]],
    ['max_length: a one_of of short strings, counted in code points', { args: [oneOf('s', ['abc', '😀😀😀'])] }, { args: [maxLength('s', 3)] }, []],
    ['max_length: a one_of with a long string', { args: [oneOf('s', ['abcd'])] }, { args: [maxLength('s', 3)] }, [W]],
    ['max_length: a one_of with a number', { args: [oneOf('s', [1])] }, { args: [maxLength('s', 3)] }, [W]],
    ['max_length: a max does not bound a length', { args: [max('s', 3)] }, { args: [maxLength('s', 3)] }, [W]],
    ['one_of: a subset', { args: [oneOf('b', ['main'])] }, { args: [oneOf('b', ['main', 'dev'])] }, []],
    ['one_of: the same set reordered', { args: [oneOf('b', ['dev', 'main'])] }, { args: [oneOf('b', ['main', 'dev'])] }, []],
    ['one_of: a value the parent lacks', { args: [oneOf('b', ['main', 'prod'])] }, { args: [oneOf('b', ['main', 'dev'])] }, [W]],
    ['one_of: a number for a string', { args: [oneOf('x', [1])] }, { args: [oneOf('x', ['1'])] }, [W]],
    ['one_of: a boolean for a number', { args: [oneOf('x', [true])] }, { args: [oneOf('x', [1])] }, [W]],
    ['one_of: a max is no one_of', { args: [max('x', 1)] }, { args: [oneOf('x', [1])] }, [W]],
    ['one child bound implying two parent bounds', { args: [oneOf('n', [5])] }, { args: [max('n', 10), min('n', 0)] }, []],
    ['two parent bounds, one implied', { args: [max('n', 10)] }, { args: [max('n', 10), min('n', 0)] }, [W]],
    [
      'every parent bound dropped at once',
      {},
      { max_cost: 1, budget: 5, max_calls: 3, max_depth: 2, args: [max('n', 1), oneOf('b', ['x'])] },
      [W, W, W, W, W, W],
    ],
    ['depth exhausted alongside widened bounds', { max_cost: 2 }, { max_cost: 1, max_depth: 0 }, [W, D]],
  ])('%s', (_name, child, parent, expected) => {
    const codes = predicateViolations(pred(child), pred(parent)).map((v) => v.code);
    expect(codes.sort()).toEqual([...expected].sort());
  });

  test('every violation is in the predicate component', () => {
    const vs = predicateViolations(pred({}), pred({ max_cost: 1, max_depth: 0, args: [max('n', 1)] }));
    expect(vs.length).toBe(3);
    expect(vs.every((v) => v.component === 'predicate')).toBe(true);
  });
});

describe('predicateViolations name their field (issue 16)', () => {
  test.each<[string, RawPredicate, RawPredicate, string[]]>([
    ['max_calls raised', { max_calls: 11 }, { max_calls: 10 }, ['predicate.max_calls']],
    ['budget raised and max_calls raised', { budget: 2, max_calls: 11 }, { budget: 1, max_calls: 10 }, ['predicate.budget', 'predicate.max_calls']],
    ['max_cost raised', { max_cost: 2 }, { max_cost: 1 }, ['predicate.max_cost']],
    ['max_depth not lowered', { max_depth: 2 }, { max_depth: 2 }, ['predicate.max_depth']],
    ['max_depth exhausted', { max_depth: 0 }, { max_depth: 0 }, ['predicate.max_depth']],
    ['an args bound not implied', { args: [max('n', 11)] }, { args: [max('n', 10)] }, ['predicate.args']],
    [
      'every field at once',
      { max_cost: 2, budget: 6, max_calls: 4, max_depth: 2, args: [max('n', 2)] },
      { max_cost: 1, budget: 5, max_calls: 3, max_depth: 2, args: [max('n', 1)] },
      ['predicate.max_cost', 'predicate.budget', 'predicate.max_calls', 'predicate.max_depth', 'predicate.args'],
    ],
  ])('%s', (_name, child, parent, fields) => {
    const vs = predicateViolations(pred(child), pred(parent));
    expect(vs.map((v) => v.field)).toEqual(fields);
    // The detail names the field too, so the message alone tells two widened fields apart.
    for (const v of vs) expect(v.detail.startsWith(`${v.field}:`)).toBe(true);
  });

  test('an args violation names the argument', () => {
    const [v] = predicateViolations(pred({}), pred({ args: [oneOf('branch', ['main'])] }));
    expect(v?.detail).toContain('branch');
  });
});

describe('inheritPredicate: omitted fields take the parent bound (issue 16)', () => {
  const parent: RawPredicate = { max_cost: 0.5, budget: 10, max_calls: 7, max_depth: 3, args: [max('n', 10)] };
  test.each<[string, RawPredicate, RawPredicate, RawPredicate]>([
    ['everything omitted: the parent bounds, max_depth one less', {}, parent, { max_cost: 0.5, budget: 10, max_calls: 7, max_depth: 2, args: [max('n', 10)] }],
    [
      'only max_calls omitted',
      { max_cost: 0.1, budget: 1, max_depth: 0, args: [max('n', 1)] },
      parent,
      { max_cost: 0.1, budget: 1, max_calls: 7, max_depth: 0, args: [max('n', 1)] },
    ],
    ['a given tighter bound is kept', { max_calls: 2 }, parent, { max_cost: 0.5, budget: 10, max_calls: 2, max_depth: 2, args: [max('n', 10)] }],
    [
      'a given looser bound is kept (and refused later)',
      { budget: 20 },
      parent,
      { max_cost: 0.5, budget: 20, max_calls: 7, max_depth: 2, args: [max('n', 10)] },
    ],
    [
      'a given 0 is a bound, not an omission',
      { max_calls: 0, budget: 0 },
      parent,
      { max_cost: 0.5, budget: 0, max_calls: 0, max_depth: 2, args: [max('n', 10)] },
    ],
    ['args given replace the list as a whole', { args: [min('m', 1)] }, parent, { max_cost: 0.5, budget: 10, max_calls: 7, max_depth: 2, args: [min('m', 1)] }],
    ['an empty args list given is not an omission', { args: [] }, parent, { max_cost: 0.5, budget: 10, max_calls: 7, max_depth: 2 }],
    ['an unbounded parent leaves omitted fields unbounded', { max_calls: 3 }, {}, { max_calls: 3 }],
    ['a parent with max_depth 0 passes nothing on for max_depth', {}, { max_depth: 0, budget: 1 }, { budget: 1 }],
  ])('%s', (_name, given, parentRaw, expected) => {
    const effective = inheritPredicate(given, pred(given), pred(parentRaw));
    expect(effective).toEqual(expected);
    // Field order as canonicalPredicate writes it, so the token claims serialize alike.
    expect(JSON.stringify(effective)).toBe(JSON.stringify(pred(expected)));
  });

  test('an omitted field never widens; a given looser one still does, naming it', () => {
    expect(predicateViolations(inheritPredicate({}, pred({}), pred(parent)), pred(parent))).toEqual([]);
    const given: RawPredicate = { max_calls: 8 };
    const vs = predicateViolations(inheritPredicate(given, pred(given), pred(parent)), pred(parent));
    expect(vs.map((v) => [v.code, v.field])).toEqual([['predicate_widened', 'predicate.max_calls']]);
  });
});

describe('failedArgBound (evaluation)', () => {
  test.each<[string, ArgBound, Record<string, Scalar>, boolean]>([
    ['max: below', max('n', 10), { n: -1 }, true],
    ['max: equal', max('n', 10), { n: 10 }, true],
    ['max: above', max('n', 10), { n: 10.5 }, false],
    ['max: a numeric string', max('n', 10), { n: '5' }, false],
    ['max: a boolean', max('n', 10), { n: true }, false],
    ['max: missing', max('n', 10), {}, false],
    ['max: only other arguments', max('n', 10), { m: 1 }, false],
    ['min: equal', min('n', 5), { n: 5 }, true],
    ['min: above', min('n', 5), { n: 1e9 }, true],
    ['min: below', min('n', 5), { n: 4.9 }, false],
    ['min: a numeric string', min('n', 5), { n: '9' }, false],
    ['min: missing', min('n', 5), {}, false],
    ['max_length: shorter', maxLength('s', 3), { s: 'ab' }, true],
    ['max_length: empty', maxLength('s', 3), { s: '' }, true],
    ['max_length: equal', maxLength('s', 3), { s: 'abc' }, true],
    ['max_length: longer', maxLength('s', 3), { s: 'abcd' }, false],
    ['max_length: astral characters count once', maxLength('s', 3), { s: '😀😀😀' }, true],
    ['max_length: a number', maxLength('s', 3), { s: 1 }, false],
    ['max_length: missing', maxLength('s', 3), {}, false],
    ['one_of: a listed string', oneOf('b', ['main', 'dev', 1, true]), { b: 'main' }, true],
    ['one_of: another case', oneOf('b', ['main', 'dev', 1, true]), { b: 'Main' }, false],
    ['one_of: a listed number', oneOf('b', ['main', 'dev', 1, true]), { b: 1 }, true],
    ['one_of: a number as a string', oneOf('b', ['main', 'dev', 1, true]), { b: '1' }, false],
    ['one_of: a listed boolean', oneOf('b', ['main', 'dev', 1, true]), { b: true }, true],
    ['one_of: a boolean as a string', oneOf('b', ['main', 'dev', 1, true]), { b: 'true' }, false],
    ['one_of: an unlisted boolean', oneOf('b', ['main', 'dev', 1, true]), { b: false }, false],
    ['one_of: missing', oneOf('b', ['main', 'dev', 1, true]), {}, false],
    ['one_of: a name of Object.prototype, missing', oneOf('toString', ['x']), {}, false],
    // Only own properties are arguments: an inherited value that would meet the bound is still missing.
    ['max: a value only inherited, missing', max('n', 10), Object.create({ n: 1 }) as Record<string, Scalar>, false],
    ['one_of: a value only inherited, missing', oneOf('b', ['main']), Object.create({ b: 'main' }) as Record<string, Scalar>, false],
  ])('%s', (_name, bound, args, holds) => {
    expect(failedArgBound(pred({ args: [bound] }), args) === null).toBe(holds);
  });

  test.each<[string, RawPredicate, Record<string, Scalar>, boolean]>([
    ['no bounds, no arguments', {}, {}, true],
    ['no bounds, any arguments', {}, { n: 1, s: 'x' }, true],
    ['unbounded extra arguments', { args: [max('n', 1)] }, { n: 1, other: 'x' }, true],
    ['every bound holds', { args: [max('n', 10), min('n', 0), oneOf('b', ['main'])] }, { n: 5, b: 'main' }, true],
    ['the last bound fails', { args: [max('n', 10), min('n', 0), oneOf('b', ['main'])] }, { n: 5, b: 'dev' }, false],
    ['the first bound fails', { args: [max('n', 10), oneOf('b', ['main'])] }, { n: 50, b: 'main' }, false],
  ])('all bounds must hold: %s', (_name, raw, args, holds) => {
    expect(failedArgBound(pred(raw), args) === null).toBe(holds);
  });
});

describe('lengthOf', () => {
  test.each<[string, number]>([
    ['', 0],
    ['abc', 3],
    ['ä', 1],
    ['😀', 1],
    ['a😀b', 3],
  ])('%j has %d code points', (s, n) => {
    expect(lengthOf(s)).toBe(n);
  });
});
