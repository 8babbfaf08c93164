/**
 * Runs once per `vitest run`: migrates one embedded database and dumps its data directory, so each
 * test file starts its own PGlite from the dump in about half a second instead of several. Also
 * builds dist/ when src/ is newer (bin/build-if-stale.mjs): the CLI tests spawn the compiled tool,
 * as users run it, and `npm start` in a test must not race other files to build it.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { openDatabase } from '../../src/node/db.js';

declare module 'vitest' {
  export interface ProvidedContext {
    pgliteDump: string;
  }
}

export default async function setup(project: TestProject): Promise<() => void> {
  const built = spawnSync(process.execPath, [join(import.meta.dirname, '../../bin/build-if-stale.mjs')], { stdio: 'inherit' });
  if (built.status !== 0) throw new Error(`building dist/ failed (exit ${built.status})`);
  const dir = mkdtempSync(join(tmpdir(), 'warrant-test-'));
  const database = await openDatabase({});
  await database.migrate();
  if (database.pglite === undefined) throw new Error('openDatabase({}) must open PGlite');
  const dump = await database.pglite.dumpDataDir('none');
  const file = join(dir, 'migrated.tar');
  writeFileSync(file, new Uint8Array(await dump.arrayBuffer()));
  await database.close();
  project.provide('pgliteDump', file);
  return () => rmSync(dir, { recursive: true, force: true });
}
