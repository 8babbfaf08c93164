/**
 * The audit hash chain (src/store/audit.ts) and the chain the group-commit writer builds: rowHash
 * covers every column but the hash, verifyChain walks pages against the stored head, and on a real
 * database an edit of any column, a deleted, moved, swapped or appended row, or an edited head is
 * reported by the right first_bad_id, while another tenant's chain still verifies.
 */
import { getTableColumns, sql, type SQL } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createHash } from 'node:crypto';
import canonicalize from 'canonicalize';
import { hashedFields, rowHash, verifyChain, type ChainReport } from '../../src/store/audit.js';
import { audit } from '../../src/store/schema.js';
import { GENESIS_HASH, type AuditRecord } from '../../src/store/store.js';
import { BACKENDS } from '../support/db.js';
import { startHarness, type Harness } from '../support/app.js';

type Row = Omit<AuditRecord, 'hash'>;

/** A well-formed chain of `n` rows for one tenant, as the writer would chain them. */
function chainOf(n: number, tenantId = 'ten_x'): AuditRecord[] {
  const rows: AuditRecord[] = [];
  let prev = GENESIS_HASH;
  for (let i = 1; i <= n; i++) {
    const row: Row = {
      tenantId,
      seq: i,
      id: `aud_${i}`,
      at: new Date(Date.UTC(2026, 5, 1, 12, 0, i)),
      event: 'approve',
      decision: 'grant',
      reasonCode: null,
      capabilityId: 'cap_1',
      parentId: null,
      trajectoryId: 't-1',
      op: 'read',
      target: { kind: 'path', path: `/w/${i}` },
      cost: '1000000',
      callId: null,
      detail: null,
      prevHash: prev,
    };
    const full = { ...row, hash: rowHash(row) };
    rows.push(full);
    prev = full.hash;
  }
  return rows;
}

async function* pagesOf(...pages: AuditRecord[][]): AsyncGenerator<AuditRecord[]> {
  for (const p of pages) yield p;
}

const headOf = (rows: AuditRecord[]): { seq: number; hash: string; lastId: string | null } => {
  const last = rows[rows.length - 1];
  return { seq: rows.length, hash: last?.hash ?? GENESIS_HASH, lastId: last?.id ?? null };
};

/** The audit table's columns by SQL name. */
const COLUMNS = Object.values(getTableColumns(audit)).map((c) => c.name);

describe('rowHash and verifyChain', () => {
  test('rowHash covers every column of the audit table except the hash itself', () => {
    expect(Object.keys(hashedFields(chainOf(1)[0] as Row)).sort()).toEqual(COLUMNS.filter((c) => c !== 'hash').sort());
  });

  // One change per hashed field; each must change the row's hash.
  const EDITS: [string, Partial<Row>][] = [
    ['tenantId', { tenantId: 'ten_y' }],
    ['seq', { seq: 9 }],
    ['id', { id: 'aud_forged' }],
    ['at', { at: new Date(Date.UTC(2026, 5, 1, 12, 0, 1, 1)) }],
    ['event', { event: 'mint' }],
    ['decision', { decision: 'deny' }],
    ['reasonCode', { reasonCode: 'right_missing' }],
    ['capabilityId', { capabilityId: 'cap_2' }],
    ['parentId', { parentId: 'cap_0' }],
    ['trajectoryId', { trajectoryId: 't-2' }],
    ['op', { op: 'write' }],
    ['target', { target: { kind: 'path', path: '/etc/passwd' } }],
    ['cost', { cost: '1000001' }],
    ['callId', { callId: 'c-1' }],
    ['detail', { detail: { message: 'x' } }],
    ['prevHash', { prevHash: 'f'.repeat(64) }],
  ];
  test('every hashed field has an edit case', () => {
    const { hash: _, ...row } = chainOf(1)[0] as AuditRecord;
    expect(EDITS.map(([f]) => f).sort()).toEqual(Object.keys(row).sort());
  });
  test.each(EDITS)('editing %s changes the hash and is found at that row', async (_field, edit) => {
    const rows = chainOf(4);
    const victim = rows[1] as AuditRecord;
    const edited = { ...victim, ...edit };
    expect(rowHash(edited)).not.toBe(victim.hash);
    rows[1] = edited;
    expect(await verifyChain(pagesOf(rows), headOf(chainOf(4)), GENESIS_HASH)).toEqual({ ok: false, firstBadId: edited.id, entries: 2 });
  });

  test('rowHash is SHA-256 of the RFC 8785 form of [prev_hash, fields], as computed independently here', () => {
    const odd = {
      ...(chainOf(1)[0] as Row),
      target: { kind: 'url', url: 'https://exämple.test/a?b=c', nested: { z: [1, 2.5, 'ß\u2028"'], a: null } },
      detail: { violations: [{ component: 'objects', code: 'object_widened' }], emoji: '\u{1F600}', control: '\u0007' },
      cost: '12345678901234567890',
      reasonCode: 'budget_exhausted',
    };
    for (const r of [...chainOf(3), odd] as Row[]) {
      const independent = createHash('sha256')
        .update(canonicalize([r.prevHash, hashedFields(r)]) as string, 'utf8')
        .digest('hex');
      expect(rowHash(r)).toBe(independent);
    }
  });

  test('the hash does not cover itself, so a stored hash can be checked against it', () => {
    const row = chainOf(1)[0] as AuditRecord;
    expect(rowHash({ ...row, hash: 'other' } as Row)).toBe(row.hash);
  });

  test('a well-formed chain verifies across any page split', async () => {
    const rows = chainOf(5);
    const ok: ChainReport = { ok: true, entries: 5, head: (rows[4] as AuditRecord).hash };
    expect(await verifyChain(pagesOf(rows), headOf(rows), GENESIS_HASH)).toEqual(ok);
    expect(await verifyChain(pagesOf(rows.slice(0, 2), [], rows.slice(2, 3), rows.slice(3)), headOf(rows), GENESIS_HASH)).toEqual(ok);
  });

  test('an empty chain verifies against the genesis head only', async () => {
    expect(await verifyChain(pagesOf(), { seq: 0, hash: GENESIS_HASH, lastId: null }, GENESIS_HASH)).toEqual({ ok: true, entries: 0, head: GENESIS_HASH });
    const rows = chainOf(2);
    // Every row deleted: the head still names the last one.
    expect(await verifyChain(pagesOf(), headOf(rows), GENESIS_HASH)).toEqual({ ok: false, firstBadId: 'aud_2', entries: 0 });
  });

  test('a chain that starts from anything but the genesis hash fails at its first row', async () => {
    const rows = chainOf(2);
    expect(await verifyChain(pagesOf(rows), headOf(rows), 'f'.repeat(64))).toEqual({ ok: false, firstBadId: 'aud_1', entries: 1 });
  });

  test('rows past the head, or a head past the rows, fail at the head', async () => {
    const rows = chainOf(3);
    expect(await verifyChain(pagesOf(rows), headOf(rows.slice(0, 2)), GENESIS_HASH)).toEqual({ ok: false, firstBadId: 'aud_2', entries: 3 });
    expect(await verifyChain(pagesOf(rows.slice(0, 2)), headOf(rows), GENESIS_HASH)).toEqual({ ok: false, firstBadId: 'aud_3', entries: 2 });
  });
});

describe.each(BACKENDS)('the written chain on %s', (backend) => {
  let h: Harness;
  /** The whole audit and audit_heads tables as written, to put back after each tamper. */
  let snapshot: { audit: string; heads: string };
  /** Tenant a's rows as written, in seq order. */
  let rowsA: AuditRecord[];

  const rowsOf = (rows: unknown): Record<string, unknown>[] => (Array.isArray(rows) ? rows : (rows as { rows: Record<string, unknown>[] }).rows);

  /** Recomputes a tenant's chain from the store, in pages of 3 so page boundaries are crossed. */
  async function verify(tenantId: string): Promise<ChainReport> {
    const head = await h.store.auditHead(tenantId);
    if (head === null) throw new Error('tenant without an audit head');
    return verifyChain(h.store.auditChain(tenantId, 3), head, GENESIS_HASH);
  }

  async function restore(): Promise<void> {
    await h.database.db.execute(sql`DELETE FROM audit`);
    await h.database.db.execute(sql`INSERT INTO audit SELECT * FROM jsonb_populate_recordset(NULL::audit, ${snapshot.audit}::jsonb)`);
    await h.database.db.execute(
      sql`UPDATE audit_heads h SET seq = s.seq, hash = s.hash, last_id = s.last_id FROM jsonb_populate_recordset(NULL::audit_heads, ${snapshot.heads}::jsonb) s WHERE h.tenant_id = s.tenant_id`,
    );
  }

  /** Runs a tamper, checks tenant a's report (and that tenant b is untouched), and puts the tables back. */
  async function expectTamper(statements: SQL[], expected: { firstBadId: string; entries: number }): Promise<void> {
    try {
      for (const s of statements) await h.database.db.execute(s);
      expect(await verify(h.tenantIds.a)).toEqual({ ok: false, ...expected });
      expect(await verify(h.tenantIds.b)).toMatchObject({ ok: true });
    } finally {
      await restore();
    }
    expect(await verify(h.tenantIds.a)).toMatchObject({ ok: true });
  }

  beforeAll(async () => {
    h = await startHarness(backend);
    const mint = async (as: 'a' | 'b', t: string, predicate: Record<string, unknown> = { budget: 10, max_calls: 100, max_depth: 3 }) => {
      const r = await h.call(
        'POST',
        '/v1/capabilities',
        { trajectory_id: t, rights: ['read', 'write'], objects: [{ kind: 'path', prefix: `/w/${t}` }], predicate, ttl_s: 3600 },
        { as },
      );
      expect(r.status).toBe(201);
      return r.body as { capability_id: string; token: string };
    };
    const approve = (as: 'a' | 'b', token: string, path: string, over: Record<string, unknown> = {}) =>
      h.call('POST', '/v1/approve', { token, op: 'read', target: { kind: 'path', path }, cost: 0.5, ...over }, { as });

    // Every kind of decision, for both tenants, many of them at once so batches mix the tenants.
    const [ra, rb] = await Promise.all([mint('a', 'ca'), mint('b', 'cb')]);
    const child = await h.call('POST', '/v1/attenuate', {
      parent_token: ra.token,
      rights: ['read'],
      objects: [{ kind: 'path', prefix: '/w/ca/sub' }],
      predicate: { budget: 5, max_calls: 50, max_depth: 1 },
    });
    expect(child.status).toBe(201);
    const refused = await h.call('POST', '/v1/attenuate', { parent_token: ra.token, rights: ['execute'], objects: [{ kind: 'path', prefix: '/' }] });
    expect(refused.status).toBe(403);
    await Promise.all([
      approve('a', child.body.token, '/w/ca/sub/x', { call_id: 'c-1', args: { n: 1 } }),
      approve('b', rb.token, '/w/cb/x'),
      approve('a', ra.token, '/elsewhere'),
      approve('b', rb.token, '/w/cb/y', { op: 'write' }),
      approve('a', 'not-a-token', '/w/ca/x'),
      approve('b', ra.token, '/w/ca/x'),
      approve('a', ra.token, '/w/ca/y', { cost: 100 }),
      approve('a', child.body.token, '/w/ca/sub/y', { call_id: 'c-2' }),
    ]);
    const other = await mint('a', 'ca2');
    expect((await h.call('POST', '/v1/revoke', { capability_id: other.capability_id, reason: 'done' })).status).toBe(200);
    await approve('a', other.token, '/w/ca2/x');

    const [a] = rowsOf(await h.database.db.execute(sql`SELECT coalesce(jsonb_agg(to_jsonb(x) ORDER BY tenant_id, seq), '[]')::text AS j FROM audit x`));
    const [hd] = rowsOf(await h.database.db.execute(sql`SELECT coalesce(jsonb_agg(to_jsonb(x)), '[]')::text AS j FROM audit_heads x`));
    snapshot = { audit: String(a?.j), heads: String(hd?.j) };
    rowsA = [];
    for await (const page of h.store.auditChain(h.tenantIds.a)) rowsA.push(...page);
  });
  afterAll(async () => h.close());

  /** Tenant a's grant of `c-1`: a middle row with a parent, a cost, a call id, a target and args. */
  const victim = (): { row: AuditRecord; at: number } => {
    const at = rowsA.findIndex((r) => r.callId === 'c-1');
    return { row: rowsA[at] as AuditRecord, at };
  };

  test('the writer chains each tenant from genesis: contiguous seq, linked hashes, the head on the last row', async () => {
    const rowsB: AuditRecord[] = [];
    for await (const page of h.store.auditChain(h.tenantIds.b)) rowsB.push(...page);
    for (const [tenantId, rows] of [
      [h.tenantIds.a, rowsA],
      [h.tenantIds.b, rowsB],
    ] as const) {
      expect(rows.length).toBeGreaterThan(3);
      rows.forEach((r, i) => {
        expect(r.tenantId).toBe(tenantId);
        expect(Number(r.seq)).toBe(i + 1);
        expect(r.prevHash).toBe(i === 0 ? GENESIS_HASH : rows[i - 1]?.hash);
        expect(r.hash).toBe(rowHash(r));
      });
      const last = rows[rows.length - 1] as AuditRecord;
      expect(await h.store.auditHead(tenantId)).toEqual({ seq: rows.length, hash: last.hash, lastId: last.id });
      expect(await verify(tenantId)).toEqual({ ok: true, entries: rows.length, head: last.hash });
    }
    // The mix holds every event and both decisions, so every kind of row went through the chain.
    expect(new Set(rowsA.map((r) => `${r.event}:${r.decision}`))).toEqual(
      new Set(['mint:grant', 'attenuate:grant', 'attenuate:deny', 'approve:grant', 'approve:deny', 'revoke:grant']),
    );
    const v = victim();
    expect(v.at).toBeGreaterThan(0);
    expect(v.at).toBeLessThan(rowsA.length - 1);
    expect(v.row).toMatchObject({ parentId: expect.any(String), cost: expect.any(String), op: 'read', decision: 'grant' });
  });

  // Each stored column edited in place on the victim row; the id edit is reported under the new id.
  const COLUMN_EDITS: [string, SQL, (id: string) => string][] = [
    ['at', sql`at = at + interval '1 millisecond'`, (id) => id],
    ['event', sql`event = 'mint'`, (id) => id],
    ['decision', sql`decision = 'deny'`, (id) => id],
    ['reason_code', sql`reason_code = 'right_missing'`, (id) => id],
    ['capability_id', sql`capability_id = 'cap_forged'`, (id) => id],
    ['parent_id', sql`parent_id = NULL`, (id) => id],
    ['trajectory_id', sql`trajectory_id = 'forged'`, (id) => id],
    ['op', sql`op = 'execute'`, (id) => id],
    ['target', sql`target = '{"kind":"path","path":"/etc/passwd"}'::jsonb`, (id) => id],
    ['cost', sql`cost = cost - 1`, (id) => id],
    ['call_id', sql`call_id = 'c-forged'`, (id) => id],
    ['detail', sql`detail = '{"message":"forged"}'::jsonb`, (id) => id],
    ['prev_hash', sql`prev_hash = ${GENESIS_HASH}`, (id) => id],
    ['hash', sql`hash = ${'f'.repeat(64)}`, (id) => id],
    ['id', sql`id = id || 'x'`, (id) => `${id}x`],
  ];

  test('every column but seq and tenant_id (moved rows, below) has an edit case', () => {
    expect([...COLUMN_EDITS.map(([c]) => c), 'seq', 'tenant_id'].sort()).toEqual([...COLUMNS].sort());
  });

  test.each(COLUMN_EDITS)('an edited %s is reported at that row', async (_column, set, reportedId) => {
    const { row, at } = victim();
    await expectTamper([sql`UPDATE audit SET ${set} WHERE id = ${row.id}`], { firstBadId: reportedId(row.id), entries: at + 1 });
  });

  test('a deleted row is reported at the row after it', async () => {
    const { row, at } = victim();
    await expectTamper([sql`DELETE FROM audit WHERE id = ${row.id}`], { firstBadId: rowsA[at + 1]!.id, entries: at + 1 });
  });

  test('a row moved to the end of the chain is reported where it went missing', async () => {
    const { row, at } = victim();
    await expectTamper([sql`UPDATE audit SET seq = seq + 1000 WHERE id = ${row.id}`], { firstBadId: rowsA[at + 1]!.id, entries: at + 1 });
  });

  test("a row moved into tenant b's log is missing from a's chain, and b's chain reports it", async () => {
    const { row, at } = victim();
    try {
      await h.database.db.execute(sql`UPDATE audit SET tenant_id = ${h.tenantIds.b}, seq = seq + 1000 WHERE id = ${row.id}`);
      expect(await verify(h.tenantIds.a)).toEqual({ ok: false, firstBadId: rowsA[at + 1]!.id, entries: at + 1 });
      expect(await verify(h.tenantIds.b)).toMatchObject({ ok: false, firstBadId: row.id });
    } finally {
      await restore();
    }
    expect(await verify(h.tenantIds.b)).toMatchObject({ ok: true });
  });

  test('two rows with their seq swapped are reported at the first out of place', async () => {
    const { row, at } = victim();
    const next = rowsA[at + 1]!;
    // Through a free seq: the primary key (tenant_id, seq) is checked row by row.
    await expectTamper(
      [
        sql`UPDATE audit SET seq = -1 WHERE id = ${row.id}`,
        sql`UPDATE audit SET seq = ${Number(row.seq)} WHERE id = ${next.id}`,
        sql`UPDATE audit SET seq = ${Number(next.seq)} WHERE id = ${row.id}`,
      ],
      { firstBadId: next.id, entries: at + 1 },
    );
  });

  test('the last row deleted is reported as the id the head still names', async () => {
    const last = rowsA[rowsA.length - 1]!;
    await expectTamper([sql`DELETE FROM audit WHERE id = ${last.id}`], { firstBadId: last.id, entries: rowsA.length - 1 });
  });

  test('a well-chained row appended without moving the head is reported at the head', async () => {
    const last = rowsA[rowsA.length - 1]!;
    const forged: Row = { ...last, seq: Number(last.seq) + 1, id: 'aud_forged', decision: 'grant', prevHash: last.hash };
    const row = { ...forged, hash: rowHash(forged) };
    await expectTamper(
      [sql`INSERT INTO audit SELECT * FROM jsonb_populate_recordset(NULL::audit, ${JSON.stringify([{ ...hashedFields(row), hash: row.hash }])}::jsonb)`],
      { firstBadId: last.id, entries: rowsA.length + 1 },
    );
  });

  const HEAD_EDITS: [string, SQL, (rows: AuditRecord[]) => string][] = [
    ['its hash', sql`hash = ${'e'.repeat(64)}`, (rows) => rows[rows.length - 1]!.id],
    ['its seq', sql`seq = seq - 1`, (rows) => rows[rows.length - 1]!.id],
    ['it put back to genesis', sql`seq = 0, hash = ${GENESIS_HASH}, last_id = NULL`, () => 'head'],
  ];
  test.each(HEAD_EDITS)('the head with %s edited is reported at the head', async (_name, set, reported) => {
    await expectTamper([sql`UPDATE audit_heads SET ${set} WHERE tenant_id = ${h.tenantIds.a}`], { firstBadId: reported(rowsA), entries: rowsA.length });
  });

  test('GET /v1/audit/verify shows the same report, each tenant seeing only its own chain', async () => {
    const { row, at } = victim();
    try {
      await h.database.db.execute(sql`UPDATE audit SET cost = cost + 1 WHERE id = ${row.id}`);
      expect((await h.call('GET', '/v1/audit/verify')).body).toEqual({ ok: false, first_bad_id: row.id, entries: at + 1 });
      expect((await h.call('GET', '/v1/audit/verify', undefined, { as: 'b' })).body).toMatchObject({ ok: true });
    } finally {
      await restore();
    }
    expect((await h.call('GET', '/v1/audit/verify')).body).toEqual({ ok: true, entries: rowsA.length, head: rowsA[rowsA.length - 1]!.hash });
  });
});
