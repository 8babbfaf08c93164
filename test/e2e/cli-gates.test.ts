/**
 * The compiled `warrant` tool (bin/warrant.mjs → dist/, no tsx) against a real listening server on
 * embedded PGlite: approve's exit codes make a shell gate (`warrant approve < call.json && run`)
 * refuse a denied call; inspect takes the token from stdin or a file; an unreachable server or JWKS
 * is exit 4 naming the URL and the socket's cause; every command and subcommand answers --help
 * without doing anything; `tenant create` of an existing name says so instead of printing SQL.
 */
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { cleanupServers, seedDataDir, startServer, tempDir, type RunningServer } from '../support/server.js';

const ROOT = join(import.meta.dirname, '..', '..');

interface Ran {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** `sh -c SCRIPT` with `warrant` meaning the compiled tool, run by plain node. */
function sh(script: string, env: Record<string, string>, stdin = ''): Promise<Ran> {
  const child = spawn('sh', ['-c', script], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', WARRANT: `${process.execPath} ${join(ROOT, 'bin/warrant.mjs')}`, ...env },
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  child.stdin.end(stdin);
  return new Promise((done, fail) => {
    child.once('error', fail);
    child.once('close', (code) => done({ code, stdout, stderr }));
  });
}

const warrant = (args: string, env: Record<string, string>, stdin = ''): Promise<Ran> => sh(`$WARRANT ${args}`, env, stdin);

/** A port nothing listens on: bound, then released. */
async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((ready) => s.listen(0, '127.0.0.1', ready));
  const { port } = s.address() as { port: number };
  await new Promise((done) => s.close(done));
  return port;
}

const HELP: [string, string][] = [
  ['--help', 'approve'],
  ['help', 'inspect'],
  ...['mint', 'attenuate', 'approve', 'revoke', 'capability', 'audit-log', 'verify-audit', 'inspect'].map((c): [string, string] => [`${c} --help`, c]),
  ['tenant --help', 'create'],
  ['tenant create --help', 'create NAME'],
  ['tenant list -h', 'list'],
  ['api-keys --help', 'revoke'],
  ['api-keys create --help', '--role'],
  ['api-keys list --help', 'list TENANT'],
  ['api-keys revoke --help', 'KEY_ID'],
  ['keys --help', 'rotate'],
  ['keys rotate --help', 'rotate'],
  ['keys list --audit --help', 'list'],
  ['keys reseal --help', 'pending approvals'],
  ['audit --help', 'checkpoint'],
  ['audit verify --help', '--checkpoints'],
  ['audit checkpoint --help', 'checkpoint'],
  ['audit receipt --help', 'receipt verify'],
];

describe('the compiled warrant CLI against a running server', () => {
  const dataDir = join(tempDir(), 'data');
  let server: RunningServer;
  let env: Record<string, string>;
  let token: string;
  beforeAll(async () => {
    await seedDataDir(dataDir);
    server = await startServer({ dataDir });
    env = { WARRANT_URL: server.url, WARRANT_DATA_DIR: dataDir, WARRANT_KEYS_DIR: server.keysDir };
    const body = { trajectory_id: 'gate-1', rights: ['read'], objects: [{ kind: 'path', prefix: '/w/gate' }], predicate: { budget: 5 }, ttl_s: 600 };
    const minted = await warrant('mint', env, JSON.stringify(body));
    expect(minted.code).toBe(0);
    token = (JSON.parse(minted.stdout) as { token: string }).token;
  });
  afterAll(cleanupServers);

  const call = (op: string): string => JSON.stringify({ token, op, target: { kind: 'path', path: '/w/gate/f' }, cost: 1 });

  test('approve: a grant passes the shell gate (exit 0), a deny stops it (exit 3) and is still printed', async () => {
    const granted = await sh('$WARRANT approve && echo GATE-PASSED', env, call('read'));
    expect(granted.code).toBe(0);
    expect(granted.stdout).toContain('GATE-PASSED');
    expect(JSON.parse(granted.stdout.replace('GATE-PASSED', ''))).toMatchObject({ decision: 'grant' });

    const denied = await sh('$WARRANT approve && echo GATE-PASSED', env, call('write'));
    expect(denied.code).toBe(3);
    expect(denied.stdout).not.toContain('GATE-PASSED');
    expect(JSON.parse(denied.stdout)).toMatchObject({ decision: 'deny', reason: { code: 'right_missing' } });
  });

  test('approve: an error answer is 1, bad usage 2, both distinct from a deny', async () => {
    const invalid = await warrant('approve', env, JSON.stringify({ token, op: 'read' }));
    expect(invalid.code).toBe(1);
    expect(JSON.parse(invalid.stdout).error.code).toBe('invalid_request');
    expect((await warrant('approve', env, 'not json')).code).toBe(2);
  });

  test('inspect reads the token from stdin (-) and from a file, never needing it in argv', async () => {
    const file = join(tempDir(), 'token.jws');
    writeFileSync(file, `${token}\n`);
    for (const [args, stdin] of [
      ['inspect -', token],
      [`inspect '${file}'`, ''],
    ] as const) {
      const r = await warrant(args, env, stdin);
      expect(r.code, r.stderr).toBe(0);
      expect(JSON.parse(r.stdout)).toMatchObject({ header: { alg: 'EdDSA' }, verification: { ok: true, claims: { trajectory_id: 'gate-1' } } });
    }
    expect((await warrant('inspect -', env, '')).code).toBe(2);
  });

  test('an unreachable server or JWKS is exit 4 naming the URL and the cause, not "fetch failed"', async () => {
    const url = `http://127.0.0.1:${await closedPort()}`;
    const api = await warrant('verify-audit', { ...env, WARRANT_URL: url });
    expect(api.code).toBe(4);
    expect(api.stderr).toContain(url);
    expect(api.stderr).toContain('ECONNREFUSED');
    expect(api.stderr).not.toContain('fetch failed');

    const jwks = await warrant(`inspect - ${url}/.well-known/jwks.json`, env, token);
    expect(jwks.code).toBe(4);
    expect(jwks.stderr).toContain(`${url}/.well-known/jwks.json`);
    expect(jwks.stdout).toBe('');
  });

  test.each(HELP)('warrant %s prints its usage (exit 0) and does nothing', async (args, mentions) => {
    // With the server holding the embedded database, a database command that did run would be refused.
    const r = await warrant(args, env);
    expect([r.code, r.stderr]).toEqual([0, '']);
    expect(r.stdout).toContain('usage');
    expect(r.stdout).toContain(mentions);
  });

  test('tenant create of an existing name says so, without SQL (after the server stops)', async () => {
    expect(await server.stop()).toBe(0);
    const r = await warrant('tenant create default', env);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('a tenant named default already exists');
    expect(r.stderr).not.toMatch(/duplicate|unique|constraint|insert/i);
    const list = await warrant('tenant list', env);
    expect(list.stdout.trim().split('\n')).toHaveLength(1);
  }, 60_000);
});
