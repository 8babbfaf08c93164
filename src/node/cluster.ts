/**
 * Several Node processes behind one port (node:cluster), for a PostgreSQL server only: instances
 * are stateless and the database is the only shared state (DESIGN.md "Scale"), so N processes
 * decide exactly as one does. Each worker runs the ordinary server entry (main.ts). Embedded
 * PGlite lives inside one process and cannot be shared: use main.ts alone for it.
 *
 *   DATABASE_URL=postgres://… WARRANT_PROCESSES=2 npm run start:cluster
 */
import cluster from 'node:cluster';
import { availableParallelism } from 'node:os';
import { extname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { log } from './config.js';

const count = Number(process.env.WARRANT_PROCESSES ?? availableParallelism());
if (!process.env.DATABASE_URL?.trim()) {
  log({ level: 'fatal', msg: 'start:cluster needs DATABASE_URL: embedded PGlite cannot be shared between processes' });
  process.exit(1);
}
if (!Number.isInteger(count) || count < 1 || count > 64) {
  log({ level: 'fatal', msg: 'WARRANT_PROCESSES must be an integer 1 to 64' });
  process.exit(1);
}

// main.js beside the compiled cluster.js (npm run start:cluster), main.ts beside the source under tsx.
const entry = fileURLToPath(new URL(`./main${extname(fileURLToPath(import.meta.url))}`, import.meta.url));
cluster.setupPrimary({ exec: entry, execArgv: [...process.execArgv] });
let stopping = false;
for (let i = 0; i < count; i += 1) cluster.fork();
cluster.on('exit', (worker, code) => {
  if (stopping) {
    if (Object.keys(cluster.workers ?? {}).length === 0) process.exit(0);
    return;
  }
  // A worker that dies is replaced; a decision it was making is either committed or not (fail closed).
  log({ level: 'error', msg: 'worker exited; starting another', pid: worker.process.pid, code });
  cluster.fork();
});
const stop = (signal: NodeJS.Signals): void => {
  if (stopping) return;
  stopping = true;
  log({ msg: 'shutting down workers', signal });
  for (const w of Object.values(cluster.workers ?? {})) w?.process.kill(signal);
  setTimeout(() => process.exit(1), 15_000).unref();
};
process.on('SIGTERM', () => stop('SIGTERM'));
process.on('SIGINT', () => stop('SIGINT'));
