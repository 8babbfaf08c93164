/**
 * Real databases for tests: embedded PGlite always, and a PostgreSQL server when TEST_DATABASE_URL
 * is set. Each call gets a database of its own (a PGlite loaded from the migrated dump, or a fresh
 * `warrant_t_*` database on the server, dropped again on close), so test files never share state.
 */
import { readFileSync } from 'node:fs';
import postgres from 'postgres';
import { inject } from 'vitest';
import { openDatabase, type Database } from '../../src/node/db.js';

export type Backend = 'pglite' | 'postgres';

const serverUrl = process.env.TEST_DATABASE_URL?.trim() || undefined;

/** The backends this run covers: PGlite, and the server when TEST_DATABASE_URL is set. */
export const BACKENDS: readonly Backend[] = serverUrl === undefined ? ['pglite'] : ['pglite', 'postgres'];

export interface TestDatabase extends Database {
  /** A connection string to this database (postgres backend only), for other processes. */
  readonly url?: string;
}

export async function openTestDatabase(backend: Backend, options: { poolSize?: number } = {}): Promise<TestDatabase> {
  if (backend === 'pglite') {
    const dump = readFileSync(inject('pgliteDump'));
    return openDatabase({ loadDataDir: new Blob([dump]) });
  }
  if (serverUrl === undefined) throw new Error('TEST_DATABASE_URL is not set');
  const name = `warrant_t_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 8)}`;
  const admin = postgres(serverUrl, { max: 1, onnotice: () => {} });
  await admin.unsafe(`CREATE DATABASE ${name}`);
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  const database = await openDatabase({ databaseUrl: url.toString(), poolSize: options.poolSize ?? 10 });
  await database.migrate();
  return {
    ...database,
    url: url.toString(),
    async close() {
      await database.close();
      await admin.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await admin.end({ timeout: 5 });
    },
  };
}
