/**
 * The storage layout of the audit Merkle tree: tiles of height 8, as Go's
 * golang.org/x/mod/sumdb/tlog lays out a log, so a proof in a log of millions of leaves reads a
 * handful of rows, never O(n). Tile (level L, index i) holds the hashes of the level-8L nodes
 * i*256 … i*256+255 (tile level 0 holds leaf hashes); only the last tile of a level may be partial.
 * Pure: appending computes the tiles to write, and reading takes a loader, so storage stays outside.
 */
import { HASH_SIZE, MerkleError, type NodeReader, isCount, perfectRoot } from './merkle.js';

/** Tree levels one tile spans. */
export const TILE_HEIGHT = 8;
/** Hashes in a full tile: 2^TILE_HEIGHT. */
export const TILE_WIDTH = 2 ** TILE_HEIGHT;

/** A tile as stored: `hashes` is the concatenation of its (up to 256) 32-byte hashes. */
export interface Tile {
  readonly level: number;
  readonly index: number;
  readonly hashes: Uint8Array;
}

/** Where a tile sits and how many hashes it holds in a tree of a given size. */
export interface TileRef {
  readonly level: number;
  readonly index: number;
  readonly width: number;
}

/** How many level-8L nodes (perfect subtrees of 256^L leaves) a tree of `size` leaves has. */
function nodesAt(level: number, size: number): number {
  // Division by a power of two is exact in floating point, so floor is exact for safe integers.
  return Math.floor(size / TILE_WIDTH ** level);
}

/**
 * Every tile a tree of `size` leaves consists of, level by level, left to right: what a store must
 * hold for the tree to be complete. O(size / 256) entries. Throws `MerkleError('out_of_range')`
 * for a size that is not a non-negative safe integer.
 */
export function tilesFor(size: number): TileRef[] {
  assertSize(size);
  const refs: TileRef[] = [];
  for (let level = 0, count = size; count > 0; count = nodesAt(++level, size)) {
    for (let index = 0; index * TILE_WIDTH < count; index++) refs.push({ level, index, width: Math.min(TILE_WIDTH, count - index * TILE_WIDTH) });
  }
  return refs;
}

/**
 * The tiles {@link appendLeaves} needs for a tree of `size` leaves: the partial last tile of each
 * level. A level whose last tile is full is not listed: appending never changes a full tile.
 */
export function rightEdgeOf(size: number): TileRef[] {
  assertSize(size);
  const refs: TileRef[] = [];
  for (let level = 0, count = size; count > 0; count = nodesAt(++level, size)) {
    if (count % TILE_WIDTH !== 0) refs.push({ level, index: Math.floor(count / TILE_WIDTH), width: count % TILE_WIDTH });
  }
  return refs;
}

/**
 * The tiles that are new or changed when `newLeafHashes` are appended to a tree of `oldSize`
 * leaves: at each level, the old partial tile grown, every tile completed, and the new partial tile.
 * A completed level-L tile's root (its 256 hashes hashed up 8 levels) is the next level-8(L+1) node.
 *
 * `rightEdge` maps a level to its current last tile; it must hold every tile
 * {@link rightEdgeOf}(oldSize) lists. A full last tile may be given too (it is not needed); a tile
 * given for a level the append reaches must be that level's last tile. Pure: inputs are not modified
 * and the tiles returned share no memory with them. Throws `MerkleError` with code `tile_missing` for
 * a partial tile not given, `bad_tile` for a tile of the wrong index or width, `bad_hash` for a leaf
 * hash not 32 bytes.
 */
export function appendLeaves(rightEdge: ReadonlyMap<number, Tile>, oldSize: number, newLeafHashes: readonly Uint8Array[]): Tile[] {
  assertSize(oldSize);
  if (!newLeafHashes.every((h) => h instanceof Uint8Array && h.length === HASH_SIZE)) throw new MerkleError('bad_hash', 'every leaf hash must be 32 bytes');
  if (!Number.isSafeInteger(oldSize + newLeafHashes.length)) throw new MerkleError('out_of_range', 'the tree would outgrow safe integers');
  const changed: Tile[] = [];
  let incoming: readonly Uint8Array[] = newLeafHashes;
  for (let level = 0; incoming.length > 0; level++) {
    const count = nodesAt(level, oldSize);
    const entries = [...edgeHashes(rightEdge.get(level), level, count), ...incoming];
    const completed: Uint8Array[] = [];
    for (let offset = 0; offset < entries.length; offset += TILE_WIDTH) {
      const chunk = entries.slice(offset, offset + TILE_WIDTH);
      changed.push({ level, index: Math.floor(count / TILE_WIDTH) + offset / TILE_WIDTH, hashes: concat(chunk) });
      if (chunk.length === TILE_WIDTH) completed.push(perfectRoot(chunk));
    }
    // The level-8(L+1) nodes that exist before this append are exactly the full level-L tiles, so
    // the roots of the tiles completed now come next, in order.
    incoming = completed;
  }
  return changed;
}

/**
 * {@link appendLeaves} a slice of at most `slice` leaves at a time, awaiting `pause()` after each
 * slice: the same tiles (each once, in its final state, by level then index) without hashing a large
 * append in one go. The checkpointer runs on the thread that serves decisions; ten thousand leaves
 * appended at once held it for ~100 ms (bench/RESULTS.md). `rightEdge` is not modified.
 */
export async function appendLeavesInSlices(
  rightEdge: ReadonlyMap<number, Tile>,
  oldSize: number,
  newLeafHashes: readonly Uint8Array[],
  slice: number,
  pause: () => Promise<void>,
): Promise<Tile[]> {
  if (!Number.isSafeInteger(slice) || slice < 1) throw new MerkleError('out_of_range', 'a slice must hold at least one leaf');
  const edge = new Map(rightEdge);
  const changed = new Map<string, Tile>();
  for (let from = 0, size = oldSize; from < newLeafHashes.length; from += slice) {
    const leaves = newLeafHashes.slice(from, from + slice);
    // The last tile returned at a level is that level's last tile now; levels not reached keep theirs.
    for (const t of appendLeaves(edge, size, leaves)) {
      changed.set(`${t.level}/${t.index}`, t);
      edge.set(t.level, t);
    }
    size += leaves.length;
    await pause();
  }
  return [...changed.values()].sort((a, b) => a.level - b.level || a.index - b.index);
}

/** The hashes of a level's partial last tile, checked against what a tree of `count` nodes there has. */
function edgeHashes(tile: Tile | undefined, level: number, count: number): Uint8Array[] {
  const width = count % TILE_WIDTH;
  if (tile === undefined) {
    if (width === 0) return [];
    throw new MerkleError('tile_missing', `the right-edge tile at level ${level} (index ${Math.floor(count / TILE_WIDTH)}) was not given`);
  }
  const expected = { index: Math.ceil(count / TILE_WIDTH) - 1, width: width === 0 ? TILE_WIDTH : width };
  if (tile.level !== level || tile.index !== expected.index || tile.hashes.length !== expected.width * HASH_SIZE) {
    throw new MerkleError('bad_tile', `the right-edge tile at level ${level} must be index ${expected.index} with ${expected.width} hashes`);
  }
  return width === 0 ? [] : split(tile.hashes, 0, width);
}

/**
 * A {@link NodeReader} for a tree of `size` leaves stored as tiles. `node(level, index)` loads the
 * one tile holding the node's level-8⌊level/8⌋ descendants and hashes at most 2^(level mod 8) of
 * them up. Tiles are cached (as promises, so concurrent reads share one load) for the reader's
 * life; a failed load is not cached. A tile that is wider than `size` needs is fine (nodes never
 * change once complete), so a reader for an old checkpoint can share a newer store.
 *
 * `node` rejects with `MerkleError`: `out_of_range` for a subtree not wholly inside the tree,
 * `tile_missing` when `load` finds no tile, `tile_short` when the tile lacks a needed hash,
 * `bad_tile` when its length is not a whole number of hashes (at most 256). A store that lost data
 * must never yield a wrong proof silently.
 */
export function tileReader(load: (level: number, index: number) => Promise<Uint8Array | undefined>, size: number): NodeReader {
  assertSize(size);
  const cache = new Map<string, Promise<Uint8Array>>();
  const tileAt = (level: number, index: number): Promise<Uint8Array> => {
    const key = `${level}/${index}`;
    let tile = cache.get(key);
    if (tile === undefined) {
      tile = loadTile(load, level, index);
      cache.set(key, tile);
      tile.catch(() => cache.delete(key));
    }
    return tile;
  };
  return {
    node: async (level: number, index: number): Promise<Uint8Array> => {
      if (!isNodeWithin(level, index, size)) throw new MerkleError('out_of_range', `no perfect subtree at level ${level}, index ${index} in a tree of ${size}`);
      const tileLevel = Math.floor(level / TILE_HEIGHT);
      const span = 2 ** (level % TILE_HEIGHT);
      const first = index * span; // the first level-8L descendant; a span never crosses a tile
      const tileIndex = Math.floor(first / TILE_WIDTH);
      const hashes = await tileAt(tileLevel, tileIndex);
      const offset = first % TILE_WIDTH;
      if (hashes.length < (offset + span) * HASH_SIZE) {
        throw new MerkleError('tile_short', `tile ${tileLevel}/${tileIndex} holds ${hashes.length / HASH_SIZE} hashes; ${offset + span} are needed`);
      }
      return perfectRoot(split(hashes, offset, span));
    },
  };
}

async function loadTile(load: (level: number, index: number) => Promise<Uint8Array | undefined>, level: number, index: number): Promise<Uint8Array> {
  const hashes = await load(level, index);
  if (hashes === undefined) throw new MerkleError('tile_missing', `tile ${level}/${index} is missing`);
  if (!(hashes instanceof Uint8Array) || hashes.length % HASH_SIZE !== 0 || hashes.length > TILE_WIDTH * HASH_SIZE) {
    throw new MerkleError('bad_tile', `tile ${level}/${index} is not a whole number of hashes (at most ${TILE_WIDTH})`);
  }
  return hashes;
}

/** Whether the perfect subtree (level, index) lies wholly inside a tree of `size` leaves. */
function isNodeWithin(level: number, index: number, size: number): boolean {
  // Past 2^53 the product is inexact, but then it is far above any safe size, so still out of range.
  return isCount(level) && isCount(index) && level < 64 && (index + 1) * 2 ** level <= size;
}

function assertSize(size: number): void {
  if (!isCount(size)) throw new MerkleError('out_of_range', 'a tree size must be a non-negative safe integer');
}

/** `count` hashes of a tile from hash `offset`, each a view into `bytes`. */
function split(bytes: Uint8Array, offset: number, count: number): Uint8Array[] {
  const hashes: Uint8Array[] = [];
  for (let i = offset; i < offset + count; i++) hashes.push(bytes.subarray(i * HASH_SIZE, (i + 1) * HASH_SIZE));
  return hashes;
}

function concat(hashes: readonly Uint8Array[]): Uint8Array {
  const out = new Uint8Array(hashes.length * HASH_SIZE);
  hashes.forEach((h, i) => out.set(h, i * HASH_SIZE));
  return out;
}
