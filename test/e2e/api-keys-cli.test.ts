/**
 * `npm run api-keys` against the embedded database (issue 14): keys made with roles work on the
 * server as their roles say; beside a running server the CLI is refused (exit 2) and the admin API
 * is the way; a key revoked with the CLI is refused after the restart; both changes are audit rows.
 */
import { join } from 'node:path';
import { afterAll, expect, test } from 'vitest';
import { cleanupServers, lastLine, runCli, seedDataDir, startServer, tempDir } from '../support/server.js';

afterAll(cleanupServers);

test('create, use, refuse beside the server, revoke', async () => {
  const root = tempDir();
  const dataDir = join(root, 'data');
  const keysDir = join(root, 'keys');
  const env = { WARRANT_DATA_DIR: dataDir };
  await seedDataDir(dataDir);
  const tenant = await runCli('tenant-cli.ts', ['create', 'acme'], env);
  expect(tenant.code).toBe(0);
  const apiKey = lastLine(tenant.stdout);
  const made = await runCli('api-keys-cli.ts', ['create', 'acme', 'sandbox', '--role', 'driver', '--ttl-s', '3600'], env);
  expect(made.code).toBe(0);
  const driverKey = lastLine(made.stdout);
  const keyId = driverKey.split('.')[1] as string;
  expect((await runCli('api-keys-cli.ts', ['create', 'acme', 'x', '--role', 'root'], env)).code).toBe(2);

  const server = await startServer({ dataDir, keysDir, apiKey });
  try {
    const mint = { trajectory_id: 't', rights: ['read'], objects: [{ kind: 'path', prefix: '/w' }], predicate: {}, ttl_s: 60 };
    const refused = await server.call('POST', '/v1/capabilities', mint, { key: driverKey });
    expect([refused.status, refused.body.error.code]).toEqual([403, 'forbidden']);
    const approve = await server.call('POST', '/v1/approve', { token: 'x.y.z', op: 'read', target: { kind: 'path', path: '/w' }, cost: 0 }, { key: driverKey });
    expect([approve.status, approve.body.decision]).toEqual([200, 'deny']);

    const beside = await runCli('api-keys-cli.ts', ['list', 'acme'], env);
    expect(beside.code).toBe(2);
    expect(beside.stderr).toContain('admin API');
  } finally {
    expect(await server.stop()).toBe(0);
  }
  const list = await runCli('api-keys-cli.ts', ['list', 'acme'], env);
  expect(list.stdout).toContain(`"key_id":"${keyId}"`);
  expect(list.stdout).not.toContain(driverKey.split('.')[2]);
  expect((await runCli('api-keys-cli.ts', ['revoke', 'acme', keyId], env)).code).toBe(0);
  const again = await startServer({ dataDir, keysDir, apiKey });
  try {
    expect(
      (await again.call('POST', '/v1/approve', { token: 'x.y.z', op: 'read', target: { kind: 'path', path: '/w' }, cost: 0 }, { key: driverKey })).status,
    ).toBe(401);
    // The operator's key changes are on the record too: no key_id (no key made them), `via: "cli"`.
    const rows = (await again.call('GET', '/v1/audit?event=access&decision=grant&limit=100', undefined, { key: apiKey })).body.entries as {
      key_id: string | null;
      detail: Record<string, unknown>;
    }[];
    expect(rows.filter((r) => r.detail.api_key_id === keyId).map((r) => [r.detail.action, r.detail.via, r.key_id])).toEqual([
      ['api_key_created', 'cli', null],
      ['api_key_revoked', 'cli', null],
    ]);
    expect((await again.call('GET', '/v1/audit/verify', undefined, { key: apiKey })).body.ok).toBe(true);
  } finally {
    expect(await again.stop()).toBe(0);
  }
}, 120_000);
