import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // The Chromium tests run apart (`npm run test:browser`): a fresh machine may have no browser.
    exclude: ['test/browser/**', 'node_modules/**'],
    // One migrated PGlite data directory is made once and loaded by every file (0.5 s, not 4 s).
    globalSetup: ['test/support/global-setup.ts'],
    pool: 'forks',
    testTimeout: 20_000,
    hookTimeout: 60_000,
  },
});
