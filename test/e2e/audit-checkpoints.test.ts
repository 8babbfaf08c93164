/**
 * Signed audit checkpoints end to end, with real processes: the server (`node --import tsx
 * src/node/main.ts`, as `npm start` runs it) makes decisions and checkpoints on a short interval and
 * exports them to `<keys dir>/checkpoints/<tenant id>.jsonl`; then, with the server stopped, the
 * audit CLI (`npm run audit -- …`) checks what is left behind using only the audit public keys
 * fetched over HTTP. Every database rewrite below recomputes the hashes the database holds, so the
 * hash chains alone still verify (as on the code before checkpoints, where verify answered ok): only
 * the signed roots can tell. On embedded PGlite (a data dir, opened by the test only while no server
 * runs) and on the PostgreSQL server when TEST_DATABASE_URL is set (a database of its own).
 *
 * Starting a process is the slow part here, so each kind of tampering gets a tenant of its own in one
 * database and one CLI run checks them all: every tenant's line of output is its own verdict.
 */
import { cpSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { sql, type SQL } from 'drizzle-orm';
import { CompactSign, generateKeyPair } from 'jose';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { leafOf } from '../../src/audit/checkpointer.js';
import { openDatabase } from '../../src/node/db.js';
import { createTenant } from '../../src/service/tenants.js';
import { verifyChains } from '../../src/store/audit.js';
import { GENESIS_HASH, Store, type AuditRecord } from '../../src/store/store.js';
import { BACKENDS, openTestDatabase, type Backend, type TestDatabase } from '../support/db.js';
import { cleanupServers, runCli, seedDataDir, startServer, tempDir, type CliResult, type RunningServer } from '../support/server.js';
import { rechain as rechainTree } from '../support/tamper.js';

type Row = Record<string, unknown>;
type Exec = (q: SQL) => Promise<Row[]>;
const rowsOf = (res: unknown): Row[] => (Array.isArray(res) ? res : (res as { rows: Row[] }).rows);

const sleep = (ms: number): Promise<void> => new Promise((done) => setTimeout(done, ms));

/** Polls `f` until it returns something other than undefined; fails at the deadline (a bound, not a timing). */
async function poll<T>(what: string, f: () => Promise<T | undefined>, ms = 30_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await f();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(150);
  }
}

/** The signed statement inside a checkpoint JWS (read, not verified: the CLI does that). */
interface Payload {
  tenant: string;
  n: number;
  size: number;
  root: string;
  prev: string | null;
}
const payloadOf = (jws: string): Payload => JSON.parse(Buffer.from(jws.split('.')[1] as string, 'base64url').toString('utf8')) as Payload;

/** A line of an exported file. */
interface Line {
  n: number;
  jws: string;
  consistency: string[];
}
function readLines(file: string): Line[] {
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as Line);
}
/** `ls` with line `i` (0-based) replaced. */
const withLine = (ls: readonly Line[], i: number, line: Line): Line[] => ls.map((l, j) => (j === i ? line : l));
const writeLines = (file: string, lines: readonly Line[]): void => writeFileSync(file, lines.map((l) => `${JSON.stringify(l)}\n`).join(''));

/** Signs exactly the payload of `jws` with a fresh Ed25519 key that is not the audit key, under the audit key's kid. */
async function resignWithStranger(jws: string): Promise<string> {
  const [header, payload] = jws.split('.') as [string, string];
  const { kid } = JSON.parse(Buffer.from(header, 'base64url').toString('utf8')) as { kid: string };
  const { privateKey } = await generateKeyPair('EdDSA');
  return new CompactSign(Buffer.from(payload, 'base64url')).setProtectedHeader({ alg: 'EdDSA', kid, typ: 'warrant-checkpoint+jws' }).sign(privateKey);
}

interface Tenant {
  readonly id: string;
  readonly name: string;
  readonly apiKey: string;
}

/**
 * One database with a server's keys dir (checkpoints go to the default `<keys dir>/checkpoints`):
 * a seeded PGlite data dir, or a fresh database on the PostgreSQL server. Its tenants are made
 * in-process up front, so no server or CLI has to start for them.
 */
interface Deployment {
  readonly keysDir: string;
  readonly checkpointDir: string;
  readonly tenants: readonly Tenant[];
  fileOf(t: Tenant): string;
  start(env: Record<string, string>): Promise<RunningServer>;
  /** `npm run audit -- …` on this database, with the server's keys dir unless `env` says otherwise. */
  audit(args: readonly string[], env?: Record<string, string>): Promise<CliResult>;
  /** Runs `f` through the test's own connection (PGlite: opened for it, so only while no server runs). */
  withStore<T>(f: (store: Store, exec: Exec) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

async function deploy(backend: Backend, names: readonly string[]): Promise<Deployment> {
  const keysDir = join(tempDir(), 'keys');
  const checkpointDir = join(keysDir, 'checkpoints');
  let pg: TestDatabase | undefined;
  let dataDir: string | undefined;
  if (backend === 'postgres') pg = await openTestDatabase('postgres');
  else {
    dataDir = join(tempDir(), 'data');
    await seedDataDir(dataDir);
  }
  const dbEnv: Record<string, string> = pg === undefined ? { WARRANT_DATA_DIR: dataDir as string } : { DATABASE_URL: pg.url as string };
  const withStore = async <T>(f: (store: Store, exec: Exec) => Promise<T>): Promise<T> => {
    const database = pg ?? (await openDatabase({ dataDir: dataDir }));
    try {
      return await f(new Store(database.db), (q) => database.db.execute(q).then(rowsOf));
    } finally {
      if (pg === undefined) await database.close();
    }
  };
  const tenants = await withStore(async (store) => {
    const out: Tenant[] = [];
    for (const name of names) {
      const { tenant, apiKey } = await createTenant(store, name, new Date());
      out.push({ id: tenant.id, name, apiKey });
    }
    return out;
  });
  return {
    keysDir,
    checkpointDir,
    tenants,
    fileOf: (t) => join(checkpointDir, `${t.id}.jsonl`),
    start: (env) => startServer({ keysDir, apiKey: tenants[0]!.apiKey, ...(dataDir === undefined ? {} : { dataDir }), env: { ...dbEnv, ...env } }),
    audit: (args, env = {}) => runCli('audit-cli.ts', args, { ...dbEnv, WARRANT_KEYS_DIR: keysDir, ...env }),
    withStore,
    close: async () => pg?.close(),
  };
}

interface Tree {
  readonly capability_id: string;
  readonly token: string;
}

async function mint(s: RunningServer, t: Tenant, name: string): Promise<Tree> {
  const r = await s.call(
    'POST',
    '/v1/capabilities',
    { trajectory_id: name, rights: ['read'], objects: [{ kind: 'path', prefix: `/w/${name}` }], predicate: { budget: 100, max_calls: 1000 }, ttl_s: 3600 },
    { key: t.apiKey },
  );
  expect(r.status).toBe(201);
  return r.body as Tree;
}

async function approve(s: RunningServer, t: Tenant, token: string, path: string): Promise<Row> {
  const r = await s.call('POST', '/v1/approve', { token, op: 'read', target: { kind: 'path', path }, cost: 0.01 }, { key: t.apiKey });
  expect(r.status).toBe(200);
  return r.body as Row;
}

/** Every audit row of the tenant, as the running server lists them. */
async function auditCount(s: RunningServer, t: Tenant): Promise<number> {
  const r = await s.call('GET', '/v1/audit?limit=1000', undefined, { key: t.apiKey });
  expect(r.body.next).toBeNull();
  return (r.body.entries as Row[]).length;
}

/** Waits until the server's own verify reports every row of the tenant covered by a checkpoint numbered at least `n`. */
function covered(s: RunningServer, t: Tenant, n: number): Promise<Row> {
  return poll(`checkpoint ${n} of ${t.name} to cover every row`, async () => {
    const r = await s.call('GET', '/v1/audit/verify', undefined, { key: t.apiKey });
    expect(r.status).toBe(200);
    expect(r.body, t.name).toMatchObject({ ok: true });
    return r.body.uncovered === 0 && (r.body.checkpoint?.n ?? 0) >= n ? (r.body as Row) : undefined;
  });
}

/** The CLI's verdict line for one tenant. */
const lineFor = (out: string, t: Tenant): string => out.split('\n').find((l) => l.split('\t')[1] === t.name) ?? `(no line for ${t.name})`;

describe.each(BACKENDS)('signed audit checkpoints end to end on %s', (backend) => {
  afterAll(async () => cleanupServers());

  describe('one server run that checkpoints every second, then stopped', () => {
    /** Case 4 tampers with the file of each FILE_TAMPERS tenant, case 3 with the database rows of each REWRITES tenant. */
    const FILE_TAMPERS: [string, (ls: Line[]) => Promise<Line[]> | Line[], number][] = [
      ['line-deleted', (ls) => ls.filter((_, i) => i !== 1), 2],
      ['lines-swapped', (ls) => [ls[0]!, ls[2]!, ls[1]!, ...ls.slice(3)], 2],
      ['line-resigned', async (ls) => withLine(ls, 1, { ...ls[1]!, jws: await resignWithStranger(ls[1]!.jws) }), 2],
      // Line 3's proof (from checkpoint 2's tree to 3's) is never empty: its first hash, one bit off.
      [
        'proof-altered',
        (ls) => withLine(ls, 2, { ...ls[2]!, consistency: ls[2]!.consistency.map((h, i) => (i === 0 ? `${h[0] === '0' ? '1' : '0'}${h.slice(1)}` : h)) }),
        3,
      ],
    ];
    const REWRITE_NAMES = ['deny-to-grant', 'row-deleted', 'rows-truncated', 'checkpoints-deleted', 'latest-checkpoint-deleted', 'checkpoint-replaced'];

    let d: Deployment;
    const byName = (name: string): Tenant => d.tenants.find((t) => t.name === name)!;
    /** Per tenant: its two trees and the id of a denied decision in the first round. */
    const trees = new Map<string, Tree[]>();
    const denied = new Map<string, string>();
    /** Per tenant: the exported file as the server left it. */
    const lines = new Map<string, Line[]>();
    /** The untouched tenant's denied row: its receipt, fetched over HTTP; and the audit JWKS file. */
    let receipt: Row & { row: Row; tree_size: number };
    let jwksFile: string;
    /** A keys dir holding no audit key: the CLI checks with the public JWKS file alone. */
    let publicOnly: Record<string, string>;

    /** A round of decisions: a grant in each tree; in the first also a deny and a token that does not verify. */
    async function decide(s: RunningServer, t: Tenant, round: number): Promise<void> {
      const [a, b] = trees.get(t.name)!;
      await approve(s, t, a!.token, `/w/a/${round}`);
      await approve(s, t, b!.token, `/w/b/${round}`);
      if (round > 1) return;
      const deny = await approve(s, t, a!.token, '/etc/shadow');
      expect(deny.decision).toBe('deny');
      denied.set(t.name, String(deny.audit_id));
      await approve(s, t, 'not-a-token', '/x'); // the tenant's own chain
    }

    beforeAll(async () => {
      d = await deploy(backend, ['untouched', ...FILE_TAMPERS.map(([n]) => n), ...REWRITE_NAMES]);
      const s = await d.start({ WARRANT_CHECKPOINT_INTERVAL_S: '1' });
      await Promise.all(d.tenants.map(async (t) => trees.set(t.name, [await mint(s, t, 'a'), await mint(s, t, 'b')])));
      // Three rounds, each waited out, so every file holds at least three checkpoints to tamper with.
      for (const round of [1, 2, 3]) {
        await Promise.all(d.tenants.map((t) => decide(s, t, round)));
        for (const t of d.tenants) await covered(s, t, round);
      }
      const rows = new Map(await Promise.all(d.tenants.map(async (t) => [t.name, await auditCount(s, t)] as const)));

      const untouched = byName('untouched');
      const r = await s.call('GET', `/v1/audit/${denied.get('untouched')}/receipt`, undefined, { key: untouched.apiKey });
      expect(r.status).toBe(200);
      receipt = r.body;
      const jwks = await s.call('GET', '/.well-known/warrant-audit-keys.json', undefined, { key: null });
      expect(jwks.status).toBe(200);
      expect(jwks.body.keys).toEqual([expect.objectContaining({ kty: 'OKP', crv: 'Ed25519', kid: expect.any(String) })]);
      expect(jwks.body.keys[0]).not.toHaveProperty('d'); // public keys only
      const dir = tempDir();
      jwksFile = join(dir, 'audit-keys.jwks.json');
      writeFileSync(jwksFile, JSON.stringify(jwks.body));
      publicOnly = { WARRANT_KEYS_DIR: join(dir, 'no-keys') };

      expect(await s.stop()).toBe(0);
      for (const t of d.tenants) {
        const ls = readLines(d.fileOf(t));
        expect(ls.length).toBeGreaterThanOrEqual(3);
        expect(payloadOf(ls.at(-1)!.jws)).toMatchObject({ tenant: t.id, n: ls.length, size: rows.get(t.name) });
        lines.set(t.name, ls);
      }
    }, 180_000);
    afterAll(async () => d?.close());

    describe('1: a receipt fetched over HTTP verifies offline after the server stopped', () => {
      test('as served: exit 0; with the row’s decision changed: exit 1', async () => {
        const dir = tempDir();
        const files = { served: join(dir, 'served.json'), changed: join(dir, 'changed.json') };
        writeFileSync(files.served, JSON.stringify(receipt));
        writeFileSync(files.changed, JSON.stringify({ ...receipt, row: { ...receipt.row, decision: 'grant', reason_code: null } }));
        // No database and no audit key: the receipt and the JWKS file are all there is.
        const env = { ...publicOnly, WARRANT_DATA_DIR: join(dir, 'no-data') };
        const [served, changed] = await Promise.all(
          [files.served, files.changed].map((f) => runCli('audit-cli.ts', ['receipt', 'verify', f, '--keys', jwksFile], env)),
        );
        expect(served!.code, served!.stderr).toBe(0);
        const untouched = byName('untouched');
        expect(JSON.parse(served!.stdout)).toMatchObject({
          ok: true,
          row: { id: denied.get('untouched'), decision: 'deny' },
          checkpoint: { tenant: untouched.id, size: receipt.tree_size },
        });
        expect(changed!.code, changed!.stderr).toBe(1);
        expect(JSON.parse(changed!.stdout)).toMatchObject({ ok: false, code: 'row_mismatch' });
      }, 60_000);
    });

    // Before case 3, which leaves the database rewritten.
    describe('4: exported files tampered with, the database untouched', () => {
      let pristine: CliResult;
      let tampered: CliResult;
      beforeAll(async () => {
        pristine = await d.audit(['verify', '--checkpoints', d.checkpointDir, '--keys', jwksFile], publicOnly);
        const dir = join(tempDir(), 'tampered');
        cpSync(d.checkpointDir, dir, { recursive: true });
        for (const [name, tamper] of FILE_TAMPERS)
          writeLines(d.fileOf(byName(name)).replace(d.checkpointDir, dir), await tamper(lines.get(name)!.map((l) => ({ ...l }))));
        tampered = await d.audit(['verify', '--checkpoints', dir, '--keys', jwksFile], publicOnly);
      }, 60_000);

      test('the files as the server left them verify: exit 0, every row of every tenant covered', () => {
        expect(pristine.code, pristine.stdout + pristine.stderr).toBe(0);
        for (const t of d.tenants) {
          const last = payloadOf(lines.get(t.name)!.at(-1)!.jws);
          expect(lineFor(pristine.stdout, t)).toBe(`ok\t${t.name}\tentries=${last.size}\tcheckpoint=${last.n}\tcovered=${last.size}\tuncovered=0`);
        }
      });

      test.each(FILE_TAMPERS)('%s: exit 1, naming first_bad_checkpoint', (name, _, bad) => {
        expect(lines.get('proof-altered')![2]!.consistency.length).toBeGreaterThan(0);
        expect(tampered.code, tampered.stdout + tampered.stderr).toBe(1);
        expect(lineFor(tampered.stdout, byName(name))).toMatch(new RegExp(`^TAMPERED\\t${name}\\tentries=\\d+\\tfirst_bad_checkpoint=${bad}\\t`));
      });

      test('a tenant whose file is untouched still verifies in the same run', () => {
        expect(lineFor(tampered.stdout, byName('untouched'))).toMatch(/^ok\tuntouched\t.*\tuncovered=0$/);
      });
    });

    describe('3: rewrites in the database while the server is stopped, checked against the exported files', () => {
      /** The first checkpoint of the tenant covering `leaf`: where a rewrite from that leaf on first shows. */
      const firstCovering = (name: string, leaf: number): number =>
        lines
          .get(name)!
          .map((l) => payloadOf(l.jws))
          .find((p) => p.size > leaf)!.n;

      /** A tree's rows in chain order. */
      const treeRows = async (store: Store, t: Tenant, treeId: string): Promise<AuditRecord[]> => {
        const out: AuditRecord[] = [];
        for await (const page of store.auditChain(t.id)) out.push(...page.filter((r) => r.treeId === treeId));
        return out;
      };

      /**
       * What someone with write access to the database does to hide a change: renumber the tree's
       * rows, recompute every hash of its chain and move its head back, so the chain itself verifies.
       */
      async function rechain(store: Store, exec: Exec, t: Tenant, treeId: string): Promise<void> {
        await rechainTree(store, exec, t.id, treeId);
        // The hash chains hold again: the check verify made before checkpoints finds nothing.
        expect(await verifyChains(store.auditChain(t.id), await store.auditHeads(t.id), GENESIS_HASH)).toMatchObject({ ok: true });
      }

      /** Rewrites the tenant's rows; returns the first_bad_checkpoint verify must name (a pattern). */
      type Rewrite = (store: Store, exec: Exec, t: Tenant) => Promise<string>;
      const REWRITES: [string, Rewrite][] = [
        [
          'deny-to-grant', // (a) with every later hash in its tree and the head recomputed
          async (store, exec, t) => {
            const tree = trees.get(t.name)![0]!.capability_id;
            const row = (await store.auditRow(t.id, denied.get(t.name)!)) as AuditRecord;
            const leaf = (await leafOf(store.db, t.id, tree, Number(row.seq))) as number;
            await exec(sql`UPDATE audit SET decision = 'grant', reason_code = NULL, detail = NULL WHERE id = ${row.id}`);
            await rechain(store, exec, t, tree);
            return String(firstCovering(t.name, leaf));
          },
        ],
        [
          'row-deleted', // (b) and its tree re-chained
          async (store, exec, t) => {
            const tree = trees.get(t.name)![1]!.capability_id;
            const victim = (await treeRows(store, t, tree))[1]!;
            const leaf = (await leafOf(store.db, t.id, tree, Number(victim.seq))) as number;
            await exec(sql`DELETE FROM audit WHERE id = ${victim.id}`);
            await rechain(store, exec, t, tree);
            return String(firstCovering(t.name, leaf));
          },
        ],
        [
          'rows-truncated', // (c) from a tree's end, its head moved back
          async (store, exec, t) => {
            const tree = trees.get(t.name)![1]!.capability_id;
            const cut = (await treeRows(store, t, tree)).slice(-2);
            const leaf = (await leafOf(store.db, t.id, tree, Number(cut[0]!.seq))) as number;
            for (const r of cut) await exec(sql`DELETE FROM audit WHERE id = ${r.id}`);
            await rechain(store, exec, t, tree);
            return String(firstCovering(t.name, leaf));
          },
        ],
        [
          'checkpoints-deleted', // (d) all of the database's own, the file keeps them
          async (_, exec, t) => {
            await exec(sql`DELETE FROM audit_checkpoints WHERE tenant_id = ${t.id}`);
            return '\\d+';
          },
        ],
        [
          'latest-checkpoint-deleted', // (d) the database rolled back one checkpoint, the file keeps it
          async (_, exec, t) => {
            await exec(sql`DELETE FROM audit_checkpoints WHERE tenant_id = ${t.id} AND n = ${lines.get(t.name)!.length}`);
            return '\\d+';
          },
        ],
        [
          'checkpoint-replaced', // (d) the database's checkpoint 2 re-signed by another key
          async (_, exec, t) => {
            await exec(sql`UPDATE audit_checkpoints SET jws = ${await resignWithStranger(lines.get(t.name)![1]!.jws)} WHERE tenant_id = ${t.id} AND n = 2`);
            return '2';
          },
        ],
      ];

      let out: CliResult;
      const expected = new Map<string, string>();
      beforeAll(async () => {
        await d.withStore(async (store, exec) => {
          for (const [name, rewrite] of REWRITES) expected.set(name, await rewrite(store, exec, byName(name)));
        });
        out = await d.audit(['verify', '--checkpoints', d.checkpointDir, '--keys', jwksFile], publicOnly);
      }, 60_000);

      test.each(REWRITES.map(([name]) => name))('%s: exit 1, naming first_bad_checkpoint', (name) => {
        expect(out.code, out.stdout + out.stderr).toBe(1);
        expect(lineFor(out.stdout, byName(name))).toMatch(new RegExp(`^TAMPERED\\t${name}\\tentries=\\d+\\tfirst_bad_checkpoint=${expected.get(name)}\\t`));
      });

      test('the tenants not rewritten still verify in the same run', () => {
        for (const name of ['untouched', ...FILE_TAMPERS.map(([n]) => n)]) expect(lineFor(out.stdout, byName(name))).toMatch(/^ok\t.*\tuncovered=0$/);
      });

      test('`audit checkpoint` on a database whose checkpoints fell behind its files appends and signs nothing for those tenants', async () => {
        const files = new Map(d.tenants.map((t) => [t.name, readFileSync(d.fileOf(t), 'utf8')]));
        const r = await d.audit(['checkpoint']);
        for (const t of d.tenants) expect(readFileSync(d.fileOf(t), 'utf8'), t.name).toBe(files.get(t.name));
        const alarms = r.stdout
          .split('\n')
          .filter((l) => l.includes('AUDIT INTEGRITY'))
          .map((l) => (JSON.parse(l) as Row).tenant_id);
        expect(alarms.sort()).toEqual([byName('checkpoints-deleted').id, byName('latest-checkpoint-deleted').id].sort());
        // Nor does the database get a checkpoint the files lack.
        const latest = await d.withStore((_, exec) =>
          exec(sql`SELECT tenant_id, max(n)::int AS n FROM audit_checkpoints WHERE tenant_id = ${byName('latest-checkpoint-deleted').id} GROUP BY tenant_id`),
        );
        expect(latest[0]?.n).toBe(lines.get('latest-checkpoint-deleted')!.length - 1);
      }, 60_000);
    });
  });

  test('GET /v1/audit/verify stays ok while checkpoints are committed beside it (no decision in flight)', async () => {
    // Verify reads the leaf ranges and the checkpoints in separate statements: a checkpoint that
    // commits between them must not make an intact log look tampered. Bounded by a count of
    // checkpoints (rounds every 0.2 s), each after a burst of decisions that have all been answered.
    const d = await deploy(backend, ['busy']);
    const t = d.tenants[0]!;
    const s = await d.start({ WARRANT_CHECKPOINT_INTERVAL_S: '0.2' });
    try {
      const tree = await mint(s, t, 'a');
      const bad: Row[] = [];
      // PGlite runs one statement at a time, so the window is narrower there: fewer rounds.
      const rounds = backend === 'postgres' ? 25 : 10;
      let n = 0;
      while (n < rounds && bad.length === 0) {
        for (let i = 0; i < 3; i++) await approve(s, t, tree.token, `/w/a/${i}`);
        for (let i = 0; i < 5; i++) {
          const v = (await s.call('GET', '/v1/audit/verify', undefined, { key: t.apiKey })).body as Row;
          if (v.ok !== true) bad.push(v);
          n = Math.max(n, Number((v.checkpoint as Row | null)?.n ?? 0));
        }
      }
      expect(bad).toEqual([]);
      // The server reports its rounds for an operator to alarm on (every one ok here).
      const metrics = String((await s.call('GET', '/metrics', undefined, { key: null })).body);
      expect(Number(/^warrant_audit_checkpoint_rounds_total\{outcome="ok"\} (\d+)$/m.exec(metrics)?.[1])).toBeGreaterThan(0);
      expect(metrics).toMatch(/^warrant_audit_checkpoint_rounds_total\{outcome="failed"\} 0$/m);
      expect(metrics).toMatch(/^warrant_audit_checkpoint_tenants_alarmed 0$/m);
      const lastOk = Number(/^warrant_audit_checkpoint_last_ok_timestamp_seconds (\S+)$/m.exec(metrics)?.[1]);
      expect(Math.abs(Date.now() / 1000 - lastOk)).toBeLessThan(60);
    } finally {
      await s.stop();
      await d.close();
    }
  }, 90_000);

  describe('a server with no periodic checkpoints (WARRANT_CHECKPOINT_INTERVAL_S=0)', () => {
    let d: Deployment;
    let t: Tenant;
    beforeAll(async () => {
      d = await deploy(backend, ['solo']);
      t = d.tenants[0]!;
    });
    afterAll(async () => d?.close());

    test('2: a clean shutdown (SIGTERM) writes a final checkpoint covering the decisions made right before it', async () => {
      const s = await d.start({ WARRANT_CHECKPOINT_INTERVAL_S: '0' });
      const tree = await mint(s, t, 'a');
      await approve(s, t, tree.token, '/w/a/1');
      const deny = await approve(s, t, tree.token, '/etc/shadow');
      // Nothing checkpoints while this server runs: no receipt yet, no file.
      expect((await s.call('GET', `/v1/audit/${String(deny.audit_id)}/receipt`, undefined, { key: t.apiKey })).status).toBe(409);
      const rows = await auditCount(s, t);
      expect(await s.stop('SIGTERM')).toBe(0);

      const lines = readLines(d.fileOf(t));
      expect(lines).toHaveLength(1);
      expect(payloadOf(lines[0]!.jws)).toMatchObject({ tenant: t.id, n: 1, size: rows, prev: null });
    }, 60_000);

    test('5: `audit checkpoint` on a stopped server’s database appends a line; run again with no new rows, nothing', async () => {
      // A server killed outright makes no final checkpoint: its last decisions stay uncovered.
      const s = await d.start({ WARRANT_CHECKPOINT_INTERVAL_S: '0' });
      const tree = await mint(s, t, 'b');
      await approve(s, t, tree.token, '/w/b/1');
      await approve(s, t, tree.token, '/etc/passwd');
      const rows = await auditCount(s, t);
      await s.stop('SIGKILL');

      const file = d.fileOf(t);
      const before = readLines(file);
      expect(before.length === 0 ? 0 : payloadOf(before.at(-1)!.jws).size).toBeLessThan(rows);

      const first = await d.audit(['checkpoint']);
      expect(first.code, first.stdout + first.stderr).toBe(0);
      const after = readLines(file);
      expect(after.slice(0, before.length)).toEqual(before);
      expect(after).toHaveLength(before.length + 1);
      expect(payloadOf(after.at(-1)!.jws)).toMatchObject({ tenant: t.id, n: after.length, size: rows });

      const text = readFileSync(file, 'utf8');
      const second = await d.audit(['checkpoint']);
      expect(second.code, second.stdout + second.stderr).toBe(0);
      expect(readFileSync(file, 'utf8')).toBe(text);

      const verified = await d.audit(['verify', '--checkpoints', d.checkpointDir]);
      expect(verified.code, verified.stdout + verified.stderr).toBe(0);
      expect(lineFor(verified.stdout, t)).toBe(`ok\tsolo\tentries=${rows}\tcheckpoint=${after.length}\tcovered=${rows}\tuncovered=0`);
    }, 90_000);
  });
});
