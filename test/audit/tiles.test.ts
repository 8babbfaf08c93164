/**
 * The tile layout (src/audit/tiles.ts): which tiles a tree has, that appending in any chunking
 * writes the same tiles, that a reader over tiles gives the roots and proofs of the in-memory tree
 * (checked against RFC 9162 by test/audit/merkle.test.ts) while reading O(log n) tiles, and that a
 * store that lost or truncated a tile makes proofs fail loudly, never wrongly.
 */
import { createHash } from 'node:crypto';
import { bytesToHex } from '@noble/hashes/utils.js';
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { MerkleError, consistencyProof, inclusionProof, memoryReader, rootOf, verifyConsistency, verifyInclusion } from '../../src/audit/merkle.js';
import { TILE_WIDTH, type Tile, type TileRef, appendLeaves, appendLeavesInSlices, rightEdgeOf, tileReader, tilesFor } from '../../src/audit/tiles.js';

const sha = (...parts: Uint8Array[]): Uint8Array => {
  const h = createHash('sha256');
  for (const p of parts) h.update(p);
  return new Uint8Array(h.digest());
};
/** RFC 9162 MTH over leaf hashes, on node:crypto: shares nothing with the code under test. */
function naiveMth(d: readonly Uint8Array[]): Uint8Array {
  if (d.length === 0) return sha();
  if (d.length === 1) return d[0]!;
  const k = 2 ** Math.ceil(Math.log2(d.length) - 1);
  return sha(Uint8Array.of(1), naiveMth(d.slice(0, k)), naiveMth(d.slice(k)));
}
const hx = (h: Uint8Array): string => bytesToHex(h);
/** Distinct leaf hashes: SHA-256(0x00 || index as 4 bytes). */
const leafHashes = (from: number, to: number): Uint8Array[] =>
  Array.from({ length: to - from }, (_, i) => sha(Uint8Array.of(0, (from + i) >>> 24, ((from + i) >>> 16) & 255, ((from + i) >>> 8) & 255, (from + i) & 255)));

const key = (level: number, index: number): string => `${level}/${index}`;

/** A store as the server would keep it: one row per tile, appended to through the pure API. */
class TileStore {
  readonly tiles = new Map<string, Uint8Array>();
  readonly loads: string[] = [];
  size = 0;

  append(leaves: readonly Uint8Array[]): Tile[] {
    const edge = new Map(
      rightEdgeOf(this.size).map((r): [number, Tile] => [r.level, { level: r.level, index: r.index, hashes: this.tiles.get(key(r.level, r.index))! }]),
    );
    const changed = appendLeaves(edge, this.size, leaves);
    for (const t of changed) this.tiles.set(key(t.level, t.index), t.hashes);
    this.size += leaves.length;
    return changed;
  }

  reader(size = this.size): ReturnType<typeof tileReader> {
    return tileReader(async (level, index) => {
      this.loads.push(key(level, index));
      return this.tiles.get(key(level, index));
    }, size);
  }

  snapshot(): Record<string, string> {
    return Object.fromEntries([...this.tiles].map(([k, v]) => [k, hx(v)]));
  }

  /** The keys of tiles that differ from (or are missing in) another store's. */
  diff(other: TileStore): string[] {
    const keys = new Set([...this.tiles.keys(), ...other.tiles.keys()]);
    return [...keys].filter((k) => Buffer.compare(this.tiles.get(k) ?? Buffer.alloc(0), other.tiles.get(k) ?? Buffer.alloc(0)) !== 0);
  }
}

function storeOf(leaves: readonly Uint8Array[], chunks: readonly number[] = [leaves.length]): TileStore {
  const store = new TileStore();
  let at = 0;
  for (const c of chunks) {
    store.append(leaves.slice(at, at + c));
    at += c;
  }
  store.append(leaves.slice(at));
  return store;
}

const codeOf = async (p: Promise<unknown>): Promise<unknown> =>
  p.then(
    () => 'resolved',
    (e: unknown) => (e instanceof MerkleError ? e.code : e),
  );

describe('the layout', () => {
  const refs = (...list: [number, number, number][]): TileRef[] => list.map(([level, index, width]) => ({ level, index, width }));
  test.each<[number, TileRef[], TileRef[]]>([
    [0, [], []],
    [1, refs([0, 0, 1]), refs([0, 0, 1])],
    [255, refs([0, 0, 255]), refs([0, 0, 255])],
    [256, refs([0, 0, 256], [1, 0, 1]), refs([1, 0, 1])],
    [257, refs([0, 0, 256], [0, 1, 1], [1, 0, 1]), refs([0, 1, 1], [1, 0, 1])],
    [513, refs([0, 0, 256], [0, 1, 256], [0, 2, 1], [1, 0, 2]), refs([0, 2, 1], [1, 0, 2])],
  ])('a tree of %i leaves', (size, all, edge) => {
    expect(tilesFor(size)).toEqual(all);
    expect(rightEdgeOf(size)).toEqual(edge);
  });

  test.each<[number, number, TileRef[], TileRef[]]>([
    [65535, 257, refs([0, 255, 255], [1, 0, 255]), refs([0, 255, 255], [1, 0, 255])],
    [65536, 258, refs([0, 255, 256], [1, 0, 256], [2, 0, 1]), refs([2, 0, 1])],
    [65537, 259, refs([0, 256, 1], [1, 0, 256], [2, 0, 1]), refs([0, 256, 1], [2, 0, 1])],
    // 65793 tiles of leaves, 257 (all full) at level 1, 2 at level 2, 1 at level 3.
    [2 ** 24 + 2 ** 16 + 3, 65793 + 257 + 2 + 1, refs([1, 256, 256], [2, 0, 256], [2, 1, 1], [3, 0, 1]), refs([0, 65792, 3], [2, 1, 1], [3, 0, 1])],
  ])('a tree of %i leaves has %i tiles', (size, count, lastTiles, edge) => {
    const all = tilesFor(size);
    expect(all).toHaveLength(count);
    expect(all.slice(-lastTiles.length)).toEqual(lastTiles);
    expect(rightEdgeOf(size)).toEqual(edge);
  });

  test('the right edge is the partial last tile of each level', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 200_000 }), (size) => {
        const all = tilesFor(size);
        const last = new Map(all.map((r) => [r.level, r]));
        expect(rightEdgeOf(size)).toEqual([...last.values()].filter((r) => r.width < TILE_WIDTH));
        expect(all.filter((r) => r.width < TILE_WIDTH).every((r) => last.get(r.level) === r)).toBe(true);
      }),
    );
  });

  test.each([-1, 1.5, NaN, 2 ** 53])('refuses the size %d', (size) => {
    expect(() => tilesFor(size)).toThrow(MerkleError);
    expect(() => rightEdgeOf(size)).toThrow(MerkleError);
    expect(() => tileReader(async () => undefined, size)).toThrow(MerkleError);
  });
});

describe('appendLeaves', () => {
  test('a first leaf makes one partial tile', () => {
    const [leaf] = leafHashes(0, 1);
    expect(appendLeaves(new Map(), 0, [leaf!])).toEqual([{ level: 0, index: 0, hashes: leaf }]);
    expect(appendLeaves(new Map(), 0, [])).toEqual([]);
  });

  test('the 256th leaf completes tile 0/0 and starts level 1 with its root', () => {
    const leaves = leafHashes(0, 256);
    const store = storeOf(leaves.slice(0, 255));
    const changed = store.append(leaves.slice(255));
    expect(changed.map((t) => [t.level, t.index, t.hashes.length / 32])).toEqual([
      [0, 0, 256],
      [1, 0, 1],
    ]);
    expect(hx(changed[1]!.hashes)).toBe(hx(naiveMth(leaves)));
  });

  test('chunked appends write the same tiles as one append, and only the tiles of the tree', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 90 }), { minLength: 1, maxLength: 7 }), (chunks) => {
        const leaves = leafHashes(
          0,
          chunks.reduce((a, b) => a + b, 0),
        );
        const chunked = storeOf(leaves, chunks);
        expect(chunked.snapshot()).toEqual(storeOf(leaves).snapshot());
        const expected = tilesFor(leaves.length);
        expect([...chunked.tiles].map(([k, v]) => `${k}:${v.length / 32}`).sort()).toEqual(expected.map((r) => `${key(r.level, r.index)}:${r.width}`).sort());
      }),
    );
  });

  test('in slices: the same tiles as one append, a pause after each slice, the right edge given untouched', async () => {
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 0, max: 700 }), fc.integer({ min: 0, max: 900 }), fc.integer({ min: 1, max: 300 }), async (old, added, slice) => {
        const leaves = leafHashes(0, old + added);
        const store = storeOf(leaves.slice(0, old));
        const edge = new Map(
          rightEdgeOf(old).map((r): [number, Tile] => [r.level, { level: r.level, index: r.index, hashes: store.tiles.get(key(r.level, r.index))! }]),
        );
        const before = [...edge.entries()];
        let pauses = 0;
        const sliced = await appendLeavesInSlices(edge, old, leaves.slice(old), slice, async () => {
          pauses++;
        });
        expect(sliced).toEqual(appendLeaves(edge, old, leaves.slice(old)));
        expect(pauses).toBe(Math.ceil(added / slice));
        expect([...edge.entries()]).toEqual(before);
      }),
      { numRuns: 60 },
    );
    await expect(appendLeavesInSlices(new Map(), 0, leafHashes(0, 3), 0, async () => {})).rejects.toThrow(MerkleError);
  });

  test('in slices, across the second tile level: 100 leaves after 65,500 in slices of 37', async () => {
    const leaves = leafHashes(0, 65_600);
    const store = storeOf(leaves.slice(0, 65_500));
    const edge = new Map(
      rightEdgeOf(65_500).map((r): [number, Tile] => [r.level, { level: r.level, index: r.index, hashes: store.tiles.get(key(r.level, r.index))! }]),
    );
    const sliced = await appendLeavesInSlices(edge, 65_500, leaves.slice(65_500), 37, async () => {});
    expect(sliced).toEqual(appendLeaves(edge, 65_500, leaves.slice(65_500)));
    expect(sliced.some((t) => t.level === 2)).toBe(true);
  });

  test('is pure: the right edge given is not modified, and the tiles returned share no memory with it', () => {
    const leaves = leafHashes(0, 300);
    const store = storeOf(leaves.slice(0, 200));
    const before = store.snapshot();
    const edgeTile = store.tiles.get('0/0')!;
    const changed = appendLeaves(new Map([[0, { level: 0, index: 0, hashes: edgeTile }]]), 200, leaves.slice(200));
    expect(store.snapshot()).toEqual(before);
    changed[0]!.hashes.fill(0);
    expect(store.snapshot()).toEqual(before);
  });

  test.each<[string, () => unknown, string]>([
    ['the partial right edge is missing', () => appendLeaves(new Map(), 10, leafHashes(10, 11)), 'tile_missing'],
    [
      'the right edge is too short',
      () => appendLeaves(new Map([[0, { level: 0, index: 0, hashes: new Uint8Array(9 * 32) }]]), 10, leafHashes(10, 11)),
      'bad_tile',
    ],
    [
      'the right edge has the wrong index',
      () => appendLeaves(new Map([[0, { level: 0, index: 1, hashes: new Uint8Array(10 * 32) }]]), 10, leafHashes(10, 11)),
      'bad_tile',
    ],
    [
      'the right edge is filed under the wrong level',
      () => appendLeaves(new Map([[0, { level: 1, index: 0, hashes: new Uint8Array(10 * 32) }]]), 10, leafHashes(10, 11)),
      'bad_tile',
    ],
    ['a leaf hash is 31 bytes', () => appendLeaves(new Map(), 0, [new Uint8Array(31)]), 'bad_hash'],
    ['the old size is negative', () => appendLeaves(new Map(), -1, []), 'out_of_range'],
  ])('refuses when %s', (_name, run, code) => {
    expect(run).toThrow(MerkleError);
    try {
      run();
    } catch (e) {
      expect((e as MerkleError).code).toBe(code);
    }
  });

  test('a full last tile given as the right edge is accepted and left alone', () => {
    const leaves = leafHashes(0, 260);
    const store = storeOf(leaves.slice(0, 256));
    const edge = new Map([
      [0, { level: 0, index: 0, hashes: store.tiles.get('0/0')! }],
      [1, { level: 1, index: 0, hashes: store.tiles.get('1/0')! }],
    ]);
    const changed = appendLeaves(edge, 256, leaves.slice(256));
    expect(changed.map((t) => key(t.level, t.index))).toEqual(['0/1']);
  });
});

describe('tileReader', () => {
  test('roots and proofs equal the in-memory tree, for every older size too', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(fc.integer({ min: 1, max: 80 }), { minLength: 1, maxLength: 5 }), fc.nat(), fc.nat(), async (chunks, pickSize, pickIndex) => {
        const total = chunks.reduce((a, b) => a + b, 0);
        const leaves = leafHashes(0, total);
        const store = storeOf(leaves, chunks);
        const memory = memoryReader(leaves);
        const size = 1 + (pickSize % total);
        const index = pickIndex % size;
        const old = pickIndex % (size + 1);
        const reader = store.reader(size);
        const root = await rootOf(reader, size);
        expect(hx(root)).toBe(hx(naiveMth(leaves.slice(0, size))));
        const proof = await inclusionProof(reader, index, size);
        expect(proof.map(hx)).toEqual((await inclusionProof(memory, index, size)).map(hx));
        expect(verifyInclusion(leaves[index]!, index, size, proof, root)).toBe(true);
        const growth = await consistencyProof(reader, old, size);
        expect(growth.map(hx)).toEqual((await consistencyProof(memory, old, size)).map(hx));
        expect(verifyConsistency(old, size, await rootOf(reader, old), root, growth)).toBe(true);
      }),
    );
  });

  test('loads each tile once for the reader’s life, and a failed load is tried again', async () => {
    const store = storeOf(leafHashes(0, 600));
    let failOnce = true;
    const loads: string[] = [];
    const reader = tileReader(async (level, index) => {
      loads.push(key(level, index));
      if (failOnce) {
        failOnce = false;
        throw new Error('connection reset');
      }
      return store.tiles.get(key(level, index));
    }, 600);
    await expect(rootOf(reader, 600)).rejects.toThrow('connection reset');
    const root = await rootOf(reader, 600);
    await inclusionProof(reader, 5, 600);
    await inclusionProof(reader, 599, 600);
    expect(hx(root)).toBe(hx(naiveMth(leafHashes(0, 600))));
    const retried = loads[0]!;
    expect(loads.filter((k) => k === retried)).toHaveLength(2);
    expect(new Set(loads.slice(1)).size).toBe(loads.length - 1);
  });

  test('a tile wider than an old size needs is fine; its extra hashes are never read', async () => {
    const leaves = leafHashes(0, 300);
    const store = storeOf(leaves);
    const reader = store.reader(100);
    expect(hx(await rootOf(reader, 100))).toBe(hx(naiveMth(leaves.slice(0, 100))));
  });

  describe('a store that lost data never yields a proof', () => {
    const leaves = leafHashes(0, 700);
    test.each<[string, (tiles: Map<string, Uint8Array>) => void, string]>([
      ['a leaf tile is missing', (t) => t.delete('0/1'), 'tile_missing'],
      ['a level-1 tile is missing', (t) => t.delete('1/0'), 'tile_missing'],
      ['a leaf tile is truncated', (t) => t.set('0/2', t.get('0/2')!.slice(0, 32 * 100)), 'tile_short'],
      ['a full tile lost its last hash', (t) => t.set('0/0', t.get('0/0')!.slice(0, 32 * 255)), 'tile_short'],
      ['a tile is cut mid-hash', (t) => t.set('0/1', t.get('0/1')!.slice(0, 32 * 200 + 5)), 'bad_tile'],
      ['a tile is over-long', (t) => t.set('0/1', new Uint8Array(32 * 257)), 'bad_tile'],
    ])('%s', async (_name, damage, code) => {
      const store = storeOf(leaves);
      damage(store.tiles);
      const reader = store.reader();
      const results = await Promise.all([
        codeOf(rootOf(reader, 700)),
        ...[0, 300, 520, 699].map((i) => codeOf(inclusionProof(reader, i, 700))),
        ...[1, 257, 600].map((m) => codeOf(consistencyProof(reader, m, 700))),
      ]);
      expect(results).toContain(code);
      expect(results.every((r) => r === code || r === 'resolved')).toBe(true);
    });

    test('a node outside the tree is refused, not read', async () => {
      const store = storeOf(leaves);
      const reader = store.reader(300);
      expect(await codeOf(reader.node(0, 300))).toBe('out_of_range');
      expect(await codeOf(reader.node(9, 0))).toBe('out_of_range');
      expect(await codeOf(reader.node(-1, 0))).toBe('out_of_range');
      expect(await codeOf(reader.node(0, 1.5))).toBe('out_of_range');
      expect(store.loads).toEqual([]);
    });
  });
});

describe('across tile boundaries, up to 65537 leaves', () => {
  const LEAVES = leafHashes(0, 65537);
  // One append of all, and appends in odd chunks that straddle every boundary.
  const whole = storeOf(LEAVES);
  const chunked = storeOf(LEAVES, [255, 1, 1, 4093, 60000, 1184, 1]);
  const memory = memoryReader(LEAVES);
  const SIZES = [1, 255, 256, 257, 511, 512, 65535, 65536, 65537];

  test('chunked and whole appends wrote the same tiles', () => {
    expect(chunked.diff(whole)).toEqual([]);
    expect(whole.tiles.size).toBe(tilesFor(65537).length);
  });

  test('the root of 65536 leaves equals the naive MTH', async () => {
    expect(hx(await rootOf(whole.reader(65536), 65536))).toBe(hx(naiveMth(LEAVES.slice(0, 65536))));
  });

  test.each(SIZES)('roots, proofs and consistency at size %i', async (size) => {
    const reader = whole.reader(size);
    const root = await rootOf(reader, size);
    expect(hx(root)).toBe(hx(await rootOf(memory, size)));
    for (const index of [0, 1, 254, 255, 256, 257, 32767, 65534, 65535, 65536].filter((i) => i < size)) {
      const proof = await inclusionProof(reader, index, size);
      expect(proof.map(hx)).toEqual((await inclusionProof(memory, index, size)).map(hx));
      expect(verifyInclusion(LEAVES[index]!, index, size, proof, root)).toBe(true);
    }
    for (const old of SIZES.filter((s) => s <= size)) {
      const proof = await consistencyProof(reader, old, size);
      expect(verifyConsistency(old, size, await rootOf(reader, old), root, proof)).toBe(true);
    }
  });

  test.each([
    [65536, 65535],
    [65537, 65536],
    [65537, 300],
  ])('one inclusion proof in %i leaves (leaf %i) reads at most 3 tiles', async (size, index) => {
    whole.loads.length = 0;
    await inclusionProof(whole.reader(size), index, size);
    expect(whole.loads.length).toBeLessThanOrEqual(3);
  });

  test('one consistency proof from 65535 to 65537 reads at most 4 tiles', async () => {
    whole.loads.length = 0;
    await consistencyProof(whole.reader(65537), 65535, 65537);
    expect(whole.loads.length).toBeLessThanOrEqual(4);
  });
});
