/**
 * The re-seal sweep at the Node server's start (src/node/main.ts), on embedded PGlite: a tool
 * registered under key A, the server restarted on the ring {A, B} (B active) and then on {B} alone,
 * A retired: the tool is still read and called by, because the second start sealed it under B.
 * `npm run keys -- reseal` does the same from the command line. The steps run in order.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { JWK } from 'jose';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { generateSigningJwk } from '../../src/crypto/keys.js';
import { SWEPT } from '../../src/service/reseal.js';
import { SEARCH, VIEW } from '../support/tools.js';
import { cleanupServers, runCli, seedDataDir, startServer, tempDir, type RunningServer } from '../support/server.js';

/** The sweep's log line, once the server has written it. */
async function swept(server: RunningServer): Promise<Record<string, unknown>> {
  for (let waited = 0; waited < 20_000; waited += 100) {
    const line = server.logEntries().find((e) => e.msg === SWEPT);
    if (line !== undefined) return line;
    await new Promise((done) => setTimeout(done, 100));
  }
  throw new Error(`no "${SWEPT}" line in the log:\n${server.logs()}`);
}

describe('the server re-seals at start', () => {
  const dirs = { dataDir: join(tempDir(), 'data'), keysDir: join(tempDir(), 'keys') };
  const ring = (...keys: JWK[]) => ({ ...dirs, env: { WARRANT_SIGNING_KEYS: JSON.stringify({ keys }) } });
  let A: JWK;
  let B: JWK;
  let C: JWK;
  beforeAll(async () => {
    await seedDataDir(dirs.dataDir);
    [A, B, C] = [await generateSigningJwk(), await generateSigningJwk(), await generateSigningJwk()];
  });
  afterAll(cleanupServers);

  test('a tool registered under a key since retired still works, after a start on the rotated ring', { timeout: 120_000 }, async () => {
    const first = await startServer(ring(A));
    expect((await first.call('PUT', '/v1/tools/view', VIEW)).status).toBe(201);
    expect(await swept(first)).toMatchObject({ kid: A.kid, tools: 0, approvals: 0, not_held: 0 });
    expect(await first.stop()).toBe(0);

    const rotated = await startServer(ring(A, B));
    expect(await swept(rotated)).toMatchObject({ level: 'info', kid: B.kid, tools: 1, approvals: 0, not_held: 0 });
    expect(await rotated.stop()).toBe(0);

    const retired = await startServer(ring(B));
    expect((await retired.call('GET', '/v1/tools/view')).body).toMatchObject({ name: 'view', version: 1 });
    const mint = { trajectory_id: 't-1', rights: ['read'], objects: [{ kind: 'path', prefix: '/workspace' }], predicate: {}, ttl_s: 3600 };
    const { token } = (await retired.call('POST', '/v1/capabilities', mint)).body as { token: string };
    const r = await retired.call('POST', '/v1/approve', { token, tool: 'view', args: { path: '/workspace/a' }, cost: 0 });
    expect([r.status, r.body.decision]).toEqual([200, 'grant']);
    expect(await swept(retired)).toMatchObject({ kid: B.kid, tools: 0, not_held: 0 });
    expect(await retired.stop()).toBe(0);
  });

  test('`keys reseal` does the same with no server (as for a Workers deployment), and never makes a key', { timeout: 120_000 }, async () => {
    const before = await startServer(ring(B));
    expect((await before.call('PUT', '/v1/tools/search', SEARCH)).status).toBe(201);
    expect(await before.stop()).toBe(0);

    const r = await runCli('keys-cli.ts', ['reseal'], { WARRANT_DATA_DIR: dirs.dataDir, ...ring(B, C).env });
    expect([r.code, r.stdout.trim()]).toEqual([0, `sealed again under ${String(C.kid)}: 2 tool versions, 0 pending approvals`]);
    const none = join(tempDir(), 'none');
    const bare = await runCli('keys-cli.ts', ['reseal'], { WARRANT_DATA_DIR: dirs.dataDir, WARRANT_KEYS_DIR: none });
    expect([bare.code, bare.stderr, existsSync(none)]).toEqual([1, expect.stringContaining('no signing keys'), false]);

    const after = await startServer(ring(C));
    for (const name of ['view', 'search']) expect((await after.call('GET', `/v1/tools/${name}`)).status).toBe(200);
    expect(await swept(after)).toMatchObject({ kid: C.kid, tools: 0, not_held: 0 });
    expect(await after.stop()).toBe(0);
  });
});
