/**
 * The checkpoint sink's file stays whole lines of checkpoints whatever happens to an append: a full
 * disk takes part of a write without an error (`writeSync` returns the bytes it wrote), and a crash
 * can leave part of a line. A cut line kept at the end would make every later round of the tenant fail
 * on the file's last line, after the disk has room again too, and stop its checkpoints for good.
 */
import { execFileSync } from 'node:child_process';
import { closeSync, ftruncateSync, fstatSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeEach, describe, expect, test } from 'vitest';
import { lineText, parseLines, type CheckpointLine } from '../../src/audit/checkpoint.js';
import { FileSink, sinkFile } from '../../src/node/file-sink.js';

/** A checkpoint line of about 3 KB (the sink checks lines' shape, not their signatures). */
const line = (n: number): CheckpointLine => ({ n, jws: `eyJ.${'x'.repeat(3000)}.y`, consistency: [] });
const numbers = (path: string): number[] => {
  const parsed = parseLines(readFileSync(path, 'utf8'));
  return parsed.ok ? parsed.lines.map((l) => l.n) : [-parsed.line];
};

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'warrant-sink-'));
  mkdirSync(join(dir, 'sink'), { mode: 0o700 });
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

test('an unfinished last line (an append cut short by a crash) does not count, and the next append cuts it', async () => {
  const sink = join(dir, 'sink');
  const file = sinkFile(sink, 't1');
  writeFileSync(file, `${lineText(line(1))}\n${lineText(line(2)).slice(0, 100)}`, { mode: 0o600 });
  expect(await new FileSink(sink).last('t1')).toMatchObject({ n: 1 });
  await new FileSink(sink).append('t1', [line(2)]);
  expect(readFileSync(file, 'utf8')).toBe(`${lineText(line(1))}\n${lineText(line(2))}\n`);

  // A first line cut short: the file holds no checkpoint yet.
  writeFileSync(file, lineText(line(1)).slice(0, 100));
  expect(await new FileSink(sink).last('t1')).toBeNull();
  await new FileSink(sink).append('t1', [line(1)]);
  expect(numbers(file)).toEqual([1]);
});

// A disk of its own to fill: a tmpfs, which only root can mount (CI runs as root on the team's machine).
const disk = mkdtempSync(join(tmpdir(), 'warrant-sink-disk-'));
let mounted = false;
if (process.getuid?.() === 0) {
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=128k,mode=0700', 'tmpfs', disk], { stdio: 'ignore' });
    mounted = true;
  } catch {
    // not allowed here (a container without CAP_SYS_ADMIN): the test below is skipped
  }
}
afterAll(() => {
  if (mounted) execFileSync('umount', [disk]);
  rmSync(disk, { recursive: true, force: true });
});

/** Fills the disk with `path`, then frees one page of it (4 KiB): less room than the appends below need. */
function fill(path: string): void {
  const fd = openSync(path, 'w');
  try {
    const chunk = Buffer.alloc(4096, 1);
    for (;;) {
      try {
        if (writeSync(fd, chunk) < chunk.length) break;
      } catch {
        break;
      }
    }
    ftruncateSync(fd, Math.max(0, fstatSync(fd).size - 4096));
  } finally {
    closeSync(fd);
  }
}

describe.runIf(mounted)('on a full disk', () => {
  test('an append the disk cannot hold leaves the file as it was; with room again, the next goes on from it', async () => {
    const sink = join(disk, 'sink');
    mkdirSync(sink, { mode: 0o700 });
    const file = sinkFile(sink, 't1');
    await new FileSink(sink).append('t1', [line(1)]);
    const before = readFileSync(file);
    fill(join(disk, 'filler'));

    await expect(new FileSink(sink).append('t1', [line(2), line(3), line(4)])).rejects.toThrow(/could not append .* left as it was: only \d+ of \d+ bytes/);
    expect(readFileSync(file).equals(before)).toBe(true);
    expect(await new FileSink(sink).last('t1')).toMatchObject({ n: 1 });

    rmSync(join(disk, 'filler'));
    await new FileSink(sink).append('t1', [line(2), line(3), line(4)]);
    expect(numbers(file)).toEqual([1, 2, 3, 4]);
  });
});
