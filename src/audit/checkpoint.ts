/**
 * Signed audit checkpoints: what they say, how they are signed, and how a list of them is checked
 * with nothing but the audit public keys. A checkpoint commits to the first `size` leaves of a
 * tenant's audit Merkle tree (RFC 9162 root) and names its predecessor by the SHA-256 of that one's
 * JWS, so, as with CloudTrail's digest files, no checkpoint can be dropped, reordered or replaced
 * without breaking the links; the consistency proof that travels with each one shows its tree extends
 * the previous tree (RFC 9162 §2.1.4), so no signed history can be rewritten either.
 */
import { CompactSign, compactVerify, importJWK, type CryptoKey, type JWK, type JWSHeaderParameters } from 'jose';
import { z } from 'zod';
import { canonicalJson, fromHex, sha256Hex } from '../crypto/hash.js';
import { ALG, type KeyRing } from '../crypto/keys.js';
import { verifyConsistency } from './merkle.js';

/** The JWS `typ` of a checkpoint: a checkpoint can never be taken for a capability token. */
export const CHECKPOINT_TYP = 'warrant-checkpoint+jws';

const Hex32 = z.string().regex(/^[0-9a-f]{64}$/);

/** The signed statement. */
export const CheckpointPayload = z.strictObject({
  tenant: z.string().min(1).max(128),
  /** 1, 2, 3, … per tenant. */
  n: z.int().min(1),
  size: z.int().min(0),
  root: Hex32,
  /** SHA-256 (hex) of the previous checkpoint's JWS; null for the first. */
  prev: Hex32.nullable(),
  at: z.iso.datetime(),
});
export type CheckpointPayload = z.infer<typeof CheckpointPayload>;

/**
 * How long before a checkpoint a decision may be dated and still be first covered by the checkpoint
 * after it (ms). A row is dated when its batch decides it and commits within the decision deadline and
 * the connection's timeouts, seconds later; the rest is room for the clocks of instances that disagree
 * (keep them within a minute). A row dated earlier than that was not there when the checkpoint before
 * its own was taken: it was written after the fact (or left out of it), and is never signed over.
 */
export const CHECKPOINT_LAG_MS = 5 * 60_000;

/** One checkpoint as stored and exported: the signed JWS and the consistency proof from its predecessor. */
export interface CheckpointLine {
  readonly n: number;
  readonly jws: string;
  /** RFC 9162 consistency proof (hex hashes) from the previous checkpoint's size to this one's. */
  readonly consistency: readonly string[];
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** SHA-256 (hex) of a checkpoint's JWS: the name its successor gives it. */
export function checkpointId(jws: string): string {
  return sha256Hex(jws);
}

/** Signs a checkpoint with the audit ring's active key (canonical JSON payload, so one text per statement). */
export async function signCheckpoint(ring: KeyRing, p: CheckpointPayload): Promise<string> {
  return new CompactSign(encoder.encode(canonicalJson(p))).setProtectedHeader({ alg: ALG, kid: ring.activeKid, typ: CHECKPOINT_TYP }).sign(ring.signingKey);
}

/** Audit verification keys by kid: a ring's, or a JWK set's imported (see `importAuditKeys`). */
export type AuditKeys = ReadonlyMap<string, CryptoKey>;

export type OpenResult = { readonly ok: true; readonly payload: CheckpointPayload; readonly kid: string } | { readonly ok: false; readonly reason: string };

/** Verifies a checkpoint's signature (EdDSA only, `typ` pinned, kid among `keys`) before reading it. */
export async function openCheckpoint(keys: AuditKeys, jws: string): Promise<OpenResult> {
  let kid = '';
  let bytes: Uint8Array;
  try {
    const getKey = (h: JWSHeaderParameters): CryptoKey => {
      const key = typeof h.kid === 'string' && h.typ === CHECKPOINT_TYP ? keys.get(h.kid) : undefined;
      if (key === undefined) throw new Error('no key');
      kid = h.kid as string;
      return key;
    };
    ({ payload: bytes } = await compactVerify(jws, getKey, { algorithms: [ALG] }));
  } catch {
    return { ok: false, reason: 'its signature does not verify with the audit keys' };
  }
  let json: unknown;
  try {
    json = JSON.parse(decoder.decode(bytes));
  } catch {
    return { ok: false, reason: 'its payload is not JSON' };
  }
  const parsed = CheckpointPayload.safeParse(json);
  return parsed.success ? { ok: true, payload: parsed.data, kid } : { ok: false, reason: 'its payload is malformed' };
}

export type LogReport =
  | { readonly ok: true; readonly checkpoints: readonly CheckpointPayload[] }
  | { readonly ok: false; readonly badCheckpoint: number; readonly reason: string; readonly checkpoints: readonly CheckpointPayload[] };

/** A checkpoint already verified, to check its successor against. */
export interface Verified {
  readonly payload: CheckpointPayload;
  readonly jws: string;
}

/**
 * Checks one checkpoint against its verified predecessor (null for the first): signed by a known key,
 * the tenant's, numbered right after it, naming it, never shrinking, and extending its tree by a valid
 * consistency proof. Returns the verified checkpoint or why it fails.
 */
export async function checkNext(keys: AuditKeys, tenantId: string, prev: Verified | null, line: CheckpointLine): Promise<Verified | string> {
  const expected = (prev?.payload.n ?? 0) + 1;
  const opened = await openCheckpoint(keys, line.jws);
  if (!opened.ok) return `checkpoint ${expected}: ${opened.reason}`;
  const p = opened.payload;
  if (p.tenant !== tenantId) return `checkpoint ${p.n} is another tenant's`;
  if (p.n !== expected) return `checkpoint ${expected} is missing or out of order (found ${p.n})`;
  if (line.n !== p.n) return `checkpoint ${p.n} is filed as ${line.n}`;
  if (p.prev !== (prev === null ? null : checkpointId(prev.jws))) return `checkpoint ${p.n} does not name checkpoint ${p.n - 1} as its predecessor`;
  const oldSize = prev?.payload.size ?? 0;
  // The database's copy is the database's word: a proof that is not a list of hex strings does not extend, it does not throw.
  const stored: unknown = line.consistency;
  const proof = Array.isArray(stored) ? stored.map((h: unknown) => (typeof h === 'string' ? fromHex(h) : null)) : [null];
  const newRoot = fromHex(p.root);
  const oldRoot = prev === null ? null : fromHex(prev.payload.root);
  const extendsPrev =
    p.size >= oldSize &&
    newRoot !== null &&
    (prev === null
      ? proof.length === 0
      : oldRoot !== null && !proof.some((h) => h === null) && verifyConsistency(oldSize, p.size, oldRoot, newRoot, proof as Uint8Array[]));
  if (!extendsPrev) return `checkpoint ${p.n} does not extend checkpoint ${p.n - 1}'s tree`;
  return { payload: p, jws: line.jws };
}

/**
 * Checks a tenant's checkpoints in order, from the first, with only the audit keys (see checkNext).
 * Reports the first that fails by its position (1-based) and the checkpoints verified before it.
 */
export async function verifyCheckpointLog(keys: AuditKeys, tenantId: string, lines: readonly CheckpointLine[]): Promise<LogReport> {
  const good: CheckpointPayload[] = [];
  let prev: Verified | null = null;
  for (const [i, line] of lines.entries()) {
    const next = await checkNext(keys, tenantId, prev, line);
    if (typeof next === 'string') return { ok: false, badCheckpoint: i + 1, reason: next, checkpoints: good };
    good.push(next.payload);
    prev = next;
  }
  return { ok: true, checkpoints: good };
}

/** Canonical text of a sink line: one JSON object per line. */
export function lineText(l: CheckpointLine): string {
  return canonicalJson({ n: l.n, jws: l.jws, consistency: l.consistency });
}

const Line = z.strictObject({ n: z.int().min(1), jws: z.string().min(1).max(4096), consistency: z.array(Hex32).max(128) });

/** Parses JSON-lines text of checkpoints; a line that is not one is reported by its number. */
export function parseLines(text: string): { ok: true; lines: CheckpointLine[] } | { ok: false; line: number } {
  const lines: CheckpointLine[] = [];
  const raw = text.split('\n');
  for (const [i, t] of raw.entries()) {
    if (t.trim() === '') continue;
    let json: unknown;
    try {
      json = JSON.parse(t);
    } catch {
      return { ok: false, line: i + 1 };
    }
    const parsed = Line.safeParse(json);
    if (!parsed.success) return { ok: false, line: i + 1 };
    lines.push(parsed.data);
  }
  return { ok: true, lines };
}

/** Imports a JWK set of audit public keys (as `/.well-known/warrant-audit-keys.json` serves it). */
export async function importAuditKeys(set: unknown): Promise<AuditKeys> {
  const keys = new Map<string, CryptoKey>();
  const list = typeof set === 'object' && set !== null ? (set as { keys?: unknown }).keys : undefined;
  if (!Array.isArray(list)) throw new TypeError('not a JWK set');
  for (const k of list as JWK[]) {
    if (typeof k.kid !== 'string' || k.kty !== 'OKP' || k.crv !== 'Ed25519' || typeof k.x !== 'string')
      throw new TypeError('every audit key must be an Ed25519 public JWK with a kid');
    const key = await importJWK({ kty: 'OKP', crv: 'Ed25519', x: k.x }, ALG);
    if (key instanceof Uint8Array) throw new TypeError('an audit key must be an Ed25519 public key');
    keys.set(k.kid, key);
  }
  return keys;
}
