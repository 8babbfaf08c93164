/**
 * Migration 0002 (issue 14): a tenant's key from before scoped keys becomes an `admin` key named
 * `initial` with the same id and hash, so it keeps working, with every right it had.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { drizzle } from 'drizzle-orm/pglite';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { sha256Hex } from '../../src/crypto/hash.js';
import { MIGRATIONS } from '../../src/node/db.js';
import { Authenticator } from '../../src/service/tenants.js';
import { Store } from '../../src/store/store.js';

const apply = async (pg: PGlite, file: string): Promise<void> => {
  for (const statement of readFileSync(join(MIGRATIONS, file), 'utf8').split('--> statement-breakpoint')) await pg.exec(statement);
};

let pg: PGlite;
beforeAll(async () => {
  pg = await PGlite.create();
});
afterAll(async () => pg.close());

test('an existing tenant key becomes an admin key that still authenticates', async () => {
  await apply(pg, '0000_init.sql');
  await apply(pg, '0001_per_tree_audit.sql');
  const key = `wk.oldkeyid_123.${'s'.repeat(43)}`;
  await pg.query(`INSERT INTO tenants (id, name, key_id, key_hash, created_at) VALUES ('ten_old', 'old', 'oldkeyid_123', $1, now())`, [sha256Hex(key)]);
  await apply(pg, '0002_api_keys.sql');
  // Then every later migration, as a server started on that database applies them.
  for (const file of readdirSync(MIGRATIONS)
    .filter((f) => f.endsWith('.sql') && f > '0002_api_keys.sql')
    .sort())
    await apply(pg, file);

  const { rows } = await pg.query<{ id: string; tenant_id: string; name: string; roles: string[]; revoked_at: unknown }>('SELECT * FROM api_keys');
  expect(rows).toEqual([expect.objectContaining({ id: 'oldkeyid_123', tenant_id: 'ten_old', name: 'initial', roles: ['admin'], revoked_at: null })]);
  const auth = new Authenticator(new Store(drizzle(pg)), () => Date.now());
  expect(await auth.authenticate(key)).toEqual({ tenantId: 'ten_old', keyId: 'oldkeyid_123', roles: ['admin'], expiresAt: null });
  const { rows: columns } = await pg.query<{ column_name: string }>(`SELECT column_name FROM information_schema.columns WHERE table_name = 'tenants'`);
  expect(columns.map((c) => c.column_name).sort()).toEqual(['created_at', 'id', 'name']);
});

test('rows without a key id or request id hash as before; with them, the ids are covered by the hash', async () => {
  const { rowHash } = await import('../../src/store/audit.js');
  const row = {
    tenantId: 'ten_1',
    treeId: '',
    seq: 1,
    id: 'aud_1',
    at: new Date('2026-01-01T00:00:00Z'),
    event: 'mint' as const,
    decision: 'grant' as const,
    reasonCode: null,
    capabilityId: 'cap_1',
    parentId: null,
    trajectoryId: 't',
    op: null,
    target: null,
    cost: null,
    callId: null,
    detail: null,
    prevHash: '0'.repeat(64),
  };
  const before = rowHash(row);
  expect(rowHash({ ...row, keyId: null, requestId: null })).toBe(before);
  const withIds = rowHash({ ...row, keyId: 'k1', requestId: 'r1' });
  expect(withIds).not.toBe(before);
  expect(rowHash({ ...row, keyId: 'k2', requestId: 'r1' })).not.toBe(withIds);
});
