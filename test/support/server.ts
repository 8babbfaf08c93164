/**
 * The real server as a child process, for end-to-end tests over HTTP: `node --import tsx
 * src/node/main.ts` (or `npm start`) on a free port (PORT=0), with temporary data and keys directories, plus the
 * command-line tools (tenants, keys) run the same way. `cleanupServers()` in `afterAll` kills
 * whatever is still running and removes the directories made here.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { inject } from 'vitest';

const ROOT = resolve(import.meta.dirname, '../..');
const STARTUP_MS = 60_000;
const STOP_MS = 20_000;

/** Variables the server and the CLIs read: never inherited from the test run, only set on purpose. */
const SERVER_VARS = [
  'PORT',
  'HOST',
  'DATABASE_URL',
  'WARRANT_DATA_DIR',
  'WARRANT_SIGNING_KEYS',
  'WARRANT_KEYS_DIR',
  'WARRANT_PROCESSES',
  'WARRANT_AUDIT_KEYS',
  'WARRANT_CHECKPOINT_INTERVAL_S',
  'WARRANT_CHECKPOINT_DIR',
];

const children = new Set<ChildProcess>();
const tempDirs: string[] = [];

/** A fresh temporary directory, removed by `cleanupServers()`. */
export function tempDir(prefix = 'warrant-e2e-'): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  tempDirs.push(dir);
  return dir;
}

function childEnv(env: Record<string, string>): NodeJS.ProcessEnv {
  const out: NodeJS.ProcessEnv = { ...process.env };
  for (const name of SERVER_VARS) delete out[name];
  return { ...out, HOST: '127.0.0.1', ...env };
}

function spawnNode(script: string, args: readonly string[], env: Record<string, string>): ChildProcess {
  return track(spawn(process.execPath, ['--import', 'tsx', join(ROOT, script), ...args], { cwd: ROOT, env: childEnv(env), stdio: ['ignore', 'pipe', 'pipe'] }));
}

function track(child: ChildProcess): ChildProcess {
  children.add(child);
  child.once('exit', () => children.delete(child));
  return child;
}

export interface CliResult {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs a CLI under src/node (e.g. `tenant-cli.ts`, `keys-cli.ts`) to completion. */
export async function runCli(script: string, args: readonly string[], env: Record<string, string>): Promise<CliResult> {
  const child = spawnNode(`src/node/${script}`, args, env);
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
  const code = await new Promise<number | null>((done, fail) => {
    child.once('error', fail);
    child.once('close', (c) => done(c));
  });
  return { code, stdout, stderr };
}

/** The last non-empty line of a CLI's output (where `tenant create` prints the API key, alone). */
export function lastLine(text: string): string {
  return text.trimEnd().split('\n').at(-1) ?? '';
}

/** `npm run tenant -- create NAME` against the database `env` names; returns the API key. */
export async function createTenantWithCli(name: string, env: Record<string, string>): Promise<string> {
  const r = await runCli('tenant-cli.ts', ['create', name], env);
  if (r.code !== 0) throw new Error(`tenant create exited ${r.code}: ${r.stderr}`);
  return lastLine(r.stdout);
}

/**
 * Fills `dataDir` with the migrated PGlite data directory made by the global setup: about a second,
 * where initialising a fresh one in the server takes five or more. Only for tests that are not
 * about the very first start.
 */
export async function seedDataDir(dataDir: string): Promise<void> {
  const dump = readFileSync(inject('pgliteDump'));
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const db = await PGlite.create(dataDir, { loadDataDir: new Blob([dump]) });
  await db.close();
  // PGlite wrote with this process's umask; the server refuses a directory others can reach.
  makePrivate(dataDir);
}

/** chmod go-rwx on `dir` and everything in it. */
export function makePrivate(dir: string): void {
  const st = statSync(dir);
  chmodSync(dir, st.mode & 0o7700);
  if (st.isDirectory()) for (const name of readdirSync(dir)) makePrivate(join(dir, name));
}

export interface ServerOptions {
  /** Set for the server on top of PORT=0, HOST and the directories (DATABASE_URL, WARRANT_SIGNING_KEYS, …). */
  readonly env?: Record<string, string>;
  /** The data directory (restart on the same data); default a new temporary one. */
  readonly dataDir?: string;
  /** The keys directory; default a new temporary one. */
  readonly keysDir?: string;
  /** The tenant API key to hand back, e.g. on a restart against the same PostgreSQL database. */
  readonly apiKey?: string;
  /** `npm`: run `npm start`, as the README says, so that signals go to npm rather than to the server. */
  readonly via?: 'node' | 'npm';
}

export interface Response {
  readonly status: number;
  // Tests read fields freely; the assertions are what check the shape.
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  readonly body: any;
  readonly headers: Headers;
}

export interface RunningServer {
  readonly url: string;
  readonly port: number;
  readonly dataDir: string;
  readonly keysDir: string;
  /** The default tenant's key (PGlite), or one made with the tenant CLI (PostgreSQL). */
  readonly apiKey: string;
  /** Everything the process wrote so far, stdout then stderr. */
  logs(): string;
  /** The log lines parsed as JSON (one object per line). */
  logEntries(): Record<string, unknown>[];
  /** A JSON request with global fetch, as the server's tenant unless `key` says otherwise (null: none). */
  call(method: string, path: string, body?: unknown, options?: { key?: string | null; headers?: Record<string, string> }): Promise<Response>;
  /** Sends `signal` and resolves with the exit code once the process has exited (null if it had to be killed). */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/** Starts the real server and resolves once it is listening. */
export async function startServer(options: ServerOptions = {}): Promise<RunningServer> {
  const dataDir = options.dataDir ?? join(tempDir(), 'data');
  const keysDir = options.keysDir ?? join(tempDir(), 'keys');
  const env: Record<string, string> = { PORT: '0', WARRANT_DATA_DIR: dataDir, WARRANT_KEYS_DIR: keysDir, ...options.env };
  const postgres = env.DATABASE_URL !== undefined;
  // On PostgreSQL nothing makes a tenant at start: make one first (the CLI migrates, as the server does).
  const apiKey = options.apiKey ?? (postgres ? await createTenantWithCli(`e2e-${Date.now().toString(36)}`, env) : undefined);

  const child =
    options.via === 'npm'
      ? track(spawn('npm', ['start'], { cwd: ROOT, env: childEnv(env), stdio: ['ignore', 'pipe', 'pipe'] }))
      : spawnNode('src/node/main.ts', [], env);
  let stdout = '';
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | null>((done) => child.once('exit', (code) => done(code)));
  const port = await new Promise<number>((done, fail) => {
    const timer = setTimeout(() => fail(new Error(`the server did not listen within ${STARTUP_MS} ms:\n${stdout}${stderr}`)), STARTUP_MS);
    child.stdout?.on('data', (d: Buffer) => {
      const from = stdout.lastIndexOf('\n') + 1;
      stdout += d.toString();
      for (const line of stdout.slice(from).split('\n').slice(0, -1)) {
        const entry = parseLine(line);
        if (typeof entry?.msg === 'string' && entry.msg.startsWith('listening on http://') && typeof entry.port === 'number') {
          clearTimeout(timer);
          done(entry.port);
        }
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      fail(new Error(`the server exited (${code}) before listening:\n${stdout}${stderr}`));
    });
  }).catch((e: unknown) => {
    child.kill('SIGKILL');
    throw e;
  });

  const url = `http://127.0.0.1:${port}`;
  const key = apiKey ?? readFileSync(join(dataDir, 'default-api-key'), 'utf8').trim();
  return {
    url,
    port,
    dataDir,
    keysDir,
    apiKey: key,
    logs: () => stdout + stderr,
    logEntries: () =>
      stdout.split('\n').flatMap((l) => {
        const e = parseLine(l);
        return e === undefined ? [] : [e];
      }),
    async call(method, path, body, o = {}) {
      const headers: Record<string, string> = { ...o.headers };
      const bearer = o.key === undefined ? key : o.key;
      if (bearer !== null) headers.authorization = `Bearer ${bearer}`;
      if (body !== undefined) headers['content-type'] = 'application/json';
      const res = await fetch(url + path, { method, headers, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
      const text = await res.text();
      let parsed: unknown = text;
      try {
        parsed = JSON.parse(text);
      } catch {
        // not JSON: keep the text
      }
      return { status: res.status, body: parsed, headers: res.headers };
    },
    async stop(signal = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      const timer = setTimeout(() => child.kill('SIGKILL'), STOP_MS);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}

function parseLine(line: string): Record<string, unknown> | undefined {
  try {
    const v: unknown = JSON.parse(line);
    return typeof v === 'object' && v !== null ? (v as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/** Kills every process started here that is still running and removes the temporary directories. */
export async function cleanupServers(): Promise<void> {
  await Promise.all(
    [...children].map(async (c) => {
      if (c.exitCode !== null || c.signalCode !== null) return;
      const gone = new Promise((done) => c.once('exit', done));
      c.kill('SIGKILL');
      await gone;
    }),
  );
  for (const dir of tempDirs.splice(0)) rmSync(dir, { recursive: true, force: true });
}
