/**
 * Opens the database for the Node entry and CLIs: a PostgreSQL server through postgres.js when a
 * URL is given, else embedded PGlite in a data directory. Migrations under db/migrations are
 * applied under an advisory lock, so instances starting together never race.
 */
import fs from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PGlite, type PGliteOptions } from '@electric-sql/pglite';
import { NodeFS } from '@electric-sql/pglite/nodefs';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import { migrate as migratePglite } from 'drizzle-orm/pglite/migrator';
import { drizzle as drizzlePostgres } from 'drizzle-orm/postgres-js';
import { migrate as migratePostgres } from 'drizzle-orm/postgres-js/migrator';
import postgres from 'postgres';
import type { PoolUse } from '../http/metrics.js';
import { KEY_REVOKED_CHANNEL, type Db } from '../store/store.js';
import { DEFAULT_STATEMENT_TIMEOUT_MS, type Config } from './config.js';
import { ensurePrivateDir, lockDataDir } from './datadir.js';

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
  /** Tells `forget` of every API key revoked from now on, anywhere (AppDeps.keyRevocations); ends with close(). */
  readonly listenKeyRevocations: (forget: (keyId: string | null) => void) => void;
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
  /** PostgreSQL only: statement_timeout and idle_in_transaction_session_timeout of every connection (ms). */
  readonly statementTimeoutMs?: number;
  /** Who opens it (`server`, `tenant-cli`, …): written in the data directory's lock file for the error a second process gets. */
  readonly command?: string;
}

/**
 * Seconds before postgres.js reconnects a closed connection: short and jittered. Its default grows
 * with every failed attempt (3^n / 100 s, up to 20 s) and the count is shared by the whole pool, so
 * after a restart or a mass termination a healthy database went unused for 10–20 s (issue 13).
 */
const reconnectDelay = (): number => 0.05 + Math.random() * 0.1;

/**
 * What survives a crash with embedded PGlite, for the startup log and the README: commits are
 * fsynced (see `PrivateDurableNodeFS`), so a committed decision survives the process being killed and the
 * machine losing power, as far as the disk honours fsync.
 */
export const PGLITE_DURABILITY =
  'each commit is fsynced before it is answered (WAL written with fsync): committed decisions survive a killed process and an OS crash; ' +
  'use DATABASE_URL (a PostgreSQL server) in production for replication, backups and several instances';

/** The database the configuration names: DATABASE_URL's server, else PGlite in WARRANT_DATA_DIR. */
export function openConfiguredDatabase(config: Config, command: string): Promise<Database> {
  return openDatabase(
    config.databaseUrl === undefined
      ? { dataDir: config.dataDir, command }
      : { databaseUrl: config.databaseUrl, statementTimeoutMs: config.statementTimeoutMs },
  );
}

export async function openDatabase(o: DatabaseOptions): Promise<Database> {
  return o.databaseUrl !== undefined ? openPostgres(o.databaseUrl, o.poolSize ?? 10, o.statementTimeoutMs ?? DEFAULT_STATEMENT_TIMEOUT_MS) : openPglite(o);
}

function openPostgres(url: string, max: number, timeoutMs: number): Database {
  // A name per process and pool, so pg_stat_activity can tell this pool's connections apart.
  const applicationName = `warrant-${process.pid}-${(poolCounter += 1)}`;
  const client = postgres(url, {
    max,
    connect_timeout: 5,
    idle_timeout: 60,
    backoff: reconnectDelay,
    // postgres.js fetches the array types on each new connection without observing that query: a
    // connection terminated meanwhile was an unhandled rejection, which ended the process (issue 13).
    // drizzle parses and writes array columns from their text form, so nothing needs those types.
    fetch_types: false,
    onnotice: () => {},
    // Sent in the startup packet: the server stops work nobody waits for any more, and ends a
    // transaction left open (its locks with it) rather than let it block every decision.
    connection: {
      application_name: applicationName,
      statement_timeout: timeoutMs,
      idle_in_transaction_session_timeout: timeoutMs,
    },
  });
  const listeners: { stop(): Promise<void> }[] = [];
  return {
    kind: 'postgres',
    db: drizzlePostgres(client),
    listenKeyRevocations(forget) {
      listeners.push(listenForRevocations(url, `${applicationName}-listen`, forget));
    },
    async poolUse() {
      const rows = await client<{ state: string; n: number }[]>`
        SELECT coalesce(state, 'unknown') AS state, count(*)::int AS n FROM pg_stat_activity WHERE application_name = ${applicationName} GROUP BY 1`;
      return { max, byState: Object.fromEntries(rows.map((r) => [r.state, r.n])) };
    },
    async migrate() {
      // One connection, so the session-level advisory lock covers the migrator's statements.
      const one = postgres(url, { max: 1, connect_timeout: 5, backoff: reconnectDelay, onnotice: () => {} });
      try {
        await one`SELECT pg_advisory_lock(${MIGRATION_LOCK})`;
        await migratePostgres(drizzlePostgres(one), { migrationsFolder: MIGRATIONS });
        await one`SELECT pg_advisory_unlock(${MIGRATION_LOCK})`;
      } finally {
        await one.end({ timeout: 5 });
      }
    },
    async close() {
      await Promise.all(listeners.map((l) => l.stop()));
      await client.end({ timeout: 5 });
    },
  };
}

const RELISTEN_MS = 1000;

/**
 * LISTENs for revoked API keys on a connection of its own, kept open for good. postgres.js's own
 * `listen` gives up for good when one reconnection fails, so this one tries again every RELISTEN_MS
 * until it listens. Whenever it stops listening or starts again, notices may have been missed:
 * `forget(null)` then drops every cached key, which the next request looks up afresh.
 */
function listenForRevocations(url: string, applicationName: string, forget: (keyId: string | null) => void): { stop(): Promise<void> } {
  let stopped = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  // `onnotify` is the option postgres.js's own `listen` builds its connection with (src/index.js);
  // its types leave it out.
  const options: postgres.Options<Record<string, never>> & { onnotify: (channel: string, payload: string) => void } = {
    max: 1,
    idle_timeout: 0,
    max_lifetime: null,
    connect_timeout: 5,
    // As the pool's: postgres.js's own grows to 10–20 s after a few failed attempts, and the listener
    // would be that late to listen again once the database is back.
    backoff: reconnectDelay,
    fetch_types: false,
    onnotice: () => {},
    connection: { application_name: applicationName },
    onnotify: (channel, payload) => {
      if (channel === KEY_REVOKED_CHANNEL) forget(payload);
    },
    onclose: () => {
      forget(null);
      again();
    },
  };
  const conn = postgres(url, options);
  const again = (): void => {
    if (stopped || timer !== undefined) return;
    timer = setTimeout(() => {
      timer = undefined;
      void attempt();
    }, RELISTEN_MS);
    timer.unref();
  };
  const attempt = async (): Promise<void> => {
    try {
      await conn.unsafe(`LISTEN ${KEY_REVOKED_CHANNEL}`);
      forget(null);
    } catch {
      again();
    }
  };
  void attempt();
  return {
    async stop() {
      stopped = true;
      clearTimeout(timer);
      await conn.end({ timeout: 1 });
    },
  };
}

/**
 * Whether an error comes from the database or the connection to it (postgres.js, a socket): such an
 * error is never a reason to end the process, whoever failed to observe it.
 */
export function isDatabaseError(e: unknown): boolean {
  if (e instanceof postgres.PostgresError) return true;
  if (typeof e !== 'object' || e === null) return false;
  const { code, stack } = e as { code?: unknown; stack?: unknown };
  // postgres.js's own codes, and the socket errors of reaching a database (not, say, EADDRINUSE).
  if (typeof code === 'string' && /^(CONNECTION_|CONNECT_TIMEOUT$|ECONNREFUSED$|ECONNRESET$|EPIPE$|ETIMEDOUT$|EHOSTUNREACH$|ENETUNREACH$)/.test(code))
    return true;
  return typeof stack === 'string' && /node_modules[\\/]postgres[\\/]/.test(stack);
}

/** The parts of Emscripten's NODEFS patched below (its internals; pinned with the PGlite version). */
interface NodeFsInternals {
  stream_ops: Record<string, unknown>;
  doSetAttr: (path: unknown, node: unknown, attr: { mode?: number }, ...rest: unknown[]) => void;
}

/**
 * PGlite's Node filesystem, made durable and private:
 * - fsync: PGlite starts PostgreSQL with `-F` (fsync off), and its Emscripten NODEFS has no fsync
 *   operation, so `fsync()` in the database is a silent no-op and a commit can be lost with the OS.
 *   This gives the operation a real `fsync(2)` of the file.
 * - modes: Emscripten's open(O_CREAT) chmods each new file to the mode PostgreSQL asks (0666 here),
 *   which the umask does not filter; every mode set through NODEFS is stripped of group/other bits.
 */
class PrivateDurableNodeFS extends NodeFS {
  override async init(pg: PGlite, opts: Parameters<NodeFS['init']>[1]): ReturnType<NodeFS['init']> {
    const patch = (mod: { NODEFS: NodeFsInternals }): void => {
      const nodefs = mod.NODEFS;
      nodefs.stream_ops.fsync = (stream: { nfd?: number }): number => {
        // Through the module object, so that a test can count the calls.
        if (stream.nfd !== undefined) fs.fsyncSync(stream.nfd);
        return 0;
      };
      const setAttr = nodefs.doSetAttr.bind(nodefs);
      nodefs.doSetAttr = (path, node, attr, ...rest) => setAttr(path, node, attr.mode === undefined ? attr : { ...attr, mode: attr.mode & ~0o077 }, ...rest);
    };
    return super.init(pg, { ...opts, preRun: [...(opts.preRun ?? []), patch] });
  }
}

/**
 * PostgreSQL's start parameters in PGlite without `-F`, and with `wal_sync_method=fsync`: the
 * WebAssembly build's fdatasync() is a stub that syncs nothing, while fsync() reaches the patch above.
 */
const DURABLE_START_PARAMS = [...PGlite.defaultStartParams.filter((p) => p !== '-F'), '-c', 'fsync=on', '-c', 'wal_sync_method=fsync'];

function pgliteOptions(o: DatabaseOptions): PGliteOptions {
  if (o.dataDir === undefined) return o.loadDataDir === undefined ? {} : { loadDataDir: o.loadDataDir };
  return { fs: new PrivateDurableNodeFS(o.dataDir), startParams: DURABLE_START_PARAMS, ...(o.loadDataDir === undefined ? {} : { loadDataDir: o.loadDataDir }) };
}

/**
 * A data directory is made private before anything is opened: created 0700 (or refused when others
 * can reach it), locked for this process, and the umask set so that the files PGlite creates for
 * the life of the process (NODEFS creates them 0666 minus the umask) are the owner's alone.
 */
function claimDataDir(dir: string, command: string): () => void {
  process.umask(0o077);
  ensurePrivateDir(dir);
  return lockDataDir(dir, command);
}

async function openPglite(o: DatabaseOptions): Promise<Database> {
  const release = o.dataDir === undefined ? () => {} : claimDataDir(o.dataDir, o.command ?? 'warrant');
  let client: PGlite;
  try {
    client = await PGlite.create(pgliteOptions(o));
  } catch (e) {
    release();
    throw e;
  }
  const db = drizzlePglite(client) as unknown as Db;
  return {
    kind: 'pglite',
    db,
    pglite: client,
    listenKeyRevocations(forget) {
      // One process holds an embedded store, so revocations come from it; listened to all the same.
      client.listen(KEY_REVOKED_CHANNEL, forget).then(
        () => forget(null),
        () => {},
      );
    },
    async migrate() {
      await migratePglite(drizzlePglite(client), { migrationsFolder: MIGRATIONS });
    },
    async close() {
      await client.close();
      release();
    },
  };
}
