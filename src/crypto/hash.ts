/**
 * SHA-256 (@noble/hashes), RFC 8785 canonical JSON (canonicalize) and the small byte helpers the
 * ids, idempotency keys and audit chain are built from. Workers-safe: Web Crypto randomness only.
 */
import { sha256 } from '@noble/hashes/sha2.js';
import { bytesToHex, hexToBytes, utf8ToBytes } from '@noble/hashes/utils.js';
import canonicalize from 'canonicalize';
import { base64url } from 'jose';

/** RFC 8785 (JCS) canonical JSON text of a JSON value. */
export function canonicalJson(value: unknown): string {
  const text = canonicalize(value);
  if (text === undefined) throw new TypeError('value has no JSON form');
  return text;
}

/** Lower-case hex SHA-256 of a string's UTF-8 bytes (lone surrogates as U+FFFD, as TextEncoder does). */
export type Sha256Hex = (text: string) => string;

/** The portable SHA-256 (@noble/hashes): what Workers and the tests' reference use. */
export const nobleSha256Hex: Sha256Hex = (text) => bytesToHex(sha256(utf8ToBytes(text)));

let sha256Impl: Sha256Hex = nobleSha256Hex;

/**
 * Replaces the SHA-256 behind `sha256Hex` (and so every audit row's hash, idempotency and API-key
 * hash) with one that gives the same digests faster: on Node, node:crypto's native one (src/node/
 * native-hash.ts; `npm run bench:core` prints sealing an audit row with each). Called once at start-up.
 */
export function useSha256(impl: Sha256Hex): void {
  sha256Impl = impl;
}

/** Lower-case hex SHA-256 of a UTF-8 string. */
export function sha256Hex(text: string): string {
  return sha256Impl(text);
}

/** SHA-256 of bytes (the audit Merkle tree's nodes). */
export type Sha256Bytes = (data: Uint8Array) => Uint8Array;

export const nobleSha256Bytes: Sha256Bytes = (data) => sha256(data);

let sha256BytesImpl: Sha256Bytes = nobleSha256Bytes;

/** As `useSha256`, for `sha256Bytes`: node:crypto's on Node, ~1.7 against ~2.5 µs a Merkle node (`npm run bench:core`). */
export function useSha256Bytes(impl: Sha256Bytes): void {
  sha256BytesImpl = impl;
}

/** SHA-256 of bytes. */
export function sha256Bytes(data: Uint8Array): Uint8Array {
  return sha256BytesImpl(data);
}

/** Lower-case hex SHA-256 of the canonical JSON of a value. */
export function hashJson(value: unknown): string {
  return sha256Hex(canonicalJson(value));
}

/** Compares two strings in time that depends only on their lengths (for secrets' hashes). */
export function constantTimeEqual(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

// Random bytes are drawn from Web Crypto 4 KiB at a time and each byte is handed out once: one
// getRandomValues call per id cost more than the rest of an approval's id work (bench/RESULTS.md).
const POOL_SIZE = 4096;
let pool = new Uint8Array(0);
let used = 0;

function randomBytes(n: number): Uint8Array {
  if (n > POOL_SIZE) return crypto.getRandomValues(new Uint8Array(n));
  if (used + n > pool.length) {
    pool = crypto.getRandomValues(new Uint8Array(POOL_SIZE));
    used = 0;
  }
  const out = pool.slice(used, used + n);
  used += n;
  return out;
}

/** Bytes as base64url without padding. */
export type Base64url = (bytes: Uint8Array) => string;

/** jose's: what Workers use. */
export const portableBase64url: Base64url = (bytes) => base64url.encode(bytes);

let base64urlImpl: Base64url = portableBase64url;

/**
 * Replaces the encoder behind `randomToken` (every id and API key) with one that gives the same text
 * faster: on Node, Buffer's (src/node/native-hash.ts). jose's went through btoa and cost ~3.6 µs an
 * id, two ids an approval (bench/RESULTS.md). Called once at start-up.
 */
export function useBase64url(impl: Base64url): void {
  base64urlImpl = impl;
}

/** `n` random bytes as base64url without padding. */
export function randomToken(n: number): string {
  return base64urlImpl(randomBytes(n));
}

/** A fresh opaque id with a type prefix, e.g. `cap_…` (128 random bits). */
export function newId(prefix: string): string {
  return `${prefix}_${randomToken(16)}`;
}

/** Bytes of a lower-case hex string, or null when it is not one (never throws: input may be hostile). */
export function fromHex(hex: string): Uint8Array | null {
  if (hex.length % 2 !== 0 || !/^[0-9a-f]*$/.test(hex)) return null;
  return hexToBytes(hex);
}
