/**
 * `npx warrant` (bin/warrant.mjs) against the real server on embedded PGlite: mint, attenuate,
 * approve and revoke from JSON on stdin, the reads, `inspect` verifying a token offline against the
 * served JWKS, error answers as exit 1, bad usage as exit 2, and the delegated tenant and audit
 * commands once the server is stopped.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { warrant } from '../support/cli.js';
import { cleanupServers, seedDataDir, startServer, tempDir, type RunningServer } from '../support/server.js';

describe('npx warrant against a running server', () => {
  const dataDir = join(tempDir(), 'data');
  let server: RunningServer;
  let env: Record<string, string>;
  beforeAll(async () => {
    await seedDataDir(dataDir);
    server = await startServer({ dataDir });
    // No WARRANT_API_KEY: the CLI finds the embedded database's default key, as a user beside it would.
    env = { WARRANT_URL: server.url, WARRANT_DATA_DIR: dataDir, WARRANT_KEYS_DIR: server.keysDir };
  });
  afterAll(cleanupServers);

  test('mint → attenuate → approve → inspect → revoke, then the tenant and audit commands offline', async () => {
    const mint = await warrant(
      ['mint'],
      env,
      JSON.stringify({
        trajectory_id: 'cli-1',
        rights: ['read'],
        objects: [{ kind: 'path', prefix: '/w/cli-1' }],
        predicate: { budget: 2, max_depth: 1 },
        ttl_s: 600,
      }),
    );
    expect(mint.code).toBe(0);
    const root = mint.json as { token: string; capability_id: string };
    const child = await warrant(
      ['attenuate'],
      env,
      JSON.stringify({
        parent_token: root.token,
        rights: ['read'],
        objects: [{ kind: 'path', prefix: '/w/cli-1/sub' }],
        predicate: { budget: 1, max_depth: 0 },
      }),
    );
    expect(child.json.parent_id).toBe(root.capability_id);
    const refused = await warrant(
      ['attenuate'],
      env,
      JSON.stringify({ parent_token: root.token, rights: ['write'], objects: [{ kind: 'path', prefix: '/' }] }),
    );
    expect(refused.code).toBe(1);
    expect(refused.json.error.code).toBe('attenuation_refused');
    const grant = await warrant(
      ['approve'],
      env,
      JSON.stringify({ token: child.json.token, op: 'read', target: { kind: 'path', path: '/w/cli-1/sub/f' }, cost: 1 }),
    );
    expect(grant.json).toMatchObject({ decision: 'grant', budget_remaining: 0 });
    const inspected = await warrant(['inspect', child.json.token], env);
    expect(inspected.json.header.alg).toBe('EdDSA');
    expect(inspected.json.verification).toMatchObject({ ok: true, claims: { capability_id: child.json.capability_id } });
    const forged = await warrant(['inspect', `${child.json.token.slice(0, -4)}AAAA`], env);
    expect(forged.json.verification).toEqual({ ok: false, code: 'bad_token' });
    expect((await warrant(['revoke'], env, JSON.stringify({ capability_id: root.capability_id }))).json.revoked).toEqual([
      root.capability_id,
      child.json.capability_id,
    ]);
    expect((await warrant(['capability', child.json.capability_id], env)).json.status).toBe('revoked');
    expect((await warrant(['verify-audit'], env)).json.ok).toBe(true);
    expect((await warrant(['frobnicate'], env)).code).toBe(2);
    expect((await warrant(['mint'], env, 'not json')).code).toBe(2);

    expect(await server.stop()).toBe(0);
    const created = await warrant(['tenant', 'create', 'cli-tenant'], env);
    expect(created.code).toBe(0);
    expect(created.stdout.trimEnd().split('\n').at(-1)).toMatch(/^wk\./);
    const audited = await warrant(['audit', 'verify'], env);
    expect(audited.code).toBe(0);
    expect(audited.stdout).toMatch(/^ok\tdefault\tentries=\d+/m);
  }, 90_000);
});
