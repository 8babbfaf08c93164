/**
 * The Cloudflare Workers entry: the same app as the Node server (createApp), its database reached
 * through a Hyperdrive binding (`HYPERDRIVE`) or a `DATABASE_URL` secret with postgres.js, and its
 * signing keys from the `WARRANT_SIGNING_KEYS` secret (a JWK set, as for Node). See wrangler.toml.
 *
 * Migrations are never run here: apply them from Node against the same database, by running
 * `npm run tenant -- create <name>` or `npm start` once with DATABASE_URL pointing at it (both
 * migrate first, under an advisory lock). Nor is the re-seal sweep (src/service/reseal.ts), which the
 * Node server runs at each start: here every request has its own app and database client, and a
 * sweep per isolate would read the tools table on every cold start. After rotating
 * WARRANT_SIGNING_KEYS, run `npm run keys -- reseal` from Node with the same set (keys/README.md).
 *
 * Nothing here or below may import a Node built-in (test/layers.test.ts): postgres.js resolves to its
 * Workers build (`workerd` export condition, cloudflare:sockets) when wrangler bundles it.
 */
import { drizzle } from 'drizzle-orm/postgres-js';
import postgres from 'postgres';
import { assertDisjoint, KeyRingError, loadKeyRing, type KeyRing } from './crypto/keys.js';
import { createApp } from './http/app.js';
import { unavailable } from './service/errors.js';
import { Store, type Db } from './store/store.js';
import { DecisionWriter } from './store/writer.js';

/** The part of the Hyperdrive binding (workers-types `Hyperdrive`) this entry uses. */
export interface HyperdriveBinding {
  readonly connectionString: string;
}

/** Bindings and secrets, as wrangler.toml declares them. */
export interface Env {
  readonly HYPERDRIVE?: HyperdriveBinding;
  readonly DATABASE_URL?: string;
  readonly WARRANT_SIGNING_KEYS?: string;
  /**
   * The audit checkpoint key ring (a JWK set, as `npm run keys -- rotate --audit` writes it): served at
   * /.well-known/warrant-audit-keys.json and used by GET /v1/audit/verify. Workers make no
   * checkpoints themselves (no timer, no sink): run `npm run audit -- checkpoint` on a schedule, or a
   * Node instance, against the same database (README "Audit checkpoints").
   */
  readonly WARRANT_AUDIT_KEYS?: string;
}

/** One JSON object per line; Workers Logs keeps console output. Callers never pass tokens or keys. */
function log(entry: Record<string, unknown>): void {
  console.log(JSON.stringify({ time: new Date().toISOString(), level: 'info', ...entry }));
}

/** The answer while the Worker cannot serve: liveness stays up, everything else fails closed (docs/api.md "Errors"). */
function notServing(request: Request): Response {
  if (new URL(request.url).pathname === '/healthz') return Response.json({ ok: true });
  return Response.json(unavailable().toBody(), { status: 503, headers: { 'Cache-Control': 'no-store' } });
}

// A ring depends only on its secret, so it is parsed and imported once per isolate. The resolved
// ring is cached, not a promise: a promise settled under one request must not be awaited by another.
const ringCache = new Map<string, KeyRing>();

async function keyRing(source: string): Promise<KeyRing> {
  const cached = ringCache.get(source);
  if (cached !== undefined) return cached;
  const ring = await loadKeyRing(JSON.parse(source) as { keys?: unknown });
  if (ringCache.size >= 2) ringCache.clear(); // the signing and the audit ring; a rotated secret replaces them
  ringCache.set(source, ring);
  return ring;
}

function databaseUrl(env: Env): string | undefined {
  const url = env.HYPERDRIVE?.connectionString ?? env.DATABASE_URL?.trim();
  return url === '' ? undefined : url;
}

/** Handles one request with its own database client (see below). */
export async function handle(request: Request, env: Env): Promise<Response> {
  const url = databaseUrl(env);
  const secret = env.WARRANT_SIGNING_KEYS?.trim();
  if (url === undefined || secret === undefined || secret === '') {
    log({ level: 'error', msg: 'not configured', database: url !== undefined, signing_keys: secret !== undefined && secret !== '' });
    return notServing(request);
  }
  let keys: KeyRing;
  let auditKeys: KeyRing | undefined;
  const auditSecret = env.WARRANT_AUDIT_KEYS?.trim();
  try {
    keys = await keyRing(secret);
    auditKeys = auditSecret === undefined || auditSecret === '' ? undefined : await keyRing(auditSecret);
    if (auditKeys !== undefined) assertDisjoint(keys, auditKeys);
  } catch (e) {
    // A KeyRingError says what is wrong with the set; a JSON SyntaxError's message may quote the secret.
    const error = e instanceof KeyRingError ? e.message : e instanceof Error ? e.name : 'unknown';
    log({ level: 'error', msg: 'WARRANT_SIGNING_KEYS or WARRANT_AUDIT_KEYS is not a usable JWK set, or they share a key', error });
    return notServing(request);
  }
  // Workers cannot share a socket between requests, so each request gets its own small client;
  // Hyperdrive pools the real connections, which makes this cheap (Cloudflare's Hyperdrive postgres.js
  // example: a client per request, `max: 5` under the limit of six open connections per invocation).
  // As there, `fetch_types: false` saves the array-type query that every new connection (here: every
  // request) would run first. postgres.js then returns arrays as the literal '{a,b}', which is safe only
  // because every array this app reads is a drizzle array column (rights, ancestors), which drizzle
  // parses itself: a raw `sql` select of an array would get the string here and an array on Node.
  // `prepare` stays on (the default): Hyperdrive caches prepared statements.
  // The decision writer is per request too: group commit only batches within this request.
  let client: postgres.Sql;
  try {
    client = postgres(url, { max: 5, fetch_types: false, connect_timeout: 5, onnotice: () => {} });
  } catch (e) {
    log({ level: 'error', msg: 'bad database URL', error: e instanceof Error ? e.name : 'unknown' });
    return notServing(request);
  }
  const db: Db = drizzle(client);
  const now = (): Date => new Date();
  const writer = new DecisionWriter(db, { now });
  const app = createApp({ store: new Store(db), writer, keys, ...(auditKeys === undefined ? {} : { auditKeys }), now, log });
  const response = await app.fetch(request);
  // `submit` resolves only after its batch committed, so this is already done; it makes sure no
  // write is still running when the invocation ends. No `client.end()`, as in Cloudflare's example:
  // workerd closes the request's sockets when it finishes (no connection stays open on the server, by
  // URL or through Hyperdrive), and DESIGN.md saw end() fail there with "Stream was cancelled".
  await writer.flush();
  return response;
}

export default {
  fetch: handle,
};
