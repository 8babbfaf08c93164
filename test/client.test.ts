/**
 * The typed client (src/client) against a real listening server (the app on @hono/node-server on a
 * free port): every call, errors as WarrantError with their codes and details, and offline token
 * verification against the served JWKS.
 */
import type { AddressInfo } from 'node:net';
import { serve, type ServerType } from '@hono/node-server';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { WarrantClient, WarrantError, verifyOffline, verifyReceipt } from '../src/client/index.js';
import { startHarness, type Harness } from './support/app.js';

describe('WarrantClient over HTTP', () => {
  let h: Harness;
  let server: ServerType;
  let base: string;
  let client: WarrantClient;
  beforeAll(async () => {
    h = await startHarness('pglite');
    await new Promise<void>((ready) => {
      server = serve({ fetch: h.app.fetch, port: 0, hostname: '127.0.0.1' }, () => ready());
    });
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    client = new WarrantClient({ baseUrl: `${base}/`, apiKey: h.tenants.a });
  });
  afterAll(async () => {
    await new Promise((done) => server.close(done));
    await h.close();
  });

  const rootBody = {
    trajectory_id: 'c-1',
    rights: ['read', 'write'] as const,
    objects: [{ kind: 'path' as const, prefix: '/workspace/c-1' }],
    predicate: { budget: 1, max_depth: 2 },
    ttl_s: 600,
  };

  test('mint, attenuate, approve, revoke, read back, audit and verify', async () => {
    const root = await client.mint({ ...rootBody, rights: [...rootBody.rights] }, { idempotencyKey: 'k-1' });
    expect(root.depth).toBe(0);
    const again = await client.mint({ ...rootBody, rights: [...rootBody.rights] }, { idempotencyKey: 'k-1' });
    expect(again.capability_id).toBe(root.capability_id);
    const child = await client.attenuate({
      parent_token: root.token,
      rights: ['read'],
      objects: [{ kind: 'path', prefix: '/workspace/c-1/sub' }],
      predicate: { budget: 0.5, max_depth: 1 },
    });
    expect(child.parent_id).toBe(root.capability_id);
    const grant = await client.approve({ token: child.token, op: 'read', target: { kind: 'path', path: '/workspace/c-1/sub/a' }, cost: 0.25 });
    expect(grant).toMatchObject({ decision: 'grant', reason: null, budget_remaining: 0.25 });
    const deny = await client.approve({ token: child.token, op: 'write', target: { kind: 'path', path: '/workspace/c-1/sub/a' }, cost: 0 });
    expect(deny.reason?.code).toBe('right_missing');
    expect(await client.revoke({ capability_id: root.capability_id })).toEqual([root.capability_id, child.capability_id]);
    expect((await client.capability(child.capability_id)).status).toBe('revoked');
    const denials = await client.audit({ capability_id: child.capability_id, decision: 'deny' });
    expect(denials.entries.map((e) => e.reason_code)).toEqual(['right_missing']);
    expect(await client.verifyAudit()).toMatchObject({ ok: true });
  });

  test('attenuate inherits omitted limits; approve takes dry_run (issue 16)', async () => {
    const root = await client.mint({ ...rootBody, trajectory_id: 'c-4', rights: ['read'] });
    const child = await client.attenuate({ parent_token: root.token, rights: ['read'], objects: [{ kind: 'path', prefix: '/workspace/c-1/sub4' }] });
    expect(child.predicate).toEqual({ budget: 1, max_depth: 1 });
    const call = { token: child.token, op: 'read' as const, target: { kind: 'path' as const, path: '/workspace/c-1/sub4/a' }, cost: 0.75 };
    expect(await client.approve({ ...call, dry_run: true })).toMatchObject({ decision: 'grant', dry_run: true, budget_remaining: 0.25 });
    expect((await client.capability(child.capability_id)).spent).toBe(0);
  });

  test('errors carry status, code and details', async () => {
    const root = await client.mint({ ...rootBody, trajectory_id: 'c-2', rights: ['read'] });
    const refused = await client
      .attenuate({ parent_token: root.token, rights: ['write'], objects: [{ kind: 'path', prefix: '/etc' }], predicate: { budget: 0.5, max_depth: 1 } })
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(WarrantError);
    expect(refused).toMatchObject({ status: 403, code: 'attenuation_refused' });
    expect(((refused as WarrantError).details.violations as { code: string }[]).map((v) => v.code).sort()).toEqual(['object_widened', 'right_widened']);
    await expect(client.capability('cap_nope')).rejects.toMatchObject({ status: 404, code: 'not_found' });
    await expect(new WarrantClient({ baseUrl: base, apiKey: 'wk.nope' }).verifyAudit()).rejects.toMatchObject({ status: 401, code: 'unauthorized' });
    await expect(new WarrantClient({ baseUrl: 'http://127.0.0.1:1', apiKey: h.tenants.a }).verifyAudit()).rejects.toMatchObject({ status: 0, code: 'network' });
  });

  test('verifyOffline checks the signature against the served JWKS, and the validity window', async () => {
    const cap = await client.mint({ ...rootBody, trajectory_id: 'c-3', rights: ['read'] });
    const jwks = new URL(`${base}/.well-known/jwks.json`);
    const ok = await verifyOffline(cap.token, jwks, h.clock.now());
    expect(ok).toMatchObject({ ok: true, claims: { capability_id: cap.capability_id, trajectory_id: 'c-3', rights: ['read'] } });
    const [head, payload, sig] = cap.token.split('.') as [string, string, string];
    const tampered = `${head}.${payload.slice(0, -2)}${payload.endsWith('A') ? 'B' : 'A'}${payload.slice(-1)}.${sig}`;
    expect(await verifyOffline(tampered, jwks, h.clock.now())).toEqual({ ok: false, code: 'bad_token' });
    expect(await verifyOffline(cap.token, { keys: [] }, h.clock.now())).toEqual({ ok: false, code: 'bad_token' });
    expect(await verifyOffline(cap.token, jwks, new Date(h.clock.ms + 601_000))).toEqual({ ok: false, code: 'expired' });
    expect(await verifyOffline(cap.token, jwks, new Date(h.clock.ms - 1_000))).toEqual({ ok: false, code: 'not_yet_valid' });
  });

  test('a receipt: not_yet_covered before a checkpoint, then verified offline against the published audit keys', async () => {
    const root = await client.mint({ ...rootBody, trajectory_id: 'c-receipt', rights: ['read'] });
    const d = await client.approve({ token: root.token, op: 'read', target: { kind: 'path', path: '/workspace/c-1/r' }, cost: 0 });
    await expect(client.receipt(d.audit_id)).rejects.toMatchObject({ status: 409, code: 'not_yet_covered' });
    expect(await h.checkpoint()).not.toBeNull();
    const receipt = await client.receipt(d.audit_id);
    expect(await verifyReceipt(receipt, new URL(`${base}/.well-known/warrant-audit-keys.json`))).toMatchObject({ ok: true, row: { id: d.audit_id } });
    // Another authority's keys do not vouch for it.
    const stranger = { keys: [{ ...h.keys.jwks.keys[0] }] };
    expect(await verifyReceipt(receipt, stranger as never)).toMatchObject({ ok: false, code: 'bad_checkpoint' });
  });
});
