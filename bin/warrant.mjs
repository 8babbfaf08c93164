#!/usr/bin/env node
// `npx warrant …`: the command-line tool (src/node/warrant-cli.ts), run from its TypeScript source
// through tsx, as `npm start` is (there is no build step).
import { register } from 'tsx/esm/api';

register();
await import('../src/node/warrant-cli.ts');
