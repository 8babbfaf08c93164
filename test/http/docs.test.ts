/**
 * GET /docs: an interactive API reference (Swagger UI) over /openapi.json, served without a key,
 * its assets pinned to one swagger-ui-dist version.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { startHarness, type Harness } from '../support/app.js';

describe('GET /docs', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness('pglite');
  });
  afterAll(async () => h.close());

  test('serves Swagger UI over /openapi.json, without a tenant key', async () => {
    const r = await h.call('GET', '/docs', undefined, { as: 'none' });
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toMatch(/^text\/html/);
    expect(r.body).toContain("url: '/openapi.json'");
    expect(r.body).toMatch(/swagger-ui-dist@\d+\.\d+\.\d+\/swagger-ui-bundle\.js/);
    expect((await h.call('GET', '/openapi.json', undefined, { as: 'none' })).status).toBe(200);
  });
});
