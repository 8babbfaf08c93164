/**
 * checkAttenuation (C_c ⪯ C_p of API.md) against the JSON vectors of test/vectors/attenuation.json:
 * every violation is listed, not only the first, with its component and code.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, test } from 'vitest';
import { checkAttenuation, type ChildSpec } from '../../src/core/attenuate.js';
import { canonicalObject } from '../../src/core/objects.js';
import { canonicalPredicate } from '../../src/core/predicate.js';
import type { CanonicalObject, CanonicalPredicate, CapabilityClaims, RawObject, RawPredicate, Right, VerifiedCapability } from '../../src/core/types.js';

interface RawParent extends Omit<CapabilityClaims, 'objects' | 'predicate'> {
  readonly objects: RawObject[];
  readonly predicate: RawPredicate;
}

interface Vector {
  readonly name: string;
  readonly now: string;
  readonly parent: RawParent;
  readonly child: { rights: Right[]; objects: RawObject[]; predicate: RawPredicate; exp: number };
  readonly expected: string[];
}

const VECTORS = (JSON.parse(readFileSync(new URL('../vectors/attenuation.json', import.meta.url), 'utf8')) as { cases: Vector[] }).cases;

function objects(raw: RawObject[]): CanonicalObject[] {
  return raw.map((o) => {
    const c = canonicalObject(o);
    if (!c.ok) throw new Error(`vector object ${JSON.stringify(o)} is not valid: ${c.error}`);
    return c.value;
  });
}

function predicate(raw: RawPredicate): CanonicalPredicate {
  const c = canonicalPredicate(raw);
  if (!c.ok) throw new Error(`vector predicate ${JSON.stringify(raw)} is not valid`);
  return c.value;
}

describe('attenuation vectors', () => {
  test.each(VECTORS.map((v) => [v.name, v] as const))('%s', (_name, v) => {
    const parent = { ...v.parent, objects: objects(v.parent.objects), predicate: predicate(v.parent.predicate) } as CapabilityClaims as VerifiedCapability;
    const child: ChildSpec = { rights: v.child.rights, objects: objects(v.child.objects), predicate: predicate(v.child.predicate), exp: v.child.exp };
    const got = checkAttenuation(parent, child, Date.parse(v.now)).map((x) => `${x.component}/${x.code}`);
    expect(got.sort()).toEqual(v.expected);
  });

  test('the vectors cover every violation code checkAttenuation owns, alone and together', () => {
    const codes = new Set(VECTORS.flatMap((v) => v.expected.map((e) => e.split('/')[1])));
    // parent_revoked is the store's to know; it is added by the authority, not the core.
    expect([...codes].sort()).toEqual([
      'depth_exhausted',
      'expiry_extended',
      'object_widened',
      'parent_expired',
      'parent_invalid',
      'predicate_widened',
      'right_widened',
    ]);
    expect(VECTORS.length).toBeGreaterThanOrEqual(12);
    expect(VECTORS.filter((v) => v.expected.length === 0).length).toBeGreaterThanOrEqual(3);
    expect(VECTORS.filter((v) => new Set(v.expected).size >= 3).length).toBeGreaterThanOrEqual(2);
  });

  test('every violation carries a detail', () => {
    const v = VECTORS.find((x) => x.expected.length >= 5);
    if (v === undefined) throw new Error('no vector with several violations');
    const parent = { ...v.parent, objects: objects(v.parent.objects), predicate: predicate(v.parent.predicate) } as CapabilityClaims as VerifiedCapability;
    const got = checkAttenuation(parent, { ...v.child, objects: objects(v.child.objects), predicate: predicate(v.child.predicate) }, Date.parse(v.now));
    expect(got.every((x) => typeof x.detail === 'string' && x.detail.length > 0)).toBe(true);
  });

  // issue 16: two violations of one code are told apart by the field each names.
  test.each(VECTORS.filter((v) => v.expected.length > 0).map((v) => [v.name, v] as const))('every violation names its request field: %s', (_name, v) => {
    const parent = { ...v.parent, objects: objects(v.parent.objects), predicate: predicate(v.parent.predicate) } as CapabilityClaims as VerifiedCapability;
    const got = checkAttenuation(parent, { ...v.child, objects: objects(v.child.objects), predicate: predicate(v.child.predicate) }, Date.parse(v.now));
    const FIELD_OF: Record<string, RegExp> = {
      rights: /^rights$/,
      objects: /^objects\.\d+$/,
      predicate: /^predicate\.(max_cost|budget|max_calls|max_depth|args)$/,
      expiry: /^ttl_s$/,
      parent: /^parent_token$/,
    };
    for (const x of got) expect(x.field, `${x.component}/${x.code}`).toMatch(FIELD_OF[x.component] ?? /^$/);
    for (const x of got.filter((y) => y.component === 'objects')) expect(x.detail.startsWith(`${x.field} `)).toBe(true);
    for (const x of got.filter((y) => y.component === 'predicate' || y.component === 'rights' || y.component === 'expiry')) {
      expect(x.detail.startsWith(`${x.field}:`)).toBe(true);
    }
  });

  test('the objects field is the index of the widened object', () => {
    const v = VECTORS.find((x) => x.expected.filter((e) => e === 'objects/object_widened').length >= 1);
    if (v === undefined) throw new Error('no vector with a widened object');
    const parent = { ...v.parent, objects: objects(v.parent.objects), predicate: predicate(v.parent.predicate) } as CapabilityClaims as VerifiedCapability;
    const childObjects = objects(v.child.objects);
    const got = checkAttenuation(parent, { ...v.child, objects: childObjects, predicate: predicate(v.child.predicate) }, Date.parse(v.now));
    for (const x of got.filter((y) => y.component === 'objects')) {
      const i = Number(x.field.split('.')[1]);
      expect(
        checkAttenuation(
          parent,
          { ...v.child, objects: [childObjects[i] as CanonicalObject], predicate: predicate(v.child.predicate) },
          Date.parse(v.now),
        ).some((y) => y.code === 'object_widened'),
      ).toBe(true);
    }
  });
});
