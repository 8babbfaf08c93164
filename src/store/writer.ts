/**
 * The decision writer: group commit. Every decision (mint, attenuate, approve, revoke) is a unit
 * run inside a batch transaction that first locks the heads of the tenants' audit chains, so each
 * tenant's decisions are totally ordered across all instances; then each unit reads and changes
 * the store under that lock, its audit row is chained, and one commit makes a whole batch durable.
 * No unit's promise resolves before its batch has committed: fail closed.
 */
import { sealRow } from './audit.js';
import { BatchFailed, batchRunner, type BatchConn, type BatchOutcome, type BatchRunner } from './batch.js';
import { completeFences, lockFences, type Fence, type StoredResponse } from './idempotency.js';
import { Deadline, DEFAULT_DEADLINE_MS } from './deadline.js';
import { decisionTx, StoreUnavailable, type Db, type DecisionTx } from './store.js';

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
  /** The capability whose chain `run` will lock, if known up front: the batch reads all of them at once. */
  readonly chainOf?: string;
  /** Runs under the tenant's chain lock; `now` is the decision time, also the audit row's. */
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
  readonly timer: ReturnType<typeof setTimeout>;
  /**
   * `queued`: waiting for a batch; `batched`: in a batch whose COMMIT is not sent yet; `committing`:
   * COMMIT sent, outcome pending; `done`: answered (a late batch result is then ignored).
   */
  state: 'queued' | 'batched' | 'committing' | 'done';
  /** Abandons the batch holding it (set once it is batched). */
  abandon?: () => void;
}

type Settle = { ok: true; value: unknown } | { ok: false; error: unknown };

export interface WriterOptions {
  readonly now: () => Date;
  /** Most units in one transaction. */
  readonly maxBatch?: number;
  readonly onBatch?: (size: number) => void;
  /** Batch transactions open at once (see LANES). */
  readonly lanes?: number;
  /** The deadline of a decision submitted without one (ms; default DEFAULT_DEADLINE_MS). */
  readonly deadlineMs?: number;
  /** Most decisions pending (queued or in an open batch) at once; beyond it, refused at once (default 1024). */
  readonly maxPending?: number;
  /** A decision refused because too many were pending (load shedding). */
  readonly onShed?: () => void;
  /** A decision answered at its deadline: not committed, or unknown when its COMMIT had been sent. */
  readonly onDeadline?: (outcome: 'not_committed' | 'unknown') => void;
  /** A batch committed (`available`) or the database failed one (`unavailable`). */
  readonly onDatabase?: (state: 'available' | 'unavailable') => void;
}

/**
 * Batch transactions a writer keeps open at once, by default. A lane begins its transaction and only
 * then takes what is queued, so the BEGIN round trip doubles as the wait that lets a batch fill.
 * Measured with `npm run bench:http` (bench/RESULTS.md): two lanes (the next BEGIN overlapping the
 * last COMMIT) halved the batches and did not raise one tenant's throughput, as every batch of a
 * tenant queues on its audit-head lock anyway; three did no better.
 */
const LANES = 1;

/** What a lane's wait resolves to when it lets go of a batch whose COMMIT is not confirmed. */
const DETACHED = Symbol('detached');

/** The default of WriterOptions.maxPending. */
export const DEFAULT_MAX_PENDING = 1024;

const notCommitted = (why: string, cause?: unknown): StoreUnavailable =>
  new StoreUnavailable(`the decision was not committed: ${why}`, 'rolled_back', cause === undefined ? undefined : { cause });

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
  /** Decisions submitted and not yet answered. */
  private pendingCount = 0;

  constructor(
    db: Db,
    private readonly options: WriterOptions,
  ) {
    this.maxBatch = options.maxBatch ?? 256;
    this.run = batchRunner(db);
  }

  /** Decisions submitted and not yet answered (queued, or in an open batch). */
  get pending(): number {
    return this.pendingCount;
  }

  private get deadlineMs(): number {
    return this.options.deadlineMs ?? DEFAULT_DEADLINE_MS;
  }

  /**
   * Queues a decision; resolves after the batch holding its audit row has committed. Rejects with
   * StoreUnavailable when it cannot commit by `deadline`: `rolled_back` when it was still queued or
   * its batch had not sent COMMIT (the batch is then abandoned, so it never commits later), `unknown`
   * when COMMIT had been sent; and at once, `rolled_back`, when too many decisions are pending.
   */
  submit<R>(unit: DecisionUnit<R>, deadline: Deadline = Deadline.in(this.deadlineMs)): Promise<R> {
    if (deadline.hasPassed()) {
      this.options.onDeadline?.('not_committed');
      return Promise.reject(notCommitted('its deadline passed before it was queued'));
    }
    if (this.pendingCount >= (this.options.maxPending ?? DEFAULT_MAX_PENDING)) {
      this.options.onShed?.();
      return Promise.reject(notCommitted('too many decisions are pending (load shed)'));
    }
    return new Promise<R>((resolve, reject) => {
      const p: Pending = {
        unit,
        resolve: resolve as (v: unknown) => void,
        reject,
        state: 'queued',
        timer: setTimeout(() => this.expire(p), deadline.remaining()),
      };
      this.pendingCount++;
      this.queue.push(p);
      this.startLane();
    });
  }

  /** Resolves when every queued decision has been written (for clean shutdown). */
  async flush(): Promise<void> {
    while (this.lanes.size > 0) await Promise.all(this.lanes);
  }

  /** Answers a pending decision once; later results (a batch finishing after its deadline) are ignored. */
  private settle(p: Pending, s: Settle): void {
    if (p.state === 'done') return;
    p.state = 'done';
    clearTimeout(p.timer);
    this.pendingCount--;
    if (s.ok) p.resolve(s.value);
    else p.reject(s.error);
  }

  /** The deadline of a pending decision passed: answer it now with what is known of its outcome. */
  private expire(p: Pending): void {
    switch (p.state) {
      case 'done':
        return;
      case 'queued':
        this.queue.splice(this.queue.indexOf(p), 1);
        break;
      case 'batched':
        p.abandon?.(); // before COMMIT: the batch is rolled back, so this answer stays true
        break;
      case 'committing':
        this.options.onDeadline?.('unknown');
        this.settle(p, { ok: false, error: new StoreUnavailable('the database did not confirm the commit by the deadline', 'unknown') });
        return;
    }
    this.options.onDeadline?.('not_committed');
    this.settle(p, { ok: false, error: notCommitted('the database did not answer by the deadline') });
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
   *
   * A lane is abandoned (rolled back, never committed) when the deadline of one of its units passes
   * before COMMIT is sent, or when it has not taken any unit a deadline after it began (BEGIN hangs on
   * a stalled database): it then ends at once, without waiting for the database, so that the next
   * lane can start when the database answers again; the units still queued wait for that lane.
   */
  private async lane(): Promise<void> {
    let batch: Pending[] = [];
    const settled: Settle[] = [];
    let passTurn!: () => void;
    const myTurn = this.turn;
    this.turn = new Promise((r) => (passTurn = r));
    const control = new AbortController();
    const abandon = (): void => control.abort();
    let taken = false;
    const take = (): void => {
      if (taken) return;
      taken = true;
      this.idleLanes--;
      if (control.signal.aborted) return; // abandoned before it took anything: the units wait for the next lane
      batch = this.queue.splice(0, this.maxBatch);
      for (const p of batch) {
        p.state = 'batched';
        p.abandon = abandon;
      }
    };
    const watchdog = setTimeout(() => {
      if (!taken) abandon();
    }, this.deadlineMs);
    // A COMMIT the database never confirms (a stall, a connection lost without a word) must not hold
    // the writer: a deadline after it was sent, every unit of it has been answered `unknown`, and the
    // lane lets go so that the next one can start; the transaction ends whenever the database says.
    let detach!: (v: typeof DETACHED) => void;
    const detached = new Promise<typeof DETACHED>((r) => (detach = r));
    let commitWatch: ReturnType<typeof setTimeout> | undefined;
    const onCommit = (): void => {
      for (const p of batch) if (p.state === 'batched') p.state = 'committing';
      commitWatch = setTimeout(() => detach(DETACHED), this.deadlineMs);
    };
    let entered = null as Promise<unknown> | null;
    try {
      const running = this.run(
        (c) => {
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
        },
        { signal: control.signal, onCommit },
      );
      running.catch(() => undefined); // a lane that let go no longer awaits it
      if ((await Promise.race([running, detached])) === DETACHED) {
        clearTimeout(watchdog);
        this.options.onDatabase?.('unavailable');
        const failure = new StoreUnavailable('the database did not confirm the commit of the decision', 'unknown');
        for (const p of batch) this.settle(p, { ok: false, error: failure });
        return;
      }
    } catch (e) {
      clearTimeout(watchdog);
      clearTimeout(commitWatch);
      if (control.signal.aborted && !(e instanceof BatchFailed && e.committing)) {
        // Abandoned: whatever the body still awaits is no longer waited for (it can send nothing more).
        take();
        passTurn();
      } else if (entered === null) {
        // BEGIN failed, so the body never ran: take what waits now and fail it, rather than start
        // lane after lane against a database that refuses (a unit queued later starts its own).
        await myTurn;
        take();
        passTurn();
      } else await entered; // the connection may have closed while the body still ran
      this.options.onDatabase?.('unavailable');
      // Before COMMIT was sent nothing can have committed; a failure after it leaves the outcome unknown.
      const committing = e instanceof BatchFailed && e.committing;
      const failure = committing
        ? new StoreUnavailable('the database did not confirm the commit of the decision', 'unknown', { cause: e })
        : notCommitted('the database failed the batch', e);
      for (const p of batch) this.settle(p, { ok: false, error: failure });
      return;
    }
    clearTimeout(watchdog);
    clearTimeout(commitWatch);
    if (batch.length > 0) this.options.onDatabase?.('available');
    batch.forEach((p, i) => {
      const s = settled[i];
      this.settle(p, s ?? { ok: false, error: new Error('unit not run') });
    });
  }

  /**
   * One batch: the locking reads go out together (heads, chains, idempotency fences), the units
   * decide in memory, and the writes (charges, completed fences, audit rows and heads) go out
   * together, followed by COMMIT.
   */
  private async decideAll(c: BatchConn, batch: Pending[], settled: Settle[]): Promise<BatchOutcome<void>> {
    const now = this.options.now();
    const tenantIds = [...new Set(batch.map((p) => p.unit.tenantId))].sort();
    const dtx = decisionTx(c);
    const chains = [...new Set(batch.flatMap((p) => (p.unit.chainOf === undefined ? [] : [p.unit.chainOf])))];
    const fences = batch.flatMap((p) => (p.unit.fence === null ? [] : [p.unit.fence]));
    const [heads, , owns] = await Promise.all([
      c.query(LOCK_HEADS, [JSON.stringify(tenantIds)]) as Promise<unknown> as Promise<HeadRow[]>,
      dtx.prefetch(chains),
      lockFences(c, fences),
    ]);
    const chain = new Map(heads.map((h) => [h.tenant_id, { seq: Number(h.seq), hash: h.hash, lastId: h.last_id }]));
    /** Each appended row as the JSON record the insert reads; `moved`: the tenants whose heads move. */
    const rows: string[] = [];
    const moved = new Set<string>();
    const completed: { fence: Fence; response: StoredResponse }[] = [];
    for (const { unit } of batch) {
      const head = chain.get(unit.tenantId);
      if (head === undefined) {
        settled.push({ ok: false, error: new Error('unknown tenant') });
        continue;
      }
      if (unit.fence !== null && !owns(unit.fence)) {
        settled.push({ ok: false, error: new FenceLost('the idempotency key was taken over') });
        continue;
      }
      const out = await unit.run(dtx, now);
      if (out.audit !== null) {
        const { cost, ...draft } = out.audit;
        const row = { ...draft, tenantId: unit.tenantId, seq: head.seq + 1, at: now, cost: cost === null ? null : cost.toString(), prevHash: head.hash };
        const { canonical, hash } = sealRow(row);
        // The inserted record is the hashed text itself plus its hash (column names are the keys).
        rows.push(`${canonical.slice(0, -1)},"hash":"${hash}"}`);
        chain.set(unit.tenantId, { seq: row.seq, hash, lastId: row.id });
        moved.add(unit.tenantId);
      }
      if (unit.fence !== null && out.response !== undefined) completed.push({ fence: unit.fence, response: out.response });
      settled.push({ ok: true, value: out.result });
    }
    const writes = [dtx.flush(), completeFences(c, completed)];
    if (rows.length > 0) {
      const newHeads = [...moved].map((tenantId) => ({ tenant_id: tenantId, ...(chain.get(tenantId) as object) }));
      writes.push(c.query(APPEND_AUDIT, [`[${rows.join(',')}]`, JSON.stringify(newHeads)]));
    }
    return { value: undefined, writes };
  }
}

interface HeadRow {
  readonly tenant_id: string;
  readonly seq: string;
  readonly hash: string;
  readonly last_id: string | null;
}

/** The heads of the batch's tenants, locked in tenant order: this orders every decision of a tenant. */
const LOCK_HEADS = `SELECT tenant_id, seq::text AS seq, hash, last_id FROM audit_heads
WHERE tenant_id IN (SELECT jsonb_array_elements_text($1::jsonb)) ORDER BY tenant_id FOR UPDATE`;

/**
 * All audit rows of the batch and the moved heads, in one statement from two JSON recordsets:
 * building a multi-row insert through the query builder cost more CPU than the database spent on it.
 * A data-modifying CTE always runs to completion, referenced or not (PostgreSQL docs, 7.8.4).
 */
const APPEND_AUDIT = `WITH appended AS (
  INSERT INTO audit (tenant_id, seq, id, at, event, decision, reason_code, capability_id, parent_id, trajectory_id, op, target, cost, call_id, detail, prev_hash, hash)
  SELECT tenant_id, seq, id, at, event, decision, reason_code, capability_id, parent_id, trajectory_id, op, target, cost, call_id, detail, prev_hash, hash
  FROM jsonb_to_recordset($1::jsonb) AS x(tenant_id text, seq bigint, id text, at timestamptz, event text, decision text,
    reason_code text, capability_id text, parent_id text, trajectory_id text, op text, target jsonb, cost numeric, call_id text, detail jsonb, prev_hash text, hash text)
)
UPDATE audit_heads AS h SET seq = x.seq, hash = x.hash, last_id = x."lastId"
FROM jsonb_to_recordset($2::jsonb) AS x(tenant_id text, seq bigint, hash text, "lastId" text)
WHERE h.tenant_id = x.tenant_id`;
