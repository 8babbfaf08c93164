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
 * A row's canonical text (RFC 8785, of its hashed fields) and its hash, SHA-256 of the canonical
 * JSON of `[prev_hash, fields]`. That array's canonical form is `[` + the JSON string of prev_hash +
 * `,` + the fields' canonical text + `]`, so the fields are serialized once; the writer reuses the
 * text as the row it inserts.
 */
export function sealRow(r: HashedRow): { readonly canonical: string; readonly hash: string } {
  const canonical = canonicalJson(hashedFields(r));
  return { canonical, hash: sha256Hex(`[${JSON.stringify(r.prevHash)},${canonical}]`) };
}

export function rowHash(r: HashedRow): string {
  return sealRow(r).hash;
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
      if (Number(r.seq) !== seq || r.prevHash !== prev || rowHash(r) !== r.hash) return { ok: false, firstBadId: r.id, entries };
      prev = r.hash;
      lastId = r.id;
    }
  }
  const bad = closeTree();
  if (bad !== null) return { ok: false, firstBadId: bad, entries };
  for (const [treeId, head] of heads) if (!seen.has(treeId) && head.seq !== 0) return { ok: false, firstBadId: head.lastId ?? 'head', entries };
  return { ok: true, entries, trees: seen.size };
}
