/**
 * The Node server entry: configuration from the environment, embedded PGlite when DATABASE_URL is
 * unset, migrations at start, and a clean shutdown on SIGTERM/SIGINT (stop accepting, flush the
 * decision writer, close the database, exit). Start order: the data directory is checked private
 * and locked, then the port is bound, and only then is the database opened, so a second server or
 * a busy port stops before anything is opened.
 */
import { writeFileSync } from 'node:fs';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { createAdaptorServer } from '@hono/node-server';
import { createApp } from '../http/app.js';
import { Metrics } from '../http/metrics.js';
import { createTenant } from '../service/tenants.js';
import { Store } from '../store/store.js';
import { DecisionWriter } from '../store/writer.js';
import { Checkpointer } from '../audit/service.js';
import { log, readConfig } from './config.js';
import { ensurePrivateDir, lockDataDir, StartupRefused } from './datadir.js';
import { openConfiguredDatabase, PGLITE_DURABILITY } from './db.js';
import { loadDocsAssets } from './docs-assets.js';
import { FileSink } from './file-sink.js';
import { loadKeys } from './keyfile.js';

/** Binds the port; a busy or forbidden port is a refusal (exit 1) before the database is opened. */
function bind(server: Server, port: number, host: string): Promise<number> {
  return new Promise((done, fail) => {
    server.once('error', (e: NodeJS.ErrnoException) =>
      fail(new StartupRefused(`cannot listen on ${host}:${port}: ${e.code === 'EADDRINUSE' ? 'the port is in use' : (e.code ?? e.message)}`, 1)),
    );
    server.listen(port, host, () => done((server.address() as AddressInfo).port));
  });
}

const SERVER_COMMAND = 'the Warrant server (npm start)';

async function main(): Promise<void> {
  const config = readConfig(process.env);
  if (config.databaseUrl === undefined) {
    process.umask(0o077);
    ensurePrivateDir(config.dataDir);
    lockDataDir(config.dataDir, SERVER_COMMAND);
  }
  // Until the database is ready every request is 503: the app is created after it opens.
  let handle: ((req: Request) => Response | Promise<Response>) | null = null;
  const server = createAdaptorServer({
    fetch: (req: Request) => handle?.(req) ?? Response.json({ error: { code: 'unavailable', message: 'starting' } }, { status: 503 }),
  }) as Server;
  const port = await bind(server, config.port, config.host);

  const database = await openConfiguredDatabase(config, SERVER_COMMAND);
  await database.migrate();
  const store = new Store(database.db);
  const now = (): Date => new Date();
  log({ msg: 'database ready', database: database.kind === 'pglite' ? `embedded PGlite at ${config.dataDir}` : 'PostgreSQL server' });
  if (database.kind === 'pglite') log({ msg: 'durability of the embedded database', durability: PGLITE_DURABILITY });

  if (database.kind === 'pglite' && (await store.countTenants()) === 0) {
    const { apiKey } = await createTenant(store, 'default', now());
    const file = join(config.dataDir, 'default-api-key');
    writeFileSync(file, `${apiKey}\n`, { mode: 0o600 });
    log({ msg: 'created tenant "default"; its API key is in the file', file });
  }

  const keys = await loadKeys(config, log);
  const auditKeys = await loadKeys(config, log, 'audit');
  // A key in both rings would let whoever holds the audit key mint tokens, and the reverse.
  const tokenKeys = new Set(keys.jwks.keys.map((k) => k.x));
  if (auditKeys.jwks.keys.some((k) => tokenKeys.has(k.x)))
    throw new Error('the audit key ring shares a key with the token signing ring: give each its own keys');
  const metrics = new Metrics();
  if (database.poolUse !== undefined) metrics.poolUse = database.poolUse;
  metrics.cpuSeconds = () => {
    const { user, system } = process.cpuUsage();
    return (user + system) / 1e6;
  };
  const writer = new DecisionWriter(database.db, {
    now,
    onBatch: (size) => metrics.batch(size),
    onDefer: (retried, waited) => metrics.treeLocked(retried, waited),
  });
  const app = createApp({ store, writer, keys, auditKeys, checkpointIntervalS: config.checkpointIntervalS, now, log, metrics, docsAssets: loadDocsAssets() });
  const checkpointer = new Checkpointer({
    db: database.db,
    keys: auditKeys,
    now,
    sink: new FileSink(config.checkpointDir),
    tenants: async () => (await store.listTenants()).map((t) => t.id),
    log,
  });
  if (config.checkpointIntervalS > 0) checkpointer.start(config.checkpointIntervalS * 1000);
  log({ msg: 'audit checkpoints', every_s: config.checkpointIntervalS, sink: config.checkpointDir, audit_kid: auditKeys.activeKid });
  handle = (req) => app.fetch(req);
  log({ msg: `listening on http://${config.host}:${port}`, port, kid: keys.activeKid });

  let stopping = false;
  const stop = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    log({ msg: 'shutting down', signal });
    server.close();
    void (async () => {
      await writer.flush();
      await checkpointer.stop();
      await database.close();
      process.exit(0);
    })();
    setTimeout(() => process.exit(1), 10_000).unref();
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}

/**
 * postgres.js 3.4.9 can throw from a `setImmediate` write after a connection dropped (its socket is
 * already null; porsager/postgres#1154, #1208): nothing awaits that write and the query it belonged to
 * never settles (src/store/batch.ts sends nothing on a connection it knows is lost, which avoids most
 * of these), so the process must survive a database outage rather than die on it.
 */
process.on('uncaughtException', (e) => {
  if (e instanceof TypeError && /\bnextWrite\b[^\n]*postgres[\\/]src[\\/]connection\.js/.test(e.stack ?? '')) {
    log({ level: 'warn', msg: 'ignored a write on a closed database connection (postgres.js)' });
    return;
  }
  log({ level: 'fatal', msg: 'uncaught exception', error: e.stack ?? e.message });
  process.exit(1);
});

main().catch((e: unknown) => {
  log({ level: 'fatal', msg: 'could not start', error: e instanceof Error ? e.message : String(e) });
  // Also on stderr: a refusal is read by a person at a terminal.
  if (e instanceof StartupRefused) console.error(`warrant: ${e.message}`);
  process.exit(e instanceof StartupRefused ? e.exitCode : 1);
});
