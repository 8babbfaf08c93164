/**
 * The batch's writes that update rows by the address found under the batch's locks (the charges,
 * the completed idempotency records) check in the database that every record matched its row: one
 * that matched none would be a budget not spent, or a key a repeat could decide again, and the
 * writes go out with COMMIT unawaited, so only the statement itself can stop that COMMIT. Here a
 * record that matches no row (an unknown capability, a record held by another owner) must fail its
 * batch, and nothing of the batch may commit.
 */
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createTenant } from '../../src/service/tenants.js';
import { BatchFailed, batchRunner } from '../../src/store/batch.js';
import { COMPLETE_FENCES } from '../../src/store/idempotency.js';
import { Store } from '../../src/store/store.js';
import { APPEND_AUDIT } from '../../src/store/writer.js';
import { BACKENDS, openTestDatabase, type TestDatabase } from '../support/db.js';

const rowsOf = (res: unknown): Record<string, unknown>[] => (Array.isArray(res) ? res : (res as { rows: Record<string, unknown>[] }).rows);

describe.each(BACKENDS)('the batch write checks on %s', (backend) => {
  let db: TestDatabase;
  let tenant: string;

  beforeAll(async () => {
    db = await openTestDatabase(backend);
    tenant = (await createTenant(new Store(db.db), 'checks', new Date())).tenant.id;
    await db.db
      .execute(sql`INSERT INTO capabilities (id, tenant_id, trajectory_id, parent_id, ancestors, depth, rights, objects, predicate, budget, kid, issued_at, expires_at)
      VALUES ('cap_r', ${tenant}, 'trj_r', NULL, '{}', 0, '{read}', '[]', '{}', 100, 'k1', now(), now() + interval '1 day')`);
    await db.db.execute(sql`INSERT INTO audit_heads (tenant_id, tree_id, seq, hash, last_id) VALUES (${tenant}, 'cap_r', 0, ${'0'.repeat(64)}, NULL)`);
    await db.db.execute(sql`INSERT INTO idempotency (tenant_id, scope, key, request_hash, state, owner, claimed_at)
      VALUES (${tenant}, 'approve', 'cap_r:k', 'h', 'in_flight', 'own_a', now())`);
  });
  afterAll(async () => db?.close());

  const state = async (): Promise<{ seq: number; spent: string; key: string }> => {
    const [head] = rowsOf(await db.db.execute(sql`SELECT seq::int AS seq FROM audit_heads WHERE tenant_id = ${tenant} AND tree_id = 'cap_r'`));
    const [cap] = rowsOf(await db.db.execute(sql`SELECT spent::text AS spent FROM capabilities WHERE id = 'cap_r'`));
    const [key] = rowsOf(await db.db.execute(sql`SELECT state FROM idempotency WHERE key = 'cap_r:k'`));
    return { seq: Number(head?.seq), spent: String(cap?.spent), key: String(key?.state) };
  };

  /** One batch: lock the chain and the key as the writer does, then send `writes` behind COMMIT. */
  const batch = (writes: readonly [string, unknown[]][]): Promise<void> =>
    batchRunner(db.db)(async (c) => {
      await c.query(`SELECT id FROM capabilities WHERE id = 'cap_r' FOR UPDATE`, []);
      await c.query(`SELECT key FROM idempotency WHERE tenant_id = $1 AND key = 'cap_r:k' FOR UPDATE`, [tenant]);
      return {
        value: undefined,
        writes: writes.map(([text, params]) =>
          c.query(
            text,
            params.map((p) => JSON.stringify(p)),
          ),
        ),
      };
    });

  const head = (seq: number): unknown => [{ tenant_id: tenant, tree_id: 'cap_r', seq, hash: 'f'.repeat(64), lastId: `aud_${seq}` }];

  test('a charge for a capability that matches no row fails the batch: no head moves, nothing is charged', async () => {
    const before = await state();
    const run = batch([
      [
        APPEND_AUDIT,
        [
          [],
          head(1),
          [
            { id: 'cap_r', spent: '5', calls: 1 },
            { id: 'cap_gone', spent: '5', calls: 1 },
          ],
        ],
      ],
    ]);
    await expect(run).rejects.toBeInstanceOf(BatchFailed);
    await expect(run).rejects.toMatchObject({ cause: expect.anything() });
    expect(await state()).toEqual(before);
  });

  test('an idempotency record held by another owner fails the batch', async () => {
    const before = await state();
    const run = batch([
      [APPEND_AUDIT, [[], head(1), [{ id: 'cap_r', spent: '5', calls: 1 }]]],
      [COMPLETE_FENCES, [[{ tenant_id: tenant, scope: 'approve', key: 'cap_r:k', owner: 'own_b', status: 200, response: {} }]]],
    ]);
    await expect(run).rejects.toBeInstanceOf(BatchFailed);
    expect(await state()).toEqual(before);
  });

  test('the same writes with every record matching commit', async () => {
    await batch([
      [APPEND_AUDIT, [[], head(1), [{ id: 'cap_r', spent: '5', calls: 1 }]]],
      [COMPLETE_FENCES, [[{ tenant_id: tenant, scope: 'approve', key: 'cap_r:k', owner: 'own_a', status: 200, response: {} }]]],
    ]);
    expect(await state()).toEqual({ seq: 1, spent: '5', key: 'completed' });
  });
});
