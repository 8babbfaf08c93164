/**
 * Prometheus metrics kept in process memory (text exposition format 0.0.4): decisions by event,
 * decision and code, request latency by route and status, and audit batch sizes. Workers-safe (no
 * I/O); the Node entry serves them at GET /metrics. Labels never carry tokens, keys or ids.
 */

import { Deadline, within } from '../store/deadline.js';

const POOL_READ_BOUND_MS = 500;

/** What the last batch or readiness check found of the database. */
export type DatabaseState = 'available' | 'unavailable';
const LATENCY_BUCKETS_S = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5];
const BATCH_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256];

class Histogram {
  private readonly counts: number[];
  private sum = 0;
  private count = 0;
  constructor(readonly buckets: readonly number[]) {
    this.counts = buckets.map(() => 0);
  }
  observe(v: number): void {
    this.buckets.forEach((b, i) => {
      if (v <= b) this.counts[i] = (this.counts[i] ?? 0) + 1;
    });
    this.sum += v;
    this.count += 1;
  }
  lines(name: string, labels: string): string[] {
    const sep = labels === '' ? '' : `${labels},`;
    return [
      ...this.buckets.map((b, i) => `${name}_bucket{${sep}le="${b}"} ${this.counts[i] ?? 0}`),
      `${name}_bucket{${sep}le="+Inf"} ${this.count}`,
      `${name}_sum${labels === '' ? '' : `{${labels}}`} ${this.sum}`,
      `${name}_count${labels === '' ? '' : `{${labels}}`} ${this.count}`,
    ];
  }
}

const label = (v: string): string => v.replace(/[\\"\n]/g, (ch) => (ch === '\n' ? '\\n' : `\\${ch}`));

/** Connections of this process's database pool, by state, as the server itself reports them. */
export interface PoolUse {
  readonly max: number;
  /** Counts by pg_stat_activity state: active, idle, idle in transaction, … */
  readonly byState: Readonly<Record<string, number>>;
}

export class Metrics {
  /** Read at each scrape when set (PostgreSQL only; an embedded PGlite has no pool). */
  poolUse?: () => Promise<PoolUse>;
  /** CPU seconds this process has used (user + system), read at each scrape when set (Node only). */
  cpuSeconds?: () => number;
  /** Decisions pending in the writer (queued or in an open batch), read at each scrape when set. */
  pendingDecisions?: () => number;
  /** Approval long-polls waiting now, read at each scrape when set. */
  longPolls?: () => number;

  private shedCount = 0;
  private keyReadsShedCount = 0;
  private readonly deadlines = { not_committed: 0, unknown: 0 };
  /** 1 or 0 from the last thing that reached the database (a batch, a readiness check); unset before. */
  private available: boolean | undefined;

  private readonly decisions = new Map<string, number>();
  private readonly latency = new Map<string, Histogram>();
  private readonly batches = new Histogram(BATCH_BUCKETS);
  private readonly deferred = { retried: 0, waited: 0 };
  private readonly rounds = { ok: 0, failed: 0 };
  /** Seconds since the epoch at the end of the last checkpoint round in which no tenant failed (alarmed ones aside); unset before one. */
  private lastOkRound: number | undefined;
  private alarmedTenants = 0;

  /** One decision: event (mint, attenuate, approve, revoke), grant or deny, and its code. */
  decision(event: string, decision: 'grant' | 'deny', code: string | null): void {
    const key = `event="${label(event)}",decision="${decision}",code="${label(code ?? '')}"`;
    this.decisions.set(key, (this.decisions.get(key) ?? 0) + 1);
  }

  /** One answered request: its route pattern (never the raw path, which may hold ids) and status. */
  request(method: string, route: string, status: number, seconds: number): void {
    const key = `method="${label(method)}",route="${label(route)}",status="${status}"`;
    let h = this.latency.get(key);
    if (h === undefined) this.latency.set(key, (h = new Histogram(LATENCY_BUCKETS_S)));
    h.observe(seconds);
  }

  /** A decision refused at once because too many were pending (load shedding). */
  shed(): void {
    this.shedCount += 1;
  }

  /** A request refused at once because too many API keys not cached were being read (src/service/tenants.ts KEY_READS). */
  keyReadsShed(): void {
    this.keyReadsShedCount += 1;
  }

  /** A request answered 503 once its deadline had passed, and what the answer said of the outcome. */
  deadlineExceeded(outcome: 'not_committed' | 'unknown'): void {
    this.deadlines[outcome] += 1;
  }

  /** Whether the database just committed something, or failed or refused it. */
  database(state: DatabaseState): void {
    this.available = state === 'available';
  }

  /** One committed audit batch and how many decisions it held. */
  batch(size: number): void {
    this.batches.observe(size);
  }

  /** Decisions whose tree another transaction held: retried in the main lane, or sent to a waiting lane. */
  treeLocked(retried: number, waited: number): void {
    this.deferred.retried += retried;
    this.deferred.waited += waited;
  }

  /**
   * One checkpoint round (src/audit/service.ts). A round in which any tenant failed does not move
   * `warrant_audit_checkpoint_last_ok_timestamp_seconds`: rows decided since are signed by nothing
   * yet, so an operator alarms on its age, and on any tenant alarmed.
   */
  checkpointRound(failed: number, alarmed: number, at: Date): void {
    this.rounds[failed === 0 ? 'ok' : 'failed'] += 1;
    if (failed === 0) this.lastOkRound = at.getTime() / 1000;
    this.alarmedTenants = alarmed;
  }

  /** The exposition text. */
  async render(): Promise<string> {
    // Bounded: a scrape during a database stall still answers, without the pool's figures.
    const pool = this.poolUse === undefined ? undefined : await within(Deadline.in(POOL_READ_BOUND_MS), this.poolUse()).catch(() => undefined);
    const cpu = this.cpuSeconds?.();
    const pending = this.pendingDecisions?.();
    const polls = this.longPolls?.();
    const out = [
      '# HELP warrant_decisions_shed_total Decisions refused at once (503) because too many were pending.',
      '# TYPE warrant_decisions_shed_total counter',
      `warrant_decisions_shed_total ${this.shedCount}`,
      '# HELP warrant_auth_key_reads_shed_total Requests refused at once (503) because too many API keys not cached were being read (a flood of unknown key ids).',
      '# TYPE warrant_auth_key_reads_shed_total counter',
      `warrant_auth_key_reads_shed_total ${this.keyReadsShedCount}`,
      '# HELP warrant_decisions_deadline_exceeded_total Requests answered 503 at their deadline (decisions, and the reads and claims before them).',
      '# TYPE warrant_decisions_deadline_exceeded_total counter',
      `warrant_decisions_deadline_exceeded_total ${this.deadlines.not_committed + this.deadlines.unknown}`,
      '# HELP warrant_decisions_deadline_exceeded_by_outcome_total Decisions answered 503 at their deadline, by what the answer said.',
      '# TYPE warrant_decisions_deadline_exceeded_by_outcome_total counter',
      ...Object.entries(this.deadlines).map(([o, n]) => `warrant_decisions_deadline_exceeded_by_outcome_total{outcome="${o}"} ${n}`),
      ...(pending === undefined
        ? []
        : [
            '# HELP warrant_decisions_pending Decisions waiting for their audit commit (queued or in an open batch).',
            '# TYPE warrant_decisions_pending gauge',
            `warrant_decisions_pending ${pending}`,
          ]),
      ...(polls === undefined
        ? []
        : [
            '# HELP warrant_approvals_long_polls Approval long-polls (GET /v1/approvals/{id}?wait_s=) waiting now; at the most an instance holds, a poll is answered at once.',
            '# TYPE warrant_approvals_long_polls gauge',
            `warrant_approvals_long_polls ${polls}`,
          ]),
      ...(this.available === undefined
        ? []
        : [
            '# HELP warrant_db_available 1 when the last batch or readiness check reached a writable database, else 0.',
            '# TYPE warrant_db_available gauge',
            `warrant_db_available ${this.available ? 1 : 0}`,
          ]),
      '# HELP warrant_decisions_total Decisions by event, decision and reason code.',
      '# TYPE warrant_decisions_total counter',
      ...[...this.decisions].map(([k, n]) => `warrant_decisions_total{${k}} ${n}`),
      '# HELP warrant_http_request_duration_seconds Time to answer, by route and status.',
      '# TYPE warrant_http_request_duration_seconds histogram',
      ...[...this.latency].flatMap(([k, h]) => h.lines('warrant_http_request_duration_seconds', k)),
      '# HELP warrant_audit_batch_size Decisions per audit batch (group commit: one transaction, one commit).',
      '# TYPE warrant_audit_batch_size histogram',
      ...this.batches.lines('warrant_audit_batch_size', ''),
      "# HELP warrant_tree_lock_deferrals_total Decisions whose delegation tree another transaction held (another instance's batch): retried, or then waited for in a lane of their own.",
      '# TYPE warrant_tree_lock_deferrals_total counter',
      `warrant_tree_lock_deferrals_total{then="retried"} ${this.deferred.retried}`,
      `warrant_tree_lock_deferrals_total{then="waited"} ${this.deferred.waited}`,
      '# HELP warrant_audit_checkpoint_rounds_total Checkpoint rounds, by whether every tenant was checkpointed (or had nothing new).',
      '# TYPE warrant_audit_checkpoint_rounds_total counter',
      `warrant_audit_checkpoint_rounds_total{outcome="ok"} ${this.rounds.ok}`,
      `warrant_audit_checkpoint_rounds_total{outcome="failed"} ${this.rounds.failed}`,
      ...(this.lastOkRound === undefined
        ? []
        : [
            '# HELP warrant_audit_checkpoint_last_ok_timestamp_seconds When the last checkpoint round in which no tenant failed (alarmed ones aside) ended (seconds since the epoch).',
            '# TYPE warrant_audit_checkpoint_last_ok_timestamp_seconds gauge',
            `warrant_audit_checkpoint_last_ok_timestamp_seconds ${this.lastOkRound}`,
          ]),
      '# HELP warrant_audit_checkpoint_tenants_alarmed Tenants whose database no longer matches their signed checkpoints: this process stopped checkpointing them.',
      '# TYPE warrant_audit_checkpoint_tenants_alarmed gauge',
      `warrant_audit_checkpoint_tenants_alarmed ${this.alarmedTenants}`,
      ...(pool === undefined
        ? []
        : [
            '# HELP warrant_db_pool_connections Connections of this process to PostgreSQL by state (pg_stat_activity; the scrape itself counts as one active).',
            '# TYPE warrant_db_pool_connections gauge',
            ...Object.entries(pool.byState).map(([state, n]) => `warrant_db_pool_connections{state="${label(state)}"} ${n}`),
            '# HELP warrant_db_pool_max Most connections the pool may open.',
            '# TYPE warrant_db_pool_max gauge',
            `warrant_db_pool_max ${pool.max}`,
          ]),
      ...(cpu === undefined
        ? []
        : [
            '# HELP process_cpu_seconds_total User and system CPU time of this process.',
            '# TYPE process_cpu_seconds_total counter',
            `process_cpu_seconds_total ${cpu}`,
          ]),
    ];
    return `${out.join('\n')}\n`;
  }
}
