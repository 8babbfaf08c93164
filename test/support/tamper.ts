/**
 * What someone with write access to the database does to hide a change in the audit log: renumber
 * a tree's rows, recompute every hash of its chain and move its head to the end, so the hash chain
 * itself verifies again and only the signed checkpoints can tell.
 */
import { sql, type SQL } from 'drizzle-orm';
import { rowHash } from '../../src/store/audit.js';
import { GENESIS_HASH, type AuditRecord, type Store } from '../../src/store/store.js';

export type Exec = (q: SQL) => Promise<Record<string, unknown>[]>;

export async function rechain(store: Store, exec: Exec, tenantId: string, treeId: string): Promise<void> {
  const rows = await exec(sql`SELECT id FROM audit WHERE tenant_id = ${tenantId} AND tree_id = ${treeId} ORDER BY seq`);
  // Out of the way first: (tenant_id, tree_id, seq) is unique row by row.
  await exec(sql`UPDATE audit SET seq = -seq - 1000 WHERE tenant_id = ${tenantId} AND tree_id = ${treeId}`);
  let prev = GENESIS_HASH;
  let seq = 0;
  let lastId: string | null = null;
  for (const { id } of rows) {
    seq++;
    await exec(sql`UPDATE audit SET seq = ${seq}, prev_hash = ${prev} WHERE id = ${String(id)}`);
    const row = (await store.auditRow(tenantId, String(id))) as AuditRecord;
    prev = rowHash(row);
    lastId = row.id;
    await exec(sql`UPDATE audit SET hash = ${prev} WHERE id = ${row.id}`);
  }
  await exec(sql`UPDATE audit_heads SET seq = ${seq}, hash = ${prev}, last_id = ${lastId} WHERE tenant_id = ${tenantId} AND tree_id = ${treeId}`);
}
