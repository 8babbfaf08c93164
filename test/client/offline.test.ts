/**
 * verifyOffline (src/client/offline.ts) against the real server process, through a counting proxy:
 * the JWKS is fetched once per URL however many tokens are checked (jose's cache and cooldown), a
 * forged or tampered token is `bad_token`, and a JWKS that cannot be had is `jwks_unavailable`.
 * Real tokens, real signatures: nothing in the verifier is replaced.
 */
import { join } from 'node:path';
import { CompactSign, exportJWK, generateKeyPair } from 'jose';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { verifyOffline } from '../../src/client/index.js';
import { startCountingProxy, type CountingProxy } from '../support/counting-proxy.js';
import { cleanupServers, seedDataDir, startServer, tempDir, type RunningServer } from '../support/server.js';

const JWKS = '/.well-known/jwks.json';

describe('verifyOffline against the served JWKS', () => {
  let server: RunningServer;
  let proxy: CountingProxy;
  let token: string;
  let capabilityId: string;
  beforeAll(async () => {
    const dataDir = join(tempDir(), 'data');
    await seedDataDir(dataDir);
    server = await startServer({ dataDir });
    proxy = await startCountingProxy(server.url);
    const minted = await server.call('POST', '/v1/capabilities', {
      trajectory_id: 'off-1',
      rights: ['read'],
      objects: [{ kind: 'path', prefix: '/workspace/off-1' }],
      ttl_s: 600,
    });
    expect(minted.status).toBe(201);
    ({ token, capability_id: capabilityId } = minted.body);
  });
  afterAll(async () => {
    await proxy?.close();
    await cleanupServers();
  });

  // Each test has its own URL (a distinct query), so its own cache entry and its own count.
  const jwksUrl = (tag: string): URL => new URL(`${proxy.url}${JWKS}?${tag}`);

  test('many verifies, one after another and at once, fetch the JWKS once', async () => {
    const url = jwksUrl('many');
    const concurrent = await Promise.all(Array.from({ length: 20 }, () => verifyOffline(token, url)));
    const sequential = [];
    for (let i = 0; i < 10; i++) sequential.push(await verifyOffline(token, url));
    for (const r of [...concurrent, ...sequential]) expect(r).toMatchObject({ ok: true, claims: { capability_id: capabilityId, trajectory_id: 'off-1' } });
    expect(proxy.count(`${JWKS}?many`)).toBe(1);
  });

  test('a forged or tampered token is bad_token, and asks for no new fetch within the cooldown', async () => {
    const url = jwksUrl('forged');
    expect(await verifyOffline(token, url)).toMatchObject({ ok: true });
    const [head, payload, sig] = token.split('.') as [string, string, string];
    const header = JSON.parse(Buffer.from(head, 'base64url').toString()) as { alg: string; kid: string };
    const claims = Buffer.from(payload, 'base64url');

    // The same header and claims signed by a key the authority never had.
    const { privateKey } = await generateKeyPair('EdDSA');
    const forged = await new CompactSign(claims).setProtectedHeader(header).sign(privateKey);
    const strangerKid = await new CompactSign(claims).setProtectedHeader({ ...header, kid: 'not-a-kid-of-this-authority' }).sign(privateKey);
    // The claims changed under the real signature: a wider trajectory, rights and expiry.
    const widened = Buffer.from(JSON.stringify({ ...JSON.parse(claims.toString()), r: ['read', 'write'], exp: 4_102_444_800 })).toString('base64url');
    const tampered = `${head}.${widened}.${sig}`;
    const truncated = `${head}.${payload}.${sig.slice(0, -4)}`;

    for (const bad of [forged, strangerKid, tampered, truncated, 'not.a.jws', ''])
      expect(await verifyOffline(bad, url)).toEqual({ ok: false, code: 'bad_token' });
    // The unknown kid did not send jose back to the JWKS: it was fetched under 30 s ago.
    expect(proxy.count(`${JWKS}?forged`)).toBe(1);
  });

  test('an unreachable or unusable JWKS is jwks_unavailable, never bad_token', async () => {
    const [head, payload] = token.split('.') as [string, string];
    const forged = `${head}.${payload}.${'A'.repeat(86)}`;
    const unusable = [
      new URL(`http://127.0.0.1:1${JWKS}`), // nothing listens
      new URL(`${server.url}/.well-known/nothing.json`), // 404
      new URL(`${server.url}/healthz`), // 200, JSON, not a JWK set
      new URL(`${server.url}/metrics`), // 200, not JSON
    ];
    for (const url of unusable) {
      expect(await verifyOffline(token, url)).toEqual({ ok: false, code: 'jwks_unavailable' });
      // Nothing can be said of a token without the keys, forged or not.
      expect(await verifyOffline(forged, url)).toEqual({ ok: false, code: 'jwks_unavailable' });
    }
    expect(await verifyOffline(token, { keys: 'none' } as never)).toEqual({ ok: false, code: 'jwks_unavailable' });
    // A set holding a private key is not a verification key set.
    const { privateKey } = await generateKeyPair('EdDSA', { extractable: true });
    const { kid } = JSON.parse(Buffer.from(head, 'base64url').toString()) as { kid: string };
    const withPrivate = { keys: [{ ...(await exportJWK(privateKey)), kid, alg: 'EdDSA' }] };
    expect(await verifyOffline(token, withPrivate as never)).toEqual({ ok: false, code: 'jwks_unavailable' });
  });

  test('a failed fetch is not kept: the same URL verifies once its JWKS can be had', async () => {
    const down = await startCountingProxy(server.url);
    const url = new URL(`${down.url}${JWKS}`);
    await down.close();
    expect(await verifyOffline(token, url)).toEqual({ ok: false, code: 'jwks_unavailable' });
    const up = await startCountingProxy(server.url, Number(url.port));
    try {
      expect(await verifyOffline(token, url)).toMatchObject({ ok: true, claims: { capability_id: capabilityId } });
      expect(up.count(JWKS)).toBe(1);
    } finally {
      await up.close();
    }
  });
});
