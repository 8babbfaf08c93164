/**
 * What a full disk does to the files Warrant writes outside its database. A full disk takes part of a
 * write without an error (`writeSync` returns the bytes it wrote); a file kept or renamed into place cut
 * short is worse than no write at all.
 */
import { mkdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { parseLines, type CheckpointLine } from '../../src/audit/checkpoint.js';
import { readConfig } from '../../src/node/config.js';
import { FileSink, sinkFile } from '../../src/node/file-sink.js';
import { keyFile, listKeyFile, loadKeys, rotateKeyFile } from '../../src/node/keyfile.js';
import { fullDisk } from '../support/full-disk.js';

const disk = fullDisk();
afterAll(() => disk.remove());

/** A checkpoint line of about 3 KB (the sink checks lines' shape, not their signatures). */
const line = (n: number): CheckpointLine => ({ n, jws: `eyJ.${'x'.repeat(3000)}.y`, consistency: [] });

describe.runIf(disk.mounted)('on a full disk', () => {
  test('a checkpoint append it cannot hold leaves the file as it was; with room again, the next goes on from it', async () => {
    const sink = join(disk.dir, 'sink');
    mkdirSync(sink, { mode: 0o700 });
    const file = sinkFile(sink, 't1');
    await new FileSink(sink).append('t1', [line(1)]);
    const before = readFileSync(file);
    disk.fill('filler');
    try {
      await expect(new FileSink(sink).append('t1', [line(2), line(3), line(4)])).rejects.toThrow(/could not append .* left as it was: only \d+ of \d+ bytes/);
      expect(readFileSync(file).equals(before)).toBe(true);
      expect(await new FileSink(sink).last('t1')).toMatchObject({ n: 1 });
    } finally {
      rmSync(join(disk.dir, 'filler'));
    }
    await new FileSink(sink).append('t1', [line(2), line(3), line(4)]);
    const parsed = parseLines(readFileSync(file, 'utf8'));
    expect(parsed.ok && parsed.lines.map((l) => l.n)).toEqual([1, 2, 3, 4]);
    rmSync(sink, { recursive: true });
  });

  // Unchecked, the rotation "succeeded" and renamed a ring cut at 4,096 bytes over the whole one: its
  // private keys were gone and the server could no longer load it.
  test('a key rotation it cannot hold fails and leaves the ring as it was', async () => {
    const keysDir = join(disk.dir, 'keys');
    const config = readConfig({ WARRANT_KEYS_DIR: keysDir });
    await loadKeys(config, () => {});
    for (let i = 0; i < 20; i++) await rotateKeyFile(keysDir); // a ring of ~5 KB, more than the page left
    const before = readFileSync(keyFile(keysDir));
    const kids = listKeyFile(keysDir);
    disk.fill('filler');
    try {
      await expect(rotateKeyFile(keysDir)).rejects.toThrow(/only \d+ of \d+ bytes .* could be written/);
    } finally {
      rmSync(join(disk.dir, 'filler'));
    }
    expect(readFileSync(keyFile(keysDir)).equals(before)).toBe(true);
    expect((await loadKeys(config, () => {})).activeKid).toBe(kids.find((k) => k.active)?.kid);
  });
});
