/**
 * Offline token checks against the authority's public keys (`/.well-known/jwks.json`): signature
 * and validity window only, since revocation and budgets are known to `/v1/approve` alone. A JWKS
 * URL is fetched through jose's `createRemoteJWKSet`, one per URL for the life of the module, so its
 * cache (10 minutes) and cooldown (a refetch for an unknown `kid` at most every 30 seconds) are
 * shared by every call. A JWKS that cannot be had is `jwks_unavailable`, never `bad_token`: "the
 * token is forged" and "the keys could not be checked" call for different actions.
 */
import {
  compactVerify,
  createLocalJWKSet,
  createRemoteJWKSet,
  errors,
  type CompactJWSHeaderParameters,
  type FlattenedJWSInput,
  type JSONWebKeySet,
} from 'jose';
import type { Right, RawObject, RawPredicate } from '../core/types.js';

/** Claims of a token whose signature verified offline. */
export interface OfflineClaims {
  readonly capability_id: string;
  readonly tenant: string;
  readonly trajectory_id: string;
  readonly parent_id: string | null;
  readonly depth: number;
  readonly rights: Right[];
  readonly objects: RawObject[];
  readonly predicate: RawPredicate;
  readonly not_before: number;
  readonly expires_at: number;
}

/**
 * `bad_token`: no key of the set verifies it (forged, tampered, another authority's, malformed);
 * `expired` / `not_yet_valid`: outside its window at `now`; `jwks_unavailable`: the key set could
 * not be fetched (unreachable, timeout, not 200) or is not a usable JWK set, so nothing was decided.
 */
export type OfflineCode = 'bad_token' | 'expired' | 'not_yet_valid' | 'jwks_unavailable';

export type OfflineResult = { readonly ok: true; readonly claims: OfflineClaims } | { readonly ok: false; readonly code: OfflineCode };

type KeySet = (header: CompactJWSHeaderParameters, token: FlattenedJWSInput) => Promise<CryptoKey>;

/** Thrown by a key set's resolver when the set itself failed, so the caller can tell it from a bad token. */
class KeySetFailed extends Error {}

// One remote set per URL, so its cache outlives a call. Bounded: a process verifies against a
// handful of authorities, and an unbounded map keyed by caller input would be a leak.
const MAX_REMOTE_SETS = 32;
const remoteSets = new Map<string, KeySet>();

function remoteSet(url: URL): KeySet {
  let set = remoteSets.get(url.href);
  if (set === undefined) {
    if (remoteSets.size >= MAX_REMOTE_SETS) remoteSets.delete(remoteSets.keys().next().value as string);
    set = guarded(createRemoteJWKSet(url));
    remoteSets.set(url.href, set);
  }
  return set;
}

/**
 * Only "no key of the set matches this token" is the token's doing; every other failure of the
 * resolver (fetch, timeout, status, JSON, a malformed or private key in the set) is the set's.
 */
function guarded(set: KeySet): KeySet {
  return async (header, token) => {
    try {
      return await set(header, token);
    } catch (e) {
      if (e instanceof errors.JWKSNoMatchingKey || e instanceof errors.JWKSMultipleMatchingKeys) throw e;
      throw new KeySetFailed('the key set could not be used', { cause: e });
    }
  };
}

/**
 * Verifies a token's signature offline against a JWKS (a URL such as
 * `http://127.0.0.1:8080/.well-known/jwks.json`, fetched once and cached per URL, or the set itself),
 * EdDSA only, and its validity window at `now`. Never a substitute for `approve`: revocation and
 * budgets are not in the token. Never throws: every failure is a result with its code.
 */
export async function verifyOffline(token: string, jwks: URL | JSONWebKeySet, now: Date = new Date()): Promise<OfflineResult> {
  let payload: Uint8Array;
  try {
    const keys = jwks instanceof URL ? remoteSet(jwks) : guarded(createLocalJWKSet(jwks));
    ({ payload } = await compactVerify(token, keys, { algorithms: ['EdDSA'] }));
  } catch (e) {
    // createLocalJWKSet throws JWKSInvalid itself for a set that is not one.
    const unavailable = e instanceof KeySetFailed || e instanceof errors.JWKSInvalid;
    return { ok: false, code: unavailable ? 'jwks_unavailable' : 'bad_token' };
  }
  return checkClaims(payload, now);
}

function checkClaims(payload: Uint8Array, now: Date): OfflineResult {
  let c: Record<string, unknown>;
  try {
    c = JSON.parse(new TextDecoder().decode(payload)) as Record<string, unknown>;
  } catch {
    return { ok: false, code: 'bad_token' };
  }
  if (typeof c !== 'object' || c === null) return { ok: false, code: 'bad_token' };
  if (typeof c.exp !== 'number' || typeof c.nbf !== 'number' || typeof c.jti !== 'string') return { ok: false, code: 'bad_token' };
  const t = now.getTime() / 1000;
  if (c.exp <= t) return { ok: false, code: 'expired' };
  if (c.nbf > t) return { ok: false, code: 'not_yet_valid' };
  return {
    ok: true,
    claims: {
      capability_id: c.jti,
      tenant: String(c.ten),
      trajectory_id: String(c.sub),
      parent_id: typeof c.par === 'string' ? c.par : null,
      depth: Number(c.dep),
      rights: c.r as Right[],
      objects: c.o as RawObject[],
      predicate: c.p as RawPredicate,
      not_before: c.nbf,
      expires_at: c.exp,
    },
  };
}
