/**
 * The audit hash chains. API/DESIGN: each row's hash = SHA-256(prev_hash ‖ canonical row), chained
 * per delegation tree (and per tenant for the rows of no known tree), so an edit, deletion or
 * reordering that does not recompute every later hash is detected by recomputing them. Against whoever
 * can rewrite the database and recompute hashes, the signed checkpoints (src/audit/) are the defence.
 */
import { canonicalJson, sha256Hex } from '../crypto/hash.js';
import type { AuditRecord } from './store.js';

/** A row as hashed: key and request ids may be absent (rows written before they were recorded). */
export type HashedRow = Omit<AuditRecord, 'hash' | 'pos' | 'keyId' | 'requestId' | 'rootTrajectoryId'> & {
  readonly keyId?: string | null;
  readonly requestId?: string | null;
  readonly rootTrajectoryId?: string | null;
};

/**
 * The fields a row's hash covers: all of them but the hash itself. `key_id`, `request_id` and
 * `root_trajectory_id` only when set, so rows written before they existed keep their hashes.
 */
export function hashedFields(r: HashedRow): Record<string, unknown> {
  return {
    tenant_id: r.tenantId,
    // Rows of the tenant stream ('') written before trees had chains of their own hash without it.
    ...(r.treeId === '' ? {} : { tree_id: r.treeId }),
    seq: Number(r.seq),
    id: r.id,
    at: r.at.toISOString(),
    event: r.event,
    decision: r.decision,
    reason_code: r.reasonCode,
    capability_id: r.capabilityId,
    parent_id: r.parentId,
    trajectory_id: r.trajectoryId,
    op: r.op,
    target: r.target,
    cost: r.cost,
    call_id: r.callId,
    detail: r.detail,
    ...(r.keyId === null || r.keyId === undefined ? {} : { key_id: r.keyId }),
    ...(r.requestId === null || r.requestId === undefined ? {} : { request_id: r.requestId }),
    ...(r.rootTrajectoryId === null || r.rootTrajectoryId === undefined ? {} : { root_trajectory_id: r.rootTrajectoryId }),
    prev_hash: r.prevHash,
  };
}

/**
 * `canonicalJson(hashedFields(r))`, written without building that object: its keys in RFC 8785
 * order (by UTF-16 code units, fixed here) and the scalars serialized as the library does, which
 * spends a Set, a key sort and an array join on every field of every row (bench/RESULTS.md). Nested
 * values (target, detail) still go through the library. test/store/audit-chain.test.ts holds the two
 * equal on generated rows.
 */
export function canonicalRow(r: HashedRow): string {
  return `${openRow(r)}}`;
}

/** canonicalRow without its closing brace: the writer appends the columns it inserts beside it. */
function openRow(r: HashedRow): string {
  let s = `{"at":${scalar(r.at.toISOString())}`;
  s = field(s, 'call_id', r.callId);
  s = field(s, 'capability_id', r.capabilityId);
  s = field(s, 'cost', r.cost);
  s = field(s, 'decision', r.decision);
  s = field(s, 'detail', r.detail);
  s = field(s, 'event', r.event);
  s = field(s, 'id', r.id);
  if (r.keyId !== null) s = field(s, 'key_id', r.keyId);
  s = field(s, 'op', r.op);
  s = field(s, 'parent_id', r.parentId);
  s = field(s, 'prev_hash', r.prevHash);
  s = field(s, 'reason_code', r.reasonCode);
  if (r.requestId !== null) s = field(s, 'request_id', r.requestId);
  if (r.rootTrajectoryId !== null) s = field(s, 'root_trajectory_id', r.rootTrajectoryId);
  s = field(s, 'seq', Number(r.seq));
  s = field(s, 'target', r.target);
  s = field(s, 'tenant_id', r.tenantId);
  s = field(s, 'trajectory_id', r.trajectoryId);
  if (r.treeId !== '') s = field(s, 'tree_id', r.treeId);
  return s;
}

/** `text` with `,"key":value` appended, or unchanged when the value has no JSON form (undefined), as the library skips it. */
function field(text: string, key: string, value: unknown): string {
  return value === undefined || typeof value === 'symbol' ? text : `${text},"${key}":${scalar(value)}`;
}

/** A value's RFC 8785 text: strings without surrogates and finite numbers as JSON.stringify (what the library does for them), the rest by the library. */
function scalar(value: unknown): string {
  if (value === null) return 'null';
  if ((typeof value === 'string' && !SURROGATE.test(value)) || (typeof value === 'number' && Number.isFinite(value))) return JSON.stringify(value);
  return canonicalJson(value);
}

/** Any UTF-16 surrogate: a string holding one goes to the library, which refuses lone ones. */
const SURROGATE = /[\uD800-\uDFFF]/;

/**
 * A row's canonical text (RFC 8785, of its hashed fields) and its hash, SHA-256 of the canonical
 * JSON of `[prev_hash, fields]`. That array's canonical form is `[` + the JSON string of prev_hash +
 * `,` + the fields' canonical text + `]`, so the fields are serialized once; the writer reuses the
 * text as the row it inserts (`open`: that text without its closing brace).
 */
export function sealRow(r: HashedRow): { readonly canonical: string; readonly open: string; readonly hash: string } {
  const open = openRow(r);
  const canonical = `${open}}`;
  return { canonical, open, hash: sha256Hex(`[${JSON.stringify(r.prevHash)},${canonical}]`) };
}

export function rowHash(r: HashedRow): string {
  return sealRow(r).hash;
}

/** The row's hash, or null when it has none: a value no decision writes (an `at` of 'infinity', a lone surrogate) is a bad row, not a crash. */
function hashOrNull(r: HashedRow): string | null {
  try {
    return rowHash(r);
  } catch {
    return null;
  }
}

export type ChainReport = { ok: true; entries: number; trees: number } | { ok: false; firstBadId: string; entries: number };

/** A chain's stored head: its last seq and hash. */
export interface ChainHead {
  readonly seq: number;
  readonly hash: string;
  readonly lastId: string | null;
}

/**
 * Walks a tenant's rows in (tree_id, seq) order against the stored heads (by tree id). The first row
 * whose seq, prev_hash or hash does not follow is reported; rows cut from a chain's end show as its
 * head's missing last id, and a chain whose rows are gone entirely as that head's last id too.
 */
export async function verifyChains(pages: AsyncIterable<AuditRecord[]>, heads: ReadonlyMap<string, ChainHead>, genesis: string): Promise<ChainReport> {
  let tree: string | null = null;
  let prev = genesis;
  let seq = 0;
  let entries = 0;
  let lastId = 'head';
  const seen = new Set<string>();
  /** Null when the tree just walked ends where its head says; else the id to report. */
  const closeTree = (): string | null => {
    if (tree === null) return null;
    const head = heads.get(tree);
    if (head === undefined) return lastId;
    return head.seq === seq && head.hash === prev ? null : (head.lastId ?? lastId);
  };
  for await (const rows of pages) {
    for (const r of rows) {
      if (r.treeId !== tree) {
        const bad = closeTree();
        if (bad !== null) return { ok: false, firstBadId: bad, entries };
        tree = r.treeId;
        seen.add(tree);
        prev = genesis;
        seq = 0;
      }
      entries++;
      seq++;
      if (Number(r.seq) !== seq || r.prevHash !== prev || hashOrNull(r) !== r.hash) return { ok: false, firstBadId: r.id, entries };
      prev = r.hash;
      lastId = r.id;
    }
  }
  const bad = closeTree();
  if (bad !== null) return { ok: false, firstBadId: bad, entries };
  for (const [treeId, head] of heads) if (!seen.has(treeId) && head.seq !== 0) return { ok: false, firstBadId: head.lastId ?? 'head', entries };
  return { ok: true, entries, trees: seen.size };
}
