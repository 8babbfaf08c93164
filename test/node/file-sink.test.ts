/**
 * The checkpoint sink's file stays whole lines of checkpoints whatever happens to an append. A crash
 * can leave part of a line; kept at the end, it would make every later round of the tenant fail on the
 * file's last line and stop its checkpoints for good. (A full disk: full-disk.test.ts.)
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, expect, test } from 'vitest';
import { lineText, parseLines, type CheckpointLine } from '../../src/audit/checkpoint.js';
import { FileSink, sinkFile } from '../../src/node/file-sink.js';

const line = (n: number): CheckpointLine => ({ n, jws: `eyJ.${'x'.repeat(300)}.y`, consistency: [] });
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
