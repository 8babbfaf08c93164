/**
 * A throwaway PostgreSQL cluster for fault tests: initdb and pg_ctl from the installed binaries
 * (`pg_config --bindir`) on a free port, in a temporary directory. PostgreSQL refuses to run as root,
 * so when the tests run as root the cluster runs as `nobody` (through runuser) in a directory owned by
 * it. The test can kill it, stall it (SIGSTOP/SIGCONT on every process of the cluster), restart it,
 * make it read-only and terminate its client connections. It never touches any other server.
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import postgres from 'postgres';

const NOBODY = 65534;

/** The directory holding initdb and pg_ctl, or null (with the reason) when they are not installed. */
export function postgresBinaries(): { dir: string } | { missing: string } {
  let dir: string;
  try {
    dir = execFileSync('pg_config', ['--bindir'], { encoding: 'utf8' }).trim();
  } catch {
    return { missing: 'pg_config is not on PATH (install the PostgreSQL server package)' };
  }
  for (const tool of ['initdb', 'pg_ctl', 'postgres']) {
    if (!existsSync(join(dir, tool))) return { missing: `${tool} is not in ${dir} (install the PostgreSQL server package)` };
  }
  if (process.getuid?.() === 0 && spawnSync('runuser', ['--help']).error !== undefined) return { missing: 'running as root needs runuser to start PostgreSQL' };
  return { dir };
}

/** Why the cluster tests cannot run here, or null when they can. */
export const clusterUnavailable = (): string | null => {
  const b = postgresBinaries();
  return 'missing' in b ? b.missing : null;
};

/** Sends `sig` to `pid`; a backend that ended since it was listed is no error. */
function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch (e) {
    if ((e as { code?: string }).code !== 'ESRCH') throw e;
  }
}

function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const s = createServer();
    s.once('error', fail);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      const port = typeof a === 'object' && a !== null ? a.port : 0;
      s.close(() => done(port));
    });
  });
}

export interface Cluster {
  /** postgres://postgres@127.0.0.1:PORT/DB for a database `name` (created by `createDatabase`). */
  url(name: string): string;
  createDatabase(name: string): Promise<string>;
  /** Immediate shutdown (every backend ends at once, as on a crash); `start` brings it back. */
  kill(): Promise<void>;
  start(): Promise<void>;
  /** SIGSTOP every process of the cluster: connections stay open and nothing answers. */
  stall(): void;
  resume(): void;
  /** `default_transaction_read_only` on (`read-only`) or reset (`writable`), for every session at its next statement. */
  setMode(mode: 'read-only' | 'writable'): Promise<void>;
  /** pg_terminate_backend on every client connection to database `name`; returns how many. */
  terminate(name: string): Promise<number>;
  /** Stops the cluster and removes its directory. */
  destroy(): void;
}

/** Creates and starts a cluster; call `destroy()` in afterAll. */
export async function startCluster(): Promise<Cluster> {
  const bins = postgresBinaries();
  if ('missing' in bins) throw new Error(bins.missing);
  const root = mkdtempSync(join(tmpdir(), 'warrant-pg-'));
  const asRoot = process.getuid?.() === 0;
  if (asRoot) chownSync(root, NOBODY, NOBODY);
  const data = join(root, 'data');
  const port = await freePort();
  /** The command line of a server tool, run as nobody when this runs as root. */
  const argv = (tool: string, args: string[]): [string, string[]] => {
    const cmd = join(bins.dir, tool);
    return asRoot ? ['runuser', ['-u', 'nobody', '--', cmd, ...args]] : [cmd, args];
  };
  const run = (tool: string, args: string[]): void => {
    const r = spawnSync(...argv(tool, args), { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`${tool} ${args.join(' ')} failed (${r.status}): ${r.stderr}${r.stdout}`);
  };
  /**
   * `run` without blocking: the tests kill and start the cluster while their own load generator runs in
   * this process, and a synchronous pg_ctl (start waits out crash recovery) froze that generator. Its
   * requests then went unsent until after their 5 s client timeout, and the test counted them as
   * answers the server never gave (database-faults "restart and mass termination", which failed so).
   */
  const runAsync = (tool: string, args: string[]): Promise<void> =>
    new Promise((resolve, reject) => {
      const child = spawn(...argv(tool, args), { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      child.stdout.on('data', (d: Buffer) => (out += d.toString()));
      child.stderr.on('data', (d: Buffer) => (out += d.toString()));
      child.on('error', reject);
      child.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`${tool} ${args.join(' ')} failed (${code}): ${out}`))));
    });
  run('initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '--no-sync', '-E', 'UTF8']);
  // A disposable cluster: no fsync (an immediate shutdown is no machine crash, the OS keeps what was
  // written), but synchronous commit stays on, so a commit acknowledged is never lost by `kill()`.
  const options = `-p ${port} -k ${root} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off -c max_connections=100`;
  const start = (): Promise<void> => runAsync('pg_ctl', ['-D', data, '-l', join(root, 'log'), '-o', options, '-w', '-t', '60', 'start']);
  await start();
  const base = `postgres://postgres@127.0.0.1:${port}`;
  const admin = (): ReturnType<typeof postgres> => postgres(`${base}/postgres`, { max: 1, onnotice: () => {}, connect_timeout: 5 });

  /** The postmaster and every process it started. */
  const processes = (): number[] => {
    const pm = Number(readFileSync(join(data, 'postmaster.pid'), 'utf8').split('\n')[0]);
    const children = readdirSync('/proc')
      .filter((d) => /^\d+$/.test(d))
      .filter((d) => {
        try {
          const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
          return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === pm;
        } catch {
          return false;
        }
      })
      .map(Number);
    return [pm, ...children];
  };
  let stopped: number[] = [];

  return {
    url: (name) => `${base}/${name}`,
    async createDatabase(name) {
      const sql = admin();
      try {
        await sql.unsafe(`CREATE DATABASE ${name}`);
      } finally {
        await sql.end({ timeout: 5 });
      }
      return `${base}/${name}`;
    },
    kill: () => runAsync('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']),
    start,
    stall() {
      stopped = processes();
      for (const pid of stopped) signal(pid, 'SIGSTOP');
    },
    resume() {
      for (const pid of stopped) signal(pid, 'SIGCONT');
      stopped = [];
    },
    async setMode(mode) {
      const sql = admin();
      try {
        await sql.unsafe(mode === 'read-only' ? 'ALTER SYSTEM SET default_transaction_read_only = on' : 'ALTER SYSTEM RESET default_transaction_read_only');
        await sql.unsafe('SELECT pg_reload_conf()');
      } finally {
        await sql.end({ timeout: 5 });
      }
    },
    async terminate(name) {
      const sql = admin();
      try {
        const rows = await sql`SELECT pg_terminate_backend(pid) AS t FROM pg_stat_activity
          WHERE datname = ${name} AND pid <> pg_backend_pid() AND backend_type = 'client backend'`;
        return rows.length;
      } finally {
        await sql.end({ timeout: 5 });
      }
    },
    destroy() {
      for (const pid of stopped) signal(pid, 'SIGCONT');
      try {
        run('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']);
      } catch {
        // already stopped
      }
      rmSync(root, { recursive: true, force: true });
    },
  };
}
