import { defineConfig } from 'vitest/config';

// `npm run test:browser`: the page tests in headless Chromium (Debian's chromium package).
export default defineConfig({
  test: {
    include: ['test/browser/**/*.test.ts'],
    globalSetup: ['test/support/global-setup.ts'],
    pool: 'forks',
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
});
