/**
 * An in-process Warrant for HTTP tests: the real app on a real database (see db.ts), the fixed
 * test key ring of test/vectors/keys.json, a clock the test moves, and two tenants.
 */
import { readFileSync } from 'node:fs';
import { createApp } from '../../src/http/app.js';
import { checkpointTenant, type MadeCheckpoint } from '../../src/audit/checkpointer.js';
import { generateSigningJwk, loadKeyRing, type KeyRing } from '../../src/crypto/keys.js';
import { createTenant } from '../../src/service/tenants.js';
import { Store } from '../../src/store/store.js';
import { DecisionWriter } from '../../src/store/writer.js';
import { openTestDatabase, type Backend, type TestDatabase } from './db.js';

export const KEYS = JSON.parse(readFileSync(new URL('../vectors/keys.json', import.meta.url), 'utf8')) as {
  old: { keys: Record<string, string>[] };
  ring: { keys: Record<string, string>[] };
  foreign: { keys: Record<string, string>[] };
};

export const T0 = Date.parse('2026-06-01T12:00:00Z');

/** A clock tests move by hand. */
export class Clock {
  constructor(public ms = T0) {}
  readonly now = (): Date => new Date(this.ms);
  advance(seconds: number): void {
    this.ms += seconds * 1000;
  }
}

export interface Harness {
  readonly backend: Backend;
  readonly database: TestDatabase;
  readonly store: Store;
  readonly writer: DecisionWriter;
  readonly keys: KeyRing;
  /** The audit checkpoint key ring (a fresh key per harness). */
  readonly auditKeys: KeyRing;
  readonly clock: Clock;
  readonly app: ReturnType<typeof createApp>;
  /** API keys of tenants "a" and "b". */
  readonly tenants: { readonly a: string; readonly b: string };
  readonly tenantIds: { readonly a: string; readonly b: string };
  /** A JSON request as tenant a (or `as`), returning status, parsed body and headers. */
  call(method: string, path: string, body?: unknown, options?: CallOptions): Promise<Called>;
  /** Makes a checkpoint for a tenant ("a" by default) now; null when nothing was new. */
  checkpoint(as?: 'a' | 'b'): Promise<MadeCheckpoint | null>;
  close(): Promise<void>;
}

export interface CallOptions {
  readonly as?: 'a' | 'b' | 'none';
  readonly headers?: Record<string, string>;
  /** Sent as is instead of JSON.stringify(body). */
  readonly raw?: string;
}

export interface Called {
  readonly status: number;
  // Tests read fields freely; the assertions are what check the shape.
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  readonly body: any;
  readonly headers: Headers;
}

/**
 * The deadline of the harness's decisions: long, so that a test not about deadlines is not failed by
 * a busy machine (CI shares two cores with the database); tests of deadlines set their own.
 */
export const TEST_DEADLINE_MS = 30_000;

export async function startHarness(backend: Backend, ring: 'ring' | 'old' = 'ring'): Promise<Harness> {
  const database = await openTestDatabase(backend);
  const store = new Store(database.db);
  const clock = new Clock();
  const keys = await loadKeyRing(KEYS[ring]);
  const auditKeys = await loadKeyRing({ keys: [await generateSigningJwk()] });
  const writer = new DecisionWriter(database.db, { now: clock.now, deadlineMs: TEST_DEADLINE_MS });
  const app = createApp({ store, writer, keys, auditKeys, now: clock.now, deadlineMs: TEST_DEADLINE_MS });
  const a = await createTenant(store, 'a', clock.now());
  const b = await createTenant(store, 'b', clock.now());
  const tenants = { a: a.apiKey, b: b.apiKey };
  return {
    backend,
    database,
    store,
    writer,
    keys,
    auditKeys,
    clock,
    app,
    tenants,
    tenantIds: { a: a.tenant.id, b: b.tenant.id },
    async call(method, path, body, options = {}) {
      const headers: Record<string, string> = { ...options.headers };
      const as = options.as ?? 'a';
      if (as !== 'none') headers.authorization ??= `Bearer ${tenants[as]}`;
      let payload: string | undefined = options.raw;
      if (payload === undefined && body !== undefined) payload = JSON.stringify(body);
      if (payload !== undefined) headers['content-type'] ??= 'application/json';
      const res = await app.request(path, { method, headers, ...(payload === undefined ? {} : { body: payload }) });
      const text = await res.text();
      let parsed: unknown = text;
      try {
        parsed = JSON.parse(text);
      } catch {
        // not JSON: keep the text
      }
      return { status: res.status, body: parsed, headers: res.headers };
    },
    checkpoint(as = 'a') {
      return checkpointTenant({ db: database.db, keys: auditKeys, now: clock.now }, as === 'a' ? a.tenant.id : b.tenant.id);
    },
    async close() {
      await writer.flush();
      await database.close();
    },
  };
}

/** A typical mint body; fields override. */
export function mintBody(over: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    trajectory_id: 't-1',
    rights: ['read', 'write'],
    objects: [{ kind: 'path', prefix: '/workspace/t-1' }],
    predicate: { budget: 10, max_calls: 100, max_depth: 3 },
    ttl_s: 3600,
    ...over,
  };
}
