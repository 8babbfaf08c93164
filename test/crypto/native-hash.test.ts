/**
 * The server's base64url (Buffer) must give jose's text for every byte string: ids and API keys
 * minted by a Node server are checked by their form elsewhere. And its SHA-256 (node:crypto, src/node/native-hash.ts) must give the digests of the portable
 * one (@noble/hashes) for every string, or rows hashed by a Node server would not verify on Workers,
 * in the typed client or in an older release (and the reverse).
 */
import { afterEach, describe, expect, test } from 'vitest';
import {
  newId,
  nobleSha256Bytes,
  nobleSha256Hex,
  portableBase64url,
  randomToken,
  sha256Bytes,
  sha256Hex,
  useBase64url,
  useSha256,
  useSha256Bytes,
} from '../../src/crypto/hash.js';
import { interiorHash, leafHash } from '../../src/audit/merkle.js';
import { nativeBase64url, nativeSha256Bytes, nativeSha256Hex } from '../../src/node/native-hash.js';

const samples: string[] = [
  '',
  'abc',
  '{"a":1}',
  'é', // two UTF-8 bytes
  '€𝄞🙂', // three and four
  '\ud800', // a lone high surrogate: U+FFFD in both
  'x\udc00y', // a lone low surrogate
  '\u0000\u007f\u0080\u07ff\u0800\uffff',
  'a'.repeat(55), // one SHA-256 block with its padding
  'a'.repeat(56), // padding spills into a second block
  'a'.repeat(64),
  'ü'.repeat(5000), // longer than any audit row
];

describe('SHA-256 on Node', () => {
  afterEach(() => useSha256(nobleSha256Hex));

  test('the known vectors (FIPS 180-2)', () => {
    for (const f of [nobleSha256Hex, nativeSha256Hex]) {
      expect(f('abc')).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
      expect(f('')).toBe('e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855');
    }
  });

  test.each(samples.map((s) => [JSON.stringify(s).slice(0, 40), s]))('native and portable agree on %s', (_, s) => {
    expect(nativeSha256Hex(s)).toBe(nobleSha256Hex(s));
  });

  test('agree on random strings of random code units', () => {
    for (let i = 0; i < 500; i++) {
      const units = Array.from({ length: Math.floor(Math.random() * 300) }, () => Math.floor(Math.random() * 0x10000));
      const s = String.fromCharCode(...units);
      expect(nativeSha256Hex(s)).toBe(nobleSha256Hex(s));
    }
  });

  test('useSha256 puts an implementation behind sha256Hex', () => {
    const seen: string[] = [];
    useSha256((t) => (seen.push(t), nativeSha256Hex(t)));
    expect(sha256Hex('abc')).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
    expect(seen).toEqual(['abc']);
  });
});

describe('base64url on Node', () => {
  afterEach(() => useBase64url(portableBase64url));

  test('native and portable agree on every length from 0 to 64 bytes, random and edge bytes, and on views into a larger buffer', () => {
    for (let n = 0; n <= 64; n++) {
      const random = crypto.getRandomValues(new Uint8Array(n));
      for (const bytes of [random, new Uint8Array(n).fill(0xff), new Uint8Array(n).fill(0xfb), new Uint8Array(n)]) {
        expect(nativeBase64url(bytes)).toBe(portableBase64url(bytes));
      }
      // A view that starts inside its buffer (the id pool hands out copies today; a view must encode alike).
      const pool = crypto.getRandomValues(new Uint8Array(n + 10));
      const view = pool.subarray(3, 3 + n);
      expect(nativeBase64url(view)).toBe(portableBase64url(view));
      expect(nativeBase64url(view)).not.toContain('=');
    }
  });

  test('useBase64url puts an encoder behind ids and API-key tokens', () => {
    const seen: number[] = [];
    useBase64url((b) => (seen.push(b.length), nativeBase64url(b)));
    expect(newId('aud')).toMatch(/^aud_[A-Za-z0-9_-]{22}$/);
    expect(randomToken(32)).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(seen).toEqual([16, 32]);
  });
});

describe('SHA-256 of bytes on Node (the Merkle tree)', () => {
  afterEach(() => useSha256Bytes(nobleSha256Bytes));

  test('native and portable agree on every length 0-200, on views into a larger buffer, and the result is a plain Uint8Array whose slice copies', () => {
    for (let n = 0; n <= 200; n++) {
      const pool = crypto.getRandomValues(new Uint8Array(n + 7));
      for (const data of [pool.subarray(0, n), pool.subarray(7, 7 + n)]) expect(nativeSha256Bytes(data)).toEqual(nobleSha256Bytes(data));
    }
    const d = nativeSha256Bytes(new Uint8Array([1, 2, 3]));
    expect(Object.getPrototypeOf(d)).toBe(Uint8Array.prototype);
    const copy = d.slice();
    copy[0] = (copy[0] as number) ^ 0xff;
    expect(copy[0]).not.toBe(d[0]);
  });

  test('useSha256Bytes puts an implementation behind the Merkle hashes, which give the same nodes either way (RFC 9162 prefixes)', () => {
    const data = new TextEncoder().encode('a leaf');
    const left = leafHash(data);
    const right = leafHash(new Uint8Array(0));
    const portable = interiorHash(left, right);
    const seen: number[] = [];
    useSha256Bytes((b) => (seen.push(b.length), nativeSha256Bytes(b)));
    expect(leafHash(data)).toEqual(left);
    expect(interiorHash(left, right)).toEqual(portable);
    expect(sha256Bytes(new Uint8Array(0))).toEqual(nobleSha256Bytes(new Uint8Array(0)));
    // 0x00 || data, 0x01 || left || right, and the empty input.
    expect(seen).toEqual([1 + data.length, 65, 0]);
  });
});
