/**
 * GET /ui in a real headless Chromium (Debian's /usr/bin/chromium through playwright-core), against
 * the app listening on a free port: the delegation tree of a trajectory with rights, objects,
 * budget and spend, the revoked and expired capabilities marked, and the audit stream with denials
 * and their reasons, filterable. Run by `npm run test:browser` (and .ci/run), not by `npm test`.
 */
import type { AddressInfo } from 'node:net';
import { serve, type ServerType } from '@hono/node-server';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { startHarness, type Harness } from '../support/app.js';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

describe('the operator page', () => {
  let h: Harness;
  let server: ServerType;
  let base: string;
  let browser: Browser;
  let page: Page;
  const ids: Record<string, string> = {};

  beforeAll(async () => {
    h = await startHarness('pglite');
    await new Promise<void>((ready) => {
      server = serve({ fetch: h.app.fetch, port: 0, hostname: '127.0.0.1' }, () => ready());
    });
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    // A tree: root → a (budget 1, spends it) → a1 (revoked); root → b (short-lived, then expired).
    const post = async (path: string, body: unknown): Promise<Record<string, string>> => (await h.call('POST', path, body)).body as Record<string, string>;
    const root = await post('/v1/capabilities', {
      trajectory_id: 'ui-1',
      rights: ['read', 'write'],
      objects: [{ kind: 'path', prefix: '/w/ui-1' }],
      predicate: { budget: 5, max_calls: 10, max_depth: 3 },
      ttl_s: 3600,
    });
    const a = await post('/v1/attenuate', {
      parent_token: root.token,
      rights: ['read'],
      objects: [{ kind: 'path', prefix: '/w/ui-1/a' }],
      predicate: { budget: 1, max_calls: 5, max_depth: 2 },
      trajectory_id: 'ui-1.a',
    });
    const a1 = await post('/v1/attenuate', {
      parent_token: a.token,
      rights: ['read'],
      objects: [{ kind: 'path', prefix: '/w/ui-1/a/x' }],
      predicate: { budget: 1, max_calls: 5, max_depth: 1 },
    });
    const b = await post('/v1/attenuate', {
      parent_token: root.token,
      rights: ['write'],
      objects: [{ kind: 'path', prefix: '/w/ui-1/b' }],
      predicate: { budget: 1, max_calls: 5, max_depth: 1 },
      ttl_s: 60,
    });
    Object.assign(ids, { root: root.capability_id, a: a.capability_id, a1: a1.capability_id, b: b.capability_id });
    await post('/v1/approve', { token: a.token, op: 'read', target: { kind: 'path', path: '/w/ui-1/a/f' }, cost: 0.75 });
    await post('/v1/approve', { token: a.token, op: 'read', target: { kind: 'path', path: '/w/ui-1/a/../../etc/passwd' }, cost: 0 });
    await post('/v1/approve', { token: a.token, op: 'read', target: { kind: 'path', path: '/w/ui-1/a/g' }, cost: 0.5 });
    await post('/v1/revoke', { capability_id: a1.capability_id });
    h.clock.advance(120); // b has expired
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
    page = await browser.newPage();
  }, 60_000);
  afterAll(async () => {
    await browser?.close();
    await new Promise((done) => server.close(done));
    await h.close();
  });

  test('shows the tree with spend and states, and the audit stream with denials, filterable', async () => {
    await page.goto(`${base}/ui`);
    await page.fill('#key', h.tenants.a);
    await page.fill('#trajectory', 'ui-1');
    await page.click('button[type=submit]');
    await page.waitForSelector('#status:has-text("capabilities")');

    const node = (id: string) => page.locator(`.cap[data-id="${id}"]`);
    expect(await page.locator('.cap').count()).toBe(4);
    await expect
      .poll(() =>
        node(ids.a as string)
          .locator('.spend')
          .textContent(),
      )
      .toContain('spent 0.75 of 1');
    expect(
      await node(ids.a as string)
        .locator('.rights')
        .textContent(),
    ).toBe('rights: read');
    expect(
      await node(ids.a as string)
        .locator('.objects')
        .textContent(),
    ).toBe('objects: path /w/ui-1/a');
    expect(
      await node(ids.root as string)
        .locator('.badge')
        .textContent(),
    ).toBe('active');
    expect(
      await node(ids.a1 as string)
        .locator('.badge')
        .textContent(),
    ).toBe('revoked');
    expect(
      await node(ids.b as string)
        .locator('.badge')
        .textContent(),
    ).toBe('expired');
    // a1 sits under a, which sits under the root
    expect(await page.locator(`.cap[data-id="${ids.root}"] + ul .cap[data-id="${ids.a}"] + ul .cap[data-id="${ids.a1}"]`).count()).toBe(1);

    const rows = page.locator('#audit tbody tr');
    const all = await rows.count();
    expect(all).toBeGreaterThanOrEqual(8);
    await page.selectOption('#f-decision', 'deny');
    const denials = await page.locator('#audit tbody tr td:nth-child(5)').allTextContents();
    expect(denials.sort()).toEqual(['budget_exhausted', 'object_outside']);
    await page.selectOption('#f-decision', '');
    await page.fill('#f-text', 'object_outside');
    expect(await rows.count()).toBe(1);
  });

  test('a wrong key shows the error and no data', async () => {
    await page.goto(`${base}/ui`);
    await page.fill('#key', 'wk.wrong');
    await page.fill('#trajectory', 'ui-1');
    await page.click('button[type=submit]');
    await page.waitForSelector('#status:has-text("error: unauthorized")');
    expect(await page.locator('.cap').count()).toBe(0);
  });
});
