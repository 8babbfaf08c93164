/**
 * The group-commit writer's transaction, on each driver the way that costs the fewest round trips.
 *
 * A batch has two phases: it sends its locking reads together and awaits them, decides in memory,
 * then sends its writes and does not await them before COMMIT, so writes and COMMIT travel in one
 * round trip. On postgres.js every statement sent here is a named prepared statement (the same text
 * every batch), so after the first batch on a connection it costs one Bind/Execute, where drizzle's
 * unprepared statements cost a Parse/Describe round trip each before they run. A write that fails
 * aborts the transaction, which turns its COMMIT into a rollback; the writer awaits every write after
 * COMMIT, so such a batch is still reported as failed.
 *
 * PGlite has one session and runs statements in order; the same code runs there unchanged.
 */
import { sql, type SQL } from 'drizzle-orm';
import { drizzle as drizzlePostgres } from 'drizzle-orm/postgres-js';
import type { Sql, TransactionSql } from 'postgres';
import type { Db } from './store.js';

export type Row = Record<string, unknown>;

/** One open batch transaction. */
export interface BatchConn {
  /** Sends a statement at once; resolves to its rows. Parameters are text (JSON for structures). */
  query(text: string, params: readonly (string | null)[]): Promise<Row[]>;
  /** drizzle bound to the same transaction, for the statements off the hot path (mint, revoke). */
  readonly db: Db;
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

export type BatchRunner = <T>(body: (c: BatchConn) => Promise<BatchOutcome<T>>) => Promise<T>;

/** The runner for the database behind a drizzle instance: postgres.js directly, anything else through drizzle. */
export function batchRunner(db: Db): BatchRunner {
  const client = (db as { $client?: unknown }).$client;
  if (typeof client === 'function' && typeof (client as Partial<Sql>).begin === 'function') return postgresRunner(client as Sql);
  return drizzleRunner(db);
}

function postgresRunner(client: Sql): BatchRunner {
  return async <T>(body: (c: BatchConn) => Promise<BatchOutcome<T>>): Promise<T> => {
    let committing = false;
    let writes: readonly Promise<unknown>[] = [];
    // postgres.js rejects `begin` as soon as the connection closes, while the body may still be
    // deciding; the pool can by then have reconnected that connection for other work, where a
    // statement sent now would run outside this transaction. So nothing is sent after that.
    let gone = false;
    const closed = (): Promise<never> => Promise.reject(new Error('the batch connection closed'));
    const open = client.begin(async (tx: TransactionSql) => {
      let db: Db | undefined;
      const conn: BatchConn = {
        // `execute()` sends now: postgres.js queries are otherwise lazy until awaited.
        query: (text, params) => (gone ? closed() : tx.unsafe(text, params as string[], { prepare: true }).execute()),
        get db() {
          // drizzle reads the client's options (its type parsers, the same object for a transaction).
          return (db ??= drizzlePostgres(Object.assign(tx, { options: client.options }) as unknown as Sql) as unknown as Db);
        },
      };
      const out = await body(conn);
      if (gone) throw new Error('the batch connection closed');
      writes = out.writes;
      // Returning without awaiting the writes lets postgres.js send COMMIT right behind them.
      committing = true;
      return out.value;
    });
    try {
      const value = (await open.catch((e: unknown) => {
        gone = true;
        throw e;
      })) as T;
      await Promise.all(writes);
      return value;
    } catch (e) {
      // Every write is settled (or the connection is gone) by now; none may be left unobserved.
      await Promise.allSettled(writes);
      throw new BatchFailed(committing, { cause: e });
    }
  };
}

/**
 * Through a drizzle transaction (PGlite: one session, statements run in order, nothing to pipeline).
 * A statement's `$n` placeholders become drizzle parameters, so the text runs as written.
 */
function drizzleRunner(db: Db): BatchRunner {
  return async <T>(body: (c: BatchConn) => Promise<BatchOutcome<T>>): Promise<T> => {
    let committing = false;
    // PGlite answers without I/O, so a batch would otherwise run start to end in microtasks, before
    // the requests already waiting on sockets are even read: each batch would hold one decision.
    // Postgres.js gets this wait from its BEGIN round trip.
    await new Promise((resolve) => setTimeout(resolve, 0));
    try {
      return await db.transaction(async (tx) => {
        const conn: BatchConn = {
          query: async (text, params) => {
            const res: unknown = await tx.execute(withParams(text, params));
            return (Array.isArray(res) ? res : (res as { rows: Row[] }).rows) as Row[];
          },
          db: tx,
        };
        const out = await body(conn);
        await Promise.all(out.writes);
        committing = true;
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
