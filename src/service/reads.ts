/**
 * The reads of the API (GET endpoints: a capability, the audit, its verification and receipts), each
 * scoped to the calling tenant. Moved out of authority.ts (STYLE: rooms that stay small).
 */
import { fromMicro } from '../core/money.js';
import { latestCheckpoint, leafOf, proveInclusion } from '../audit/checkpointer.js';
import type { Receipt } from '../audit/receipt.js';
import { verifyStoredAudit } from '../audit/verify.js';
import type { KeyRing } from '../crypto/keys.js';
import { hashedFields } from '../store/audit.js';
import type { AuditFilter, AuditRecord, Store } from '../store/store.js';
import { rfc3339, type Reply } from './authority.js';
import { ApiError } from './errors.js';

const seconds = (d: Date): number => Math.floor(d.getTime() / 1000);

/** What the audit reads need beyond the store. */
export interface AuditReadOptions {
  /** The audit key ring, whose public keys check the checkpoints; none: checkpoints cannot be checked. */
  readonly auditKeys?: KeyRing;
  /** Seconds between checkpoint rounds, for a receipt's retry hint. */
  readonly checkpointIntervalS?: number;
}

/** The reads of the API (GET endpoints), each scoped to the calling tenant. */
export class Reads {
  /** Audit checks in progress, by tenant. */
  private readonly verifying = new Map<string, ReturnType<typeof verifyStoredAudit>>();

  constructor(
    private readonly store: Store,
    private readonly now: () => Date,
    private readonly audits: AuditReadOptions = {},
  ) {}

  async capability(tenantId: string, id: string): Promise<Reply> {
    const view = await this.store.getCapability(tenantId, id);
    if (view === null) throw new ApiError(404, 'not_found', 'no such capability');
    const r = view.record;
    const status = view.revoked ? 'revoked' : r.expiresAt.getTime() <= this.now().getTime() ? 'expired' : 'active';
    return {
      status: 200,
      body: {
        capability_id: r.id,
        trajectory_id: r.trajectoryId,
        parent_id: r.parentId,
        depth: r.depth,
        rights: r.rights,
        objects: r.objects,
        predicate: r.predicate,
        issued_at: rfc3339(seconds(r.issuedAt)),
        expires_at: rfc3339(seconds(r.expiresAt)),
        status,
        revoked_at: r.revokedAt?.toISOString() ?? null,
        spent: fromMicro(BigInt(r.spent)),
        calls: Number(r.calls),
        children: view.children,
      },
    };
  }

  async audit(tenantId: string, f: AuditFilter): Promise<Reply> {
    const { entries, nextPos } = await this.store.listAudit(tenantId, f);
    return { status: 200, body: { entries: entries.map(auditEntry), next: nextPos === null ? null : String(nextPos) } };
  }

  /**
   * The tenant's rows, chains and checkpoints checked together, in one snapshot (src/audit/verify.ts).
   * It reads the whole log: callers asking while a check of their tenant runs share its answer.
   */
  async verifyAudit(tenantId: string): Promise<Reply> {
    let running = this.verifying.get(tenantId);
    if (running === undefined) {
      running = verifyStoredAudit(this.store.db, this.audits.auditKeys?.verifyKeys ?? new Map(), tenantId, null).finally(() => this.verifying.delete(tenantId));
      this.verifying.set(tenantId, running);
    }
    const report = await running;
    if (report.ok) {
      const { oldestUncoveredAt, ...rest } = report;
      return { status: 200, body: { ...rest, covered: report.entries - report.uncovered, oldest_uncovered_at: oldestUncoveredAt } };
    }
    const { firstBadId, firstBadCheckpoint, ...rest } = report;
    return {
      status: 200,
      body: {
        ...rest,
        ...(firstBadId === undefined ? {} : { first_bad_id: firstBadId }),
        ...(firstBadCheckpoint === undefined ? {} : { first_bad_checkpoint: firstBadCheckpoint }),
      },
    };
  }

  /** A receipt for one audit row: the row, its hash and its inclusion proof in the latest checkpoint. */
  async receipt(tenantId: string, auditId: string): Promise<Reply> {
    const db = this.store.db;
    const row = await this.store.auditRow(tenantId, auditId);
    if (row === null) throw new ApiError(404, 'not_found', 'no such audit entry');
    const [leaf, latest] = await Promise.all([leafOf(db, tenantId, row.treeId, Number(row.seq)), latestCheckpoint(db, tenantId)]);
    if (leaf === null || latest === null || leaf >= latest.size) {
      const retry = Math.max(1, Math.ceil(this.audits.checkpointIntervalS ?? 10));
      throw new ApiError(409, 'not_yet_covered', `no signed checkpoint covers this entry yet; retry after ${retry} s`, { retry_after_s: retry });
    }
    const receipt: Receipt = {
      audit_id: row.id,
      row: hashedFields(row),
      hash: row.hash,
      leaf_index: leaf,
      tree_size: latest.size,
      checkpoint: latest.jws,
      inclusion: await proveInclusion(db, tenantId, leaf, latest.size),
    };
    return { status: 200, body: receipt };
  }
}

/** An audit row as docs/api.md "Audit entries" shows it. */
export function auditEntry(r: AuditRecord): Record<string, unknown> {
  return {
    id: r.id,
    pos: Number(r.pos),
    tree_id: r.treeId,
    seq: Number(r.seq),
    at: r.at.toISOString(),
    event: r.event,
    decision: r.decision,
    reason_code: r.reasonCode,
    capability_id: r.capabilityId,
    parent_id: r.parentId,
    trajectory_id: r.trajectoryId,
    op: r.op,
    target: r.target,
    cost: r.cost === null ? null : fromMicro(BigInt(r.cost)),
    call_id: r.callId,
    detail: r.detail,
    key_id: r.keyId,
    request_id: r.requestId,
    root_trajectory_id: r.rootTrajectoryId,
    hash: r.hash,
    prev_hash: r.prevHash,
  };
}
