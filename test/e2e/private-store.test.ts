/**
 * The embedded store is private and has one owner (issue 14): the data directory is 0700 with
 * nothing in it open to group or others (and, run as root, user `nobody` can read or write none of
 * it); a directory others can reach is refused, and so is one that is, or holds, a symbolic link
 * (its target escapes these checks); a second server or CLI on a held directory exits 2
 * naming the holder and opens nothing; a busy port stops the server before the database is opened;
 * the default tenant is stored only once its key file is written.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readFileSync, rmdirSync, statSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { ensurePrivateDir, reachableByOthers, StartupRefused } from '../../src/node/datadir.js';
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
      expect(reachableByOthers(dataDir)).toEqual({ open: [], links: [] });
      expect(server.logs()).toMatch(/"msg":"durability of the embedded database"/);
    } finally {
      expect(await server.stop()).toBe(0);
    }
    expect(reachableByOthers(dataDir)).toEqual({ open: [], links: [] });
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

  /** What ensurePrivateDir refuses `dir` with, or null when it passes. */
  function refusal(dir: string): string | null {
    try {
      ensurePrivateDir(dir);
      return null;
    } catch (e) {
      if (e instanceof StartupRefused) return e.message;
      throw e;
    }
  }

  test('a symbolic link in the data directory is refused, naming it, wherever it points and however private its target', () => {
    const elsewhere = join(tempDir(), 'elsewhere');
    mkdirSync(elsewhere, { mode: 0o700 });
    for (const [name, target] of [
      ['pg_xact', elsewhere], // a directory another user could control
      ['link-to-file', join(elsewhere, 'f')], // dangling, or a file
    ] as const) {
      const dataDir = join(tempDir(), 'data');
      mkdirSync(join(dataDir, 'base'), { recursive: true, mode: 0o700 });
      const link = join(dataDir, 'base', name);
      symlinkSync(target, link);
      expect(reachableByOthers(dataDir)).toEqual({ open: [], links: [link] });
      const message = refusal(dataDir);
      expect(message).toContain(`symbolic link ${link}`);
      expect(message).toContain(dataDir);
    }
  });

  test('a data directory that is itself a symbolic link is refused, naming it, even to a private directory of this user', () => {
    const real = join(tempDir(), 'real');
    mkdirSync(real, { mode: 0o700 });
    const dataDir = join(tempDir(), 'data');
    symlinkSync(real, dataDir);
    expect(reachableByOthers(dataDir)).toEqual({ open: [], links: [dataDir] });
    expect(refusal(dataDir)).toContain(`the data directory ${dataDir} is a symbolic link`);
    expect(refusal(real)).toBeNull();
  });

  test('a server on a data directory holding a symbolic link exits 2, naming it, before anything opens', async () => {
    const dataDir = join(tempDir(), 'data');
    await seedDataDir(dataDir);
    const elsewhere = join(tempDir(), 'elsewhere');
    mkdirSync(elsewhere, { mode: 0o700 });
    const link = join(dataDir, 'pg_tblspc', 'evil');
    symlinkSync(elsewhere, link);
    const r = await runCli('main.ts', [], { WARRANT_DATA_DIR: dataDir, WARRANT_KEYS_DIR: join(tempDir(), 'keys'), PORT: '0' });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`symbolic link ${link}`);
    expect(existsSync(join(dataDir, 'warrant.lock'))).toBe(false);
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

  // Written after the tenant was stored, a key file that could not be written (a full disk, here a
  // directory in its place) or a crash between the two left a default tenant whose key nobody had:
  // the next start saw a tenant, made none, and wrote no file.
  test('the default tenant is stored only once its key file is written', async () => {
    const dataDir = join(tempDir(), 'data');
    mkdirSync(join(dataDir, 'default-api-key'), { recursive: true, mode: 0o700 });
    await expect(startServer({ dataDir })).rejects.toThrow(/exited \(1\) before listening/);
    rmdirSync(join(dataDir, 'default-api-key'));
    const server = await startServer({ dataDir });
    try {
      expect((await server.call('GET', '/v1/audit?limit=1')).status).toBe(200);
    } finally {
      expect(await server.stop()).toBe(0);
    }
  }, 90_000);
});
