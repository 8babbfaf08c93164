/**
 * A connection that closes while a statement's bytes wait to be written reconnects at once
 * (postgres.js, patched: patches/postgres+3.4.9.patch). postgres.js batches small writes behind a
 * setImmediate and tells a scheduled flush by `nextWriteTimer !== null`; on a close it cancelled the
 * flush but kept the timer's handle and the unsent bytes, so the next connection's startup message
 * was appended to them and never flushed: the connection stayed silent until `connect_timeout`
 * (5 s in Warrant), then again, each time holding the statement it was opened for. This happens when
 * the server ends every connection at once (a restart, a mass termination) and a statement rejected on
 * one sends another on the next: database-faults "restart and mass termination" answered 503 so.
 */
import net from 'node:net';
import postgres from 'postgres';
import { afterAll, describe, expect, test } from 'vitest';
import { BACKENDS } from '../support/db.js';

describe.runIf(BACKENDS.includes('postgres'))('a postgres.js connection closed with a write pending', () => {
  const url = new URL(process.env.TEST_DATABASE_URL!.trim());
  const port = Number(url.port || 5432);
  let socket: net.Socket | undefined;
  // `socket` (a function making the connection's socket) is an option of postgres.js its types leave out.
  const options: postgres.Options<Record<string, never>> & { socket: () => net.Socket } = {
    max: 1,
    connect_timeout: 3,
    fetch_types: false,
    onnotice: () => {},
    backoff: () => 0.05,
    socket: () => (socket = net.connect(port, url.hostname)),
  };
  const sql = postgres(url.toString(), options);
  afterAll(async () => sql.end({ timeout: 1 }));

  test('reconnects and answers the next statement at once, not after connect_timeout', async () => {
    await sql`SELECT 1`;
    const other = net.connect(port, url.hostname);
    await new Promise((r) => other.once('connect', r));
    // libuv runs close callbacks last-closed first: `other`'s runs just before the connection's, and
    // the statement it sends is written (its flush deferred to a setImmediate) when its socket closes.
    const interrupted = new Promise<string>((resolve) => {
      other.once('close', () =>
        resolve(
          sql`SELECT 2`.then(
            () => 'answered',
            (e: { code?: string }) => String(e.code),
          ),
        ),
      );
    });
    socket!.destroy();
    other.destroy();
    expect(await interrupted).toBe('CONNECTION_CLOSED');

    // Unpatched, this statement is held by a connection that never logs in, and fails with CONNECT_TIMEOUT.
    const [row] = await sql<{ x: number }[]>`SELECT 3 AS x`;
    expect(row?.x).toBe(3);
  });
});
