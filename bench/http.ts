/**
 * `npm run bench:http`: a bare Hono endpoint and Warrant's POST /v1/approve, each in its own
 * process, loaded in turn (interleaved rounds) with autocannon at 50 connections. Warrant runs on
 * PostgreSQL when DATABASE_URL is set (on a database of its own, created there and dropped after),
 * else on embedded PGlite. The approvals are realistic: a few hundred tokens (roots and children,
 * most with budgets), a mix of grants and denials.
 * Prints req/s and p50/p99 per target and, last, `approve/bare ratio: X.XX`.
 */
import { availableParallelism } from 'node:os';
import postgres from 'postgres';
import { fmtSplit, type CpuSplit } from './cpu.js';
import { load as loadRound, population, privateDatabase, startServers, type Figures, type Server } from './harness.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50);
const ROOTS = Number(process.env.BENCH_ROOTS ?? 200);
const databaseUrl = process.env.DATABASE_URL?.trim() || undefined;
/** Warrant processes behind the port (start:cluster); more than one needs DATABASE_URL. */
const PROCESSES = Number(process.env.BENCH_PROCESSES ?? 1);

const load = (server: Server, key: string, bodies: readonly string[], seconds: number): Promise<Figures> =>
  loadRound(server, key, bodies, { seconds, connections: CONNECTIONS });

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
  // A database of its own per run, dropped after: a shared one grows run after run, and its size
  // moves the figures (bench/RESULTS.md).
  const db = databaseUrl === undefined ? null : await privateDatabase(databaseUrl, 'http');
  const { bare, warrant, key, close } = await startServers({ databaseUrl: db?.url, processes: PROCESSES });
  try {
    console.log(
      `warrant on ${databaseUrl === undefined ? 'embedded PGlite' : 'PostgreSQL'}, ${PROCESSES} process(es); ${CONNECTIONS} connections, ${ROUNDS} rounds of ${SECONDS} s each`,
    );
    const bodies = await population(warrant.url, key, ROOTS);
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
      answered: rounds.reduce((a, x) => a + pick(x).answered, 0),
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
    await close();
    await db?.drop();
  }
}

await main();
