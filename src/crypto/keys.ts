/**
 * The signing key ring: one active Ed25519 key that signs, and older keys that only verify.
 * A ring is a JWK set; the last key holding a private part (`d`) is the active one. Rotation
 * appends a new key; an old key is retired once every token it signed has expired.
 */
import { calculateJwkThumbprint, exportJWK, generateKeyPair, importJWK, type CryptoKey, type JWK } from 'jose';

export const ALG = 'EdDSA';

export interface PublicJwk {
  readonly kty: 'OKP';
  readonly crv: 'Ed25519';
  readonly x: string;
  readonly kid: string;
  readonly alg: typeof ALG;
  readonly use: 'sig';
}

export interface KeyRing {
  readonly activeKid: string;
  readonly signingKey: CryptoKey;
  /** Every key of the ring with a private part, by kid (the active one included): older ones still open seals made under them. */
  readonly privateKeys: ReadonlyMap<string, CryptoKey>;
  /** Verification keys by kid: the active one and every older one still in the ring. */
  readonly verifyKeys: ReadonlyMap<string, CryptoKey>;
  /** The public half of every key, as `/.well-known/jwks.json` serves it. */
  readonly jwks: { readonly keys: readonly PublicJwk[] };
}

export class KeyRingError extends Error {
  readonly code = 'bad_key_ring';
}

function isEd25519(jwk: JWK): boolean {
  return jwk.kty === 'OKP' && jwk.crv === 'Ed25519' && typeof jwk.x === 'string';
}

async function importKey(jwk: JWK): Promise<CryptoKey> {
  try {
    return (await importJWK(jwk, ALG)) as CryptoKey;
  } catch {
    // WebCrypto's DataError names no field; a KeyRingError does, and never quotes key material.
    throw new KeyRingError('every key must be a valid Ed25519 JWK (x, and d matching x)');
  }
}

/**
 * Refuses (KeyRingError) an audit ring that shares a key with the token ring: whoever holds the audit
 * key could then mint tokens, and whoever holds a token key sign checkpoints.
 */
export function assertDisjoint(tokens: KeyRing, audit: KeyRing): void {
  const tokenKeys = new Set(tokens.jwks.keys.map((k) => k.x));
  if (audit.jwks.keys.some((k) => tokenKeys.has(k.x)))
    throw new KeyRingError('the audit key ring shares a key with the token signing ring: give each its own keys');
}

/** Builds a ring from a JWK set of Ed25519 keys (private ones sign, public-only ones verify). */
export async function loadKeyRing(set: { keys?: unknown }): Promise<KeyRing> {
  if (!Array.isArray(set.keys) || set.keys.length === 0) throw new KeyRingError('the key set has no keys');
  const verifyKeys = new Map<string, CryptoKey>();
  const privateKeys = new Map<string, CryptoKey>();
  const publics: PublicJwk[] = [];
  let active: { kid: string; key: CryptoKey } | undefined;
  for (const raw of set.keys as JWK[]) {
    if (typeof raw !== 'object' || raw === null || !isEd25519(raw)) throw new KeyRingError('every key must be an Ed25519 OKP JWK');
    const pub = { kty: 'OKP' as const, crv: 'Ed25519' as const, x: raw.x as string };
    const kid = typeof raw.kid === 'string' && raw.kid !== '' ? raw.kid : await calculateJwkThumbprint(pub);
    if (verifyKeys.has(kid)) throw new KeyRingError(`duplicate kid ${kid}`);
    verifyKeys.set(kid, await importKey({ ...pub, alg: ALG }));
    publics.push({ ...pub, kid, alg: ALG, use: 'sig' });
    if (typeof raw.d === 'string') {
      active = { kid, key: await importKey({ ...pub, d: raw.d, alg: ALG }) };
      privateKeys.set(kid, active.key);
    }
  }
  if (active === undefined) throw new KeyRingError('no key in the set has a private part to sign with');
  return { activeKid: active.kid, signingKey: active.key, privateKeys, verifyKeys, jwks: { keys: publics } };
}

const KID_LENGTH = 16;

/** A fresh private Ed25519 JWK, its kid the first 16 characters (96 bits) of its RFC 7638 thumbprint. */
export async function generateSigningJwk(): Promise<JWK> {
  const { privateKey } = await generateKeyPair(ALG, { extractable: true });
  const jwk = await exportJWK(privateKey);
  // The kid rides in every token's header: 96 bits of the thumbprint tell a ring's keys apart and
  // save 27 bytes per token (the brief's budget for a typical child token is 700 bytes).
  const kid = (await calculateJwkThumbprint({ kty: 'OKP', crv: 'Ed25519', x: jwk.x as string })).slice(0, KID_LENGTH);
  return { kty: 'OKP', crv: 'Ed25519', x: jwk.x, d: jwk.d, kid, alg: ALG };
}

/** Rotation: the set with a new key appended, which becomes the active one. Old keys stay to verify. */
export async function rotate(set: { keys: JWK[] }): Promise<{ keys: JWK[] }> {
  return { keys: [...set.keys, await generateSigningJwk()] };
}
