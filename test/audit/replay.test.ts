/**
 * The replay of each tree's decisions from its rows (src/audit/replay.ts): what the authority would
 * have refused (a grant under a revocation, past a budget or a call count, its own or an ancestor's)
 * is found; what it grants lawfully (dry runs, denials and pending calls charge nothing; capabilities
 * issued elsewhere are not judged) is not.
 */
import { describe, expect, test } from 'vitest';
import { DecisionReplay } from '../../src/audit/replay.js';
import type { AuditRecord } from '../../src/store/store.js';

let n = 0;
function row(over: Partial<AuditRecord>): AuditRecord {
  n += 1;
  return {
    tenantId: 'ten',
    treeId: 'root',
    seq: n,
    pos: n,
    id: `aud_${n}`,
    at: new Date(0),
    event: 'approve',
    decision: 'grant',
    reasonCode: null,
    capabilityId: null,
    parentId: null,
    trajectoryId: null,
    op: null,
    target: null,
    cost: null,
    callId: null,
    detail: null,
    keyId: null,
    requestId: null,
    rootTrajectoryId: null,
    prevHash: '',
    hash: '',
    ...over,
  };
}
const mint = (id: string, predicate: Record<string, unknown>): AuditRecord => row({ event: 'mint', capabilityId: id, treeId: 'root', detail: { predicate } });
const attenuate = (id: string, parent: string, predicate: Record<string, unknown>): AuditRecord =>
  row({ event: 'attenuate', capabilityId: id, parentId: parent, detail: { predicate } });
/** A grant of `cost` micro-units. */
const call = (cap: string, cost: number, over: Partial<AuditRecord> = {}): AuditRecord => row({ capabilityId: cap, cost: String(cost), ...over });
const revoke = (cap: string, revoked: string[]): AuditRecord => row({ event: 'revoke', capabilityId: cap, detail: { revoked, reason: null } });

function replay(rows: AuditRecord[]): { firstBadId: string; reason: string } | null {
  const r = new DecisionReplay();
  for (const x of rows) r.see(x);
  return r.first;
}

describe('DecisionReplay', () => {
  test('lawful grants up to the budget, with denials, pending calls and dry runs charging nothing', () => {
    expect(
      replay([
        mint('root', { budget: 1 }),
        call('root', 600_000),
        call('root', 900_000, { decision: 'deny' }),
        call('root', 900_000, { decision: 'pending' }),
        call('root', 900_000, { detail: { dry_run: true } }),
        call('root', 400_000),
      ]),
    ).toBeNull();
  });

  test('a grant past the budget is named', () => {
    const past = call('root', 400_001);
    expect(replay([mint('root', { budget: 1 }), call('root', 600_000), past])).toEqual({
      firstBadId: past.id,
      reason: expect.stringMatching(/root past its budget/),
    });
  });

  test("a child's calls count against its ancestors' budgets and call counts", () => {
    const over = call('child', 1);
    expect(replay([mint('root', { budget: 1, max_calls: 2 }), attenuate('child', 'root', { budget: 1 }), call('root', 1), call('child', 1), over])).toEqual({
      firstBadId: over.id,
      reason: expect.stringMatching(/capability root past its max_calls/),
    });
  });

  test('a grant under a revoked ancestor is named; one before the revocation is not', () => {
    const after = call('child', 1);
    const rows = [mint('root', {}), attenuate('child', 'root', {}), call('child', 1), revoke('root', ['root', 'child']), after];
    expect(replay(rows)).toEqual({ firstBadId: after.id, reason: expect.stringMatching(/after row aud_\d+ revoked child/) });
    expect(replay(rows.slice(0, 3))).toBeNull();
  });

  test('a revocation counts even when its row lists none revoked now (an earlier row did)', () => {
    const after = call('root', 1);
    expect(replay([mint('root', {}), revoke('root', []), after])?.firstBadId).toBe(after.id);
  });

  test('a second outcome of one approval is named; a pending ask, its resolution and one outcome are not', () => {
    const ask = call('root', 1, { decision: 'pending', detail: { approval_id: 'apv_1' } });
    const resolution = row({ event: 'approval', capabilityId: 'root', detail: { approval_id: 'apv_1' } });
    const outcome = call('root', 1, { detail: { approval_id: 'apv_1' } });
    const again = call('root', 1, { detail: { approval_id: 'apv_1' } });
    expect(replay([mint('root', {}), ask, resolution, outcome])).toBeNull();
    expect(replay([mint('root', {}), ask, resolution, outcome, resolution, again])).toEqual({
      firstBadId: again.id,
      reason: expect.stringMatching(/settled approval apv_1 a second time/),
    });
  });

  test('a grant on a capability in a tree it was not issued in is named, whichever tree is read first', () => {
    const moved = call('child', 1, { treeId: 'a-other' });
    const rows = [moved, mint('root', {}), attenuate('child', 'root', {}), revoke('root', ['root', 'child'])];
    expect(replay(rows)).toEqual({
      firstBadId: moved.id,
      reason: expect.stringMatching(/capability child in tree 'a-other', but it was issued in tree 'root'/),
    });
  });

  test("another tree's revocation, capabilities issued in no tree read, and legacy ones issued on the tenant's own chain are not judged", () => {
    const inTree = (treeId: string, r: AuditRecord): AuditRecord => ({ ...r, treeId });
    const rows = [
      mint('root', {}),
      revoke('root', ['root']),
      inTree('other', mint('other', { budget: 1 })),
      call('other', 1, { treeId: 'other' }),
      call('stranger', 1, { treeId: 'root' }),
      inTree('', mint('legacy', {})),
      call('legacy', 1, { treeId: 'legacy' }),
    ];
    expect(replay(rows)).toBeNull();
  });
});
