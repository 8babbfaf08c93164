/**
 * SHA-256 from node:crypto (OpenSSL), for `useSha256` (src/crypto/hash.ts): the same digests as the
 * portable @noble/hashes one (test/crypto/native-hash.test.ts), faster (`npm run bench:core` prints
 * sealing an audit row with each). Node only; the Workers build keeps @noble/hashes. Likewise
 * base64url from Buffer for `useBase64url` (ids and API keys), the same text as jose's.
 */
import { Buffer } from 'node:buffer';
import { hash } from 'node:crypto';
import { useBase64url, useSha256, useSha256Bytes, type Base64url, type Sha256Bytes, type Sha256Hex } from '../crypto/hash.js';

// crypto.hash (Node 20.12+): one call, no Hash object; half createHash's time on a row-sized string.
export const nativeSha256Hex: Sha256Hex = (text) => hash('sha256', text, 'hex');

/** SHA-256 of bytes, as a plain Uint8Array view of node:crypto's Buffer (its `slice` copies, as callers expect). */
export const nativeSha256Bytes: Sha256Bytes = (data) => {
  const digest = hash('sha256', data, 'buffer');
  return new Uint8Array(digest.buffer, digest.byteOffset, digest.byteLength);
};

/** Makes every SHA-256 of this process's core use node:crypto: strings (row hashes, keys) and bytes (the Merkle tree). */
export function useNativeSha256(): void {
  useSha256(nativeSha256Hex);
  useSha256Bytes(nativeSha256Bytes);
}

export const nativeBase64url: Base64url = (bytes) => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64url');

/** Makes every id and API key of this process encode with Buffer. */
export function useNativeBase64url(): void {
  useBase64url(nativeBase64url);
}
