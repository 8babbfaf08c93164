/**
 * The Store: every read and write Warrant makes to PostgreSQL, through drizzle, on either driver
 * (postgres.js for a server, PGlite embedded). Decisions are written only through `decide`, which
 * the group-commit writer (writer.ts) runs inside one transaction per batch.
 */
import { and, asc, eq, gt, inArray, isNotNull, isNull, or, sql, type SQL } from 'drizzle-orm';
import type { PgDatabase, PgQueryResultHKT, PgTransaction } from 'drizzle-orm/pg-core';
import type { ChainLink } from '../core/approve.js';
import { audit, auditHeads, capabilities, idempotency, tenants } from './schema.js';

// Both drivers' databases and transactions share these shapes; their result kinds differ only for
// raw `execute`, which this module never uses.
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
  readonly keyId: string;
  readonly keyHash: string;
}

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
  readonly capabilityId?: string;
  readonly decision?: 'grant' | 'deny';
  readonly event?: 'mint' | 'attenuate' | 'approve' | 'revoke';
  readonly afterSeq?: number;
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
}

function toLink(r: { id: string; revokedAt: Date | null; budget: string | null; spent: string; maxCalls: number | null; calls: number }): ChainLink {
  return {
    id: r.id,
    revoked: r.revokedAt !== null,
    budget: r.budget === null ? null : BigInt(r.budget),
    spent: BigInt(r.spent),
    maxCalls: r.maxCalls === null ? null : Number(r.maxCalls),
    calls: Number(r.calls),
  };
}

/** jsonb through an explicit cast, so both drivers store the value itself, never a JSON string of it. */
export function jsonb(v: unknown): SQL | null {
  return v === null || v === undefined ? null : sql`${JSON.stringify(v)}::jsonb`;
}

/** The decision-time operations, bound to one transaction. */
export function decisionTx(tx: Tx): DecisionTx {
  return {
    async lockChain(tenantId, capabilityId) {
      const rows = await tx
        .select({
          id: capabilities.id,
          revokedAt: capabilities.revokedAt,
          budget: capabilities.budget,
          spent: capabilities.spent,
          maxCalls: capabilities.maxCalls,
          calls: capabilities.calls,
        })
        .from(capabilities)
        .where(
          and(
            eq(capabilities.tenantId, tenantId),
            or(
              eq(capabilities.id, capabilityId),
              sql`${capabilities.id} = ANY(SELECT unnest(c.ancestors) FROM ${capabilities} c WHERE c.id = ${capabilityId})`,
            ),
          ),
        )
        .orderBy(asc(capabilities.depth))
        .for('update');
      return rows.map(toLink);
    },
    async charge(ids, cost) {
      await tx
        .update(capabilities)
        .set({ spent: sql`${capabilities.spent} + ${cost.toString()}::numeric`, calls: sql`${capabilities.calls} + 1` })
        .where(inArray(capabilities.id, [...ids]));
    },
    async insertCapability(c) {
      await tx.insert(capabilities).values({
        ...c,
        ancestors: [...c.ancestors],
        rights: [...c.rights],
        objects: jsonb(c.objects),
        predicate: jsonb(c.predicate),
        budget: c.budget === null ? null : c.budget.toString(),
      });
    },
    async revokeSubtree(tenantId, capabilityId, at, reason) {
      const rows = await tx
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
      return rows.sort((a, b) => a.depth - b.depth || (a.id < b.id ? -1 : 1)).map((r) => r.id);
    },
  };
}

/** Reads and the non-decision writes. */
export class Store {
  constructor(readonly db: Db) {}

  async ping(): Promise<void> {
    await this.db.select({ one: sql<number>`1` }).from(sql`(SELECT 1) AS ping`);
  }

  /** Creates a tenant and the genesis of its audit chain. */
  async createTenant(t: TenantRecord & { createdAt: Date }): Promise<void> {
    await this.db.transaction(async (tx) => {
      await tx.insert(tenants).values(t);
      await tx.insert(auditHeads).values({ tenantId: t.id, seq: 0, hash: GENESIS_HASH, lastId: null });
    });
  }

  async countTenants(): Promise<number> {
    const [row] = await this.db.select({ n: sql<string>`count(*)` }).from(tenants);
    return Number(row?.n ?? 0);
  }

  async tenantByKeyId(keyId: string): Promise<TenantRecord | null> {
    const [row] = await this.db
      .select({ id: tenants.id, name: tenants.name, keyId: tenants.keyId, keyHash: tenants.keyHash })
      .from(tenants)
      .where(eq(tenants.keyId, keyId));
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

  async listAudit(tenantId: string, f: AuditFilter): Promise<{ entries: AuditRecord[]; nextSeq: number | null }> {
    const conds: SQL[] = [eq(audit.tenantId, tenantId)];
    if (f.trajectoryId !== undefined) conds.push(eq(audit.trajectoryId, f.trajectoryId));
    if (f.capabilityId !== undefined) conds.push(eq(audit.capabilityId, f.capabilityId));
    if (f.decision !== undefined) conds.push(eq(audit.decision, f.decision));
    if (f.event !== undefined) conds.push(eq(audit.event, f.event));
    if (f.afterSeq !== undefined) conds.push(gt(audit.seq, f.afterSeq));
    const rows = await this.db
      .select()
      .from(audit)
      .where(and(...conds))
      .orderBy(asc(audit.seq))
      .limit(f.limit + 1);
    const entries = rows.slice(0, f.limit);
    const last = entries[entries.length - 1];
    return { entries, nextSeq: rows.length > f.limit && last !== undefined ? Number(last.seq) : null };
  }

  /** The tenant's audit rows in chain order, a page at a time. */
  async *auditChain(tenantId: string, pageSize = 1000): AsyncGenerator<AuditRecord[]> {
    let after = -1;
    for (;;) {
      const rows = await this.db
        .select()
        .from(audit)
        .where(and(eq(audit.tenantId, tenantId), gt(audit.seq, after)))
        .orderBy(asc(audit.seq))
        .limit(pageSize);
      if (rows.length === 0) return;
      yield rows;
      after = Number(rows[rows.length - 1]?.seq);
    }
  }

  async auditHead(tenantId: string): Promise<{ seq: number; hash: string; lastId: string | null } | null> {
    const [row] = await this.db.select().from(auditHeads).where(eq(auditHeads.tenantId, tenantId));
    return row === undefined ? null : { seq: Number(row.seq), hash: row.hash, lastId: row.lastId };
  }

  async listTenants(): Promise<TenantRecord[]> {
    return this.db.select({ id: tenants.id, name: tenants.name, keyId: tenants.keyId, keyHash: tenants.keyHash }).from(tenants);
  }
}

export { audit, auditHeads, capabilities, idempotency, tenants };
