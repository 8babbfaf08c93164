/** Configuration from the environment (README "Configuration"). */
import { resolve } from 'node:path';
import { DEFAULT_DEADLINE_MS } from '../store/deadline.js';
import { DEFAULT_MAX_PENDING } from '../store/writer.js';

/** The default of WARRANT_STATEMENT_TIMEOUT_MS. */
export const DEFAULT_STATEMENT_TIMEOUT_MS = 5000;

export interface Config {
  readonly port: number;
  readonly host: string;
  readonly databaseUrl?: string;
  readonly dataDir: string;
  readonly signingKeys?: string;
  /** The audit checkpoint key ring (a JWK set as JSON), when given in the environment. */
  readonly auditKeys?: string;
  readonly keysDir: string;
  /** Seconds between checkpoint rounds (0: no periodic checkpoints; one is still made at shutdown). */
  readonly checkpointIntervalS: number;
  /** Where each tenant's checkpoints are appended, one JSON-lines file per tenant. */
  readonly checkpointDir: string;
  /** WARRANT_DEADLINE_MS: every request needing the database is answered within it (503 past it). */
  readonly deadlineMs: number;
  /** WARRANT_MAX_PENDING: most decisions pending at once; beyond it, 503 at once (load shedding). */
  readonly maxPending: number;
  /** WARRANT_STATEMENT_TIMEOUT_MS: statement and idle-in-transaction timeout of every connection. */
  readonly statementTimeoutMs: number;
}

/** A positive integer variable, or its default when unset. */
function positiveInt(env: NodeJS.ProcessEnv, name: string, fallback: number, max = Number.MAX_SAFE_INTEGER): number {
  const raw = env[name]?.trim();
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1) throw new Error(`${name} must be a positive integer`);
  if (n > max) throw new Error(`${name} must be at most ${max}`);
  return n;
}

/**
 * The most WARRANT_STATEMENT_TIMEOUT_MS may be: a decision is dated before it waits on its locks and
 * commits, and a row that commits much later than its date reads to verify as written after the fact
 * (src/audit/checkpoint.ts CHECKPOINT_LAG_MS, 5 min).
 */
export const MAX_STATEMENT_TIMEOUT_MS = 60_000;

export function readConfig(env: NodeJS.ProcessEnv): Config {
  const port = Number(env.PORT ?? 8080);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error('PORT must be an integer 0 to 65535');
  const url = env.DATABASE_URL?.trim();
  const keys = env.WARRANT_SIGNING_KEYS?.trim();
  const auditKeys = env.WARRANT_AUDIT_KEYS?.trim();
  const interval = Number(env.WARRANT_CHECKPOINT_INTERVAL_S ?? 10);
  if (!Number.isFinite(interval) || interval < 0 || interval > 86_400)
    throw new Error('WARRANT_CHECKPOINT_INTERVAL_S must be a number of seconds from 0 to 86400');
  const keysDir = resolve(env.WARRANT_KEYS_DIR ?? './keys');
  return {
    port,
    host: env.HOST ?? '127.0.0.1',
    ...(url ? { databaseUrl: url } : {}),
    dataDir: resolve(env.WARRANT_DATA_DIR ?? './.data'),
    ...(keys ? { signingKeys: keys } : {}),
    ...(auditKeys ? { auditKeys } : {}),
    keysDir,
    checkpointIntervalS: interval,
    checkpointDir: resolve(env.WARRANT_CHECKPOINT_DIR ?? `${keysDir}/checkpoints`),
    deadlineMs: positiveInt(env, 'WARRANT_DEADLINE_MS', DEFAULT_DEADLINE_MS),
    maxPending: positiveInt(env, 'WARRANT_MAX_PENDING', DEFAULT_MAX_PENDING),
    statementTimeoutMs: positiveInt(env, 'WARRANT_STATEMENT_TIMEOUT_MS', DEFAULT_STATEMENT_TIMEOUT_MS, MAX_STATEMENT_TIMEOUT_MS),
  };
}

// Lines are gathered and written once per turn of the event loop: stdout to a pipe or file is a
// synchronous write(2) per call in Node, one per request under load (bench/RESULTS.md). What is
// still gathered when the process exits is written on the way out.
let pending: string[] = [];
let scheduled = false;

function flushLog(): void {
  scheduled = false;
  if (pending.length === 0) return;
  const out = pending.join('');
  pending = [];
  process.stdout.write(out);
}
process.on('exit', flushLog);

/** One JSON object per line on stdout. Callers never pass tokens or keys. */
export function log(entry: Record<string, unknown>): void {
  pending.push(`${JSON.stringify({ time: new Date().toISOString(), level: 'info', ...entry })}\n`);
  if (!scheduled) {
    scheduled = true;
    setImmediate(flushLog);
  }
}

/**
 * Runs a command-line tool's `main` and exits with its code; a failure is printed under `name`,
 * exit 1, or the refusal's own code (2 for a data directory held by another process).
 */
export function runMain(name: string, main: (args: string[]) => Promise<number>): void {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (e: unknown) => {
      console.error(`${name}: ${e instanceof Error ? e.message : String(e)}`);
      const code = (e as { exitCode?: unknown } | null)?.exitCode;
      process.exit(typeof code === 'number' ? code : 1);
    },
  );
}
