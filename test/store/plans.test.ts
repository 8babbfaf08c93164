/**
 * The decision path's statements find their rows by primary key, whatever the size of the tenant's
 * tables. Written as joins between a JSON recordset and a table, they let the planner (which takes a
 * recordset for 100 rows) scan and hash the whole table in every batch until it grew past some ten
 * thousand rows: the batch's locking statement cost 0.7 ms at 300 capabilities and 11 ms at 6,300, the
 * charges 3 ms, the idempotency fences 4.6 ms at 20,000 keys, all of it under the batch's locks
 * (bench/RESULTS.md). And a lookup by id that also named the tenant could take the (tenant,
 * trajectory) index and read every capability of the tenant per unit. Each statement is planned here
 * as a prepared statement runs it, generic (from its sixth run on a connection) and custom (its first
 * five): on a new tenant's 300 capabilities before any statistics, then on tables of 5,000 and more rows.
 */
import { sql } from 'drizzle-orm';
import { PgDialect } from 'drizzle-orm/pg-core';
import { coveredSeqs } from '../../src/audit/checkpointer.js';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createTenant } from '../../src/service/tenants.js';
import { COMPLETE_FENCES, LOCK_FENCES } from '../../src/store/idempotency.js';
import { lockChains, Store, writeCharges } from '../../src/store/store.js';
import { APPEND_AUDIT, LOCK, LOCK_SKIP } from '../../src/store/writer.js';
import { BACKENDS, openTestDatabase, type TestDatabase } from '../support/db.js';

/** Tables a decision reads or writes a handful of rows of, and which grow with the tenant's use. */
const GROWING = ['capabilities', 'audit_heads', 'idempotency', 'audit'];

interface PlanNode {
  readonly 'Node Type': string;
  readonly 'Relation Name'?: string;
  readonly 'Index Name'?: string;
  readonly 'Index Cond'?: string;
  readonly Plans?: readonly PlanNode[];
}

/**
 * How the plan reaches the growing tables other than by primary key: "Seq Scan on t" for a table
 * read in full, "t by i" for an index other than the primary key (every primary key here is named
 * *_pkey or *_pk). Bitmap index scans name no table: their index names it.
 */
function offKey(node: PlanNode): string[] {
  const type = node['Node Type'];
  const rel = node['Relation Name'];
  const index = node['Index Name'];
  const own: string[] = [];
  if (type === 'Seq Scan' && rel !== undefined && GROWING.includes(rel)) own.push(`Seq Scan on ${rel}`);
  // (audit_ranges_* are not the audit table's: see fullReads.)
  if (index !== undefined && GROWING.some((t) => index.startsWith(`${t}_`)) && !CHECKPOINTED.some((t) => index.startsWith(`${t}_`))) {
    if (!/_(pkey|pk)$/.test(index)) own.push(`${rel ?? '?'} by ${index}`);
    // A primary key read from end to end is a full scan too.
    if (node['Index Cond'] === undefined) own.push(`${rel ?? '?'} by ${index}, all of it`);
  }
  return [...own, ...(node.Plans ?? []).flatMap(offKey)];
}

/**
 * Rows locked out of order. Batches on several instances never deadlock because each locks heads in
 * (tenant, tree) order and chain rows in id order: each row is locked inside a nested loop, one outer
 * row at a time, so that loop's outer side must come out of a Sort (through Unique or a subquery).
 */
function unorderedLocks(node: PlanNode, loop: PlanNode | null = null): string[] {
  const own: string[] = [];
  if (node['Node Type'] === 'LockRows') {
    let outer = loop?.Plans?.[0];
    while (outer !== undefined && ['Unique', 'Subquery Scan'].includes(outer['Node Type'])) outer = outer.Plans?.[0];
    if (outer?.['Node Type'] !== 'Sort') own.push(`rows locked in no sorted order (outer side: ${outer?.['Node Type'] ?? 'none'})`);
  }
  return [...own, ...(node.Plans ?? []).flatMap((child) => unorderedLocks(child, node['Node Type'] === 'Nested Loop' ? node : loop))];
}

/** Tables the checkpointer reads a few rows of per tree, every round, and which grow with every checkpoint. */
const CHECKPOINTED = ['audit_ranges'];

/** The checkpointer's tables read in full: a sequential scan, or an index read without a condition. */
function fullReads(node: PlanNode): string[] {
  const rel = node['Relation Name'];
  const own: string[] = [];
  if (
    rel !== undefined &&
    CHECKPOINTED.includes(rel) &&
    (node['Node Type'] === 'Seq Scan' || (node['Index Name'] !== undefined && node['Index Cond'] === undefined))
  ) {
    own.push(`${node['Node Type']} on ${rel}, all of it`);
  }
  return [...own, ...(node.Plans ?? []).flatMap(fullReads)];
}

describe.each(BACKENDS)('the decision statements on %s', (backend) => {
  let db: TestDatabase;
  let tenant: string;
  let prepared = 0;
  let grown = false;

  beforeAll(async () => {
    db = await openTestDatabase(backend);
    tenant = (await createTenant(new Store(db.db), 'plans', new Date())).tenant.id;
    await grow(1, 150);
  }, 60_000);

  /** Roots `from`..`to` of the tenant, each with one child, its tree's head and a completed idempotency key. */
  async function grow(from: number, to: number): Promise<void> {
    await db.db
      .execute(sql`INSERT INTO capabilities (id, tenant_id, trajectory_id, parent_id, ancestors, depth, rights, objects, predicate, kid, issued_at, expires_at)
      SELECT 'cap_root_' || g, ${tenant}, 'trj_' || g, NULL, '{}', 0, '{read}', '[]', '{}', 'k1', now(), now() + interval '1 day' FROM generate_series(${from}::int, ${to}::int) AS g`);
    await db.db
      .execute(sql`INSERT INTO capabilities (id, tenant_id, trajectory_id, parent_id, ancestors, depth, rights, objects, predicate, kid, issued_at, expires_at)
      SELECT 'cap_child_' || g, ${tenant}, 'trj_' || g, 'cap_root_' || g, ARRAY['cap_root_' || g], 1, '{read}', '[]', '{}', 'k1', now(), now() + interval '1 day'
      FROM generate_series(${from}::int, ${to}::int) AS g`);
    await db.db.execute(sql`INSERT INTO audit_heads (tenant_id, tree_id, seq, hash, last_id)
      SELECT ${tenant}, 'cap_root_' || g, 0, repeat('0', 64), NULL FROM generate_series(${from}::int, ${to}::int) AS g`);
    // Four checkpointed ranges of ten rows per tree.
    await db.db.execute(sql`INSERT INTO audit_ranges (tenant_id, leaf_start, tree_id, from_seq, to_seq)
      SELECT ${tenant}, g * 40 + k * 10, 'cap_root_' || g, k * 10 + 1, k * 10 + 10 FROM generate_series(${from}::int, ${to}::int) AS g, generate_series(0, 3) AS k`);
    await db.db.execute(sql`INSERT INTO idempotency (tenant_id, scope, key, request_hash, state, owner, claimed_at)
      SELECT ${tenant}, 'approve', 'cap_child_' || g || ':call', 'h', 'completed', 'own_x', now() FROM generate_series(${from}::int, ${to}::int) AS g`);
  }
  afterAll(async () => db?.close());

  /** How the plan of `text`, run as a prepared statement with `params` (JSON texts), reaches growing tables other than by key. */
  async function accesses(text: string, params: readonly unknown[], mode: 'force_generic_plan' | 'force_custom_plan'): Promise<string[]> {
    const name = `plan_probe_${(prepared += 1)}`;
    // One session for SET, PREPARE and EXPLAIN (on postgres.js, the pool would spread them).
    return db.db.transaction(async (tx) => {
      await tx.execute(sql.raw(`SET LOCAL plan_cache_mode = ${mode}`));
      await tx.execute(sql.raw(`PREPARE ${name} AS ${text}`));
      const args = params.map((p) => `'${(typeof p === 'string' ? p : JSON.stringify(p)).replace(/'/g, "''")}'`).join(', ');
      const res: unknown = await tx.execute(sql.raw(`EXPLAIN (FORMAT JSON) EXECUTE ${name}(${args})`));
      await tx.execute(sql.raw(`DEALLOCATE ${name}`));
      const rows = (Array.isArray(res) ? res : (res as { rows: unknown[] }).rows) as Record<string, unknown>[];
      const raw = Object.values(rows[0] as object)[0];
      const plan = (typeof raw === 'string' ? JSON.parse(raw) : raw) as { Plan: PlanNode }[];
      const root = (plan[0] as { Plan: PlanNode }).Plan;
      return [...offKey(root), ...unorderedLocks(root), ...fullReads(root)];
    });
  }

  const unit = (cap: string): unknown => [{ tenant_id: tenant, cap }];
  /** A busy batch: 40 units on 20 trees, roots and children. */
  const busy = (): unknown => Array.from({ length: 40 }, (_, i) => ({ tenant_id: tenant, cap: `cap_${i % 2 === 0 ? 'root' : 'child'}_${(i % 20) + 1}` }));
  const statements = (): [string, string, readonly unknown[]][] => [
    ['the batch lock (main lane)', LOCK_SKIP, [unit('cap_child_42'), ['cap_child_42']]],
    ['the batch lock (waiting lane)', LOCK, [unit('cap_child_42'), ['cap_child_42']]],
    ['the batch lock of a tenant chain', LOCK_SKIP, [[{ tenant_id: tenant, cap: null }], []]],
    ['a busy batch lock', LOCK_SKIP, [busy(), Array.from({ length: 20 }, (_, i) => `cap_child_${i + 1}`)]],
    ['a chain lock', lockChains(1, false), [['cap_child_7', 'cap_child_8']]],
    ['the charges', writeCharges(1), [[{ id: 'cap_child_42', spent: '10', calls: 1 }]]],
    [
      'the audit write',
      APPEND_AUDIT,
      [
        [],
        [{ tenant_id: tenant, tree_id: 'cap_root_42', seq: 1, hash: 'f'.repeat(64), lastId: 'aud_x' }],
        [
          { id: 'cap_child_42', spent: '10', calls: 1 },
          { id: 'cap_root_42', spent: '10', calls: 1 },
        ],
      ],
    ],
    ['the idempotency fences', LOCK_FENCES, [[{ tenant_id: tenant, scope: 'approve', key: 'cap_child_42:call' }]]],
    checkpointer('the ranges a checkpoint extends', coveredSeqs(tenant, JSON.stringify(Array.from({ length: 200 }, (_, i) => `cap_root_${i * 7 + 1}`)))),
    ['the fences completed', COMPLETE_FENCES, [[{ tenant_id: tenant, scope: 'approve', key: 'cap_child_42:call', owner: 'own_x', status: 200, response: {} }]]],
  ];

  /** A checkpointer statement (a drizzle query), as text and parameters. */
  const checkpointer = (what: string, q: Parameters<PgDialect['sqlToQuery']>[0]): [string, string, readonly unknown[]] => {
    const { sql: text, params } = new PgDialect().sqlToQuery(q);
    return [what, text, params];
  };

  const offKeyAll = async (mode: 'force_generic_plan' | 'force_custom_plan'): Promise<Record<string, string[]>> => {
    const found: Record<string, string[]> = {};
    for (const [what, text, params] of statements()) {
      const off = await accesses(text, params, mode);
      if (off.length > 0) found[what] = off;
    }
    return found;
  };

  // A new tenant's tables, before autovacuum has analyzed them (the bench's population is this size).
  test.each(['force_generic_plan', 'force_custom_plan'] as const)('300 capabilities, no statistics: every row found by key (%s)', async (mode) => {
    expect(await offKeyAll(mode)).toEqual({});
  });

  test.each(['force_generic_plan', 'force_custom_plan'] as const)(
    '5,000 trees, analyzed: every row found by key (%s)',
    async (mode) => {
      if (!grown) {
        await grow(151, 5000);
        await db.db.execute(sql`ANALYZE`);
        grown = true;
      }
      expect(await offKeyAll(mode)).toEqual({});
    },
    60_000,
  );
});
