/**
 * `npm run bench:http`: a bare Hono endpoint and Warrant's POST /v1/approve, each in its own
 * process, loaded in turn (interleaved rounds) with autocannon at 50 connections. Warrant runs on
 * PostgreSQL when DATABASE_URL is set, else on embedded PGlite. The approvals are realistic: a few
 * hundred tokens (roots and children, most with budgets), a mix of grants and denials.
 * Prints req/s and p50/p99 per target and, last, `approve/bare ratio: X.XX`.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';
import postgres from 'postgres';
import { openDatabase } from '../src/node/db.js';
import { createTenant } from '../src/service/tenants.js';
import { Store } from '../src/store/store.js';
import { fmtSplit, sample, split, type CpuSplit } from './cpu.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50);
const ROOTS = Number(process.env.BENCH_ROOTS ?? 200);
const databaseUrl = process.env.DATABASE_URL?.trim() || undefined;
/** Warrant processes behind the port (start:cluster); more than one needs DATABASE_URL. */
const PROCESSES = Number(process.env.BENCH_PROCESSES ?? 1);

interface Server {
  readonly url: string;
  readonly child: ChildProcess;
}

function start(script: string, env: Record<string, string>): Promise<Server> {
  const flags =
    (script.includes('main') || script.includes('cluster')) && process.env.BENCH_PROFILE ? ['--cpu-prof', '--cpu-prof-dir', process.env.BENCH_PROFILE] : [];
  const child = spawn(process.execPath, [...flags, '--import', 'tsx', script], {
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

async function stop(s: Server): Promise<void> {
  const exited = new Promise((r) => s.child.once('exit', r));
  s.child.kill('SIGTERM');
  await exited;
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

/** Mints the token population and returns the approve bodies to cycle through. */
async function population(url: string, key: string): Promise<string[]> {
  const bodies: string[] = [];
  for (let i = 0; i < ROOTS; i += 1) {
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

interface Figures {
  readonly rps: number;
  readonly p50: number;
  readonly p99: number;
  readonly non2xx: number;
  readonly errors: number;
  /** Where the round's CPU went (Linux only). */
  readonly cpu: CpuSplit | null;
}

async function load(server: Server, key: string, bodies: readonly string[], seconds: number): Promise<Figures> {
  let next = 0;
  const url = server.url;
  const before = sample(server.child.pid as number);
  const result = await autocannon({
    url,
    connections: CONNECTIONS,
    duration: seconds,
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
  return { rps: result.requests.average, p50: result.latency.p50, p99: result.latency.p99, non2xx: result.non2xx, errors: result.errors, cpu };
}

function meanSplit(xs: readonly (CpuSplit | null)[]): CpuSplit | null {
  if (xs.some((x) => x === null) || xs.length === 0) return null;
  const m = (k: keyof CpuSplit): number => xs.reduce((a, x) => a + (x as CpuSplit)[k], 0) / xs.length;
  return { server: m('server'), database: m('database'), load: m('load'), machine: m('machine'), busy: m('busy') };
}

const fmt = (name: string, f: Figures): string =>
  `${name.padEnd(8)} ${f.rps.toFixed(0).padStart(7)} req/s   p50 ${String(Math.round(f.p50 * 10) / 10).padStart(4)} ms   p99 ${String(f.p99).padStart(4)} ms${f.non2xx + f.errors > 0 ? `   non-2xx ${f.non2xx} errors ${f.errors}` : ''}`;

/** Figures from the server's GET /metrics: its CPU seconds, its audit batches and their decisions. */
async function serverFigures(url: string): Promise<{ cpu: number; batches: number; decisions: number }> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const value = (name: string): number => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);
  return { cpu: value('process_cpu_seconds_total'), batches: value('warrant_audit_batch_size_count'), decisions: value('warrant_audit_batch_size_sum') };
}

/**
 * Samples, every 50 ms while `during` runs, how many of Warrant's connections (application_name
 * warrant-*) wait on a lock in PostgreSQL: how much its decisions queue on each other's locks.
 */
async function lockWaits<T>(
  url: string | undefined,
  during: Promise<T>,
): Promise<{ result: T; waiting: number; share: number } | { result: T; waiting: null; share: null }> {
  if (url === undefined) return { result: await during, waiting: null, share: null };
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  let done = false;
  let samples = 0;
  let waitingSum = 0;
  let withWait = 0;
  const sampler = (async () => {
    while (!done) {
      const [row] = await sql<
        { n: number }[]
      >`SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name LIKE 'warrant-%' AND wait_event_type = 'Lock'`;
      samples += 1;
      waitingSum += row?.n ?? 0;
      if ((row?.n ?? 0) > 0) withWait += 1;
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  try {
    const result = await during;
    return { result, waiting: waitingSum / Math.max(samples, 1), share: withWait / Math.max(samples, 1) };
  } finally {
    done = true;
    await sampler;
    await sql.end({ timeout: 5 });
  }
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'warrant-bench-'));
  const env: Record<string, string> = { WARRANT_DATA_DIR: join(dir, 'data'), WARRANT_KEYS_DIR: join(dir, 'keys') };
  let key: string;
  if (databaseUrl !== undefined) {
    const db = await openDatabase({ databaseUrl });
    await db.migrate();
    key = (await createTenant(new Store(db.db), `bench-${Date.now()}`, new Date())).apiKey;
    await db.close();
    env.DATABASE_URL = databaseUrl;
  } else key = '';
  const bare = await start('bench/bare-server.ts', {});
  if (PROCESSES > 1 && databaseUrl === undefined) throw new Error('BENCH_PROCESSES > 1 needs DATABASE_URL');
  const warrant = await start(PROCESSES > 1 ? 'src/node/cluster.ts' : 'src/node/main.ts', { ...env, WARRANT_PROCESSES: String(PROCESSES) });
  await new Promise((r) => setTimeout(r, 1000)); // the other workers of a cluster finish starting
  if (databaseUrl === undefined) key = readFileSync(join(env.WARRANT_DATA_DIR as string, 'default-api-key'), 'utf8').trim();
  try {
    console.log(
      `warrant on ${databaseUrl === undefined ? 'embedded PGlite' : 'PostgreSQL'}, ${PROCESSES} process(es); ${CONNECTIONS} connections, ${ROUNDS} rounds of ${SECONDS} s each`,
    );
    const bodies = await population(warrant.url, key);
    console.log(`${bodies.length} approve bodies over ${ROOTS} roots (half of them approved through a child)`);
    await load(bare, key, bodies, 2); // warm-up
    await load(warrant, key, bodies, 2);
    const rounds: { bare: Figures; warrant: Figures }[] = [];
    const served = { cpu: 0, batches: 0, decisions: 0 };
    for (let r = 0; r < ROUNDS; r += 1) {
      const b = await load(bare, key, bodies, SECONDS);
      const before = PROCESSES === 1 ? await serverFigures(warrant.url) : null;
      const sampled = await lockWaits(databaseUrl, load(warrant, key, bodies, SECONDS));
      const w = sampled.result;
      let extra = '';
      if (before !== null) {
        // With one process, every decision of the round is an approval of this load.
        const after = await serverFigures(warrant.url);
        const d = { cpu: after.cpu - before.cpu, batches: after.batches - before.batches, decisions: after.decisions - before.decisions };
        served.cpu += d.cpu;
        served.batches += d.batches;
        served.decisions += d.decisions;
        extra = `   server CPU ${((d.cpu / d.decisions) * 1e6).toFixed(0)} µs/approval, ${(d.decisions / d.batches).toFixed(1)} per batch`;
      }
      rounds.push({ bare: b, warrant: w });
      console.log(`round ${r + 1}\n  ${fmt('bare', b)}\n  ${fmt('approve', w)}${extra}`);
      if (sampled.share !== null) {
        const waits = `${(sampled.share * 100).toFixed(0)} % of samples had one waiting, ${sampled.waiting.toFixed(2)} waiting on average`;
        console.log(`  lock waits: Warrant's connections waiting on a PostgreSQL lock: ${waits}`);
      }
      if (b.cpu !== null && w.cpu !== null && PROCESSES === 1) console.log(`  bare    ${fmtSplit(b.cpu)}\n  approve ${fmtSplit(w.cpu)}`);
    }
    const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;
    const sum = (pick: (x: { bare: Figures; warrant: Figures }) => Figures): Figures => ({
      rps: mean(rounds.map((x) => pick(x).rps)),
      p50: mean(rounds.map((x) => pick(x).p50)),
      p99: Math.max(...rounds.map((x) => pick(x).p99)),
      non2xx: rounds.reduce((a, x) => a + pick(x).non2xx, 0),
      errors: rounds.reduce((a, x) => a + pick(x).errors, 0),
      cpu: meanSplit(rounds.map((x) => pick(x).cpu)),
    });
    const b = sum((x) => x.bare);
    const w = sum((x) => x.warrant);
    console.log(`mean of ${ROUNDS} rounds (p99: worst round)\n  ${fmt('bare', b)}\n  ${fmt('approve', w)}`);
    if (served.decisions > 0)
      console.log(
        `  server CPU ${((served.cpu / served.decisions) * 1e6).toFixed(0)} µs per approval, ${(served.decisions / served.batches).toFixed(1)} approvals per audit batch`,
      );
    if (w.cpu !== null && PROCESSES === 1) {
      // The CPU the target leaves the server: at half the bare rate, every core busy, less what the
      // database and the load generator spent per approval in these rounds.
      const cores = availableParallelism();
      const room = (cores * 1e6) / (b.rps / 2) - w.cpu.database - w.cpu.load;
      console.log(
        `  at ratio 0.5 (${(b.rps / 2).toFixed(0)} approvals/s) ${cores} fully busy cores leave ${room.toFixed(0)} µs per approval for the server after the database's ${w.cpu.database.toFixed(0)} µs and the load generator's ${w.cpu.load.toFixed(0)} µs; it spent ${w.cpu.server.toFixed(0)} µs (the bare server ${b.cpu?.server.toFixed(0)} µs per request)`,
      );
    }
    console.log(`approve/bare ratio: ${(w.rps / b.rps).toFixed(2)}`);
  } finally {
    await stop(bare);
    await stop(warrant);
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
