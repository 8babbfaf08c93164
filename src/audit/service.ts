/**
 * Checkpoint rounds: every interval (and once more at clean shutdown) each tenant with new audit
 * rows gets a signed checkpoint, published to the sink outside the database. Runs beside the
 * decisions, never on their path: nothing a decision waits for signs anything.
 */
import type { KeyRing } from '../crypto/keys.js';
import type { Db } from '../store/store.js';
import { AuditIntegrityError, checkpointTenant } from './checkpointer.js';
import { publishCheckpoints, type CheckpointSink } from './publish.js';
import { errorFields } from '../store/error-fields.js';

export interface CheckpointerOptions {
  readonly db: Db;
  readonly keys: KeyRing;
  readonly now: () => Date;
  /** Where checkpoints are published besides the database; null: the database only. */
  readonly sink: CheckpointSink | null;
  readonly tenants: () => Promise<readonly string[]>;
  readonly log: (entry: Record<string, unknown>) => void;
  /** See CheckpointOptions.pause. */
  readonly pause?: () => Promise<void>;
  /** Told how each round went, for the metrics an operator alarms on (src/http/metrics.ts). */
  readonly onRound?: (round: CheckpointRound) => void;
}

/**
 * How one round went: tenants whose checkpoint failed (retried next round; alarmed ones aside),
 * tenants stopped for good on an integrity error (this process never extends their checkpoints
 * again), and when it ended.
 * Rows decided while either lasts are covered by no signed checkpoint, which only the logs said.
 */
export interface CheckpointRound {
  readonly failed: number;
  readonly alarmed: number;
  readonly at: Date;
}

export class Checkpointer {
  private timer: ReturnType<typeof setTimeout> | undefined;
  private running: Promise<unknown> = Promise.resolve();
  private stopped = false;
  /** Tenants whose database history no longer matches their sink: never extended again by this process. */
  private readonly alarmed = new Set<string>();

  constructor(private readonly o: CheckpointerOptions) {}

  /** One round over every tenant; failures are logged per tenant, never thrown. Resolves to how many tenants failed. */
  round(): Promise<number> {
    const round = this.running.then(() => this.eachTenant());
    this.running = round.then(() => undefined);
    return round;
  }

  /** Starts a round every `intervalMs`, each after the last has ended. */
  start(intervalMs: number): void {
    const tick = (): void => {
      this.timer = setTimeout(() => {
        void this.round().then(() => {
          if (!this.stopped) tick();
        });
      }, intervalMs);
    };
    tick();
  }

  /** Stops the timer and makes a last round (clean shutdown: after the decision writer has flushed). */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.round();
  }

  private async eachTenant(): Promise<number> {
    const failed = await this.tenants();
    // Alarmed tenants have a gauge of their own: counted here too, one of them would hide for good
    // whether every other tenant is still being checkpointed.
    this.o.onRound?.({ failed: failed.filter((t) => !this.alarmed.has(t)).length, alarmed: this.alarmed.size, at: this.o.now() });
    return failed.length;
  }

  /** The tenants whose checkpoint failed this round (alarmed ones included); [''] when the tenants could not be read. */
  private async tenants(): Promise<string[]> {
    let tenants: readonly string[];
    try {
      tenants = await this.o.tenants();
    } catch (e) {
      this.o.log({ level: 'warn', msg: 'checkpoint round skipped: the database is unavailable', ...errorFields(e) });
      return [''];
    }
    const failed: string[] = [];
    for (const tenantId of tenants) if (this.alarmed.has(tenantId) || !(await this.tenant(tenantId))) failed.push(tenantId);
    return failed;
  }

  /** One tenant's checkpoint and export; false when it failed (logged). */
  private async tenant(tenantId: string): Promise<boolean> {
    const { db, sink, keys } = this.o;
    try {
      // Catch up first: a checkpoint committed by another instance, or before a crash, is published
      // (and the database's history checked against the sink) before a new one extends it.
      if (sink !== null) await publishCheckpoints(db, sink, keys.verifyKeys, tenantId, (count) => this.adopted(tenantId, count));
      // The signing transaction extends only the sink's last checkpoint, as it reads the database itself.
      const exported = sink === null ? null : await sink.last(tenantId);
      const made = await checkpointTenant({ db, keys, now: this.o.now, exported, ...(this.o.pause === undefined ? {} : { pause: this.o.pause }) }, tenantId);
      if (made === null) return true;
      if (sink !== null) await publishCheckpoints(db, sink, keys.verifyKeys, tenantId);
      this.o.log({ msg: 'audit checkpoint', tenant_id: tenantId, n: made.payload.n, size: made.payload.size, root: made.payload.root });
      if (made.late.length > 0)
        this.o.log({
          level: 'error',
          msg: 'AUDIT INTEGRITY: rows dated before the checkpoint that should have covered them (written after the fact, or an instance clock far off); verify reports them',
          tenant_id: tenantId,
          n: made.payload.n,
          rows: made.late.slice(0, 20),
          count: made.late.length,
        });
      return true;
    } catch (e) {
      if (e instanceof AuditIntegrityError) {
        this.alarmed.add(tenantId);
        this.o.log({ level: 'error', msg: 'AUDIT INTEGRITY: checkpoints stopped for this tenant', tenant_id: tenantId, error: e.message });
      } else this.o.log({ level: 'warn', msg: 'checkpoint failed; retried next round', tenant_id: tenantId, ...errorFields(e) });
      return false;
    }
  }

  /** The sink held nothing for a tenant whose database has checkpoints: said loudly, once per tenant and process. */
  private adopted(tenantId: string, count: number): void {
    this.o.log({
      level: 'warn',
      msg: "audit sink: it held no checkpoints for this tenant; the database's were taken in as they stand. Expected for a new checkpoint directory; if its files were lost, compare the database with a copy of them (npm run audit -- verify --checkpoints COPY), since a rolled-back database would now go unnoticed",
      tenant_id: tenantId,
      checkpoints: count,
    });
  }
}
