/**
 * The audit hash chains (src/store/audit.ts) and the chains the group-commit writer builds: one per
 * delegation tree (tree_id = its root capability's id) and one per tenant ('') for the decisions of
 * no known tree. rowHash covers every column but the hash and the listing pos, verifyChains walks a
 * tenant's rows in (tree_id, seq) order against each tree's stored head, and on a real database an
 * edit of any column, a deleted, moved, swapped or appended row, a row moved to another tree or
 * tenant, a whole chain relabelled, or an edited head is reported by the right first_bad_id, while
 * another tenant's chains still verify.
 */
import { getTableColumns, sql, type SQL } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createHash } from 'node:crypto';
import canonicalize from 'canonicalize';
import fc from 'fast-check';
import { canonicalJson } from '../../src/crypto/hash.js';
import { canonicalRow, hashedFields, rowHash, verifyChains, type ChainHead, type ChainReport, type HashedRow } from '../../src/store/audit.js';
import { audit } from '../../src/store/schema.js';
import { GENESIS_HASH, type AuditRecord } from '../../src/store/store.js';
import { BACKENDS } from '../support/db.js';
import { startHarness, type Harness } from '../support/app.js';

type Row = Omit<AuditRecord, 'hash' | 'pos'>;

/**
 * A well-formed chain of `n` rows of one tree ('' for the tenant's own chain), as the writer would
 * chain it: from `prev` (the genesis hash) and seq `firstSeq` (1). The other two let a test build
 * a chain that wrongly runs on from another tree.
 */
function chainOf(n: number, treeId: string, o: { tenantId?: string; prev?: string; firstSeq?: number } = {}): AuditRecord[] {
  const rows: AuditRecord[] = [];
  let prev = o.prev ?? GENESIS_HASH;
  const first = o.firstSeq ?? 1;
  for (let seq = first; seq < first + n; seq++) {
    const row: Row = {
      tenantId: o.tenantId ?? 'ten_x',
      treeId,
      seq,
      id: `aud_${treeId === '' ? 'tenant' : treeId}_${seq}`,
      at: new Date(Date.UTC(2026, 5, 1, 12, 0, seq)),
      event: 'approve',
      decision: 'grant',
      reasonCode: null,
      capabilityId: treeId === '' ? null : treeId,
      parentId: null,
      trajectoryId: 't-1',
      op: 'read',
      target: { kind: 'path', path: `/w/${seq}` },
      cost: '1000000',
      callId: null,
      detail: null,
      // Set, so that the hash covers them (issue 14: they are hashed only when set).
      keyId: 'key_test',
      requestId: `req_${seq}`,
      rootTrajectoryId: 't-1',
      prevHash: prev,
    };
    // pos only orders the listing: any value will do, the hash does not cover it.
    const full: AuditRecord = { ...row, pos: 0, hash: rowHash(row) };
    rows.push(full);
    prev = full.hash;
  }
  return rows;
}

/** The trees of FOREST in the order the store reads them: by tree_id, so the tenant's own chain first. */
const TREES = ['', 'cap_r1', 'cap_r2', 'cap_r3'] as const;
/** A tenant's rows as auditChain pages them, (tree_id, seq) order: four chains of different lengths. */
const FOREST: readonly AuditRecord[] = [...chainOf(2, ''), ...chainOf(3, 'cap_r1'), ...chainOf(4, 'cap_r2'), ...chainOf(2, 'cap_r3')];

async function* pagesOf(...pages: readonly AuditRecord[][]): AsyncGenerator<AuditRecord[]> {
  for (const p of pages) yield p;
}

/** The heads the writer leaves for these rows: each tree's last seq, hash and id. */
function headsOf(rows: readonly AuditRecord[]): Map<string, ChainHead> {
  const heads = new Map<string, ChainHead>();
  for (const r of rows) heads.set(r.treeId, { seq: Number(r.seq), hash: r.hash, lastId: r.id });
  return heads;
}

/** The index of a tree's last row in a walk (-1 when it has none). */
const lastIndexIn = (rows: readonly AuditRecord[], treeId: string): number => rows.map((r) => r.treeId).lastIndexOf(treeId);

const verifyForest = (rows: readonly AuditRecord[], heads: ReadonlyMap<string, ChainHead> = headsOf(FOREST)): Promise<ChainReport> =>
  verifyChains(pagesOf([...rows]), heads, GENESIS_HASH);

/** The audit table's columns by SQL name. */
const COLUMNS = Object.values(getTableColumns(audit)).map((c) => c.name);

describe('rowHash and verifyChains', () => {
  test('rowHash covers every column of the audit table but the hash itself and the listing pos', () => {
    const treeRow = FOREST.find((r) => r.treeId === 'cap_r1') as AuditRecord;
    expect(Object.keys(hashedFields(treeRow)).sort()).toEqual(COLUMNS.filter((c) => c !== 'hash' && c !== 'pos').sort());
    // The tenant's own chain leaves tree_id out, so its rows written before trees had chains keep their hashes.
    const streamRow = FOREST.find((r) => r.treeId === '') as AuditRecord;
    expect(Object.keys(hashedFields(streamRow)).sort()).toEqual(COLUMNS.filter((c) => !['hash', 'pos', 'tree_id'].includes(c)).sort());
    // Which of the two a row is is covered all the same: a tree's row relabelled '' no longer matches its hash.
    expect(rowHash({ ...treeRow, treeId: '' })).not.toBe(treeRow.hash);
  });

  /** The first row of the third chain: rows of two other trees come before it in the walk. */
  const VICTIM_AT = FOREST.findIndex((r) => r.treeId === 'cap_r2');

  // One change per hashed field; each must change the row's hash.
  const EDITS: [string, Partial<Row>][] = [
    ['tenantId', { tenantId: 'ten_y' }],
    // A tree that sorts between cap_r1 and cap_r2, so the store would still page the row where it was.
    ['treeId', { treeId: 'cap_r1z' }],
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
    ['keyId', { keyId: 'key_other' }],
    ['requestId', { requestId: 'req_other' }],
    ['rootTrajectoryId', { rootTrajectoryId: 't-other' }],
    ['prevHash', { prevHash: 'f'.repeat(64) }],
  ];
  test('every hashed field has an edit case', () => {
    const { hash: _h, pos: _p, ...row } = FOREST[VICTIM_AT] as AuditRecord;
    expect(EDITS.map(([f]) => f).sort()).toEqual(Object.keys(row).sort());
  });
  test.each(EDITS)('editing %s changes the hash and is found at that row', async (_field, edit) => {
    const rows = [...FOREST];
    const victim = rows[VICTIM_AT] as AuditRecord;
    expect(VICTIM_AT).toBeGreaterThan(lastIndexIn(FOREST, 'cap_r1'));
    const edited = { ...victim, ...edit };
    expect(rowHash(edited)).not.toBe(victim.hash);
    rows[VICTIM_AT] = edited;
    expect(await verifyForest(rows)).toEqual({ ok: false, firstBadId: edited.id, entries: VICTIM_AT + 1 });
  });

  test('rowHash is SHA-256 of the RFC 8785 form of [prev_hash, fields], as computed independently here', () => {
    const odd = {
      ...(FOREST[0] as Row),
      target: { kind: 'url', url: 'https://exämple.test/a?b=c', nested: { z: [1, 2.5, 'ß\u2028"'], a: null } },
      detail: { violations: [{ component: 'objects', code: 'object_widened' }], emoji: '\u{1F600}', control: '\u0007' },
      cost: '12345678901234567890',
      reasonCode: 'budget_exhausted',
    };
    for (const r of [...FOREST, odd, { ...odd, treeId: 'cap_ünï' }] as Row[]) {
      const independent = createHash('sha256')
        .update(canonicalize([r.prevHash, hashedFields(r)]) as string, 'utf8')
        .digest('hex');
      expect(rowHash(r)).toBe(independent);
    }
  });

  describe('canonicalRow, the serializer the writer seals with', () => {
    // Well-formed text of every kind: quotes, escapes, controls, line separators, non-ASCII and astral pairs.
    const wellFormedUnit = fc.oneof(
      fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }),
      fc.constantFrom('"', '\\', '\n', '\u0000', '\u2028', 'ß', '\u{1F600}', 'a', '_'),
    );
    /** Rows whose strings come from `unit`; optional columns null, undefined or set, as the writer and old rows give them. */
    const rows = (unit: fc.Arbitrary<string>) => {
      const text = fc.string({ unit, maxLength: 12 });
      const nullable = fc.option(text, { nil: null });
      const absent = fc.oneof(text, fc.constant(null), fc.constant(undefined));
      const json = fc.jsonValue({ maxDepth: 3 });
      return fc.record({
        tenantId: text,
        treeId: fc.oneof(fc.constant(''), text),
        seq: fc.oneof(fc.integer({ min: 1, max: 2 ** 31 }), fc.constant(Number.MAX_SAFE_INTEGER)),
        id: text,
        at: fc.date({ min: new Date(0), max: new Date(Date.UTC(9999, 0)), noInvalidDate: true }),
        event: text,
        decision: text,
        reasonCode: nullable,
        capabilityId: nullable,
        parentId: nullable,
        trajectoryId: nullable,
        op: nullable,
        target: fc.oneof(fc.constant(null), fc.constant(undefined), json),
        cost: fc.option(fc.bigInt({ min: 0n, max: 10n ** 20n }).map(String), { nil: null }),
        callId: nullable,
        detail: fc.oneof(fc.constant(null), fc.constant(undefined), json),
        keyId: absent,
        requestId: absent,
        rootTrajectoryId: absent,
        prevHash: text,
      }) as unknown as fc.Arbitrary<HashedRow>;
    };

    test('is the RFC 8785 text of hashedFields (canonicalize) on generated well-formed rows, every optional column present and absent', () => {
      const seen = { keyId: 0, requestId: 0, rootTrajectoryId: 0, tree: 0 };
      fc.assert(
        fc.property(rows(wellFormedUnit), (r) => {
          if (typeof r.keyId === 'string') seen.keyId++;
          if (typeof r.requestId === 'string') seen.requestId++;
          if (typeof r.rootTrajectoryId === 'string') seen.rootTrajectoryId++;
          if (r.treeId !== '') seen.tree++;
          expect(canonicalRow(r)).toBe(canonicalJson(hashedFields(r)));
        }),
        { numRuns: 3000 },
      );
      // The comparison ran with the conditional keys written, not only left out.
      for (const n of Object.values(seen)) expect(n).toBeGreaterThan(500);
    });

    test('refuses a lone surrogate in any string column, as the library does', () => {
      const lone = fc.constantFrom('\uD800', '\uDBFF', '\uDC00', '\uDFFF');
      const columns = ['tenantId', 'treeId', 'id', 'event', 'decision', 'reasonCode', 'capabilityId', 'parentId', 'trajectoryId', 'op', 'callId'] as const;
      const optional = ['keyId', 'requestId', 'rootTrajectoryId', 'prevHash'] as const;
      fc.assert(
        fc.property(
          rows(wellFormedUnit),
          fc.constantFrom(...columns, ...optional),
          lone,
          fc.string({ unit: wellFormedUnit, maxLength: 4 }),
          (r, column, bad, rest) => {
            const row = { ...r, [column]: `${rest}${bad}${rest}` } as HashedRow;
            expect(() => canonicalJson(hashedFields(row))).toThrow();
            expect(() => canonicalRow(row)).toThrow();
          },
        ),
        { numRuns: 500 },
      );
    });
  });

  test('the hash covers neither itself nor pos, so a stored hash can be checked and the listing renumbered', () => {
    const row = FOREST[3] as AuditRecord;
    const other = { ...row, hash: 'other', pos: 12345 };
    expect(rowHash(other)).toBe(row.hash);
  });

  test('a well-formed forest verifies across any page split, trees meeting inside a page or at its edge', async () => {
    const ok: ChainReport = { ok: true, entries: FOREST.length, trees: TREES.length };
    for (let i = 0; i <= FOREST.length; i++) {
      expect(await verifyChains(pagesOf(FOREST.slice(0, i), [], FOREST.slice(i)), headsOf(FOREST), GENESIS_HASH)).toEqual(ok);
    }
    expect(await verifyChains(pagesOf(...FOREST.map((r) => [r])), headsOf(FOREST), GENESIS_HASH)).toEqual(ok);
  });

  test('an empty log verifies against heads still at genesis only', async () => {
    const empty: ChainReport = { ok: true, entries: 0, trees: 0 };
    expect(await verifyChains(pagesOf(), new Map(), GENESIS_HASH)).toEqual(empty);
    // A fresh tenant's own head, and a tree head at genesis: no rows are owed to either.
    const genesis: ChainHead = { seq: 0, hash: GENESIS_HASH, lastId: null };
    expect(
      await verifyChains(
        pagesOf(),
        new Map([
          ['', genesis],
          ['cap_r1', genesis],
        ]),
        GENESIS_HASH,
      ),
    ).toEqual(empty);
  });

  test('a chain that starts from anything but the genesis hash fails at its first row', async () => {
    expect(await verifyChains(pagesOf([...FOREST]), headsOf(FOREST), 'f'.repeat(64))).toEqual({ ok: false, firstBadId: FOREST[0]?.id, entries: 1 });
  });

  // The writer of one chain per tenant ran seq and prev_hash on across trees; each tree starts afresh.
  test.each([
    ['prev_hash', (first: AuditRecord[]) => ({ prev: (first[2] as AuditRecord).hash })],
    ['seq', () => ({ firstSeq: 4 })],
  ])('a tree whose first row runs on from the tree before it (%s) fails at that row', async (_what, runOn) => {
    const first = chainOf(3, 'cap_r1');
    const second = chainOf(2, 'cap_r2', runOn(first));
    const rows = [...first, ...second];
    expect(await verifyForest(rows, headsOf(rows))).toEqual({ ok: false, firstBadId: second[0]?.id, entries: 4 });
  });

  describe.each(TREES)('tree %j', (tree) => {
    const at = lastIndexIn(FOREST, tree);
    const last = FOREST[at] as AuditRecord;
    const withHead = (head: ChainHead | undefined): Map<string, ChainHead> => {
      const heads = headsOf(FOREST);
      if (head === undefined) heads.delete(tree);
      else heads.set(tree, head);
      return heads;
    };

    test('its last row cut off is reported as the id its head still names', async () => {
      expect(await verifyForest(FOREST.filter((r) => r !== last))).toEqual({ ok: false, firstBadId: last.id, entries: at });
    });

    test("all its rows gone are reported as its head's last id, after walking every other tree", async () => {
      const rest = FOREST.filter((r) => r.treeId !== tree);
      expect(await verifyForest(rest)).toEqual({ ok: false, firstBadId: last.id, entries: rest.length });
    });

    const before = FOREST[at - 1] as AuditRecord;
    // Each head as an attacker might leave it; the walk reaches the tree's end and finds it wrong.
    test.each([
      ['a row behind', { seq: Number(before.seq), hash: before.hash, lastId: before.id }, before.id],
      ['its hash edited', { seq: Number(last.seq), hash: 'e'.repeat(64), lastId: last.id }, last.id],
      ['its seq edited', { seq: Number(last.seq) + 1, hash: last.hash, lastId: last.id }, last.id],
      ['back at genesis', { seq: 0, hash: GENESIS_HASH, lastId: null }, last.id],
      ['missing', undefined, last.id],
    ])("its head %s fails at the tree's end", async (_name, head, reported) => {
      expect(await verifyForest(FOREST, withHead(head))).toEqual({ ok: false, firstBadId: reported, entries: at + 1 });
    });
  });
});

/** Tenant a's chains in the written log: its own, and the trees of its two roots (`ca` and `ca2`). */
type TreeKey = 'own' | 'first' | 'second';
const TREES_OF_A: { key: TreeKey; name: string }[] = [
  { key: 'own', name: "tenant a's own chain" },
  { key: 'first', name: "tenant a's first tree" },
  { key: 'second', name: "tenant a's second tree" },
];

describe.each(BACKENDS)('the written chains on %s', (backend) => {
  let h: Harness;
  /** The whole audit and audit_heads tables as written, to put back after each tamper. */
  let snapshot: { audit: string; heads: string };
  /** Tenant a's rows as written, in the (tree_id, seq) order verifyChains walks them. */
  let rowsA: AuditRecord[];
  /** Tenant a's chains by key: its own chain (''), the tree of `ca` and that of `ca2`. */
  let trees: Record<TreeKey, string>;

  const rowsOf = (rows: unknown): Record<string, unknown>[] => (Array.isArray(rows) ? rows : (rows as { rows: Record<string, unknown>[] }).rows);

  async function chainRows(tenantId: string): Promise<AuditRecord[]> {
    const rows: AuditRecord[] = [];
    for await (const page of h.store.auditChain(tenantId)) rows.push(...page);
    return rows;
  }

  /** Recomputes a tenant's chains from the store, in pages of 3 so page and tree boundaries are crossed. */
  async function verify(tenantId: string): Promise<ChainReport> {
    return verifyChains(h.store.auditChain(tenantId, 3), await h.store.auditHeads(tenantId), GENESIS_HASH);
  }

  async function restore(): Promise<void> {
    await h.database.db.execute(sql`DELETE FROM audit`);
    await h.database.db.execute(sql`INSERT INTO audit SELECT * FROM jsonb_populate_recordset(NULL::audit, ${snapshot.audit}::jsonb)`);
    // Every head back as written, keyed by (tenant_id, tree_id): a tamper may have edited, deleted or relabelled one.
    await h.database.db.execute(sql`DELETE FROM audit_heads`);
    await h.database.db.execute(sql`INSERT INTO audit_heads SELECT * FROM jsonb_populate_recordset(NULL::audit_heads, ${snapshot.heads}::jsonb)`);
  }

  /**
   * Runs a tamper, checks tenant a's report (and tenant b's: untouched unless said), and puts the
   * tables back.
   */
  async function expectTamper(statements: SQL[], expected: { firstBadId: string; entries: number }, b: Partial<ChainReport> = { ok: true }): Promise<void> {
    try {
      for (const s of statements) await h.database.db.execute(s);
      expect(await verify(h.tenantIds.a)).toEqual({ ok: false, ...expected });
      expect(await verify(h.tenantIds.b)).toMatchObject(b);
    } finally {
      await restore();
    }
    expect(await verify(h.tenantIds.a)).toMatchObject({ ok: true });
    expect(await verify(h.tenantIds.b)).toMatchObject({ ok: true });
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
    const attenuate = (parentToken: string, rights: string[], prefix: string) =>
      h.call('POST', '/v1/attenuate', {
        parent_token: parentToken,
        rights,
        objects: [{ kind: 'path', prefix }],
        predicate: { budget: 5, max_calls: 50, max_depth: 1 },
      });

    // Every kind of decision, for both tenants, many of them at once so batches mix tenants and trees.
    const [ra, rb] = await Promise.all([mint('a', 'ca'), mint('b', 'cb')]);
    const child = await attenuate(ra.token, ['read'], '/w/ca/sub');
    expect(child.status).toBe(201);
    // Refused for what it asks of a valid parent: that parent's tree.
    expect((await attenuate(ra.token, ['execute'], '/')).status).toBe(403);
    // Refused for the parent itself, a bad token or another tenant's: no known tree, so a's own chain.
    expect((await attenuate('not-a-token', ['read'], '/w/ca')).status).toBe(403);
    expect((await attenuate(rb.token, ['read'], '/w/cb')).status).toBe(403);
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
    // So that the victim (c-1) is never its tree's last row, whatever order the batch took.
    expect((await approve('a', ra.token, '/w/ca/z')).body.decision).toBe('grant');
    const other = await mint('a', 'ca2');
    expect((await h.call('POST', '/v1/revoke', { capability_id: other.capability_id, reason: 'done' })).status).toBe(200);
    expect((await approve('a', other.token, '/w/ca2/x')).body.reason.code).toBe('revoked');
    trees = { own: '', first: ra.capability_id, second: other.capability_id };

    const [a] = rowsOf(
      await h.database.db.execute(sql`SELECT coalesce(jsonb_agg(to_jsonb(x) ORDER BY tenant_id, tree_id, seq), '[]')::text AS j FROM audit x`),
    );
    const [hd] = rowsOf(await h.database.db.execute(sql`SELECT coalesce(jsonb_agg(to_jsonb(x)), '[]')::text AS j FROM audit_heads x`));
    snapshot = { audit: String(a?.j), heads: String(hd?.j) };
    rowsA = await chainRows(h.tenantIds.a);
  });
  afterAll(async () => h.close());

  /** The index of a tree's last row in tenant a's walk. */
  const lastAt = (treeId: string): number => lastIndexIn(rowsA, treeId);

  /** Tenant a's grant of `c-1`: a middle row of the first tree with a parent, a cost, a call id, a target and args. */
  const victim = (): { row: AuditRecord; at: number } => {
    const at = rowsA.findIndex((r) => r.callId === 'c-1');
    return { row: rowsA[at] as AuditRecord, at };
  };

  test('the writer chains each tree from genesis: contiguous seq, linked hashes, the head on the last row', async () => {
    const rowsB = await chainRows(h.tenantIds.b);
    for (const [tenantId, rows] of [
      [h.tenantIds.a, rowsA],
      [h.tenantIds.b, rowsB],
    ] as const) {
      expect(rows.length).toBeGreaterThan(3);
      const expectedHeads = new Map<string, ChainHead>([['', { seq: 0, hash: GENESIS_HASH, lastId: null }]]);
      const treeIds = [...new Set(rows.map((r) => r.treeId))];
      for (const treeId of treeIds) {
        const chain = rows.filter((r) => r.treeId === treeId);
        // A tree's rows come together in the walk.
        expect(rows.slice(rows.indexOf(chain[0] as AuditRecord), lastIndexIn(rows, treeId) + 1)).toEqual(chain);
        chain.forEach((r, i) => {
          expect(r.tenantId).toBe(tenantId);
          expect(Number(r.seq)).toBe(i + 1);
          expect(r.prevHash).toBe(i === 0 ? GENESIS_HASH : chain[i - 1]?.hash);
          expect(r.hash).toBe(rowHash(r));
        });
        // A tree starts with the mint of its root, whose id names it.
        if (treeId !== '') expect(chain[0]).toMatchObject({ event: 'mint', decision: 'grant', capabilityId: treeId });
        const last = chain[chain.length - 1] as AuditRecord;
        expectedHeads.set(treeId, { seq: chain.length, hash: last.hash, lastId: last.id });
      }
      expect(await h.store.auditHeads(tenantId)).toEqual(expectedHeads);
      expect(await verify(tenantId)).toEqual({ ok: true, entries: rows.length, trees: treeIds.length });
    }
    expect(new Set(rowsA.map((r) => r.treeId))).toEqual(new Set(Object.values(trees)));

    // Each row of a tree concerns a capability of that tree (its own, or the parent a refused attenuation named).
    const caps = rowsOf(await h.database.db.execute(sql`SELECT id, coalesce(ancestors[1], id) AS root FROM capabilities WHERE tenant_id = ${h.tenantIds.a}`));
    const rootOf = new Map(caps.map((c) => [String(c.id), String(c.root)]));
    for (const r of rowsA.filter((x) => x.treeId !== '')) expect(rootOf.get(r.capabilityId ?? r.parentId ?? '')).toBe(r.treeId);
    expect(rowsA.find((r) => r.event === 'attenuate' && r.decision === 'deny' && r.parentId !== null)?.treeId).toBe(trees.first);
    // The tenant's own chain holds the decisions of no known tree, in the order they were made.
    expect(rowsA.filter((r) => r.treeId === '')).toMatchObject([
      { event: 'attenuate', decision: 'deny', reasonCode: 'parent_invalid', capabilityId: null, parentId: null },
      { event: 'attenuate', decision: 'deny', reasonCode: 'parent_invalid', capabilityId: null, parentId: null },
      { event: 'approve', decision: 'deny', capabilityId: null, target: { path: '/w/ca/x' } },
    ]);
    // Tenant b's holds the approval it was shown a's token for; that token's tree is no tree of b's.
    expect(rowsB.filter((r) => r.treeId === '')).toMatchObject([{ event: 'approve', decision: 'deny', reasonCode: 'tenant_mismatch', capabilityId: null }]);

    // The mix holds every event and both decisions, so every kind of row went through the chains.
    expect(new Set(rowsA.map((r) => `${r.event}:${r.decision}`))).toEqual(
      new Set(['mint:grant', 'attenuate:grant', 'attenuate:deny', 'approve:grant', 'approve:deny', 'revoke:grant']),
    );
    const v = victim();
    expect(v.row.treeId).toBe(trees.first);
    expect(Number(v.row.seq)).toBeGreaterThan(1);
    expect(v.at).toBeLessThan(lastAt(v.row.treeId));
    // Rows of another tree come before it in the walk, so entry counts cross a tree boundary.
    expect(v.at).toBeGreaterThan(Number(v.row.seq));
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
    ['key_id', sql`key_id = 'key_forged'`, (id) => id],
    ['request_id', sql`request_id = 'req_forged'`, (id) => id],
    ['root_trajectory_id', sql`root_trajectory_id = 'forged'`, (id) => id],
    ['prev_hash', sql`prev_hash = ${GENESIS_HASH}`, (id) => id],
    ['hash', sql`hash = ${'f'.repeat(64)}`, (id) => id],
    ['id', sql`id = id || 'x'`, (id) => `${id}x`],
  ];

  test('every column but seq, tenant_id and tree_id (moved rows, below) and pos (no chain covers it) has an edit case', () => {
    expect([...COLUMN_EDITS.map(([c]) => c), 'seq', 'tenant_id', 'tree_id', 'pos'].sort()).toEqual([...COLUMNS].sort());
  });

  test.each(COLUMN_EDITS)('an edited %s is reported at that row', async (_column, set, reportedId) => {
    const { row, at } = victim();
    await expectTamper([sql`UPDATE audit SET ${set} WHERE id = ${row.id}`], { firstBadId: reportedId(row.id), entries: at + 1 });
  });

  test('a deleted row is reported at the row after it in its tree', async () => {
    const { row, at } = victim();
    await expectTamper([sql`DELETE FROM audit WHERE id = ${row.id}`], { firstBadId: rowsA[at + 1]!.id, entries: at + 1 });
  });

  test('a row moved to the end of its tree is reported where it went missing', async () => {
    const { row, at } = victim();
    await expectTamper([sql`UPDATE audit SET seq = seq + 1000 WHERE id = ${row.id}`], { firstBadId: rowsA[at + 1]!.id, entries: at + 1 });
  });

  test('two rows with their seq swapped are reported at the first out of place', async () => {
    const { row, at } = victim();
    const next = rowsA[at + 1]!;
    // Through a free seq: the primary key (tenant_id, tree_id, seq) is checked row by row.
    await expectTamper(
      [
        sql`UPDATE audit SET seq = -1 WHERE id = ${row.id}`,
        sql`UPDATE audit SET seq = ${Number(row.seq)} WHERE id = ${next.id}`,
        sql`UPDATE audit SET seq = ${Number(next.seq)} WHERE id = ${row.id}`,
      ],
      { firstBadId: next.id, entries: at + 1 },
    );
  });

  // The victim moved to the end of another chain. Tenant a's report is the first of the two breaks in
  // the walk: the gap it left in its own tree, or the stray row at the end of the other chain.
  const MOVES: [string, (b: string, second: string) => SQL, (at: number, second: string) => { firstBadId: string; entries: number } | null, boolean][] = [
    ["tenant a's own chain", () => sql`tree_id = ''`, () => ({ firstBadId: victim().row.id, entries: lastAt('') + 2 }), false],
    [
      "tenant a's second tree",
      (_b, second) => sql`tree_id = ${second}`,
      (at, second) => (lastAt(second) > at ? null : { firstBadId: victim().row.id, entries: lastAt(second) + 2 }),
      false,
    ],
    ["tenant b's log, in the same tree", (b) => sql`tenant_id = ${b}`, () => null, true],
    ["tenant b's own chain", (b) => sql`tenant_id = ${b}, tree_id = ''`, () => null, true],
  ];
  test.each(MOVES)('a row moved into %s is reported where it went missing or where it landed', async (_to, set, stray, intoB) => {
    const { row, at } = victim();
    const second = trees.second;
    await expectTamper(
      [sql`UPDATE audit SET ${set(h.tenantIds.b, second)}, seq = seq + 1000 WHERE id = ${row.id}`],
      stray(at, second) ?? { firstBadId: rowsA[at + 1]!.id, entries: at + 1 },
      // A row landing in b's log is no row of b's chains: b's report finds it too.
      intoB ? { ok: false, firstBadId: row.id } : { ok: true },
    );
  });

  describe.each(TREES_OF_A)('in $name', ({ key }) => {
    test('the last row deleted is reported as the id its head still names', async () => {
      const at = lastAt(trees[key]);
      await expectTamper([sql`DELETE FROM audit WHERE id = ${rowsA[at]!.id}`], { firstBadId: rowsA[at]!.id, entries: at });
    });

    test('every row deleted is reported as the id its head still names, after the other trees', async () => {
      const tree = trees[key];
      const at = lastAt(tree);
      const count = rowsA.filter((r) => r.treeId === tree).length;
      expect(count).toBeGreaterThan(1);
      await expectTamper([sql`DELETE FROM audit WHERE tenant_id = ${h.tenantIds.a} AND tree_id = ${tree}`], {
        firstBadId: rowsA[at]!.id,
        entries: rowsA.length - count,
      });
    });

    test('a well-chained row appended without moving the head is reported at the head', async () => {
      const at = lastAt(trees[key]);
      const last = rowsA[at]!;
      const forged: Row = { ...last, seq: Number(last.seq) + 1, id: 'aud_forged', decision: 'grant', prevHash: last.hash };
      const row = { ...forged, hash: rowHash(forged) };
      // tree_id and pos spelled out: hashedFields leaves an empty tree_id out, and pos is no hashed field.
      const record = { ...hashedFields(row), tree_id: row.treeId, pos: 1_000_000, hash: row.hash };
      await expectTamper([sql`INSERT INTO audit SELECT * FROM jsonb_populate_recordset(NULL::audit, ${JSON.stringify([record])}::jsonb)`], {
        firstBadId: last.id,
        entries: at + 2,
      });
    });

    test('the whole chain relabelled to another tree, head and all, is reported at its first row: tree_id is hashed', async () => {
      const tree = trees[key];
      const forged = tree === '' ? 'cap_forged' : '';
      const moved = rowsA.find((r) => r.treeId === tree)!;
      // '' as the new label would collide with the tenant's own chain: that one is emptied first.
      const clear = forged === '' ? [sql`DELETE FROM audit WHERE tenant_id = ${h.tenantIds.a} AND tree_id = ''`] : [];
      try {
        for (const s of [
          ...clear,
          sql`DELETE FROM audit_heads WHERE tenant_id = ${h.tenantIds.a} AND tree_id = ${forged}`,
          sql`UPDATE audit SET tree_id = ${forged} WHERE tenant_id = ${h.tenantIds.a} AND tree_id = ${tree}`,
          sql`UPDATE audit_heads SET tree_id = ${forged} WHERE tenant_id = ${h.tenantIds.a} AND tree_id = ${tree}`,
        ])
          await h.database.db.execute(s);
        // Where the relabelled chain now sits in the walk, as the store reads it.
        const at = (await chainRows(h.tenantIds.a)).findIndex((r) => r.id === moved.id);
        expect(await verify(h.tenantIds.a)).toEqual({ ok: false, firstBadId: moved.id, entries: at + 1 });
      } finally {
        await restore();
      }
      expect(await verify(h.tenantIds.a)).toMatchObject({ ok: true });
    });

    // Each head as an attacker might leave it; the walk reaches the tree's end and finds it wrong.
    const HEAD_EDITS: [string, (tenantId: string, treeId: string) => SQL][] = [
      ['its hash edited', (t, tree) => sql`UPDATE audit_heads SET hash = ${'e'.repeat(64)} WHERE tenant_id = ${t} AND tree_id = ${tree}`],
      ['its seq edited', (t, tree) => sql`UPDATE audit_heads SET seq = seq - 1 WHERE tenant_id = ${t} AND tree_id = ${tree}`],
      [
        'it put back to genesis',
        (t, tree) => sql`UPDATE audit_heads SET seq = 0, hash = ${GENESIS_HASH}, last_id = NULL WHERE tenant_id = ${t} AND tree_id = ${tree}`,
      ],
      ['it deleted', (t, tree) => sql`DELETE FROM audit_heads WHERE tenant_id = ${t} AND tree_id = ${tree}`],
    ];
    test.each(HEAD_EDITS)('the head with %s is reported at the last row', async (_edit, tamper) => {
      const at = lastAt(trees[key]);
      await expectTamper([tamper(h.tenantIds.a, trees[key])], { firstBadId: rowsA[at]!.id, entries: at + 1 });
    });
  });

  test('GET /v1/audit/verify shows the same report, each tenant seeing only its own chains', async () => {
    const { row, at } = victim();
    try {
      await h.database.db.execute(sql`UPDATE audit SET cost = cost + 1 WHERE id = ${row.id}`);
      const bad = (await h.call('GET', '/v1/audit/verify')).body;
      expect(bad).toMatchObject({ ok: false, first_bad_id: row.id, entries: at + 1 });
      expect((await h.call('GET', '/v1/audit/verify', undefined, { as: 'b' })).body).toMatchObject({ ok: true });
    } finally {
      await restore();
    }
    const treeCount = new Set(rowsA.map((r) => r.treeId)).size;
    expect((await h.call('GET', '/v1/audit/verify')).body).toMatchObject({ ok: true, entries: rowsA.length, trees: treeCount });
  });
});
