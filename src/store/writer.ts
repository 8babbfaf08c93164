/**
 * The decision writer: group commit. Every decision (mint, attenuate, approve, revoke) is a unit
 * run inside a batch transaction that first locks the audit-chain heads of the delegation trees its
 * units touch, so each tree's decisions are totally ordered across all instances while decisions on
 * other trees of the same tenant never wait for them; then each unit reads and changes the store
 * under that lock, its audit row is chained onto its tree's head, and one commit makes a whole batch
 * durable. No unit's promise resolves before its batch has committed: fail closed.
 */
import { sealRow, type HashedRow } from './audit.js';
import { BatchFailed, batchRunner, type BatchConn, type BatchOutcome, type BatchRunner } from './batch.js';
import { completeFences, lockFences, type Fence, type StoredResponse } from './idempotency.js';
import { Deadline, DEFAULT_DEADLINE_MS } from './deadline.js';
import { chargesMatched, decisionTx, GENESIS_HASH, lockChains, StoreUnavailable, writeCharges, type ChainRow, type Db, type DecisionTx } from './store.js';

/** The audit row of a decision, without its chain fields. */
export interface AuditDraft {
  readonly id: string;
  readonly event: 'mint' | 'attenuate' | 'approve' | 'revoke' | 'access' | 'approval' | 'tool';
  /** `pending`: a call by tool waiting for a person's approval (issue 17). */
  readonly decision: 'grant' | 'deny' | 'pending';
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

/** The audit row of a decision about no capability (key management, tool registration, a refused role): no call fields. */
export function tenantDraft(id: string, event: AuditDraft['event'], decision: AuditDraft['decision'], reasonCode: string | null, detail: unknown): AuditDraft {
  return { id, event, decision, reasonCode, capabilityId: null, parentId: null, trajectoryId: null, op: null, target: null, cost: null, callId: null, detail };
}

export interface Decided<R> {
  readonly result: R;
  /**
   * Null when the unit turned out to decide nothing (e.g. revoking an unknown id). Several rows, in
   * order, when one decision takes several steps that must commit together (an approval resolved and
   * the grant it lets through, issue 17).
   */
  readonly audit: AuditDraft | readonly AuditDraft[] | null;
  /** Stored on the idempotency record, when the unit holds one. */
  readonly response?: StoredResponse;
}

/** The API key (its public id, never the secret) and the request behind a decision. */
export interface CallerIds {
  readonly keyId: string | null;
  readonly requestId: string | null;
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
  /**
   * The unit writes rows beyond the chain it names (a revocation updates every descendant), which it
   * must wait for: it runs in a waiting lane, never in the main lane, which must never wait for a lock.
   */
  readonly writesSubtree?: boolean;
  /** Who asked: recorded on the unit's audit row (issue 14). */
  readonly caller?: CallerIds;
  /** Runs under its tree's chain lock; `now` is the decision time, also the audit row's. */
  run(tx: DecisionTx, now: Date): Promise<Decided<R>>;
}

/** The unit's idempotency claim was taken over before its batch ran; it decided nothing. */
export class FenceLost extends Error {
  readonly code = 'in_flight';
}

/**
 * One unit failed while its batch was deciding (its run threw, or its audit row holds what the store
 * refuses): the batch is rolled back, that unit is answered with its own error, and the others go
 * back to the queue for the next batch. One caller's bad request must not fail the decisions of every
 * other caller, of any tenant, that shared its transaction.
 */
class UnitFailed extends Error {
  constructor(
    readonly pending: Pending,
    options: { cause: unknown },
  ) {
    super('a decision failed its batch', options);
  }
}

/** The unit a failed batch names as its cause, if it failed because of one unit's own work. */
function failedUnit(e: unknown): UnitFailed | undefined {
  for (let x = e; x instanceof Error; x = x.cause) if (x instanceof UnitFailed) return x;
  return undefined;
}

/** Whether a row's JSON text holds a NUL (`\u0000`, not preceded by an escaping backslash), which jsonb refuses. */
const holdsNul = (json: string): boolean => json.includes('\\u0000') && /(?:^|[^\\])(?:\\\\)*\\u0000/.test(json);

interface Pending {
  readonly unit: DecisionUnit<unknown>;
  readonly resolve: (v: unknown) => void;
  readonly reject: (e: unknown) => void;
  readonly timer: ReturnType<typeof setTimeout>;
  /**
   * `queued`: waiting for a batch; `deferred`: its tree was locked elsewhere, waiting to be retried or
   * for a waiting lane; `batched`: in a batch whose COMMIT is not sent yet; `committing`: COMMIT sent,
   * outcome pending; `done`: answered (a late batch result is then ignored).
   */
  state: 'queued' | 'deferred' | 'batched' | 'committing' | 'done';
  /** Abandons the batch holding it (set once it is batched). */
  abandon?: () => void;
  /** When the main lane first found this unit's tree locked by another transaction (ms). */
  deferredAt?: number;
}

type Settle = { ok: true; value: unknown } | { ok: false; error: unknown };

/**
 * How a batch takes its locks. `skip`: the main lane never waits for a lock another transaction
 * holds (SKIP LOCKED); the units of a tree it could not lock are `deferred`. `wait`: a waiting lane
 * queues for one tree's locks like any transaction, and so never starves.
 */
type LockMode = 'skip' | 'wait';

/** What a batch did with each unit: settled, or deferred to a waiting lane for its tree (by tree key). */
interface BatchResult {
  readonly settled: Map<Pending, Settle>;
  readonly deferred: Map<string, Pending[]>;
}

export interface WriterOptions {
  readonly now: () => Date;
  /** Most units in one transaction. */
  readonly maxBatch?: number;
  readonly onBatch?: (size: number) => void;
  /** Batch transactions open at once (see LANES). */
  readonly lanes?: number;
  /** Waiting lanes (one tree each) open at once, for trees whose locks another transaction holds. */
  readonly waitingLanes?: number;
  /** Units deferred because another transaction held their tree: how many were retried, how many sent to wait. */
  readonly onDefer?: (retried: number, waited: number) => void;
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
 * Batch transactions a writer keeps open at once, by default. A lane takes what is queued when it
 * starts; what arrives while its batch runs fills the next one. Measured with `npm run bench:http`
 * and `bench:ab` (bench/RESULTS.md): two lanes (the next BEGIN overlapping the last COMMIT) halved
 * the batches and did not raise one tenant's throughput, and at 1,000 approvals/s their smaller
 * batches cost more CPU than the overlap saved; three did no better.
 */
const LANES = 1;

/**
 * Waiting lanes open at once, by default: each waits for one tree whose locks another transaction
 * (another instance's batch) held when the main lane tried them. More blocked trees than this queue.
 */
const WAITING_LANES = 4;

/** How long a unit whose tree is locked elsewhere is retried in the main lane before it waits in a lane of its own. */
const RETRY_MS = 20;

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
  /** Units whose tree's locks another transaction held, by tree key, waiting for a waiting lane. */
  private readonly waiting = new Map<string, Pending[]>();
  /** Open waiting lanes, by the tree each one waits for. */
  private readonly waitingLanes = new Map<string, Promise<void>>();
  /** Deferred units on their way back to the queue. */
  private retrying = 0;
  /** Decisions submitted and not yet answered. */
  private pendingCount = 0;
  /** Units the main lane's last batch took: more than one means busy (see `lane`). */
  private lastBatch = 0;

  constructor(
    db: Db,
    private readonly options: WriterOptions,
  ) {
    this.maxBatch = options.maxBatch ?? 256;
    this.run = batchRunner(db);
  }

  /** Decisions submitted and not yet answered (queued, deferred, or in an open batch). */
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
      if (unit.writesSubtree === true) {
        // A main lane that waited here could close a cycle with another instance's main lane, which
        // may hold a lock on a row of this subtree for a unit it is about to defer.
        p.state = 'deferred';
        const key = `${headKey(unit.tenantId, unit.chainOf ?? '')}\u0000subtree`;
        this.waiting.set(key, [...(this.waiting.get(key) ?? []), p]);
        this.startWaitingLanes();
        return;
      }
      this.queue.push(p);
      this.startLane();
    });
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
      case 'queued': {
        const at = this.queue.indexOf(p);
        if (at >= 0) this.queue.splice(at, 1);
        break;
      }
      case 'deferred':
        break; // dropped by whoever takes it next (state done)
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

  /** Resolves when every queued decision has been written (for clean shutdown). */
  async flush(): Promise<void> {
    while (this.lanes.size > 0 || this.waitingLanes.size > 0 || this.retrying > 0) {
      await Promise.all([...this.lanes, ...this.waitingLanes.values(), new Promise((r) => setTimeout(r, 1))]);
    }
  }

  /** Hands deferred units to a waiting lane for their tree (one per tree, a bounded number at once). */
  /**
   * Units whose tree another transaction held. Most such locks are another instance's batch, gone in
   * a millisecond or two: the unit goes back to the main lane (after a timer turn, so a lane does not
   * spin on it). Only a unit still deferred after RETRY_MS goes to a waiting lane, which costs a
   * transaction, and a commit, of its own.
   */
  private defer(deferred: Map<string, Pending[]>): void {
    const now = Date.now();
    const retry: Pending[] = [];
    for (const [key, units] of deferred) {
      for (const p of units) {
        p.deferredAt ??= now;
        p.state = 'deferred';
        p.abandon = undefined;
      }
      const waited = units.filter((p) => now - (p.deferredAt as number) >= RETRY_MS);
      if (waited.length > 0) this.waiting.set(key, [...(this.waiting.get(key) ?? []), ...waited]);
      retry.push(...units.filter((p) => now - (p.deferredAt as number) < RETRY_MS));
    }
    this.options.onDefer?.(retry.length, [...deferred.values()].reduce((n, units) => n + units.length, 0) - retry.length);
    if (retry.length > 0) {
      this.retrying += retry.length;
      setTimeout(() => {
        this.retrying -= retry.length;
        const live = retry.filter((p) => p.state === 'deferred');
        for (const p of live) p.state = 'queued';
        this.queue.unshift(...live);
        this.startLane();
      }, 1);
    }
    this.startWaitingLanes();
  }

  private startWaitingLanes(): void {
    for (const key of this.waiting.keys()) {
      if (this.waitingLanes.size >= (this.options.waitingLanes ?? WAITING_LANES)) return;
      if (this.waitingLanes.has(key)) continue;
      const lane = this.waitingLane(key).finally(() => {
        this.waitingLanes.delete(key);
        this.startWaitingLanes();
      });
      this.waitingLanes.set(key, lane);
    }
  }

  /**
   * One tree's deferred units in a batch that waits for the tree's locks. Its units keep their
   * deadlines: one that passes before COMMIT is sent abandons the batch (rolled back, never committed).
   */
  private async waitingLane(key: string): Promise<void> {
    const batch = (this.waiting.get(key) ?? []).splice(0, this.maxBatch).filter((p) => p.state === 'deferred');
    if ((this.waiting.get(key)?.length ?? 0) === 0) this.waiting.delete(key);
    if (batch.length === 0) return;
    this.options.onBatch?.(batch.length);
    const control = new AbortController();
    for (const p of batch) {
      p.state = 'batched';
      p.abandon = () => control.abort();
    }
    // As in the main lane: a COMMIT never confirmed must not hold this tree's lane (and a tenant's key
    // changes, which share one) for good. A deadline after it was sent, the lane lets go.
    let detach!: (v: typeof DETACHED) => void;
    const detached = new Promise<typeof DETACHED>((r) => (detach = r));
    let commitWatch: ReturnType<typeof setTimeout> | undefined;
    const onCommit = (): void => {
      for (const p of batch) if (p.state === 'batched') p.state = 'committing';
      commitWatch = setTimeout(() => detach(DETACHED), this.deadlineMs);
    };
    let result: BatchResult | null = null;
    try {
      const running = this.run(
        async (c) => {
          const out = await this.decideAll(c, batch, 'wait');
          result = out.value;
          return out;
        },
        { signal: control.signal, onCommit },
      );
      running.catch(() => undefined); // a lane that let go no longer awaits it
      if ((await Promise.race([running, detached])) === DETACHED) {
        this.options.onDatabase?.('unavailable');
        const failure = new StoreUnavailable('the database did not confirm the commit of the decision', 'unknown');
        for (const p of batch) this.settle(p, { ok: false, error: failure });
        return;
      }
      clearTimeout(commitWatch);
    } catch (e) {
      clearTimeout(commitWatch);
      // The others wait for this tree again, in a waiting lane: they may wait for locks, the main lane may not.
      const requeue = (again: Pending[]): void => {
        for (const p of again) p.state = 'deferred';
        this.waiting.set(key, [...again, ...(this.waiting.get(key) ?? [])]);
      };
      if (!this.isolate(batch, e, requeue)) this.failAll(batch, e);
      return;
    }
    const done: BatchResult = (result as BatchResult | null) ?? { settled: new Map(), deferred: new Map() };
    this.settleAll(batch, done);
    if (done.deferred.size > 0) this.defer(done.deferred); // never in 'wait' mode; no unit may be dropped
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
   * One batch transaction: a connection, then wait for the turn, take every queued unit (up to
   * maxBatch), lock (on PostgreSQL BEGIN goes out with the locking statement), decide them and send the writes and
   * COMMIT; the turn passes on as soon as COMMIT is sent.
   *
   * A lane is abandoned (rolled back, never committed) when the deadline of one of its units passes
   * before COMMIT is sent, or when it has not taken any unit a deadline after it began (a stalled
   * database gives it no connection, or never answers BEGIN): it then ends at once, without waiting for the database, so that the next
   * lane can start when the database answers again; the units still queued wait for that lane.
   */
  private async lane(): Promise<void> {
    let batch: Pending[] = [];
    let result: BatchResult = { settled: new Map(), deferred: new Map() };
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
            // Busy (the last batch held more than one unit): take after BEGIN's round trip, by when the
            // clients the last batch answered have asked again, so they join this batch instead of
            // forming a cohort of their own. At 50 connections that is batches of ~44-48, not two
            // cohorts of ~25 (bench:http, bench/RESULTS.md). Idle: take at
            // once, so a lone decision keeps the round trip that sending BEGIN unawaited saves.
            if (this.lastBatch > 1) await c.begun();
            try {
              take();
              this.lastBatch = batch.length;
              if (batch.length === 0) return { value: undefined, writes: [] };
              this.options.onBatch?.(batch.length);
              const out = await this.decideAll(c, batch, 'skip');
              result = out.value;
              // Deferred units are not in this batch's COMMIT: they are not `committing`.
              for (const units of result.deferred.values()) for (const p of units) p.state = 'deferred';
              return { value: undefined, writes: out.writes };
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
        const deferred = new Set([...result.deferred.values()].flat());
        for (const p of batch) if (!deferred.has(p)) this.settle(p, { ok: false, error: failure });
        if (deferred.size > 0) this.defer(result.deferred);
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
        // No transaction began (no connection, or BEGIN failed), so the body never ran: take what waits now and fail it, rather than start
        // lane after lane against a database that refuses (a unit queued later starts its own).
        await myTurn;
        take();
        passTurn();
      } else await entered; // the connection may have closed while the body still ran
      const requeue = (again: Pending[]): void => {
        for (const p of again) p.state = 'queued';
        this.queue.unshift(...again);
      };
      if (this.isolate(batch, e, requeue)) return;
      // Units the batch deferred were never written, whatever became of its COMMIT: they go on.
      const deferred = new Set([...result.deferred.values()].flat());
      this.failAll(
        batch.filter((p) => !deferred.has(p)),
        e,
      );
      if (deferred.size > 0) this.defer(result.deferred);
      return;
    }
    clearTimeout(watchdog);
    clearTimeout(commitWatch);
    if (batch.length > 0) this.options.onDatabase?.('available');
    this.settleAll(batch, result);
    if (result.deferred.size > 0) this.defer(result.deferred);
  }

  /**
   * A batch that failed before COMMIT because of one unit's own work: that unit is answered with its
   * error (nothing of the batch committed), the others, not yet answered, go to `requeue` (ahead of
   * what waits). False when the failure is not one unit's (the database, a deadline): the caller
   * fails the batch as a whole. The lane's end starts the next one.
   */
  private isolate(batch: readonly Pending[], e: unknown, requeue: (again: Pending[]) => void): boolean {
    const failed = failedUnit(e);
    if (failed === undefined || (e instanceof BatchFailed && e.committing)) return false;
    this.settle(failed.pending, { ok: false, error: failed.cause });
    const again = batch.filter((p) => p !== failed.pending && p.state !== 'done');
    for (const p of again) p.abandon = undefined;
    requeue(again);
    return true;
  }

  /** A failed batch's units: before COMMIT was sent nothing can have committed; after it, the outcome is unknown. */
  private failAll(batch: readonly Pending[], e: unknown): void {
    this.options.onDatabase?.('unavailable');
    const committing = e instanceof BatchFailed && e.committing;
    const failure = committing
      ? new StoreUnavailable('the database did not confirm the commit of the decision', 'unknown', { cause: e })
      : notCommitted('the database failed the batch', e);
    for (const p of batch) this.settle(p, { ok: false, error: failure });
  }

  /** A committed batch's units, each as its unit settled (deferred ones are not settled here). */
  private settleAll(batch: readonly Pending[], result: BatchResult): void {
    for (const p of batch) {
      const s = result.settled.get(p);
      if (s !== undefined) this.settle(p, s);
      else if (p.state !== 'deferred') this.settle(p, { ok: false, error: new Error('unit not run') });
    }
  }

  /**
   * One batch: the locking reads go out together (heads, chains, idempotency fences), the units
   * decide in memory, and the writes (charges, completed fences, audit rows and heads) go out
   * together, followed by COMMIT.
   */
  private async decideAll(c: BatchConn, batch: Pending[], mode: LockMode): Promise<BatchOutcome<BatchResult>> {
    const now = this.options.now();
    const dtx = decisionTx(c);
    const skip = mode === 'skip';
    const chains = [...new Set(batch.flatMap((p) => (p.unit.chainOf === undefined ? [] : [p.unit.chainOf])))];
    const wanted = batch.flatMap(({ unit }) => (unit.newTree === undefined ? [{ tenant_id: unit.tenantId, cap: unit.chainOf ?? null }] : []));
    // The heads' statement also reads each named capability's tree (unlocked: a capability's ancestors
    // never change): that tells a tree whose locks were skipped from an unknown capability.
    const [locked, owns] = await Promise.all([
      c.query(skip ? LOCK_SKIP : LOCK, [JSON.stringify(wanted), JSON.stringify(chains)]) as Promise<unknown> as Promise<LockedRow[]>,
      lockFences(
        c,
        batch.flatMap((p) => (p.unit.fence === null ? [] : [p.unit.fence])),
      ),
    ]);
    const chain = new Map<string, { seq: number; hash: string; lastId: string | null }>();
    const treeOfCap = new Map<string, string>();
    const links: ChainRow[] = [];
    for (const r of locked) {
      if (r.kind === 'head') chain.set(headKey(r.tenant_id, r.tree_id as string), { seq: Number(r.seq), hash: r.hash as string, lastId: r.last_id });
      else if (r.kind === 'tree') treeOfCap.set(headKey(r.tenant_id, r.cap as string), r.tree_id as string);
      else links.push(r.link as ChainRow);
    }
    dtx.hold(links);
    const settled = new Map<Pending, Settle>();
    const deferred = new Map<string, Pending[]>();
    /** Each appended row as the JSON record the insert reads; `moved`: the heads that move. */
    const rows: string[] = [];
    const moved = new Map<string, { tenantId: string; treeId: string }>();
    const completed: { fence: Fence; response: StoredResponse }[] = [];
    for (const p of batch) {
      const { unit } = p;
      if (skip && unit.newTree === undefined) {
        // Another transaction holds this tree's head or a link of its chain: the unit waits in a
        // lane of its own for that tree, and this batch goes on without it.
        const tree = unit.chainOf === undefined ? '' : (treeOfCap.get(headKey(unit.tenantId, unit.chainOf)) ?? '');
        const held = chain.has(headKey(unit.tenantId, tree)) && (tree === '' || dtx.holds(unit.tenantId, unit.chainOf as string));
        if (!held) {
          const key = headKey(unit.tenantId, tree);
          deferred.set(key, [...(deferred.get(key) ?? []), p]);
          continue;
        }
      }
      const treeId = unit.newTree ?? (unit.chainOf === undefined ? '' : dtx.treeOf(unit.tenantId, unit.chainOf));
      const key = headKey(unit.tenantId, treeId);
      const head = unit.newTree === undefined ? chain.get(key) : chain.has(key) ? undefined : { seq: 0, hash: GENESIS_HASH, lastId: null };
      if (head === undefined) {
        // No locked head: an unknown tenant, a tree whose head is missing, or a mint of an existing tree.
        settled.set(p, { ok: false, error: new Error('no audit chain head for this decision') });
        continue;
      }
      if (unit.fence !== null && !owns(unit.fence)) {
        settled.set(p, { ok: false, error: new FenceLost('the idempotency key was taken over') });
        continue;
      }
      let out: Decided<unknown>;
      try {
        out = await unit.run(dtx, now);
      } catch (e) {
        throw new UnitFailed(p, { cause: e });
      }
      const drafts: readonly AuditDraft[] = out.audit === null ? [] : Array.isArray(out.audit) ? out.audit : [out.audit as AuditDraft];
      for (const d of drafts) {
        // The tree's head as this unit's earlier rows left it (a new tree's starts at genesis).
        const prev = chain.get(key) ?? { seq: 0, hash: GENESIS_HASH, lastId: null };
        // Every field named, no spread: a row built by spreading the draft was a slow-mode object and
        // cost about half of this loop's own time (bench/RESULTS.md).
        const row: HashedRow = {
          tenantId: unit.tenantId,
          treeId,
          seq: prev.seq + 1,
          id: d.id,
          at: now,
          event: d.event,
          decision: d.decision,
          reasonCode: d.reasonCode,
          capabilityId: d.capabilityId,
          parentId: d.parentId,
          trajectoryId: d.trajectoryId,
          op: d.op,
          target: d.target,
          cost: d.cost === null ? null : d.cost.toString(),
          callId: d.callId,
          detail: d.detail,
          keyId: unit.caller?.keyId ?? null,
          requestId: unit.caller?.requestId ?? null,
          // A mint starts its tree, so its own trajectory is the root's; otherwise the held chain's root.
          rootTrajectoryId: unit.newTree !== undefined ? d.trajectoryId : unit.chainOf === undefined ? null : dtx.rootTrajectoryOf(unit.tenantId, unit.chainOf),
          prevHash: prev.hash,
        };
        let sealed: { open: string; hash: string };
        try {
          sealed = sealRow(row); // throws on an unpaired surrogate
          if (holdsNul(sealed.open)) throw new Error('the audit row holds a NUL, which the store refuses');
        } catch (e) {
          throw new UnitFailed(p, { cause: e });
        }
        const { open, hash } = sealed;
        // The inserted record is the hashed text itself plus its hash and tree (column names are the keys).
        rows.push(`${open},"hash":"${hash}","tree_id":${JSON.stringify(treeId)}}`);
        chain.set(key, { seq: row.seq, hash, lastId: row.id });
        moved.set(key, { tenantId: unit.tenantId, treeId });
      }
      if (unit.fence !== null && out.response !== undefined) completed.push({ fence: unit.fence, response: out.response });
      settled.set(p, { ok: true, value: out.result });
    }
    // The charges go out in the audit write when there is one (one statement less), else alone.
    const charges = rows.length > 0 ? dtx.takeCharges() : null;
    const writes = [dtx.flush(), completeFences(c, completed)];
    if (rows.length > 0) {
      const newHeads = [...moved].map(([key, { tenantId, treeId }]) => ({ tenant_id: tenantId, tree_id: treeId, ...(chain.get(key) as object) }));
      writes.push(c.query(APPEND_AUDIT, [`[${rows.join(',')}]`, JSON.stringify(newHeads), charges ?? '[]']));
    }
    return { value: { settled, deferred }, writes };
  }
}

const headKey = (tenantId: string, treeId: string): string => `${tenantId}\u0000${treeId}`;

/** A locked head, the tree of a capability the batch names, or a locked link of a named capability's chain. */
interface LockedRow {
  readonly kind: 'head' | 'tree' | 'link';
  readonly tenant_id: string;
  readonly tree_id: string | null;
  readonly seq: string | null;
  readonly hash: string | null;
  readonly last_id: string | null;
  readonly cap: string | null;
  readonly link: unknown;
}

/**
 * Every lock a batch takes, in one statement ($1: the units' tenants and capabilities, $2: the
 * capabilities whose chains are charged). First the chain heads the units append to, locked in
 * (tenant, tree) order so batches on many instances never deadlock: a unit naming a capability
 * appends to that capability's tree (its root's id; a capability's ancestors never change, so they
 * are read unlocked), any other unit to its tenant's own chain (''). Then one row per named
 * capability that exists, giving its tree. Last the chains' capability rows, in id order: after the
 * heads, as UNION ALL runs its branches in order (a locking query never runs in parallel). `skip`:
 * for the main lane, a row another transaction holds is left out, not waited for. One statement
 * instead of three saved both sides a round of work per batch (bench/RESULTS.md).
 *
 * Every row is found by its primary key, one lookup per unit (a LATERAL subquery the planner cannot
 * turn into a join: OFFSET 0 or its own FOR UPDATE), and the heads are locked one by one in the
 * sorted order of the outer rows. As plain joins, the planner (which takes the JSON recordset for 100
 * rows) scanned and hashed the whole capabilities and audit_heads tables in every batch, up to some
 * ten thousand rows: 0.7 ms at 300 capabilities, 11 ms at 6,300 (bench/RESULTS.md). A capability's
 * tenant is compared outside its lookup: inside it, the planner could take the (tenant, trajectory)
 * index and read every capability of the tenant per unit. test/store/plans.test.ts holds all this.
 */
const lockAll = (skip: boolean): string => `WITH named AS (
  SELECT u.tenant_id, u.cap, CASE WHEN u.cap IS NULL THEN '' ELSE coalesce(c.ancestors[1], c.id, '') END AS tree_id, c.id IS NOT NULL AS known
  FROM jsonb_to_recordset($1::jsonb) AS u(tenant_id text, cap text)
  LEFT JOIN LATERAL (SELECT c.id, c.tenant_id, c.ancestors FROM capabilities c WHERE c.id = u.cap OFFSET 0) AS c ON c.tenant_id = u.tenant_id
), heads AS MATERIALIZED (
  SELECT h.* FROM (SELECT DISTINCT tenant_id, tree_id FROM named ORDER BY tenant_id, tree_id) AS n
  CROSS JOIN LATERAL (SELECT h.tenant_id, h.tree_id, h.seq::text AS seq, h.hash, h.last_id FROM audit_heads h
    WHERE h.tenant_id = n.tenant_id AND h.tree_id = n.tree_id FOR UPDATE OF h${skip ? ' SKIP LOCKED' : ''}) AS h
), links AS MATERIALIZED (${lockChains(2, skip)})
SELECT 'head' AS kind, tenant_id, tree_id, seq, hash, last_id, NULL::text AS cap, NULL::json AS link FROM heads
UNION ALL
SELECT 'tree', tenant_id, tree_id, NULL, NULL, NULL, cap, NULL FROM (SELECT DISTINCT tenant_id, tree_id, cap FROM named WHERE known) AS k
UNION ALL
SELECT 'link', l.tenant_id, NULL, NULL, NULL, NULL, NULL, to_json(l) FROM links AS l`;

export const LOCK = lockAll(false);
export const LOCK_SKIP = lockAll(true);

/**
 * All audit rows of the batch, the moved heads (new trees' heads inserted) and the batch's charges,
 * in one statement from three JSON recordsets: building a multi-row insert through the query builder
 * cost more CPU than the database spent on it, and every statement of a batch costs both sides a
 * round of work (bench/RESULTS.md). A data-modifying CTE always runs to completion, referenced or not
 * (PostgreSQL docs, 7.8.4); the three touch different tables. `xid` records the transaction that
 * moved a head, for the checkpointer. Unless every charge matched its row, the statement fails
 * (`chargesMatched`), and the batch with it.
 */
export const APPEND_AUDIT = `WITH charged AS (${writeCharges(3)}
), appended AS (
  INSERT INTO audit (tenant_id, tree_id, seq, id, at, event, decision, reason_code, capability_id, parent_id, trajectory_id, op, target, cost, call_id, detail,
    key_id, request_id, root_trajectory_id, prev_hash, hash)
  SELECT tenant_id, tree_id, seq, id, at, event, decision, reason_code, capability_id, parent_id, trajectory_id, op, target, cost, call_id, detail,
    key_id, request_id, root_trajectory_id, prev_hash, hash
  FROM jsonb_to_recordset($1::jsonb) AS x(tenant_id text, tree_id text, seq bigint, id text, at timestamptz, event text, decision text,
    reason_code text, capability_id text, parent_id text, trajectory_id text, op text, target jsonb, cost numeric, call_id text, detail jsonb,
    key_id text, request_id text, root_trajectory_id text, prev_hash text, hash text)
)
INSERT INTO audit_heads AS h (tenant_id, tree_id, seq, hash, last_id)
SELECT tenant_id, tree_id, seq, hash, "lastId" FROM jsonb_to_recordset($2::jsonb) AS x(tenant_id text, tree_id text, seq bigint, hash text, "lastId" text)
WHERE ${chargesMatched(3)}
ON CONFLICT (tenant_id, tree_id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash, last_id = excluded.last_id, xid = pg_current_xact_id()`;
