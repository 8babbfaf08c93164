/**
 * The group-commit writer's transaction, on each driver the way that costs the fewest round trips.
 *
 * A batch has two phases: it sends its locking reads together and awaits them, decides in memory,
 * then sends its writes and does not await them before COMMIT, so writes and COMMIT travel in one
 * round trip; on postgres.js BEGIN travels with the locking reads, so a batch is two round trips in
 * all. On postgres.js every statement sent here is a named prepared statement (the same text
 * every batch), so after the first batch on a connection it costs one Bind/Execute, where drizzle's
 * unprepared statements cost a Parse/Describe round trip each before they run. A write that fails
 * aborts the transaction, which turns its COMMIT into a rollback; the writer awaits every write after
 * COMMIT, so such a batch is still reported as failed.
 *
 * PGlite has one session and runs statements in order; the same code runs there unchanged.
 */
import { sql, type SQL } from 'drizzle-orm';
import { drizzle as drizzlePostgres } from 'drizzle-orm/postgres-js';
import type { ReservedSql, Sql } from 'postgres';
import type { Db } from './store.js';

export type Row = Record<string, unknown>;

/** One open batch transaction. */
export interface BatchConn {
  /** Sends a statement at once; resolves to its rows. Parameters are text (JSON for structures). */
  query(text: string, params: readonly (string | null)[]): Promise<Row[]>;
  /** drizzle bound to the same transaction, for the statements off the hot path (mint, revoke). */
  readonly db: Db;
  /**
   * Resolves once the transaction has begun (postgres.js: BEGIN answered, whether it succeeded or
   * not: a failed BEGIN fails the batch on its own; drizzle/PGlite: at once). Nothing needs it to be
   * correct: the writer waits on it to let a busy lane's batch fill (src/store/writer.ts).
   */
  begun(): Promise<void>;
}

/** What a batch body returns: its value, and the writes it sent and left for COMMIT to follow. */
export interface BatchOutcome<T> {
  readonly value: T;
  readonly writes: readonly Promise<unknown>[];
}

/** Raised by a runner; `committing` says whether COMMIT may have reached the database. */
export class BatchFailed extends Error {
  constructor(
    readonly committing: boolean,
    options: { cause: unknown },
  ) {
    super('the batch transaction failed', options);
  }
}

/**
 * How the writer steers one batch: `signal` abandons it (its deadline passed) as long as COMMIT has
 * not been sent, and `onCommit` is called at the moment COMMIT is about to be sent, after which the
 * batch can no longer be abandoned and its outcome is unknown until the database answers.
 */
export interface BatchControl {
  readonly signal?: AbortSignal;
  readonly onCommit?: () => void;
}

/** The batch was abandoned before COMMIT was sent (its deadline passed): nothing of it can commit. */
export class BatchAbandoned extends Error {}

export type BatchRunner = <T>(body: (c: BatchConn) => Promise<BatchOutcome<T>>, control?: BatchControl) => Promise<T>;

/**
 * A promise that rejects with BatchAbandoned when `signal` aborts while `committing()` is still
 * false; it never settles otherwise. Observed here, so an abort nobody races is no unhandled rejection.
 */
function abandonment(signal: AbortSignal | undefined, committing: () => boolean): Promise<never> {
  const p = new Promise<never>((_, reject) => {
    const abandon = (): void => {
      if (!committing()) reject(new BatchAbandoned('the batch was abandoned at its deadline'));
    };
    if (signal?.aborted === true) abandon();
    else signal?.addEventListener('abort', abandon, { once: true });
  });
  p.catch(() => undefined);
  return p;
}

/** The runner for the database behind a drizzle instance: postgres.js directly, anything else through drizzle. */
export function batchRunner(db: Db): BatchRunner {
  const client = (db as { $client?: unknown }).$client;
  if (typeof client === 'function' && typeof (client as Partial<Sql>).begin === 'function') return postgresRunner(client as Sql);
  return drizzleRunner(db);
}

/** The pool connection under a reserved client (postgres.js's own, as its `onexecute` hands it over). */
interface PoolConnection {
  onclose: ((e: unknown) => void) | null;
}

/**
 * On a connection reserved from the pool: BEGIN is not awaited but sent with the batch's first
 * statements, in the same socket write, so a batch costs two round trips (its locking reads; its
 * writes with COMMIT), not three. postgres.js's own `begin` awaits BEGIN before it runs anything.
 * Reserving on a pool with no open connection needs postgres.js's fix for porsager/postgres#751
 * (patches/postgres+3.4.9.patch, applied on install): without it that reserve never settles.
 */
function postgresRunner(client: Sql): BatchRunner {
  return async <T>(body: (c: BatchConn) => Promise<BatchOutcome<T>>, control: BatchControl = {}): Promise<T> => {
    let committing = false;
    const abandoned = abandonment(control.signal, () => committing);
    /** Abandoned: nothing more is sent, and the transaction is rolled back, never committed. */
    const isAbandoned = (): boolean => control.signal?.aborted === true && !committing;
    // A stalled or unreachable database leaves a reserve waiting (postgres.js retries the connection
    // without end): the batch stops waiting at its deadline and a late connection goes straight back.
    const reserving = client.reserve();
    let tx: ReservedSql;
    try {
      tx = await Promise.race([reserving, abandoned]);
    } catch (e) {
      reserving.then(
        (late) => late.release(),
        () => undefined,
      );
      throw new BatchFailed(false, { cause: e });
    }
    // Once the connection has closed, nothing more may be sent on it: postgres.js writes a statement
    // sent to a closed connection from a setImmediate onto a null socket, a TypeError nothing can
    // catch (porsager/postgres#1154), and the pool may by then have reconnected that connection for
    // other work, where the statement would run outside this transaction. `gone` is set by the pool
    // the moment the connection closes (through the hook postgres.js's own `begin` uses), before any
    // statement's rejection reaches the code awaiting it; and nothing gone is ever released to the pool.
    let gone = false;
    let connection: PoolConnection | null = null;
    let dropped!: (e: unknown) => void;
    const closed = new Promise<never>((_, reject) => (dropped = reject));
    closed.catch(() => undefined);
    const lost = (e: unknown): void => {
      if (connectionLost(e)) gone = true;
    };
    const send = (text: string, params: readonly unknown[], options?: Record<string, unknown>): ReturnType<ReservedSql['unsafe']> => {
      if (gone || isAbandoned()) throw new Error('the batch connection closed');
      const q = tx.unsafe(text, params as string[], options);
      // Registered first, so it runs before whoever awaits the statement. (It also starts the
      // statement, on the next microtask: drizzle's `.values()` right after this still applies.)
      q.catch(lost);
      return q;
    };
    /** Returns the connection to the pool once `last` is answered, unless it closed meanwhile. */
    const releaseAfter = (last: Promise<unknown>): void => {
      void last
        .catch(() => undefined)
        .then(() => {
          if (gone) return;
          if (connection !== null) connection.onclose = null;
          tx.release();
        });
    };
    const begun = send('BEGIN', [], {
      // Called as BEGIN is written; postgres.js pipelines the statements after it only if it returns true.
      onexecute: (c: PoolConnection) => {
        connection = c;
        c.onclose = (e) => {
          gone = true;
          dropped(e);
        };
        return true;
      },
    });
    let begin = 'pending' as 'pending' | 'ok' | 'failed';
    begun.then(
      (r) => (begin = r.command === 'BEGIN' ? 'ok' : 'failed'),
      () => (begin = 'failed'),
    );
    let db: Db | undefined;
    const conn: BatchConn = {
      begun: () =>
        begun.then(
          () => undefined,
          () => undefined,
        ),
      // The statement itself is returned (no async wrapper): postgres.js observes it, so a write
      // the database refuses is not an unhandled rejection while it waits for COMMIT. Statements
      // sent before BEGIN's answer are the batch's first (its locking reads); the writes, sent after
      // those are answered, and so after BEGIN is, go out only inside the transaction.
      query: (text, params) => {
        if (!gone && !isAbandoned() && begin !== 'failed') return send(text, params, { prepare: true });
        const refused = Promise.reject(new Error('the batch connection closed'));
        refused.catch(() => undefined); // observed here; the caller still sees the rejection
        return refused;
      },
      get db() {
        // drizzle reads the client's options (its type parsers, the same object for a
        // transaction) and sends everything through `unsafe`.
        return (db ??= drizzlePostgres({ options: client.options, unsafe: send } as unknown as Sql) as unknown as Db);
      },
    };
    let writes: readonly Promise<unknown>[] = [];
    let rolledBack = false;
    const run = (async (): Promise<T> => {
      if (isAbandoned()) throw new BatchAbandoned('the batch was abandoned before it began');
      const out = await body(conn);
      writes = out.writes;
      await begun;
      if (begin !== 'ok') throw new Error('BEGIN did not open a transaction');
      if (gone) throw new Error('the batch connection closed');
      if (isAbandoned()) throw new BatchAbandoned('the batch was abandoned at its deadline');
      committing = true;
      control.onCommit?.();
      // Sent right behind the writes, without awaiting them: one round trip for both.
      const commit = send('COMMIT', []);
      releaseAfter(commit);
      // Answered after the writes. A write the database refused aborted the transaction, and COMMIT
      // answers ROLLBACK: then nothing was committed, and the batch says so (not an unknown outcome).
      const done = await commit;
      if (done.command !== 'COMMIT') {
        rolledBack = true;
        await Promise.all(writes); // rejects with the refused write's error, the better cause
        throw new Error(`COMMIT answered ${done.command}`);
      }
      await Promise.all(writes);
      return out.value;
    })();
    try {
      // An abandoned batch does not wait for its ROLLBACK: on a stalled database that never comes.
      return await Promise.race([run, abandoned, closed]);
    } catch (e) {
      // No statement may be left unobserved; one that reached a closed connection may never settle,
      // so they are observed, not awaited (the batch has failed either way).
      run.catch(() => undefined);
      for (const w of writes) w.catch(() => undefined);
      if (!committing && !gone) {
        // Rolled back behind whatever is still running; the connection returns once that is answered.
        const rollback = tx.unsafe('ROLLBACK');
        rollback.catch(lost);
        releaseAfter(rollback);
      }
      throw new BatchFailed(committing && !rolledBack, { cause: e });
    }
  };
}

/** Whether a statement's failure means its connection is lost (rather than the statement refused). */
function connectionLost(e: unknown): boolean {
  if (typeof e !== 'object' || e === null) return false;
  const { code, severity } = e as { code?: unknown; severity?: unknown };
  // postgres.js: CONNECTION_CLOSED / _DESTROYED / _ENDED, CONNECT_TIMEOUT; Node: socket errors;
  // the server: a FATAL or PANIC error ends the session (e.g. 57P01, terminated by an administrator).
  if (severity === 'FATAL' || severity === 'PANIC') return true;
  return typeof code === 'string' && (code.startsWith('CONNECT') || /^E[A-Z]+$/.test(code));
}

/**
 * Through a drizzle transaction (PGlite: one session, statements run in order, nothing to pipeline).
 * A statement's `$n` placeholders become drizzle parameters, so the text runs as written.
 */
function drizzleRunner(db: Db): BatchRunner {
  return async <T>(body: (c: BatchConn) => Promise<BatchOutcome<T>>, control: BatchControl = {}): Promise<T> => {
    let committing = false;
    // PGlite answers without I/O, so a batch would otherwise run start to end in microtasks, before
    // the requests already waiting on sockets are even read: each batch would hold one decision.
    // On postgres.js a busy writer gets this wait from BEGIN's round trip (BatchConn.begun).
    await new Promise((resolve) => setTimeout(resolve, 0));
    try {
      return await db.transaction(async (tx) => {
        const conn: BatchConn = {
          query: async (text, params) => {
            const res: unknown = await tx.execute(withParams(text, params));
            return (Array.isArray(res) ? res : (res as { rows: Row[] }).rows) as Row[];
          },
          db: tx,
          begun: () => Promise.resolve(),
        };
        const out = await body(conn);
        await Promise.all(out.writes);
        // PGlite cannot stall, but a batch whose deadline passed is still not committed late.
        if (control.signal?.aborted === true) throw new BatchAbandoned('the batch was abandoned at its deadline');
        committing = true;
        control.onCommit?.();
        return out.value;
      });
    } catch (e) {
      throw new BatchFailed(committing, { cause: e });
    }
  };
}

function withParams(text: string, params: readonly (string | null)[]): SQL {
  const parts = text.split(/\$(\d+)/);
  const chunks: SQL[] = [];
  parts.forEach((part, i) => {
    if (i % 2 === 0) chunks.push(sql.raw(part));
    else {
      const n = Number(part);
      if (!(n >= 1 && n <= params.length)) throw new Error(`statement parameter $${part} is not given`);
      chunks.push(sql`${params[n - 1]}`);
    }
  });
  return sql.join(chunks);
}
