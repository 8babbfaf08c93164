/**
 * The signing key ring (src/crypto/keys.ts) on the fixed keys of test/vectors/keys.json: what a
 * ring refuses to load, which key signs (the last private one), what /.well-known/jwks.json may
 * show (never `d`), and that rotation keeps every older key verifying.
 */
import { readFileSync } from 'node:fs';
import { calculateJwkThumbprint, type JWK } from 'jose';
import { describe, expect, test } from 'vitest';
import { generateSigningJwk, KeyRingError, loadKeyRing, rotate } from '../../src/crypto/keys.js';
import { signToken, verifyToken } from '../../src/crypto/tokens.js';
import type { CapabilityClaims } from '../../src/core/types.js';

const KEYS = JSON.parse(readFileSync(new URL('../vectors/keys.json', import.meta.url), 'utf8')) as Record<'old' | 'ring' | 'foreign', { keys: JWK[] }>;
const OLD = KEYS.old.keys[0] as JWK;
const NEW = KEYS.ring.keys[1] as JWK;
const FOREIGN = KEYS.foreign.keys[0] as JWK;
const publicOnly = ({ d: _d, ...pub }: JWK): JWK => pub;
const withoutKid = ({ kid: _kid, ...rest }: JWK): JWK => rest;

const NOW_S = Date.parse('2026-06-01T12:00:00Z') / 1000;
const CLAIMS = {
  id: 'cap_keys',
  tenant: 'ten_keys',
  trajectory: 't-keys',
  parent: null,
  depth: 0,
  rights: ['read'],
  objects: [{ kind: 'path', prefix: '/workspace' }],
  predicate: {},
  iat: NOW_S,
  nbf: NOW_S,
  exp: NOW_S + 60,
} as unknown as CapabilityClaims;

const kidOf = (token: string): unknown => (JSON.parse(Buffer.from(token.split('.')[0] ?? '', 'base64url').toString('utf8')) as { kid?: unknown }).kid;

describe('loadKeyRing refuses', () => {
  test.each<[string, { keys?: unknown }]>([
    ['a set without keys', {}],
    ['an empty set', { keys: [] }],
    ['keys that are no list', { keys: 'x' }],
    ['a null key', { keys: [null] }],
    ['a string key', { keys: ['key'] }],
    ['an RSA key', { keys: [{ kty: 'RSA', n: 'AQAB', e: 'AQAB', d: 'AQAB', kid: 'rsa' }] }],
    ['a P-256 key', { keys: [{ kty: 'EC', crv: 'P-256', x: OLD.x, y: OLD.x, d: OLD.d, kid: 'ec' }] }],
    ['an X25519 key', { keys: [{ ...OLD, crv: 'X25519' }] }],
    ['an Ed25519 key without x', { keys: [{ kty: 'OKP', crv: 'Ed25519', d: OLD.d, kid: 'nox' }] }],
    ['an Ed25519 key whose x is no key', { keys: [{ ...OLD, x: 'abc' }] }],
    ['an Ed25519 key whose d does not match its x', { keys: [{ ...OLD, d: FOREIGN.d }] }],
    ['a good key next to a bad one', { keys: [NEW, { kty: 'oct', k: 'c2VjcmV0' }] }],
    ['two keys under one kid', { keys: [OLD, { ...NEW, kid: OLD.kid }] }],
    ['the same key twice, kids derived', { keys: [withoutKid(OLD), withoutKid(OLD)] }],
    ['a set without any private key', { keys: [publicOnly(OLD), publicOnly(NEW)] }],
  ])('%s', async (_name, set) => {
    const e: unknown = await loadKeyRing(set).then(
      () => null,
      (x: unknown) => x,
    );
    expect(e).toBeInstanceOf(KeyRingError);
    expect((e as KeyRingError).code).toBe('bad_key_ring');
    // Messages never carry key material.
    expect((e as Error).message).not.toContain(OLD.d);
    expect((e as Error).message).not.toContain(FOREIGN.d);
  });
});

describe('loadKeyRing', () => {
  test.each<[string, JWK[], string]>([
    ['the only private key signs', [OLD], OLD.kid as string],
    ['the last private key signs, after older public ones', KEYS.ring.keys, NEW.kid as string],
    ['the last private key signs, among several private ones', [OLD, NEW, publicOnly(FOREIGN)], NEW.kid as string],
    ['order, not age, decides', [NEW, OLD], OLD.kid as string],
  ])('%s', async (_name, keys, activeKid) => {
    const ring = await loadKeyRing({ keys });
    expect(ring.activeKid).toBe(activeKid);
    const token = await signToken(ring, CLAIMS);
    expect(kidOf(token)).toBe(activeKid);
    expect((await verifyToken(ring, token)).ok).toBe(true);
    expect([...ring.verifyKeys.keys()].sort()).toEqual(keys.map((k) => k.kid).sort());
  });

  test('a key without a kid gets its RFC 7638 thumbprint (the pinned kid of keys.json)', async () => {
    const ring = await loadKeyRing({ keys: [withoutKid(OLD)] });
    expect(ring.activeKid).toBe(OLD.kid);
  });

  test('jwks holds the public half of every key, and never d', async () => {
    const ring = await loadKeyRing({ keys: [OLD, NEW, publicOnly(FOREIGN)] });
    expect(ring.jwks.keys.map((k) => Object.keys(k).sort())).toEqual(Array(3).fill(['alg', 'crv', 'kid', 'kty', 'use', 'x']));
    expect(ring.jwks.keys.map((k) => [k.kid, k.x])).toEqual([OLD, NEW, FOREIGN].map((k) => [k.kid, k.x]));
    expect(ring.jwks.keys.every((k) => k.kty === 'OKP' && k.crv === 'Ed25519' && k.alg === 'EdDSA' && k.use === 'sig')).toBe(true);
    const text = JSON.stringify(ring.jwks);
    for (const k of [OLD, NEW, FOREIGN]) expect(text).not.toContain(k.d);
  });

  test('a public-only key verifies but never signs', async () => {
    const signer = await loadKeyRing({ keys: [OLD] });
    const verifier = await loadKeyRing({ keys: [publicOnly(OLD), NEW] });
    expect(verifier.activeKid).toBe(NEW.kid);
    const r = await verifyToken(verifier, await signToken(signer, CLAIMS));
    expect(r.ok && r.kid).toBe(OLD.kid);
  });
});

describe('rotation', () => {
  test('rotate appends a fresh active key and keeps every old key verifying', async () => {
    const before = await loadKeyRing(KEYS.old);
    const oldToken = await signToken(before, CLAIMS);
    const input = structuredClone(KEYS.old);
    const rotated = await rotate(input);
    expect(input).toEqual(KEYS.old);
    expect(rotated.keys.slice(0, -1)).toEqual(KEYS.old.keys);

    const after = await loadKeyRing(rotated);
    expect(after.activeKid).not.toBe(before.activeKid);
    const fresh = await signToken(after, CLAIMS);
    expect(kidOf(fresh)).toBe(after.activeKid);

    const old = await verifyToken(after, oldToken);
    expect(old.ok && old.kid).toBe(before.activeKid);
    expect((await verifyToken(after, fresh)).ok).toBe(true);
    // A ring from before the rotation does not know the new key.
    const stale = await verifyToken(before, fresh);
    expect(stale.ok ? 'ok' : stale.code).toBe('unknown_key');
  });

  test('retiring a key (dropping it from the set) makes its tokens unknown', async () => {
    const oldToken = await signToken(await loadKeyRing(KEYS.old), CLAIMS);
    const retired = await loadKeyRing({ keys: [NEW] });
    const r = await verifyToken(retired, oldToken);
    expect(r.ok ? 'ok' : r.code).toBe('unknown_key');
  });

  test('generateSigningJwk makes a new private key named by the start of its thumbprint', async () => {
    const a = await generateSigningJwk();
    const b = await generateSigningJwk();
    expect(a.x).not.toBe(b.x);
    expect(typeof a.d).toBe('string');
    expect(a.kid).toBe((await calculateJwkThumbprint({ kty: 'OKP', crv: 'Ed25519', x: a.x as string })).slice(0, 16));
    expect((await loadKeyRing({ keys: [a] })).activeKid).toBe(a.kid);
  });
});
