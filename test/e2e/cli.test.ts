/**
 * The command-line tools against the real server on embedded PGlite: `npm run keys -- rotate | list`
 * (a token signed before a rotation still approves after the restart, new tokens carry the new kid),
 * `npm run tenant -- create` while the server is stopped (its key, alone on the last line,
 * authenticates), and WARRANT_SIGNING_KEYS taking precedence over keys/. The steps run in order.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { KEYS } from '../support/app.js';
import { cleanupServers, lastLine, runCli, seedDataDir, startServer, tempDir, type RunningServer } from '../support/server.js';

const kidOf = (token: string): unknown => JSON.parse(Buffer.from(token.split('.')[0] ?? '', 'base64url').toString('utf8')).kid;
const API_KEY = /^wk\.[A-Za-z0-9_-]{12}\.[A-Za-z0-9_-]{43}$/;
const mint = { trajectory_id: 't-cli', rights: ['read'], objects: [{ kind: 'path', prefix: '/workspace/t-cli' }], predicate: {}, ttl_s: 3600 };
const read = (token: string) => ({ token, op: 'read', target: { kind: 'path', path: '/workspace/t-cli/a' }, cost: 0 });

describe('command-line tools with the server on embedded PGlite', () => {
  const root = tempDir();
  const dirs = { dataDir: join(root, 'data'), keysDir: join(root, 'keys') };
  const env = { WARRANT_DATA_DIR: dirs.dataDir, WARRANT_KEYS_DIR: dirs.keysDir };
  const ringFile = join(dirs.keysDir, 'signing-keys.json');
  let defaultKey: string;
  let firstKid: string;
  let oldToken: string;
  let tenantKey: string;
  const logs: string[] = [];

  async function stop(server: RunningServer): Promise<void> {
    expect(await server.stop()).toBe(0);
    logs.push(server.logs());
  }

  beforeAll(async () => {
    // Not a test of the very first start (the walk-through is): start from a migrated data dir.
    await seedDataDir(dirs.dataDir);
  });
  afterAll(cleanupServers);

  test('before any rotation: one generated key signs, and `keys list` shows it active', async () => {
    const server = await startServer(dirs);
    defaultKey = server.apiKey;
    const jwks = await server.call('GET', '/.well-known/jwks.json', undefined, { key: null });
    expect(jwks.body.keys).toHaveLength(1);
    firstKid = jwks.body.keys[0].kid;
    const m = await server.call('POST', '/v1/capabilities', mint);
    expect(kidOf(m.body.token)).toBe(firstKid);
    oldToken = m.body.token;
    await stop(server);

    const list = await runCli('keys-cli.ts', ['list'], env);
    expect([list.code, list.stdout]).toEqual([0, `${firstKid}\tactive\n`]);
  });

  test('`keys rotate` appends an active key and keeps the old one to verify', async () => {
    const r = await runCli('keys-cli.ts', ['rotate'], env);
    expect(r.code).toBe(0);
    const ring = JSON.parse(readFileSync(ringFile, 'utf8')) as { keys: { kid: string; d?: string }[] };
    expect(ring.keys.map((k) => k.kid)[0]).toBe(firstKid);
    expect(ring.keys).toHaveLength(2);
    const newKid = ring.keys[1]!.kid;
    expect(newKid).not.toBe(firstKid);
    expect(r.stdout).toContain(newKid);
    const list = await runCli('keys-cli.ts', ['list'], env);
    expect(list.stdout.trimEnd().split('\n')).toEqual([firstKid, `${newKid}\tactive`]);
  });

  test('`keys rotate --audit` rotates the audit ring alone: the token ring is untouched', async () => {
    const auditFile = join(dirs.keysDir, 'audit-keys.json');
    const before = JSON.parse(readFileSync(auditFile, 'utf8')) as { keys: { kid: string }[] };
    const tokenRing = readFileSync(ringFile, 'utf8');
    const r = await runCli('keys-cli.ts', ['rotate', '--audit'], env);
    expect(r.code).toBe(0);
    const after = JSON.parse(readFileSync(auditFile, 'utf8')) as { keys: { kid: string }[] };
    expect(after.keys.map((k) => k.kid)).toEqual([...before.keys.map((k) => k.kid), expect.any(String)]);
    expect(readFileSync(ringFile, 'utf8')).toBe(tokenRing);
    const list = await runCli('keys-cli.ts', ['list', '--audit'], env);
    expect(list.stdout.trimEnd().split('\n')).toEqual([before.keys[0]!.kid, `${after.keys[1]!.kid}\tactive`]);
  });

  test('`tenant create` prints the API key alone on the last line, once', async () => {
    const r = await runCli('tenant-cli.ts', ['create', 'acme'], env);
    expect(r.code).toBe(0);
    tenantKey = lastLine(r.stdout);
    expect(tenantKey).toMatch(API_KEY);
    expect(r.stdout.split(tenantKey)).toHaveLength(2);
  });

  test.each([
    ['tenant-cli.ts', ['create', 'bad name']],
    ['keys-cli.ts', ['remove']],
  ])('%s %j is refused with usage (exit 2)', async (script, args) => {
    const r = await runCli(script, args, env);
    expect([r.code, r.stdout]).toEqual([2, '']);
  });

  test('after the restart: old tokens still approve, new ones carry the new kid, the new tenant authenticates', { timeout: 60_000 }, async () => {
    const server = await startServer(dirs);
    const kids = (await server.call('GET', '/.well-known/jwks.json', undefined, { key: null })).body.keys.map((k: { kid: string }) => k.kid);
    expect(kids).toHaveLength(2);
    const auditKids = (await server.call('GET', '/.well-known/warrant-audit-keys.json', undefined, { key: null })).body.keys.map((k: { kid: string }) => k.kid);
    expect(auditKids).toHaveLength(2);
    expect(auditKids.some((k: string) => kids.includes(k))).toBe(false);
    expect(kids[0]).toBe(firstKid);
    expect((await server.call('POST', '/v1/approve', read(oldToken))).body.decision).toBe('grant');
    const m = await server.call('POST', '/v1/capabilities', mint);
    expect(kidOf(m.body.token)).toBe(kids[1]);
    expect((await server.call('POST', '/v1/approve', read(m.body.token))).body.decision).toBe('grant');

    const acme = await server.call('POST', '/v1/capabilities', mint, { key: tenantKey });
    expect(acme.status).toBe(201);
    expect((await server.call('GET', '/v1/audit/verify', undefined, { key: tenantKey })).body).toMatchObject({ ok: true, entries: 1 });
    const crossed = await server.call('POST', '/v1/approve', read(oldToken), { key: tenantKey });
    expect(crossed.body.reason.code).toBe('tenant_mismatch');
    const forged = `${tenantKey.slice(0, -1)}${tenantKey.endsWith('A') ? 'B' : 'A'}`;
    expect((await server.call('GET', '/v1/audit/verify', undefined, { key: forged })).status).toBe(401);
    expect(server.apiKey).toBe(defaultKey);
    await stop(server);
  });

  test('WARRANT_SIGNING_KEYS overrides keys/: only its kid is served and signs', { timeout: 60_000 }, async () => {
    const ringBefore = readFileSync(ringFile, 'utf8');
    const foreign = KEYS.foreign.keys[0]!.kid;
    const server = await startServer({ ...dirs, env: { WARRANT_SIGNING_KEYS: JSON.stringify(KEYS.foreign) } });
    const jwks = await server.call('GET', '/.well-known/jwks.json', undefined, { key: null });
    expect(jwks.body.keys.map((k: { kid: string }) => k.kid)).toEqual([foreign]);
    const m = await server.call('POST', '/v1/capabilities', mint);
    expect(kidOf(m.body.token)).toBe(foreign);
    // The file's keys are not loaded at all, so a token they signed no longer verifies.
    expect((await server.call('POST', '/v1/approve', read(oldToken))).body.reason.code).toBe('unknown_key');
    await stop(server);
    expect(readFileSync(ringFile, 'utf8')).toBe(ringBefore);

    await expect(startServer({ ...dirs, env: { WARRANT_SIGNING_KEYS: '{not json' } })).rejects.toThrow(/exited \(1\)[\s\S]*WARRANT_SIGNING_KEYS/);
  });

  test('no server log holds an API key or a token', () => {
    expect(logs).toHaveLength(3);
    for (const text of logs) for (const secret of [defaultKey, tenantKey, oldToken]) expect(text.includes(secret)).toBe(false);
  });
});
