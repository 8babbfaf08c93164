/**
 * The API key cache (src/service/tenants.ts Authenticator) against a revocation racing a read: a key
 * read from the store before its revocation committed, with the revocation's forget arriving while
 * that read is still pending, must not be cached (it would be accepted for a whole TTL).
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { Authenticator } from '../../src/service/tenants.js';
import type { Store } from '../../src/store/store.js';
import { startHarness, type Harness } from '../support/app.js';
import { keyRevocation } from '../../src/service/key-admin.js';

describe('Authenticator', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness('pglite');
  });
  afterAll(async () => h.close());

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
});
