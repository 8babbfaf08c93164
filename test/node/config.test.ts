/**
 * Configuration bounds that the audit relies on: a statement may not wait so long that an honest
 * decision, dated before it waits, commits later than verify allows (CHECKPOINT_LAG_MS).
 */
import { expect, test } from 'vitest';
import { CHECKPOINT_LAG_MS } from '../../src/audit/checkpoint.js';
import { MAX_STATEMENT_TIMEOUT_MS, readConfig } from '../../src/node/config.js';

test('WARRANT_STATEMENT_TIMEOUT_MS is refused above its bound, which stays well below the checkpoint lag', () => {
  expect(MAX_STATEMENT_TIMEOUT_MS * 2).toBeLessThanOrEqual(CHECKPOINT_LAG_MS);
  expect(readConfig({ WARRANT_STATEMENT_TIMEOUT_MS: String(MAX_STATEMENT_TIMEOUT_MS) }).statementTimeoutMs).toBe(MAX_STATEMENT_TIMEOUT_MS);
  expect(() => readConfig({ WARRANT_STATEMENT_TIMEOUT_MS: String(MAX_STATEMENT_TIMEOUT_MS + 1) })).toThrow(
    /WARRANT_STATEMENT_TIMEOUT_MS must be at most 60000/,
  );
});
