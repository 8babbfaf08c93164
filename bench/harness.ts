/**
 * What the HTTP benches share: starting the bare Hono endpoint and Warrant (PostgreSQL when a
 * database URL is given, else embedded PGlite) each in its own process, the token population and its
 * approve bodies, and an autocannon round against POST /v1/approve with the server's CPU split.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { request, type Agent } from 'node:http';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';
import postgres from 'postgres';
import { openDatabase } from '../src/node/db.js';
import { createTenant } from '../src/service/tenants.js';
import { Store } from '../src/store/store.js';
import { sample, split, type CpuSplit } from './cpu.js';

export interface Server {
  readonly url: string;
  readonly child: ChildProcess;
}

/** Starts `script` (relative to `cwd`, by default this checkout) and resolves once it listens. */
export function start(script: string, env: Record<string, string>, cwd?: string): Promise<Server> {
  const flags =
    (script.includes('main') || script.includes('cluster')) && process.env.BENCH_PROFILE ? ['--cpu-prof', '--cpu-prof-dir', process.env.BENCH_PROFILE] : [];
  // `BENCH_NODE_FLAGS`: Node flags for every server started (V8 flags NODE_OPTIONS refuses, e.g. --single-threaded-gc).
  const nodeFlags = (process.env.BENCH_NODE_FLAGS ?? '').split(' ').filter((f) => f !== '');
  const child = spawn(process.execPath, [...nodeFlags, ...flags, '--import', 'tsx', script], {
    ...(cwd === undefined ? {} : { cwd }),
    env: { ...process.env, PORT: '0', HOST: '127.0.0.1', ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return new Promise((resolve, reject) => {
    let buf = '';
    const onData = (d: Buffer): void => {
      buf += d.toString();
      const m = /listening on (http:\/\/[^"\s]+)/.exec(buf);
      if (m === null) return;
      // From here on the server's log (a line per request) is drained unread.
      child.stdout.off('data', onData);
      child.stdout.resume();
      resolve({ url: m[1] as string, child });
    };
    child.stdout.on('data', onData);
    child.on('exit', (code) => reject(new Error(`${script} exited with ${code}`)));
  });
}

export async function stop(s: Server): Promise<void> {
  const exited = new Promise((r) => s.child.once('exit', r));
  s.child.kill('SIGTERM');
  await exited;
}

export interface Servers {
  readonly bare: Server;
  readonly warrant: Server;
  /** An API key of the tenant the bench mints and approves for. */
  readonly key: string;
  /** Stops both servers and removes their temporary files. */
  readonly close: () => Promise<void>;
}

/**
 * Starts the bare endpoint and Warrant. With a database URL, Warrant's schema is migrated there and
 * the bench gets a tenant of its own (its data is kept apart from others' by that tenant); without
 * one, Warrant runs on PGlite in a temporary directory and the bench uses its default API key.
 */
export async function startServers(options: { databaseUrl: string | undefined; processes: number }): Promise<Servers> {
  const { databaseUrl, processes } = options;
  if (processes > 1 && databaseUrl === undefined) throw new Error('BENCH_PROCESSES > 1 needs DATABASE_URL');
  const dir = mkdtempSync(join(tmpdir(), 'warrant-bench-'));
  const env: Record<string, string> = { WARRANT_DATA_DIR: join(dir, 'data'), WARRANT_KEYS_DIR: join(dir, 'keys') };
  let key = '';
  if (databaseUrl !== undefined) {
    const db = await openDatabase({ databaseUrl });
    await db.migrate();
    key = (await createTenant(new Store(db.db), `bench-${Date.now()}`, new Date())).apiKey;
    await db.close();
    env.DATABASE_URL = databaseUrl;
  }
  const bare = await start('bench/bare-server.ts', {});
  const warrant = await start(processes > 1 ? 'src/node/cluster.ts' : 'src/node/main.ts', { ...env, WARRANT_PROCESSES: String(processes) });
  await new Promise((r) => setTimeout(r, 1000)); // the other workers of a cluster finish starting
  if (databaseUrl === undefined) key = readFileSync(join(env.WARRANT_DATA_DIR as string, 'default-api-key'), 'utf8').trim();
  return {
    bare,
    warrant,
    key,
    close: async () => {
      await stop(bare);
      await stop(warrant);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function post(url: string, key: string, path: string, body: unknown): Promise<Record<string, unknown>> {
  const res = await fetch(`${url}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const json = (await res.json()) as Record<string, unknown>;
  if (res.status >= 300) throw new Error(`${path} answered ${res.status}: ${JSON.stringify(json)}`);
  return json;
}

/**
 * Mints `roots` roots (half of them approved through a child) and returns the approve bodies to
 * cycle through: per root a grant (read), a grant (write), a deny `object_outside` (a `..` escape)
 * and a deny `right_missing`; one root in ten has a small budget and turns to `budget_exhausted`.
 */
export async function population(url: string, key: string, roots: number): Promise<string[]> {
  const bodies: string[] = [];
  for (let i = 0; i < roots; i += 1) {
    // One root in ten has a small budget, so it turns to budget_exhausted denials under load.
    const budget = i % 10 === 0 ? 5 : 1_000_000;
    const root = await post(url, key, '/v1/capabilities', {
      trajectory_id: `bench-${i}`,
      rights: ['read', 'write', 'execute'],
      objects: [
        { kind: 'path', prefix: `/workspace/bench-${i}` },
        { kind: 'url', prefix: 'https://api.example.com/v1/' },
      ],
      predicate: { budget, max_cost: 1, max_calls: 1_000_000_000, max_depth: 2, args: [{ kind: 'max', arg: 'timeout_ms', value: 30000 }] },
      ttl_s: 86_400,
    });
    let token = root.token as string;
    if (i % 2 === 1) {
      const child = await post(url, key, '/v1/attenuate', {
        parent_token: token,
        rights: ['read', 'write'],
        objects: [{ kind: 'path', prefix: `/workspace/bench-${i}/sub` }],
        predicate: { budget: budget / 2, max_cost: 0.5, max_calls: 1_000_000, max_depth: 1, args: [{ kind: 'max', arg: 'timeout_ms', value: 10000 }] },
        trajectory_id: `bench-${i}.sub`,
      });
      token = child.token as string;
    }
    const base = i % 2 === 1 ? `/workspace/bench-${i}/sub` : `/workspace/bench-${i}`;
    const grant = { token, op: 'read', target: { kind: 'path', path: `${base}/src/main.ts` }, cost: 0.01, args: { timeout_ms: 5000 } };
    bodies.push(JSON.stringify(grant), JSON.stringify({ ...grant, op: 'write', cost: 0.25 }));
    bodies.push(JSON.stringify({ ...grant, target: { kind: 'path', path: `${base}/../../etc/passwd` } }));
    bodies.push(JSON.stringify({ ...grant, op: 'connect' }));
  }
  return bodies;
}

export interface Figures {
  readonly rps: number;
  readonly p50: number;
  readonly p99: number;
  readonly non2xx: number;
  readonly errors: number;
  /** Answers received in the round. */
  readonly answered: number;
  /** Where the round's CPU went (Linux only). */
  readonly cpu: CpuSplit | null;
}

/** One closed-loop autocannon round of POST /v1/approve, cycling through `bodies`. */
export async function load(server: Server, key: string, bodies: readonly string[], options: { seconds: number; connections: number }): Promise<Figures> {
  let next = 0;
  const before = sample(server.child.pid as number);
  const result = await autocannon({
    url: server.url,
    connections: options.connections,
    duration: options.seconds,
    requests: [
      {
        method: 'POST',
        path: '/v1/approve',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        setupRequest: (req) => {
          next = (next + 1) % bodies.length;
          return { ...req, body: bodies[next] };
        },
      },
    ],
  });
  const after = sample(server.child.pid as number);
  const cpu = before !== null && after !== null ? split(before, after, result.requests.total) : null;
  return {
    rps: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    non2xx: result.non2xx,
    errors: result.errors,
    answered: result.requests.total,
    cpu,
  };
}

/** POSTs one approve body; resolves (rejects on a socket error or no answer within `timeoutMs`) to the answer's status once its body has been read. */
export function approve(agent: Agent, url: URL, key: string, body: Buffer, timeoutMs = 10_000): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        agent,
        host: url.hostname,
        port: url.port,
        path: '/v1/approve',
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'content-length': body.length },
        timeout: timeoutMs,
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end(body);
  });
}

/**
 * `BENCH_FILL`: the database at `url` grows by about `count` capabilities, copies of those already in
 * it under new ids (roots and children alike, each copied tree with its audit head), and its
 * statistics are refreshed, so the tables are the size of a tenant that has run for a while. The
 * population's own 200 trees keep the planner in the small-table regime, where a join with the
 * batch's rows may scan a table whole (bench/RESULTS.md, "Rows found by key").
 */
export async function fill(url: string, count: number): Promise<void> {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    const [row] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM capabilities`;
    const copies = Math.ceil(count / Math.max(1, row?.n ?? 1));
    await sql`INSERT INTO capabilities (id, tenant_id, trajectory_id, parent_id, ancestors, depth, rights, objects, predicate, budget, max_calls, spent, calls,
        kid, issued_at, expires_at, revoked_at, revoke_reason)
      SELECT 'fill' || g || '_' || c.id, c.tenant_id, c.trajectory_id, 'fill' || g || '_' || c.parent_id,
        ARRAY(SELECT 'fill' || g || '_' || a FROM unnest(c.ancestors) WITH ORDINALITY AS x(a, i) ORDER BY i), c.depth, c.rights, c.objects, c.predicate,
        c.budget, c.max_calls, c.spent, c.calls, c.kid, c.issued_at, c.expires_at, c.revoked_at, c.revoke_reason
      FROM capabilities AS c, generate_series(1, ${copies}) AS g`;
    await sql`INSERT INTO audit_heads (tenant_id, tree_id, seq, hash, last_id)
      SELECT tenant_id, 'fill' || g || '_' || tree_id, seq, hash, last_id FROM audit_heads, generate_series(1, ${copies}) AS g WHERE tree_id <> ''`;
    await sql`ANALYZE`;
  } finally {
    await sql.end({ timeout: 5 });
  }
}

/** A database of the bench's own on the server of `url`, so its statistics count only Warrant's work. */
export async function privateDatabase(url: string, bench: string): Promise<{ url: string; name: string; admin: postgres.Sql; drop: () => Promise<void> }> {
  const admin = postgres(url, { max: 1, onnotice: () => {} });
  const name = `warrant_bench_${bench}_${process.pid}_${Date.now()}`;
  await admin.unsafe(`CREATE DATABASE ${name}`);
  const own = new URL(url);
  own.pathname = `/${name}`;
  return {
    url: own.toString(),
    name,
    admin,
    drop: async () => {
      await admin.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await admin.end({ timeout: 5 });
    },
  };
}

/**
 * `rate` requests a second for `seconds` (open loop): each is sent at its scheduled time whether or
 * not earlier ones were answered, and its latency is measured from that time, not from the actual
 * send, so a server that falls behind shows its queueing instead of slowing the generator down
 * (coordinated omission). `lags`: how late each was sent (timers fire to the millisecond).
 */
export async function fixedRate(
  send: () => Promise<number>,
  rate: number,
  seconds: number,
): Promise<{ latencies: Float64Array; lags: Float64Array; errors: number; seconds: number }> {
  const total = Math.round(rate * seconds);
  const interval = 1000 / rate;
  const latencies = new Float64Array(total);
  const lags = new Float64Array(total);
  let errors = 0;
  let pending = total;
  const start = performance.now() + 5;
  let last = start;
  await new Promise<void>((resolve) => {
    const fire = (i: number): void => {
      const scheduled = start + i * interval;
      lags[i] = performance.now() - scheduled;
      void send().then((status) => {
        last = performance.now();
        latencies[i] = last - scheduled;
        if (status < 200 || status >= 300) errors += 1;
        pending -= 1;
        if (pending === 0) resolve();
      });
    };
    let i = 0;
    const tick = (): void => {
      const now = performance.now();
      for (; i < total && start + i * interval <= now; i += 1) fire(i);
      if (i < total) setTimeout(tick, start + i * interval - performance.now());
    };
    setTimeout(tick, start - performance.now());
  });
  return { latencies, lags, errors, seconds: (last - start) / 1000 };
}

/** The `q` quantile of sorted latencies (nearest rank); NaN when there are none. */
export function percentile(sorted: Float64Array, q: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)] as number;
}
