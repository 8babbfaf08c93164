/**
 * Opens the database for the Node entry and CLIs: a PostgreSQL server through postgres.js when a
 * URL is given, else embedded PGlite in a data directory. Migrations under db/migrations are
 * applied under an advisory lock, so instances starting together never race.
 */
import { mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PGlite } from '@electric-sql/pglite';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import { migrate as migratePglite } from 'drizzle-orm/pglite/migrator';
import { drizzle as drizzlePostgres } from 'drizzle-orm/postgres-js';
import { migrate as migratePostgres } from 'drizzle-orm/postgres-js/migrator';
import postgres from 'postgres';
import type { PoolUse } from '../http/metrics.js';
import type { Db } from '../store/store.js';
import type { Config } from './config.js';

export const MIGRATIONS = resolve(dirname(fileURLToPath(import.meta.url)), '../../db/migrations');
let poolCounter = 0;
const MIGRATION_LOCK = 0x57_41_52_52; // "WARR"

export interface Database {
  readonly kind: 'postgres' | 'pglite';
  readonly db: Db;
  /** The embedded client, when the database is PGlite (tests dump it to start others fast). */
  readonly pglite?: PGlite;
  /** PostgreSQL only: this process's connections by state, for GET /metrics. */
  readonly poolUse?: () => Promise<PoolUse>;
  migrate(): Promise<void>;
  close(): Promise<void>;
}

export interface DatabaseOptions {
  readonly databaseUrl?: string;
  /** PGlite data directory; omitted means in memory. */
  readonly dataDir?: string;
  /** PGlite only: start from this dump of a data directory (see PGlite `loadDataDir`). */
  readonly loadDataDir?: Blob;
  readonly poolSize?: number;
}

/** The database the configuration names: DATABASE_URL's server, else PGlite in WARRANT_DATA_DIR. */
export function openConfiguredDatabase(config: Config): Promise<Database> {
  return openDatabase(config.databaseUrl === undefined ? { dataDir: config.dataDir } : { databaseUrl: config.databaseUrl });
}

export async function openDatabase(o: DatabaseOptions): Promise<Database> {
  return o.databaseUrl !== undefined ? openPostgres(o.databaseUrl, o.poolSize ?? 10) : openPglite(o);
}

function openPostgres(url: string, max: number): Database {
  // A name per process and pool, so pg_stat_activity can tell this pool's connections apart.
  const applicationName = `warrant-${process.pid}-${(poolCounter += 1)}`;
  const client = postgres(url, { max, connect_timeout: 5, idle_timeout: 60, onnotice: () => {}, connection: { application_name: applicationName } });
  return {
    kind: 'postgres',
    db: drizzlePostgres(client),
    async poolUse() {
      const rows = await client<{ state: string; n: number }[]>`
        SELECT coalesce(state, 'unknown') AS state, count(*)::int AS n FROM pg_stat_activity WHERE application_name = ${applicationName} GROUP BY 1`;
      return { max, byState: Object.fromEntries(rows.map((r) => [r.state, r.n])) };
    },
    async migrate() {
      // One connection, so the session-level advisory lock covers the migrator's statements.
      const one = postgres(url, { max: 1, connect_timeout: 5, onnotice: () => {} });
      try {
        await one`SELECT pg_advisory_lock(${MIGRATION_LOCK})`;
        await migratePostgres(drizzlePostgres(one), { migrationsFolder: MIGRATIONS });
        await one`SELECT pg_advisory_unlock(${MIGRATION_LOCK})`;
      } finally {
        await one.end({ timeout: 5 });
      }
    },
    async close() {
      await client.end({ timeout: 5 });
    },
  };
}

async function openPglite(o: DatabaseOptions): Promise<Database> {
  if (o.dataDir !== undefined) mkdirSync(o.dataDir, { recursive: true });
  const client = await PGlite.create(o.dataDir, o.loadDataDir === undefined ? {} : { loadDataDir: o.loadDataDir });
  const db = drizzlePglite(client) as unknown as Db;
  return {
    kind: 'pglite',
    db,
    pglite: client,
    async migrate() {
      await migratePglite(drizzlePglite(client), { migrationsFolder: MIGRATIONS });
    },
    async close() {
      await client.close();
    },
  };
}
