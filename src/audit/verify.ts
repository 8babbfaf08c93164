/**
 * Verifying a tenant's audit log against its signed checkpoints, trusting nothing the database says
 * about itself: every row's hash is recomputed from its content, every tree's chain is walked, the
 * checkpoints are checked with the audit public keys alone (signatures, links, consistency), and the
 * Merkle root over the rows, in their leaf order, must be what each checkpoint signed. The server
 * (`GET /v1/audit/verify`, against its own copy of the checkpoints) and the offline CLI (against the
 * exported files) run this same code.
 */
import { bytesToHex } from '@noble/hashes/utils.js';
import { fromHex } from '../crypto/hash.js';
import { verifyChains, type ChainHead } from '../store/audit.js';
import { GENESIS_HASH, Store, type AuditRecord, type Db } from '../store/store.js';
import { auditRanges, checkpointLines } from './checkpointer.js';
import { decodeProtectedHeader } from 'jose';
import { CHECKPOINT_LAG_MS, openCheckpoint, verifyCheckpointLog, type AuditKeys, type CheckpointLine, type CheckpointPayload } from './checkpoint.js';
import { leafHash, memoryReader, rootOf } from './merkle.js';
import { DecisionReplay } from './replay.js';

/** Where rows `fromSeq`..`toSeq` of a tree sit among the leaves (the checkpointer's ranges). */
export interface LeafRange {
  readonly leafStart: number;
  readonly treeId: string;
  readonly fromSeq: number;
  readonly toSeq: number;
}

export interface AuditData {
  /** The tenant's rows in (tree_id, seq) order. */
  readonly rows: AsyncIterable<AuditRecord[]>;
  readonly heads: ReadonlyMap<string, ChainHead>;
  readonly ranges: readonly LeafRange[];
  /** The checkpoints to hold the rows to, from the first (the exported file's, or the database's). */
  readonly checkpoints: readonly CheckpointLine[];
}

export type AuditReport =
  | {
      readonly ok: true;
      readonly entries: number;
      readonly trees: number;
      /** The latest checkpoint, or null when none has been made yet. */
      readonly checkpoint: { readonly n: number; readonly size: number; readonly root: string; readonly at: string } | null;
      /** Rows not yet covered by a checkpoint: they hold only against those who cannot rewrite the database. */
      readonly uncovered: number;
      /** When the oldest of those rows was decided (ISO 8601), or null: alarm when it is older than a few intervals. */
      readonly oldestUncoveredAt: string | null;
      /**
       * With an export that lags the database (verifyStoredAudit): the database's checkpoints past it
       * that were checked (signed by a given audit key, each extending the one before) and the rows only
       * they cover, which hold against whoever writes the database but not against a holder of that key;
       * and how many later ones are signed by keys not given (their rows count as uncovered).
       */
      readonly fromDatabase?: { readonly checkpoints: number; readonly rows: number; readonly unknownKey: number };
    }
  | {
      readonly ok: false;
      readonly entries: number;
      /** The first row found bad, when one row can be named. */
      readonly firstBadId?: string;
      /** The first checkpoint found bad, or that the rows no longer match. */
      readonly firstBadCheckpoint?: number;
      readonly reason: string;
    };

/** Checks a tenant's audit rows, chains and checkpoints; reports the first thing that fails. */
export async function verifyAudit(keys: AuditKeys, tenantId: string, data: AuditData, genesis: string): Promise<AuditReport> {
  const hashes = new Map<string, Leaf[]>();
  const replay = new DecisionReplay();
  const chain = await verifyChains(collect(data.rows, hashes, replay), data.heads, genesis);
  if (!chain.ok) return { ok: false, entries: chain.entries, firstBadId: chain.firstBadId, reason: 'a row does not follow its chain' };
  const log = await verifyCheckpointLog(keys, tenantId, data.checkpoints);
  if (!log.ok) return { ok: false, entries: chain.entries, firstBadCheckpoint: log.badCheckpoint, reason: log.reason };
  const last = log.checkpoints[log.checkpoints.length - 1];
  // A log that holds but records a decision its own earlier rows forbid: the state under it was changed.
  const unlawful = (): AuditReport | null => (replay.first === null ? null : { ok: false, entries: chain.entries, ...replay.first });
  if (last === undefined)
    return (
      unlawful() ?? {
        ok: true,
        entries: chain.entries,
        trees: chain.trees,
        checkpoint: null,
        uncovered: chain.entries,
        oldestUncoveredAt: oldestUncovered(hashes, new Map()),
      }
    );

  const { leaves, problem } = leavesOf(data.ranges, hashes, last.size);
  // The earliest failure wins: a checkpoint whose rows are all there but hash to another root comes
  // before rows missing further on.
  const mismatch = await firstMismatch(
    log.checkpoints.filter((c) => c.size <= leaves.length),
    leaves,
  );
  if (mismatch !== null) return { ok: false, entries: chain.entries, ...mismatch };
  if (problem !== null) return { ok: false, entries: chain.entries, firstBadCheckpoint: firstCovering(log.checkpoints, problem.leaf), reason: problem.reason };
  const covered = coveredSeqs(data.ranges, last.size);
  const late = afterTheFact(log.checkpoints, data.ranges, hashes, covered);
  if (late !== null) return { ok: false, entries: chain.entries, ...late };
  return (
    unlawful() ?? {
      ok: true,
      entries: chain.entries,
      trees: chain.trees,
      checkpoint: { n: last.n, size: last.size, root: last.root, at: last.at },
      uncovered: chain.entries - last.size,
      oldestUncoveredAt: oldestUncovered(hashes, covered),
    }
  );
}

/**
 * The last seq of range `r` that a checkpoint of `size` leaves covers. A range running past it (the
 * database's ranges are the database's word) counts only that far; its further rows are uncovered.
 */
const coveredTo = (r: LeafRange, size: number): number => Math.min(r.toSeq, r.fromSeq + size - r.leafStart - 1);

/** Each tree's last seq the checkpoint of `size` leaves covers. */
function coveredSeqs(ranges: readonly LeafRange[], size: number): Map<string, number> {
  const covered = new Map<string, number>();
  for (const r of ranges) if (r.leafStart < size) covered.set(r.treeId, coveredTo(r, size));
  return covered;
}

/** The rows past `covered`, tree by tree in seq order. */
function* uncoveredRows(rows: ReadonlyMap<string, readonly Leaf[]>, covered: ReadonlyMap<string, number>): Generator<Leaf> {
  for (const [treeId, tree] of rows) {
    for (let i = covered.get(treeId) ?? 0; i < tree.length; i++) yield tree[i] as Leaf;
  }
}

/**
 * The date of the oldest row past `covered`, or null when there is none. A row that stays uncovered
 * holds only against those who cannot write the database: a transaction kept open on a tree's head
 * keeps the checkpointer from covering it, and this is how a monitor sees that.
 */
function oldestUncovered(rows: ReadonlyMap<string, readonly Leaf[]>, covered: ReadonlyMap<string, number>): string | null {
  let oldest = Infinity;
  for (const leaf of uncoveredRows(rows, covered)) oldest = Math.min(oldest, leaf.at);
  return oldest === Infinity ? null : new Date(oldest).toISOString();
}

/** What the leaves and the dates need of a row. */
interface Leaf {
  readonly hash: string;
  readonly id: string;
  /** When it was decided (ms; NaN when that is no time). */
  readonly at: number;
}

/** Passes the pages through, keeping each row's hash, id and time by tree and seq, and replaying its decision. */
async function* collect(pages: AsyncIterable<AuditRecord[]>, into: Map<string, Leaf[]>, replay: DecisionReplay): AsyncGenerator<AuditRecord[]> {
  for await (const rows of pages) {
    for (const r of rows) {
      replay.see(r);
      let tree = into.get(r.treeId);
      if (tree === undefined) into.set(r.treeId, (tree = []));
      tree[Number(r.seq) - 1] = { hash: r.hash, id: r.id, at: r.at.getTime() };
    }
    yield rows;
  }
}

/**
 * The first row written after the fact: one first covered by checkpoint k (or by none) but dated
 * more than CHECKPOINT_LAG_MS before checkpoint k − 1 (or the latest) was taken. A decision commits
 * seconds after its date, so that checkpoint would have covered it had it been there; rows inserted
 * later under an earlier date, or left out of the checkpoints, are what this finds. Null: none.
 */
function afterTheFact(
  checkpoints: readonly CheckpointPayload[],
  ranges: readonly LeafRange[],
  rows: ReadonlyMap<string, readonly Leaf[]>,
  covered: ReadonlyMap<string, number>,
): { firstBadId: string; firstBadCheckpoint?: number; reason: string } | null {
  const last = checkpoints[checkpoints.length - 1];
  if (last === undefined) return null;
  let k = 0;
  const late = (leaf: Leaf, before: CheckpointPayload): boolean => !(leaf.at >= Date.parse(before.at) - CHECKPOINT_LAG_MS);
  const reason = (leaf: Leaf, before: CheckpointPayload): string =>
    `row ${leaf.id} is dated ${Number.isNaN(leaf.at) ? 'at no valid time' : new Date(leaf.at).toISOString()}, before checkpoint ${before.n} (${before.at}), which does not cover it: it was written after the fact`;
  for (const r of ranges) {
    if (r.leafStart >= last.size) break;
    for (let seq = r.fromSeq; seq <= coveredTo(r, last.size); seq++) {
      const leafIndex = r.leafStart + seq - r.fromSeq;
      while ((checkpoints[k] as CheckpointPayload).size <= leafIndex) k++;
      const before = checkpoints[k - 1];
      const leaf = rows.get(r.treeId)?.[seq - 1] as Leaf;
      if (before !== undefined && late(leaf, before))
        return { firstBadId: leaf.id, firstBadCheckpoint: (checkpoints[k] as CheckpointPayload).n, reason: reason(leaf, before) };
    }
  }
  for (const leaf of uncoveredRows(rows, covered)) if (late(leaf, last)) return { firstBadId: leaf.id, reason: reason(leaf, last) };
  return null;
}

interface Leaves {
  readonly leaves: Uint8Array[];
  /** Why no more leaves could be built (null: all `size` were), at which leaf. */
  readonly problem: { readonly reason: string; readonly leaf: number } | null;
}

/**
 * The leaf hashes of the first `size` leaves, from the ranges and the (already chain-verified) rows,
 * as far as they can be built: ranges that leave a gap or skip a tree's rows, or a row that is gone,
 * stop them.
 */
function leavesOf(ranges: readonly LeafRange[], hashes: ReadonlyMap<string, readonly Leaf[]>, size: number): Leaves {
  const leaves: Uint8Array[] = [];
  const next = new Map<string, number>();
  const bad = (reason: string): Leaves => ({ leaves, problem: { reason, leaf: leaves.length } });
  for (const r of ranges) {
    if (leaves.length >= size) break;
    if (r.leafStart !== leaves.length) return bad(`the leaf ranges leave a gap at leaf ${leaves.length}`);
    if (r.fromSeq !== (next.get(r.treeId) ?? 1) || r.toSeq < r.fromSeq) return bad(`the leaf ranges skip rows of tree '${r.treeId}'`);
    for (let seq = r.fromSeq; seq <= r.toSeq; seq++) {
      const hash = hashes.get(r.treeId)?.[seq - 1]?.hash;
      const bytes = hash === undefined ? null : fromHex(hash);
      if (bytes === null) return bad(`row ${seq} of tree '${r.treeId}' (leaf ${leaves.length}) is gone`);
      leaves.push(leafHash(bytes));
    }
    next.set(r.treeId, r.toSeq + 1);
  }
  if (leaves.length < size) return bad(`the checkpoints cover ${size} rows; the database holds ${leaves.length} of them`);
  return { leaves: leaves.slice(0, size), problem: null };
}

/** The first checkpoint whose signed root is not the root of the rows it covers. */
async function firstMismatch(
  checkpoints: readonly CheckpointPayload[],
  leaves: readonly Uint8Array[],
): Promise<{ firstBadCheckpoint: number; reason: string } | null> {
  const reader = memoryReader(leaves);
  let from = 0;
  for (const c of checkpoints) {
    if (c.size > 0 && bytesToHex(await rootOf(reader, c.size)) !== c.root) {
      return {
        firstBadCheckpoint: c.n,
        reason: `the rows at leaves ${from}..${c.size - 1} are not those checkpoint ${c.n} signed: a row there was changed, removed or inserted`,
      };
    }
    from = c.size;
  }
  return null;
}

/** The first checkpoint covering leaf `i`. */
function firstCovering(checkpoints: readonly CheckpointPayload[], i: number): number {
  return checkpoints.find((c) => c.size > i)?.n ?? 1;
}

/**
 * Verifies a tenant's stored audit in one read-only REPEATABLE READ transaction, so rows, heads,
 * ranges and checkpoints are one consistent view (read one by one, a decision or a checkpoint
 * committing in between would look like tampering). With `exported` (the checkpoints kept outside
 * the database), the rows are held to those, and the database's own copy must be the same
 * checkpoints: one that differs, or a copy that stops short of the export (a rollback), is reported.
 * The database's checkpoints past the export (a copy of the file taken earlier, or a sink behind) are
 * held to it in turn: each must be signed by the audit key and extend the one before, from the last
 * exported on, and the rows they cover are held to them. Else a rewrite of rows covered since the
 * copy was taken would pass as rows "not yet covered".
 */
export async function verifyStoredAudit(db: Db, keys: AuditKeys, tenantId: string, exported: readonly CheckpointLine[] | null): Promise<AuditReport> {
  return db.transaction(
    async (tx) => {
      const store = new Store(tx);
      const inDb = await checkpointLines(tx, tenantId);
      const differs = exported === null ? -1 : inDb.findIndex((l, i) => exported[i] !== undefined && exported[i].jws !== l.jws);
      const past = exported === null || differs >= 0 ? [] : inDb.slice(exported.length);
      // Up to the first signed by a key not given (a newer audit key than the keys file holds): it and
      // those after it cannot be checked, so they hold nothing, and their rows count as uncovered.
      const unknown = past.findIndex((l) => !signedByKnownKey(keys, l.jws));
      const beyond = unknown < 0 ? past : past.slice(0, unknown);
      const report = await verifyAudit(
        keys,
        tenantId,
        {
          heads: await store.auditHeads(tenantId),
          ranges: await auditRanges(tx, tenantId),
          checkpoints: exported === null ? inDb : [...exported, ...beyond],
          rows: store.auditChain(tenantId),
        },
        GENESIS_HASH,
      );
      if (!report.ok || exported === null) return report;
      if (differs >= 0)
        return {
          ok: false,
          entries: report.entries,
          firstBadCheckpoint: differs + 1,
          reason: `the database's checkpoint ${differs + 1} is not the one exported`,
        };
      if (inDb.length < exported.length) {
        return {
          ok: false,
          entries: report.entries,
          firstBadCheckpoint: inDb.length + 1,
          reason: `the database holds ${inDb.length} of the ${exported.length} exported checkpoints: it was rolled back`,
        };
      }
      if (past.length === 0 || !report.ok) return report;
      const lastExported = exported.at(-1);
      const exportedSize = lastExported === undefined ? 0 : await sizeOf(keys, lastExported.jws);
      return {
        ...report,
        fromDatabase: { checkpoints: beyond.length, rows: (report.checkpoint?.size ?? 0) - exportedSize, unknownKey: past.length - beyond.length },
      };
    },
    { isolationLevel: 'repeatable read', accessMode: 'read only' },
  );
}

/** Whether a checkpoint names a key among `keys` (a malformed one counts as known: checking it reports it). */
function signedByKnownKey(keys: AuditKeys, jws: string): boolean {
  try {
    const kid = decodeProtectedHeader(jws).kid;
    return typeof kid !== 'string' || keys.has(kid);
  } catch {
    return true;
  }
}

/** The tree size a checkpoint, already verified, signs. */
async function sizeOf(keys: AuditKeys, jws: string): Promise<number> {
  const opened = await openCheckpoint(keys, jws);
  return opened.ok ? opened.payload.size : 0;
}
