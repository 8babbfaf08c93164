/**
 * The sink check and the signature in one view of the database (review: audit tamper-evidence).
 * Before a round extends a tenant's tree, the checkpointer checks that the database still holds the
 * sink's last checkpoint; that check must be made on what the signing transaction reads, or someone
 * who can write the database shows the check one history and the signer another, and has the audit
 * key sign a checkpoint over rows the exported chain never held.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql, type SQL } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { checkpointTenant } from '../../src/audit/checkpointer.js';
import { Checkpointer } from '../../src/audit/service.js';
import { FileSink } from '../../src/node/file-sink.js';
import { BACKENDS } from '../support/db.js';
import { startHarness, type Harness } from '../support/app.js';
import { rechain } from '../support/tamper.js';

type Row = Record<string, unknown>;
const rowsOf = (res: unknown): Row[] => (Array.isArray(res) ? res : (res as { rows: Row[] }).rows);

describe.each(BACKENDS)('the sink check, against a database that answers the signer differently, on %s', (backend) => {
  let h: Harness;
  let dir: string;
  beforeAll(async () => {
    h = await startHarness(backend);
    dir = mkdtempSync(join(tmpdir(), 'warrant-sink-fork-'));
  });
  afterAll(async () => {
    await h.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const exec = async (q: SQL): Promise<Row[]> => rowsOf(await h.database.db.execute(q));
  const approve = (token: string, path: string) => h.call('POST', '/v1/approve', { token, op: 'read', target: { kind: 'path', path }, cost: 0.01 });

  test('a database that hides its latest checkpoint from the signing transaction gets no checkpoint signed over a rewritten log', async () => {
    const tenant = h.tenantIds.a;
    const logs: Row[] = [];
    const rounds = new Checkpointer({
      db: h.database.db,
      keys: h.auditKeys,
      now: h.clock.now,
      sink: new FileSink(dir),
      tenants: async () => [tenant],
      log: (e) => logs.push(e),
    });
    const minted = await h.call('POST', '/v1/capabilities', {
      trajectory_id: 'fork',
      rights: ['read'],
      objects: [{ kind: 'path', prefix: '/w/fork' }],
      ttl_s: 3600,
    });
    expect(minted.status).toBe(201);
    const token = minted.body.token as string;
    expect((await approve(token, '/w/fork/1')).status).toBe(200);
    expect(await rounds.round()).toBe(0); // checkpoint 1, exported
    const denied = await approve(token, '/etc/shadow');
    expect(denied.body.decision).toBe('deny');
    expect(await rounds.round()).toBe(0); // checkpoint 2 covers the deny, exported
    const [one] = await exec(sql`SELECT size::int AS size FROM audit_checkpoints WHERE tenant_id = ${tenant} AND n = 1`);
    const size1 = Number(one?.size);

    // Someone with the database turns the deny (covered by checkpoint 2) into a grant and re-chains
    // its tree; puts the ranges and tiles back as they were at checkpoint 1; and shows checkpoint 2
    // to everyone but the checkpointer's signing transaction (repeatable read), whose insert goes aside.
    await exec(sql`UPDATE audit SET decision = 'grant', reason_code = NULL WHERE id = ${denied.body.audit_id as string}`);
    await rechain(h.store, exec, tenant, minted.body.capability_id as string);
    await exec(sql`DELETE FROM audit_ranges WHERE tenant_id = ${tenant} AND leaf_start >= ${size1}`);
    await exec(sql`UPDATE audit_tiles SET hashes = substr(hashes, 1, ${64 * size1}) WHERE tenant_id = ${tenant} AND level = 0 AND idx = 0`);
    await exec(sql.raw(`ALTER TABLE audit_checkpoints RENAME TO audit_checkpoints_real`));
    await exec(sql.raw(`CREATE TABLE audit_checkpoints_aside (LIKE audit_checkpoints_real)`));
    await exec(
      sql.raw(`CREATE VIEW audit_checkpoints AS SELECT * FROM audit_checkpoints_real
                WHERE n <= 1 OR current_setting('transaction_isolation') <> 'repeatable read'`),
    );
    await exec(sql.raw(`CREATE RULE aside AS ON INSERT TO audit_checkpoints DO INSTEAD INSERT INTO audit_checkpoints_aside VALUES (NEW.*)`));

    await rounds.round();
    // Nothing signed over the rewritten rows, and the alarm raised.
    expect(await exec(sql`SELECT n FROM audit_checkpoints_aside`)).toEqual([]);
    expect(logs.some((e) => e.level === 'error' && String(e.msg).includes('AUDIT INTEGRITY'))).toBe(true);
  });
});

describe.each(BACKENDS)('the sink check, with several instances, on %s', (backend) => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness(backend);
  });
  afterAll(async () => h.close());

  test('a checkpoint another instance made after this one exported is not extended yet, nor taken for a rollback', async () => {
    const tenant = h.tenantIds.a;
    const minted = await h.call('POST', '/v1/capabilities', {
      trajectory_id: 'peer',
      rights: ['read'],
      objects: [{ kind: 'path', prefix: '/w/peer' }],
      ttl_s: 3600,
    });
    expect(minted.status).toBe(201);
    const first = await h.checkpoint();
    expect(first).not.toBeNull();
    await h.call('POST', '/v1/approve', { token: minted.body.token, op: 'read', target: { kind: 'path', path: '/w/peer/1' }, cost: 0.01 });
    expect(await h.checkpoint()).not.toBeNull(); // another instance's checkpoint 2, not in this one's sink yet
    await h.call('POST', '/v1/approve', { token: minted.body.token, op: 'read', target: { kind: 'path', path: '/w/peer/2' }, cost: 0.01 });
    const line = { n: first?.n ?? 0, jws: first?.jws ?? '', consistency: first?.consistency ?? [] };
    expect(await checkpointTenant({ db: h.database.db, keys: h.auditKeys, now: h.clock.now, exported: line }, tenant)).toBeNull();
    // With the sink caught up, it is extended.
    const [two] = rowsOf(await h.database.db.execute(sql`SELECT jws, consistency FROM audit_checkpoints WHERE tenant_id = ${tenant} AND n = 2`));
    const caughtUp = { n: 2, jws: String(two?.jws), consistency: two?.consistency as string[] };
    expect((await checkpointTenant({ db: h.database.db, keys: h.auditKeys, now: h.clock.now, exported: caughtUp }, tenant))?.n).toBe(3);
  });

  // A sink that lost its files (or a new one) cannot tell a rolled-back database from a good one: it
  // takes the database's checkpoints as they stand, so that is said, once, where an operator looks.
  test('a sink that holds nothing for a tenant whose database has checkpoints takes them in, with a warning', async () => {
    const tenant = h.tenantIds.a;
    expect(await h.checkpoint()).not.toBeUndefined(); // the database has checkpoints (from the test above, or this one)
    const [count] = rowsOf(await h.database.db.execute(sql`SELECT count(*)::int AS n FROM audit_checkpoints WHERE tenant_id = ${tenant}`));
    const logs: Row[] = [];
    const dir = mkdtempSync(join(tmpdir(), 'warrant-sink-new-'));
    const sink = new FileSink(dir);
    const rounds = new Checkpointer({ db: h.database.db, keys: h.auditKeys, now: h.clock.now, sink, tenants: async () => [tenant], log: (e) => logs.push(e) });
    afterAll(() => rmSync(dir, { recursive: true, force: true }));
    await rounds.round();
    expect((await sink.last(tenant))?.n).toBe(Number(count?.n));
    const warned = (): Row[] => logs.filter((e) => e.level === 'warn' && String(e.msg).startsWith('audit sink: it held no checkpoints'));
    expect(warned()).toEqual([expect.objectContaining({ tenant_id: tenant, checkpoints: Number(count?.n) })]);
    // From then on the sink has them: no more warnings.
    await h.call('POST', '/v1/capabilities', { trajectory_id: 'peer-2', rights: ['read'], objects: [{ kind: 'path', prefix: '/w/p2' }], ttl_s: 60 });
    await rounds.round();
    expect(warned()).toHaveLength(1);
  });
});
