/**
 * evaluateApprove, the pure approve(op, target, cost) of API.md: every deny code it owns, each
 * boundary, the documented precedence (expired, not_yet_valid, revoked, right_missing,
 * object_outside, cost_exceeds_max, arg_violates_bound, budget_exhausted, calls_exhausted), and
 * the budget and calls left over the whole chain on a grant.
 */
import { describe, expect, test } from 'vitest';
import { checkValidity, evaluateApprove, remainingOf, type ApproveRequest, type ChainLink } from '../../src/core/approve.js';
import { canonicalObject, canonicalTarget } from '../../src/core/objects.js';
import { canonicalPredicate } from '../../src/core/predicate.js';
import type {
  CanonicalObject,
  CanonicalPredicate,
  CapabilityClaims,
  DenyCode,
  RawObject,
  RawPredicate,
  RawTarget,
  VerifiedCapability,
} from '../../src/core/types.js';

const T0_S = Date.parse('2026-06-01T12:00:00Z') / 1000;
const NOW = (T0_S + 60) * 1000;
const micro = (units: number): bigint => BigInt(Math.round(units * 1e6));

function objects(raw: RawObject[]): CanonicalObject[] {
  return raw.map((o) => {
    const c = canonicalObject(o);
    if (!c.ok) throw new Error(c.error);
    return c.value;
  });
}

function predicate(raw: RawPredicate): CanonicalPredicate {
  const c = canonicalPredicate(raw);
  if (!c.ok) throw new Error('bad test predicate');
  return c.value;
}

/** A capability as verifyToken would return it (these tests start after the signature check). */
function capability(over: Partial<CapabilityClaims> = {}): VerifiedCapability {
  const claims: CapabilityClaims = {
    id: 'cap_self',
    tenant: 'ten_a',
    trajectory: 't-1',
    parent: 'cap_root',
    depth: 1,
    rights: ['read', 'write'],
    objects: objects([
      { kind: 'path', prefix: '/workspace/traj-1' },
      { kind: 'host', name: '*.example.com', port: 443 },
    ]),
    predicate: predicate({
      max_cost: 1,
      budget: 10,
      max_calls: 5,
      args: [
        { kind: 'max', arg: 'timeout_ms', value: 30000 },
        { kind: 'one_of', arg: 'branch', values: ['main', 'dev'] },
      ],
    }),
    iat: T0_S,
    nbf: T0_S,
    exp: T0_S + 3600,
    ...over,
  };
  return claims as VerifiedCapability;
}

function request(over: Partial<Omit<ApproveRequest, 'target'>> & { target?: RawTarget } = {}): ApproveRequest {
  const t = canonicalTarget(over.target ?? { kind: 'path', path: '/workspace/traj-1/src/main.ts' });
  if (!t.ok) throw new Error(t.error);
  return { op: 'read', cost: micro(0.5), args: { timeout_ms: 1000, branch: 'main' }, ...over, target: t.value };
}

const link = (id: string, over: Partial<ChainLink> = {}): ChainLink => ({ id, revoked: false, budget: null, spent: 0n, maxCalls: null, calls: 0, ...over });
const root = (over: Partial<ChainLink> = {}): ChainLink => link('cap_root', { budget: micro(100), maxCalls: 100, ...over });
const self = (over: Partial<ChainLink> = {}): ChainLink => link('cap_self', { budget: micro(10), maxCalls: 5, ...over });

interface Scenario {
  cap: VerifiedCapability;
  req: ApproveRequest;
  now: number;
  chain: ChainLink[];
}

const base = (): Scenario => ({ cap: capability(), req: request(), now: NOW, chain: [root(), self()] });

function decide(s: Scenario): string {
  const d = evaluateApprove(s.cap, s.req, s.now, s.chain);
  return d.decision === 'grant' ? 'grant' : d.code;
}

describe('evaluateApprove: one rule at a time', () => {
  test.each<[string, (s: Scenario) => Scenario, DenyCode | 'grant']>([
    ['the base request', (s) => s, 'grant'],
    ['at the expiry instant', (s) => ({ ...s, now: s.cap.exp * 1000 }), 'expired'],
    ['1 ms before the expiry', (s) => ({ ...s, now: s.cap.exp * 1000 - 1 }), 'grant'],
    ['1 ms before not-before', (s) => ({ ...s, now: s.cap.nbf * 1000 - 1 }), 'not_yet_valid'],
    ['at the not-before instant', (s) => ({ ...s, now: s.cap.nbf * 1000 }), 'grant'],
    ['the capability revoked', (s) => ({ ...s, chain: [root(), self({ revoked: true })] }), 'revoked'],
    ['an ancestor revoked', (s) => ({ ...s, chain: [root({ revoked: true }), self()] }), 'revoked'],
    ['an op not in R', (s) => ({ ...s, req: request({ op: 'execute' }) }), 'right_missing'],
    ['the other op in R', (s) => ({ ...s, req: request({ op: 'write' }) }), 'grant'],
    ['a sibling path sharing the prefix string', (s) => ({ ...s, req: request({ target: { kind: 'path', path: '/workspace/traj-10/x' } }) }), 'object_outside'],
    [
      'a path leaving the prefix by ..',
      (s) => ({ ...s, req: request({ target: { kind: 'path', path: '/workspace/traj-1/../../etc/passwd' } }) }),
      'object_outside',
    ],
    ['a host under the wildcard on its port', (s) => ({ ...s, req: request({ target: { kind: 'host', name: 'api.example.com', port: 443 } }) }), 'grant'],
    [
      'a host under the wildcard on another port',
      (s) => ({ ...s, req: request({ target: { kind: 'host', name: 'api.example.com', port: 80 } }) }),
      'object_outside',
    ],
    [
      'a URL target against path and host objects',
      (s) => ({ ...s, req: request({ target: { kind: 'url', url: 'https://api.example.com/' } }) }),
      'object_outside',
    ],
    ['a cost equal to max_cost', (s) => ({ ...s, req: request({ cost: micro(1) }) }), 'grant'],
    ['a cost one micro-unit over max_cost', (s) => ({ ...s, req: request({ cost: micro(1) + 1n }) }), 'cost_exceeds_max'],
    ['a bounded argument missing', (s) => ({ ...s, req: request({ args: { branch: 'main' } }) }), 'arg_violates_bound'],
    ['a bounded argument over its max', (s) => ({ ...s, req: request({ args: { timeout_ms: 30001, branch: 'main' } }) }), 'arg_violates_bound'],
    ['a bounded argument not one of its values', (s) => ({ ...s, req: request({ args: { timeout_ms: 1, branch: 'prod' } }) }), 'arg_violates_bound'],
    ['a call spending the budget exactly', (s) => ({ ...s, chain: [root(), self({ spent: micro(9.5) })] }), 'grant'],
    ['a call one micro-unit over the budget', (s) => ({ ...s, chain: [root(), self({ spent: micro(9.5) + 1n })] }), 'budget_exhausted'],
    ['a call over an ancestor budget', (s) => ({ ...s, chain: [root({ spent: micro(99.6) }), self()] }), 'budget_exhausted'],
    ['a zero-cost call on a spent budget', (s) => ({ ...s, req: request({ cost: 0n }), chain: [root(), self({ spent: micro(10) })] }), 'grant'],
    ['the last call allowed', (s) => ({ ...s, chain: [root(), self({ calls: 4 })] }), 'grant'],
    ['one call too many', (s) => ({ ...s, chain: [root(), self({ calls: 5 })] }), 'calls_exhausted'],
    ['one call too many for an ancestor', (s) => ({ ...s, chain: [root({ calls: 100 }), self()] }), 'calls_exhausted'],
    ['max_calls 0', (s) => ({ ...s, chain: [root(), self({ maxCalls: 0 })] }), 'calls_exhausted'],
    ['no budget or calls bound anywhere', (s) => ({ ...s, chain: [link('cap_root'), link('cap_self', { spent: micro(1e6), calls: 1e6 })] }), 'grant'],
  ])('%s', (_name, change, expected) => {
    expect(decide(change(base()))).toBe(expected);
  });
});

describe('evaluateApprove: precedence', () => {
  // Each fault breaks one rule; with faults i.. applied, the code of fault i must win.
  const faults: [DenyCode, (s: Scenario) => Scenario][] = [
    ['expired', (s) => ({ ...s, cap: capability({ ...s.cap, exp: Math.floor(s.now / 1000) }) })],
    ['not_yet_valid', (s) => ({ ...s, cap: capability({ ...s.cap, nbf: Math.floor(s.now / 1000) + 60 }) })],
    ['revoked', (s) => ({ ...s, chain: s.chain.map((l) => (l.id === 'cap_root' ? { ...l, revoked: true } : l)) })],
    ['right_missing', (s) => ({ ...s, req: { ...s.req, op: 'connect' } })],
    ['object_outside', (s) => ({ ...s, req: { ...s.req, target: request({ target: { kind: 'path', path: '/etc/passwd' } }).target } })],
    ['cost_exceeds_max', (s) => ({ ...s, req: { ...s.req, cost: micro(2) } })],
    ['arg_violates_bound', (s) => ({ ...s, req: { ...s.req, args: {} } })],
    // The budget on the capability itself, the calls on its ancestor (earlier in the chain): the
    // documented order must hold whichever link breaks which bound.
    ['budget_exhausted', (s) => ({ ...s, chain: s.chain.map((l) => (l.id === 'cap_self' ? { ...l, spent: micro(10) } : l)) })],
    ['calls_exhausted', (s) => ({ ...s, chain: s.chain.map((l) => (l.id === 'cap_root' ? { ...l, calls: 100 } : l)) })],
  ];

  test.each(faults.map(([code], i) => [code, i] as const))('%s wins over every later rule', (code, i) => {
    const s = faults.slice(i).reduce((acc, [, apply]) => apply(acc), base());
    expect(decide(s)).toBe(code);
  });

  test('budget_exhausted wins over calls_exhausted on the same link', () => {
    expect(decide({ ...base(), chain: [root(), self({ spent: micro(10), calls: 5 })] })).toBe('budget_exhausted');
  });

  test('the base scenario without faults grants', () => {
    expect(decide(base())).toBe('grant');
  });
});

describe('evaluateApprove: what is left after a grant', () => {
  test.each<[string, ChainLink[], bigint | null, number | null]>([
    ['the tighter link is the capability', [root(), self({ spent: micro(2), calls: 1 })], micro(7.5), 3],
    ['the tighter link is the ancestor', [root({ spent: micro(95), calls: 99 }), self()], micro(4.5), 0],
    ['budget and calls bounded on different links', [root({ budget: null, maxCalls: 7, calls: 2 }), self({ maxCalls: null })], micro(9.5), 4],
    ['nothing bounded', [link('cap_root'), link('cap_self')], null, null],
  ])('%s', (_name, chain, budget, calls) => {
    expect(evaluateApprove(capability(), request(), NOW, chain)).toEqual({ decision: 'grant', budgetRemaining: budget, callsRemaining: calls });
  });
});

describe('checkValidity', () => {
  test.each<[string, number, string | null]>([
    ['before nbf', T0_S * 1000 - 1, 'not_yet_valid'],
    ['at nbf', T0_S * 1000, null],
    ['1 ms before exp', (T0_S + 3600) * 1000 - 1, null],
    ['at exp', (T0_S + 3600) * 1000, 'expired'],
    ['1 s after exp', (T0_S + 3601) * 1000, 'expired'],
  ])('%s', (_name, now, code) => {
    expect(checkValidity(capability(), now)?.code ?? null).toBe(code);
  });
});

describe('remainingOf (for denials)', () => {
  test.each<[string, ChainLink[], bigint | null, number | null]>([
    ['the least left over the chain', [root({ spent: micro(99) }), self({ spent: micro(3), calls: 2 })], micro(1), 3],
    ['overspent links count as 0, never negative', [root(), self({ spent: micro(11), calls: 9 })], 0n, 0],
    ['nothing bounded', [link('cap_root'), link('cap_self')], null, null],
  ])('%s', (_name, chain, budget, calls) => {
    expect(remainingOf(chain)).toEqual({ budgetRemaining: budget, callsRemaining: calls });
  });
});
