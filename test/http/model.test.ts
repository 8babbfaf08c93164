/**
 * Model-based test of the whole HTTP API: random sequences of mint, attenuate, approve and revoke
 * run against the service and against a small in-test model of API.md; every response and, at the
 * end of each run, every stored capability's spent/calls/status must match the model. Children
 * sometimes omit predicate fields (inherited from the parent) and approvals are sometimes dry runs
 * (decided, never charged), as issue 16 asks.
 */
import fc from 'fast-check';
import { posix } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createTenant } from '../../src/service/tenants.js';
import { BACKENDS } from '../support/db.js';
import { startHarness, type Harness } from '../support/app.js';

const RIGHTS = ['read', 'write', 'execute', 'connect'] as const;
type Right = (typeof RIGHTS)[number];
const MICRO = 1_000_000;

interface ModelCap {
  readonly id: string;
  readonly token: string;
  readonly parentId: string | null;
  readonly rights: ReadonlySet<Right>;
  readonly prefix: string;
  /** Micro-units; null when unbounded. */
  readonly budget: number | null;
  readonly maxCalls: number | null;
  readonly maxDepth: number;
  spent: number;
  calls: number;
  revoked: boolean;
  readonly children: string[];
}

const optionalSmall = fc.option(fc.integer({ min: 0, max: 5 }), { nil: null });
const rightsMask = fc.array(fc.boolean(), { minLength: 4, maxLength: 4 });

const mintCmd = fc.record({
  t: fc.constant('mint' as const),
  mask: rightsMask,
  prefix: fc.constantFrom('/w/a', '/w/b'),
  budget: optionalSmall,
  maxCalls: optionalSmall,
  maxDepth: fc.integer({ min: 0, max: 3 }),
});
const attenuateCmd = fc.record({
  t: fc.constant('attenuate' as const),
  pick: fc.nat(),
  mask: rightsMask,
  deeper: fc.boolean(),
  budget: optionalSmall,
  maxCalls: optionalSmall,
  widen: fc.constantFrom(null, null, null, null, 'rights', 'objects', 'predicate'),
  // Predicate fields the request leaves out, which the child inherits (issue 16).
  omit: fc.constantFrom('none', 'none', 'budget', 'max_calls', 'max_depth', 'all'),
});
const approveCmd = fc.record({
  t: fc.constant('approve' as const),
  pick: fc.nat(),
  op: fc.constantFrom(...RIGHTS),
  // Mostly an op the capability holds, so that grants and the cumulative bounds get exercised.
  held: fc.constantFrom(true, true, true, false),
  where: fc.constantFrom('in', 'in', 'in', 'in-dotdot', 'out', 'out-dotdot'),
  cost: fc.constantFrom(0, 0.5, 1, 2),
  // A dry run (issue 16): the same decision, nothing charged.
  dry: fc.constantFrom(false, false, false, true),
});
const revokeCmd = fc.record({ t: fc.constant('revoke' as const), pick: fc.nat() });
const command = fc.oneof(
  { arbitrary: mintCmd, weight: 2 },
  { arbitrary: attenuateCmd, weight: 3 },
  { arbitrary: approveCmd, weight: 8 },
  { arbitrary: revokeCmd, weight: 1 },
);
type Command = typeof command extends fc.Arbitrary<infer C> ? C : never;

const STEPS = 60;
const RUNS = 100;

const within = (path: string, prefix: string): boolean => path === prefix || path.startsWith(`${prefix}/`);

function pickRights(mask: readonly boolean[], from: readonly Right[]): Right[] {
  const chosen = from.filter((_, i) => mask[i % mask.length]);
  return chosen.length > 0 ? chosen : [from[0]!];
}

/** Micro-units to the API's decimal number. */
const money = (micro: number | null): number | null => (micro === null ? null : micro / MICRO);

describe.each(BACKENDS)('model-based HTTP API on %s', (backend) => {
  let h: Harness;
  let runs = 0;
  beforeAll(async () => {
    h = await startHarness(backend);
  });
  afterAll(async () => h.close());

  async function run(cmds: readonly Command[]): Promise<void> {
    const tenant = await createTenant(h.store, `model-${runs++}`, h.clock.now());
    const headers = { authorization: `Bearer ${tenant.apiKey}` };
    const call = (method: string, path: string, body?: unknown) => h.call(method, path, body, { headers });
    const caps: ModelCap[] = [];
    const byId = new Map<string, ModelCap>();
    const chainOf = (cap: ModelCap): ModelCap[] => {
      const out: ModelCap[] = [];
      for (let c: ModelCap | undefined = cap; c !== undefined; c = c.parentId === null ? undefined : byId.get(c.parentId)) out.unshift(c);
      return out;
    };
    const add = (cap: ModelCap): void => {
      caps.push(cap);
      byId.set(cap.id, cap);
      if (cap.parentId !== null) byId.get(cap.parentId)!.children.push(cap.id);
    };

    for (const [step, cmd] of cmds.entries()) {
      const where = `step ${step}: ${JSON.stringify(cmd)}`;
      if (cmd.t === 'mint') {
        const rights = pickRights(cmd.mask, RIGHTS);
        const predicate: Record<string, number> = { max_depth: cmd.maxDepth };
        if (cmd.budget !== null) predicate.budget = cmd.budget;
        if (cmd.maxCalls !== null) predicate.max_calls = cmd.maxCalls;
        const res = await call('POST', '/v1/capabilities', {
          trajectory_id: 'm',
          rights,
          objects: [{ kind: 'path', prefix: cmd.prefix }],
          predicate,
          ttl_s: 3600,
        });
        expect(res.status, where).toBe(201);
        add({
          id: res.body.capability_id,
          token: res.body.token,
          parentId: null,
          rights: new Set(rights),
          prefix: cmd.prefix,
          budget: cmd.budget === null ? null : cmd.budget * MICRO,
          maxCalls: cmd.maxCalls,
          maxDepth: cmd.maxDepth,
          spent: 0,
          calls: 0,
          revoked: false,
          children: [],
        });
        continue;
      }
      if (caps.length === 0) continue;
      const cap = caps[cmd.pick % caps.length]!;
      const chain = chainOf(cap);
      const chainRevoked = chain.some((c) => c.revoked);

      if (cmd.t === 'attenuate') {
        const parentRights = RIGHTS.filter((r) => cap.rights.has(r));
        const rights = pickRights(cmd.mask, parentRights);
        let prefix = cmd.deeper ? `${cap.prefix}/x` : cap.prefix;
        // Narrow by default: at most the parent's bound, unbounded only under an unbounded parent.
        let budget = cap.budget === null ? (cmd.budget === null ? null : cmd.budget * MICRO) : Math.min((cmd.budget ?? 0) * MICRO, cap.budget);
        let maxCalls = cap.maxCalls === null ? cmd.maxCalls : Math.min(cmd.maxCalls ?? 0, cap.maxCalls);
        let maxDepth = Math.max(0, cap.maxDepth - 1);
        const expected = new Set<string>();
        if (chainRevoked) expected.add('parent_revoked');
        if (cap.maxDepth === 0) expected.add('depth_exhausted');
        if (cmd.widen === 'rights') {
          const extra = RIGHTS.find((r) => !cap.rights.has(r));
          if (extra !== undefined) {
            rights.push(extra);
            expected.add('right_widened');
          }
        } else if (cmd.widen === 'objects') {
          prefix = '/w/c';
          expected.add('object_widened');
        } else if (cmd.widen === 'predicate') {
          if (cap.budget !== null) budget = cap.budget + MICRO;
          else if (cap.maxCalls !== null) maxCalls = cap.maxCalls + 1;
          else maxDepth = cap.maxDepth;
          // A parent with max_depth 0 reports depth_exhausted instead of a widened max_depth.
          if (cap.budget !== null || cap.maxCalls !== null || cap.maxDepth > 0) expected.add('predicate_widened');
        }
        // An omitted field takes the parent's bound (max_depth: one less, as above); a widened one is always sent.
        const omitted = new Set(cmd.widen === 'predicate' || cmd.omit === 'none' ? [] : cmd.omit === 'all' ? ['budget', 'max_calls', 'max_depth'] : [cmd.omit]);
        if (omitted.has('budget')) budget = cap.budget;
        if (omitted.has('max_calls')) maxCalls = cap.maxCalls;
        const predicate: Record<string, number> = {};
        if (!omitted.has('max_depth')) predicate.max_depth = maxDepth;
        if (budget !== null && !omitted.has('budget')) predicate.budget = budget / MICRO;
        if (maxCalls !== null && !omitted.has('max_calls')) predicate.max_calls = maxCalls;
        const res = await call('POST', '/v1/attenuate', {
          parent_token: cap.token,
          rights,
          objects: [{ kind: 'path', prefix }],
          predicate,
        });
        if (expected.size === 0) {
          expect(res.status, where).toBe(201);
          expect(res.body.parent_id, where).toBe(cap.id);
          add({
            id: res.body.capability_id,
            token: res.body.token,
            parentId: cap.id,
            rights: new Set(rights),
            prefix,
            budget,
            maxCalls,
            maxDepth,
            spent: 0,
            calls: 0,
            revoked: false,
            children: [],
          });
        } else {
          expect(res.status, where).toBe(403);
          expect(res.body.error.code, where).toBe('attenuation_refused');
          const codes = new Set((res.body.error.violations as { code: string }[]).map((v) => v.code));
          expect([...codes].sort(), where).toEqual([...expected].sort());
        }
        continue;
      }

      if (cmd.t === 'approve') {
        const path = {
          in: `${cap.prefix}/f`,
          'in-dotdot': `${cap.prefix}/x/../f`,
          out: '/w/c/f',
          'out-dotdot': `${cap.prefix}/../../c/f`,
        }[cmd.where];
        const cost = cmd.cost * MICRO;
        const op = cmd.held && !cap.rights.has(cmd.op) ? RIGHTS.find((r) => cap.rights.has(r))! : cmd.op;
        let code: string | null = null;
        if (chainRevoked) code = 'revoked';
        else if (!cap.rights.has(op)) code = 'right_missing';
        else if (!within(posix.normalize(path), cap.prefix)) code = 'object_outside';
        else if (chain.some((c) => c.budget !== null && c.spent + cost > c.budget)) code = 'budget_exhausted';
        else if (chain.some((c) => c.maxCalls !== null && c.calls + 1 > c.maxCalls)) code = 'calls_exhausted';
        const res = await call('POST', '/v1/approve', {
          token: cap.token,
          op,
          target: { kind: 'path', path },
          cost: cmd.cost,
          ...(cmd.dry ? { dry_run: true } : {}),
        });
        expect(res.status, where).toBe(200);
        expect(res.body.dry_run ?? false, where).toBe(cmd.dry);
        expect(res.body.decision, where).toBe(code === null ? 'grant' : 'deny');
        expect(res.body.reason?.code ?? null, where).toBe(code);
        if (code === null && !cmd.dry) {
          for (const c of chain) {
            c.spent += cost;
            c.calls += 1;
          }
        }
        // A dry-run grant answers what would remain after the call, which the model was not charged.
        const [wouldSpend, wouldCall] = code === null && cmd.dry ? [cost, 1] : [0, 0];
        const budgets = chain.filter((c) => c.budget !== null).map((c) => Math.max(0, c.budget! - c.spent - wouldSpend));
        const callsLeft = chain.filter((c) => c.maxCalls !== null).map((c) => Math.max(0, c.maxCalls! - c.calls - wouldCall));
        if (code === null || code === 'budget_exhausted' || code === 'calls_exhausted') {
          expect(res.body.budget_remaining, where).toBe(budgets.length === 0 ? null : money(Math.min(...budgets)));
          expect(res.body.calls_remaining, where).toBe(callsLeft.length === 0 ? null : Math.min(...callsLeft));
        }
        continue;
      }

      // revoke: the capability and every descendant not already revoked
      const fresh: string[] = [];
      const visit = (c: ModelCap): void => {
        if (!c.revoked) fresh.push(c.id);
        c.revoked = true;
        c.children.forEach((id) => visit(byId.get(id)!));
      };
      visit(cap);
      const res = await call('POST', '/v1/revoke', { capability_id: cap.id });
      expect(res.status, where).toBe(200);
      expect([...(res.body.revoked as string[])].sort(), where).toEqual(fresh.sort());
    }

    for (const cap of caps) {
      const res = await call('GET', `/v1/capabilities/${cap.id}`);
      expect(res.status).toBe(200);
      expect({ spent: res.body.spent, calls: res.body.calls, status: res.body.status, parent_id: res.body.parent_id }, cap.id).toEqual({
        spent: cap.spent / MICRO,
        calls: cap.calls,
        status: cap.revoked ? 'revoked' : 'active',
        parent_id: cap.parentId,
      });
      expect([...(res.body.children as string[])].sort()).toEqual([...cap.children].sort());
    }
    const verify = await call('GET', '/v1/audit/verify');
    expect(verify.body.ok).toBe(true);
  }

  test('random command sequences agree with the model of API.md', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(command, { minLength: 1, maxLength: STEPS, size: 'max' }), (cmds) => run(cmds)),
      { numRuns: RUNS },
    );
  }, 120_000);
});
