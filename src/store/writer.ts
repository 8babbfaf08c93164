/**
 * The decision writer: group commit. Every decision (mint, attenuate, approve, revoke) is a unit
 * run inside a batch transaction that first locks the audit-chain heads of the delegation trees its
 * units touch, so each tree's decisions are totally ordered across all instances while decisions on
 * other trees of the same tenant never wait for them; then each unit reads and changes the store
 * under that lock, its audit row is chained onto its tree's head, and one commit makes a whole batch
 * durable. No unit's promise resolves before its batch has committed: fail closed.
 */
import { sealRow } from './audit.js';
import { BatchFailed, batchRunner, type BatchConn, type BatchOutcome, type BatchRunner } from './batch.js';
import { completeFences, lockFences, type Fence, type StoredResponse } from './idempotency.js';
import { decisionTx, GENESIS_HASH, StoreUnavailable, type Db, type DecisionTx } from './store.js';

/** The audit row of a decision, without its chain fields. */
export interface AuditDraft {
  readonly id: string;
  readonly event: 'mint' | 'attenuate' | 'approve' | 'revoke';
  readonly decision: 'grant' | 'deny';
  readonly reasonCode: string | null;
  readonly capabilityId: string | null;
  readonly parentId: string | null;
  readonly trajectoryId: string | null;
  readonly op: string | null;
  readonly target: unknown;
  readonly cost: bigint | null;
  readonly callId: string | null;
  readonly detail: unknown;
}

export interface Decided<R> {
  readonly result: R;
  /** Null when the unit turned out to decide nothing (e.g. revoking an unknown id). */
  readonly audit: AuditDraft | null;
  /** Stored on the idempotency record, when the unit holds one. */
  readonly response?: StoredResponse;
}

export interface DecisionUnit<R> {
  readonly tenantId: string;
  readonly fence: Fence | null;
  /**
   * The capability whose chain `run` will lock, if known up front: the batch reads all of them at once,
   * and the unit's audit row joins that capability's delegation tree (the tenant's own chain when the
   * capability is unknown). Without it (and without `newTree`), the row joins the tenant's chain.
   */
  readonly chainOf?: string;
  /** A mint: the id of the tree (its root capability) whose chain this unit's row starts. */
  readonly newTree?: string;
  /** Runs under its tree's chain lock; `now` is the decision time, also the audit row's. */
  run(tx: DecisionTx, now: Date): Promise<Decided<R>>;
}

/** The unit's idempotency claim was taken over before its batch ran; it decided nothing. */
export class FenceLost extends Error {
  readonly code = 'in_flight';
}

interface Pending {
  readonly unit: DecisionUnit<unknown>;
  readonly resolve: (v: unknown) => void;
  readonly reject: (e: unknown) => void;
}

type Settle = { ok: true; value: unknown } | { ok: false; error: unknown };

export interface WriterOptions {
  readonly now: () => Date;
  /** Most units in one transaction. */
  readonly maxBatch?: number;
  readonly onBatch?: (size: number) => void;
  /** Batch transactions open at once (see LANES). */
  readonly lanes?: number;
}

/**
 * Batch transactions a writer keeps open at once, by default. A lane begins its transaction and only
 * then takes what is queued, so the BEGIN round trip doubles as the wait that lets a batch fill.
 * Measured with `npm run bench:http` (bench/RESULTS.md): two lanes (the next BEGIN overlapping the
 * last COMMIT) halved the batches and did not raise one tenant's throughput, as every batch of a
 * tenant queued on its audit-head lock then; three did no better.
 */
const LANES = 1;

export class DecisionWriter {
  private queue: Pending[] = [];
  private readonly maxBatch: number;
  private readonly run: BatchRunner;
  /** Open (or opening) batch transactions. */
  private readonly lanes = new Set<Promise<void>>();
  /** Lanes that have not yet taken their units: a unit queued now will be in one of their batches. */
  private idleLanes = 0;
  /** Held by the lane taking, reading and deciding its batch: one at a time, in order. */
  private turn: Promise<void> = Promise.resolve();

  constructor(
    db: Db,
    private readonly options: WriterOptions,
  ) {
    this.maxBatch = options.maxBatch ?? 256;
    this.run = batchRunner(db);
  }

  /** Queues a decision; resolves after the batch holding its audit row has committed. */
  submit<R>(unit: DecisionUnit<R>): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      this.queue.push({ unit, resolve: resolve as (v: unknown) => void, reject });
      this.startLane();
    });
  }

  /** Resolves when every queued decision has been written (for clean shutdown). */
  async flush(): Promise<void> {
    while (this.lanes.size > 0) await Promise.all(this.lanes);
  }

  private startLane(): void {
    if (this.queue.length === 0 || this.idleLanes > 0 || this.lanes.size >= (this.options.lanes ?? LANES)) return;
    this.idleLanes++;
    const lane = this.lane().finally(() => {
      this.lanes.delete(lane);
      this.startLane();
    });
    this.lanes.add(lane);
  }

  /**
   * One batch transaction: BEGIN, then wait for the turn, take every queued unit (up to maxBatch),
   * decide them and send the writes and COMMIT; the turn passes on as soon as COMMIT is sent.
   */
  private async lane(): Promise<void> {
    let batch: Pending[] = [];
    const settled: Settle[] = [];
    let passTurn!: () => void;
    const myTurn = this.turn;
    this.turn = new Promise((r) => (passTurn = r));
    const take = (): void => {
      this.idleLanes--;
      batch = this.queue.splice(0, this.maxBatch);
    };
    let entered = null as Promise<unknown> | null;
    try {
      await this.run((c) => {
        const body = (async (): Promise<BatchOutcome<void>> => {
          await myTurn;
          try {
            take();
            if (batch.length === 0) return { value: undefined, writes: [] };
            this.options.onBatch?.(batch.length);
            return await this.decideAll(c, batch, settled);
          } finally {
            passTurn();
          }
        })();
        entered = body.catch(() => undefined);
        return body;
      });
    } catch (e) {
      if (entered === null) {
        // BEGIN failed, so the body never ran: take what waits now and fail it, rather than start
        // lane after lane against a database that refuses (a unit queued later starts its own).
        await myTurn;
        take();
        passTurn();
      } else await entered; // the connection may have closed while the body still ran
      // Before COMMIT was sent nothing can have committed; a failure after it leaves the outcome unknown.
      const committing = e instanceof BatchFailed && e.committing;
      const failure = new StoreUnavailable('the database did not commit the decision', committing ? 'unknown' : 'rolled_back', { cause: e });
      for (const p of batch) p.reject(failure);
      return;
    }
    batch.forEach((p, i) => {
      const s = settled[i];
      if (s?.ok === true) p.resolve(s.value);
      else p.reject(s?.error ?? new Error('unit not run'));
    });
  }

  /**
   * One batch: the locking reads go out together (heads, chains, idempotency fences), the units
   * decide in memory, and the writes (charges, completed fences, audit rows and heads) go out
   * together, followed by COMMIT.
   */
  private async decideAll(c: BatchConn, batch: Pending[], settled: Settle[]): Promise<BatchOutcome<void>> {
    const now = this.options.now();
    const dtx = decisionTx(c);
    const chains = [...new Set(batch.flatMap((p) => (p.unit.chainOf === undefined ? [] : [p.unit.chainOf])))];
    const wanted = batch.flatMap(({ unit }) => (unit.newTree === undefined ? [{ tenant_id: unit.tenantId, cap: unit.chainOf ?? null }] : []));
    const fences = batch.flatMap((p) => (p.unit.fence === null ? [] : [p.unit.fence]));
    const [heads, , owns] = await Promise.all([
      c.query(LOCK_HEADS, [JSON.stringify(wanted)]) as Promise<unknown> as Promise<HeadRow[]>,
      dtx.prefetch(chains),
      lockFences(c, fences),
    ]);
    const chain = new Map(heads.map((h) => [headKey(h.tenant_id, h.tree_id), { seq: Number(h.seq), hash: h.hash, lastId: h.last_id }]));
    /** Each appended row as the JSON record the insert reads; `moved`: the heads that move. */
    const rows: string[] = [];
    const moved = new Map<string, { tenantId: string; treeId: string }>();
    const completed: { fence: Fence; response: StoredResponse }[] = [];
    for (const { unit } of batch) {
      const treeId = unit.newTree ?? (unit.chainOf === undefined ? '' : dtx.treeOf(unit.tenantId, unit.chainOf));
      const key = headKey(unit.tenantId, treeId);
      const head = unit.newTree === undefined ? chain.get(key) : chain.has(key) ? undefined : { seq: 0, hash: GENESIS_HASH, lastId: null };
      if (head === undefined) {
        // No locked head: an unknown tenant, a tree whose head is missing, or a mint of an existing tree.
        settled.push({ ok: false, error: new Error('no audit chain head for this decision') });
        continue;
      }
      if (unit.fence !== null && !owns(unit.fence)) {
        settled.push({ ok: false, error: new FenceLost('the idempotency key was taken over') });
        continue;
      }
      const out = await unit.run(dtx, now);
      if (out.audit !== null) {
        const { cost, ...draft } = out.audit;
        const row = {
          ...draft,
          tenantId: unit.tenantId,
          treeId,
          seq: head.seq + 1,
          at: now,
          cost: cost === null ? null : cost.toString(),
          prevHash: head.hash,
        };
        const { canonical, hash } = sealRow(row);
        // The inserted record is the hashed text itself plus its hash and tree (column names are the keys).
        rows.push(`${canonical.slice(0, -1)},"hash":"${hash}","tree_id":${JSON.stringify(treeId)}}`);
        chain.set(key, { seq: row.seq, hash, lastId: row.id });
        moved.set(key, { tenantId: unit.tenantId, treeId });
      }
      if (unit.fence !== null && out.response !== undefined) completed.push({ fence: unit.fence, response: out.response });
      settled.push({ ok: true, value: out.result });
    }
    const writes = [dtx.flush(), completeFences(c, completed)];
    if (rows.length > 0) {
      const newHeads = [...moved].map(([key, { tenantId, treeId }]) => ({ tenant_id: tenantId, tree_id: treeId, ...(chain.get(key) as object) }));
      writes.push(c.query(APPEND_AUDIT, [`[${rows.join(',')}]`, JSON.stringify(newHeads)]));
    }
    return { value: undefined, writes };
  }
}

const headKey = (tenantId: string, treeId: string): string => `${tenantId}\u0000${treeId}`;

interface HeadRow {
  readonly tenant_id: string;
  readonly tree_id: string;
  readonly seq: string;
  readonly hash: string;
  readonly last_id: string | null;
}

/**
 * The chain heads the batch's units append to, locked in (tenant, tree) order so batches on many
 * instances never deadlock: a unit naming a capability appends to that capability's tree (its root's
 * id; a capability's ancestors never change, so they are read unlocked), any other unit to its
 * tenant's own chain (''). Chain rows are locked after the heads, only by holders of their tree's head.
 */
const LOCK_HEADS = `WITH want AS (
  SELECT DISTINCT u.tenant_id, CASE WHEN u.cap IS NULL THEN '' ELSE coalesce(c.ancestors[1], c.id, '') END AS tree_id
  FROM jsonb_to_recordset($1::jsonb) AS u(tenant_id text, cap text)
  LEFT JOIN capabilities c ON c.id = u.cap AND c.tenant_id = u.tenant_id
)
SELECT h.tenant_id, h.tree_id, h.seq::text AS seq, h.hash, h.last_id FROM audit_heads h JOIN want w ON w.tenant_id = h.tenant_id AND w.tree_id = h.tree_id
ORDER BY h.tenant_id, h.tree_id FOR UPDATE OF h`;

/**
 * All audit rows of the batch and the moved heads (new trees' heads inserted), in one statement from
 * two JSON recordsets: building a multi-row insert through the query builder cost more CPU than the
 * database spent on it. A data-modifying CTE always runs to completion, referenced or not (PostgreSQL
 * docs, 7.8.4). `xid` records the transaction that moved a head, for the checkpointer.
 */
const APPEND_AUDIT = `WITH appended AS (
  INSERT INTO audit (tenant_id, tree_id, seq, id, at, event, decision, reason_code, capability_id, parent_id, trajectory_id, op, target, cost, call_id, detail, prev_hash, hash)
  SELECT tenant_id, tree_id, seq, id, at, event, decision, reason_code, capability_id, parent_id, trajectory_id, op, target, cost, call_id, detail, prev_hash, hash
  FROM jsonb_to_recordset($1::jsonb) AS x(tenant_id text, tree_id text, seq bigint, id text, at timestamptz, event text, decision text,
    reason_code text, capability_id text, parent_id text, trajectory_id text, op text, target jsonb, cost numeric, call_id text, detail jsonb, prev_hash text, hash text)
)
INSERT INTO audit_heads AS h (tenant_id, tree_id, seq, hash, last_id)
SELECT tenant_id, tree_id, seq, hash, "lastId" FROM jsonb_to_recordset($2::jsonb) AS x(tenant_id text, tree_id text, seq bigint, hash text, "lastId" text)
ON CONFLICT (tenant_id, tree_id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash, last_id = excluded.last_id, xid = pg_current_xact_id()`;
