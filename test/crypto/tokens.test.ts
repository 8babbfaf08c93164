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
