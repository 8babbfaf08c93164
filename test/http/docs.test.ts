/**
 * GET /docs (issue 14): Swagger UI over /openapi.json, served without a key, with its script and
 * styles served by the app itself from swagger-ui-dist (no script from another origin), under a
 * Content-Security-Policy that allows only this origin's scripts, and with nothing that would keep
 * the API key in the browser (persistAuthorization off, no storage).
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createApp } from '../../src/http/app.js';
import { loadDocsAssets } from '../../src/node/docs-assets.js';
import { startHarness, type Harness } from '../support/app.js';

describe('GET /docs', () => {
  let h: Harness;
  let app: ReturnType<typeof createApp>;
  beforeAll(async () => {
    h = await startHarness('pglite');
    app = createApp({ store: h.store, writer: h.writer, keys: h.keys, now: h.clock.now, docsAssets: loadDocsAssets() });
  });
  afterAll(async () => h.close());

  const get = async (path: string): Promise<{ status: number; text: string; headers: Headers }> => {
    const r = await app.request(path);
    return { status: r.status, text: await r.text(), headers: r.headers };
  };

  test('serves Swagger UI over /openapi.json without a key, under a CSP allowing only this origin’s scripts', async () => {
    const r = await get('/docs');
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toMatch(/^text\/html/);
    const csp = r.headers.get('content-security-policy') ?? '';
    expect(csp).toMatch(/(^|; )script-src 'self'(;|$)/);
    expect(csp).toContain("default-src 'none'");
    expect(csp).toContain("frame-ancestors 'none'");
    expect((await get('/openapi.json')).status).toBe(200);
  });

  test('every script and stylesheet it loads is served by the app itself, from swagger-ui-dist', async () => {
    const page = (await get('/docs')).text;
    expect(page).not.toMatch(/https?:\/\//);
    expect(page).not.toMatch(/<script>|<script [^>]*>[^<]/); // no inline script
    const refs = [...page.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1] as string);
    expect(refs.length).toBeGreaterThanOrEqual(3);
    for (const ref of refs) {
      expect(ref).toMatch(/^\/docs\//);
      const asset = await get(ref);
      expect(asset.status).toBe(200);
      expect(asset.headers.get('content-type')).toMatch(/^(text\/javascript|text\/css)/);
    }
    expect((await get('/docs/swagger-ui-bundle.js')).text).toContain('SwaggerUIBundle');
    const init = (await get('/docs/init.js')).text;
    expect(init).toContain("url: '/openapi.json'");
  });

  test('keeps no API key in the browser', async () => {
    const init = (await get('/docs/init.js')).text;
    expect(init).toContain('persistAuthorization: false');
    expect(init).not.toMatch(/localStorage|sessionStorage|cookie/);
  });

  test('without the assets (the Workers bundle) there is no /docs', async () => {
    expect((await h.call('GET', '/docs', undefined, { as: 'none' })).status).toBe(404);
  });
});
