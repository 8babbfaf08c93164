/**
 * A server that closes a new connection cleanly (a FIN, no error message) before it is ready, as a
 * TCP load balancer or pooler with no database behind it does, fails the statement the connection was
 * opened for, after one attempt (postgres.js, patched: patches/postgres+3.4.9.patch); the next
 * connection to the same server waits for the pool's backoff. postgres.js as released reconnected at
 * once without end and cancelled `connect_timeout` at each close, so the statement never settled and
 * one connection made over a thousand attempts a second (porsager/postgres#1193). The first tests
 * need no database (the server here accepts and closes every connection); the others, on PostgreSQL
 * only, go to the test database, some through a proxy, for the rest of the pool's fixes.
 */
import net, { type AddressInfo } from 'node:net';
import { sql } from 'drizzle-orm';
import postgres from 'postgres';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { openDatabase, type Database } from '../../src/node/db.js';
import { KEY_REVOKED_CHANNEL } from '../../src/store/store.js';
import { BACKENDS } from '../support/db.js';

/** drizzle wraps the driver's error in one of its own (`cause`). */
const drizzleCode = (e: unknown): string => String((e as { cause?: { code?: string } }).cause?.code);
const driverCode = (e: unknown): string => String((e as { code?: string }).code);

let server: net.Server;
let accepted = 0;
/** Warrant's pool for this server, and for a URL naming it twice (a list of hosts, tried in turn). */
let database: Database;
let twoHosts: Database;
/** A port nothing listens on. */
let refusing: number;

beforeAll(async () => {
  server = net.createServer((socket) => {
    accepted += 1;
    socket.on('error', () => {});
    // Read what the client sends (its startup message), or the socket never ends and closes.
    socket.resume();
    socket.end();
  });
  await new Promise<void>((listening) => server.listen(0, '127.0.0.1', listening));
  const { port } = server.address() as AddressInfo;
  database = await openDatabase({ databaseUrl: `postgres://warrant@127.0.0.1:${port}/warrant` });
  twoHosts = await openDatabase({ databaseUrl: `postgres://warrant@127.0.0.1:${port},127.0.0.1:${port}/warrant` });
  const closed = net.createServer();
  await new Promise<void>((listening) => closed.listen(0, '127.0.0.1', listening));
  refusing = (closed.address() as AddressInfo).port;
  await new Promise((done) => closed.close(done));
});

afterAll(async () => {
  await database.close();
  await twoHosts.close();
  await new Promise((closed) => server.close(closed));
});

/**
 * The test database's URL with `hosts(its host)` as its hosts, and `search` as its query (URL's host
 * setter would drop a list).
 */
function testDatabaseAt(hosts: (host: string) => string, search?: string): string {
  const u = new URL(process.env.TEST_DATABASE_URL!.trim());
  const auth = u.username === '' ? '' : `${u.username}${u.password === '' ? '' : `:${u.password}`}@`;
  return `${u.protocol}//${auth}${hosts(u.host)}${u.pathname}${search ?? u.search}`;
}

/** How the statement ended ('answered' or its error's code), or 'pending' if it had not after `ms`. */
function settled(statement: Promise<unknown>, ms: number, code = drizzleCode): Promise<string> {
  return Promise.race([
    statement.then(
      () => 'answered',
      (e: unknown) => code(e),
    ),
    new Promise<string>((r) => setTimeout(() => r('pending'), ms)),
  ]);
}

test('a statement fails with CONNECTION_CLOSED after one attempt, and so does each next one', async () => {
  const before = accepted;
  expect(await settled(database.db.execute(sql`SELECT 1`), 2000)).toBe('CONNECTION_CLOSED');
  expect(accepted - before).toBe(1);
  for (let i = 0; i < 10; i++) expect(await settled(database.db.execute(sql`SELECT 1`), 2000)).toBe('CONNECTION_CLOSED');
  expect(accepted - before).toBe(11);
});

// postgres.js tried the next host of a list after each failure and never ran out of hosts: a list
// whose hosts all closed cleanly, or all refused, looped without end (porsager/postgres#1188). Now
// each statement tries each host once.
test('with a list of hosts, a statement fails once it has tried each of them', async () => {
  const before = accepted;
  for (let i = 0; i < 3; i++) expect(await settled(twoHosts.db.execute(sql`SELECT 1`), 2000)).toBe('CONNECTION_CLOSED');
  expect(accepted - before).toBe(6);

  const refused = await openDatabase({ databaseUrl: `postgres://warrant@127.0.0.1:${refusing},127.0.0.1:${refusing}/warrant` });
  try {
    for (let i = 0; i < 3; i++) expect(await settled(refused.db.execute(sql`SELECT 1`), 2000)).toBe('ECONNREFUSED');
  } finally {
    await refused.close();
  }
});

test.runIf(BACKENDS.includes('postgres'))('with a list of hosts, a statement goes on to a later host that answers', async () => {
  const { port } = server.address() as AddressInfo;
  const failover = await openDatabase({ databaseUrl: testDatabaseAt((host) => `127.0.0.1:${port},${host}`) });
  const before = accepted;
  try {
    for (let i = 0; i < 3; i++) expect(await settled(failover.db.execute(sql`SELECT 1`), 5000)).toBe('answered');
    expect(accepted).toBeGreaterThan(before);
  } finally {
    await failover.close();
  }
});

/**
 * A proxy to the test database. `plan(n)` says what to do with the n-th connection accepted (from 1):
 * forward it (false), close it at once (true), or answer its startup message with these bytes and
 * close it. `endAll()` closes every forwarded connection cleanly.
 */
async function proxy(plan: (n: number) => boolean | Buffer): Promise<{ url: string; endAll(): void; close(): Promise<void> }> {
  const url = new URL(process.env.TEST_DATABASE_URL!.trim());
  const target = { port: Number(url.port || 5432), host: url.hostname };
  const sockets = new Set<net.Socket>();
  let n = 0;
  const p = net.createServer((client) => {
    n += 1;
    client.on('error', () => {});
    const how = plan(n);
    if (how === true) {
      client.resume();
      client.end();
      return;
    }
    if (how !== false) {
      client.once('data', () => client.end(how));
      return;
    }
    const up = net.connect(target.port, target.host);
    up.on('error', () => client.destroy());
    for (const s of [client, up]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
    }
    client.on('close', () => up.destroy());
    up.on('close', () => client.destroy());
    client.pipe(up);
    up.pipe(client);
  });
  await new Promise<void>((listening) => p.listen(0, '127.0.0.1', listening));
  url.hostname = '127.0.0.1';
  url.port = String((p.address() as AddressInfo).port);
  return {
    url: url.toString(),
    endAll: () => {
      for (const s of sockets) s.end();
    },
    close: () =>
      new Promise<void>((closed) => {
        for (const s of sockets) s.destroy();
        p.close(() => closed());
      }),
  };
}

/** Warrant's pool options (src/node/db.ts) that matter here. */
const POOL = { max: 10, connect_timeout: 5, backoff: () => 0.05 + Math.random() * 0.1, fetch_types: false, onnotice: () => {} } as const;

// A reserve waits in the pool's queue and is also the statement a new connection is opened for (the
// fix of porsager/postgres#751). Rejected with that connection, it stayed in the queue: the next
// connection to open was handed to it, to nobody, and was lost to the pool, while the other reserve
// waited for good.
test.runIf(BACKENDS.includes('postgres'))('two reserves while one new connection is closed at once: both settle, and no connection is lost', async () => {
  const p = await proxy((n) => n === 2);
  const sql = postgres(p.url, POOL);
  try {
    const outcomes = await Promise.all(
      [sql.reserve(), sql.reserve()].map((r) =>
        settled(
          r.then((c) => c.release()),
          3000,
          driverCode,
        ),
      ),
    );
    expect(outcomes.sort()).toEqual(['CONNECTION_CLOSED', 'answered']);
    // Every connection serves a statement of a full round, once the one reopened after the close
    // has waited out its backoff (until then a statement waits behind another); a lost one never does.
    let backends = 0;
    for (let round = 0; round < 10 && backends < POOL.max; round++) {
      const pids = await Promise.all(Array.from({ length: POOL.max }, () => sql<{ pid: number }[]>`SELECT pg_backend_pid() AS pid, pg_sleep(0.2)`));
      backends = new Set(pids.map(([r]) => r?.pid)).size;
    }
    expect(backends).toBe(POOL.max);
  } finally {
    await sql.end({ timeout: 1 });
    await p.close();
  }
});

// When a connection closes, the pool reopens it for the first statement waiting, a reserve too; once
// open, the connection went to whatever was still queued, not to that reserve, which waited for good.
test.runIf(BACKENDS.includes('postgres'))('a reserve waiting for the only connection gets it once the server has closed it and it has reopened', async () => {
  const p = await proxy(() => false);
  const sql = postgres(p.url, { ...POOL, max: 1 });
  try {
    const busy = sql`SELECT pg_sleep(1)`.catch((e: { code?: string }) => e.code);
    await new Promise((r) => setTimeout(r, 200));
    const reserved = sql.reserve().then((c) => c.release());
    p.endAll();
    expect(await busy).toBe('CONNECTION_CLOSED');
    expect(await settled(reserved, 3000)).toBe('answered');
  } finally {
    await sql.end({ timeout: 1 });
    await p.close();
  }
});

/** A FATAL ErrorResponse message, as PostgreSQL sends before it closes a connection it refuses. */
function fatal(code: string, message: string): Buffer {
  const body = Buffer.from(`SFATAL\0VFATAL\0C${code}\0M${message}\0\0`);
  const head = Buffer.alloc(5);
  head.write('E');
  head.writeUInt32BE(body.length + 4, 1);
  return Buffer.concat([head, body]);
}

// A connection closed mid-statement kept that statement as its current one: the next connection's
// FATAL at startup was then taken for the statement's error and kept, the statement it was opened for
// failed as CONNECTION_CLOSED instead, and the kept error failed the first statement on the next
// healthy connection.
test.runIf(BACKENDS.includes('postgres'))(
  'after a close mid-statement, a refusal at startup fails its statement with its own error, and the next connection is clean',
  async () => {
    let refusing = false;
    const p = await proxy(() => (refusing ? fatal('57P03', 'the database system is starting up') : false));
    const sql = postgres(p.url, { ...POOL, max: 1 });
    try {
      const busy = settled(sql`SELECT pg_sleep(1)`, 3000, driverCode);
      await new Promise((r) => setTimeout(r, 200));
      refusing = true;
      p.endAll();
      expect(await busy).toBe('CONNECTION_CLOSED');
      expect(await settled(sql`SELECT 1`, 3000, driverCode)).toBe('57P03');
      refusing = false;
      expect(await settled(sql`SELECT 1`, 3000, driverCode)).toBe('answered');
    } finally {
      await sql.end({ timeout: 1 });
      await p.close();
    }
  },
);

// The revocation listener's connection waits postgres.js's backoff between attempts. postgres.js's own
// grows with each failed attempt (to 10–20 s after seven), and a refused or closed connection counts
// as one: after an outage of some seconds the listener listened again seconds after the database was back.
test.runIf(BACKENDS.includes('postgres'))(
  'the revocation listener listens again within about a second of an outage ending',
  async () => {
    let down = false;
    const p = await proxy(() => down);
    const database = await openDatabase({ databaseUrl: p.url });
    const notifier = postgres(process.env.TEST_DATABASE_URL!.trim(), { max: 1, onnotice: () => {} });
    const forgotten: (string | null)[] = [];
    database.listenKeyRevocations((keyId) => forgotten.push(keyId));
    /** Whether a notice sent now reaches the listener within 100 ms. */
    const hears = async (probe: string): Promise<boolean> => {
      await notifier`SELECT pg_notify(${KEY_REVOKED_CHANNEL}, ${probe})`;
      await new Promise((r) => setTimeout(r, 100));
      return forgotten.includes(probe);
    };
    try {
      let heard = false;
      for (let i = 0; i < 50 && !heard; i++) heard = await hears(`before-${i}`);
      expect(heard).toBe(true);
      down = true;
      p.endAll();
      await new Promise((r) => setTimeout(r, 8000));
      down = false;
      heard = false;
      for (let i = 0; i < 20 && !heard; i++) heard = await hears(`after-${i}`);
      expect(heard).toBe(true);
    } finally {
      await notifier.end({ timeout: 1 });
      await database.close();
      await p.close();
    }
  },
  20_000,
);

// prefer-standby takes a primary when no later host is left to try. postgres.js tested the host it was
// on, not the next one, so with hosts counted it refused the last primary (CONNECTION_DESTROYED).
test.runIf(BACKENDS.includes('postgres'))('target_session_attrs=prefer-standby over two primaries settles on the last', async () => {
  const sql = postgres(
    testDatabaseAt((host) => `${host},${host}`, '?target_session_attrs=prefer-standby'),
    { ...POOL, max: 1 },
  );
  try {
    for (let i = 0; i < 2; i++) expect(await settled(sql`SELECT 1`, 5000, driverCode)).toBe('answered');
  } finally {
    await sql.end({ timeout: 1 });
  }
});
