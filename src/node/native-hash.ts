/**
 * SHA-256 from node:crypto (OpenSSL), for `useSha256` (src/crypto/hash.ts): the same digests as the
 * portable @noble/hashes one (test/crypto/native-hash.test.ts), faster (`npm run bench:core` prints
 * sealing an audit row with each). Node only; the Workers build keeps @noble/hashes.
 */
import { createHash } from 'node:crypto';
import { useSha256, type Sha256Hex } from '../crypto/hash.js';

export const nativeSha256Hex: Sha256Hex = (text) => createHash('sha256').update(text, 'utf8').digest('hex');

/** Makes every SHA-256 of this process's core use node:crypto. */
export function useNativeSha256(): void {
  useSha256(nativeSha256Hex);
}
