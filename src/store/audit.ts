/**
 * The audit hash chain. API/DESIGN: each row's hash = SHA-256(prev_hash ‖ canonical row), chained
 * per tenant, so any edit, deletion or reordering is detected by recomputing it.
 */
import { canonicalJson, sha256Hex } from '../crypto/hash.js';
import type { AuditRecord } from './store.js';

/** The fields a row's hash covers: all of them but the hash itself. */
export function hashedFields(r: Omit<AuditRecord, 'hash'>): Record<string, unknown> {
  return {
    tenant_id: r.tenantId,
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
    prev_hash: r.prevHash,
  };
}

/**
 * A row's canonical text (RFC 8785, of its hashed fields) and its hash, SHA-256 of the canonical
 * JSON of `[prev_hash, fields]`. That array's canonical form is `[` + the JSON string of prev_hash +
 * `,` + the fields' canonical text + `]`, so the fields are serialized once; the writer reuses the
 * text as the row it inserts.
 */
export function sealRow(r: Omit<AuditRecord, 'hash'>): { readonly canonical: string; readonly hash: string } {
  const canonical = canonicalJson(hashedFields(r));
  return { canonical, hash: sha256Hex(`[${JSON.stringify(r.prevHash)},${canonical}]`) };
}

export function rowHash(r: Omit<AuditRecord, 'hash'>): string {
  return sealRow(r).hash;
}

export type ChainReport = { ok: true; entries: number; head: string } | { ok: false; firstBadId: string; entries: number };

/**
 * Walks a tenant's rows in seq order against the stored head. The first row whose seq, prev_hash or
 * hash does not follow is reported; rows cut from the end show as the head's missing last id.
 */
export async function verifyChain(
  pages: AsyncIterable<AuditRecord[]>,
  head: { seq: number; hash: string; lastId: string | null },
  genesis: string,
): Promise<ChainReport> {
  let prev = genesis;
  let seq = 0;
  let entries = 0;
  for await (const rows of pages) {
    for (const r of rows) {
      entries++;
      seq++;
      if (Number(r.seq) !== seq || r.prevHash !== prev || rowHash(r) !== r.hash) return { ok: false, firstBadId: r.id, entries };
      prev = r.hash;
    }
  }
  if (seq !== head.seq || prev !== head.hash) return { ok: false, firstBadId: head.lastId ?? 'head', entries };
  return { ok: true, entries, head: prev };
}
