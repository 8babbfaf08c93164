/**
 * Seals on what the authority answers from without deciding again: stored idempotent answers, and
 * approvals (src/service/approvals.ts). A repeated `call_id` or Idempotency-Key is answered from the
 * idempotency table, with no new decision and no new audit row, so whoever can write the database
 * could otherwise put a grant there (or move a genuine one onto another request by changing its
 * request hash) and have the authority answer it. Each completed record is sealed with an HMAC over
 * the key, the request's hash and the answer; a record whose seal does not hold is never answered
 * (503, nothing granted).
 *
 * The HMAC key comes from the active token signing key, which the database never sees: SHA-256 of
 * the Ed25519 signature (deterministic, RFC 8032) over a fixed label. A seal names the kid it was
 * made under: new seals use the active key, and seals of older keys hold while those keys stay in
 * the ring with their private part. Tool versions and pending approvals are sealed again under the
 * active key by the sweep of src/service/reseal.ts, so an old key retired after a sweep strands none
 * of them; a stored answer or settled approval it sealed is refused like a forgery once it is
 * retired (a repeat with a new call_id decides again).
 */
import { hmac } from '@noble/hashes/hmac.js';
import { sha256 } from '@noble/hashes/sha2.js';
import { utf8ToBytes } from '@noble/hashes/utils.js';
import { CompactSign, base64url } from 'jose';
import type { KeyRing } from '../crypto/keys.js';
import { canonicalJson } from '../crypto/hash.js';
import type { IdemKey, StoredResponse } from '../store/idempotency.js';

const LABEL = 'warrant idempotency seal key v1';

/** Sealers by ring (see `ResponseSealer.from`); a ring no longer used goes with its sealer. */
const sealers = new WeakMap<KeyRing, ResponseSealer>();

export class ResponseSealer {
  private constructor(
    /** The kid new seals are made under. */
    readonly activeKid: string,
    /** HMAC keys by kid: the active key's seals, and those of older keys still in the ring with their private part. */
    private readonly keys: ReadonlyMap<string, Uint8Array>,
  ) {}

  /**
   * The sealer of a ring: made once per ring (one Ed25519 signature per private key), then reused. A
   * Worker builds its app per request on a ring cached per isolate, so without this every request that
   * seals or checks a seal signed again. The resolved sealer is kept, never a promise (on Workers a
   * promise settled under one request must not be awaited by another); it holds only bytes.
   */
  static async from(ring: KeyRing): Promise<ResponseSealer> {
    const known = sealers.get(ring);
    if (known !== undefined) return known;
    const keys = new Map<string, Uint8Array>();
    for (const [kid, key] of ring.privateKeys) {
      const jws = await new CompactSign(utf8ToBytes(LABEL)).setProtectedHeader({ alg: 'EdDSA' }).sign(key);
      keys.set(kid, sha256(utf8ToBytes(jws)));
    }
    const sealer = new ResponseSealer(ring.activeKid, keys);
    sealers.set(ring, sealer);
    return sealer;
  }

  /** The seal of `response` stored under `k` for a request hashing to `requestHash`. */
  seal(k: IdemKey, requestHash: string, response: StoredResponse): string {
    return this.sealOf('idempotency', idempotencyParts(k, requestHash, response));
  }

  /** Whether `seal` is this key's seal of exactly this record. */
  holds(k: IdemKey, requestHash: string, response: StoredResponse, seal: string | null): boolean {
    return this.holdsOf('idempotency', idempotencyParts(k, requestHash, response), seal);
  }

  /** The seal of a record of `kind` whose content is `parts` (JSON values). */
  sealOf(kind: string, parts: readonly unknown[]): string {
    return `${this.activeKid}.${this.mac(this.keys.get(this.activeKid) as Uint8Array, kind, parts)}`;
  }

  /** Whether `seal` is this key's seal of exactly `parts`. */
  holdsOf(kind: string, parts: readonly unknown[], seal: string | null): boolean {
    if (seal === null) return false;
    const dot = seal.lastIndexOf('.');
    const key = dot === -1 ? undefined : this.keys.get(seal.slice(0, dot));
    if (key === undefined) return false;
    const want = this.mac(key, kind, parts);
    const got = seal.slice(dot + 1);
    // Compared in full whatever differs first: the time taken says nothing of where.
    let diff = want.length ^ got.length;
    for (let i = 0; i < want.length; i++) diff |= want.charCodeAt(i) ^ (got.charCodeAt(i) || 0);
    return diff === 0;
  }

  private mac(key: Uint8Array, kind: string, parts: readonly unknown[]): string {
    return base64url.encode(hmac(sha256, key, utf8ToBytes(canonicalJson([kind, ...parts]))));
  }
}

const idempotencyParts = (k: IdemKey, requestHash: string, r: StoredResponse): unknown[] => [k.tenantId, k.scope, k.key, requestHash, r.status, r.body ?? null];

/** A JSON value as the database hands it back from a jsonb column (undefined members dropped), for sealing what is about to be stored. */
export const asStored = (v: unknown): unknown => (v === undefined ? null : JSON.parse(JSON.stringify(v)));
