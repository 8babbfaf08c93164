/**
 * Seals (src/service/seal.ts) across a key rotation: what the old key sealed still holds while the
 * ring keeps that key's private part, and is refused once only its public part (or nothing) is left;
 * new seals are made under the active key; a seal of other content, kind or key never holds.
 */
import { describe, expect, test } from 'vitest';
import { generateSigningJwk, loadKeyRing, rotate } from '../../src/crypto/keys.js';
import { ResponseSealer } from '../../src/service/seal.js';

describe('ResponseSealer', () => {
  test('holds across a rotation while the old private key stays in the ring; refused once it is retired', async () => {
    const first = { keys: [await generateSigningJwk()] };
    const old = await ResponseSealer.from(await loadKeyRing(first));
    const seal = old.sealOf('tool', ['t', 'view', 1]);
    expect(seal.startsWith(`${String(first.keys[0]?.kid)}.`)).toBe(true);

    const rotated = await rotate(first);
    const now = await ResponseSealer.from(await loadKeyRing(rotated));
    expect(now.holdsOf('tool', ['t', 'view', 1], seal)).toBe(true);
    expect(now.sealOf('tool', ['t', 'view', 1]).startsWith(`${String(rotated.keys[1]?.kid)}.`)).toBe(true);

    // eslint-disable-next-line @typescript-eslint/no-unused-vars
    const publicOnly = rotated.keys.map((k, i) => (i === 0 ? (({ d, ...pub }) => pub)(k) : k));
    const retired = await ResponseSealer.from(await loadKeyRing({ keys: publicOnly }));
    expect(retired.holdsOf('tool', ['t', 'view', 1], seal)).toBe(false);
  });

  test('a seal holds only for its own content, kind and key', async () => {
    const a = await ResponseSealer.from(await loadKeyRing({ keys: [await generateSigningJwk()] }));
    const b = await ResponseSealer.from(await loadKeyRing({ keys: [await generateSigningJwk()] }));
    const seal = a.sealOf('approval', [{ x: 1, y: [2, 'z'] }]);
    expect(a.holdsOf('approval', [{ y: [2, 'z'], x: 1 }], seal)).toBe(true); // key order is not content
    expect(a.holdsOf('approval', [{ x: 2, y: [2, 'z'] }], seal)).toBe(false);
    expect(a.holdsOf('tool', [{ x: 1, y: [2, 'z'] }], seal)).toBe(false);
    expect(b.holdsOf('approval', [{ x: 1, y: [2, 'z'] }], seal)).toBe(false);
    expect(a.holdsOf('approval', [{ x: 1, y: [2, 'z'] }], null)).toBe(false);
    expect(a.holdsOf('approval', [{ x: 1, y: [2, 'z'] }], `${seal.slice(0, -2)}AA`)).toBe(false);
  });

  // A Worker builds its app per request on a ring cached per isolate: the sealer must not sign again each time.
  test('one sealer per ring: made once, and another ring gets its own', async () => {
    const ring = await loadKeyRing({ keys: [await generateSigningJwk()] });
    const first = await ResponseSealer.from(ring);
    expect(await ResponseSealer.from(ring)).toBe(first);
    const other = await ResponseSealer.from(await loadKeyRing({ keys: [await generateSigningJwk()] }));
    expect(other).not.toBe(first);
    expect(other.holdsOf('tool', ['t'], first.sealOf('tool', ['t']))).toBe(false);
  });
});
