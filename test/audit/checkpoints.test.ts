/**
 * Signed checkpoints and receipts on a real database (issue 12): the checkpointer covers every row
 * once, GET /v1/audit/verify holds the rows to the signed roots, receipts verify with the audit
 * public keys alone, and each way of rewriting the log that recomputes every hash the database holds
 * (which the hash chain alone cannot see) is reported, naming the first bad row or checkpoint.
 */
import { sql, type SQL } from 'drizzle-orm';
import { afterAll, beforeAll, beforeEach, describe, expect, test } from 'vitest';
import { generateSigningJwk, loadKeyRing } from '../../src/crypto/keys.js';
import { checkpointId, importAuditKeys, signCheckpoint, type CheckpointPayload } from '../../src/audit/checkpoint.js';
import { checkpointLines } from '../../src/audit/checkpointer.js';
import { verifyReceipt, type Receipt } from '../../src/audit/receipt.js';
import { verifyStoredAudit } from '../../src/audit/verify.js';
import { hashedFields, rowHash } from '../../src/store/audit.js';
import { GENESIS_HASH, type AuditRecord } from '../../src/store/store.js';
import { BACKENDS } from '../support/db.js';
import { startHarness, type Harness } from '../support/app.js';
import { rechain as rechainTree } from '../support/tamper.js';

type Row = Record<string, unknown>;
const rowsOf = (res: unknown): Row[] => (Array.isArray(res) ? res : (res as { rows: Row[] }).rows);

describe.each(BACKENDS)('audit checkpoints on %s', (backend) => {
  let h: Harness;
  /** Tables as they were before a test, put back after it (each test may tamper). */
  const TABLES = ['audit', 'audit_heads', 'audit_checkpoints', 'audit_ranges', 'audit_tiles', 'capabilities'];
  let saved: Record<string, string> = {};

  const exec = (q: SQL): Promise<Row[]> => h.database.db.execute(q).then(rowsOf);

  async function save(): Promise<void> {
    saved = {};
    for (const t of TABLES) {
      const [r] = await exec(sql.raw(`SELECT coalesce(jsonb_agg(to_jsonb(x)), '[]')::text AS j FROM ${t} x`));
      saved[t] = String(r?.j);
    }
  }
  async function restore(): Promise<void> {
    for (const t of TABLES) {
      await exec(sql.raw(`DELETE FROM ${t}`));
      await exec(sql`INSERT INTO ${sql.raw(t)} SELECT * FROM jsonb_populate_recordset(NULL::${sql.raw(t)}, ${saved[t]}::jsonb)`);
    }
  }

  const mint = async (t: string): Promise<{ capability_id: string; token: string }> => {
    const r = await h.call('POST', '/v1/capabilities', {
      trajectory_id: t,
      rights: ['read'],
      objects: [{ kind: 'path', prefix: `/w/${t}` }],
      predicate: { budget: 100, max_calls: 1000 },
      ttl_s: 3600,
    });
    expect(r.status).toBe(201);
    return r.body;
  };
  const approve = (token: string, path: string): Promise<{ status: number; body: Row }> =>
    h.call('POST', '/v1/approve', { token, op: 'read', target: { kind: 'path', path }, cost: 0.01 });

  /** A tree's rows in chain order. */
  const treeRows = async (treeId: string): Promise<AuditRecord[]> => {
    const out: AuditRecord[] = [];
    for await (const page of h.store.auditChain(h.tenantIds.a)) out.push(...page.filter((r) => r.treeId === treeId));
    return out;
  };

  const rechain = (treeId: string): Promise<void> => rechainTree(h.store, exec, h.tenantIds.a, treeId);

  const verify = async (): Promise<Row> => {
    const r = await h.call('GET', '/v1/audit/verify');
    expect(r.status).toBe(200);
    return r.body;
  };

  let trees: { capability_id: string; token: string }[];

  beforeAll(async () => {
    h = await startHarness(backend);
    trees = [await mint('t1'), await mint('t2')];
    for (const [i, t] of trees.entries()) {
      for (let k = 0; k < 5; k++) expect((await approve(t.token, k === 2 ? '/etc/shadow' : `/w/t${i + 1}/f${k}`)).status).toBe(200);
    }
    await approve('not-a-token', '/x'); // the tenant's own chain
    expect(await h.checkpoint()).toMatchObject({ n: 1, payload: { size: 13, n: 1, prev: null } });
    for (const t of trees) await approve(t.token, '/w/t1/later');
    expect(await h.checkpoint()).toMatchObject({ n: 2, payload: { size: 15, n: 2 } });
    await approve(trees[0]!.token, '/w/t1/uncovered');
    await save();
  });
  afterAll(async () => h.close());
  beforeEach(async () => restore());

  test('verify: every row covered by the signed checkpoints but the newest; no checkpoint when nothing is new', async () => {
    expect(await verify()).toMatchObject({ ok: true, entries: 16, trees: 3, covered: 15, uncovered: 1, checkpoint: { n: 2, size: 15 } });
    expect(await h.checkpoint('b')).toBeNull();
  });

  test('a leaf range stretched past the latest checkpoint is answered, not a crash of the verifier', async () => {
    await approve(trees[0]!.token, '/w/t1/c3');
    expect(await h.checkpoint()).toMatchObject({ n: 3, payload: { size: 17 } });
    await approve(trees[0]!.token, '/w/t1/after-c3');
    // The last range (tree t1's alone) made to claim the row after it, which no checkpoint covers.
    const stretched = await exec(
      sql`UPDATE audit_ranges SET to_seq = to_seq + 1 WHERE tenant_id = ${h.tenantIds.a}
          AND leaf_start = (SELECT max(leaf_start) FROM audit_ranges WHERE tenant_id = ${h.tenantIds.a}) RETURNING leaf_start, from_seq, to_seq`,
    );
    expect(stretched).toHaveLength(1);
    expect(await verify()).toMatchObject({ ok: true, covered: 17, uncovered: 1 });
  });

  test('verify dates the oldest uncovered row, so a monitor can see rows kept out of checkpoints; null once all are covered', async () => {
    const [newest] = await exec(sql`SELECT at FROM audit WHERE tenant_id = ${h.tenantIds.a} ORDER BY pos DESC LIMIT 1`);
    expect((await verify()).oldest_uncovered_at).toBe(new Date(newest?.at as string).toISOString());
    expect(await h.checkpoint()).toMatchObject({ n: 3, payload: { size: 16 } });
    expect(await verify()).toMatchObject({ ok: true, uncovered: 0, oldest_uncovered_at: null });
  });

  test('each row is one leaf: the ranges cover every tree from seq 1 without gap or overlap', async () => {
    const ranges = await exec(
      sql`SELECT tree_id, from_seq::int AS f, to_seq::int AS t, leaf_start::int AS s FROM audit_ranges WHERE tenant_id = ${h.tenantIds.a} ORDER BY leaf_start`,
    );
    let next = 0;
    const seen = new Map<string, number>();
    for (const r of ranges) {
      expect(r.s).toBe(next);
      expect(r.f).toBe((seen.get(String(r.tree_id)) ?? 0) + 1);
      next += Number(r.t) - Number(r.f) + 1;
      seen.set(String(r.tree_id), Number(r.t));
    }
    expect(next).toBe(15);
  });

  test('a receipt verifies offline with only the published audit keys; a changed row, proof or signer does not', async () => {
    const entries = (await h.call('GET', `/v1/audit?capability_id=${trees[0]!.capability_id}`)).body.entries as Row[];
    const denied = entries.find((e) => e.decision === 'deny') as Row;
    const r = await h.call('GET', `/v1/audit/${String(denied.id)}/receipt`);
    expect(r.status).toBe(200);
    const receipt = r.body as Receipt;
    const jwks = (await h.call('GET', '/.well-known/warrant-audit-keys.json', undefined, { as: 'none' })).body;
    const keys = await importAuditKeys(JSON.parse(JSON.stringify(jwks)));
    expect(await verifyReceipt(receipt, keys)).toMatchObject({ ok: true, checkpoint: { n: 2, size: 15 } });
    expect(receipt.inclusion.length).toBeLessThanOrEqual(Math.ceil(Math.log2(15)));

    const granted = { ...receipt, row: { ...receipt.row, decision: 'grant', reason_code: null } };
    expect(await verifyReceipt(granted, keys)).toMatchObject({ ok: false, code: 'row_mismatch' });
    const record = (await h.store.auditRow(h.tenantIds.a, String(denied.id))) as AuditRecord;
    const rehashed = { ...granted, hash: rowHash({ ...record, decision: 'grant', reasonCode: null }) };
    expect((await verifyReceipt(rehashed, keys)).ok).toBe(false);
    const flipped = { ...receipt, inclusion: receipt.inclusion.map((x, i) => (i === 0 ? `${x[0] === '0' ? '1' : '0'}${x.slice(1)}` : x)) };
    expect(await verifyReceipt(flipped, keys)).toMatchObject({ ok: false, code: 'not_included' });
    const otherKeys = await loadKeyRing({ keys: [await generateSigningJwk()] });
    expect(await verifyReceipt(receipt, otherKeys.verifyKeys)).toMatchObject({ ok: false, code: 'bad_checkpoint' });
    // A hostile receipt whose row has no canonical form is reported, not thrown.
    expect(await verifyReceipt({ ...receipt, row: { ...receipt.row, op: '\uD800' } }, keys)).toMatchObject({ ok: false, code: 'malformed' });
  });

  test('a row no checkpoint covers yet has no receipt: 409 not_yet_covered with Retry-After', async () => {
    const entries = (await h.call('GET', '/v1/audit?limit=1000')).body.entries as Row[];
    const newest = entries[entries.length - 1] as Row;
    const r = await h.call('GET', `/v1/audit/${String(newest.id)}/receipt`);
    expect(r.status).toBe(409);
    expect(r.body.error).toMatchObject({ code: 'not_yet_covered', retry_after_s: expect.any(Number) });
    expect(r.headers.get('retry-after')).toBe(String(r.body.error.retry_after_s));
    expect((await h.call('GET', '/v1/audit/aud_nope/receipt')).status).toBe(404);
  });

  // Each rewrite recomputes every hash the database holds, so the chains alone verify (as on the
  // code before checkpoints, where verify answered ok): only the signed roots can tell.
  test('a deny turned into a grant, every later hash and the head recomputed, is reported at its checkpoint', async () => {
    const tree = trees[0]!.capability_id;
    const victim = (await treeRows(tree)).find((r) => r.reasonCode === 'object_outside') as AuditRecord;
    await exec(sql`UPDATE audit SET decision = 'grant', reason_code = NULL, detail = NULL WHERE id = ${victim.id}`);
    await rechain(tree);
    expect(await verify()).toMatchObject({ ok: false, first_bad_checkpoint: 1 });
  });

  test('a deleted row, the tree re-chained, is reported', async () => {
    const tree = trees[1]!.capability_id;
    const victim = (await treeRows(tree))[2] as AuditRecord;
    await exec(sql`DELETE FROM audit WHERE id = ${victim.id}`);
    await rechain(tree);
    expect(await verify()).toMatchObject({ ok: false, first_bad_checkpoint: 1 });
  });

  test('rows cut from a tree’s end, the head moved back, are reported', async () => {
    const tree = trees[1]!.capability_id;
    const rows = await treeRows(tree);
    await exec(sql`DELETE FROM audit WHERE id = ${rows[rows.length - 1]!.id}`);
    await rechain(tree);
    expect(await verify()).toMatchObject({ ok: false, first_bad_checkpoint: 2 });
  });

  test('a forged row inserted in a tree, re-chained, is reported', async () => {
    const tree = trees[0]!.capability_id;
    const first = (await treeRows(tree))[0] as AuditRecord;
    const forged = { ...hashedFields(first), id: 'aud_forged', seq: 0, hash: first.hash, tree_id: tree };
    await exec(sql`INSERT INTO audit (tenant_id, tree_id, seq, id, at, event, decision, capability_id, trajectory_id, prev_hash, hash)
      SELECT tenant_id, tree_id, seq, id, at, event, decision, capability_id, trajectory_id, prev_hash, hash
      FROM jsonb_populate_recordset(NULL::audit, ${JSON.stringify([forged])}::jsonb)`);
    await rechain(tree);
    expect(await verify()).toMatchObject({ ok: false, first_bad_checkpoint: 1 });
  });

  test('a row inserted later under an earlier date is reported; the checkpointer names it and goes on, and verify reports it for good', async () => {
    // A whole new tree of one correctly hashed row and its head, dated a day before the checkpoints:
    // the chains verify, and nothing but the dates tells it from a decision made since.
    const template = (await treeRows(trees[0]!.capability_id))[0] as AuditRecord;
    const tree = 'cap_backdated';
    const row = {
      ...hashedFields(template),
      id: 'aud_backdated',
      seq: 1,
      tree_id: tree,
      prev_hash: GENESIS_HASH,
      at: new Date(h.clock.ms - 86_400_000).toISOString(),
      hash: '',
    };
    await exec(sql`INSERT INTO audit (tenant_id, tree_id, seq, id, at, event, decision, capability_id, trajectory_id, prev_hash, hash)
      SELECT tenant_id, tree_id, seq, id, at, event, decision, capability_id, trajectory_id, prev_hash, hash
      FROM jsonb_populate_recordset(NULL::audit, ${JSON.stringify([row])}::jsonb)`);
    const hash = rowHash((await h.store.auditRow(h.tenantIds.a, row.id)) as AuditRecord);
    await exec(sql`UPDATE audit SET hash = ${hash} WHERE id = ${row.id}`);
    await exec(sql`INSERT INTO audit_heads (tenant_id, tree_id, seq, hash, last_id) VALUES (${h.tenantIds.a}, ${tree}, 1, ${hash}, ${row.id})`);
    expect(await verify()).toMatchObject({ ok: false, first_bad_id: row.id, reason: expect.stringMatching(/after the fact/) });
    // Checkpoints go on (a clock fault must not leave every later row unsigned), naming the row.
    expect(await h.checkpoint()).toMatchObject({ n: 3, late: [row.id] });
    expect(await verify()).toMatchObject({ ok: false, first_bad_id: row.id, first_bad_checkpoint: 3, reason: expect.stringMatching(/after the fact/) });
  });

  test('a row left out of a later checkpoint is reported', async () => {
    const started = h.clock.ms;
    try {
      const [left] = (await treeRows(trees[0]!.capability_id)).slice(-1);
      h.clock.advance(600);
      expect((await approve(trees[1]!.token, '/w/t2/much-later')).status).toBe(200);
      // Tree 1's head hidden from the checkpointer (as a trigger pinning its xid would): checkpoint 3
      // covers tree 2's new row and leaves out tree 1's, decided ten minutes before it.
      await exec(sql`UPDATE audit_heads SET xid = '1'::xid8 WHERE tenant_id = ${h.tenantIds.a} AND tree_id = ${trees[0]!.capability_id}`);
      expect(await h.checkpoint()).toMatchObject({ payload: { n: 3, size: 16 } });
      expect(await verify()).toMatchObject({ ok: false, first_bad_id: left!.id, reason: expect.stringMatching(/does not cover it/) });
    } finally {
      h.clock.ms = started;
    }
  });

  test('a row whose time is no time is named, not a failure of the verifier', async () => {
    const victim = (await treeRows(trees[1]!.capability_id))[1] as AuditRecord;
    await exec(sql`UPDATE audit SET at = 'infinity' WHERE id = ${victim.id}`);
    expect(await verify()).toMatchObject({ ok: false, first_bad_id: victim.id });
  });

  test('an edit that does not recompute the hash is named by its row', async () => {
    const victim = (await treeRows(trees[0]!.capability_id))[1] as AuditRecord;
    await exec(sql`UPDATE audit SET cost = cost + 1 WHERE id = ${victim.id}`);
    expect(await verify()).toMatchObject({ ok: false, first_bad_id: victim.id });
  });

  test('a stored consistency proof that is not a list of hashes is reported at its checkpoint, not a crash of the verifier', async () => {
    for (const proof of ['{"x": 1}', '"00"', '[null]', '[1]']) {
      await exec(sql`UPDATE audit_checkpoints SET consistency = ${proof}::jsonb WHERE tenant_id = ${h.tenantIds.a} AND n = 2`);
      expect(await verify()).toMatchObject({ ok: false, first_bad_checkpoint: 2, reason: expect.stringMatching(/does not extend/) });
    }
  });

  test('the database copy of the checkpoints: a deleted, reordered or re-signed one is reported', async () => {
    await exec(sql`DELETE FROM audit_checkpoints WHERE tenant_id = ${h.tenantIds.a} AND n = 1`);
    expect(await verify()).toMatchObject({ ok: false, first_bad_checkpoint: 1 });
    await restore();
    await exec(sql`UPDATE audit_checkpoints SET n = -n WHERE tenant_id = ${h.tenantIds.a}`);
    await exec(sql`UPDATE audit_checkpoints SET n = 3 + n WHERE tenant_id = ${h.tenantIds.a}`);
    expect(await verify()).toMatchObject({ ok: false, first_bad_checkpoint: 1 });
    await restore();
    const [c2] = await exec(sql`SELECT jws FROM audit_checkpoints WHERE tenant_id = ${h.tenantIds.a} AND n = 2`);
    const payload = JSON.parse(Buffer.from(String(c2?.jws).split('.')[1] as string, 'base64url').toString()) as CheckpointPayload;
    const stranger = await loadKeyRing({ keys: [await generateSigningJwk()] });
    await exec(sql`UPDATE audit_checkpoints SET jws = ${await signCheckpoint(stranger, payload)} WHERE tenant_id = ${h.tenantIds.a} AND n = 2`);
    expect(await verify()).toMatchObject({ ok: false, first_bad_checkpoint: 2 });
  });

  test('a checkpoint signed with the audit key over a rewritten log does not extend its predecessor', async () => {
    const tree = trees[0]!.capability_id;
    const victim = (await treeRows(tree)).find((r) => r.reasonCode === 'object_outside') as AuditRecord;
    await exec(sql`UPDATE audit SET decision = 'grant', reason_code = NULL, detail = NULL WHERE id = ${victim.id}`);
    await rechain(tree);
    // The holder of the audit key re-signs checkpoint 2 over the rewritten rows (its root is right for
    // them), naming checkpoint 1 as before: checkpoint 1's root no longer follows from the new tree.
    const [c1] = await exec(sql`SELECT jws FROM audit_checkpoints WHERE tenant_id = ${h.tenantIds.a} AND n = 1`);
    await exec(sql`DELETE FROM audit_checkpoints WHERE tenant_id = ${h.tenantIds.a} AND n = 2`);
    await exec(sql`DELETE FROM audit_ranges WHERE tenant_id = ${h.tenantIds.a} AND leaf_start >= 13`);
    await exec(sql`DELETE FROM audit_tiles WHERE tenant_id = ${h.tenantIds.a}`);
    await exec(sql`DELETE FROM audit_ranges WHERE tenant_id = ${h.tenantIds.a}`);
    await exec(sql`DELETE FROM audit_checkpoints WHERE tenant_id = ${h.tenantIds.a}`);
    const fresh = await h.checkpoint();
    expect(fresh?.payload.n).toBe(1);
    const forged: CheckpointPayload = { ...(fresh as { payload: CheckpointPayload }).payload, n: 2, prev: checkpointId(String(c1?.jws)) };
    await exec(sql`UPDATE audit_checkpoints SET n = 2, jws = ${await signCheckpoint(h.auditKeys, forged)} WHERE tenant_id = ${h.tenantIds.a}`);
    await exec(
      sql`INSERT INTO audit_checkpoints SELECT * FROM jsonb_populate_recordset(NULL::audit_checkpoints, ${saved.audit_checkpoints}::jsonb) WHERE n = 1 AND tenant_id = ${h.tenantIds.a}`,
    );
    expect(await verify()).toMatchObject({ ok: false, first_bad_checkpoint: 2, reason: expect.stringMatching(/does not extend/) });
  });

  // The offline verify (npm run audit -- verify --checkpoints FILE) given a copy of the export taken
  // before checkpoint 2 was made: the rows checkpoint 2 covers are held to it from the database, where
  // before they passed as rows no checkpoint covers yet.
  test('an export that lags the database: the later signed checkpoints hold the rows they cover, said apart; a bad one under a known key is reported', async () => {
    const exported = (await checkpointLines(h.database.db, h.tenantIds.a)).slice(0, 1);
    const keys = h.auditKeys.verifyKeys;
    const check = (): ReturnType<typeof verifyStoredAudit> => verifyStoredAudit(h.database.db, keys, h.tenantIds.a, exported);
    // Checkpoint 2 (rows 13..14) is in the database only: it holds them, and the report says so.
    expect(await check()).toMatchObject({ ok: true, checkpoint: { n: 2, size: 15 }, uncovered: 1, fromDatabase: { checkpoints: 1, rows: 2, unknownKey: 0 } });
    const tree = trees[0]!.capability_id;
    const later = (await treeRows(tree)).find((r) => r.target !== null && JSON.stringify(r.target).includes('/w/t1/later')) as AuditRecord;
    await exec(sql`UPDATE audit SET decision = 'deny', reason_code = 'object_outside' WHERE id = ${later.id}`);
    await rechain(tree);
    expect(await check()).toMatchObject({ ok: false, firstBadCheckpoint: 2 });
    await restore();
    const [c2] = await exec(sql`SELECT jws FROM audit_checkpoints WHERE tenant_id = ${h.tenantIds.a} AND n = 2`);
    const jws = String(c2?.jws);
    // Under the audit key's own kid, a signature that does not hold is a forgery.
    const [head, body, sig] = jws.split('.') as [string, string, string];
    const forged = `${head}.${body}.${sig.startsWith('A') ? 'B' : 'A'}${sig.slice(1)}`;
    await exec(sql`UPDATE audit_checkpoints SET jws = ${forged} WHERE tenant_id = ${h.tenantIds.a} AND n = 2`);
    expect(await check()).toMatchObject({ ok: false, firstBadCheckpoint: 2 });
    await restore();
    // Under a key the verifier was not given (a newer audit key, say), it cannot be checked: it holds
    // nothing, and its rows count as uncovered, as they did before it was made.
    const payload = JSON.parse(Buffer.from(body, 'base64url').toString()) as CheckpointPayload;
    const stranger = await loadKeyRing({ keys: [await generateSigningJwk()] });
    await exec(sql`UPDATE audit_checkpoints SET jws = ${await signCheckpoint(stranger, payload)} WHERE tenant_id = ${h.tenantIds.a} AND n = 2`);
    expect(await check()).toMatchObject({ ok: true, checkpoint: { n: 1, size: 13 }, uncovered: 3, fromDatabase: { checkpoints: 0, rows: 0, unknownKey: 1 } });
  });

  // Whoever writes the database can change the state the next decision reads; the decisions taken
  // on it are then recorded faithfully, and verify replays each tree from its rows to find them.
  test('a revocation cleared in the database, and the call it let through, is reported', async () => {
    const tree = await mint('t-revoked');
    expect((await h.call('POST', '/v1/revoke', { capability_id: tree.capability_id })).status).toBe(200);
    expect((await approve(tree.token, '/w/t-revoked/a')).body).toMatchObject({ decision: 'deny', reason: { code: 'revoked' } });
    expect(await verify()).toMatchObject({ ok: true });
    await exec(sql`UPDATE capabilities SET revoked_at = NULL, revoke_reason = NULL WHERE id = ${tree.capability_id}`);
    const granted = await approve(tree.token, '/w/t-revoked/b');
    expect(granted.body).toMatchObject({ decision: 'grant' });
    expect(await verify()).toMatchObject({ ok: false, first_bad_id: granted.body.audit_id, reason: expect.stringMatching(/after row .* revoked/) });
  });

  test('a child of a revoked capability, made once the revocation was cleared, is reported', async () => {
    const tree = await mint('t-parent');
    expect((await h.call('POST', '/v1/revoke', { capability_id: tree.capability_id })).status).toBe(200);
    await exec(sql`UPDATE capabilities SET revoked_at = NULL, revoke_reason = NULL WHERE id = ${tree.capability_id}`);
    const child = await h.call('POST', '/v1/attenuate', {
      parent_token: tree.token,
      rights: ['read'],
      objects: [{ kind: 'path', prefix: '/w/t-parent/sub' }],
      predicate: { budget: 1, max_calls: 10 },
      ttl_s: 60,
    });
    expect(child.status).toBe(201);
    const row = (await treeRows(tree.capability_id)).find((r) => r.event === 'attenuate') as AuditRecord;
    expect(await verify()).toMatchObject({ ok: false, first_bad_id: row.id, reason: expect.stringMatching(/attenuated capability .* after row/) });
  });

  test('spending reset in the database, and the grant past the budget it let through, is reported', async () => {
    const r = await h.call('POST', '/v1/capabilities', {
      trajectory_id: 't-budget',
      rights: ['read'],
      objects: [{ kind: 'path', prefix: '/w/t-budget' }],
      predicate: { budget: 0.02, max_calls: 1000 },
      ttl_s: 3600,
    });
    const tree = r.body as { capability_id: string; token: string };
    for (const f of ['a', 'b']) expect((await approve(tree.token, `/w/t-budget/${f}`)).body).toMatchObject({ decision: 'grant' });
    expect((await approve(tree.token, '/w/t-budget/c')).body).toMatchObject({ decision: 'deny', reason: { code: 'budget_exhausted' } });
    expect(await verify()).toMatchObject({ ok: true });
    await exec(sql`UPDATE capabilities SET spent = 0 WHERE id = ${tree.capability_id}`);
    const granted = await approve(tree.token, '/w/t-budget/d');
    expect(granted.body).toMatchObject({ decision: 'grant' });
    expect(await verify()).toMatchObject({ ok: false, first_bad_id: granted.body.audit_id, reason: expect.stringMatching(/past its budget/) });
  });

  test('a capability repointed in the database: refused when its stored chain no longer matches its token, reported when it still does', async () => {
    const other = await mint('t-elsewhere');
    const root = (
      await h.call('POST', '/v1/capabilities', {
        trajectory_id: 't-moved',
        rights: ['read'],
        objects: [{ kind: 'path', prefix: '/w/t-moved' }],
        predicate: { budget: 100, max_calls: 1000, max_depth: 3 },
        ttl_s: 3600,
      })
    ).body as { capability_id: string; token: string };
    const sub = async (token: string, t: string): Promise<{ capability_id: string; token: string }> => {
      const r = await h.call('POST', '/v1/attenuate', {
        parent_token: token,
        trajectory_id: t,
        rights: ['read'],
        objects: [{ kind: 'path', prefix: '/w/t-moved' }],
        ttl_s: 60,
      });
      expect(r.status).toBe(201);
      return r.body as { capability_id: string; token: string };
    };
    const child = await sub(root.token, 't-moved.c');
    const grandchild = await sub(child.token, 't-moved.c.g');
    expect((await h.call('POST', '/v1/revoke', { capability_id: root.capability_id })).status).toBe(200);
    await exec(sql`UPDATE capabilities SET revoked_at = NULL, revoke_reason = NULL WHERE id IN (${child.capability_id}, ${grandchild.capability_id})`);
    // The child moved under another root: its chain no longer ends under its token's parent.
    await exec(sql`UPDATE capabilities SET ancestors = ARRAY[${other.capability_id}] WHERE id = ${child.capability_id}`);
    expect((await approve(child.token, '/w/t-moved/a')).body).toMatchObject({ decision: 'deny', reason: { code: 'bad_token' } });
    // The grandchild moved with its parent kept: the chain matches its token, and its grant lands in
    // the other root's tree, where it was never issued.
    await exec(sql`UPDATE capabilities SET ancestors = ARRAY[${other.capability_id}, ${child.capability_id}] WHERE id = ${grandchild.capability_id}`);
    const granted = await approve(grandchild.token, '/w/t-moved/b');
    expect(granted.body).toMatchObject({ decision: 'grant' });
    expect(await verify()).toMatchObject({ ok: false, first_bad_id: granted.body.audit_id, reason: expect.stringMatching(/was issued in tree/) });
  });
});
