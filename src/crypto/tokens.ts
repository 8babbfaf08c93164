/**
 * Capability tokens: compact JWS, Ed25519 (`alg: EdDSA`), `kid` in the header, the algorithm pinned
 * on verify. A token string becomes a `VerifiedCapability` only through `verifyToken`: the
 * signature is checked before any claim is read, and any failure is a decision, never a crash.
 */
import { z } from 'zod';
import { CompactSign, base64url, compactVerify, errors, type CryptoKey, type JWSHeaderParameters } from 'jose';
import { ArgBound, Id, Rights, SideEffect, ToolName, TrajectoryId } from '../core/schemas.js';
import type { CapabilityClaims, CanonicalObject, CanonicalPredicate, DenyCode, VerifiedCapability } from '../core/types.js';
import { ALG, type KeyRing } from './keys.js';

/** JWT claim names, short because a token rides on every tool call. */
const Claims = z.strictObject({
  iss: z.literal('warrant'),
  jti: Id,
  ten: Id,
  sub: TrajectoryId,
  par: Id.optional(),
  dep: z.int().min(0).max(64),
  r: Rights,
  // Objects and predicate were canonicalized before signing; shapes are checked, not re-derived.
  o: z
    .array(z.record(z.string(), z.union([z.string(), z.number()])))
    .min(1)
    .max(64),
  p: z.strictObject({
    max_cost: z.number().optional(),
    budget: z.number().optional(),
    max_calls: z.int().optional(),
    max_depth: z.int().optional(),
    args: z.array(ArgBound).optional(),
    tools: z.array(ToolName).optional(),
    approval_required: z.array(SideEffect).optional(),
  }),
  iat: z.int(),
  nbf: z.int(),
  exp: z.int(),
});

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Signs claims with the ring's active key. */
export async function signToken(ring: KeyRing, c: CapabilityClaims): Promise<string> {
  const payload = {
    iss: 'warrant',
    jti: c.id,
    ten: c.tenant,
    sub: c.trajectory,
    ...(c.parent === null ? {} : { par: c.parent }),
    dep: c.depth,
    r: c.rights,
    o: c.objects,
    p: c.predicate,
    iat: c.iat,
    nbf: c.nbf,
    exp: c.exp,
  };
  return new CompactSign(encoder.encode(JSON.stringify(payload))).setProtectedHeader({ alg: ALG, kid: ring.activeKid }).sign(ring.signingKey);
}

export type VerifyResult =
  | { readonly ok: true; readonly capability: VerifiedCapability; readonly kid: string }
  | { readonly ok: false; readonly code: Extract<DenyCode, 'bad_token' | 'unknown_key'>; readonly message: string };

class UnknownKey extends Error {}

const BASE64URL = /^[A-Za-z0-9_-]+$/;

/**
 * Whether `part` is the one canonical base64url (RFC 7515 §2: no padding, no whitespace) encoding
 * of its bytes. Decoders ignore the unused low bits of the last character, so without this check
 * several strings verify as one token (and each would be a new cache entry and a new "token").
 */
function isCanonicalPart(part: string): boolean {
  if (!BASE64URL.test(part)) return false;
  try {
    return base64url.encode(base64url.decode(part)) === part;
  } catch {
    return false;
  }
}

/** A compact JWS of three canonical base64url parts (signatures are never empty here). */
export function isCanonicalCompact(token: string): boolean {
  const parts = token.split('.');
  return parts.length === 3 && parts.every(isCanonicalPart);
}

/** Verifies a token's signature against the ring (EdDSA only), then parses its claims. */
export async function verifyToken(ring: KeyRing, token: string): Promise<VerifyResult> {
  if (!isCanonicalCompact(token)) return { ok: false, code: 'bad_token', message: 'the token is invalid: it is not a canonical compact JWS' };
  let kid = '';
  let payload: Uint8Array;
  try {
    const getKey = (header: JWSHeaderParameters): CryptoKey => {
      const key = typeof header.kid === 'string' ? ring.verifyKeys.get(header.kid) : undefined;
      if (key === undefined) throw new UnknownKey();
      kid = header.kid as string;
      return key;
    };
    ({ payload } = await compactVerify(token, getKey, { algorithms: [ALG] }));
  } catch (e) {
    if (e instanceof UnknownKey) return { ok: false, code: 'unknown_key', message: 'the token was signed by a key this authority does not know' };
    const why = e instanceof errors.JOSEAlgNotAllowed ? 'its algorithm is not EdDSA' : 'its signature does not verify';
    return { ok: false, code: 'bad_token', message: `the token is invalid: ${why}` };
  }
  let json: unknown;
  try {
    json = JSON.parse(decoder.decode(payload));
  } catch {
    return { ok: false, code: 'bad_token', message: 'the token payload is not JSON' };
  }
  const parsed = Claims.safeParse(json);
  if (!parsed.success) return { ok: false, code: 'bad_token', message: 'the token claims are malformed' };
  const c = parsed.data;
  const capability = {
    id: c.jti,
    tenant: c.ten,
    trajectory: c.sub,
    parent: c.par ?? null,
    depth: c.dep,
    rights: c.r,
    objects: c.o as unknown as CanonicalObject[],
    predicate: c.p as CanonicalPredicate,
    iat: c.iat,
    nbf: c.nbf,
    exp: c.exp,
  } as CapabilityClaims as VerifiedCapability;
  return { ok: true, capability, kid };
}
