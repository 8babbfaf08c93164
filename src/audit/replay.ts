/**
 * The decisions of each delegation tree replayed from its audit rows alone. Whoever can write the
 * database cannot rewrite those rows (they are chained and checkpointed), but can change the state
 * the next decision reads: clear a revocation, lower what a capability has spent or how many calls
 * it made. The decisions taken on that state are then recorded faithfully, and this replay finds
 * them: a grant on a capability that an earlier row of its tree revoked (itself or an ancestor), or a
 * charged grant that takes a capability past the budget or call count its issuing row set, or a
 * second outcome of one approval (its settled row put back to pending). Each
 * tree's rows are one chain in decision order, so the replay is exact; a capability whose issuing
 * row is not in the tree is not judged.
 */
import { toMicro } from '../core/money.js';
import type { AuditRecord } from '../store/store.js';

interface Issued {
  readonly parent: string | null;
  readonly budget: bigint | null;
  readonly maxCalls: number | null;
  spent: bigint;
  calls: number;
  revokedBy: string | null;
}

export interface Unlawful {
  readonly firstBadId: string;
  readonly reason: string;
}

const record = (v: unknown): Record<string, unknown> => (typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : {});

function budgetOf(predicate: Record<string, unknown>): bigint | null {
  const b = predicate.budget;
  if (typeof b !== 'number') return null;
  const m = toMicro(b);
  return m.ok ? m.value : null;
}

const INTEGER = /^\d{1,39}$/;

/** Feed it every row, tree by tree in seq order (as verify reads them); `first` is the first unlawful grant. */
export class DecisionReplay {
  private tree: string | null = null;
  private caps = new Map<string, Issued>();
  /** Approvals of this tree whose call has had its outcome (grant or deny), by approval id. */
  private settled = new Set<string>();
  /** The tree each capability was issued in, over all trees. */
  private readonly issuedIn = new Map<string, string>();
  /** Grants on capabilities not issued in their row's tree: judged once every tree is read. */
  private readonly strays: { id: string; cap: string; tree: string }[] = [];
  private found: Unlawful | null = null;

  /** The first unlawful grant; call once every row has been seen. */
  get first(): Unlawful | null {
    if (this.found !== null) return this.found;
    // A capability's tree is its root's id, taken from its database row: a writer who repoints it
    // (with its revocation cleared) has its grants land in a tree where it was never issued.
    for (const s of this.strays) {
      const home = this.issuedIn.get(s.cap);
      if (home !== undefined && home !== s.tree && home !== '')
        return (this.found = {
          firstBadId: s.id,
          reason: `row ${s.id} granted on capability ${s.cap} in tree '${s.tree}', but it was issued in tree '${home}': the database's state was changed under the decision`,
        });
    }
    return null;
  }

  see(r: AuditRecord): void {
    if (this.found !== null) return;
    if (r.treeId !== this.tree) {
      this.tree = r.treeId;
      this.caps = new Map();
      this.settled = new Set();
    }
    // An approval is settled once: a second outcome means its row was put back to pending (a sealed
    // copy restored) and resolved again.
    const approvalId = record(r.detail).approval_id;
    if (r.event === 'approve' && r.decision !== 'pending' && typeof approvalId === 'string') {
      if (this.settled.has(approvalId)) return this.flag(r, `settled approval ${approvalId} a second time: its row was put back to pending in the database`);
      this.settled.add(approvalId);
    }
    if (r.decision !== 'grant') return;
    if (r.capabilityId !== null && (r.event === 'approve' || r.event === 'revoke' || r.event === 'attenuate')) {
      const own = r.event === 'attenuate' ? r.parentId : r.capabilityId;
      if (own !== null && !this.caps.has(own)) this.strays.push({ id: r.id, cap: own, tree: r.treeId });
    }
    switch (r.event) {
      case 'mint':
      case 'attenuate': {
        if (r.capabilityId === null) return;
        if (r.event === 'attenuate' && r.parentId !== null) {
          const revoked = this.revokedLink(this.chain(r.parentId));
          if (revoked !== null) return this.flag(r, `attenuated capability ${r.parentId} after row ${revoked.revokedBy} revoked ${revoked.id}`);
        }
        this.issuedIn.set(r.capabilityId, r.treeId);
        const predicate = record(record(r.detail).predicate);
        const maxCalls = predicate.max_calls;
        this.caps.set(r.capabilityId, {
          parent: r.event === 'attenuate' ? r.parentId : null,
          budget: budgetOf(predicate),
          maxCalls: typeof maxCalls === 'number' ? maxCalls : null,
          spent: 0n,
          calls: 0,
          revokedBy: null,
        });
        return;
      }
      case 'revoke': {
        const ids: unknown = record(r.detail).revoked;
        for (const id of [r.capabilityId, ...(Array.isArray(ids) ? (ids as unknown[]) : [])]) {
          const cap = typeof id === 'string' ? this.caps.get(id) : undefined;
          if (cap !== undefined && cap.revokedBy === null) cap.revokedBy = r.id;
        }
        return;
      }
      case 'approve': {
        if (r.capabilityId === null) return;
        const chain = this.chain(r.capabilityId);
        if (chain === null) return;
        const revoked = this.revokedLink(chain);
        if (revoked !== null) return this.flag(r, `granted a call on capability ${r.capabilityId} after row ${revoked.revokedBy} revoked ${revoked.id}`);
        // A dry run charges nothing; its grant says what the call would leave.
        if (record(r.detail).dry_run === true || r.cost === null || !INTEGER.test(r.cost)) return;
        const cost = BigInt(r.cost);
        for (const link of chain) {
          if (link.cap.budget !== null && link.cap.spent + cost > link.cap.budget)
            return this.flag(r, `granted a call that takes capability ${link.id} past its budget`);
          if (link.cap.maxCalls !== null && link.cap.calls + 1 > link.cap.maxCalls)
            return this.flag(r, `granted a call that takes capability ${link.id} past its max_calls`);
        }
        for (const link of chain) {
          link.cap.spent += cost;
          link.cap.calls += 1;
        }
        return;
      }
      case 'access':
      case 'approval':
      case 'tool':
        return;
    }
  }

  /** The capability and its ancestors, or null when one of them was not issued in this tree. */
  private chain(id: string): { id: string; cap: Issued }[] | null {
    const links: { id: string; cap: Issued }[] = [];
    for (let at: string | null = id; at !== null;) {
      const cap = this.caps.get(at);
      if (cap === undefined || links.length > this.caps.size) return null;
      links.push({ id: at, cap });
      at = cap.parent;
    }
    return links;
  }

  private revokedLink(chain: { id: string; cap: Issued }[] | null): { id: string; revokedBy: string } | null {
    const link = chain?.find((l) => l.cap.revokedBy !== null);
    return link === undefined ? null : { id: link.id, revokedBy: link.cap.revokedBy as string };
  }

  private flag(r: AuditRecord, what: string): void {
    this.found = {
      firstBadId: r.id,
      reason: `row ${r.id} ${what}: the database's state was changed under the decision (or the decision was wrong)`,
    };
  }
}
