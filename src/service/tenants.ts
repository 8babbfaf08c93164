/**
 * Tenants and authentication. A key is `wk.<key id>.<secret>`: the key id finds the key (and its
 * tenant), and the SHA-256 of the whole key is compared in constant time with the stored hash (the
 * key itself is never stored). Keys found are cached for `ttlMs` (30 s): a key revoked through this
 * instance is dropped from its cache at once, and so is one revoked anywhere else (another instance,
 * the CLI) on an instance told of it (AppDeps.keyRevocations: on Node, PostgreSQL's LISTEN). Instances
 * not told (Workers, or while the listening connection is down) stop accepting it within the TTL.
 */
import { constantTimeEqual, newId, sha256Hex } from '../crypto/hash.js';
import { DeadlineExceeded, type Deadline } from '../store/deadline.js';
import type { ApiKeyRecord, Store, TenantRecord } from '../store/store.js';
import { isUsable, KEY_FORMAT, newApiKey, ROLES, type Principal, type Role } from './keys.js';

export interface CreatedTenant {
  readonly tenant: TenantRecord;
  /** The tenant's first key (role admin, named `initial`); shown once, only its hash is kept. */
  readonly apiKey: string;
  readonly keyId: string;
}

/**
 * Creates a tenant with one admin key. `keep` is given the key before the tenant is stored, to keep it
 * where its user will find it: if that fails, nothing is stored, so no tenant is left with a key
 * nobody has.
 */
export async function createTenant(store: Store, name: string, now: Date, keep?: (apiKey: string) => void): Promise<CreatedTenant> {
  const tenant = { id: newId('ten'), name };
  const key = newApiKey(tenant.id, { name: 'initial', roles: ['admin'], expiresAt: null }, now);
  keep?.(key.apiKey);
  await store.createTenant({ ...tenant, createdAt: now }, key.record);
  return { tenant, apiKey: key.apiKey, keyId: key.record.id };
}

/** How long another instance may keep accepting a key revoked elsewhere. */
export const KEY_CACHE_TTL_MS = 30_000;

/**
 * Reads of keys not cached: at most `reads` at once, and `waiting` more queued for one. A request with a
 * made-up key id cannot be cached (there is nothing to cache), so without a bound a flood of them,
 * which needs no key at all, would be a database query each; beyond the queue such a request is
 * refused at once (503). Keys already cached, and keys that have authenticated on this instance before
 * (read again once their entry expires), are not bounded. A read that waited for a slot until every
 * request for it had passed its deadline is not sent: its slot goes to the next. Requests for the same
 * key id share one read, waiting or sent, but not one sent more than `shareMs` before: a read left
 * waiting on a connection that died with the database would otherwise hold every later request for its
 * key past the database's return. With `perKey` reads of a key id unanswered (a database that stalls),
 * the newest is joined however old: reads do not pile up. A request that joined a read that fails reads
 * once more.
 */
export const KEY_READS = { reads: 8, waiting: 256, shareMs: 500, perKey: 4 };

/** Too many keys are being read at once: the request is refused (503) without reading. */
export class KeyReadsBusy extends Error {}

/**
 * A read of a key from the store: the generation it began in (see `forget`), when it was sent on the
 * authenticator's clock (for the TTL) and monotonic (`performance.now()`, for `shareMs`; null while it
 * waits for a slot), the latest deadline of the requests sharing it (monotonic), and its answer.
 */
interface KeyRead {
  readonly generation: number;
  sentAt: number;
  sent: number | null;
  until: number;
  key: Promise<ApiKeyRecord | null>;
}

/** Resolves API keys to principals; keys found are cached briefly (see the module comment). */
export class Authenticator {
  private readonly cache = new Map<string, { key: ApiKeyRecord; until: number }>();
  /** Bumped by forget and forgetAll: a store read begun before one is not cached. */
  private generation = 0;
  /** Reads in flight by key id (see `read`). */
  private readonly reading = new Map<string, KeyRead>();
  /** Reads not ended yet by key id, the newest (in `reading`) and those it replaced. */
  private readonly unanswered = new Map<string, number>();
  /**
   * Key ids that have authenticated here: their reads take no slot, so a flood of made-up ids cannot
   * lock real keys out once their cache entries expire (or are all dropped). Only ids whose secret
   * matched are added, so its size is bounded by the tenant's own keys, never by an attacker.
   */
  private readonly known = new Set<string>();
  /** Reads holding a slot, and reads waiting for one (each waiter is handed the slot of a read that ends). */
  private active = 0;
  private readonly waiters: (() => void)[] = [];

  constructor(
    private readonly store: Store,
    private readonly nowMs: () => number,
    private readonly ttlMs = KEY_CACHE_TTL_MS,
    private readonly limits = KEY_READS,
  ) {}

  /**
   * The principal of this key, or null (unknown, wrong secret, revoked or expired). Throws only when the
   * store is unreachable, when too many keys are being read (KeyReadsBusy) or, past `deadline`, when the
   * key's read waited for a slot (the caller bounds its own wait by the deadline: this never answers late
   * for it, only spares the store).
   */
  async authenticate(apiKey: string, deadline?: Deadline): Promise<Principal | null> {
    const m = KEY_FORMAT.exec(apiKey);
    if (m === null) return null;
    const keyId = m[1] as string;
    const now = this.nowMs();
    const cached = this.cache.get(keyId);
    const hit = cached !== undefined && cached.until > now;
    // A forget during the read below may be for a revocation that committed after the read saw the
    // key: answer from the read, but do not cache it, or the revoked key would be accepted for a TTL.
    // A read shared with an earlier request may have begun before this one: the entry lasts a TTL from
    // when the read was sent, never from now, or a key revoked meanwhile would be accepted past the TTL.
    let key: ApiKeyRecord | null;
    let read: KeyRead | null = null;
    if (hit) key = cached.key;
    else {
      const until = deadline?.at ?? Infinity;
      let shared: boolean;
      ({ read, shared } = this.read(keyId, until));
      try {
        key = await read.key;
      } catch (e) {
        // Another request's read failed (its connection died, say): that is no answer about this
        // request, which reads once more (sharing that read with the others it failed) rather than
        // fail with it. Its own read failing is the answer (503), and so is its deadline passing.
        if (!shared || performance.now() >= until) throw e;
        ({ read } = this.read(keyId, until));
        key = await read.key;
      }
    }
    if (key === null) return null;
    // Cached whatever the secret: a wrong one is refused from the cache as from the store, and someone
    // who knows a key id but not its secret must not make every guess a read (outside the bound, once
    // the key has authenticated here). The cache holds only keys that exist.
    if (read !== null && this.generation === read.generation) this.cache.set(keyId, { key, until: read.sentAt + this.ttlMs });
    if (!constantTimeEqual(sha256Hex(apiKey), key.keyHash)) return null;
    this.known.add(keyId);
    if (!isUsable(key, now)) return null;
    return {
      tenantId: key.tenantId,
      keyId: key.id,
      roles: key.roles.filter((r): r is Role => (ROLES as readonly string[]).includes(r)),
      expiresAt: key.expiresAt,
    };
  }

  /**
   * The store's read of a key: one already in flight for it since the last forget, waiting for a slot,
   * sent less than `shareMs` before or the newest of `perKey` unanswered, is shared (one begun before a forget is not: it may predate the
   * revocation), else a new one, in a slot (see KEY_READS).
   */
  private read(keyId: string, until: number): { read: KeyRead; shared: boolean } {
    const inFlight = this.reading.get(keyId);
    if (
      inFlight !== undefined &&
      inFlight.generation === this.generation &&
      (inFlight.sent === null || performance.now() - inFlight.sent < this.limits.shareMs || (this.unanswered.get(keyId) ?? 0) >= this.limits.perKey)
    ) {
      inFlight.until = Math.max(inFlight.until, until);
      return { read: inFlight, shared: true };
    }
    const bounded = !this.known.has(keyId);
    const slot = !bounded || this.active < this.limits.reads;
    if (!slot && this.waiters.length >= this.limits.waiting) throw new KeyReadsBusy('too many API keys are being read at once');
    if (bounded && slot) this.active++;
    const read: KeyRead = { generation: this.generation, sentAt: this.nowMs(), sent: null, until, key: Promise.resolve(null) };
    // In the map before it starts: a read can end before its first await (its deadline already
    // passed), and its `finally` must then find itself there to remove, not be put there after it ended.
    this.reading.set(keyId, read);
    this.unanswered.set(keyId, (this.unanswered.get(keyId) ?? 0) + 1);
    read.key = (async (): Promise<ApiKeyRecord | null> => {
      if (!slot) await new Promise<void>((r) => this.waiters.push(r));
      try {
        // Every request for it gave up while it waited (a flood's queue drains slower than it fills):
        // sending it would only take the slot from a read someone still waits for.
        if (performance.now() >= read.until) throw new DeadlineExceeded('every request for this key passed its deadline while its read waited');
        read.sentAt = this.nowMs();
        read.sent = performance.now();
        return (await this.store.apiKeyById(keyId))?.key ?? null;
      } finally {
        if (bounded) {
          const next = this.waiters.shift();
          if (next === undefined) this.active--;
          else next(); // the slot passes to the next waiting read
        }
        if (this.reading.get(keyId) === read) this.reading.delete(keyId);
        const left = (this.unanswered.get(keyId) ?? 1) - 1;
        if (left === 0) this.unanswered.delete(keyId);
        else this.unanswered.set(keyId, left);
      }
    })();
    return { read, shared: false };
  }

  /** Drops a key from this instance's cache: its revocation holds here from the next request. */
  forget(keyId: string): void {
    this.generation++;
    this.cache.delete(keyId);
  }

  /** Drops every cached key: revocations may have been missed (the listening connection was down). */
  forgetAll(): void {
    this.generation++;
    this.cache.clear();
  }
}
