/**
 * The Node server entry: configuration from the environment, embedded PGlite when DATABASE_URL is
 * unset, migrations at start, and a hitless shutdown on SIGTERM/SIGINT (stop accepting, answer every
 * request already received, flush the decision writer, close the database, exit). Start order: the
 * data directory is checked private and locked, then the port is bound, and only then is the
 * database opened, so a second server or a busy port stops before anything is opened. Once it
 * listens, seals made under older signing keys are renewed under the active one, in the background.
 */
import type { Server as HttpServer } from 'node:http';
import { Server as NetServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { createAdaptorServer } from '@hono/node-server';
import { createApp } from '../http/app.js';
import { Metrics } from '../http/metrics.js';
import { resealLogged } from '../service/reseal.js';
import { createTenant } from '../service/tenants.js';
import { Store } from '../store/store.js';
import { errorFields } from '../store/error-fields.js';
import { DecisionWriter } from '../store/writer.js';
import { Checkpointer } from '../audit/service.js';
import { log, readConfig } from './config.js';
import { ensurePrivateDir, lockDataDir, StartupRefused } from './datadir.js';
import { isDatabaseError, openConfiguredDatabase, PGLITE_DURABILITY } from './db.js';
import { loadDocsAssets } from './docs-assets.js';
import { FileSink } from './file-sink.js';

import { loadKeys } from './keyfile.js';
import { assertDisjoint } from '../crypto/keys.js';
import { ensureOwnDir, replaceFile } from './owned.js';
import { useNativeBase64url, useNativeSha256 } from './native-hash.js';

/** Binds the port; a busy or forbidden port is a refusal (exit 1) before the database is opened. */
function bind(server: HttpServer, port: number, host: string): Promise<number> {
  return new Promise((done, fail) => {
    server.once('error', (e: NodeJS.ErrnoException) =>
      fail(new StartupRefused(`cannot listen on ${host}:${port}: ${e.code === 'EADDRINUSE' ? 'the port is in use' : (e.code ?? e.message)}`, 1)),
    );
    server.listen(port, host, () => done((server.address() as AddressInfo).port));
  });
}

const SERVER_COMMAND = 'the Warrant server (npm start)';

async function main(): Promise<void> {
  useNativeSha256();
  useNativeBase64url();
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
  }) as HttpServer;
  const requests = trackRequests(server);
  const port = await bind(server, config.port, config.host);

  const database = await openConfiguredDatabase(config, SERVER_COMMAND);
  await database.migrate();
  const store = new Store(database.db);
  const now = (): Date => new Date();
  log({ msg: 'database ready', database: database.kind === 'pglite' ? `embedded PGlite at ${config.dataDir}` : 'PostgreSQL server' });
  if (database.kind === 'pglite') log({ msg: 'durability of the embedded database', durability: PGLITE_DURABILITY });

  if (database.kind === 'pglite' && (await store.countTenants()) === 0) {
    const file = join(config.dataDir, 'default-api-key');
    // The key file is written whole and fsync'd before the tenant is stored: written after, a failed
    // write (a full disk) or a crash between the two left a default tenant whose key nobody had.
    await createTenant(store, 'default', now(), (apiKey) => replaceFile(file, `${apiKey}\n`, 0o600));
    log({ msg: 'created tenant "default"; its API key is in the file', file });
  }

  const keys = await loadKeys(config, log);
  const auditKeys = await loadKeys(config, log, 'audit');
  assertDisjoint(keys, auditKeys);
  // Refused now rather than at the first checkpoint: a sink others can write is no evidence.
  ensureOwnDir(config.checkpointDir, 'the checkpoint directory');
  const metrics = new Metrics();
  if (database.poolUse !== undefined) metrics.poolUse = database.poolUse;
  metrics.cpuSeconds = () => {
    const { user, system } = process.cpuUsage();
    return (user + system) / 1e6;
  };
  const writer = new DecisionWriter(database.db, {
    now,
    deadlineMs: config.deadlineMs,
    maxPending: config.maxPending,
    onBatch: (size) => metrics.batch(size),
    onDefer: (retried, waited) => metrics.treeLocked(retried, waited),
    onShed: () => metrics.shed(),
    onDatabase: (state) => metrics.database(state),
  });
  const app = createApp({
    store,
    writer,
    keys,
    auditKeys,
    checkpointIntervalS: config.checkpointIntervalS,
    now,
    log,
    metrics,
    deadlineMs: config.deadlineMs,
    maxPending: config.maxPending,
    docsAssets: loadDocsAssets(),
    keyRevocations: (forget) => database.listenKeyRevocations(forget),
  });

  const checkpointer = new Checkpointer({
    db: database.db,
    keys: auditKeys,
    now,
    sink: new FileSink(config.checkpointDir),
    tenants: async () => (await store.listTenants()).map((t) => t.id),
    log,
    onRound: (r) => metrics.checkpointRound(r.failed, r.alarmed, r.at),
    // PGlite runs on this thread and its transaction holds it: a pause would let requests in only to
    // wait for the checkpoint's commit, and make the checkpoint longer.
    ...(database.kind === 'pglite' ? { pause: async () => {} } : {}),
  });
  if (config.checkpointIntervalS > 0) checkpointer.start(config.checkpointIntervalS * 1000);
  log({ msg: 'audit checkpoints', every_s: config.checkpointIntervalS, sink: config.checkpointDir, audit_kid: auditKeys.activeKid });
  handle = (req) => app.fetch(req);
  log({ msg: `listening on http://${config.host}:${port}`, port, kid: keys.activeKid });
  // After a rotation, so that retiring the old key later strands no tool (src/service/reseal.ts).
  // Nothing waits for it: seals of older keys hold meanwhile. A failure is logged and changes nothing.
  void resealLogged(database.db, keys, log);

  let stopping = false;
  const stop = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    log({ msg: 'shutting down', signal, in_flight: requests.inFlight() });
    // Every request is answered within the deadline, so this bound is only for the unforeseen.
    setTimeout(() => process.exit(1), 3 * config.deadlineMs + 10_000).unref();
    void (async () => {
      await requests.drain(config.deadlineMs + 2000);
      await writer.flush();
      await checkpointer.stop();
      await database.close();
      process.exit(0);
    })();
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}

/** Quiet time after the last answer before idle connections are closed: requests already on the wire arrive. */
const DRAIN_GRACE_MS = 150;

/**
 * Counts the requests being answered, and drains them on shutdown without cutting any off: the
 * listening socket closes (no new connections), requests on open connections are still read and
 * answered, each answer now with `Connection: close` so the client opens no further request on it,
 * and idle connections are closed only once nothing has been in flight for a moment.
 */
function trackRequests(server: HttpServer): { inFlight(): number; drain(boundMs: number): Promise<void> } {
  let inFlight = 0;
  let draining = false;
  let lastDone = performance.now();
  server.prependListener('request', (_req, res) => {
    inFlight += 1;
    if (draining) res.setHeader('Connection', 'close');
    res.once('close', () => {
      inFlight -= 1;
      lastDone = performance.now();
    });
  });
  const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
  return {
    inFlight: () => inFlight,
    async drain(boundMs) {
      draining = true;
      // net.Server's close stops accepting; http.Server's would also cut idle keep-alive connections
      // at once, resetting any request a client is sending on one at this moment.
      NetServer.prototype.close.call(server);
      const until = performance.now() + boundMs;
      while (performance.now() < until && (inFlight > 0 || performance.now() - lastDone < DRAIN_GRACE_MS)) await sleep(20);
      server.closeIdleConnections();
      while (performance.now() < until && inFlight > 0) await sleep(20);
      server.closeAllConnections();
    },
  };
}

/**
 * No database error ends the process (issue 13): postgres.js leaves some of its own promises
 * unobserved (the array-type query of a new connection, before fetch_types was turned off), and a
 * connection lost at the wrong moment rejects them. Anything else unobserved is a bug: exit.
 */
process.on('unhandledRejection', (e) => {
  if (isDatabaseError(e)) {
    log({ level: 'warn', msg: 'ignored an unobserved database error', ...errorFields(e) });
    return;
  }
  log({ level: 'fatal', msg: 'unhandled rejection', ...errorFields(e), stack: e instanceof Error ? e.stack : undefined });
  process.exit(1);
});

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
  if (isDatabaseError(e)) {
    log({ level: 'warn', msg: 'ignored a database error nothing caught', ...errorFields(e) });
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
