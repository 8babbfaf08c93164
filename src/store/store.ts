/**
 * The Store: every read and write Warrant makes to PostgreSQL, through drizzle, on either driver
 * (postgres.js for a server, PGlite embedded). Decisions are written only through `decide`, which
 * the group-commit writer (writer.ts) runs inside one transaction per batch.
 */
import { and, asc, eq, gt, inArray, isNotNull, isNull, or, sql, type SQL } from 'drizzle-orm';
import type { PgDatabase, PgQueryResultHKT, PgTransaction } from 'drizzle-orm/pg-core';
import type { ChainLink } from '../core/approve.js';
import type { ChainHead } from './audit.js';
import type { BatchConn } from './batch.js';
import { apiKeys, approvals, audit, auditHeads, capabilities, idempotency, tenants, tools } from './schema.js';

/** The NOTIFY channel a revoked API key's id is sent on (`revokeKeyIn`, for the API and the CLI alike). */
export const KEY_REVOKED_CHANNEL = 'warrant_api_key_revoked';

// Both drivers' databases and transactions share these shapes; their result kinds differ only for
// raw `execute`, whose result this module never reads.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Db = PgDatabase<PgQueryResultHKT, any, any>;
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Tx = PgTransaction<PgQueryResultHKT, any, any>;

/** The store cannot answer: the caller must fail closed (503). */
export class StoreUnavailable extends Error {
  readonly code = 'unavailable';
  constructor(
    message: string,
    /** `rolled_back`: nothing was committed. `unknown`: a commit was attempted and its outcome is not known. */
    readonly outcome: 'rolled_back' | 'unknown',
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

export const GENESIS_HASH = '0'.repeat(64);

export interface TenantRecord {
  readonly id: string;
  readonly name: string;
}

/** An API key as stored (never the key itself: its hash). */
export type ApiKeyRecord = typeof apiKeys.$inferSelect;

export interface NewCapability {
  readonly id: string;
  readonly tenantId: string;
  readonly trajectoryId: string;
  readonly parentId: string | null;
  readonly ancestors: readonly string[];
  readonly depth: number;
  readonly rights: readonly string[];
  readonly objects: unknown;
  readonly predicate: unknown;
  readonly budget: bigint | null;
  readonly maxCalls: number | null;
  readonly kid: string;
  readonly issuedAt: Date;
  readonly expiresAt: Date;
}

export type CapabilityRecord = typeof capabilities.$inferSelect;

export interface CapabilityView {
  readonly record: CapabilityRecord;
  readonly children: readonly string[];
  /** Revoked itself, or below a revoked ancestor. */
  readonly revoked: boolean;
}

export type AuditRecord = typeof audit.$inferSelect;

export interface AuditFilter {
  readonly trajectoryId?: string;
  /** Rows of the trees whose root has this trajectory: subagents' rows included. */
  readonly rootTrajectoryId?: string;
  readonly capabilityId?: string;
  readonly decision?: 'grant' | 'deny' | 'pending';
  readonly event?: 'mint' | 'attenuate' | 'approve' | 'revoke' | 'access' | 'approval' | 'tool';
  /** Rows after this `pos` (the listing cursor). */
  readonly afterPos?: number;
  readonly limit: number;
}

/** What a decision does to the store inside its batch transaction. */
export interface DecisionTx {
  /** The capability and its ancestors, root first, locked for update; empty if unknown. */
  lockChain(tenantId: string, capabilityId: string): Promise<ChainLink[]>;
  /** Charges one call of `cost` micro-units to every capability in `ids`. */
  charge(ids: readonly string[], cost: bigint): Promise<void>;
  insertCapability(c: NewCapability): Promise<void>;
  /** Revokes a capability and every descendant not already revoked; returns the ids revoked now. */
  revokeSubtree(tenantId: string, capabilityId: string, at: Date, reason: string | null): Promise<string[]>;
  /** A statement in the decision's transaction (approvals, issue 17), its parameters as text. */
  query(text: string, params: readonly (string | null)[]): Promise<Record<string, unknown>[]>;
  /** See `insertKeyIn`: false when the key's maker is revoked or expired (nothing inserted). */
  insertApiKey(k: ApiKeyRecord, at: Date): Promise<boolean>;
  /** See `revokeKeyIn`. */
  revokeApiKey(tenantId: string, keyId: string, at: Date): Promise<RevokedKey | null>;
}

/** A chain link as held during a batch: its stored state plus this batch's charges. */
interface HeldLink {
  readonly tenantId: string;
  readonly trajectoryId: string;
  readonly ancestors: readonly string[];
  readonly depth: number;
  revoked: boolean;
  readonly budget: bigint | null;
  spent: bigint;
  readonly maxCalls: number | null;
  calls: number;
}

/** jsonb through an explicit cast, so both drivers store the value itself, never a JSON string of it. */
export function jsonb(v: unknown): SQL | null {
  return v === null || v === undefined ? null : sql`${JSON.stringify(v)}::jsonb`;
}

/** The decision operations of one batch transaction, with the batch-wide steps the writer drives. */
export interface BatchTx extends DecisionTx {
  /**
   * Takes chain rows the batch has locked itself (`lockChains` inside the writer's locking statement);
   * rows another transaction held and the statement skipped are simply absent (see `holds`).
   */
  hold(rows: readonly ChainRow[]): void;
  /** Whether a capability's whole chain, root to itself, is locked and held by this batch. */
  holds(tenantId: string, capabilityId: string): boolean;
  /** Sends, in one statement, every charge of the batch; the promise settles when it has run. */
  flush(): Promise<unknown>;
  /**
   * Takes every pending charge of the batch as the JSON records `writeCharges` reads, or null when
   * there are none: the writer folds them into its audit write, one statement less per batch.
   */
  takeCharges(): string | null;
  /**
   * The delegation tree (its root's id) of a held capability of this tenant; '' (the tenant's
   * own chain) when it is unknown. The same rule as the writer's head lock.
   */
  treeOf(tenantId: string, capabilityId: string): string;
  /** The trajectory of the root of a held capability's tree; null when it is not held (or another tenant's). */
  rootTrajectoryOf(tenantId: string, capabilityId: string): string | null;
}

// The hot path's statements are plain SQL with the same text every batch (prepared once per
// connection on postgres.js) and JSON parameters, which both drivers pass the same way.
/**
 * Every capability row of the chains of the capabilities named at `$n` (a JSON array of ids), locked
 * in id order, as ChainRow. `skip`: for the main lane, a row another transaction holds is left out,
 * not waited for. Each row is found and locked by its primary key in the sorted order of the ids (a
 * LATERAL subquery per id, which the planner cannot turn into a join): as a join, the capabilities
 * table was scanned whole in every batch while it was small enough (the writer's `lockAll`).
 */
export const lockChains = (n: number, skip: boolean): string => `SELECT l.* FROM (
    SELECT DISTINCT a.id FROM jsonb_array_elements_text($${n}::jsonb) AS x(cap)
    CROSS JOIN LATERAL (SELECT c.ancestors || c.id AS chain FROM capabilities c WHERE c.id = x.cap OFFSET 0) AS c
    CROSS JOIN LATERAL unnest(c.chain) AS a(id)
    ORDER BY a.id
  ) AS w
  CROSS JOIN LATERAL (SELECT id, tenant_id, trajectory_id, to_json(ancestors) AS ancestors, depth,
    revoked_at IS NOT NULL AS revoked, budget::text AS budget, spent::text AS spent, max_calls::text AS max_calls, calls::text AS calls
    FROM capabilities WHERE id = w.id FOR UPDATE${skip ? ' SKIP LOCKED' : ''}) AS l`;

const LOCK_CHAINS = lockChains(1, false);

/**
 * The charges' new totals, from JSON records (`takeCharges`) at parameter `$n`. The CHECK constraints
 * (spent <= budget, calls <= max_calls) still guard the write. Each row is found by its primary key
 * (a LATERAL subquery per id) and updated by its row address, current because the batch holds the
 * row locked since its locking statement: joined to the recordset, the planner scanned the whole
 * table while it held up to some ten thousand rows (3 ms at 6,300; test/store/plans.test.ts). Used
 * as the CTE `charged`, whose rows `chargesMatched` counts.
 */
export const writeCharges = (n: number): string => `UPDATE capabilities AS c SET spent = d.spent, calls = d.calls
FROM (SELECT x.spent, x.calls, k.row FROM jsonb_to_recordset($${n}::jsonb) AS x(id text, spent numeric, calls bigint)
  CROSS JOIN LATERAL (SELECT ctid AS row FROM capabilities WHERE id = x.id OFFSET 0) AS k) AS d
WHERE c.ctid = d.row
RETURNING 1`;

/**
 * True when the CTE `cte` returned a row for every record of the JSON array at `$n`; otherwise the
 * statement fails (a text that is not a boolean is the plain-SQL way to raise), naming `what`. The
 * batch's writes go out with COMMIT, unawaited, so such a check has to be the database's.
 */
export const everyRecordMatched = (cte: string, n: number, what: string): string =>
  `(SELECT CASE WHEN count(*) = jsonb_array_length($${n}::jsonb) THEN true ELSE ('${what}: ' || count(*) || ' of ' || jsonb_array_length($${n}::jsonb))::boolean END FROM ${cte})`;

/**
 * True when every charge at `$n` updated its row (CTE `charged`); otherwise the statement fails, and
 * with it the batch's COMMIT. A charge that matched no row would be a budget silently not spent: it
 * cannot happen while the batch holds the rows it charges, and if that rule were ever broken (an
 * update by row address finds nothing once another transaction has replaced the row) the batch
 * must fail rather than commit its grants uncharged.
 */
export const chargesMatched = (n: number): string => everyRecordMatched('charged', n, 'charges matched');

const WRITE_CHARGES = `WITH charged AS (${writeCharges(1)}) SELECT ${chargesMatched(1)} AS matched`;

/** A capability row of a locked chain, as `lockChains` reads it. */
export interface ChainRow {
  readonly id: string;
  readonly tenant_id: string;
  readonly trajectory_id: string;
  readonly ancestors: string[];
  readonly depth: number;
  readonly revoked: boolean;
  readonly budget: string | null;
  readonly spent: string;
  readonly max_calls: string | null;
  readonly calls: string;
}

/**
 * Decision operations bound to one batch transaction. Every chain is read once under FOR UPDATE and
 * then held in memory: the row locks (and the tenant's audit-head lock taken before) mean nothing
 * else can change those rows until commit, so charges accumulate here and are written back
 * together, and a later unit of the same batch sees the charges of the earlier ones.
 */
export function decisionTx(c: BatchConn): BatchTx {
  const held = new Map<string, HeldLink>();
  const dirty = new Set<string>();

  const hold = (rows: readonly ChainRow[]): void => {
    for (const r of rows) {
      if (held.has(r.id)) continue; // the held copy may carry this batch's charges
      held.set(r.id, {
        tenantId: r.tenant_id,
        trajectoryId: r.trajectory_id,
        ancestors: r.ancestors,
        depth: r.depth,
        revoked: r.revoked,
        budget: r.budget === null ? null : BigInt(r.budget),
        spent: BigInt(r.spent),
        maxCalls: r.max_calls === null ? null : Number(r.max_calls),
        calls: Number(r.calls),
      });
    }
  };

  const lockRows = async (capabilityIds: readonly string[]): Promise<void> => {
    if (capabilityIds.length === 0) return;
    hold((await c.query(LOCK_CHAINS, [JSON.stringify(capabilityIds)])) as unknown as ChainRow[]);
  };

  const takeCharges = (): string | null => {
    if (dirty.size === 0) return null;
    const rows = [...dirty].map((id) => {
      const l = held.get(id) as HeldLink;
      return { id, spent: l.spent.toString(), calls: l.calls };
    });
    dirty.clear();
    return JSON.stringify(rows);
  };

  /** The held chain of a capability, root first, or null when some link is not held. */
  const heldChain = (tenantId: string, capabilityId: string): ChainLink[] | null => {
    const self = held.get(capabilityId);
    if (self === undefined) return null;
    if (self.tenantId !== tenantId) return [];
    const out: ChainLink[] = [];
    for (const id of [...self.ancestors, capabilityId]) {
      const l = held.get(id);
      if (l === undefined) return null;
      out.push({ id, revoked: l.revoked, budget: l.budget, spent: l.spent, maxCalls: l.maxCalls, calls: l.calls });
    }
    return out;
  };

  return {
    hold,
    holds(tenantId, capabilityId) {
      const chain = heldChain(tenantId, capabilityId);
      return chain !== null && chain.length > 0;
    },
    rootTrajectoryOf(tenantId, capabilityId) {
      const l = held.get(capabilityId);
      if (l === undefined || l.tenantId !== tenantId) return null;
      return held.get(l.ancestors[0] ?? capabilityId)?.trajectoryId ?? null;
    },
    treeOf(tenantId, capabilityId) {
      const l = held.get(capabilityId);
      return l === undefined || l.tenantId !== tenantId ? '' : (l.ancestors[0] ?? capabilityId);
    },
    async lockChain(tenantId, capabilityId) {
      const known = heldChain(tenantId, capabilityId);
      if (known !== null) return known;
      await lockRows([capabilityId]);
      return heldChain(tenantId, capabilityId) ?? [];
    },
    async charge(ids, cost) {
      for (const id of ids) {
        const l = held.get(id);
        if (l === undefined) throw new Error('charge of a capability whose chain was not locked');
        l.spent += cost;
        l.calls += 1;
        dirty.add(id);
      }
    },
    takeCharges,
    flush() {
      const charges = takeCharges();
      return charges === null ? Promise.resolve() : c.query(WRITE_CHARGES, [charges]);
    },
    async insertCapability(n) {
      await c.db.insert(capabilities).values({
        ...n,
        ancestors: [...n.ancestors],
        rights: [...n.rights],
        objects: jsonb(n.objects),
        predicate: jsonb(n.predicate),
        budget: n.budget === null ? null : n.budget.toString(),
      });
    },
    query(text, params) {
      return c.query(text, params);
    },
    insertApiKey: (k, at) => insertKeyIn(c.db, k, at),
    revokeApiKey: (tenantId, keyId, at) => revokeKeyIn(c.db, tenantId, keyId, at),
    async revokeSubtree(tenantId, capabilityId, at, reason) {
      const rows = await c.db
        .update(capabilities)
        .set({ revokedAt: at, revokeReason: reason })
        .where(
          and(
            eq(capabilities.tenantId, tenantId),
            or(eq(capabilities.id, capabilityId), sql`${capabilityId} = ANY(${capabilities.ancestors})`),
            isNull(capabilities.revokedAt),
          ),
        )
        .returning({ id: capabilities.id, depth: capabilities.depth });
      for (const r of rows) {
        const l = held.get(r.id);
        if (l !== undefined) l.revoked = true;
      }
      return rows.sort((a, b) => a.depth - b.depth || (a.id < b.id ? -1 : 1)).map((r) => r.id);
    },
  };
}

/**
 * Inserts a key. A key made by another (`createdBy`) is inserted only while its maker is usable at
 * `at`, read under a share lock on the maker's row: a revocation of the maker either commits first
 * (seen here: false, nothing inserted) or waits for this insert to commit, and then revokes the new
 * key with the maker's others (`revokeKeyIn`).
 */
async function insertKeyIn(db: Db, k: ApiKeyRecord, at: Date): Promise<boolean> {
  if (k.createdBy !== null) {
    const [maker] = await db
      .select({ revokedAt: apiKeys.revokedAt, expiresAt: apiKeys.expiresAt })
      .from(apiKeys)
      .where(and(eq(apiKeys.tenantId, k.tenantId), eq(apiKeys.id, k.createdBy)))
      .for('share');
    if (maker === undefined || maker.revokedAt !== null || (maker.expiresAt !== null && maker.expiresAt.getTime() <= at.getTime())) return false;
  }
  await db.insert(apiKeys).values({ ...k, roles: [...k.roles] });
  return true;
}

/** A key as it stands after a revocation, whether this revocation is the one that revoked it, and the keys it made revoked with it. */
export interface RevokedKey {
  readonly key: ApiKeyRecord;
  readonly revokedNow: boolean;
  /** The keys made by it (or by those, and so on) that this revocation revoked, makers before the keys they made. */
  readonly made: readonly ApiKeyRecord[];
}

/**
 * Revokes a key of the tenant (the first revocation time stays; null when the tenant has no such key)
 * and every key made from it over the API that is not revoked yet (a leaked key's makings go with
 * it), and tells every instance listening on KEY_REVOKED_CHANNEL (each notice is sent when the
 * revocation commits, and only then), so their caches drop them at once rather than within their TTL.
 * The makings are revoked by statements run after the key's own row is locked, again until one finds
 * none: a key being made meanwhile holds a share lock on its maker's row (`insertKeyIn`), so it has
 * committed by then and a later statement sees it.
 */
async function revokeKeyIn(db: Db, tenantId: string, keyId: string, at: Date): Promise<RevokedKey | null> {
  const revoked = await db
    .update(apiKeys)
    .set({ revokedAt: at })
    .where(and(eq(apiKeys.tenantId, tenantId), eq(apiKeys.id, keyId), isNull(apiKeys.revokedAt)))
    .returning({ id: apiKeys.id });
  const [row] = await db
    .select()
    .from(apiKeys)
    .where(and(eq(apiKeys.tenantId, tenantId), eq(apiKeys.id, keyId)));
  if (row === undefined) return null;
  const made: ApiKeyRecord[] = [];
  for (;;) {
    const more = await db.execute(sql`
      WITH RECURSIVE made(id) AS (
        SELECT id FROM api_keys WHERE tenant_id = ${tenantId} AND created_by = ${keyId}
        UNION
        SELECT k.id FROM api_keys k JOIN made m ON k.created_by = m.id WHERE k.tenant_id = ${tenantId}
      )
      UPDATE api_keys SET revoked_at = ${at.toISOString()}::timestamptz
      WHERE tenant_id = ${tenantId} AND id IN (SELECT id FROM made) AND revoked_at IS NULL
      RETURNING id`);
    const rows: Record<string, unknown>[] = Array.isArray(more) ? (more as Record<string, unknown>[]) : (more as { rows: Record<string, unknown>[] }).rows;
    const ids = rows.map((r) => String(r.id));
    if (ids.length === 0) break;
    made.push(
      ...(await db
        .select()
        .from(apiKeys)
        .where(and(eq(apiKeys.tenantId, tenantId), inArray(apiKeys.id, ids)))),
    );
  }
  for (const id of [keyId, ...made.map((k) => k.id)]) await db.execute(sql`SELECT pg_notify(${KEY_REVOKED_CHANNEL}, ${id})`);
  return { key: row, revokedNow: revoked.length > 0, made: orderByMaker(keyId, made) };
}

/**
 * Keys in the order they were made from `root`: each after its maker (the creation time breaks ties).
 * A key whose maker is not among them (revoked before, with its own makings left, as a writer outside
 * Warrant or an instance from before migration 0008 could leave it) starts a walk of its own, so every
 * key revoked is listed, and so audited, once.
 */
function orderByMaker(root: string, keys: readonly ApiKeyRecord[]): ApiKeyRecord[] {
  const out: ApiKeyRecord[] = [];
  const sorted = [...keys].sort((a, b) => a.createdAt.getTime() - b.createdAt.getTime() || (a.id < b.id ? -1 : 1));
  const byMaker = new Map<string, ApiKeyRecord[]>();
  for (const k of sorted) {
    const siblings = byMaker.get(k.createdBy ?? '');
    if (siblings === undefined) byMaker.set(k.createdBy ?? '', [k]);
    else siblings.push(k);
  }
  const listed = new Set<string>();
  const visit = (k: ApiKeyRecord): void => {
    if (listed.has(k.id)) return;
    listed.add(k.id);
    out.push(k);
    for (const made of byMaker.get(k.id) ?? []) visit(made);
  };
  for (const k of byMaker.get(root) ?? []) visit(k);
  for (const k of sorted) visit(k);
  return out;
}

/** Reads and the non-decision writes. */
export class Store {
  constructor(readonly db: Db) {}

  async ping(): Promise<void> {
    await this.db.select({ one: sql<number>`1` }).from(sql`(SELECT 1) AS ping`);
  }

  /**
   * Whether a decision could commit now: the database answers and is writable (not a standby, not
   * `default_transaction_read_only`, under which every decision's locking read is refused).
   */
  async canCommit(): Promise<boolean> {
    const [row] = await this.db
      .select({ readOnly: sql<boolean>`pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on'` })
      .from(sql`(SELECT 1) AS ping`);
    return row?.readOnly === false;
  }

  /** Creates a tenant, its first API key and the genesis of its audit chain. */
  async createTenant(t: TenantRecord & { createdAt: Date }, firstKey: ApiKeyRecord): Promise<void> {
    await this.db.transaction(async (tx) => {
      await tx.insert(tenants).values(t);
      await tx.insert(apiKeys).values({ ...firstKey, roles: [...firstKey.roles] });
      await tx.insert(auditHeads).values({ tenantId: t.id, treeId: '', seq: 0, hash: GENESIS_HASH, lastId: null });
    });
  }

  async countTenants(): Promise<number> {
    const [row] = await this.db.select({ n: sql<string>`count(*)` }).from(tenants);
    return Number(row?.n ?? 0);
  }

  /** An API key by its public id, with its tenant; revoked and expired ones too (the caller decides). */
  async apiKeyById(keyId: string): Promise<{ key: ApiKeyRecord; tenant: TenantRecord } | null> {
    const [row] = await this.db
      .select({ key: apiKeys, tenant: { id: tenants.id, name: tenants.name } })
      .from(apiKeys)
      .innerJoin(tenants, eq(tenants.id, apiKeys.tenantId))
      .where(eq(apiKeys.id, keyId));
    return row ?? null;
  }

  /** The tenant's keys, oldest first. */
  async listApiKeys(tenantId: string): Promise<ApiKeyRecord[]> {
    return this.db.select().from(apiKeys).where(eq(apiKeys.tenantId, tenantId)).orderBy(asc(apiKeys.createdAt), asc(apiKeys.id));
  }

  async tenantByName(name: string): Promise<TenantRecord | null> {
    const [row] = await this.db.select({ id: tenants.id, name: tenants.name }).from(tenants).where(eq(tenants.name, name));
    return row ?? null;
  }

  async getCapability(tenantId: string, id: string): Promise<CapabilityView | null> {
    const [record] = await this.db
      .select()
      .from(capabilities)
      .where(and(eq(capabilities.tenantId, tenantId), eq(capabilities.id, id)));
    if (record === undefined) return null;
    const children = await this.db
      .select({ id: capabilities.id })
      .from(capabilities)
      .where(eq(capabilities.parentId, id))
      .orderBy(asc(capabilities.issuedAt), asc(capabilities.id));
    let revoked = record.revokedAt !== null;
    if (!revoked && record.ancestors.length > 0) {
      const hit = await this.db
        .select({ id: capabilities.id })
        .from(capabilities)
        .where(and(inArray(capabilities.id, record.ancestors), isNotNull(capabilities.revokedAt)))
        .limit(1);
      revoked = hit.length > 0;
    }
    return { record, children: children.map((c) => c.id), revoked };
  }

  async listAudit(tenantId: string, f: AuditFilter): Promise<{ entries: AuditRecord[]; nextPos: number | null }> {
    const conds: SQL[] = [eq(audit.tenantId, tenantId)];
    if (f.trajectoryId !== undefined) conds.push(eq(audit.trajectoryId, f.trajectoryId));
    if (f.rootTrajectoryId !== undefined) conds.push(eq(audit.rootTrajectoryId, f.rootTrajectoryId));
    if (f.capabilityId !== undefined) conds.push(eq(audit.capabilityId, f.capabilityId));
    if (f.decision !== undefined) conds.push(eq(audit.decision, f.decision));
    if (f.event !== undefined) conds.push(eq(audit.event, f.event));
    if (f.afterPos !== undefined) conds.push(gt(audit.pos, f.afterPos));
    const rows = await this.db
      .select()
      .from(audit)
      .where(and(...conds))
      .orderBy(asc(audit.pos))
      .limit(f.limit + 1);
    const entries = rows.slice(0, f.limit);
    const last = entries[entries.length - 1];
    return { entries, nextPos: rows.length > f.limit && last !== undefined ? Number(last.pos) : null };
  }

  /** The tenant's audit rows in chain order (by tree, then seq), a page at a time. */
  async *auditChain(tenantId: string, pageSize = 1000): AsyncGenerator<AuditRecord[]> {
    let after: { treeId: string; seq: number } | null = null;
    for (;;) {
      const past: SQL | undefined =
        after === null ? undefined : or(gt(audit.treeId, after.treeId), and(eq(audit.treeId, after.treeId), gt(audit.seq, after.seq)));
      const rows: AuditRecord[] = await this.db
        .select()
        .from(audit)
        .where(and(eq(audit.tenantId, tenantId), past))
        .orderBy(asc(audit.treeId), asc(audit.seq))
        .limit(pageSize);
      const last = rows[rows.length - 1];
      if (last === undefined) return;
      yield rows;
      after = { treeId: last.treeId, seq: Number(last.seq) };
    }
  }

  async auditRow(tenantId: string, id: string): Promise<AuditRecord | null> {
    const [row] = await this.db
      .select()
      .from(audit)
      .where(and(eq(audit.tenantId, tenantId), eq(audit.id, id)));
    return row ?? null;
  }

  /** Every chain head of the tenant, by tree id ('' for the tenant's own chain). */
  async auditHeads(tenantId: string): Promise<Map<string, ChainHead>> {
    const rows = await this.db
      .select({ treeId: auditHeads.treeId, seq: auditHeads.seq, hash: auditHeads.hash, lastId: auditHeads.lastId })
      .from(auditHeads)
      .where(eq(auditHeads.tenantId, tenantId));
    return new Map(rows.map((r) => [r.treeId, { seq: Number(r.seq), hash: r.hash, lastId: r.lastId }]));
  }

  async listTenants(): Promise<TenantRecord[]> {
    return this.db.select({ id: tenants.id, name: tenants.name }).from(tenants);
  }
}

export { apiKeys, approvals, audit, auditHeads, capabilities, idempotency, tenants, tools };
