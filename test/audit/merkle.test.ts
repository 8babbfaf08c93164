/**
 * The RFC 9162 Merkle tree (src/audit/merkle.ts): the published vectors of the reference 8-leaf tree
 * (roots, node hashes, inclusion and consistency proofs, and the corruptions that must fail), then
 * properties against an independent naive implementation of the RFC's recursive definitions on
 * node:crypto, which shares no code with the module under test.
 */
import { createHash } from 'node:crypto';
import { bytesToHex, hexToBytes } from '@noble/hashes/utils.js';
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import {
  EMPTY_ROOT,
  MerkleError,
  type NodeReader,
  consistencyProof,
  inclusionProof,
  interiorHash,
  leafHash,
  memoryReader,
  perfectRoot,
  rootOf,
  subtreeRoot,
  verifyConsistency,
  verifyInclusion,
} from '../../src/audit/merkle.js';

// ---- The independent reference: RFC 9162 §2.1 as written, recursion and all. ----

const sha = (...parts: Uint8Array[]): Uint8Array => {
  const h = createHash('sha256');
  for (const p of parts) h.update(p);
  return new Uint8Array(h.digest());
};
const naiveLeaf = (data: Uint8Array): Uint8Array => sha(Uint8Array.of(0), data);
const naiveNode = (l: Uint8Array, r: Uint8Array): Uint8Array => sha(Uint8Array.of(1), l, r);
const splitOf = (n: number): number => 2 ** Math.ceil(Math.log2(n) - 1); // largest power of two < n, n ≥ 2

/** MTH over leaf hashes D (already leaf-hashed). */
function naiveMth(d: readonly Uint8Array[]): Uint8Array {
  if (d.length === 0) return sha();
  if (d.length === 1) return d[0]!;
  const k = splitOf(d.length);
  return naiveNode(naiveMth(d.slice(0, k)), naiveMth(d.slice(k)));
}

function naivePath(m: number, d: readonly Uint8Array[]): Uint8Array[] {
  if (d.length <= 1) return [];
  const k = splitOf(d.length);
  return m < k ? [...naivePath(m, d.slice(0, k)), naiveMth(d.slice(k))] : [...naivePath(m - k, d.slice(k)), naiveMth(d.slice(0, k))];
}

function naiveSubproof(m: number, d: readonly Uint8Array[], b: boolean): Uint8Array[] {
  if (m === d.length) return b ? [] : [naiveMth(d)];
  const k = splitOf(d.length);
  return m <= k ? [...naiveSubproof(m, d.slice(0, k), b), naiveMth(d.slice(k))] : [...naiveSubproof(m - k, d.slice(k), false), naiveMth(d.slice(0, k))];
}
const naiveConsistency = (m: number, d: readonly Uint8Array[]): Uint8Array[] => (m === 0 ? [] : naiveSubproof(m, d, true));

// ---- Helpers. ----

const hx = (h: Uint8Array): string => bytesToHex(h);
const hexes = (list: readonly Uint8Array[]): string[] => list.map(hx);
const sameList = (a: readonly Uint8Array[], b: readonly Uint8Array[]): boolean => hexes(a).join() === hexes(b).join();
const flipBit = (h: Uint8Array, bit: number): Uint8Array => {
  const out = h.slice();
  out[Math.floor(bit / 8) % out.length]! ^= 1 << (bit % 8);
  return out;
};
// Array#with and #toSpliced are ES2023; the project's lib is ES2022.
const replaceAt = <T>(list: readonly T[], at: number, value: T): T[] => list.map((v, i) => (i === at ? value : v));
const removeAt = <T>(list: readonly T[], at: number): T[] => list.filter((_, i) => i !== at);
/** Distinct leaves (the index, big-endian), so no two subtrees share a hash. */
const distinctLeaves = (n: number): Uint8Array[] =>
  Array.from({ length: n }, (_, i) => naiveLeaf(Uint8Array.of(i >>> 24, (i >>> 16) & 255, (i >>> 8) & 255, i & 255)));

/** A reader that records every call and fails the test on any subtree not perfect and inside `size`. */
function auditedReader(inner: NodeReader, size: number): NodeReader & { calls: number } {
  const reader = {
    calls: 0,
    node: (level: number, index: number): Promise<Uint8Array> => {
      reader.calls++;
      expect(Number.isInteger(level) && Number.isInteger(index) && level >= 0 && index >= 0).toBe(true);
      expect((index + 1) * 2 ** level).toBeLessThanOrEqual(size);
      return inner.node(level, index);
    },
  };
  return reader;
}

// ---- Published vectors. ----
// Leaves, node hashes and roots: transparency-dev/merkle, testonly/constants.go (LeafInputs,
// NodeHashes, RootHashes). Proofs and the corruptions that must fail: proof/verify_test.go
// (inclusionProofs, consistencyProofs, corruptInclusionProof, corruptConsistencyProof). The named
// node paths: proof/proof_test.go (TestInclusion, TestConsistency), whose node ids are resolved
// against NodeHashes. The same tree is RFC 6962's example, used by certificate-transparency-go.

const LEAVES = ['', '00', '10', '2021', '3031', '40414243', '5051525354555657', '606162636465666768696a6b6c6d6e6f'].map((h) => hexToBytes(h));
const NODE_HASHES = [
  [
    '6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d',
    '96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7',
    '0298d122906dcfc10892cb53a73992fc5b9f493ea4c9badb27b791b4127a7fe7',
    '07506a85fd9dd2f120eb694f86011e5bb4662e5c415a62917033d4a9624487e7',
    'bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b',
    '4271a26be0d8a84f0bd54c8c302e7cb3a3b5d1fa6780a40bcce2873477dab658',
    'b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f',
    '46f6ffadd3d06a09ff3c5860d2755c8b9819db7df44251788c7d8e3180de8eb1',
  ],
  [
    'fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125',
    '5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e',
    '0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a',
    'ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0',
  ],
  ['d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7', '6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4'],
  ['5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328'],
];
/** ROOTS[n] is the root of the first n leaves. */
const ROOTS = [
  'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
  '6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d',
  'fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125',
  'aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77',
  'd37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7',
  '4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4',
  '76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef',
  'ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c',
  '5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328',
];
// verify_test.go numbers leaves from 1; these indexes are 0-based.
const INCLUSION: [index: number, size: number, proof: string[]][] = [
  [0, 1, []],
  [
    0,
    8,
    [
      '96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7',
      '5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e',
      '6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4',
    ],
  ],
  [
    5,
    8,
    [
      'bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b',
      'ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0',
      'd37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7',
    ],
  ],
  [2, 3, ['fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125']],
  [
    1,
    5,
    [
      '6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d',
      '5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e',
      'bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b',
    ],
  ],
];
const CONSISTENCY: [oldSize: number, newSize: number, proof: string[]][] = [
  [1, 1, []],
  [
    1,
    8,
    [
      '96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7',
      '5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e',
      '6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4',
    ],
  ],
  [
    6,
    8,
    [
      '0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a',
      'ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0',
      'd37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7',
    ],
  ],
  [2, 5, ['5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e', 'bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b']],
  [
    6,
    7,
    [
      '0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a',
      'b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f',
      'd37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7',
    ],
  ],
];

// proof_test.go's picture: leaves a b c d e f j (and x, the 8th), level 1 g h i (y), level 2 k (l8).
// In the 7-leaf tree the right half l7 = HASH(i, j) is no stored node: computed here by the reference.
const nh = (level: number, index: number): Uint8Array => hexToBytes(NODE_HASHES[level]![index]!);
const NAMED: Record<string, Uint8Array> = {
  a: nh(0, 0),
  b: nh(0, 1),
  c: nh(0, 2),
  d: nh(0, 3),
  e: nh(0, 4),
  f: nh(0, 5),
  j: nh(0, 6),
  x: nh(0, 7),
  g: nh(1, 0),
  h: nh(1, 1),
  i: nh(1, 2),
  y: nh(1, 3),
  k: nh(2, 0),
  l8: nh(2, 1),
  l7: naiveNode(nh(1, 2), nh(0, 6)),
};
const NAMED_INCLUSION: [size: number, index: number, names: string[]][] = [
  [1, 0, []],
  [2, 0, ['b']],
  [2, 1, ['a']],
  [3, 1, ['a', 'c']],
  [7, 0, ['b', 'h', 'l7']],
  [7, 1, ['a', 'h', 'l7']],
  [7, 2, ['d', 'g', 'l7']],
  [7, 3, ['c', 'g', 'l7']],
  [7, 4, ['f', 'j', 'k']],
  [7, 5, ['e', 'j', 'k']],
  [7, 6, ['i', 'k']],
  [4, 2, ['d', 'g']],
  [5, 3, ['c', 'g', 'e']],
  [6, 3, ['c', 'g', 'i']],
  [6, 4, ['f', 'k']],
];
const NAMED_CONSISTENCY: [oldSize: number, newSize: number, names: string[]][] = [
  [1, 2, ['b']],
  [1, 4, ['b', 'h']],
  [1, 6, ['b', 'h', 'i']],
  [2, 3, ['c']],
  [2, 8, ['h', 'l8']],
  [3, 7, ['c', 'd', 'g', 'l7']],
  [4, 7, ['l7']],
  [5, 7, ['e', 'f', 'j', 'k']],
  [6, 7, ['i', 'j', 'k']],
  [7, 8, ['j', 'x', 'i', 'k']],
  [2, 4, ['h']],
  [3, 5, ['c', 'd', 'g', 'e']],
  [3, 6, ['c', 'd', 'g', 'i']],
  [4, 6, ['i']],
  [1, 7, ['b', 'h', 'l7']],
  [1, 1, []],
  [2, 2, []],
  [3, 3, []],
  [4, 4, []],
  [5, 5, []],
  [7, 7, []],
  [8, 8, []],
];

const REFERENCE = memoryReader(LEAVES.map(leafHash));
const root = (n: number): Uint8Array => hexToBytes(ROOTS[n]!);
const SOME_HASH = hexToBytes('abacaba000000000000000000000000000000000000000000060061e00123456');

describe('the reference tree of transparency-dev/merkle', () => {
  test('leaf and node hashes', async () => {
    expect(LEAVES.map((l) => hx(leafHash(l)))).toEqual(NODE_HASHES[0]);
    for (const [level, row] of NODE_HASHES.entries()) for (const [index, h] of row.entries()) expect(hx(await REFERENCE.node(level, index))).toBe(h);
    expect(hx(interiorHash(nh(0, 0), nh(0, 1)))).toBe(NODE_HASHES[1]![0]);
    expect(hx(perfectRoot([0, 1, 2, 3].map((i) => nh(0, i))))).toBe(NODE_HASHES[2]![0]);
  });

  test.each(ROOTS.map((h, n) => [n, h] as const))('root of %i leaves', async (n, h) => {
    expect(hx(await rootOf(REFERENCE, n))).toBe(h);
    expect(hx(await rootOf(memoryReader(LEAVES.slice(0, n).map(leafHash)), n))).toBe(h);
  });

  test('the empty root is SHA-256 of nothing', () => {
    expect(hx(EMPTY_ROOT)).toBe(ROOTS[0]);
  });

  test.each(INCLUSION)('inclusion proof of leaf %i in %i leaves', async (index, size, proof) => {
    expect(hexes(await inclusionProof(REFERENCE, index, size))).toEqual(proof);
    expect(verifyInclusion(leafHash(LEAVES[index]!), index, size, proof.map(hexToBytes), root(size))).toBe(true);
  });

  test.each(CONSISTENCY)('consistency proof from %i to %i leaves', async (oldSize, newSize, proof) => {
    expect(hexes(await consistencyProof(REFERENCE, oldSize, newSize))).toEqual(proof);
    expect(verifyConsistency(oldSize, newSize, root(oldSize), root(newSize), proof.map(hexToBytes))).toBe(true);
  });

  test.each(NAMED_INCLUSION)('inclusion in %i leaves of leaf %i is %j', async (size, index, names) => {
    const proof = names.map((n) => NAMED[n]!);
    expect(hexes(await inclusionProof(REFERENCE, index, size))).toEqual(hexes(proof));
    expect(verifyInclusion(leafHash(LEAVES[index]!), index, size, proof, root(size))).toBe(true);
  });

  test.each(NAMED_CONSISTENCY)('consistency from %i to %i leaves is %j', async (oldSize, newSize, names) => {
    const proof = names.map((n) => NAMED[n]!);
    expect(hexes(await consistencyProof(REFERENCE, oldSize, newSize))).toEqual(hexes(proof));
    expect(verifyConsistency(oldSize, newSize, root(oldSize), root(newSize), proof)).toBe(true);
  });
});

describe('corrupted proofs fail (verify_test.go probes)', () => {
  const inclusionProbes = (index: number, size: number, proof: Uint8Array[], rt: Uint8Array, leaf: Uint8Array): [string, () => boolean][] => [
    ['index - 1', () => verifyInclusion(leaf, index - 1, size, proof, rt)],
    ['index + 1', () => verifyInclusion(leaf, index + 1, size, proof, rt)],
    ['index ^ 2', () => verifyInclusion(leaf, index ^ 2, size, proof, rt)],
    ['size * 2', () => verifyInclusion(leaf, index, size * 2, proof, rt)],
    ['size / 2', () => verifyInclusion(leaf, index, Math.floor(size / 2), proof, rt)],
    ['wrong leaf', () => verifyInclusion(new TextEncoder().encode('WrongLeaf'), index, size, proof, rt)],
    ['wrong leaf hash', () => verifyInclusion(SOME_HASH, index, size, proof, rt)],
    ['empty root', () => verifyInclusion(leaf, index, size, proof, EMPTY_ROOT)],
    ['random root', () => verifyInclusion(leaf, index, size, proof, SOME_HASH)],
    ['trailing garbage', () => verifyInclusion(leaf, index, size, [...proof, new Uint8Array(0)], rt)],
    ['trailing root', () => verifyInclusion(leaf, index, size, [...proof, rt], rt)],
    ['preceding garbage', () => verifyInclusion(leaf, index, size, [new Uint8Array(0), ...proof], rt)],
    ['preceding root', () => verifyInclusion(leaf, index, size, [rt, ...proof], rt)],
    ...proof.map((_, i): [string, () => boolean] => [
      `proof[${i}] bit 3`,
      () => verifyInclusion(leaf, index, size, replaceAt(proof, i, flipBit(proof[i]!, 3)), rt),
    ]),
    ...(proof.length > 0 ? [['removed component', () => verifyInclusion(leaf, index, size, proof.slice(0, -1), rt)] as [string, () => boolean]] : []),
    ...(proof.length > 1
      ? [['inserted component', () => verifyInclusion(leaf, index, size, [proof[0]!, SOME_HASH, ...proof.slice(1)], rt)] as [string, () => boolean]]
      : []),
  ];

  test.each(INCLUSION)('inclusion of leaf %i in %i leaves', (index, size, hexProof) => {
    const probes = inclusionProbes(index, size, hexProof.map(hexToBytes), root(size), leafHash(LEAVES[index]!));
    expect(probes.filter(([, run]) => run()).map(([name]) => name)).toEqual([]);
  });

  const consistencyProbes = (m: number, n: number, r1: Uint8Array, r2: Uint8Array, proof: Uint8Array[]): [string, () => boolean][] => [
    ['size1 - 1', () => verifyConsistency(m - 1, n, r1, r2, proof)],
    ['size1 + 1', () => verifyConsistency(m + 1, n, r1, r2, proof)],
    ['size1 ^ 2', () => verifyConsistency(m ^ 2, n, r1, r2, proof)],
    ['size2 * 2', () => verifyConsistency(m, n * 2, r1, r2, proof)],
    ['size2 / 2', () => verifyConsistency(m, Math.floor(n / 2), r1, r2, proof)],
    ['wrong root1', () => verifyConsistency(m, n, SOME_HASH, r2, proof)],
    ['wrong root2', () => verifyConsistency(m, n, r1, SOME_HASH, proof)],
    ['short root1', () => verifyConsistency(m, n, new TextEncoder().encode('WrongRoot'), r2, proof)],
    ['swapped roots', () => verifyConsistency(m, n, r2, r1, proof)],
    ['empty proof', () => verifyConsistency(m, n, r1, r2, [])],
    ['trailing garbage', () => verifyConsistency(m, n, r1, r2, [...proof, new Uint8Array(0)])],
    ['trailing root1', () => verifyConsistency(m, n, r1, r2, [...proof, r1])],
    ['trailing root2', () => verifyConsistency(m, n, r1, r2, [...proof, r2])],
    ['preceding garbage', () => verifyConsistency(m, n, r1, r2, [new Uint8Array(0), ...proof])],
    ['preceding root1', () => verifyConsistency(m, n, r1, r2, [r1, ...proof])],
    ['preceding root2', () => verifyConsistency(m, n, r1, r2, [r2, ...proof])],
    ['preceding proof[0]', () => verifyConsistency(m, n, r1, r2, [proof[0]!, ...proof])],
    ['truncated proof', () => verifyConsistency(m, n, r1, r2, proof.slice(0, -1))],
    ...proof.map((_, i): [string, () => boolean] => [`proof[${i}] bit 4`, () => verifyConsistency(m, n, r1, r2, replaceAt(proof, i, flipBit(proof[i]!, 4)))]),
  ];

  test.each(CONSISTENCY.filter(([, , p]) => p.length > 0))('consistency from %i to %i leaves', (m, n, hexProof) => {
    const probes = consistencyProbes(m, n, root(m), root(n), hexProof.map(hexToBytes));
    expect(probes.filter(([, run]) => run()).map(([name]) => name)).toEqual([]);
  });
});

describe('edge cases of the verifiers', () => {
  const r1 = SOME_HASH;
  const r2 = flipBit(SOME_HASH, 9);
  test.each<[string, boolean, () => boolean]>([
    ['0 → 0, empty roots, empty proof', true, () => verifyConsistency(0, 0, EMPTY_ROOT, EMPTY_ROOT, [])],
    ['0 → 1, empty proof', true, () => verifyConsistency(0, 1, EMPTY_ROOT, root(1), [])],
    ['0 → 8, empty proof', true, () => verifyConsistency(0, 8, EMPTY_ROOT, root(8), [])],
    ['1 → 1, equal roots', true, () => verifyConsistency(1, 1, r1, r1, [])],
    ['0 → 1 with a proof', false, () => verifyConsistency(0, 1, EMPTY_ROOT, root(1), [EMPTY_ROOT])],
    ['0 → 0 with a proof', false, () => verifyConsistency(0, 0, EMPTY_ROOT, EMPTY_ROOT, [EMPTY_ROOT])],
    ['0 → 1, old root not the empty tree', false, () => verifyConsistency(0, 1, r1, root(1), [])],
    ['1 → 1, roots differ', false, () => verifyConsistency(1, 1, r1, r2, [])],
    ['1 → 1, equal roots, a proof', false, () => verifyConsistency(1, 1, r1, r1, [r1])],
    ['1 → 0, back in time', false, () => verifyConsistency(1, 0, r1, r2, [])],
    ['2 → 1, back in time', false, () => verifyConsistency(2, 1, r1, r2, [])],
    ['1 → 2, empty proof', false, () => verifyConsistency(1, 2, root(1), root(2), [])],
    ['a fractional size', false, () => verifyConsistency(1.5, 8, root(1), root(8), [])],
    ['a negative size', false, () => verifyConsistency(-1, 8, root(1), root(8), [])],
    ['a size beyond 2^53', false, () => verifyConsistency(1, 2 ** 60, root(1), root(8), [nh(0, 1)])],
    ['NaN', false, () => verifyConsistency(NaN, 8, root(1), root(8), [])],
    ['inclusion in an empty tree', false, () => verifyInclusion(SOME_HASH, 0, 0, [], EMPTY_ROOT)],
    ['inclusion at index = size', false, () => verifyInclusion(SOME_HASH, 1, 1, [], SOME_HASH)],
    ['inclusion at index > size', false, () => verifyInclusion(SOME_HASH, 2, 1, [], SOME_HASH)],
    ['inclusion in a 1-leaf tree', true, () => verifyInclusion(SOME_HASH, 0, 1, [], SOME_HASH)],
    ['1-leaf tree, empty leaf hash', false, () => verifyInclusion(new Uint8Array(0), 0, 1, [], SOME_HASH)],
    ['1-leaf tree, empty root', false, () => verifyInclusion(SOME_HASH, 0, 1, [], new Uint8Array(0))],
    ['1-leaf tree, both empty', false, () => verifyInclusion(new Uint8Array(0), 0, 1, [], new Uint8Array(0))],
    ['a 33-byte proof element', false, () => verifyInclusion(leafHash(LEAVES[2]!), 2, 3, [new Uint8Array([...root(2), 0])], root(3))],
  ])('%s → %s', (_name, expected, run) => {
    expect(run()).toBe(expected);
  });

  test('never throw on any input', () => {
    const anything = fc.anything({ withTypedArray: true, withBigInt: true, withNullPrototype: true });
    fc.assert(
      fc.property(anything, anything, anything, anything, anything, (a, b, c, d, e) => {
        // Deliberately untyped: a hostile caller or a decoded JSON proof can hand over anything.
        const loose = { verifyInclusion, verifyConsistency } as unknown as Record<string, (...args: unknown[]) => unknown>;
        expect(loose.verifyInclusion!(a, b, c, d, e)).toBe(false);
        expect(loose.verifyConsistency!(a, b, c, d, e)).toBe(false);
        expect(loose.verifyInclusion!(SOME_HASH, 0, 1, a, SOME_HASH)).toBe(Array.isArray(a) && a.length === 0);
      }),
    );
  });
});

describe('builders refuse what is not a tree', () => {
  const codeOf = async (p: Promise<unknown>): Promise<unknown> =>
    p.then(
      () => 'resolved',
      (e: unknown) => (e instanceof MerkleError ? e.code : e),
    );
  test.each<[string, () => Promise<unknown>, string]>([
    ['inclusion at index = size', () => inclusionProof(REFERENCE, 8, 8), 'out_of_range'],
    ['inclusion in an empty tree', () => inclusionProof(REFERENCE, 0, 0), 'out_of_range'],
    ['inclusion at a negative index', () => inclusionProof(REFERENCE, -1, 8), 'out_of_range'],
    ['consistency back in time', () => consistencyProof(REFERENCE, 5, 4), 'out_of_range'],
    ['a range not aligned', () => subtreeRoot(REFERENCE, 1, 2), 'out_of_range'],
    ['a root beyond the leaves', () => rootOf(REFERENCE, 9), 'out_of_range'],
    ['a node beyond the leaves', () => REFERENCE.node(3, 1), 'out_of_range'],
    ['a fractional node index', () => REFERENCE.node(0, 0.5), 'out_of_range'],
    ['a reader that returns a short hash', () => inclusionProof({ node: async () => new Uint8Array(31) }, 0, 2), 'bad_hash'],
  ])('%s', async (_name, run, code) => {
    expect(await codeOf(run())).toBe(code);
  });

  test('memoryReader refuses a hash that is not 32 bytes', () => {
    expect(() => memoryReader([new Uint8Array(31)])).toThrow(MerkleError);
    expect(() => perfectRoot([SOME_HASH, SOME_HASH, SOME_HASH])).toThrow(MerkleError);
  });

  test('subtreeRoot of an aligned range that is no node', async () => {
    // [4, 9) splits into [4, 8) and [8, 9): MTH of those five leaves, as the RFC defines it.
    const leaves = distinctLeaves(9);
    expect(hx(await subtreeRoot(memoryReader(leaves), 4, 5))).toBe(hx(naiveMth(leaves.slice(4, 9))));
  });
});

describe('properties against the naive reference', () => {
  const sizeAndIndex = fc.integer({ min: 1, max: 300 }).chain((size) => fc.tuple(fc.constant(size), fc.nat(size - 1), fc.integer({ min: size, max: 320 })));

  test('roots equal the naive MTH, reading O(log n) perfect subtrees', async () => {
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 0, max: 300 }), fc.integer({ min: 0, max: 20 }), async (size, extra) => {
        const leaves = distinctLeaves(size + extra);
        const reader = auditedReader(memoryReader(leaves), size);
        expect(hx(await rootOf(reader, size))).toBe(hx(naiveMth(leaves.slice(0, size))));
        expect(reader.calls).toBeLessThanOrEqual(Math.max(1, Math.ceil(Math.log2(size + 1))));
      }),
    );
  });

  test('inclusion proofs equal PATH, verify, and every mutation fails', async () => {
    await fc.assert(
      fc.asyncProperty(sizeAndIndex, fc.nat(), fc.nat(), async ([size, index, stored], pick, bit) => {
        const leaves = distinctLeaves(stored);
        const tree = leaves.slice(0, size);
        const reader = auditedReader(memoryReader(leaves), size);
        const proof = await inclusionProof(reader, index, size);
        expect(hexes(proof)).toEqual(hexes(naivePath(index, tree)));
        expect(proof.length).toBeLessThanOrEqual(Math.ceil(Math.log2(size)));
        expect(reader.calls).toBeLessThanOrEqual(2 * Math.ceil(Math.log2(size)) + 1);
        const rt = naiveMth(tree);
        const leaf = leaves[index]!;
        expect(verifyInclusion(leaf, index, size, proof, rt)).toBe(true);

        expect(verifyInclusion(flipBit(leaf, bit % 256), index, size, proof, rt)).toBe(false);
        expect(verifyInclusion(leaf, index, size, proof, flipBit(rt, bit % 256))).toBe(false);
        expect(verifyInclusion(leaf, index, size, [...proof, proof[pick % Math.max(1, proof.length)] ?? rt], rt)).toBe(false);
        expect(verifyInclusion(leaf, index, size, [rt, ...proof], rt)).toBe(false);
        if (proof.length > 0) {
          const at = pick % proof.length;
          expect(verifyInclusion(leaf, index, size, replaceAt(proof, at, flipBit(proof[at]!, bit % 256)), rt)).toBe(false);
          expect(verifyInclusion(leaf, index, size, removeAt(proof, at), rt)).toBe(false);
        }
        const otherIndex = (index + 1 + (pick % size)) % size;
        expect(verifyInclusion(leaf, otherIndex, size, proof, rt)).toBe(otherIndex === index);
        // Another size with that size's true root passes only if the proof is that size's PATH too.
        const otherSize = 1 + index + (pick % (stored - index));
        const honest = sameList(proof, naivePath(index, leaves.slice(0, otherSize)));
        expect(verifyInclusion(leaf, index, otherSize, proof, naiveMth(leaves.slice(0, otherSize)))).toBe(honest);
        expect(verifyInclusion(leaf, index + size, size, proof, rt)).toBe(false);
      }),
    );
  });

  test('consistency proofs equal PROOF, verify, and every mutation fails', async () => {
    const sizes = fc.integer({ min: 0, max: 300 }).chain((n) => fc.tuple(fc.nat(n), fc.constant(n)));
    await fc.assert(
      fc.asyncProperty(sizes, fc.nat(), fc.nat(), async ([m, n], pick, bit) => {
        const leaves = distinctLeaves(n);
        const reader = auditedReader(memoryReader(leaves), n);
        const proof = await consistencyProof(reader, m, n);
        expect(hexes(proof)).toEqual(m === n ? [] : hexes(naiveConsistency(m, leaves)));
        const bound = n === 0 ? 0 : Math.ceil(Math.log2(n)) + 1;
        expect(proof.length).toBeLessThanOrEqual(bound);
        expect(reader.calls).toBeLessThanOrEqual(2 * bound);
        const [r1, r2] = [naiveMth(leaves.slice(0, m)), naiveMth(leaves)];
        expect(verifyConsistency(m, n, r1, r2, proof)).toBe(true);

        expect(verifyConsistency(m, n, flipBit(r1, bit % 256), r2, proof)).toBe(false);
        // Every tree extends the empty one, whatever its head.
        expect(verifyConsistency(m, n, r1, flipBit(r2, bit % 256), proof)).toBe(m === 0 && n > 0);
        expect(verifyConsistency(m, n, r1, r2, [...proof, r2])).toBe(false);
        expect(verifyConsistency(m, n, r1, r2, [r1, ...proof])).toBe(false);
        if (proof.length > 0) {
          const at = pick % proof.length;
          expect(verifyConsistency(m, n, r1, r2, replaceAt(proof, at, flipBit(proof[at]!, bit % 256)))).toBe(false);
          expect(verifyConsistency(m, n, r1, r2, removeAt(proof, at))).toBe(false);
        }
        // Another old size with its true root passes only if the proof is that size's PROOF too.
        const m2 = pick % (n + 1);
        const honest = m2 === n ? proof.length === 0 : sameList(proof, naiveConsistency(m2, leaves));
        expect(verifyConsistency(m2, n, naiveMth(leaves.slice(0, m2)), r2, proof)).toBe(honest);
        if (m > 0 && m < n) expect(verifyConsistency(m, n - 1, r1, naiveMth(leaves.slice(0, n - 1)), proof)).toBe(false);
      }),
    );
  });
});

describe('sizes past 2^32', () => {
  /**
   * A consistent tree too big to hold: every leaf before `distinctFrom` has one same hash (so a
   * perfect subtree of them is a chain of self-pairs, known per level), the last ones are distinct.
   * Built and checked there, proofs catch any 32-bit arithmetic (JS bitwise operators wrap).
   */
  function hugeTree(distinctFrom: number): NodeReader {
    const uniform = [sha(new TextEncoder().encode('uniform'))];
    for (let l = 1; l < 64; l++) uniform.push(naiveNode(uniform[l - 1]!, uniform[l - 1]!));
    const node = (level: number, index: number): Uint8Array => {
      const [first, end] = [index * 2 ** level, (index + 1) * 2 ** level];
      if (end <= distinctFrom) return uniform[level]!;
      if (level === 0) return sha(new TextEncoder().encode(`leaf ${first}`));
      return naiveNode(node(level - 1, 2 * index), node(level - 1, 2 * index + 1));
    };
    return { node: async (level, index) => node(level, index) };
  }

  test.each([
    [2 ** 32 + 5, 2 ** 32 + 3],
    [2 ** 40 + 12345, 2 ** 40 + 12340],
    [2 ** 52 + 1, 2 ** 52 - 1],
    [2 ** 53 - 1, 2 ** 53 - 3],
  ])('inclusion and consistency in %i leaves', async (size, index) => {
    const tree = hugeTree(size - 64);
    const leaf = await tree.node(0, index);
    const rt = await rootOf(tree, size);
    const proof = await inclusionProof(tree, index, size);
    expect(verifyInclusion(leaf, index, size, proof, rt)).toBe(true);
    expect(verifyInclusion(leaf, index - 1, size, proof, rt)).toBe(false);
    expect(verifyInclusion(leaf, index + 1, size, proof, rt)).toBe(false);
    const old = index + 1;
    const [oldRoot, growth] = [await rootOf(tree, old), await consistencyProof(tree, old, size)];
    expect(verifyConsistency(old, size, oldRoot, rt, growth)).toBe(true);
    expect(verifyConsistency(old - 1, size, oldRoot, rt, growth)).toBe(false);
    expect(verifyConsistency(old, size, oldRoot, rt, growth.slice(1))).toBe(false);
  });
});
