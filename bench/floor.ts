/**
 * `npm run bench:floor` (issue 15): what one durable write costs from Node on this machine, beside the
 * bare endpoint, so the one-at-a-time target (approve p50 ≤ 2× the bare endpoint's) can be set against
 * the least a decision that is committed before it is answered must wait for. In one run, one at a
 * time on one connection each: the bare Hono endpoint over HTTP; a prepared `SELECT 1` (a round trip
 * to PostgreSQL); one autocommit INSERT (a round trip and a commit, fsync'd under the server's
 * `synchronous_commit`), the floor of any durable decision; and BEGIN, a locking read, an INSERT and
 * COMMIT through postgres.js's `begin` (three round trips, one commit), the shape of a batch. Then the
 * same transaction on ten open connections, each time on the same one and in turn on all ten (what
 * postgres.js's pool did unpatched once a burst had opened them all), with the database backends' CPU
 * per transaction read from /proc (Linux only). Last, shapes of a decision's transaction on one
 * reserved connection, alternated twice, with this process's CPU and the backend's per transaction,
 * all writing the same statement (a head's update and an INSERT): the writer's today (src/store/batch.ts:
 * BEGIN unawaited with a read FOR UPDATE, then the write with COMMIT behind it unawaited); the same with
 * the read FOR NO KEY UPDATE, under a transaction-scoped advisory lock, or with no lock at all; and an
 * optimistic one (the read outside a transaction, then the write as one autocommit statement that
 * applies only if the head is still as read: one message and one answer fewer). One row takes every
 * transaction, as one busy trajectory's calls would; bench/RESULTS.md says what these showed and what
 * the same change did in the writer itself.
 *
 * Needs DATABASE_URL (PostgreSQL); works in a database of its own, dropped after.
 */
import { readFileSync } from 'node:fs';
import { Agent } from 'node:http';
import postgres from 'postgres';
import { approve, percentile, privateDatabase, start, stop } from './harness.js';

const N = Number(process.env.BENCH_SEQUENTIAL ?? 2000);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 300);
const databaseUrl = process.env.DATABASE_URL?.trim();

async function timed(name: string, op: () => Promise<unknown>): Promise<number> {
  for (let i = 0; i < WARMUP; i += 1) await op();
  const latencies = new Float64Array(N);
  for (let i = 0; i < N; i += 1) {
    const t = performance.now();
    await op();
    latencies[i] = performance.now() - t;
  }
  latencies.sort();
  const at = (q: number): number => percentile(latencies, q);
  console.log(`${name.padEnd(48)} p50 ${at(0.5).toFixed(3)}  p90 ${at(0.9).toFixed(3)}  p99 ${at(0.99).toFixed(3)} ms`);
  return at(0.5);
}

/** CPU (µs) of a process, from /proc (ticks of 10 ms). */
function cpuOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10_000;
}

/** The batch-shaped transaction on ten reserved connections: all on the first, or each on the next in turn. */
async function rotation(url: string, body: string): Promise<void> {
  const pool = postgres(url, { max: 10, onnotice: () => {} });
  try {
    const conns = await Promise.all(Array.from({ length: 10 }, () => pool.reserve()));
    const pids = await Promise.all(conns.map(async (c) => Number((await c`SELECT pg_backend_pid() AS pid`)[0]?.pid)));
    const backendsCpu = (): number => pids.reduce((sum, pid) => sum + cpuOf(pid), 0);
    for (const [name, pick] of [
      ['on one of ten connections', () => 0],
      ['on each of ten connections in turn', (i: number) => i % 10],
      ['on one of ten connections', () => 0],
      ['on each of ten connections in turn', (i: number) => i % 10],
    ] as const) {
      let i = 0;
      const before = backendsCpu();
      await timed(`the same, ${name}`, async () => {
        const c = conns[pick(i++)] as postgres.ReservedSql;
        await c.unsafe('BEGIN');
        await c`SELECT seq FROM floor_heads WHERE id = 1 FOR UPDATE`;
        await c`INSERT INTO floor_rows (body) VALUES (${body}::jsonb)`;
        await c.unsafe('COMMIT');
      });
      console.log(`${''.padEnd(48)} database backends' CPU ${((backendsCpu() - before) / (N + WARMUP)).toFixed(0)} µs per transaction`);
    }
    for (const c of conns) c.release();
  } finally {
    await pool.end({ timeout: 5 });
  }
}

/** Shapes of a decision's transaction, the writer's first (see the top of this file), alternated twice. */
async function shapes(url: string, body: string): Promise<void> {
  const pool = postgres(url, { max: 1, onnotice: () => {} });
  try {
    const c = await pool.reserve();
    const pid = Number((await c`SELECT pg_backend_pid() AS pid`)[0]?.pid);
    const write = 'WITH h AS (UPDATE floor_heads SET seq = seq + 1 WHERE id = 1 RETURNING seq) INSERT INTO floor_rows (body) SELECT $1::jsonb FROM h';
    const checked =
      'WITH h AS (UPDATE floor_heads SET seq = seq + 1 WHERE id = 1 AND seq = $2 RETURNING seq) INSERT INTO floor_rows (body) SELECT $1::jsonb FROM h';
    /**
     * The writer's shape (src/store/batch.ts): BEGIN unawaited with `read`, then the write with
     * COMMIT behind it unawaited. `read` takes the head's lock, or not.
     */
    const transaction = (read: string) => async (): Promise<void> => {
      const begin = c.unsafe('BEGIN');
      const [head] = await c.unsafe(read, [], { prepare: true });
      if (head === undefined) throw new Error('no head');
      const w = c.unsafe(write, [body], { prepare: true });
      const commit = c.unsafe('COMMIT');
      await Promise.all([begin, w, commit]);
    };
    const optimistic = async (): Promise<void> => {
      const [head] = await c.unsafe('SELECT seq FROM floor_heads WHERE id = 1', [], { prepare: true });
      const r = await c.unsafe(checked, [body, String(head?.seq)], { prepare: true });
      if (r.count !== 1) throw new Error('the head moved');
    };
    for (let round = 0; round < 2; round += 1) {
      for (const [name, op] of [
        ['BEGIN + locking read; write + COMMIT (the writer)', transaction('SELECT seq FROM floor_heads WHERE id = 1 FOR UPDATE')],
        // The lock an UPDATE of non-key columns takes.
        ['BEGIN + read FOR NO KEY UPDATE; write + COMMIT', transaction('SELECT seq FROM floor_heads WHERE id = 1 FOR NO KEY UPDATE')],
        // The head's lock as a transaction-scoped advisory lock, the row read plainly.
        ['BEGIN + read under an advisory lock; write + COMMIT', transaction('SELECT seq FROM floor_heads, pg_advisory_xact_lock(1) WHERE id = 1')],
        // No lock at all: the least any transaction of this shape costs.
        ['BEGIN + read, no lock; write + COMMIT', transaction('SELECT seq FROM floor_heads WHERE id = 1')],
        ['read; one autocommit write checked against it', optimistic],
      ] as const) {
        const cpu = process.cpuUsage();
        const backend = cpuOf(pid);
        await timed(name, op);
        const own = process.cpuUsage(cpu);
        const n = N + WARMUP;
        console.log(
          `${''.padEnd(48)} this process ${((own.user + own.system) / n).toFixed(0)} µs, its backend ${((cpuOf(pid) - backend) / n).toFixed(0)} µs per transaction`,
        );
      }
    }
    c.release();
  } finally {
    await pool.end({ timeout: 5 });
  }
}

async function main(): Promise<void> {
  if (databaseUrl === undefined) throw new Error('bench:floor needs DATABASE_URL (PostgreSQL)');
  const db = await privateDatabase(databaseUrl, 'floor');
  const sql = postgres(db.url, { max: 1, onnotice: () => {} });
  const bare = await start('bench/bare-server.ts', {});
  try {
    await sql`CREATE TABLE floor_rows (id bigserial PRIMARY KEY, body jsonb NOT NULL)`;
    await sql`CREATE TABLE floor_heads (id int PRIMARY KEY, seq bigint NOT NULL)`;
    await sql`INSERT INTO floor_heads VALUES (1, 0)`;
    const [setting] = await sql<{ synchronous_commit: string }[]>`SHOW synchronous_commit`;
    const body = JSON.stringify({ decision: 'grant', target: '/workspace/x/src/main.ts', pad: 'x'.repeat(600) });
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const url = new URL(bare.url);
    // The bare endpoint takes no key; the request is the one the other benches send.
    const bareRequest = (): Promise<number> => approve(agent, url, '', Buffer.from(body));
    console.log(`PostgreSQL at ${new URL(db.url).host}, synchronous_commit ${setting?.synchronous_commit}; ${N} one at a time after ${WARMUP}`);
    const bareP50 = await timed('bare endpoint (HTTP)', bareRequest);
    await timed('SELECT 1 (one round trip)', () => sql`SELECT 1`);
    const commitP50 = await timed('INSERT, autocommit (a round trip and a commit)', () => sql`INSERT INTO floor_rows (body) VALUES (${body}::jsonb)`);
    await timed('BEGIN; SELECT … FOR UPDATE; INSERT; COMMIT', () =>
      sql.begin(async (tx) => {
        await tx`SELECT seq FROM floor_heads WHERE id = 1 FOR UPDATE`;
        await tx`INSERT INTO floor_rows (body) VALUES (${body}::jsonb)`;
      }),
    );
    await rotation(db.url, body);
    await shapes(db.url, body);
    agent.destroy();
    console.log(
      `floor of a durable decision over HTTP: bare p50 + one commit p50 = ${(bareP50 + commitP50).toFixed(3)} ms, ` +
        `against issue 15's one-at-a-time target of 2× bare = ${(2 * bareP50).toFixed(3)} ms`,
    );
  } finally {
    await stop(bare);
    await sql.end({ timeout: 5 });
    await db.drop();
  }
}

await main();
