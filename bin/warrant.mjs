#!/usr/bin/env node
// `npx warrant …`: the command-line tool, run from its compiled JavaScript (dist/node/warrant-cli.js,
// built by `npm run build`, which `npm install` runs as prepare) with no TypeScript loader, so a
// call starts in a fraction of a second.
try {
  await import('../dist/node/warrant-cli.js');
} catch (e) {
  if (e?.code !== 'ERR_MODULE_NOT_FOUND' || !String(e.message).includes('warrant-cli.js')) throw e;
  console.error('warrant: dist/ is not built; run `npm run build` (or `npm install`) in the Warrant checkout');
  process.exit(2);
}
