/**
 * Faults on PostgreSQL with real server processes: two instances racing on one database (budgets,
 * call counts, revocation and idempotency hold across them), a `kill -9` mid-load (every grant a
 * client saw is in the audit log and charges match audit rows), a database outage through a TCP
 * proxy (fail closed with 503, recover without a restart), and a proxy that accepts every connection
 * and closes it at once, as a load balancer with no database behind it does (503 at once, reconnects
 * spaced out, recovery), and connections cut right after a COMMIT is confirmed (a request whose write
 * committed says so: outcome `unknown`).
 */
import { createServer, connect, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { openTestDatabase, type TestDatabase } from '../support/db.js';
import { cleanupServers, startServer, tempDir, type RunningServer } from '../support/server.js';
import { SHELL } from '../support/tools.js';

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Body = any;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Every audit entry of the tenant, following `next` cursors. */
async function auditLog(server: RunningServer): Promise<Body[]> {
  const out: Body[] = [];
  let after: string | null = null;
  do {
    const r = await server.call('GET', `/v1/audit?limit=1000${after === null ? '' : `&after=${encodeURIComponent(after)}`}`);
    expect(r.status).toBe(200);
    out.push(...r.body.entries);
    after = r.body.next;
  } while (after !== null);
  return out;
}

async function expectVerified(server: RunningServer): Promise<void> {
  const v = await server.call('GET', '/v1/audit/verify');
  expect(v.status).toBe(200);
  expect(v.body.ok).toBe(true);
}

interface Cap {
  readonly id: string;
  readonly token: string;
}

/** A root at `/w/<name>` with `predicate`, then a child and a grandchild with the same predicate. */
async function chain(server: RunningServer, name: string, predicate: Record<string, number>): Promise<Cap[]> {
  const m = await server.call('POST', '/v1/capabilities', {
    trajectory_id: name,
    rights: ['read'],
    objects: [{ kind: 'path', prefix: `/w/${name}` }],
    predicate: { ...predicate, max_depth: 2 },
    ttl_s: 3600,
  });
  expect(m.status).toBe(201);
  const caps: Cap[] = [{ id: m.body.capability_id, token: m.body.token }];
  for (const depth of [1, 2]) {
    const a = await server.call('POST', '/v1/attenuate', {
      parent_token: caps[depth - 1]!.token,
      rights: ['read'],
      objects: [{ kind: 'path', prefix: `/w/${name}` }],
      predicate: { ...predicate, max_depth: 2 - depth },
    });
    expect(a.status).toBe(201);
    caps.push({ id: a.body.capability_id, token: a.body.token });
  }
  return caps;
}

const approveBody = (cap: Cap, name: string, extra: Record<string, unknown> = {}) => ({
  token: cap.token,
  op: 'read',
  target: { kind: 'path', path: `/w/${name}/f` },
  cost: 1,
  ...extra,
});

/** Approve grant audit rows of the given capabilities. */
const grantsOf = (log: Body[], ids: readonly string[]): Body[] =>
  log.filter((e) => e.event === 'approve' && e.decision === 'grant' && ids.includes(e.capability_id));

/** A TCP proxy to the PostgreSQL server that can cut every connection and refuse new ones. */
interface Answer {
  readonly status: number;
  readonly body: Body;
  /** How long the request took, in milliseconds. */
  readonly ms: number;
}

/**
 * `clients` clients approving in a loop, 5 ms apart, each on one of the three capabilities of `caps`
 * in turn, until `stop()`; `answers` holds every answer so far, in the order received.
 */
function approving(server: RunningServer, caps: readonly Cap[], name: string, clients: number): { answers: Answer[]; stop: () => Promise<void> } {
  const answers: Answer[] = [];
  let running = true;
  const client = async (w: number): Promise<void> => {
    while (running) {
      const t0 = performance.now();
      const r = await server.call('POST', '/v1/approve', approveBody(caps[w % 3]!, name));
      answers.push({ status: r.status, body: r.body, ms: performance.now() - t0 });
      await sleep(5);
    }
  };
  const all = Promise.all(Array.from({ length: clients }, (_, w) => client(w)));
  return {
    answers,
    stop: async () => {
      running = false;
      await all;
    },
  };
}

/** The audit ids of the grants among `answers` that `log` does not hold (none: every grant answered was audited). */
function unaudited(log: readonly Body[], answers: readonly Answer[]): string[] {
  const ids = new Set(log.map((e) => e.id));
  return answers.filter((r) => r.status === 200 && r.body?.decision === 'grant' && !ids.has(r.body.audit_id)).map((r) => r.body.audit_id as string);
}

/** Waits up to 5 s for a grant among the answers from index `from` on. */
async function grantFrom(answers: readonly Answer[], from: number): Promise<void> {
  for (let i = 0; i < 100 && !answers.slice(from).some((r) => r.body?.decision === 'grant'); i++) await sleep(50);
}

/** A call of the (registered) irreversible shell tool under a new capability, asked by `driver` and waiting for a person: its approval's path, and the call. */
async function pendingCall(server: RunningServer, driver: string, name: string): Promise<{ path: string; call: Record<string, unknown> }> {
  const cap = await server.call('POST', '/v1/capabilities', {
    trajectory_id: name,
    rights: ['execute'],
    objects: [{ kind: 'path', prefix: '/workspace' }],
    predicate: { budget: 10 },
    ttl_s: 3600,
  });
  const call = { token: cap.body.token, tool: 'shell', args: { command: 'make', cwd: '/workspace/app', timeout_ms: 30000 }, cost: 1, call_id: name };
  const asked = await server.call('POST', '/v1/approve', call, { key: driver });
  expect(asked.body.decision).toBe('pending');
  return { path: `/v1/approvals/${asked.body.approval_id as string}`, call };
}

/** Waits up to 15 s for `/readyz` to answer 200 (a pooled connection has reopened), and expects it. */
async function readyAgain(server: RunningServer): Promise<void> {
  let ready = 0;
  for (let i = 0; i < 150 && ready !== 200; i++) {
    ready = (await server.call('GET', '/readyz', undefined, { key: null })).status;
    if (ready !== 200) await sleep(100);
  }
  expect(ready).toBe(200);
}

/** `url` with its host and port those of the proxy. */
function through(proxy: Proxy, url: string): string {
  const u = new URL(url);
  u.hostname = '127.0.0.1';
  u.port = String(proxy.port);
  return u.toString();
}

interface Proxy {
  readonly port: number;
  /** Cuts every connection and refuses new ones. */
  cut(): void;
  /**
   * Closes every connection cleanly and from then on accepts each new one and closes it at once
   * (a FIN, no error message): what a TCP load balancer or pooler with no database behind it does.
   */
  shed(): void;
  /**
   * From now on, the first COMMIT the database confirms (its CommandComplete and the ReadyForQuery
   * after it) still reaches the client; at that moment nothing more goes to the database, and every
   * connection is then cut as by `cut()`. Whatever the client sends after its COMMIT fails.
   */
  cutAfterCommit(): void;
  /** A stalled database: from now on nothing is forwarded either way, and every connection, open or new, is held open without a word. */
  stall(): void;
  /** As cutAfterCommit, but at that moment the database stalls (as `stall()`) instead. */
  stallAfterCommit(): void;
  /** Forwards new connections again. */
  restore(): void;
  /** Connections accepted so far. */
  accepted(): number;
  close(): Promise<void>;
}

/** A TCP proxy to the PostgreSQL server that can cut every connection and refuse new ones, or shed them. */
function startProxy(target: URL): Promise<Proxy> {
  const sockets = new Set<Socket>();
  let mode: 'open' | 'cut' | 'shed' | 'stall' = 'open';
  let cutAfterCommit = false;
  let stallAfterCommit = false;
  const cutAll = (): void => {
    mode = 'cut';
    for (const s of sockets) s.destroy();
  };
  let accepted = 0;
  const server: Server = createServer((client) => {
    accepted += 1;
    if (mode === 'cut') {
      client.destroy();
      return;
    }
    if (mode === 'stall') {
      sockets.add(client);
      client.on('error', () => {});
      client.on('close', () => sockets.delete(client));
      return;
    }
    if (mode === 'shed') {
      client.on('error', () => {});
      // Read what the client sends (its startup message), or the socket never ends and closes.
      client.resume();
      client.end();
      return;
    }
    const upstream = connect(Number(target.port || 5432), target.hostname);
    for (const [s, other] of [
      [client, upstream],
      [upstream, client],
    ] as const) {
      sockets.add(s);
      s.on('error', () => other.destroy());
      s.on('close', () => {
        sockets.delete(s);
        other.destroy();
      });
    }
    client.on('data', (c: Buffer) => {
      if (mode === 'open') upstream.write(c);
    });
    // The server's messages (a type byte, then a length that counts itself), scanned for a COMMIT's
    // CommandComplete ('C', tag "COMMIT") and the ReadyForQuery ('Z') that follows it.
    let held = Buffer.alloc(0);
    let commitTag = false;
    upstream.on('data', (c: Buffer) => {
      let confirmed = false;
      held = Buffer.concat([held, c]);
      while (held.length >= 5 && held.length >= 1 + held.readUInt32BE(1)) {
        const type = String.fromCharCode(held[0]!);
        const end = 1 + held.readUInt32BE(1);
        if (type === 'C') commitTag = held.subarray(5, end - 1).toString() === 'COMMIT';
        else if (type === 'Z') {
          confirmed ||= commitTag;
          commitTag = false;
        }
        held = held.subarray(end);
      }
      if (confirmed && cutAfterCommit && mode === 'open') {
        cutAfterCommit = false;
        mode = 'cut';
        client.write(c, cutAll);
      } else if (confirmed && stallAfterCommit && mode === 'open') {
        stallAfterCommit = false;
        mode = 'stall';
        client.write(c);
      } else if (mode === 'open') client.write(c);
    });
  });
  return new Promise((done) => {
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      done({
        port: typeof address === 'object' && address !== null ? address.port : 0,
        cut: cutAll,
        cutAfterCommit() {
          cutAfterCommit = true;
        },
        stall() {
          mode = 'stall';
        },
        stallAfterCommit() {
          stallAfterCommit = true;
        },
        shed() {
          mode = 'shed';
          for (const s of sockets) s.end();
        },
        restore() {
          mode = 'open';
          cutAfterCommit = false;
          stallAfterCommit = false;
        },
        accepted: () => accepted,
        close: () =>
          new Promise<void>((closed) => {
            for (const s of sockets) s.destroy();
            server.close(() => closed());
          }),
      });
    });
  });
}

describe.skipIf(!process.env.TEST_DATABASE_URL)('faults on PostgreSQL with real server processes', () => {
  let database: TestDatabase;
  let a: RunningServer;
  let b: RunningServer;
  const keysDir = tempDir('warrant-faults-keys-');

  beforeAll(async () => {
    database = await openTestDatabase('postgres');
    // These two race for budgets: the point is exact counts, so a generous deadline keeps a loaded
    // machine from turning some of the 300 into 503s (database-faults.test.ts tests the deadline).
    const env = { DATABASE_URL: database.url!, WARRANT_DEADLINE_MS: '20000' };
    a = await startServer({ env, keysDir });
    b = await startServer({ env, keysDir, apiKey: a.apiKey });
  }, 90_000);

  afterAll(async () => {
    await cleanupServers();
    await database?.close();
  });

  test.each<{ name: string; predicate: Record<string, number>; limit: number; field: string }>([
    { name: 'budget', predicate: { budget: 50 }, limit: 50, field: 'spent' },
    { name: 'calls', predicate: { max_calls: 40 }, limit: 40, field: 'calls' },
  ])('two instances, 300 concurrent approvals over a three-level chain: exactly $limit grants ($name)', async ({ name, predicate, limit, field }) => {
    const caps = await chain(a, name, predicate);
    const answers = await Promise.all(Array.from({ length: 300 }, (_, i) => [a, b][i % 2]!.call('POST', '/v1/approve', approveBody(caps[i % 3]!, name))));
    expect(answers.every((r) => r.status === 200)).toBe(true);
    const granted = answers.filter((r) => r.body.decision === 'grant').map((r) => r.body.audit_id as string);
    expect(granted).toHaveLength(limit);
    expect(new Set(answers.filter((r) => r.body.decision === 'deny').map((r) => r.body.reason.code))).toEqual(
      new Set([name === 'budget' ? 'budget_exhausted' : 'calls_exhausted']),
    );
    const logged = grantsOf(
      await auditLog(b),
      caps.map((c) => c.id),
    ).map((e) => e.id as string);
    expect(logged.sort()).toEqual([...granted].sort());
    expect((await a.call('GET', `/v1/capabilities/${caps[0]!.id}`)).body[field]).toBe(limit);
  });

  test('a revoke on instance A denies the very next approve on instance B', async () => {
    const caps = await chain(a, 'revoke', { budget: 100 });
    // B has verified (and cached) the token before the revoke.
    expect((await b.call('POST', '/v1/approve', approveBody(caps[2]!, 'revoke'))).body.decision).toBe('grant');
    const r = await a.call('POST', '/v1/revoke', { capability_id: caps[1]!.id });
    expect(r.body.revoked.sort()).toEqual([caps[1]!.id, caps[2]!.id].sort());
    const next = await b.call('POST', '/v1/approve', approveBody(caps[2]!, 'revoke'));
    expect([next.body.decision, next.body.reason?.code]).toEqual(['deny', 'revoked']);
  });

  test('one call_id sent 20 times at once across both instances charges once', async () => {
    const caps = await chain(a, 'idem', { budget: 100 });
    const body = approveBody(caps[2]!, 'idem', { call_id: 'same-call' });
    const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => [a, b][i % 2]!.call('POST', '/v1/approve', body)));
    const decided = answers.filter((r) => r.status !== 409);
    for (const r of answers.filter((x) => x.status === 409)) expect(r.body.error.code).toBe('in_flight');
    expect(decided.length).toBeGreaterThan(0);
    expect(decided.every((r) => r.status === 200 && r.body.decision === 'grant')).toBe(true);
    expect(new Set(decided.map((r) => r.body.audit_id)).size).toBe(1);
    expect(grantsOf(await auditLog(a), [caps[2]!.id])).toHaveLength(1);
    for (const cap of caps) expect((await b.call('GET', `/v1/capabilities/${cap.id}`)).body).toMatchObject({ spent: 1, calls: 1 });
  });

  test('kill -9 under load: every grant a client saw is audited, and charges equal audit rows', async () => {
    const caps = await chain(a, 'crash', { budget: 1_000_000 });
    const victim = await startServer({ env: { DATABASE_URL: database.url! }, keysDir, apiKey: a.apiKey });
    const seen: string[] = [];
    let failures = 0;
    let running = true;
    const worker = async (w: number): Promise<void> => {
      while (running) {
        try {
          const r = await victim.call('POST', '/v1/approve', approveBody(caps[w % 3]!, 'crash'));
          if (r.status === 200 && r.body.decision === 'grant') seen.push(r.body.audit_id);
        } catch {
          failures += 1;
          return;
        }
      }
    };
    const workers = Promise.all(Array.from({ length: 40 }, (_, w) => worker(w)));
    while (seen.length < 200) await sleep(20);
    await victim.stop('SIGKILL');
    running = false;
    await workers;
    expect(failures).toBeGreaterThan(0); // the kill did land mid-load

    const after = await startServer({ env: { DATABASE_URL: database.url! }, keysDir, apiKey: a.apiKey });
    const log = await auditLog(after);
    const ids = new Set(log.map((e) => e.id));
    expect(seen.filter((id) => !ids.has(id))).toEqual([]);
    const grants = grantsOf(
      log,
      caps.map((c) => c.id),
    );
    expect(grants.length).toBeGreaterThanOrEqual(seen.length);
    const root = (await after.call('GET', `/v1/capabilities/${caps[0]!.id}`)).body;
    expect([root.spent, root.calls]).toEqual([grants.length, grants.length]);
    await expectVerified(after);
    await after.stop();
  }, 60_000);

  test('a database outage fails closed with 503 and recovers without a restart', async () => {
    const proxy = await startProxy(new URL(database.url!));
    try {
      const server = await startServer({ env: { DATABASE_URL: through(proxy, database.url!) }, keysDir, apiKey: a.apiKey });
      const caps = await chain(server, 'outage', { budget: 1_000_000 });
      const { answers, stop } = approving(server, caps, 'outage', 20);
      await sleep(500);
      proxy.cut();
      await sleep(300);
      const during = answers.length;
      expect((await server.call('GET', '/readyz', undefined, { key: null })).status).toBe(503);
      await sleep(1700);
      expect((await server.call('GET', '/readyz', undefined, { key: null })).status).toBe(503);
      const outage = answers.slice(during);
      proxy.restore();
      await readyAgain(server);
      const recovered = answers.length;
      await grantFrom(answers, recovered);
      await stop();

      expect(outage.length).toBeGreaterThan(0);
      expect(outage.some((r) => r.status === 503)).toBe(true);
      expect(outage.filter((r) => r.status === 200 && r.body.decision === 'grant')).toEqual([]);
      expect(answers.slice(recovered).some((r) => r.body?.decision === 'grant')).toBe(true);
      expect(answers.filter((r) => r.status !== 200 && (r.status !== 503 || r.body.error?.code !== 'unavailable'))).toEqual([]);
      const log = await auditLog(server);
      expect(unaudited(log, answers)).toEqual([]);
      const grants = grantsOf(
        log,
        caps.map((c) => c.id),
      );
      expect((await server.call('GET', `/v1/capabilities/${caps[0]!.id}`)).body.spent).toBe(grants.length);
      await expectVerified(server);
    } finally {
      await proxy.close();
    }
  }, 60_000);

  test('a proxy that closes every connection it accepts: 503 within the deadline, reconnects spaced out, recovery', async () => {
    const proxy = await startProxy(new URL(database.url!));
    try {
      const env = { DATABASE_URL: through(proxy, database.url!), WARRANT_DEADLINE_MS: '1000' };
      const server = await startServer({ env, keysDir, apiKey: a.apiKey });
      const caps = await chain(server, 'shed', { budget: 1_000_000 });
      const { answers, stop } = approving(server, caps, 'shed', 10);
      await sleep(300);
      proxy.shed();
      await sleep(300);
      const from = answers.length;
      const attempts = proxy.accepted();
      await sleep(3000);
      const shedding = answers.slice(from);
      const reconnects = proxy.accepted() - attempts;
      proxy.restore();
      const restored = answers.length;
      await grantFrom(answers, restored);
      await stop();

      expect(shedding.length).toBeGreaterThan(0);
      expect(shedding.filter((r) => r.status !== 503 || r.body.error?.code !== 'unavailable')).toEqual([]);
      expect(shedding.filter((r) => r.ms > 2500)).toEqual([]);
      // Ten pooled connections, each waiting 50–150 ms between attempts: at most ~600 in 3 s. Unpatched,
      // postgres.js made over 4,000 (porsager/postgres#1193) and Warrant did not recover.
      expect(reconnects).toBeLessThan(800);
      expect(answers.slice(restored).some((r) => r.body?.decision === 'grant')).toBe(true);
      expect(unaudited(await auditLog(server), answers)).toEqual([]);
      await expectVerified(server);
    } finally {
      await proxy.close();
    }
  }, 60_000);

  /**
   * A server reaching the database through `proxy`, with no checkpoints (so the COMMIT the proxy
   * watches for is a request's own) and a 2 s deadline, and a driver's and an approver's key of its tenant.
   */
  async function behind(proxy: Proxy): Promise<{ server: RunningServer; driver: string; approver: string }> {
    const env = { DATABASE_URL: through(proxy, database.url!), WARRANT_CHECKPOINT_INTERVAL_S: '0', WARRANT_DEADLINE_MS: '2000' };
    const server = await startServer({ env, keysDir, apiKey: a.apiKey });
    const keyOf = async (role: string): Promise<string> => (await server.call('POST', '/v1/api-keys', { name: role, roles: [role] })).body.api_key as string;
    return { server, driver: await keyOf('driver'), approver: await keyOf('approver') };
  }

  test('a read-back that fails after its write committed answers outcome unknown, not not_committed', async () => {
    const proxy = await startProxy(new URL(database.url!));
    try {
      const { server, driver, approver } = await behind(proxy);
      const outcomeOf = (r: { status: number; body: Body }): unknown => [r.status, r.body.error?.code, r.body.error?.outcome];
      const recovered = async (): Promise<void> => {
        proxy.restore();
        await readyAgain(server);
      };

      // A tool's registration commits, then reading the new version back fails.
      proxy.cutAfterCommit();
      expect(outcomeOf(await server.call('PUT', '/v1/tools/shell', SHELL))).toEqual([503, 'unavailable', 'unknown']);
      await recovered();
      expect((await server.call('GET', '/v1/tools/shell')).body.version).toBe(1);
      expect((await server.call('PUT', '/v1/tools/shell', SHELL)).status).toBe(200);

      // An approval's resolution commits, then reading the approval back fails.
      const { path, call } = await pendingCall(server, driver, 'read-back');
      proxy.cutAfterCommit();
      expect(outcomeOf(await server.call('POST', path, { decision: 'approve' }, { key: approver }))).toEqual([503, 'unavailable', 'unknown']);
      await recovered();
      expect((await server.call('GET', path, undefined, { key: approver })).body.state).toBe('approved');
      expect((await server.call('POST', '/v1/approve', call, { key: driver })).body.decision).toBe('grant');
      await expectVerified(server);
    } finally {
      await proxy.close();
    }
  }, 60_000);

  test('a database that stalls around a registration or a resolution: 503 by the deadline, never a hang', async () => {
    const proxy = await startProxy(new URL(database.url!));
    try {
      const { server, driver, approver } = await behind(proxy);
      /** The answer's status, code and outcome, or `hung` when there was none 8 s on (the deadline is 2 s). */
      const answer = async (method: string, path: string, body: unknown, key: string): Promise<unknown[]> => {
        try {
          const res = await fetch(server.url + path, {
            method,
            headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
            body: JSON.stringify(body),
            signal: AbortSignal.timeout(8000),
          });
          const b = await res.json();
          return [res.status, b.error?.code, b.error?.outcome];
        } catch {
          return ['hung'];
        }
      };
      // The registration commits; then the database stalls before it is read back.
      proxy.stallAfterCommit();
      expect(await answer('PUT', '/v1/tools/shell', SHELL, a.apiKey)).toEqual([503, 'unavailable', 'unknown']);
      proxy.restore();
      await readyAgain(server);

      const { path } = await pendingCall(server, driver, 'stall');
      expect((await server.call('GET', path, undefined, { key: approver })).status).toBe(200); // the approver's key is cached
      // The database stalls before the approval is even read: nothing was decided.
      proxy.stall();
      expect(await answer('POST', path, { decision: 'approve' }, approver)).toEqual([503, 'unavailable', 'not_committed']);
      proxy.restore();
    } finally {
      await proxy.close();
    }
  }, 60_000);
});
