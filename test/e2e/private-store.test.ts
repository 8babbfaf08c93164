/**
 * The embedded store is private and has one owner (issue 14): the data directory is 0700 with
 * nothing in it open to group or others (and, run as root, user `nobody` can read or write none of
 * it); a directory others can reach is refused; a second server or CLI on a held directory exits 2
 * naming the holder and opens nothing; a busy port stops the server before the database is opened.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { reachableByOthers } from '../../src/node/datadir.js';
import { cleanupServers, runCli, seedDataDir, startServer, tempDir } from '../support/server.js';

const mint = { trajectory_id: 't-p', rights: ['read'], objects: [{ kind: 'path', prefix: '/w' }], predicate: {}, ttl_s: 3600 };
const isRoot = process.getuid?.() === 0;
const hasRunuser = ((): boolean => {
  try {
    execFileSync('runuser', ['--help'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();

/** Whether user nobody can run `sh -c script` successfully. */
function asNobody(script: string): boolean {
  try {
    execFileSync('runuser', ['-u', 'nobody', '--', 'sh', '-c', script], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

describe('the embedded data directory', () => {
  afterAll(cleanupServers);

  test('a first start makes it 0700 with nothing in it open to group or others, and keeps it so under writes', async () => {
    const dataDir = join(tempDir(), 'data');
    const server = await startServer({ dataDir });
    try {
      expect((await server.call('POST', '/v1/capabilities', mint)).status).toBe(201);
      expect(statSync(dataDir).mode & 0o777).toBe(0o700);
      expect(reachableByOthers(dataDir)).toEqual([]);
      expect(server.logs()).toMatch(/"msg":"durability of the embedded database"/);
    } finally {
      expect(await server.stop()).toBe(0);
    }
    expect(reachableByOthers(dataDir)).toEqual([]);
  }, 90_000);

  test.runIf(isRoot && hasRunuser)(
    'as root: user nobody can neither read nor write the commit log, even with the directory opened up',
    async () => {
      const dataDir = join(tempDir(), 'data');
      const server = await startServer({ dataDir });
      expect(await server.stop()).toBe(0);
      const xact = join(dataDir, 'pg_xact', '0000');
      expect(existsSync(xact)).toBe(true);
      expect(asNobody(`cat '${xact}' > /dev/null`)).toBe(false);
      // Even if an operator later opens the directories, the files themselves stay the owner's.
      chmodSync(dataDir, 0o755);
      chmodSync(join(dataDir, 'pg_xact'), 0o755);
      expect(asNobody(`cat '${xact}' > /dev/null`)).toBe(false);
      expect(asNobody(`printf x >> '${xact}'`)).toBe(false);
    },
    90_000,
  );

  test('a directory reachable by others is refused with how to fix it, exit 2, before anything opens', async () => {
    const dataDir = join(tempDir(), 'data');
    await seedDataDir(dataDir);
    chmodSync(dataDir, 0o755);
    const r = await runCli('main.ts', [], { WARRANT_DATA_DIR: dataDir, WARRANT_KEYS_DIR: join(tempDir(), 'keys'), PORT: '0' });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`chmod -R go-rwx '${dataDir}'`);
    expect(existsSync(join(dataDir, 'warrant.lock'))).toBe(false);
    const cli = await runCli('tenant-cli.ts', ['create', 'x'], { WARRANT_DATA_DIR: dataDir });
    expect(cli.code).toBe(2);
    expect(cli.stderr).toContain('go-rwx');
  }, 90_000);

  test('a second server and the tenant CLI beside a running server exit 2 naming its pid; the first keeps serving', async () => {
    const dataDir = join(tempDir(), 'data');
    await seedDataDir(dataDir);
    const first = await startServer({ dataDir });
    try {
      const holder = JSON.parse(readFileSync(join(dataDir, 'warrant.lock'), 'utf8')) as { pid: number };
      const second = await runCli('main.ts', [], { WARRANT_DATA_DIR: dataDir, WARRANT_KEYS_DIR: first.keysDir, PORT: '0' });
      expect(second.code).toBe(2);
      expect(second.stderr).toContain(`in use by process ${holder.pid}`);
      expect(second.stdout).not.toContain('database ready');

      const cli = await runCli('tenant-cli.ts', ['create', 'beside'], { WARRANT_DATA_DIR: dataDir });
      expect(cli.code).toBe(2);
      expect(cli.stderr).toContain(`process ${holder.pid}`);
      expect(cli.stdout).not.toMatch(/wk\./);

      expect((await first.call('POST', '/v1/capabilities', mint)).status).toBe(201);
      expect((await first.call('GET', '/v1/audit/verify')).body.ok).toBe(true);
    } finally {
      expect(await first.stop()).toBe(0);
    }
    // Released on a clean stop: the CLI may open it now.
    expect(existsSync(join(dataDir, 'warrant.lock'))).toBe(false);
    expect((await runCli('tenant-cli.ts', ['list'], { WARRANT_DATA_DIR: dataDir })).code).toBe(0);
  }, 120_000);

  test('a lock left by a process that is gone is taken over', async () => {
    const dataDir = join(tempDir(), 'data');
    await seedDataDir(dataDir);
    // A pid that cannot be running: above the kernel's pid_max.
    execFileSync('sh', [
      '-c',
      `printf '{"pid":99999999,"command":"crashed"}' > '${join(dataDir, 'warrant.lock')}' && chmod 600 '${join(dataDir, 'warrant.lock')}'`,
    ]);
    const r = await runCli('tenant-cli.ts', ['list'], { WARRANT_DATA_DIR: dataDir });
    expect(r.code).toBe(0);
  }, 60_000);

  test('a busy port stops the server with a clear error before the database is opened', async () => {
    const first = await startServer();
    try {
      const dataDir = join(tempDir(), 'data');
      const r = await runCli('main.ts', [], { WARRANT_DATA_DIR: dataDir, WARRANT_KEYS_DIR: join(tempDir(), 'keys'), PORT: String(first.port) });
      expect(r.code).toBe(1);
      expect(r.stderr).toContain('the port is in use');
      expect(r.stderr).not.toContain('EADDRINUSE');
      expect(existsSync(join(dataDir, 'PG_VERSION'))).toBe(false);
      expect(existsSync(join(dataDir, 'warrant.lock'))).toBe(false);
    } finally {
      expect(await first.stop()).toBe(0);
    }
  }, 90_000);
});
