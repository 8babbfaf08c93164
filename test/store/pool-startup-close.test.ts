/**
 * A server that closes a new connection cleanly (a FIN, no error message) before it is ready, as a
 * TCP load balancer or pooler with no database behind it does, fails the statement the connection was
 * opened for, after one attempt (postgres.js, patched: patches/postgres+3.4.9.patch); the next
 * connection to the same server waits for the pool's backoff. postgres.js as released reconnected at
 * once without end and cancelled `connect_timeout` at each close, so the statement never settled and
 * one connection made over a thousand attempts a second (porsager/postgres#1193). No database is
 * needed: the server here accepts and closes every connection.
 */
import net, { type AddressInfo } from 'node:net';
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { openDatabase, type Database } from '../../src/node/db.js';
import { BACKENDS } from '../support/db.js';

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

/** How the statement ended, or 'pending' if it had not after `ms`. */
function settled(statement: Promise<unknown>, ms: number): Promise<string> {
  return Promise.race([
    statement.then(
      () => 'answered',
      // drizzle wraps the driver's error in one of its own (`cause`).
      (e: { cause?: { code?: string } }) => String(e.cause?.code),
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
  const u = new URL(process.env.TEST_DATABASE_URL!.trim());
  const { port } = server.address() as AddressInfo;
  // This server first, then the database (URL's host setter would drop the list).
  const auth = u.username === '' ? '' : `${u.username}${u.password === '' ? '' : `:${u.password}`}@`;
  const failover = await openDatabase({ databaseUrl: `${u.protocol}//${auth}127.0.0.1:${port},${u.host}${u.pathname}${u.search}` });
  const before = accepted;
  try {
    for (let i = 0; i < 3; i++) expect(await settled(failover.db.execute(sql`SELECT 1`), 5000)).toBe('answered');
    expect(accepted).toBeGreaterThan(before);
  } finally {
    await failover.close();
  }
});
