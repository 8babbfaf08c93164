/**
 * The checkpointer under load and across crashes (issue 12): checkpoints taken while decisions
 * commit, by several checkpointers at once, lose and duplicate no row; a crash between rows and
 * their checkpoint, or between a checkpoint and its export, leaves a log that verifies and is
 * caught up; and a database whose history no longer matches the export is refused, never extended.
 */
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { AuditIntegrityError, checkpointTenant, latestCheckpoint, SLICE } from '../../src/audit/checkpointer.js';
import type { CheckpointLine } from '../../src/audit/checkpoint.js';
import { publishCheckpoints, type CheckpointSink } from '../../src/audit/publish.js';
import { Checkpointer } from '../../src/audit/service.js';
import { Metrics } from '../../src/http/metrics.js';
import { openDatabase, type Database } from '../../src/node/db.js';
import { BACKENDS, openTestDatabase } from '../support/db.js';
import { startHarness, type Harness } from '../support/app.js';

type Row = Record<string, unknown>;
const rowsOf = (res: unknown): Row[] => (Array.isArray(res) ? res : (res as { rows: Row[] }).rows);

/** A sink in memory, one list of lines per tenant. */
class MemorySink implements CheckpointSink {
  readonly lines = new Map<string, CheckpointLine[]>();
  async last(tenantId: string): Promise<CheckpointLine | null> {
    return this.lines.get(tenantId)?.at(-1) ?? null;
  }
  async append(tenantId: string, lines: readonly CheckpointLine[]): Promise<void> {
    this.lines.set(tenantId, [...(this.lines.get(tenantId) ?? []), ...lines]);
  }
}

describe.each(BACKENDS)('the checkpointer on %s', (backend) => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness(backend);
  });
  afterAll(async () => h.close());

  const exec = async (q: ReturnType<typeof sql>): Promise<Row[]> => rowsOf(await h.database.db.execute(q));
  const mint = async (t: string): Promise<string> => {
    const r = await h.call('POST', '/v1/capabilities', {
      trajectory_id: t,
      rights: ['read'],
      objects: [{ kind: 'path', prefix: `/w/${t}` }],
      predicate: { budget: 1000, max_calls: 10_000 },
      ttl_s: 3600,
    });
    expect(r.status).toBe(201);
    return r.body.token as string;
  };
  const approve = (token: string, i: number) => h.call('POST', '/v1/approve', { token, op: 'read', target: { kind: 'path', path: `/w/x/${i}` }, cost: 0.01 });

  /** Every row of tenant a has exactly one leaf, leaves 0..n-1 once each. */
  async function expectEveryRowOneLeaf(): Promise<void> {
    const [counts] = await exec(sql`SELECT
        (SELECT count(*)::int FROM audit WHERE tenant_id = ${h.tenantIds.a}) AS rows,
        (SELECT coalesce(sum(to_seq - from_seq + 1), 0)::int FROM audit_ranges WHERE tenant_id = ${h.tenantIds.a}) AS leaves,
        (SELECT max(size)::int FROM audit_checkpoints WHERE tenant_id = ${h.tenantIds.a}) AS size`);
    expect(counts?.leaves).toBe(counts?.rows);
    expect(counts?.size).toBe(counts?.rows);
    const uncovered = await exec(sql`SELECT a.id FROM audit a WHERE a.tenant_id = ${h.tenantIds.a} AND NOT EXISTS (
        SELECT 1 FROM audit_ranges r WHERE r.tenant_id = a.tenant_id AND r.tree_id = a.tree_id AND a.seq BETWEEN r.from_seq AND r.to_seq)`);
    expect(uncovered).toEqual([]);
  }

  test('checkpoints taken while decisions commit lose and duplicate nothing', async () => {
    const tokens = await Promise.all(Array.from({ length: 6 }, (_, i) => mint(`load-${i}`)));
    // Other checkpointers race this one: on PostgreSQL on pools of their own (as other instances).
    const others: Database[] = backend === 'postgres' ? await Promise.all([0, 1].map(() => openDatabase({ databaseUrl: h.database.url, poolSize: 2 }))) : [];
    const checkpointers = [h.database.db, ...others.map((d) => d.db)].map(
      (db) => () => checkpointTenant({ db, keys: h.auditKeys, now: h.clock.now }, h.tenantIds.a),
    );
    let deciding = true;
    const made: number[] = [];
    const loops = checkpointers.map(async (cp) => {
      while (deciding) {
        const c = await cp();
        if (c !== null) made.push(c.payload.n);
        await new Promise((r) => setTimeout(r, 5));
      }
    });
    try {
      for (let round = 0; round < 10; round++) {
        const replies = await Promise.all(tokens.flatMap((t, i) => [approve(t, round * 10 + i), approve(t, round * 10 + i + 5)]));
        expect(replies.every((r) => r.status === 200)).toBe(true);
      }
    } finally {
      deciding = false;
      await Promise.all(loops);
      await Promise.all(others.map((d) => d.close()));
    }
    await h.checkpoint();
    // Checkpoint numbers are 1, 2, 3, … with none made twice, whichever checkpointer made them.
    expect(new Set(made).size).toBe(made.length);
    await expectEveryRowOneLeaf();
    expect((await h.call('GET', '/v1/audit/verify')).body).toMatchObject({ ok: true, uncovered: 0 });
  });

  test('a large checkpoint pauses between slices of its hashing, and covers every row once', async () => {
    await h.checkpoint();
    const before = (await latestCheckpoint(h.database.db, h.tenantIds.a))?.size ?? 0;
    const tokens = await Promise.all(Array.from({ length: 10 }, (_, i) => mint(`slices-${i}`)));
    // More than two slices of new rows: 10 trees of 60 approvals (and their mints).
    for (let round = 0; round < 6; round++) {
      const replies = await Promise.all(tokens.flatMap((t, i) => Array.from({ length: 10 }, (_, j) => approve(t, round * 100 + i * 10 + j))));
      expect(replies.every((r) => r.status === 200)).toBe(true);
    }
    let pauses = 0;
    const made = await checkpointTenant(
      {
        db: h.database.db,
        keys: h.auditKeys,
        now: h.clock.now,
        pause: async () => {
          pauses++;
        },
      },
      h.tenantIds.a,
    );
    const added = (made?.payload.size ?? 0) - before;
    expect(added).toBe(610); // 10 mints, 600 approvals
    // After every four full slices of rows matched, each full slice of leaves hashed, and each slice appended to the tiles.
    expect(pauses).toBe(Math.floor(added / (4 * SLICE)) + Math.floor(added / SLICE) + Math.ceil(added / SLICE));
    await expectEveryRowOneLeaf();
    expect((await h.call('GET', '/v1/audit/verify')).body).toMatchObject({ ok: true, uncovered: 0 });
  });

  test('a crash between rows and their checkpoint, or between a checkpoint and its export, leaves a log that verifies and is caught up', async () => {
    const token = await mint('crash');
    await approve(token, 1);
    // Rows committed, no checkpoint yet (the process died before its round): the log verifies, uncovered.
    expect((await h.call('GET', '/v1/audit/verify')).body).toMatchObject({ ok: true, uncovered: 2 });
    // A checkpoint committed but never exported (died before the append): the next round exports it first.
    const sink = new MemorySink();
    const exported = await publishCheckpoints(h.database.db, sink, h.auditKeys.verifyKeys, h.tenantIds.a);
    expect(exported).toBeGreaterThan(0);
    const before = sink.lines.get(h.tenantIds.a)?.length ?? 0;
    const made = await h.checkpoint();
    expect(made).not.toBeNull();
    const rounds = new Checkpointer({ db: h.database.db, keys: h.auditKeys, now: h.clock.now, sink, tenants: async () => [h.tenantIds.a], log: () => {} });
    await approve(token, 2);
    await rounds.round();
    const lines = sink.lines.get(h.tenantIds.a) ?? [];
    expect(lines.map((l) => l.n)).toEqual(Array.from({ length: lines.length }, (_, i) => i + 1));
    expect(lines.length).toBe(before + 2); // the one missed, then the new round's
    await expectEveryRowOneLeaf();
  });

  test('a database whose checkpoints no longer match the export is refused and never extended, and the metrics say so', async () => {
    const token = await mint('rollback');
    await approve(token, 1);
    const sink = new MemorySink();
    const logs: Row[] = [];
    const metrics = new Metrics();
    /** The checkpoint lines of the exposition text. */
    const checkpointMetrics = async (): Promise<string[]> => (await metrics.render()).split('\n').filter((l) => l.startsWith('warrant_audit_checkpoint'));
    const rounds = new Checkpointer({
      db: h.database.db,
      keys: h.auditKeys,
      now: h.clock.now,
      sink,
      tenants: async () => [h.tenantIds.a],
      log: (e) => logs.push(e),
      onRound: (r) => metrics.checkpointRound(r.failed, r.alarmed, r.at),
    });
    await rounds.round();
    const okAt = h.clock.now().getTime() / 1000;
    expect(await checkpointMetrics()).toEqual([
      'warrant_audit_checkpoint_rounds_total{outcome="ok"} 1',
      'warrant_audit_checkpoint_rounds_total{outcome="failed"} 0',
      `warrant_audit_checkpoint_last_ok_timestamp_seconds ${okAt}`,
      'warrant_audit_checkpoint_tenants_alarmed 0',
    ]);
    const last = (sink.lines.get(h.tenantIds.a) ?? []).at(-1) as CheckpointLine;
    // Someone with the database rolls its last checkpoint back.
    await exec(sql`DELETE FROM audit_checkpoints WHERE tenant_id = ${h.tenantIds.a} AND n = ${last.n}`);
    await expect(publishCheckpoints(h.database.db, sink, h.auditKeys.verifyKeys, h.tenantIds.a)).rejects.toBeInstanceOf(AuditIntegrityError);
    await approve(token, 2);
    h.clock.advance(60);
    await rounds.round();
    expect(logs.some((e) => e.level === 'error' && String(e.msg).includes('AUDIT INTEGRITY'))).toBe(true);
    expect((sink.lines.get(h.tenantIds.a) ?? []).at(-1)).toEqual(last);
    const [max] = await exec(sql`SELECT max(n)::int AS n FROM audit_checkpoints WHERE tenant_id = ${h.tenantIds.a}`);
    expect(max?.n).toBe(last.n - 1);
    // Rows go on being decided while nothing signs them: the tenant is counted alarmed, in every round
    // after too. The rounds themselves count as ok (no other tenant failed): one alarmed tenant must
    // not hide whether the others are still checkpointed.
    h.clock.advance(60);
    await rounds.round();
    expect(await checkpointMetrics()).toEqual([
      'warrant_audit_checkpoint_rounds_total{outcome="ok"} 3',
      'warrant_audit_checkpoint_rounds_total{outcome="failed"} 0',
      `warrant_audit_checkpoint_last_ok_timestamp_seconds ${okAt + 120}`,
      'warrant_audit_checkpoint_tenants_alarmed 1',
    ]);
    // A tenant that fails without an integrity error (here: the tenants cannot be listed) fails the round.
    const failing = new Checkpointer({
      db: h.database.db,
      keys: h.auditKeys,
      now: h.clock.now,
      sink,
      tenants: async () => Promise.reject(new Error('database down')),
      log: () => {},
      onRound: (r) => metrics.checkpointRound(r.failed, r.alarmed, r.at),
    });
    h.clock.advance(60);
    await failing.round();
    expect(await checkpointMetrics()).toEqual([
      'warrant_audit_checkpoint_rounds_total{outcome="ok"} 3',
      'warrant_audit_checkpoint_rounds_total{outcome="failed"} 1',
      `warrant_audit_checkpoint_last_ok_timestamp_seconds ${okAt + 120}`,
      'warrant_audit_checkpoint_tenants_alarmed 0',
    ]);
  });
});

/** On a database of their own: these tests change its schema's collation or tamper with its checkpoints. */
describe.each(BACKENDS)('the checkpointer, against a tampered or unusual database, on %s', (backend) => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness(backend);
    // Before any statement is prepared on a connection: a collation as most PostgreSQL installs have.
    if (backend === 'postgres')
      for (const t of ['audit', 'audit_heads', 'audit_ranges']) await exec(sql.raw(`ALTER TABLE ${t} ALTER COLUMN tree_id TYPE text COLLATE "en-US-x-icu"`));
  });
  afterAll(async () => h.close());

  const exec = async (q: ReturnType<typeof sql>): Promise<Row[]> => rowsOf(await h.database.db.execute(q));
  const mint = async (t: string): Promise<string> => {
    const r = await h.call('POST', '/v1/capabilities', { trajectory_id: t, rights: ['read'], objects: [{ kind: 'path', prefix: `/w/${t}` }], ttl_s: 3600 });
    expect(r.status).toBe(201);
    return r.body.token as string;
  };
  const approve = (token: string, i: number) => h.call('POST', '/v1/approve', { token, op: 'read', target: { kind: 'path', path: `/w/x/${i}` }, cost: 0.01 });

  test.runIf(backend === 'postgres')('tree ids ordered by a non-C collation (en-US, as most installs) still checkpoint', async () => {
    {
      const tokens = await Promise.all(Array.from({ length: 24 }, (_, i) => mint(`coll-${i}`)));
      await Promise.all(tokens.map((t, i) => approve(t, i)));
      // Code-unit and en-US order disagree for these ids (upper case sorts before lower in one only).
      const ids = (await exec(sql`SELECT tree_id FROM audit_heads WHERE tenant_id = ${h.tenantIds.a} AND tree_id <> ''`)).map((r) => String(r.tree_id));
      const byCodeUnit = [...ids].sort();
      const byCollation = (await exec(sql`SELECT tree_id FROM audit_heads WHERE tenant_id = ${h.tenantIds.a} AND tree_id <> '' ORDER BY tree_id`)).map((r) =>
        String(r.tree_id),
      );
      expect(byCollation).not.toEqual(byCodeUnit);
      expect(await h.checkpoint()).not.toBeNull();
      expect((await h.call('GET', '/v1/audit/verify')).body).toMatchObject({ ok: true, uncovered: 0 });
    }
  });

  test('a checkpointer refuses rows missing, a hash malformed or a head claiming rows that are not there, and signs once they are put back', async () => {
    const token = await mint('gaps');
    for (let i = 0; i < 3; i++) expect((await approve(token, i)).status).toBe(200);
    const [head] = await exec(sql`SELECT h.tree_id, h.seq::int AS seq FROM audit_heads h JOIN capabilities c ON c.id = h.tree_id
        WHERE h.tenant_id = ${h.tenantIds.a} AND c.trajectory_id = 'gaps'`);
    const tree = String(head?.tree_id);
    const seq = Number(head?.seq);
    const [row] = await exec(sql`SELECT hash FROM audit WHERE tenant_id = ${h.tenantIds.a} AND tree_id = ${tree} AND seq = 2`);
    const signed = async (): Promise<number> =>
      Number((await exec(sql`SELECT count(*)::int AS n FROM audit_checkpoints WHERE tenant_id = ${h.tenantIds.a}`))[0]?.n);
    const before = await signed();
    const refused = async (tamper: ReturnType<typeof sql>, restore: ReturnType<typeof sql>): Promise<void> => {
      await exec(tamper);
      try {
        await expect(h.checkpoint()).rejects.toBeInstanceOf(AuditIntegrityError);
      } finally {
        await exec(restore);
      }
    };
    // A head one row ahead of the rows (the last row deleted), far ahead (no slots are made for it), a hash not 32 bytes.
    await refused(
      sql`UPDATE audit_heads SET seq = ${seq + 1} WHERE tenant_id = ${h.tenantIds.a} AND tree_id = ${tree}`,
      sql`UPDATE audit_heads SET seq = ${seq} WHERE tenant_id = ${h.tenantIds.a} AND tree_id = ${tree}`,
    );
    await refused(
      sql`UPDATE audit_heads SET seq = ${2 ** 33} WHERE tenant_id = ${h.tenantIds.a} AND tree_id = ${tree}`,
      sql`UPDATE audit_heads SET seq = ${seq} WHERE tenant_id = ${h.tenantIds.a} AND tree_id = ${tree}`,
    );
    await refused(
      sql`UPDATE audit SET hash = 'zz' WHERE tenant_id = ${h.tenantIds.a} AND tree_id = ${tree} AND seq = 2`,
      sql`UPDATE audit SET hash = ${String(row?.hash)} WHERE tenant_id = ${h.tenantIds.a} AND tree_id = ${tree} AND seq = 2`,
    );
    expect(await signed()).toBe(before);
    expect(await h.checkpoint()).not.toBeNull();
    expect(await signed()).toBe(before + 1);
  });

  test('a checkpointer signs only over a tree that extends the last signed checkpoint, whatever the stored columns say', async () => {
    const token = await mint('fork');
    await approve(token, 1);
    expect(await h.checkpoint()).not.toBeNull();
    // Someone with the database shrinks the last checkpoint's recorded size and drops the tree's tiles.
    await exec(
      sql`UPDATE audit_checkpoints SET size = 0 WHERE tenant_id = ${h.tenantIds.a} AND n = (SELECT max(n) FROM audit_checkpoints WHERE tenant_id = ${h.tenantIds.a})`,
    );
    await exec(sql`DELETE FROM audit_tiles WHERE tenant_id = ${h.tenantIds.a}`);
    await approve(token, 2);
    await expect(h.checkpoint()).rejects.toBeInstanceOf(AuditIntegrityError);
  });

  test('a round that fails on the database logs what the database said, not the query and its parameters', async () => {
    // A statement the database refuses (its table gone), which drizzle wraps in an error quoting the query.
    const broken = await openTestDatabase(backend);
    try {
      await broken.db.execute(sql`DROP TABLE audit_checkpoints CASCADE`);
      const logs: Row[] = [];
      const rounds = new Checkpointer({
        db: broken.db,
        keys: h.auditKeys,
        now: h.clock.now,
        sink: null,
        tenants: async () => ['ten_x'],
        log: (e) => logs.push(e),
      });
      expect(await rounds.round()).toBe(1);
      expect(logs).toEqual([expect.objectContaining({ level: 'warn', msg: 'checkpoint failed; retried next round', tenant_id: 'ten_x', code: '42P01' })]);
      expect(String(logs[0]?.error)).toMatch(/audit_checkpoints.*does not exist/);
      expect(String(logs[0]?.error)).not.toMatch(/Failed query|params:|SELECT/);
    } finally {
      await broken.close();
    }
  });
});
