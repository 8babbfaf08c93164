/**
 * Receipts: one audit row, its hash, and an RFC 9162 inclusion proof that a signed checkpoint covers
 * it. A receipt verifies offline with only the audit public keys, so whoever holds one can show the
 * decision was on record, whatever later happens to the database. Its size grows with the log's
 * logarithm: one 32-byte hash per level of the tenant's Merkle tree.
 */
import { canonicalJson, fromHex, sha256Hex } from '../crypto/hash.js';
import { openCheckpoint, type AuditKeys, type CheckpointPayload } from './checkpoint.js';
import { leafHash, verifyInclusion } from './merkle.js';

/** A receipt as `GET /v1/audit/{id}/receipt` returns it. */
export interface Receipt {
  readonly audit_id: string;
  /** Exactly the fields the row's hash covers (its prev_hash included). */
  readonly row: Record<string, unknown>;
  readonly hash: string;
  readonly leaf_index: number;
  readonly tree_size: number;
  /** The signed checkpoint (compact JWS) whose tree the proof leads to. */
  readonly checkpoint: string;
  /** The inclusion proof, leaf to root (hex). */
  readonly inclusion: readonly string[];
}

export type ReceiptCheck =
  | { readonly ok: true; readonly checkpoint: CheckpointPayload; readonly row: Record<string, unknown> }
  | { readonly ok: false; readonly code: 'malformed' | 'row_mismatch' | 'bad_checkpoint' | 'not_included'; readonly message: string };

/** A row's hash from its hashed fields, as the writer computed it (src/store/audit.ts sealRow). */
export function hashOfFields(fields: Record<string, unknown>): string {
  return sha256Hex(`[${JSON.stringify(fields.prev_hash)},${canonicalJson(fields)}]`);
}

/**
 * Verifies a receipt with only the audit public keys: the row, its hash, the checkpoint's signature,
 * the proof. It shows the row is in a tree the audit key signed; that this checkpoint belongs to the
 * tenant's exported chain of checkpoints is `npm run audit -- verify`'s to show. The row's `at` is
 * the authority's word, not signed separately: the checkpoint's own `at` bounds when it was on record.
 */
export async function verifyReceipt(receipt: unknown, keys: AuditKeys): Promise<ReceiptCheck> {
  const r = receipt as Partial<Receipt> | null;
  if (
    typeof r !== 'object' ||
    r === null ||
    typeof r.audit_id !== 'string' ||
    typeof r.row !== 'object' ||
    r.row === null ||
    typeof r.hash !== 'string' ||
    typeof r.checkpoint !== 'string' ||
    !Array.isArray(r.inclusion) ||
    !Number.isSafeInteger(r.leaf_index) ||
    !Number.isSafeInteger(r.tree_size)
  ) {
    return { ok: false, code: 'malformed', message: 'not a receipt' };
  }
  let rowHash: string;
  try {
    rowHash = hashOfFields(r.row);
  } catch {
    // What canonical JSON refuses (a lone surrogate, nesting past the stack): a hostile receipt is
    // reported, never thrown at the caller.
    return { ok: false, code: 'malformed', message: 'its row has no canonical JSON form' };
  }
  if (r.row.id !== r.audit_id || typeof r.row.prev_hash !== 'string' || rowHash !== r.hash) {
    return { ok: false, code: 'row_mismatch', message: 'the row is not the one this receipt names, or does not hash to its hash' };
  }
  const opened = await openCheckpoint(keys, r.checkpoint);
  if (!opened.ok) return { ok: false, code: 'bad_checkpoint', message: `the checkpoint: ${opened.reason}` };
  const c = opened.payload;
  if (r.row.tenant_id !== c.tenant) return { ok: false, code: 'row_mismatch', message: "the row is not the checkpoint's tenant's" };
  const proof = r.inclusion.map((h) => (typeof h === 'string' ? fromHex(h) : null));
  const hash = fromHex(r.hash);
  const root = fromHex(c.root);
  if (
    c.size !== r.tree_size ||
    hash === null ||
    root === null ||
    proof.some((h) => h === null) ||
    !verifyInclusion(leafHash(hash), r.leaf_index as number, c.size, proof as Uint8Array[], root)
  ) {
    return { ok: false, code: 'not_included', message: 'the proof does not lead from this row to the checkpoint' };
  }
  return { ok: true, checkpoint: c, row: r.row };
}
