/**
 * Budgets and call counts under concurrency (DESIGN "Budgets and call counts"): 200 approvals fired
 * at once over a root, its child and its grandchild grant exactly as many calls as the root allows,
 * and the audit log, the stored `spent`/`calls` and the audit chain all agree. On PostgreSQL the same
 * holds with two app instances on two connection pools, and the CHECK constraints refuse a row that
 * spends past its bound whoever writes it.
 */
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createApp } from '../../src/http/app.js';
import { loadKeyRing } from '../../src/crypto/keys.js';
import { openDatabase, type Database } from '../../src/node/db.js';
import { Store } from '../../src/store/store.js';
import { DecisionWriter } from '../../src/store/writer.js';
import { BACKENDS } from '../support/db.js';
import { KEYS, startHarness, TEST_DEADLINE_MS, type Harness } from '../support/app.js';

type App = ReturnType<typeof createApp>;
type Body = Record<string, unknown>;

interface Issued {
  capability_id: string;
  token: string;
}

interface Reply {
  status: number;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  body: any;
}

const CALLS = 200;

let seq = 0;
const traj = (): string => `conc-${++seq}`;

/** A JSON request to any app instance as the tenant whose API key is given. */
async function callOn(app: App, apiKey: string, method: string, path: string, body?: unknown): Promise<Reply> {
  const headers: Record<string, string> = { authorization: `Bearer ${apiKey}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await app.request(path, { method, headers, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
  return { status: res.status, body: await res.json() };
}

/** Postgres error code of a failed statement, through drizzle's wrapper when there is one. */
function pgCode(e: unknown): string | undefined {
  const err = e as { code?: unknown; cause?: { code?: unknown } };
  const code = err.cause?.code ?? err.code;
  return typeof code === 'string' ? code : undefined;
}

/** [name, root predicate (bounds only), cost per call, grants expected, deny code once spent]. */
const LIMITS: [string, Body, number, number, string][] = [
  ['budget 50 at cost 1', { budget: 50, max_calls: 1000 }, 1, 50, 'budget_exhausted'],
  ['max_calls 30 without a budget', { max_calls: 30 }, 1, 30, 'calls_exhausted'],
  ['budget 5 at cost 0.1 (summed exactly)', { budget: 5, max_calls: 1000 }, 0.1, 50, 'budget_exhausted'],
];

describe.each(BACKENDS)('concurrent approvals on %s', (backend) => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness(backend);
  });
  afterAll(async () => h.close());

  /** Root → child → grandchild of one trajectory, each with the root's bounds (the tightest allowed). */
  async function tree(app: App, bounds: Body): Promise<{ trajectory: string; chain: Issued[] }> {
    const trajectory = traj();
    const objects = [{ kind: 'path', prefix: `/workspace/${trajectory}` }];
    const root = await callOn(app, h.tenants.a, 'POST', '/v1/capabilities', {
      trajectory_id: trajectory,
      rights: ['read'],
      objects,
      predicate: { ...bounds, max_depth: 2 },
      ttl_s: 3600,
    });
    expect(root.status).toBe(201);
    const chain: Issued[] = [root.body as Issued];
    for (const depth of [1, 0]) {
      const parent = chain[chain.length - 1] as Issued;
      const child = await callOn(app, h.tenants.a, 'POST', '/v1/attenuate', {
        parent_token: parent.token,
        rights: ['read'],
        objects,
        predicate: { ...bounds, max_depth: depth },
      });
      expect(child.status).toBe(201);
      chain.push(child.body as Issued);
    }
    return { trajectory, chain };
  }

  /** Every audit entry of a trajectory, following `next` a small page at a time. */
  async function auditOf(trajectory: string): Promise<Body[]> {
    const entries: Body[] = [];
    let after: string | null = null;
    for (let page = 0; page < 100; page++) {
      const query = new URLSearchParams({ trajectory_id: trajectory, event: 'approve', limit: '37', ...(after === null ? {} : { after }) });
      const r = await callOn(h.app, h.tenants.a, 'GET', `/v1/audit?${query.toString()}`);
      expect(r.status).toBe(200);
      entries.push(...(r.body.entries as Body[]));
      after = r.body.next as string | null;
      if (after === null) return entries;
    }
    throw new Error('audit pagination did not end');
  }

  /**
   * Fires CALLS approvals at once, call i on chain[i % 3] through apps[i % apps.length], and checks
   * that exactly `grants` are granted and that the audit log and the stored counters say the same.
   */
  async function runAndCheck(apps: App[], bounds: Body, cost: number, grants: number, denyCode: string): Promise<void> {
    const { trajectory, chain } = await tree(apps[0] as App, bounds);
    const replies = await Promise.all(
      Array.from({ length: CALLS }, (_, i) => {
        const cap = chain[i % chain.length] as Issued;
        return callOn(apps[i % apps.length] as App, h.tenants.a, 'POST', '/v1/approve', {
          token: cap.token,
          op: 'read',
          target: { kind: 'path', path: `/workspace/${trajectory}/f${i}` },
          cost,
        });
      }),
    );
    expect(replies.filter((r) => r.status !== 200).map((r) => [r.status, r.body.error?.code])).toEqual([]);
    const granted = replies.filter((r) => r.body.decision === 'grant');
    expect(granted).toHaveLength(grants);
    expect(new Set(replies.filter((r) => r.body.decision === 'deny').map((r) => r.body.reason.code))).toEqual(new Set([denyCode]));

    const entries = await auditOf(trajectory);
    expect(entries).toHaveLength(CALLS);
    const grantRows = entries.filter((e) => e.decision === 'grant');
    expect(grantRows).toHaveLength(grants);
    expect(new Set(grantRows.map((e) => e.id))).toEqual(new Set(granted.map((r) => r.body.audit_id)));

    // Each capability is charged for its own grants and its descendants'.
    const own = chain.map((c) => granted.filter((r) => r.body.capability_id === c.capability_id).length);
    for (let i = 0; i < chain.length; i++) {
      const below = own.slice(i).reduce((a, b) => a + b, 0);
      const stored = await callOn(h.app, h.tenants.a, 'GET', `/v1/capabilities/${chain[i]?.capability_id}`);
      expect(stored.status).toBe(200);
      expect(stored.body.calls).toBe(below);
      expect(stored.body.spent).toBeCloseTo(below * cost, 6);
    }
    const verify = await callOn(h.app, h.tenants.a, 'GET', '/v1/audit/verify');
    expect(verify.body.ok).toBe(true);
  }

  /** No stored capability has spent past its budget or called past its max_calls. */
  async function noRowOverBound(): Promise<void> {
    const rows = await h.database.db.execute(
      sql`SELECT count(*)::int AS n FROM capabilities WHERE (budget IS NOT NULL AND spent > budget) OR (max_calls IS NOT NULL AND calls > max_calls)`,
    );
    const list = (Array.isArray(rows) ? rows : (rows as { rows: unknown[] }).rows) as { n: number }[];
    expect(Number(list[0]?.n)).toBe(0);
  }

  test.each(LIMITS)('one instance, %s', async (_name, bounds, cost, grants, denyCode) => {
    await runAndCheck([h.app], bounds, cost, grants, denyCode);
    await noRowOverBound();
  });

  describe.runIf(backend === 'postgres')('two instances on two pools', () => {
    const instances: { database: Database; writer: DecisionWriter; app: App }[] = [];
    beforeAll(async () => {
      const url = h.database.url;
      if (url === undefined) throw new Error('the postgres test database has no url');
      for (let i = 0; i < 2; i++) {
        const database = await openDatabase({ databaseUrl: url, poolSize: 10 });
        // Small batches: each instance commits many transactions that contend with the other's.
        const writer = new DecisionWriter(database.db, { now: h.clock.now, maxBatch: 4, deadlineMs: TEST_DEADLINE_MS });
        const app = createApp({
          store: new Store(database.db),
          writer,
          keys: await loadKeyRing(KEYS.ring),
          now: h.clock.now,
          deadlineMs: TEST_DEADLINE_MS,
        });
        instances.push({ database, writer, app });
      }
    });
    afterAll(async () => {
      for (const { database, writer } of instances) {
        await writer.flush();
        await database.close();
      }
    });

    test.each(LIMITS)('%s', async (_name, bounds, cost, grants, denyCode) => {
      await runAndCheck(
        instances.map((i) => i.app),
        bounds,
        cost,
        grants,
        denyCode,
      );
      await noRowOverBound();
    });
  });

  describe('the CHECK constraints refuse any writer that overspends', () => {
    test.each([
      ['spent past budget', sql`spent = budget + 1`, { budget: 1 }],
      ['calls past max_calls', sql`calls = max_calls + 1`, { max_calls: 1 }],
    ])('%s', async (_name, set, predicate) => {
      const r = await callOn(h.app, h.tenants.a, 'POST', '/v1/capabilities', {
        trajectory_id: traj(),
        rights: ['read'],
        objects: [{ kind: 'path', prefix: '/w' }],
        predicate,
        ttl_s: 60,
      });
      expect(r.status).toBe(201);
      const id = (r.body as Issued).capability_id;
      const update = sql`UPDATE capabilities SET ${set} WHERE id = ${id}`;
      let code: string | undefined;
      try {
        await h.database.db.execute(update);
      } catch (e) {
        code = pgCode(e);
      }
      expect(code).toBe('23514'); // check_violation
      // At the bound itself the row is fine: the constraint is `<=`, not `<`.
      await h.database.db.execute(sql`UPDATE capabilities SET spent = coalesce(budget, spent), calls = coalesce(max_calls, calls) WHERE id = ${id}`);
    });
  });
});
