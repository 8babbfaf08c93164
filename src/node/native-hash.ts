/**
 * SHA-256 from node:crypto (OpenSSL), for `useSha256` (src/crypto/hash.ts): the same digests as the
 * portable @noble/hashes one (test/crypto/native-hash.test.ts), faster (`npm run bench:core` prints
 * sealing an audit row with each). Node only; the Workers build keeps @noble/hashes. Likewise
 * base64url from Buffer for `useBase64url` (ids and API keys), the same text as jose's.
 */
import { Buffer } from 'node:buffer';
import { createHash } from 'node:crypto';
import { useBase64url, useSha256, type Base64url, type Sha256Hex } from '../crypto/hash.js';

export const nativeSha256Hex: Sha256Hex = (text) => createHash('sha256').update(text, 'utf8').digest('hex');

/** Makes every SHA-256 of this process's core use node:crypto. */
export function useNativeSha256(): void {
  useSha256(nativeSha256Hex);
}

export const nativeBase64url: Base64url = (bytes) => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64url');

/** Makes every id and API key of this process encode with Buffer. */
export function useNativeBase64url(): void {
  useBase64url(nativeBase64url);
}
