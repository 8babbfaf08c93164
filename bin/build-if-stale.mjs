#!/usr/bin/env node
// Runs `tsc -p tsconfig.build.json` when dist/ is older than the sources it is built from (src/, the
// tsconfigs, package.json), so `npm start` after a pull or an edit never runs stale JavaScript.
// Comparing modification times takes a few milliseconds; even a no-op incremental tsc takes seconds.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync, utimesSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const stamp = join(root, 'dist', '.tsbuildinfo');

function newest(path) {
  const st = statSync(path);
  if (!st.isDirectory()) return st.mtimeMs;
  let latest = st.mtimeMs;
  for (const name of readdirSync(path)) latest = Math.max(latest, newest(join(path, name)));
  return latest;
}

const inputs = ['src', 'tsconfig.json', 'tsconfig.build.json', 'package.json'].map((p) => join(root, p));
if (existsSync(stamp) && statSync(stamp).mtimeMs >= Math.max(...inputs.map(newest))) process.exit(0);

console.error('warrant: building dist/ from src/ (npm run build)…');
const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
if (!existsSync(tsc)) {
  console.error('warrant: dist/ is missing or stale and TypeScript is not installed; run `npm install` first');
  process.exit(1);
}
const built = spawnSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.build.json')], { stdio: 'inherit' });
if (built.status !== 0) process.exit(built.status ?? 1);
// An incremental build that found nothing to change leaves its build info untouched: stamp it now.
const now = new Date();
utimesSync(stamp, now, now);
