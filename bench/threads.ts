/**
 * `npm run bench:threads` (issue 15): the CPU of one approval, per thread of the server, beside the
 * bare endpoint's per request. Both servers start as in the other HTTP benches (harness.ts); each gets
 * `BENCH_WARMUP` sequential requests, then `BENCH_SEQUENTIAL` more on one keep-alive socket, timed,
 * with every thread's CPU read from /proc/PID/task around them (Linux only). The main thread runs
 * the JavaScript; the others are V8's (garbage collector, compiler) and libuv's.
 *
 * With DATABASE_URL, Warrant runs on a database of its own created on that server and dropped after.
 */
import { Agent } from 'node:http';
import { readdirSync, readFileSync } from 'node:fs';
import { approve, percentile, population, privateDatabase, startServers, type Server } from './harness.js';

const SEQUENTIAL = Number(process.env.BENCH_SEQUENTIAL ?? 3000);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 1000);
const databaseUrl = process.env.DATABASE_URL?.trim() || undefined;
/** Linux reports CPU in ticks of 1/100 s. */
const TICK_US = 10_000;

/** CPU (µs) of each thread of `pid`: `main` for the process's own thread, else `name#tid`. */
function threads(pid: number): Map<string, number> {
  const cpu = new Map<string, number>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      cpu.set(tid === String(pid) ? 'main' : `${name}#${tid}`, (Number(fields[11]) + Number(fields[12])) * TICK_US);
    } catch {
      // the thread ended while the list was read
    }
  }
  return cpu;
}

async function measure(target: string, server: Server, key: string, bodies: readonly Buffer[]): Promise<void> {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  const url = new URL(server.url);
  let next = 0;
  const send = (): Promise<number> => approve(agent, url, key, bodies[(next = (next + 1) % bodies.length)] as Buffer);
  for (let i = 0; i < WARMUP; i += 1) await send();
  const pid = server.child.pid as number;
  const before = threads(pid);
  const latencies = new Float64Array(SEQUENTIAL);
  let errors = 0;
  const began = performance.now();
  for (let i = 0; i < SEQUENTIAL; i += 1) {
    const t = performance.now();
    const status = await send();
    latencies[i] = performance.now() - t;
    if (status < 200 || status >= 300) errors += 1;
  }
  const seconds = (performance.now() - began) / 1000;
  const after = threads(pid);
  agent.destroy();
  latencies.sort();
  const at = (q: number): string => percentile(latencies, q).toFixed(2);
  const perThread = [...after].map(([name, us]) => [name, (us - (before.get(name) ?? 0)) / SEQUENTIAL] as const);
  const total = perThread.reduce((sum, [, us]) => sum + us, 0);
  const others = perThread.filter(([name]) => name !== 'main').reduce((sum, [, us]) => sum + us, 0);
  const main = perThread.find(([name]) => name === 'main')?.[1] ?? 0;
  console.log(
    `${target.padEnd(8)} one at a time (${SEQUENTIAL})  ${(SEQUENTIAL / seconds).toFixed(0)}/s  p50 ${at(0.5)}  p90 ${at(0.9)}  p99 ${at(0.99)} ms  errors ${errors}` +
      `   CPU µs/request: main thread ${main.toFixed(0)}, other threads ${others.toFixed(0)}, all ${total.toFixed(0)}`,
  );
  for (const [name, us] of perThread) if (name !== 'main' && us >= 1) console.log(`${''.padEnd(10)}${name.padEnd(24)} ${us.toFixed(0)} µs`);
}

async function main(): Promise<void> {
  const db = databaseUrl === undefined ? null : await privateDatabase(databaseUrl, 'threads');
  const servers = await startServers({ databaseUrl: db?.url, processes: 1 });
  try {
    const bodies = (await population(servers.warrant.url, servers.key, 200)).map((t) => Buffer.from(t));
    console.log(`warrant on ${db === null ? 'embedded PGlite' : `PostgreSQL (database ${db.name})`}; ${WARMUP} requests to warm up each server`);
    await measure('bare', servers.bare, servers.key, bodies);
    await measure('approve', servers.warrant, servers.key, bodies);
  } finally {
    await servers.close();
    await db?.drop();
  }
}

await main();
