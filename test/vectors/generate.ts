/**
 * Writes test/vectors/tokens.json from the fixed keys of keys.json: `npx tsx test/vectors/generate.ts`.
 * Deterministic (Ed25519 and HMAC signatures depend only on key and message), so a rerun rewrites
 * the same file. The expected codes are written here by hand from API.md; nothing here calls
 * verifyToken. The tests read the JSON and never regenerate it.
 */
import { createHmac, createPrivateKey, createPublicKey, sign } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { base64url, CompactSign, importJWK, type CryptoKey, type JWK } from 'jose';
import { format, resolveConfig } from 'prettier';
import { loadKeyRing, type KeyRing } from '../../src/crypto/keys.js';
import { signToken } from '../../src/crypto/tokens.js';
import type { CapabilityClaims } from '../../src/core/types.js';

type RingName = 'ring' | 'old' | 'foreign';
type Expected = 'ok' | 'bad_token' | 'unknown_key' | 'expired' | 'not_yet_valid';

interface Vector {
  readonly name: string;
  /** The key ring of keys.json the token is verified under. */
  readonly ring: RingName;
  readonly token: string;
  /** verifyToken's code, else checkValidity's at `now`, else "ok". */
  readonly expected: Expected;
  /** For "ok": the claims verifyToken returns and the kid that verified them. */
  readonly claims?: CapabilityClaims;
  readonly kid?: string;
}

const NOW = '2026-06-01T12:00:00Z';
const NOW_S = Date.parse(NOW) / 1000;

const KEYS = JSON.parse(readFileSync(new URL('./keys.json', import.meta.url), 'utf8')) as Record<RingName, { keys: JWK[] }>;

const CLAIMS: CapabilityClaims = {
  id: 'cap_vector_root',
  tenant: 'ten_vector',
  trajectory: 't-vector',
  parent: null,
  depth: 0,
  rights: ['read', 'write'],
  objects: [
    { kind: 'path', prefix: '/workspace/traj-1' },
    { kind: 'host', name: '*.example.com', port: 443 },
  ] as unknown as CapabilityClaims['objects'],
  predicate: {
    max_cost: 0.5,
    budget: 10,
    max_calls: 100,
    max_depth: 2,
    args: [{ kind: 'max', arg: 'timeout_ms', value: 30000 }],
  } as unknown as CapabilityClaims['predicate'],
  iat: NOW_S - 60,
  nbf: NOW_S - 60,
  exp: NOW_S + 3600,
};

const enc = (value: unknown): string => base64url.encode(typeof value === 'string' ? value : JSON.stringify(value));
const parts = (token: string): [string, string, string] => token.split('.') as [string, string, string];

/** The JWT payload signToken would write for `c` (its wire names), to tamper with or re-sign. */
function payloadOf(token: string): Record<string, unknown> {
  return JSON.parse(new TextDecoder().decode(base64url.decode(parts(token)[1]))) as Record<string, unknown>;
}

async function signRaw(key: CryptoKey, header: Record<string, unknown>, payload: string): Promise<string> {
  return new CompactSign(new TextEncoder().encode(payload)).setProtectedHeader(header as { alg: string }).sign(key);
}

/** Ed25519 by hand, for headers jose refuses to sign (an unknown `crit`). */
function signEd25519(jwk: JWK, header: Record<string, unknown>, payload: string): string {
  const input = `${enc(header)}.${enc(payload)}`;
  const key = createPrivateKey({ key: { kty: 'OKP', crv: 'Ed25519', x: jwk.x as string, d: jwk.d as string }, format: 'jwk' });
  return `${input}.${sign(null, Buffer.from(input), key).toString('base64url')}`;
}

function hs256(secret: Buffer | string, header: Record<string, unknown>, payload: string): string {
  const input = `${enc(header)}.${enc(payload)}`;
  return `${input}.${createHmac('sha256', secret).update(input).digest('base64url')}`;
}

async function main(): Promise<void> {
  const rings: Record<RingName, KeyRing> = { ring: await loadKeyRing(KEYS.ring), old: await loadKeyRing(KEYS.old), foreign: await loadKeyRing(KEYS.foreign) };
  const active = KEYS.ring.keys[KEYS.ring.keys.length - 1] as JWK;
  const foreignKey = (await importJWK({ ...(KEYS.foreign.keys[0] as JWK), alg: 'EdDSA' }, 'EdDSA')) as CryptoKey;
  const ourKey = rings.ring.signingKey;
  const kid = rings.ring.activeKid;

  const valid = await signToken(rings.ring, CLAIMS);
  const [h, p, s] = parts(valid);
  const payload = JSON.stringify(payloadOf(valid));
  const child: CapabilityClaims = { ...CLAIMS, id: 'cap_vector_child', parent: 'cap_vector_root', depth: 1, rights: ['read'], trajectory: 't-vector.sub-1' };
  const at = (over: Partial<CapabilityClaims>): Promise<string> => signToken(rings.ring, { ...CLAIMS, ...over });
  const flip = (c: string): string => (c === 'A' ? 'B' : 'A');

  const vectors: Vector[] = [
    { name: 'valid token', ring: 'ring', token: valid, expected: 'ok', claims: CLAIMS, kid },
    { name: 'valid child token (parent and depth)', ring: 'ring', token: await signToken(rings.ring, child), expected: 'ok', claims: child, kid },
    {
      name: 'signed by the old (rotated) key, verified under the ring',
      ring: 'ring',
      token: await signToken(rings.old, CLAIMS),
      expected: 'ok',
      claims: CLAIMS,
      kid: rings.old.activeKid,
    },
    { name: 'signed by the new key, verified under the ring from before rotation', ring: 'old', token: valid, expected: 'unknown_key' },
    {
      name: 'tampered payload (a right added)',
      ring: 'ring',
      token: `${h}.${enc({ ...payloadOf(valid), r: ['read', 'write', 'execute'] })}.${s}`,
      expected: 'bad_token',
    },
    {
      name: 'tampered payload (expiry pushed back)',
      ring: 'ring',
      token: `${h}.${enc({ ...payloadOf(valid), exp: CLAIMS.exp + 86400 })}.${s}`,
      expected: 'bad_token',
    },
    { name: 'tampered signature', ring: 'ring', token: `${h}.${p}.${flip(s[0] ?? '')}${s.slice(1)}`, expected: 'bad_token' },
    {
      name: 'tampered header (kid swapped to the old key)',
      ring: 'ring',
      token: `${enc({ alg: 'EdDSA', kid: rings.old.activeKid })}.${p}.${s}`,
      expected: 'bad_token',
    },
    { name: 'alg none, no signature', ring: 'ring', token: `${enc({ alg: 'none', kid })}.${p}.`, expected: 'bad_token' },
    { name: 'alg none, the real signature kept', ring: 'ring', token: `${enc({ alg: 'none', kid })}.${p}.${s}`, expected: 'bad_token' },
    {
      name: 'HS256 with the raw public key bytes as HMAC secret',
      ring: 'ring',
      token: hs256(Buffer.from(base64url.decode(active.x as string)), { alg: 'HS256', kid }, payload),
      expected: 'bad_token',
    },
    {
      name: 'HS256 with the public key PEM as HMAC secret',
      ring: 'ring',
      token: hs256(
        createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: active.x as string }, format: 'jwk' }).export({ type: 'spki', format: 'pem' }),
        { alg: 'HS256', kid },
        payload,
      ),
      expected: 'bad_token',
    },
    {
      name: 'alg Ed25519 (RFC 9864 name of the same signature): refused, the algorithm is pinned to EdDSA',
      ring: 'ring',
      token: await signRaw(ourKey, { alg: 'Ed25519', kid }, payload),
      expected: 'bad_token',
    },
    { name: 'ES256 in the header', ring: 'ring', token: `${enc({ alg: 'ES256', kid })}.${p}.${s}`, expected: 'bad_token' },
    {
      name: 'wrong key: a foreign signature under our kid',
      ring: 'ring',
      token: await signRaw(foreignKey, { alg: 'EdDSA', kid }, payload),
      expected: 'bad_token',
    },
    {
      name: 'wrong key: a foreign key embedded in the header under our kid',
      ring: 'ring',
      token: await signRaw(foreignKey, { alg: 'EdDSA', kid, jwk: { kty: 'OKP', crv: 'Ed25519', x: KEYS.foreign.keys[0]?.x } }, payload),
      expected: 'bad_token',
    },
    { name: 'unknown kid (a foreign ring)', ring: 'ring', token: await signToken(rings.foreign, CLAIMS), expected: 'unknown_key' },
    { name: 'missing kid', ring: 'ring', token: await signRaw(ourKey, { alg: 'EdDSA' }, payload), expected: 'unknown_key' },
    {
      name: 'an unknown critical header',
      ring: 'ring',
      token: signEd25519(active, { alg: 'EdDSA', kid, crit: ['x-warrant'], 'x-warrant': 1 }, payload),
      expected: 'bad_token',
    },
    { name: 'truncated in the middle', ring: 'ring', token: valid.slice(0, Math.floor(valid.length / 2)), expected: 'bad_token' },
    { name: 'truncated: the signature cut short', ring: 'ring', token: valid.slice(0, -4), expected: 'bad_token' },
    { name: 'truncated: no signature part', ring: 'ring', token: `${h}.${p}`, expected: 'bad_token' },
    { name: 'empty string', ring: 'ring', token: '', expected: 'bad_token' },
    { name: 'signed, but the payload is not JSON', ring: 'ring', token: await signRaw(ourKey, { alg: 'EdDSA', kid }, 'not json'), expected: 'bad_token' },
    {
      name: 'signed, but a claim is missing (iss)',
      ring: 'ring',
      token: await signRaw(ourKey, { alg: 'EdDSA', kid }, JSON.stringify({ ...payloadOf(valid), iss: undefined })),
      expected: 'bad_token',
    },
    {
      name: 'signed, but the issuer is another',
      ring: 'ring',
      token: await signRaw(ourKey, { alg: 'EdDSA', kid }, JSON.stringify({ ...payloadOf(valid), iss: 'other' })),
      expected: 'bad_token',
    },
    {
      name: 'signed, but with an unknown right',
      ring: 'ring',
      token: await signRaw(ourKey, { alg: 'EdDSA', kid }, JSON.stringify({ ...payloadOf(valid), r: ['read', 'admin'] })),
      expected: 'bad_token',
    },
    {
      name: 'signed, but with an extra claim',
      ring: 'ring',
      token: await signRaw(ourKey, { alg: 'EdDSA', kid }, JSON.stringify({ ...payloadOf(valid), admin: true })),
      expected: 'bad_token',
    },
    { name: 'expired by 1 s at now', ring: 'ring', token: await at({ exp: NOW_S - 1 }), expected: 'expired' },
    { name: 'expiring at now', ring: 'ring', token: await at({ exp: NOW_S }), expected: 'expired' },
    { name: 'expiring 1 s after now', ring: 'ring', token: await at({ exp: NOW_S + 1 }), expected: 'ok', claims: { ...CLAIMS, exp: NOW_S + 1 }, kid },
    { name: 'not yet valid (nbf 1 s after now)', ring: 'ring', token: await at({ iat: NOW_S + 1, nbf: NOW_S + 1 }), expected: 'not_yet_valid' },
    { name: 'valid from now', ring: 'ring', token: await at({ iat: NOW_S, nbf: NOW_S }), expected: 'ok', claims: { ...CLAIMS, iat: NOW_S, nbf: NOW_S }, kid },
  ];
  const doc = {
    '//': 'Token vectors pinned to the test keys of keys.json (public on purpose) and to now. Regenerate with npx tsx test/vectors/generate.ts; see README.md.',
    now: NOW,
    vectors,
  };
  // Written as the repository's formatter would write it, so `prettier --check` passes unchanged.
  const file = new URL('./tokens.json', import.meta.url);
  writeFileSync(file, await format(JSON.stringify(doc), { ...(await resolveConfig(file)), parser: 'json' }));
}

await main();
