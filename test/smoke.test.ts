import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { BACKENDS } from './support/db.js';
import { mintBody, startHarness, type Harness } from './support/app.js';

describe.each(BACKENDS)('smoke on %s', (backend) => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness(backend);
  });
  afterAll(async () => h.close());
  test('mint then approve', async () => {
    const m = await h.call('POST', '/v1/capabilities', mintBody());
    expect(m.status).toBe(201);
    const a = await h.call('POST', '/v1/approve', { token: m.body.token, op: 'read', target: { kind: 'path', path: '/workspace/t-1/a' }, cost: 1 });
    expect(a.body.decision).toBe('grant');
  });
});
