#!/usr/bin/env node
// npm's postinstall: applies patches/ to node_modules with patch-package in a checkout of this
// repository (npm install, npm ci). Where Warrant is installed as a package there is no patches/
// directory (package.json "files") and nothing to patch: the client does not use postgres.js.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
if (existsSync(join(root, 'patches'))) {
  const r = spawnSync('npx', ['--no-install', 'patch-package', '--error-on-fail'], { cwd: root, stdio: 'inherit' });
  process.exit(r.status ?? 1);
}
