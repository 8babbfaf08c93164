/**
 * The Merkle tree of the audit log, exactly as RFC 9162 (Certificate Transparency v2) §2.1 defines
 * it: the tree head a checkpoint signs, the inclusion proof a receipt carries, and the consistency
 * proof between two checkpoints, with the verifiers a client or the offline CLI runs. Pure and
 * I/O-free: hashes of stored nodes come in through a `NodeReader` (in memory here, tiles in
 * ./tiles.ts), so the server and every verifier share this one file. Workers-safe.
 */
import { sha256Bytes } from '../crypto/hash.js';

/** Bytes in every hash of the tree (SHA-256). */
export const HASH_SIZE = 32;

/** The root of the empty tree, MTH({}) = SHA-256() (RFC 9162 §2.1.1). */
export const EMPTY_ROOT: Uint8Array = sha256Bytes(new Uint8Array(0));
// The verifiers compare against their own copy: a caller writing into EMPTY_ROOT must not change them.
const EMPTY = EMPTY_ROOT.slice();

const LEAF_PREFIX = 0x00;
const INTERIOR_PREFIX = 0x01;

/**
 * What went wrong: `out_of_range` (a leaf, size or subtree outside the tree), `bad_hash` (not 32
 * bytes), `tile_missing` / `tile_short` / `bad_tile` (a store that cannot answer; ./tiles.ts).
 */
export type MerkleErrorCode = 'out_of_range' | 'bad_hash' | 'tile_missing' | 'tile_short' | 'bad_tile';

/**
 * The one error this module and ./tiles.ts throw, for a caller's mistake (a leaf beyond the tree)
 * or a store that cannot answer (a missing tile, a hash of the wrong size). Verifiers never throw: they return false.
 */
export class MerkleError extends Error {
  constructor(
    readonly code: MerkleErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'MerkleError';
  }
}

/**
 * The source of stored node hashes a proof is built from.
 *
 * `node(level, index)` is the hash of the perfect subtree of 2^level leaves that starts at leaf
 * `index * 2^level` (level 0: the leaf hash). Callers only ask for subtrees wholly inside the tree.
 */
export interface NodeReader {
  node(level: number, index: number): Promise<Uint8Array>;
}

/** The hash of a leaf: SHA-256(0x00 || data) (RFC 9162 §2.1.1). */
export function leafHash(data: Uint8Array): Uint8Array {
  const input = new Uint8Array(1 + data.length);
  input[0] = LEAF_PREFIX;
  input.set(data, 1);
  return sha256Bytes(input);
}

/** The hash of an interior node: SHA-256(0x01 || left || right) (RFC 9162 §2.1.1). */
export function interiorHash(left: Uint8Array, right: Uint8Array): Uint8Array {
  const input = new Uint8Array(1 + left.length + right.length);
  input[0] = INTERIOR_PREFIX;
  input.set(left, 1);
  input.set(right, 1 + left.length);
  return sha256Bytes(input);
}

/**
 * The root of a perfect subtree from its 2^h bottom hashes, left to right.
 * Throws `MerkleError('out_of_range')` when the count is not a power of two.
 */
export function perfectRoot(hashes: readonly Uint8Array[]): Uint8Array {
  if (!isPowerOfTwo(hashes.length)) throw new MerkleError('out_of_range', 'a perfect subtree has a power-of-two number of hashes');
  let level = hashes;
  while (level.length > 1) level = parents(level);
  return (level[0] as Uint8Array).slice();
}

/** The hash of every pair, left to right: the level above a level of even length. */
function parents(level: readonly Uint8Array[]): Uint8Array[] {
  const up: Uint8Array[] = [];
  for (let i = 0; i + 1 < level.length; i += 2) up.push(interiorHash(level[i] as Uint8Array, level[i + 1] as Uint8Array));
  return up;
}

/**
 * MTH(D[start:start+size]), the RFC 9162 §2.1.1 hash of `size` leaves from leaf `start`.
 *
 * The range is split as the RFC splits it (the largest power of two below n on the left), so it
 * reads only perfect, aligned subtrees: at most one per bit of `size`. `start` must be a multiple of
 * the largest power of two ≤ `size` (every range the RFC's recursion reaches is). Size 0 gives
 * {@link EMPTY_ROOT}.
 */
export async function subtreeRoot(reader: NodeReader, start: number, size: number): Promise<Uint8Array> {
  if (!isCount(start) || !isCount(size)) throw new MerkleError('out_of_range', 'start and size must be non-negative integers');
  if (size === 0) return EMPTY.slice();
  if (start % largestPowerOfTwoAtMost(size) !== 0) throw new MerkleError('out_of_range', 'the range is not aligned as the RFC splits a tree');
  const hashes = await Promise.all(perfectParts(start, size).map((p) => reader.node(p.level, p.index)));
  // A reader is storage: a hash of the wrong size would make a proof no verifier accepts, or worse.
  if (!isHashList(hashes)) throw new MerkleError('bad_hash', 'the node reader returned a hash that is not 32 bytes');
  // MTH(D[n]) = HASH(0x01 || MTH(D[0:k]) || MTH(D[k:n])): the right parts fold first.
  let root = hashes[hashes.length - 1] as Uint8Array;
  for (let i = hashes.length - 2; i >= 0; i--) root = interiorHash(hashes[i] as Uint8Array, root);
  return root;
}

/** The perfect subtrees, left to right, that [start, start+size) splits into. */
function perfectParts(start: number, size: number): { level: number; index: number }[] {
  const parts: { level: number; index: number }[] = [];
  for (let at = start, left = size; left > 0;) {
    const width = largestPowerOfTwoAtMost(left);
    parts.push({ level: log2(width), index: at / width });
    at += width;
    left -= width;
  }
  return parts;
}

/** The tree head of the first `size` leaves (RFC 9162 §2.1.1); {@link EMPTY_ROOT} for size 0. */
export function rootOf(reader: NodeReader, size: number): Promise<Uint8Array> {
  return subtreeRoot(reader, 0, size);
}

/**
 * The inclusion proof PATH(index, D[size]) of RFC 9162 §2.1.3.1, nearest the leaf first.
 * Throws `MerkleError('out_of_range')` unless 0 ≤ index < size.
 */
export async function inclusionProof(reader: NodeReader, index: number, size: number): Promise<Uint8Array[]> {
  if (!isCount(index) || !isCount(size) || index >= size) throw new MerkleError('out_of_range', 'the leaf index must be below the tree size');
  const siblings: Promise<Uint8Array>[] = [];
  for (let start = 0, n = size, m = index; n > 1;) {
    const k = largestPowerOfTwoBelow(n);
    if (m < k) {
      // PATH(m, D[n]) = PATH(m, D[0:k]) : MTH(D[k:n])
      siblings.push(subtreeRoot(reader, start + k, n - k));
      n = k;
    } else {
      // PATH(m, D[n]) = PATH(m - k, D[k:n]) : MTH(D[0:k])
      siblings.push(subtreeRoot(reader, start, k));
      start += k;
      m -= k;
      n -= k;
    }
  }
  return (await Promise.all(siblings)).reverse();
}

/**
 * The consistency proof PROOF(oldSize, D[newSize]) = SUBPROOF(oldSize, D[newSize], true) of
 * RFC 9162 §2.1.4.1. Empty when oldSize is 0 or equals newSize (nothing to prove).
 * Throws `MerkleError('out_of_range')` unless 0 ≤ oldSize ≤ newSize.
 */
export async function consistencyProof(reader: NodeReader, oldSize: number, newSize: number): Promise<Uint8Array[]> {
  if (!isCount(oldSize) || !isCount(newSize) || oldSize > newSize) throw new MerkleError('out_of_range', 'the old size must not exceed the new size');
  if (oldSize === 0 || oldSize === newSize) return [];
  const outer: Promise<Uint8Array>[] = [];
  let start = 0;
  let n = newSize;
  let m = oldSize;
  let whole = true; // the RFC's flag b: is D[start:start+m] an old tree head the verifier holds?
  while (m !== n) {
    const k = largestPowerOfTwoBelow(n);
    if (m <= k) {
      // SUBPROOF(m, D[n], b) = SUBPROOF(m, D[0:k], b) : MTH(D[k:n])
      outer.push(subtreeRoot(reader, start + k, n - k));
      n = k;
    } else {
      // SUBPROOF(m, D[n], b) = SUBPROOF(m - k, D[k:n], false) : MTH(D[0:k])
      outer.push(subtreeRoot(reader, start, k));
      start += k;
      m -= k;
      n -= k;
      whole = false;
    }
  }
  // SUBPROOF(m, D[m], true) = {}; SUBPROOF(m, D[m], false) = {MTH(D[m])}.
  const inner = whole ? [] : [subtreeRoot(reader, start, n)];
  return Promise.all([...inner, ...outer.reverse()]);
}

/**
 * Whether `proof` shows the leaf with hash `leaf` at `index` in the tree of `size` leaves whose
 * head is `root`: the algorithm of RFC 9162 §2.1.3.2, step by step. Never throws: malformed input
 * (an index outside the tree, a hash not 32 bytes, a proof too long or too short) is false.
 */
export function verifyInclusion(leaf: Uint8Array, index: number, size: number, proof: readonly Uint8Array[], root: Uint8Array): boolean {
  try {
    if (!isCount(index) || !isCount(size) || index >= size) return false;
    if (!isHash(leaf) || !isHash(root) || !isHashList(proof)) return false;
    let fn = index;
    let sn = size - 1;
    let r = leaf;
    for (const p of proof) {
      if (sn === 0) return false;
      if (isOdd(fn) || fn === sn) {
        r = interiorHash(p, r);
        while (!isOdd(fn) && fn !== 0) [fn, sn] = [half(fn), half(sn)];
      } else {
        r = interiorHash(r, p);
      }
      [fn, sn] = [half(fn), half(sn)];
    }
    return sn === 0 && bytesEqual(r, root);
  } catch {
    return false; // fail closed, as a verifier must (a hostile proof is not the verifier's crash)
  }
}

/**
 * Whether `proof` shows that the tree of `newSize` leaves with head `newRoot` extends the tree of
 * `oldSize` leaves with head `oldRoot`: RFC 9162 §2.1.4.2 for 0 < oldSize < newSize. Equal sizes
 * need equal heads and an empty proof; oldSize 0 needs the empty tree's head and an empty proof.
 * Never throws: malformed input is false.
 */
export function verifyConsistency(oldSize: number, newSize: number, oldRoot: Uint8Array, newRoot: Uint8Array, proof: readonly Uint8Array[]): boolean {
  try {
    if (!isCount(oldSize) || !isCount(newSize) || oldSize > newSize) return false;
    if (!isHash(oldRoot) || !isHash(newRoot) || !isHashList(proof)) return false;
    if (oldSize === 0 && !bytesEqual(oldRoot, EMPTY)) return false;
    if (oldSize === newSize) return proof.length === 0 && bytesEqual(oldRoot, newRoot);
    if (oldSize === 0) return proof.length === 0;
    return verifyGrowth(oldSize, newSize, oldRoot, newRoot, proof);
  } catch {
    return false;
  }
}

/** RFC 9162 §2.1.4.2 steps 1 to 7, for 0 < first < second and well-formed hashes. */
function verifyGrowth(first: number, second: number, firstHash: Uint8Array, secondHash: Uint8Array, proof: readonly Uint8Array[]): boolean {
  if (proof.length === 0) return false;
  const path = isPowerOfTwo(first) ? [firstHash, ...proof] : proof;
  let fn = first - 1;
  let sn = second - 1;
  while (isOdd(fn)) [fn, sn] = [half(fn), half(sn)];
  let fr = path[0] as Uint8Array;
  let sr = fr;
  for (const c of path.slice(1)) {
    if (sn === 0) return false;
    if (isOdd(fn) || fn === sn) {
      fr = interiorHash(c, fr);
      sr = interiorHash(c, sr);
      while (!isOdd(fn) && fn !== 0) [fn, sn] = [half(fn), half(sn)];
    } else {
      sr = interiorHash(sr, c);
    }
    [fn, sn] = [half(fn), half(sn)];
  }
  return sn === 0 && bytesEqual(fr, firstHash) && bytesEqual(sr, secondHash);
}

/**
 * A {@link NodeReader} over leaf hashes held in memory (tests, small logs). It copies the leaves
 * and hashes every level once, so each `node` call is a lookup. Throws `MerkleError('bad_hash')`
 * for a leaf hash that is not 32 bytes; `node` rejects with `out_of_range` beyond the leaves.
 */
export function memoryReader(leafHashes: readonly Uint8Array[]): NodeReader {
  if (!isHashList(leafHashes)) throw new MerkleError('bad_hash', 'every leaf hash must be 32 bytes');
  const levels: Uint8Array[][] = [leafHashes.map((h) => h.slice())];
  for (let top = levels[0] as Uint8Array[]; top.length > 1;) {
    top = parents(top);
    levels.push(top);
  }
  return {
    node: async (level: number, index: number): Promise<Uint8Array> => {
      const hash = Number.isInteger(level) && Number.isInteger(index) ? levels[level]?.[index] : undefined;
      if (hash === undefined) throw new MerkleError('out_of_range', `no perfect subtree at level ${level}, index ${index}`);
      return hash.slice();
    },
  };
}

/** Whether two byte strings are equal. Time depends on content, which is fine: hashes are public. */
export function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** A leaf count or index: a safe non-negative integer. */
export function isCount(n: unknown): n is number {
  return typeof n === 'number' && Number.isSafeInteger(n) && n >= 0;
}

function isHash(h: unknown): h is Uint8Array {
  return h instanceof Uint8Array && h.length === HASH_SIZE;
}

function isHashList(list: unknown): list is readonly Uint8Array[] {
  if (!Array.isArray(list)) return false;
  // Indexed, not .every: .every skips the holes of a sparse array, which would then read as undefined.
  for (let i = 0; i < list.length; i++) if (!isHash(list[i])) return false;
  return true;
}

// Sizes may pass 2^32, where JS bitwise operators wrap: halving and parity use plain arithmetic.
const half = (n: number): number => Math.floor(n / 2);
const isOdd = (n: number): boolean => n % 2 === 1;

function isPowerOfTwo(n: number): boolean {
  return n >= 1 && largestPowerOfTwoAtMost(n) === n;
}

/** The largest power of two ≤ n, for n ≥ 1. */
function largestPowerOfTwoAtMost(n: number): number {
  let k = 1;
  while (k * 2 <= n) k *= 2;
  return k;
}

/** The RFC's k: the largest power of two < n, for n ≥ 2. */
function largestPowerOfTwoBelow(n: number): number {
  let k = 1;
  while (k * 2 < n) k *= 2;
  return k;
}

/** log2 of a power of two. */
function log2(powerOfTwo: number): number {
  let level = 0;
  for (let w = powerOfTwo; w > 1; w /= 2) level++;
  return level;
}
