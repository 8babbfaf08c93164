/**
 * The API key cache (src/service/tenants.ts Authenticator) against a revocation racing a read: a key
 * read from the store before its revocation committed, with the revocation's forget arriving while
 * that read is still pending, must not be cached (it would be accepted for a whole TTL).
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { Authenticator, KEY_READS, KeyReadsBusy } from '../../src/service/tenants.js';
import type { Store } from '../../src/store/store.js';
import { startHarness, type Harness } from '../support/app.js';
import { keyRevocation } from '../../src/service/key-admin.js';
import { Deadline, DeadlineExceeded } from '../../src/store/deadline.js';

describe('Authenticator', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness('pglite');
  });
  afterAll(async () => h.close());

  /** The harness's store, but each key read is recorded (its id), and the first (or every one) waits for `release()`. */
  const keyReads = ({ hold }: { hold: 'none' | 'first' | 'all' }): { store: Store; read: string[]; release: () => void } => {
    const read: string[] = [];
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    const store = Object.create(h.store) as Store;
    store.apiKeyById = async (id) => {
      read.push(id);
      if (hold === 'all' || (hold === 'first' && read.length === 1)) await released;
      return h.store.apiKeyById(id);
    };
    return { store, read, release };
  };

  test('a read that a forget overtook answers once, but is not cached', async () => {
    const created = await h.call('POST', '/v1/api-keys', { name: 'raced', roles: ['runtime'] });
    expect(created.status).toBe(201);
    const keyId = created.body.key_id as string;

    // The store's apiKeyById reads at once but answers only when the test says so.
    let readDone!: () => void;
    const readStarted = new Promise<void>((r) => (readDone = r));
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    let held = true;
    const store = Object.create(h.store) as Store;
    store.apiKeyById = async (id) => {
      const found = await h.store.apiKeyById(id);
      if (held) {
        held = false;
        readDone();
        await released;
      }
      return found;
    };
    const auth = new Authenticator(store, () => h.clock.now().getTime());

    const pending = auth.authenticate(created.body.api_key);
    await readStarted; // the key was read while still active
    await h.writer.submit(keyRevocation(h.tenantIds.a, keyId, 'cli')); // its revocation commits
    auth.forget(keyId); // and its NOTIFY arrives before the read answers
    release();
    expect((await pending)?.keyId).toBe(keyId); // answered from the read it made

    // No TTL has passed: a cached record would still be accepted here.
    expect(await auth.authenticate(created.body.api_key)).toBeNull();
  });

  // A key id no one has is never cached (there is nothing to cache): a flood of made-up ids, which
  // needs no key, must not become a database query each, nor take the pool from the decisions.
  test('reads of keys not cached: one per key id at once, a bounded number at once, and a 503 beyond the queue', async () => {
    const made = await Promise.all(
      ['r1', 'r2', 'r3', 'r4'].map(async (name) => (await h.call('POST', '/v1/api-keys', { name, roles: ['runtime'] })).body.api_key as string),
    );
    let reads = 0;
    let inFlight = 0;
    let most = 0;
    const gates: (() => void)[] = [];
    const store = Object.create(h.store) as Store;
    store.apiKeyById = async (id) => {
      reads++;
      most = Math.max(most, ++inFlight);
      await new Promise<void>((r) => gates.push(r));
      inFlight--;
      return h.store.apiKeyById(id);
    };
    const auth = new Authenticator(store, () => h.clock.now().getTime(), 30_000, { ...KEY_READS, reads: 2, waiting: 1 });
    const first = made[0] as string;
    // Ten requests with one key share one read.
    const same = Array.from({ length: 10 }, () => auth.authenticate(first));
    await new Promise((r) => setTimeout(r, 10));
    expect(reads).toBe(1);
    // A second key takes the other slot, a third waits, a fourth is refused without a read.
    const second = auth.authenticate(made[1] as string);
    const third = auth.authenticate(made[2] as string);
    await expect(auth.authenticate(made[3] as string)).rejects.toBeInstanceOf(KeyReadsBusy);
    await new Promise((r) => setTimeout(r, 10));
    expect([reads, inFlight]).toEqual([2, 2]);
    while (gates.length > 0 || inFlight > 0) {
      gates.shift()?.();
      await new Promise((r) => setTimeout(r, 5));
    }
    for (const p of [...same, second, third]) expect((await p)?.tenantId).toBe(h.tenantIds.a);
    expect([reads, most]).toEqual([3, 2]);
    // Once read, a key is cached: no read at all, whatever else is being read.
    expect((await auth.authenticate(first))?.tenantId).toBe(h.tenantIds.a);
    expect(reads).toBe(3);

    // A flood holds every slot and the queue; a key that has authenticated here before, its entry
    // expired, is still read (it takes no slot), while a key never seen here is refused.
    const flood = ['AAAAAAAAAAAA', 'BBBBBBBBBBBB', 'CCCCCCCCCCCC'].map((id) => auth.authenticate(`wk.${id}.${'x'.repeat(43)}`));
    await new Promise((r) => setTimeout(r, 10));
    await expect(auth.authenticate(`wk.DDDDDDDDDDDD.${'x'.repeat(43)}`)).rejects.toBeInstanceOf(KeyReadsBusy);
    h.clock.advance(31);
    const again = auth.authenticate(first);
    await new Promise((r) => setTimeout(r, 10));
    expect(reads).toBe(6); // the flood's two in their slots, and the known key's
    while (gates.length > 0 || inFlight > 0) {
      gates.shift()?.();
      await new Promise((r) => setTimeout(r, 5));
    }
    expect((await again)?.tenantId).toBe(h.tenantIds.a);
    for (const p of flood) expect(await p).toBeNull();
  });

  test('a read shared with a later request is cached for a TTL from when it was sent, not from the later request', async () => {
    const key = (await h.call('POST', '/v1/api-keys', { name: 'shared', roles: ['runtime'] })).body.api_key as string;
    const { store, read, release } = keyReads({ hold: 'first' });
    const auth = new Authenticator(store, () => h.clock.now().getTime(), 30_000);
    const early = auth.authenticate(key);
    await new Promise((r) => setTimeout(r, 10));
    h.clock.advance(20); // a slow read: the second request arrives 20 s after it was sent
    const late = auth.authenticate(key);
    release();
    expect([(await early)?.tenantId, (await late)?.tenantId]).toEqual([h.tenantIds.a, h.tenantIds.a]);
    expect(read).toHaveLength(1);
    h.clock.advance(11); // 31 s after the read was sent, 11 s after the later request
    expect((await auth.authenticate(key))?.tenantId).toBe(h.tenantIds.a);
    expect(read).toHaveLength(2);
  });

  // A read shared by many requests must not make one request's bad luck theirs: CI once saw every
  // request for a key answered 503 together, 1.5 s after the database came back.
  test('a shared read that fails is read again by the requests that joined it; only its own request fails', async () => {
    const key = (await h.call('POST', '/v1/api-keys', { name: 'failing', roles: ['runtime'] })).body.api_key as string;
    let reads = 0;
    let fail!: () => void;
    const store = Object.create(h.store) as Store;
    store.apiKeyById = async (id) => {
      reads++;
      if (reads === 1) {
        await new Promise<void>((r) => (fail = r));
        throw new Error('connection ended');
      }
      return h.store.apiKeyById(id);
    };
    const auth = new Authenticator(store, () => h.clock.now().getTime());
    const first = auth.authenticate(key);
    first.catch(() => undefined);
    await new Promise((r) => setTimeout(r, 10));
    const joined = Array.from({ length: 5 }, () => auth.authenticate(key));
    fail();
    await expect(first).rejects.toThrow('connection ended');
    for (const p of joined) expect((await p)?.tenantId).toBe(h.tenantIds.a);
    expect(reads).toBe(2); // the five share their second read too
  });

  test('a read in flight for longer than shareMs is not joined: a read left hanging holds no later request', async () => {
    const key = (await h.call('POST', '/v1/api-keys', { name: 'hanging', roles: ['runtime'] })).body.api_key as string;
    const { store, read, release } = keyReads({ hold: 'first' });
    const auth = new Authenticator(store, () => h.clock.now().getTime(), 30_000, { ...KEY_READS, shareMs: 50 });
    const hanging = auth.authenticate(key);
    const joined = auth.authenticate(key); // within shareMs: shares the hanging read
    await new Promise((r) => setTimeout(r, 60));
    const later = auth.authenticate(key);
    const answer = await Promise.race([later, new Promise((r) => setTimeout(() => r('still waiting'), 2000))]);
    expect((answer as { tenantId?: string } | null)?.tenantId).toBe(h.tenantIds.a);
    expect(read).toHaveLength(2);
    release();
    expect([(await hanging)?.tenantId, (await joined)?.tenantId]).toEqual([h.tenantIds.a, h.tenantIds.a]);
  });

  test('a read that waited for a slot until every request for it had given up is not sent', async () => {
    const made = await Promise.all(
      ['w1', 'w2', 'w3', 'w4'].map(async (name) => (await h.call('POST', '/v1/api-keys', { name, roles: ['runtime'] })).body.api_key as string),
    );
    const { store, read, release } = keyReads({ hold: 'first' });
    const auth = new Authenticator(store, () => h.clock.now().getTime(), 30_000, { ...KEY_READS, reads: 1 });
    const holding = auth.authenticate(made[0] as string, Deadline.in(5000)); // takes the one slot
    const waiting = auth.authenticate(made[1] as string, Deadline.in(30)); // waits for it
    waiting.catch(() => undefined);
    await new Promise((r) => setTimeout(r, 60)); // its request has answered 503 by now (the app's `within`)
    release();
    expect((await holding)?.tenantId).toBe(h.tenantIds.a);
    await expect(waiting).rejects.toBeInstanceOf(DeadlineExceeded);
    expect(read).toHaveLength(1);
    // The slot went on: the same key, asked again in time, is read.
    expect((await auth.authenticate(made[1] as string, Deadline.in(5000)))?.tenantId).toBe(h.tenantIds.a);
    expect(read).toHaveLength(2);

    // A waiting read is sent while any request sharing it is still in time (keys not seen here yet:
    // those seen take no slot).
    const again = keyReads({ hold: 'first' });
    const auth2 = new Authenticator(again.store, () => h.clock.now().getTime(), 30_000, { ...KEY_READS, reads: 1 });
    const holdingAgain = auth2.authenticate(made[2] as string, Deadline.in(5000));
    const hurried = auth2.authenticate(made[3] as string, Deadline.in(30));
    hurried.catch(() => undefined);
    const patient = auth2.authenticate(made[3] as string, Deadline.in(5000));
    await new Promise((r) => setTimeout(r, 60));
    again.release();
    // One read answers both, the hurried request's too (its caller had answered 503 by then).
    const answers = [await holdingAgain, await hurried, await patient];
    expect(answers.map((a) => a?.tenantId)).toEqual([h.tenantIds.a, h.tenantIds.a, h.tenantIds.a]);
    expect(again.read).toHaveLength(2);
  });

  // A read whose request's deadline has already passed when it takes a slot (a known key, or a free slot)
  // ends before `read` returns: it must not be left in the map of reads in flight, where later requests
  // for the key would join a read that already failed, and made-up key ids would pile up for ever.
  test('a read that ends at once is not left to be joined, and leaves no entry behind', async () => {
    const key = (await h.call('POST', '/v1/api-keys', { name: 'at-once', roles: ['runtime'] })).body.api_key as string;
    const { store, read } = keyReads({ hold: 'none' });
    const auth = new Authenticator(store, () => h.clock.now().getTime());
    await expect(auth.authenticate(key, Deadline.in(0))).rejects.toBeInstanceOf(DeadlineExceeded);
    // In time, within shareMs of that one: read, and accepted.
    expect((await auth.authenticate(key, Deadline.in(5000)))?.tenantId).toBe(h.tenantIds.a);
    expect(read).toHaveLength(1);
    for (let i = 0; i < 50; i++) {
      const madeUp = `wk.gone${String(i).padStart(8, '0')}.${'x'.repeat(43)}`;
      await expect(auth.authenticate(madeUp, Deadline.in(0))).rejects.toBeInstanceOf(DeadlineExceeded);
    }
    expect((auth as unknown as { reading: Map<string, unknown> }).reading.size).toBe(0);
  });

  test('a read still waiting for a slot is joined however long it has waited', async () => {
    const made = await Promise.all(
      ['q1', 'q2'].map(async (name) => (await h.call('POST', '/v1/api-keys', { name, roles: ['runtime'] })).body.api_key as string),
    );
    const { store, read, release } = keyReads({ hold: 'first' });
    const auth = new Authenticator(store, () => h.clock.now().getTime(), 30_000, { ...KEY_READS, reads: 1, shareMs: 20 });
    const holding = auth.authenticate(made[0] as string);
    const queued = auth.authenticate(made[1] as string);
    await new Promise((r) => setTimeout(r, 60)); // three shareMs in the queue: still not sent
    const behind = auth.authenticate(made[1] as string);
    release();
    const answers = [await holding, await queued, await behind];
    expect(answers.map((a) => a?.tenantId)).toEqual([h.tenantIds.a, h.tenantIds.a, h.tenantIds.a]);
    expect(read).toHaveLength(2); // not a second read of q2 queued behind the first
  });

  test('a wrong secret for a key that exists is refused from the cache: guesses are not a read each', async () => {
    const created = await h.call('POST', '/v1/api-keys', { name: 'guessed', roles: ['runtime'] });
    const keyId = created.body.key_id as string;
    const { store, read } = keyReads({ hold: 'none' });
    const auth = new Authenticator(store, () => h.clock.now().getTime());
    for (let i = 0; i < 5; i++) expect(await auth.authenticate(`wk.${keyId}.${String(i).repeat(43)}`)).toBeNull();
    expect(read).toHaveLength(1);
    expect((await auth.authenticate(created.body.api_key as string))?.keyId).toBe(keyId); // the right one, from the cache
    expect(read).toHaveLength(1);
  });

  test('while reads of a key go unanswered (a stalled database), at most perKey are sent: then the newest is joined', async () => {
    const key = (await h.call('POST', '/v1/api-keys', { name: 'stalled', roles: ['runtime'] })).body.api_key as string;
    const { store, read, release } = keyReads({ hold: 'all' });
    const auth = new Authenticator(store, () => h.clock.now().getTime(), 30_000, { ...KEY_READS, shareMs: 10, perKey: 2 });
    const asked = [];
    for (let i = 0; i < 5; i++) {
      asked.push(auth.authenticate(key));
      await new Promise((r) => setTimeout(r, 25)); // each request past shareMs of the read before it
    }
    expect(read).toHaveLength(2);
    release();
    for (const p of asked) expect((await p)?.tenantId).toBe(h.tenantIds.a);
    // Once they are answered, the count starts again: nothing is left behind.
    expect((auth as unknown as { unanswered: Map<string, number> }).unanswered.size).toBe(0);
  });
});
