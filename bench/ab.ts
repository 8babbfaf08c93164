/**
 * `npm run bench:ab` (issue 15): this checkout's Warrant against another checkout's (BENCH_AB_OTHER, a
 * directory with its own node_modules, e.g. a `git worktree` of main), both running at once, each on
 * a database of its own, and measured in alternating rounds of sequential approvals: the machine's
 * speed drifts between runs by more than a small change gains (bench/RESULTS.md), so a change is
 * judged only against its baseline measured minutes apart, round after round, never run against run.
 *
 * Per round and checkout: p50/p90 of one approval at a time on one keep-alive socket, the server's
 * CPU (all threads) and its database backends' CPU per approval, read from /proc (Linux only); with
 * BENCH_RATE (approvals/s), also an open-loop round at that rate for BENCH_RATE_SECONDS over 50
 * connections (harness.ts `fixedRate`: latency from each request's scheduled time), p50/p99; with
 * BENCH_SATURATE_SECONDS, also a closed-loop autocannon round at 50 connections (issue 12's item 6:
 * approvals/s at saturation and the server's CPU per approval). The last lines give each figure's
 * median over the rounds. Needs DATABASE_URL (PostgreSQL).
 *
 * Each round line also gives how many database backends the side's pool had open: a pool rotating
 * over ten connections cost each transaction about twice the database CPU of one kept on a single
 * connection (bench/RESULTS.md, "One hot connection"). BENCH_BURST=1 opens each pool in full (40 audit
 * reads at once) before the rounds; BENCH_AB_SHARED=1 runs both servers on one database. BENCH_FILL=n
 * grows each database by ~n capabilities before the rounds (harness.ts `fill`). BENCH_ROOTS (default
 * 200) sets how many delegation trees the approvals spread over: with 2, one at a time, each approval
 * finds the rows it locks just written by the one before (one busy trajectory's calls).
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { Agent } from 'node:http';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { approve, fill, fixedRate, load, percentile, population, privateDatabase, start } from './harness.js';
import { openDatabase } from '../src/node/db.js';
import { createTenant } from '../src/service/tenants.js';
import { Store } from '../src/store/store.js';

const OTHER = process.env.BENCH_AB_OTHER?.trim();
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 6);
const ROOTS = Number(process.env.BENCH_ROOTS ?? 200);
const PER_ROUND = Number(process.env.BENCH_SEQUENTIAL ?? 1500);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 1000);
const RATE = Number(process.env.BENCH_RATE ?? 0);
const RATE_SECONDS = Number(process.env.BENCH_RATE_SECONDS ?? 3);
const databaseUrl = process.env.DATABASE_URL?.trim();
const SATURATE_SECONDS = Number(process.env.BENCH_SATURATE_SECONDS ?? 0);
/** BENCH_FILL=n: each database grows by ~n capabilities (copies, harness.ts `fill`) before the rounds. */
const FILL = Number(process.env.BENCH_FILL ?? 0);
const TICK_US = 10_000;

interface Side {
  readonly name: string;
  readonly url: URL;
  readonly child: ChildProcess;
  readonly key: string;
  readonly bodies: readonly Buffer[];
  readonly database: string;
  readonly admin: Awaited<ReturnType<typeof privateDatabase>>;
  readonly rounds: { p50: number; p90: number; server: number; postgres: number }[];
  readonly rated: { p50: number; p99: number; server: number; postgres: number }[];
  readonly saturated: { rps: number; server: number; postgres: number }[];
}

/** CPU (µs) of a process, all threads. */
function cpuOf(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) * TICK_US;
  } catch {
    return 0;
  }
}

async function backendsCpu(side: Side): Promise<number> {
  // A server's pool names its connections warrant-<pid>-<n> (src/node/db.ts), so two servers on one database are told apart.
  const rows = await side.admin.admin<{ pid: number }[]>`
    SELECT pid FROM pg_stat_activity WHERE datname = ${side.database} AND application_name LIKE ${`warrant-${side.child.pid}-%`}`;
  backends.set(side, rows.length);
  return rows.reduce((sum, r) => sum + cpuOf(r.pid), 0);
}

/** How many database backends each side had at its last CPU reading. */
const backends = new Map<Side, number>();

/** With BENCH_AB_SHARED=1 both servers use one database (each its own tenant), so they see the same tables. */
const SHARED = process.env.BENCH_AB_SHARED === '1';
let shared: Awaited<ReturnType<typeof privateDatabase>> | undefined;

async function startSide(name: string, dir: string): Promise<Side> {
  const admin = shared ?? (await privateDatabase(databaseUrl as string, `ab_${name}`));
  if (SHARED) shared = admin;
  const db = await openDatabase({ databaseUrl: admin.url });
  await db.migrate();
  const key = (await createTenant(new Store(db.db), `ab-${name}`, new Date())).apiKey;
  await db.close();
  const tmp = mkdtempSync(join(tmpdir(), 'warrant-ab-'));
  const server = await start('src/node/main.ts', { DATABASE_URL: admin.url, WARRANT_DATA_DIR: join(tmp, 'data'), WARRANT_KEYS_DIR: join(tmp, 'keys') }, dir);
  const { child, url } = server;
  child.once('exit', () => rmSync(tmp, { recursive: true, force: true }));
  const bodies = (await population(url, key, ROOTS)).map((b) => Buffer.from(b));
  return { name, url: new URL(url), child, key, bodies, database: admin.name, admin, rounds: [], rated: [], saturated: [] };
}

/**
 * BENCH_BURST=1: 40 audit reads at once after the warm-up, so each server's pool opens all its
 * connections, as any burst of a live server's traffic does, before the measured rounds.
 */
const BURST = process.env.BENCH_BURST === '1';

async function burst(side: Side): Promise<void> {
  const reads = await Promise.all(
    Array.from({ length: 40 }, () =>
      fetch(new URL('/v1/audit?limit=50', side.url), { headers: { authorization: `Bearer ${side.key}` } }).then((r) => r.status),
    ),
  );
  if (reads.some((s) => s !== 200)) throw new Error(`${side.name}: an audit read of the burst answered ${reads.find((s) => s !== 200)}`);
}

async function round(side: Side, count: number, record: boolean): Promise<void> {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  const latencies = new Float64Array(count);
  const pid = side.child.pid as number;
  const server0 = cpuOf(pid);
  const pg0 = await backendsCpu(side);
  for (let i = 0; i < count; i += 1) {
    const t = performance.now();
    const status = await approve(agent, side.url, side.key, side.bodies[i % side.bodies.length] as Buffer);
    latencies[i] = performance.now() - t;
    if (status < 200 || status >= 300) throw new Error(`${side.name}: approve answered ${status}`);
  }
  const server = (cpuOf(pid) - server0) / count;
  const postgres = ((await backendsCpu(side)) - pg0) / count;
  agent.destroy();
  latencies.sort();
  if (record) side.rounds.push({ p50: percentile(latencies, 0.5), p90: percentile(latencies, 0.9), server, postgres });
}

/** `RATE` approvals a second for `RATE_SECONDS`, open loop, over up to 50 connections. */
async function ratedRound(side: Side): Promise<void> {
  const agent = new Agent({ keepAlive: true, maxSockets: 50 });
  const pid = side.child.pid as number;
  const server0 = cpuOf(pid);
  const pg0 = await backendsCpu(side);
  let next = 0;
  const send = async (): Promise<number> => {
    next = (next + 1) % side.bodies.length;
    try {
      return await approve(agent, side.url, side.key, side.bodies[next] as Buffer);
    } catch {
      return 0;
    }
  };
  const { latencies, errors } = await fixedRate(send, RATE, RATE_SECONDS);
  const server = (cpuOf(pid) - server0) / latencies.length;
  const postgres = ((await backendsCpu(side)) - pg0) / latencies.length;
  agent.destroy();
  if (errors > 0) throw new Error(`${side.name}: ${errors} approvals failed at ${RATE}/s`);
  latencies.sort();
  side.rated.push({ p50: percentile(latencies, 0.5), p99: percentile(latencies, 0.99), server, postgres });
}

/** Closed loop at 50 connections for `SATURATE_SECONDS`: approvals/s and the server's CPU per approval. */
async function saturatedRound(side: Side): Promise<void> {
  const pg0 = await backendsCpu(side);
  const f = await load({ url: side.url.origin, child: side.child }, side.key, side.bodies.map(String), { seconds: SATURATE_SECONDS, connections: 50 });
  if (f.non2xx + f.errors > 0) throw new Error(`${side.name}: ${f.non2xx} non-2xx answers and ${f.errors} errors at saturation`);
  const approvals = f.rps * SATURATE_SECONDS;
  side.saturated.push({ rps: f.rps, server: f.cpu?.server ?? NaN, postgres: ((await backendsCpu(side)) - pg0) / approvals });
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 === 1 ? (s[s.length >> 1] as number) : ((s[s.length / 2 - 1] as number) + (s[s.length / 2] as number)) / 2;
};

async function main(): Promise<void> {
  if (OTHER === undefined || databaseUrl === undefined) throw new Error('bench:ab needs BENCH_AB_OTHER (a checkout) and DATABASE_URL');
  const sides = [await startSide('this', resolve('.')), await startSide('other', resolve(OTHER))];
  try {
    if (FILL > 0) for (const url of new Set(sides.map((s) => s.admin.url))) await fill(url, FILL);
    for (const side of sides) await round(side, WARMUP, false);
    if (BURST) for (const side of sides) await burst(side);
    console.log(`this = ${resolve('.')}, other = ${resolve(OTHER)}; ${ROUNDS} alternating rounds of ${PER_ROUND} sequential approvals each`);
    for (let r = 0; r < ROUNDS; r += 1) {
      for (const side of r % 2 === 0 ? sides : [...sides].reverse()) {
        await round(side, PER_ROUND, true);
        const x = side.rounds.at(-1) as Side['rounds'][number];
        console.log(
          `round ${r + 1} ${side.name.padEnd(5)}  p50 ${x.p50.toFixed(2)}  p90 ${x.p90.toFixed(2)} ms   CPU µs/approval server ${x.server.toFixed(0)}, postgres ${x.postgres.toFixed(0)} (${backends.get(side)} backends)`,
        );
        if (RATE > 0) {
          await ratedRound(side);
          const y = side.rated.at(-1) as Side['rated'][number];
          console.log(
            `round ${r + 1} ${side.name.padEnd(5)}  at ${RATE}/s  p50 ${y.p50.toFixed(2)}  p99 ${y.p99.toFixed(2)} ms   CPU µs/approval server ${y.server.toFixed(0)}, postgres ${y.postgres.toFixed(0)}`,
          );
        }
        if (SATURATE_SECONDS > 0) {
          await saturatedRound(side);
          const z = side.saturated.at(-1) as Side['saturated'][number];
          console.log(
            `round ${r + 1} ${side.name.padEnd(5)}  saturated  ${z.rps.toFixed(0)} approvals/s   CPU µs/approval server ${z.server.toFixed(0)}, postgres ${z.postgres.toFixed(0)}`,
          );
        }
      }
    }
    for (const side of sides) {
      const m = (k: 'p50' | 'p90' | 'server' | 'postgres'): number => median(side.rounds.map((x) => x[k]));
      console.log(
        `median ${side.name.padEnd(5)}  p50 ${m('p50').toFixed(2)}  p90 ${m('p90').toFixed(2)} ms   CPU µs/approval server ${m('server').toFixed(0)}, postgres ${m('postgres').toFixed(0)}`,
      );
      if (RATE > 0) {
        const n = (k: 'p50' | 'p99' | 'server' | 'postgres'): number => median(side.rated.map((x) => x[k]));
        console.log(
          `median ${side.name.padEnd(5)}  at ${RATE}/s  p50 ${n('p50').toFixed(2)}  p99 ${n('p99').toFixed(2)} ms   CPU µs/approval server ${n('server').toFixed(0)}, postgres ${n('postgres').toFixed(0)}`,
        );
      }
      if (SATURATE_SECONDS > 0) {
        const s = (k: 'rps' | 'server' | 'postgres'): number => median(side.saturated.map((x) => x[k]));
        console.log(
          `median ${side.name.padEnd(5)}  saturated  ${s('rps').toFixed(0)} approvals/s   CPU µs/approval server ${s('server').toFixed(0)}, postgres ${s('postgres').toFixed(0)}`,
        );
      }
    }
  } finally {
    for (const side of sides) {
      const exited = new Promise((r) => side.child.once('exit', r));
      side.child.kill('SIGTERM');
      await exited;
    }
    for (const admin of new Set(sides.map((side) => side.admin))) await admin.drop();
  }
}

await main();
