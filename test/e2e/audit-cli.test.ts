/**
 * `npm run audit -- verify` offline: after real decisions it reports every tenant's chain as
 * intact (exit 0); after one audit row is edited directly in SQL it names that row and exits 1,
 * while the other tenant's chain still holds. On embedded PGlite (a data dir, as the server keeps
 * it) and on the PostgreSQL server when TEST_DATABASE_URL is set.
 */
import { join } from 'node:path';
import { sql } from 'drizzle-orm';
import { afterAll, describe, expect, test } from 'vitest';
import { createApp } from '../../src/http/app.js';
import { loadKeyRing } from '../../src/crypto/keys.js';
import { openDatabase } from '../../src/node/db.js';
import { createTenant } from '../../src/service/tenants.js';
import { Store } from '../../src/store/store.js';
import { DecisionWriter } from '../../src/store/writer.js';
import { KEYS, mintBody } from '../support/app.js';
import { BACKENDS, openTestDatabase, type TestDatabase } from '../support/db.js';
import { runCli, seedDataDir, tempDir } from '../support/server.js';

describe.each(BACKENDS)('npm run audit -- verify on %s', (backend) => {
  let server: TestDatabase | undefined;
  let env: Record<string, string>;
  afterAll(async () => server?.close());

  /** Opens the database the CLI will read, runs `f` against it, and closes it again. */
  async function withDatabase<T>(f: (store: Store) => Promise<T>): Promise<T> {
    const database = await openDatabase(env.DATABASE_URL === undefined ? { dataDir: env.WARRANT_DATA_DIR } : { databaseUrl: env.DATABASE_URL });
    try {
      return await f(new Store(database.db));
    } finally {
      await database.close();
    }
  }

  test('intact chains verify; an edited row is named and the exit code is 1', async () => {
    if (backend === 'postgres') {
      server = await openTestDatabase('postgres');
      env = { DATABASE_URL: server.url as string };
    } else {
      const dataDir = join(tempDir(), 'data');
      await seedDataDir(dataDir);
      env = { WARRANT_DATA_DIR: dataDir };
    }
    // A keys dir of its own (the CLI makes the audit key ring there, never in the repository's
    // ./keys), where no server has run: no checkpoints exported, so only the chains can be checked.
    env.WARRANT_KEYS_DIR = join(tempDir(), 'keys');
    const approveId = await withDatabase(async (store) => {
      const now = (): Date => new Date();
      const keys = await loadKeyRing(KEYS.ring);
      const writer = new DecisionWriter(store.db, { now });
      const app = createApp({ store, writer, keys, now });
      const a = await createTenant(store, 'alpha', now());
      const b = await createTenant(store, 'beta', now());
      const post = async (key: string, path: string, body: unknown): Promise<Record<string, unknown>> => {
        const res = await app.request(path, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify(body),
        });
        return (await res.json()) as Record<string, unknown>;
      };
      let approved = '';
      for (const t of [a, b]) {
        const cap = await post(t.apiKey, '/v1/capabilities', mintBody());
        const r = await post(t.apiKey, '/v1/approve', { token: cap.token, op: 'read', target: { kind: 'path', path: '/workspace/t-1/x' }, cost: 1 });
        if (t === a) approved = r.audit_id as string;
        await post(t.apiKey, '/v1/approve', { token: cap.token, op: 'execute', target: { kind: 'path', path: '/workspace/t-1/x' }, cost: 1 });
      }
      await writer.flush();
      return approved;
    });

    const intact = await runCli('audit-cli.ts', ['verify'], env);
    expect(intact.code, intact.stdout + intact.stderr).toBe(0);
    expect(intact.stdout).toMatch(/^ok\talpha\tentries=3\tcheckpoint=none\tuncovered=3\t\(no exported checkpoints/m);
    expect(intact.stdout).toMatch(/^ok\tbeta\tentries=3\tcheckpoint=none\tuncovered=3\t\(no exported checkpoints/m);

    await withDatabase((store) => store.db.execute(sql`UPDATE audit SET cost = 0 WHERE id = ${approveId}`));
    const tampered = await runCli('audit-cli.ts', ['verify'], env);
    expect(tampered.code).toBe(1);
    expect(tampered.stdout).toMatch(new RegExp(`^TAMPERED\\talpha\\tentries=\\d+\\tfirst_bad_id=${approveId}\\t`, 'm'));
    expect(tampered.stdout).toMatch(/^ok\tbeta\t/m);

    const onlyBeta = await runCli('audit-cli.ts', ['verify', 'beta'], env);
    expect(onlyBeta.code).toBe(0);
    expect(onlyBeta.stdout).not.toMatch(/alpha/);
    // By id too: a database writer can rename tenants, never change an id the files are named by.
    const alphaId = await withDatabase(async (store) => (await store.listTenants()).find((t) => t.name === 'alpha')?.id as string);
    const byId = await runCli('audit-cli.ts', ['verify', alphaId], env);
    expect(byId.code).toBe(1);
    expect(byId.stdout).toMatch(/^TAMPERED\talpha\t/m);
    expect(byId.stdout).not.toMatch(/beta/);
    expect((await runCli('audit-cli.ts', ['verfy'], env)).code).toBe(2);
  }, 60_000);
});
