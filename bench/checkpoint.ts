/**
 * `npm run bench:checkpoint` (issue 15): how long one audit checkpoint holds the thread that also
 * serves requests. The checkpointer runs every 10 s in the server's process; at 1,000 approvals/s a
 * checkpoint covers ~10,000 new rows, at saturation ~40,000. Each round writes that many audit rows of
 * a new tenant over 200 trees (plain rows by SQL, as decisions leave them for the checkpointer), then
 * times `checkpointTenant` while a 1 ms interval timer records how late it fires: the longest gap is
 * the longest the event loop was held, which every request arriving meanwhile waits for.
 *
 * Two modes, alternated: `in slices`, as the server runs it on PostgreSQL (after each SLICE of leaves
 * matched, hashed or appended, a turn of the event loop once 4 ms of work have passed since the last),
 * and `in one piece`, the same code with a pause that only awaits
 * a resolved promise (never lets a timer or a socket in), which is what a checkpoint was before.
 *
 * With DATABASE_URL, on a database of its own on that server (dropped after): the gaps are Node's work
 * alone. Without it, on in-memory PGlite, whose queries run on the same thread and are inside the gaps.
 */
import { sql } from 'drizzle-orm';
import { checkpointTenant } from '../src/audit/checkpointer.js';
import { generateSigningJwk, loadKeyRing } from '../src/crypto/keys.js';
import { openDatabase } from '../src/node/db.js';
import { useNativeSha256 } from '../src/node/native-hash.js';
import { createTenant } from '../src/service/tenants.js';
import { Store } from '../src/store/store.js';
import { privateDatabase } from './harness.js';

const SIZES = (process.env.BENCH_ROWS ?? '10000,40000').split(',').map(Number);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const TREES = 200;
const databaseUrl = process.env.DATABASE_URL?.trim() || undefined;

useNativeSha256(); // as the server does (src/node/main.ts)
const own = databaseUrl === undefined ? null : await privateDatabase(databaseUrl, 'checkpoint');
const database = await openDatabase(own === null ? {} : { databaseUrl: own.url, poolSize: 4 });
try {
  await database.migrate();
  const store = new Store(database.db);
  const keys = await loadKeyRing({ keys: [await generateSigningJwk()] });
  const now = (): Date => new Date();
  console.log(
    `audit checkpoint on ${own === null ? 'PGlite (in process: its queries are inside the gaps)' : 'PostgreSQL'}; ${TREES} trees, ${ROUNDS} rounds per size and mode`,
  );

  /** A new tenant with `rows` audit rows over TREES trees, none checkpointed yet. */
  async function tenantWith(rows: number, round: number): Promise<string> {
    const { tenant } = await createTenant(store, `bench-checkpoint-${rows}-${round}-${Date.now()}`, now());
    const t = tenant.id;
    await database.db.execute(sql`INSERT INTO audit (tenant_id, tree_id, seq, id, at, event, decision, prev_hash, hash)
      SELECT ${t}, 'tree-' || (g % ${TREES}), g / ${TREES} + 1, ${t} || '-' || g, now(), 'approve', 'grant', repeat('0', 64),
        encode(sha256(convert_to(${t} || g::text, 'UTF8')), 'hex')
      FROM generate_series(0, ${rows - 1}) AS g`);
    await database.db.execute(sql`INSERT INTO audit_heads (tenant_id, tree_id, seq, hash, last_id)
      SELECT ${t}, tree_id, max(seq), repeat('0', 64), NULL FROM audit WHERE tenant_id = ${t} GROUP BY tree_id`);
    return t;
  }

  /** Wall time of one checkpoint, and the longest the event loop went without running a 1 ms timer. */
  async function measure(tenantId: string, pause: (() => Promise<void>) | undefined): Promise<{ wall: number; gap: number }> {
    let last = performance.now();
    let gap = 0;
    const timer = setInterval(() => {
      const t = performance.now();
      gap = Math.max(gap, t - last);
      last = t;
    }, 1);
    await new Promise((r) => setTimeout(r, 20));
    gap = 0;
    last = performance.now();
    const start = performance.now();
    const made = await checkpointTenant({ db: database.db, keys, now, ...(pause === undefined ? {} : { pause }) }, tenantId);
    const wall = performance.now() - start;
    gap = Math.max(gap, performance.now() - last);
    clearInterval(timer);
    if (made === null) throw new Error('no checkpoint was made');
    return { wall, gap };
  }

  const modes: [string, (() => Promise<void>) | undefined][] = [
    ['in slices', undefined],
    ['in one piece', async () => {}],
  ];
  for (const rows of SIZES) {
    const results = new Map<string, { wall: number; gap: number }[]>(modes.map(([m]) => [m, []]));
    for (let round = 0; round < ROUNDS; round++) {
      for (const [mode, pause] of round % 2 === 0 ? modes : [...modes].reverse()) {
        const tenant = await tenantWith(rows, round);
        results.get(mode)?.push(await measure(tenant, pause));
      }
    }
    for (const [mode, rs] of results) {
      const gaps = rs.map((r) => r.gap.toFixed(1)).join(' / ');
      const walls = rs.map((r) => r.wall.toFixed(0)).join(' / ');
      console.log(`${String(rows).padStart(6)} rows  ${mode.padEnd(13)} longest event-loop gap ${gaps} ms   checkpoint took ${walls} ms`);
    }
  }
} finally {
  await database.close();
  await own?.drop();
}
