/**
 * Embedded commits are durable (issue 14): PGlite as shipped issues no fsync at all (PostgreSQL is
 * started with -F and NODEFS has no fsync); opened by openDatabase on a data directory, every commit
 * reaches fsync(2).
 */
import fs from 'node:fs';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, expect, test, vi } from 'vitest';
import { openDatabase } from '../../src/node/db.js';

const root = mkdtempSync(join(tmpdir(), 'warrant-durable-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

test('each commit on an embedded data directory is fsynced', async () => {
  const database = await openDatabase({ dataDir: join(root, 'data'), command: 'test' });
  try {
    const pg = database.pglite;
    if (pg === undefined) throw new Error('expected PGlite');
    expect((await pg.query<{ fsync: string }>('SHOW fsync')).rows[0]?.fsync).toBe('on');
    await pg.exec('CREATE TABLE t (x int)');
    const fsync = vi.spyOn(fs, 'fsyncSync');
    for (let i = 0; i < 10; i += 1) await pg.exec(`INSERT INTO t VALUES (${i})`);
    expect(fsync.mock.calls.length).toBeGreaterThanOrEqual(10);
    fsync.mockRestore();
  } finally {
    await database.close();
  }
}, 60_000);
