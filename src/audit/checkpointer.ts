/**
 * The checkpointer: the one writer of each tenant's audit Merkle tree. Decisions append rows to
 * their own tree's hash chain without any tenant-wide lock; this, off the decision path, takes the
 * rows committed since the tenant's last checkpoint, gives them leaf positions (tree by tree, in
 * chain order), stores the tree's node hashes in tiles, and signs a checkpoint over the new root.
 *
 * Which trees changed is found without scanning them all: every head records the transaction that
 * last moved it (`xid`), and each checkpoint keeps the snapshot it was taken in, so the changed heads
 * are those written by a transaction that snapshot did not see (pg_visible_in_snapshot). A tree's rows
 * commit in seq order under its head lock, so everything up to the head a snapshot sees is committed.
 *
 * One checkpointer per tenant at a time: an advisory lock, and the (tenant, n) primary key behind it.
 */
import { sql, type SQL } from 'drizzle-orm';
import { bytesToHex } from '@noble/hashes/utils.js';
import type { KeyRing } from '../crypto/keys.js';
import type { Db } from '../store/store.js';
import { CHECKPOINT_LAG_MS, checkpointId, openCheckpoint, signCheckpoint, type CheckpointLine, type CheckpointPayload } from './checkpoint.js';
import { fromHex } from '../crypto/hash.js';
import { consistencyProof, inclusionProof, leafHash, rootOf, verifyConsistency } from './merkle.js';
import { appendLeavesInSlices, rightEdgeOf, TILE_WIDTH, tileReader, type Tile } from './tiles.js';

/** The audit's data is not what the checkpointer or a proof expects: never signed over, never proven. */
export class AuditIntegrityError extends Error {
  readonly code = 'audit_integrity';
}

type Row = Record<string, unknown>;
/** Raw statements, on either driver (postgres.js returns the rows, PGlite an object holding them). */
async function query(db: Pick<Db, 'execute'>, q: SQL): Promise<Row[]> {
  const res: unknown = await db.execute(q);
  return (Array.isArray(res) ? res : (res as { rows: Row[] }).rows) as Row[];
}

export interface LatestCheckpoint {
  readonly n: number;
  readonly size: number;
  readonly root: string;
  readonly jws: string;
  readonly at: Date;
}

/** A checkpoint just made, for the sink. */
export interface MadeCheckpoint extends CheckpointLine {
  readonly payload: CheckpointPayload;
  /** Ids of the rows it covers that are dated before the checkpoint that should have covered them (see newLeaves). */
  readonly late: readonly string[];
}

const LOCK_SPACE = 0x57_41_55_44; // "WAUD": the checkpointer's advisory locks, one per tenant

async function latest(db: Pick<Db, 'execute'>, tenantId: string): Promise<(LatestCheckpoint & { snapshot: string }) | null> {
  const [r] = await query(
    db,
    sql`SELECT n::text AS n, size::text AS size, root, jws, snapshot, at FROM audit_checkpoints c WHERE tenant_id = ${tenantId} ORDER BY c.n DESC LIMIT 1`,
  );
  if (r === undefined) return null;
  return { n: Number(r.n), size: Number(r.size), root: String(r.root), jws: String(r.jws), snapshot: String(r.snapshot), at: new Date(r.at as string) };
}

/** The tenant's latest checkpoint, if any. */
export async function latestCheckpoint(db: Db, tenantId: string): Promise<LatestCheckpoint | null> {
  return latest(db, tenantId);
}

/** Every checkpoint of the tenant from `afterN` on, in order, as exported lines. */
export async function checkpointLines(db: Db, tenantId: string, afterN = 0): Promise<CheckpointLine[]> {
  const rows = await query(
    db,
    sql`SELECT n::text AS n, jws, consistency FROM audit_checkpoints c WHERE tenant_id = ${tenantId} AND c.n > ${afterN} ORDER BY c.n`,
  );
  return rows.map((r) => ({ n: Number(r.n), jws: String(r.jws), consistency: r.consistency as string[] }));
}

/** A tile loader over the stored tiles of a tenant (within the caller's transaction, if any). */
export function tileLoader(db: Pick<Db, 'execute'>, tenantId: string): (level: number, index: number) => Promise<Uint8Array | undefined> {
  return async (level, index) => {
    const [r] = await query(db, sql`SELECT hashes FROM audit_tiles WHERE tenant_id = ${tenantId} AND level = ${level} AND idx = ${index}`);
    return r === undefined ? undefined : (fromHex(String(r.hashes)) ?? undefined);
  };
}

interface ChangedTree {
  readonly tree_id: string;
  readonly lo: number;
  readonly hi: number;
}

/**
 * The last seq a checkpoint covers of each tree named in `ids` (a JSON array; null when none): the
 * last range of each tree by its index, one lookup per tree. As a semi-join, the planner read every
 * range of the tenant in each round (38,000 rows: 9 ms), and ranges grow by one per changed tree per
 * checkpoint. test/store/plans.test.ts holds this.
 */
export const coveredSeqs = (tenantId: string, ids: string): SQL =>
  sql`SELECT t.tree_id, (SELECT r.to_seq FROM audit_ranges r WHERE r.tenant_id = ${tenantId} AND r.tree_id = t.tree_id ORDER BY r.to_seq DESC LIMIT 1)::text AS hi
      FROM jsonb_array_elements_text(${ids}::jsonb) AS t(tree_id)`;

/** The trees whose heads moved since `snapshot` (all trees with rows when there is none), with their covered seq. */
async function changedTrees(tx: Pick<Db, 'execute'>, tenantId: string, snapshot: string | null): Promise<ChangedTree[]> {
  // After a dump and restore (or logical replication) into another cluster, transaction ids start
  // again below the saved snapshot's: then every head is compared with what the ranges cover.
  const [fresh] = snapshot === null ? [] : await query(tx, sql`SELECT pg_current_xact_id() < pg_snapshot_xmax(${snapshot}::pg_snapshot) AS reset`);
  if (fresh?.reset === true) snapshot = null;
  const heads = await query(
    tx,
    snapshot === null
      ? sql`SELECT tree_id, seq::text AS seq FROM audit_heads WHERE tenant_id = ${tenantId} AND seq > 0`
      : sql`SELECT tree_id, seq::text AS seq FROM audit_heads WHERE tenant_id = ${tenantId}
              AND xid >= pg_snapshot_xmin(${snapshot}::pg_snapshot) AND NOT pg_visible_in_snapshot(xid, ${snapshot}::pg_snapshot)`,
  );
  if (heads.length === 0) return [];
  const ids = JSON.stringify(heads.map((h) => h.tree_id));
  const covered = await query(tx, coveredSeqs(tenantId, ids));
  const done = new Map(covered.filter((c) => c.hi !== null).map((c) => [String(c.tree_id), Number(c.hi)]));
  return (
    heads
      .map((h) => ({ tree_id: String(h.tree_id), lo: done.get(String(h.tree_id)) ?? 0, hi: Number(h.seq) }))
      .filter((t) => t.hi > t.lo)
      // Code-unit order, whatever the database's collation: the leaf order is the ranges', written below.
      .sort((a, b) => (a.tree_id < b.tree_id ? -1 : a.tree_id > b.tree_id ? 1 : 0))
  );
}

/**
 * The new rows' hashes, tree by tree in seq order; every seq must be there (a gap is never signed
 * over). Rows are matched by (tree, seq), not by position: the database's collation may order tree
 * ids unlike the code-unit order the trees were sorted in. Pauses as it goes (see SLICE). A row dated
 * before `notBefore` (the last signed checkpoint's time less CHECKPOINT_LAG_MS) was written after that
 * checkpoint was taken, under an earlier date, or its instance's clock was far off: it is signed over
 * all the same (stopping would leave every later row of the tenant unsigned, for a clock fault as for
 * a forgery) and named in `late`, and `verify` reports it for good.
 */
async function newLeaves(
  tx: Pick<Db, 'execute'>,
  tenantId: string,
  trees: readonly ChangedTree[],
  notBefore: number | null,
  pause: () => Promise<void>,
  late: string[],
): Promise<Uint8Array[]> {
  const rows = await query(
    tx,
    sql`SELECT a.tree_id, a.seq::text AS seq, a.hash, a.id, a.at FROM jsonb_to_recordset(${JSON.stringify(trees)}::jsonb) AS r(tree_id text, lo bigint, hi bigint)
        JOIN audit a ON a.tenant_id = ${tenantId} AND a.tree_id = r.tree_id AND a.seq > r.lo AND a.seq <= r.hi`,
  );
  if (notBefore !== null) {
    for (const r of rows) {
      const at = new Date(r.at as string).getTime();
      if (!(at >= notBefore)) late.push(String(r.id));
    }
  }
  // A slot per new row of each tree (seq lo + 1 … hi), each filled once. A tree whose head claims
  // more rows than were read lacks some: refused before any slot is made for them.
  for (const t of trees) {
    if (t.hi - t.lo > rows.length) throw new AuditIntegrityError(`audit rows of tree '${t.tree_id}' after seq ${t.lo} are missing`);
  }
  const slots = new Map(trees.map((t) => [t.tree_id, { lo: t.lo, hashes: new Array<string | undefined>(t.hi - t.lo) }]));
  for (let n = 0; n < rows.length; n++) {
    const r = rows[n] as Row;
    const tree = slots.get(String(r.tree_id));
    const i = tree === undefined ? -1 : Number(r.seq) - tree.lo - 1;
    if (tree === undefined || !(i >= 0 && i < tree.hashes.length) || tree.hashes[i] !== undefined) {
      throw new AuditIntegrityError(`audit row ${String(r.seq)} of tree '${String(r.tree_id)}' was found twice or outside the range read`);
    }
    tree.hashes[i] = String(r.hash);
    if ((n + 1) % (4 * SLICE) === 0) await pause();
  }
  const leaves: Uint8Array[] = [];
  for (const t of trees) {
    const { hashes } = slots.get(t.tree_id) as { hashes: (string | undefined)[] };
    for (let i = 0; i < hashes.length; i++) {
      const hex = hashes[i];
      const hash = hex === undefined ? null : fromHex(hex);
      if (hash === null || hash.length !== 32) throw new AuditIntegrityError(`audit row ${t.lo + 1 + i} of tree '${t.tree_id}' is missing or malformed`);
      leaves.push(leafHash(hash));
      if (leaves.length % SLICE === 0) await pause();
    }
  }
  return leaves;
}

/** Loads the right-edge tiles a tree of `size` leaves appends to. */
async function rightEdge(load: (level: number, index: number) => Promise<Uint8Array | undefined>, size: number): Promise<Map<number, Tile>> {
  const edge = new Map<number, Tile>();
  for (const t of rightEdgeOf(size)) {
    const hashes = await load(t.level, t.index);
    if (hashes === undefined || hashes.length !== t.width * 32) throw new AuditIntegrityError(`audit tile ${t.level}/${t.index} is missing or the wrong size`);
    edge.set(t.level, { level: t.level, index: t.index, hashes });
  }
  return edge;
}

export interface CheckpointOptions {
  readonly db: Db;
  readonly keys: KeyRing;
  readonly now: () => Date;
  /**
   * Awaited after each SLICE of new leaves matched, hashed or appended, so that the requests queued
   * on this thread are served in between (default: `pauseEvery(PAUSE_AFTER_MS)`). It runs inside
   * the checkpoint's transaction and must not wait for the database: on PGlite, whose transaction
   * holds the one connection, that would never resolve. On PGlite a pause lets only work that needs
   * no database through (the checkpoint's transaction holds it), so main.ts passes one that never
   * yields there.
   */
  readonly pause?: () => Promise<void>;
  /**
   * The sink's last checkpoint of the tenant, read once the sink is caught up (absent or null: no
   * sink, or an empty one). The checkpoint extended must be that one as this transaction reads it:
   * checked in another transaction (publishCheckpoints), a database that shows the signer an older
   * checkpoint than it shows the check would have the audit key sign a fork of the exported chain.
   */
  readonly exported?: CheckpointLine | null;
}

/**
 * Leaves hashed between two pauses. The checkpointer shares its thread with the requests: one
 * checkpoint of the ~10,000 rows ten seconds bring at 1,000 approvals/s held it for ~110 ms in one
 * piece (35 ms hashing the leaves, 75 ms the tiles), and every request that arrived meanwhile waited
 * for it: the p99 at that rate (bench/RESULTS.md "The checkpointer in slices"). A slice of 256 takes
 * ~1–3 ms; the default pause yields once PAUSE_AFTER_MS of them have run.
 */
export const SLICE = TILE_WIDTH;

/** Tiles written by one statement (a full tile is 16 KiB as text). */
const TILES_PER_STATEMENT = 16;

/**
 * Resolves on a later turn of the event loop, after the I/O that has arrived (requests, database
 * answers) has been handled: setImmediate where there is one (Node), else a 0 ms timer.
 */
export const nextTask: () => Promise<void> =
  typeof setImmediate === 'function' ? () => new Promise((resolve) => setImmediate(resolve)) : () => new Promise((resolve) => setTimeout(resolve, 0));

/** How much work the default pause lets run between two turns of the event loop. */
export const PAUSE_AFTER_MS = 4;

/**
 * A pause that yields to the event loop (`nextTask`) once `ms` of work has passed since it last did,
 * and otherwise returns at once: few turns, each of which may wait behind a busy loop's I/O.
 */
export function pauseEvery(ms: number): () => Promise<void> {
  let since = performance.now();
  return async () => {
    if (performance.now() - since < ms) return;
    await nextTask();
    since = performance.now();
  };
}

/**
 * The checkpoint transaction's own limit on idling between statements (ms), above the connection's
 * (5 s by default, issue 13): it idles while it hashes and pauses, and on a saturated server a
 * large checkpoint's pauses add up. It still ends if this process stops answering altogether.
 */
const CHECKPOINT_IDLE_MS = 60_000;

/**
 * Makes the tenant's next checkpoint if rows were committed since its last one; null when there is
 * nothing new or another checkpointer holds the tenant. Throws AuditIntegrityError when the stored
 * audit does not add up (a missing row or tile), rather than sign over it.
 */
export async function checkpointTenant(o: CheckpointOptions, tenantId: string): Promise<MadeCheckpoint | null> {
  try {
    return await makeCheckpoint(o, tenantId);
  } catch (e) {
    // The transaction's snapshot is taken by its first statement, just before the advisory lock: a
    // checkpointer that committed in between leaves this one a stale view, and the (tenant, n) key
    // refuses its checkpoint. That one won; nothing is lost.
    if (isUniqueViolation(e)) return null;
    throw e;
  }
}

function isUniqueViolation(e: unknown): boolean {
  for (let c: unknown = e; typeof c === 'object' && c !== null; c = (c as { cause?: unknown }).cause) {
    if ((c as { code?: unknown }).code === '23505') return true;
  }
  return false;
}

async function makeCheckpoint(o: CheckpointOptions, tenantId: string): Promise<MadeCheckpoint | null> {
  return o.db.transaction(
    async (tx) => {
      // The checkpoint is dated before its snapshot is taken (by the statement below), not when it is
      // signed: every row dated CHECKPOINT_LAG_MS before `at` has committed by then and is in it, however
      // long the leaves take to read (verify's afterTheFact relies on it).
      const takenAt = o.now();
      const [lock] = await query(
        tx,
        sql`SELECT pg_try_advisory_xact_lock(${LOCK_SPACE}, hashtext(${tenantId})) AS ok, set_config('idle_in_transaction_session_timeout', ${String(CHECKPOINT_IDLE_MS)}, true)`,
      );
      if (lock?.ok !== true) return null;
      const [snap] = await query(tx, sql`SELECT pg_current_snapshot()::text AS s`);
      const last = await latest(tx, tenantId);
      // The previous tree is what the audit key signed, never the columns beside it: whoever can
      // write the database could otherwise have this checkpointer sign a shrunk or forked tree.
      const prev = last === null ? null : await openCheckpoint(o.keys.verifyKeys, last.jws);
      if (prev !== null && (!prev.ok || prev.payload.tenant !== tenantId || prev.payload.n !== last?.n)) {
        throw new AuditIntegrityError(`the latest stored checkpoint of tenant ${tenantId} is not one the audit key signed`);
      }
      const signed = prev?.ok === true ? prev.payload : null;
      const exported = o.exported ?? null;
      // Newer than the sink: another instance's, not yet exported; the next round exports (and checks) it first.
      if (exported !== null && last !== null && last.n > exported.n) return null;
      if (exported !== null && (last?.n !== exported.n || last.jws !== exported.jws)) {
        throw new AuditIntegrityError(
          `the latest stored checkpoint of tenant ${tenantId} is not checkpoint ${exported.n} as exported: the audit history in the database was rewritten or rolled back`,
        );
      }
      const trees = await changedTrees(tx, tenantId, last?.snapshot ?? null);
      if (trees.length === 0) return null;
      const pause = o.pause ?? pauseEvery(PAUSE_AFTER_MS);
      const notBefore = signed === null ? null : Date.parse(signed.at) - CHECKPOINT_LAG_MS;
      const late: string[] = [];
      const leaves = await newLeaves(tx, tenantId, trees, notBefore, pause, late);
      const oldSize = signed?.size ?? 0;
      const size = oldSize + leaves.length;

      const stored = tileLoader(tx, tenantId);
      const changed = await appendLeavesInSlices(await rightEdge(stored, oldSize), oldSize, leaves, SLICE, pause);
      const fresh = new Map(changed.map((t) => [`${t.level}/${t.index}`, t.hashes]));
      const reader = tileReader(async (level, index) => fresh.get(`${level}/${index}`) ?? stored(level, index), size);
      const rootBytes = await rootOf(reader, size);
      const root = bytesToHex(rootBytes);
      const proof = signed === null ? [] : await consistencyProof(reader, oldSize, size);
      // The stored tiles and ranges are the database's too: the new tree must extend the signed one.
      if (signed !== null && !verifyConsistency(oldSize, size, fromHex(signed.root) as Uint8Array, rootBytes, proof)) {
        throw new AuditIntegrityError(`the stored audit tree of tenant ${tenantId} does not extend its last signed checkpoint`);
      }
      const consistency = proof.map(bytesToHex);

      const payload: CheckpointPayload = {
        tenant: tenantId,
        n: (last?.n ?? 0) + 1,
        size,
        root,
        prev: last === null ? null : checkpointId(last.jws),
        at: takenAt.toISOString(),
      };
      const jws = await signCheckpoint(o.keys, payload);
      let start = oldSize;
      const ranges = trees.map((t) => {
        const r = { leaf_start: start, tree_id: t.tree_id, from_seq: t.lo + 1, to_seq: t.hi };
        start += t.hi - t.lo;
        return r;
      });
      await query(
        tx,
        sql`INSERT INTO audit_checkpoints (tenant_id, n, size, root, jws, consistency, snapshot, at)
            VALUES (${tenantId}, ${payload.n}, ${size}, ${root}, ${jws}, ${JSON.stringify(consistency)}::jsonb, ${String(snap?.s)}, ${payload.at})`,
      );
      await query(
        tx,
        sql`INSERT INTO audit_ranges (tenant_id, leaf_start, tree_id, from_seq, to_seq)
            SELECT ${tenantId}, leaf_start, tree_id, from_seq, to_seq FROM jsonb_to_recordset(${JSON.stringify(ranges)}::jsonb)
              AS r(leaf_start bigint, tree_id text, from_seq bigint, to_seq bigint)`,
      );
      // A statement per slice of tiles: 40,000 leaves make ~160 tiles, 2.6 MB as text at once.
      for (let i = 0; i < changed.length; i += TILES_PER_STATEMENT) {
        const tiles = changed.slice(i, i + TILES_PER_STATEMENT).map((t) => ({ level: t.level, idx: t.index, hashes: bytesToHex(t.hashes) }));
        await query(
          tx,
          sql`INSERT INTO audit_tiles (tenant_id, level, idx, hashes)
              SELECT ${tenantId}, level, idx, hashes FROM jsonb_to_recordset(${JSON.stringify(tiles)}::jsonb) AS r(level int, idx bigint, hashes text)
              ON CONFLICT (tenant_id, level, idx) DO UPDATE SET hashes = excluded.hashes`,
        );
      }
      return { n: payload.n, jws, consistency, payload, late };
    },
    { isolationLevel: 'repeatable read' },
  );
}

/** Where an audit row sits among the leaves, once a checkpoint covers it. */
export async function leafOf(db: Db, tenantId: string, treeId: string, seq: number): Promise<number | null> {
  const [r] = await query(
    db,
    sql`SELECT leaf_start::text AS leaf_start, from_seq::text AS from_seq FROM audit_ranges r
        WHERE tenant_id = ${tenantId} AND tree_id = ${treeId} AND r.to_seq >= ${seq} ORDER BY r.to_seq LIMIT 1`,
  );
  if (r === undefined || Number(r.from_seq) > seq) return null;
  return Number(r.leaf_start) + seq - Number(r.from_seq);
}

/** The RFC 9162 inclusion proof of a leaf in the tree of `size` leaves, from the stored tiles. */
export async function proveInclusion(db: Db, tenantId: string, leaf: number, size: number): Promise<string[]> {
  return (await inclusionProof(tileReader(tileLoader(db, tenantId), size), leaf, size)).map(bytesToHex);
}

/** Every leaf range of the tenant, in leaf order (for verification). */
export async function auditRanges(db: Db, tenantId: string): Promise<{ leafStart: number; treeId: string; fromSeq: number; toSeq: number }[]> {
  const rows = await query(
    db,
    sql`SELECT leaf_start::text AS leaf_start, tree_id, from_seq::text AS from_seq, to_seq::text AS to_seq FROM audit_ranges r
        WHERE tenant_id = ${tenantId} ORDER BY r.leaf_start`,
  );
  return rows.map((r) => ({ leafStart: Number(r.leaf_start), treeId: String(r.tree_id), fromSeq: Number(r.from_seq), toSeq: Number(r.to_seq) }));
}
