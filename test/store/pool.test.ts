/**
 * The pool hands out the connection it got back last (postgres.js, patched: patches/postgres+3.4.9.patch).
 * Unpatched, it rotates over every open connection: once a burst has opened the whole pool, each
 * statement and each batch of a quiet server lands on a different backend, which on this machine
 * doubled the database's CPU per transaction and added ~0.3 ms to each (bench/RESULTS.md, "One hot
 * connection"), and no connection ever stayed idle long enough to close.
 */
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { batchRunner } from '../../src/store/batch.js';
import { BACKENDS, openTestDatabase, type TestDatabase } from '../support/db.js';

const pidOf = (rows: unknown): number => Number((rows as { pid: number }[])[0]?.pid);

describe.runIf(BACKENDS.includes('postgres'))('the connection pool on postgres', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await openTestDatabase('postgres', { poolSize: 4 });
  });
  afterAll(async () => db.close());

  test('after a burst opened every connection, statements and batches one at a time keep to one of them', async () => {
    // Four statements at once, each holding its connection for a moment: the pool opens all four.
    const burst = await Promise.all(Array.from({ length: 4 }, () => db.db.execute(sql`SELECT pg_backend_pid() AS pid, pg_sleep(0.2)`)));
    expect(new Set(burst.map(pidOf)).size).toBe(4);

    const statements: number[] = [];
    for (let i = 0; i < 12; i += 1) statements.push(pidOf(await db.db.execute(sql`SELECT pg_backend_pid() AS pid`)));
    expect(new Set(statements).size).toBe(1);

    // The writer's batches reserve a connection each (src/store/batch.ts).
    const run = batchRunner(db.db);
    const batches: number[] = [];
    for (let i = 0; i < 12; i += 1) batches.push(await run(async (c) => ({ value: pidOf(await c.query('SELECT pg_backend_pid() AS pid', [])), writes: [] })));
    expect(new Set(batches).size).toBe(1);
    expect(burst.map(pidOf)).toContain(batches[0]);
  });
});
