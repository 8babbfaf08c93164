/**
 * Capability tokens against the JSON vectors of test/vectors/tokens.json (fixed keys, fixed now):
 * verifyToken, then checkValidity, must give the pinned code for every forged, broken, foreign,
 * rotated, expired and valid token, and the pinned claims for the valid ones.
 */
import { readFileSync } from 'node:fs';
import { beforeAll, describe, expect, test } from 'vitest';
import { checkValidity } from '../../src/core/approve.js';
import { loadKeyRing, type KeyRing } from '../../src/crypto/keys.js';
import { signToken, verifyToken } from '../../src/crypto/tokens.js';
import type { CapabilityClaims } from '../../src/core/types.js';

type RingName = 'ring' | 'old' | 'foreign';

interface Vector {
  readonly name: string;
  readonly ring: RingName;
  readonly token: string;
  readonly expected: string;
  readonly claims?: CapabilityClaims;
  readonly kid?: string;
}

const read = <T>(file: string): T => JSON.parse(readFileSync(new URL(`../vectors/${file}`, import.meta.url), 'utf8')) as T;
const KEYS = read<Record<RingName, { keys: Record<string, string>[] }>>('keys.json');
const { now, vectors: VECTORS } = read<{ now: string; vectors: Vector[] }>('tokens.json');
const NOW_MS = Date.parse(now);

let rings: Record<RingName, KeyRing>;
beforeAll(async () => {
  rings = { ring: await loadKeyRing(KEYS.ring), old: await loadKeyRing(KEYS.old), foreign: await loadKeyRing(KEYS.foreign) };
});

describe('token vectors', () => {
  test.each(VECTORS.map((v) => [v.name, v] as const))('%s', async (_name, v) => {
    const r = await verifyToken(rings[v.ring], v.token);
    const code = r.ok ? (checkValidity(r.capability, NOW_MS)?.code ?? 'ok') : r.code;
    expect(code).toBe(v.expected);
    if (v.expected === 'ok') {
      expect(r.ok && r.capability).toEqual(v.claims);
      expect(r.ok && r.kid).toBe(v.kid);
    }
    // Messages never carry the token or any part of it.
    if (!r.ok && v.token !== '') for (const part of v.token.split('.')) if (part.length > 8) expect(r.message).not.toContain(part);
  });

  test('cover every code verifyToken and checkValidity give, and the required cases', () => {
    expect([...new Set(VECTORS.map((v) => v.expected))].sort()).toEqual(['bad_token', 'expired', 'not_yet_valid', 'ok', 'unknown_key']);
    const names = VECTORS.map((v) => v.name);
    for (const required of [
      'valid token',
      'tampered payload',
      'tampered signature',
      'alg none',
      'HS256 with the raw public key bytes',
      'wrong key',
      'unknown kid',
      'missing kid',
      'truncated',
      'expired by 1 s',
      'not yet valid',
      'old (rotated) key',
    ]) {
      expect(names.some((n) => n.includes(required))).toBe(true);
    }
  });

  test('signToken reproduces the pinned valid token (Ed25519 is deterministic; the wire format is pinned)', async () => {
    const v = VECTORS.find((x) => x.name === 'valid token');
    if (v?.claims === undefined) throw new Error('no valid token vector');
    expect(await signToken(rings.ring, v.claims)).toBe(v.token);
  });

  test('the token header pins alg EdDSA and the kid of the active key', () => {
    const v = VECTORS.find((x) => x.name === 'valid token');
    const header = JSON.parse(Buffer.from(v?.token.split('.')[0] ?? '', 'base64url').toString('utf8')) as unknown;
    expect(header).toEqual({ alg: 'EdDSA', kid: rings.ring.activeKid });
  });
});

describe('only the canonical compact form verifies (issue 14)', () => {
  let ring: KeyRing;
  let token: string;
  beforeAll(async () => {
    ring = rings.ring;
    const valid = VECTORS.find((v) => v.expected === 'ok' && v.ring === 'ring');
    if (valid === undefined) throw new Error('no valid vector');
    token = valid.token;
    expect((await verifyToken(ring, token)).ok).toBe(true);
  });

  /** The same signature bytes, with the unused low bits of its last character set differently. */
  const otherUnusedBits = (t: string): string[] => {
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
    const last = alphabet.indexOf(t.at(-1) as string);
    // A 64-byte signature is 86 characters: the last carries 2 bits, its low 4 are unused.
    return Array.from({ length: 15 }, (_, i) => t.slice(0, -1) + alphabet[(last & ~0xf) | ((last + i + 1) & 0xf)]);
  };

  test.each([
    ['padding on the signature', (t: string) => `${t}==`],
    ['padding on the payload', (t: string) => t.replace(/\.([^.]+)\./, (_m, p: string) => `.${p}=.`)],
    ['a trailing newline', (t: string) => `${t}\n`],
    ['a leading space', (t: string) => ` ${t}`],
    ['whitespace inside the signature', (t: string) => t.replace(/(\.[^.]{10})/g, '$1 ').replace(/ (?=[^.]*\.[^.]*$)/, '')],
    ['standard base64 characters', (t: string) => t.replace(/-/g, '+').replace(/_/g, '/')],
  ])('%s is bad_token', async (_name, mutate) => {
    const variant = mutate(token);
    if (variant === token) return;
    const r = await verifyToken(ring, variant);
    expect(r.ok ? 'ok' : r.code).toBe('bad_token');
  });

  test('every other setting of the unused bits in the signature is bad_token', async () => {
    for (const variant of otherUnusedBits(token)) {
      expect(variant).not.toBe(token);
      const r = await verifyToken(ring, variant);
      expect(r.ok ? 'ok' : r.code).toBe('bad_token');
    }
  });
});
