/**
 * `npm run bench:latency` (issue 15, "a decision in about a millisecond"): the latency of one
 * approval, beside the bare Hono endpoint's, each in its own process started as bench:http starts
 * them (harness.ts). Per target: a one-at-a-time round (one connection, sequential requests), then
 * open-loop rounds at fixed rates, then a short autocannon saturation round for CPU per request.
 *
 * The open-loop generator sends each request at its scheduled time whether or not earlier ones were
 * answered, and measures latency from that scheduled time (not from the actual send), so a server
 * that falls behind shows its queueing instead of slowing the generator down (coordinated omission).
 * Its own lateness (timers fire to the millisecond) is printed as "send lag" and is inside the figures.
 *
 * With DATABASE_URL, Warrant runs on a database of its own created on that server for the run and
 * dropped after it, so pg_stat_database's xact_commit counts only Warrant's transactions: the
 * commits per answered approval. Without it, Warrant runs on embedded PGlite.
 *
 * On PostgreSQL the run also times, one at a time from this process, an autocommit INSERT of an
 * audit-row-sized body into a table of that database: a round trip and one fsync'd commit, the
 * least any decision that is committed before it is answered waits for on top of the bare endpoint's
 * HTTP. Its p50 beside the bare endpoint's says, in the same run, where the one-at-a-time target
 * (approve p50 ≤ 2× bare p50) stands against that floor: unreachable whenever one commit alone
 * takes longer than the bare request.
 */
import { Agent } from 'node:http';
import postgres from 'postgres';
import { sample, split, type CpuSplit } from './cpu.js';
import { approve, fixedRate, load, percentile, population, privateDatabase, startServers, type Server } from './harness.js';

const SEQUENTIAL = Number(process.env.BENCH_SEQUENTIAL ?? 1000);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 6);
const RATES = (process.env.BENCH_RATES ?? '500,1000,2000').split(',').map(Number);
const SATURATION_SECONDS = Number(process.env.BENCH_SATURATION_SECONDS ?? 4);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50);
const ROOTS = Number(process.env.BENCH_ROOTS ?? 200);
const databaseUrl = process.env.DATABASE_URL?.trim() || undefined;
/** PostgreSQL flushes an idle backend's counters to pg_stat_database within 10 s (PGSTAT_IDLE_INTERVAL). */
const STATS_FLUSH_MS = 11_000;
/** An answer not received by then counts as an error. */
const TIMEOUT_MS = 10_000;

interface Round {
  readonly p50: number;
  readonly p90: number;
  readonly p99: number;
  readonly max: number;
  /** Answers per second over the round. */
  readonly rate: number;
  readonly answered: number;
  /** Non-2xx answers, failed connections and timeouts. */
  readonly errors: number;
  readonly cpu: CpuSplit | null;
  /** Open loop only: how late the generator sent, p50 and p99 (ms). */
  readonly lag: { readonly p50: number; readonly p99: number } | null;
}

class Client {
  private next = 0;
  private readonly url: URL;

  constructor(
    readonly server: Server,
    private readonly key: string,
    private readonly bodies: readonly Buffer[],
    private readonly agent: Agent,
  ) {
    this.url = new URL(server.url);
  }

  /** What went wrong since `failures()` was last read: a non-2xx status or the error's code, counted. */
  private failed = new Map<string, number>();

  /** The status of the next body's answer, or 0 if none came. */
  async send(): Promise<number> {
    this.next = (this.next + 1) % this.bodies.length;
    try {
      const status = await approve(this.agent, this.url, this.key, this.bodies[this.next] as Buffer, TIMEOUT_MS);
      if (status < 200 || status >= 300) this.fail(String(status));
      return status;
    } catch (e) {
      this.fail((e as { code?: string }).code ?? (e as Error).message);
      return 0;
    }
  }

  private fail(kind: string): void {
    this.failed.set(kind, (this.failed.get(kind) ?? 0) + 1);
  }

  /** The failures since the last call, as " (503 ×9, ECONNRESET ×1)", or '' when there were none. */
  failures(): string {
    const out = [...this.failed].map(([kind, n]) => `${kind} ×${n}`).join(', ');
    this.failed = new Map();
    return out === '' ? '' : ` (${out})`;
  }
}

function summarize(latencies: Float64Array, lags: Float64Array | null, errors: number, seconds: number, cpu: CpuSplit | null): Round {
  const sorted = latencies.slice().sort();
  const lagSorted = lags?.slice().sort() ?? null;
  return {
    p50: percentile(sorted, 0.5),
    p90: percentile(sorted, 0.9),
    p99: percentile(sorted, 0.99),
    max: sorted[sorted.length - 1] ?? NaN,
    rate: latencies.length / seconds,
    answered: latencies.length - errors,
    errors,
    cpu,
    lag: lagSorted === null ? null : { p50: percentile(lagSorted, 0.5), p99: percentile(lagSorted, 0.99) },
  };
}

/** One connection, `n` requests one after another. */
async function oneAtATime(client: Client, n: number): Promise<Round> {
  const latencies = new Float64Array(n);
  let errors = 0;
  const pid = client.server.child.pid as number;
  const before = sample(pid);
  const began = performance.now();
  for (let i = 0; i < n; i += 1) {
    const t = performance.now();
    const status = await client.send();
    latencies[i] = performance.now() - t;
    if (status < 200 || status >= 300) errors += 1;
  }
  const seconds = (performance.now() - began) / 1000;
  const after = sample(pid);
  return summarize(latencies, null, errors, seconds, before !== null && after !== null ? split(before, after, n) : null);
}

/** `rate` requests a second for `seconds`, each sent at its scheduled time (open loop). */
async function openLoop(client: Client, rate: number, seconds: number): Promise<Round> {
  const pid = client.server.child.pid as number;
  const before = sample(pid);
  const { latencies, lags, errors, seconds: took } = await fixedRate(() => client.send(), rate, seconds);
  const after = sample(pid);
  return summarize(latencies, lags, errors, took, before !== null && after !== null ? split(before, after, latencies.length) : null);
}

async function saturation(client: Client, key: string, bodies: readonly string[]): Promise<Round> {
  const f = await load(client.server, key, bodies, { seconds: SATURATION_SECONDS, connections: CONNECTIONS });
  return { p50: f.p50, p90: NaN, p99: f.p99, max: NaN, rate: f.rps, answered: f.answered, errors: f.non2xx + f.errors, cpu: f.cpu, lag: null };
}

const ms = (x: number): string => (Number.isNaN(x) ? '   –' : x.toFixed(2).padStart(6));

function line(target: string, round: string, r: Round): string {
  // cpu.ts counts every postgres process on the machine: others' work on a shared server is in it.
  const database = r.cpu === null || databaseUrl === undefined ? '' : `, all postgres ${r.cpu.database.toFixed(0)}`;
  const cpu = r.cpu === null ? '' : `   CPU µs/request server ${r.cpu.server.toFixed(0)}${database}`;
  const lag = r.lag === null ? '' : `   send lag p50 ${r.lag.p50.toFixed(2)} p99 ${r.lag.p99.toFixed(2)} ms`;
  return `${target.padEnd(8)} ${round.padEnd(22)} ${r.rate.toFixed(0).padStart(6)}/s   p50 ${ms(r.p50)}  p90 ${ms(r.p90)}  p99 ${ms(r.p99)}  max ${ms(r.max)} ms   errors ${r.errors}${cpu}${lag}`;
}

async function commits(admin: postgres.Sql, name: string): Promise<number> {
  const [row] = await admin<{ n: string }[]>`SELECT xact_commit::text AS n FROM pg_stat_database WHERE datname = ${name}`;
  return Number(row?.n ?? NaN);
}

/** The one-at-a-time round on `single` (one socket), then the open-loop rounds on `many`. */
async function rounds(target: string, single: Client, many: Client): Promise<{ sequential: Round; open: Map<number, Round> }> {
  const sequential = await oneAtATime(single, SEQUENTIAL);
  console.log(line(target, `one at a time (${SEQUENTIAL})`, sequential) + single.failures());
  const open = new Map<number, Round>();
  for (const rate of RATES) {
    const r = await openLoop(many, rate, SECONDS);
    open.set(rate, r);
    console.log(line(target, `open loop ${rate}/s`, r) + many.failures());
  }
  return { sequential, open };
}

/** One autocommit INSERT at a time on one connection to `url` (PostgreSQL): the commit's floor. */
async function commitFloor(url: string, n: number): Promise<Round> {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    await sql`CREATE TABLE IF NOT EXISTS latency_floor (id bigserial PRIMARY KEY, body jsonb NOT NULL)`;
    // About an audit row's size (~900 bytes of JSON).
    const body = JSON.stringify({ decision: 'grant', target: '/workspace/x/src/main.ts', pad: 'x'.repeat(800) });
    const insert = () => sql`INSERT INTO latency_floor (body) VALUES (${body}::jsonb)`;
    for (let i = 0; i < 200; i += 1) await insert();
    const latencies = new Float64Array(n);
    const began = performance.now();
    for (let i = 0; i < n; i += 1) {
      const t = performance.now();
      await insert();
      latencies[i] = performance.now() - t;
    }
    return summarize(latencies, null, 0, (performance.now() - began) / 1000, null);
  } finally {
    await sql.end({ timeout: 5 });
  }
}

async function main(): Promise<void> {
  const db = databaseUrl === undefined ? null : await privateDatabase(databaseUrl, 'latency');
  const servers = await startServers({ databaseUrl: db?.url, processes: 1 });
  const { key } = servers;
  try {
    const texts = await population(servers.warrant.url, key, ROOTS);
    const bodies = texts.map((t) => Buffer.from(t));
    const agent = (maxSockets: number): Agent => new Agent({ keepAlive: true, maxSockets });
    const bare = new Client(servers.bare, key, bodies, agent(256));
    const warrant = new Client(servers.warrant, key, bodies, agent(256));
    const bareSingle = new Client(servers.bare, key, bodies, agent(1));
    const warrantSingle = new Client(servers.warrant, key, bodies, agent(1));
    const syncCommit =
      db === null ? 'n/a (PGlite)' : ((await db.admin<{ synchronous_commit: string }[]>`SHOW synchronous_commit`)[0]?.synchronous_commit ?? '?');
    console.log(
      `warrant on ${db === null ? 'embedded PGlite' : `PostgreSQL (database ${db.name}, synchronous_commit ${syncCommit})`}; ${texts.length} approve bodies over ${ROOTS} roots`,
    );
    console.log(
      `rounds: one at a time ${SEQUENTIAL} requests; open loop ${RATES.join(', ')}/s for ${SECONDS} s each, latency from the scheduled send time (own generator, node:http keep-alive); saturation: autocannon ${CONNECTIONS} connections for ${SATURATION_SECONDS} s`,
    );
    // Warm-up: the JIT, both servers' pools and the clients' sockets.
    for (const c of [warrant, bare]) {
      await load(c.server, key, texts, { seconds: 2, connections: CONNECTIONS });
      await openLoop(c, 1000, 1);
    }
    for (let i = 0; i < 200; i += 1) await Promise.all([warrantSingle.send(), bareSingle.send()]);
    const warmUpFailures = [warrant, bare, warrantSingle, bareSingle].map((c) => c.failures()).join('');
    if (warmUpFailures !== '') console.log(`failures in the warm-up:${warmUpFailures}`);

    const b = await rounds('bare', bareSingle, bare);
    const floor = db === null ? null : await commitFloor(db.url, SEQUENTIAL);
    if (floor !== null) console.log(line('commit', `one at a time (${SEQUENTIAL})`, floor) + '   (autocommit INSERT from this process)');
    const before = db === null ? NaN : await commits(db.admin, db.name);
    const w = await rounds('approve', warrantSingle, warrant);
    const approveEnded = performance.now();
    const answered = w.sequential.answered + [...w.open.values()].reduce((a, r) => a + r.answered, 0);

    const bareSat = await saturation(bare, key, texts);
    console.log(line('bare', `saturation`, bareSat));
    let perAnswer = '';
    if (db !== null) {
      await new Promise((r) => setTimeout(r, Math.max(0, STATS_FLUSH_MS - (performance.now() - approveEnded))));
      const after = await commits(db.admin, db.name);
      perAnswer = `commits per answer ${((after - before) / answered).toFixed(2)} (xact_commit +${after - before} for ${answered} answered approvals, the checkpointer's included; synchronous_commit ${syncCommit})`;
    } else perAnswer = 'commits per answer: n/a on PGlite';
    const warrantSat = await saturation(warrant, key, texts);
    console.log(line('approve', `saturation`, warrantSat));
    console.log(perAnswer);

    const at = w.open.get(1000);
    const cpuRatio = warrantSat.cpu !== null && bareSat.cpu !== null ? (warrantSat.cpu.server / bareSat.cpu.server).toFixed(1) : 'n/a';
    console.log(
      `issue 15: approve/bare p50 one at a time ${(w.sequential.p50 / b.sequential.p50).toFixed(2)}× (target ≤ 2×); ` +
        `approve at 1,000/s p50 ${at === undefined ? 'n/a' : at.p50.toFixed(2)} ms (≤ 2 ms), p99 ${at === undefined ? 'n/a' : at.p99.toFixed(2)} ms (≤ 6 ms); ` +
        `server CPU per approval at saturation / bare per request ${cpuRatio}× (≤ 3×)`,
    );
    if (floor !== null)
      console.log(
        `floor one at a time: bare p50 + one commit p50 = ${(b.sequential.p50 + floor.p50).toFixed(2)} ms = ` +
          `${((b.sequential.p50 + floor.p50) / b.sequential.p50).toFixed(2)}× bare (the target, 2×, is ` +
          `${floor.p50 > b.sequential.p50 ? 'below' : 'above'} it); approve p50 ${(w.sequential.p50 / (b.sequential.p50 + floor.p50)).toFixed(2)}× the floor`,
      );
  } finally {
    await servers.close();
    await db?.drop();
  }
}

await main();
