/**
 * The checkpoint sink on Node: one append-only JSON-lines file per tenant (`<dir>/<tenant id>.jsonl`,
 * mode 0600 in a 0700 directory), each append fsync'd before it counts. Copy these files off the host
 * (or point the directory at storage the database's administrators cannot write) and the audit holds
 * up against them: `npm run audit -- verify --checkpoints <dir>` checks the database against them.
 */
import { closeSync, existsSync, fstatSync, fsyncSync, mkdirSync, openSync, readSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { lineText, parseLines, type CheckpointLine } from '../audit/checkpoint.js';
import type { CheckpointSink } from '../audit/publish.js';

/** The file that holds a tenant's checkpoints in a sink directory. */
export const sinkFile = (dir: string, tenantId: string): string => join(dir, `${tenantId}.jsonl`);

/** How much of a file's end is read to find its last line: a line is well under 4 KiB. */
const TAIL_BYTES = 16 * 1024;

export class FileSink implements CheckpointSink {
  /** The last line per tenant, once read or written: the file is read once per process. */
  private readonly lastLines = new Map<string, CheckpointLine | null>();

  constructor(private readonly dir: string) {}

  async last(tenantId: string): Promise<CheckpointLine | null> {
    const known = this.lastLines.get(tenantId);
    if (known !== undefined) return known;
    const line = readLastLine(sinkFile(this.dir, tenantId));
    this.lastLines.set(tenantId, line);
    return line;
  }

  async append(tenantId: string, lines: readonly CheckpointLine[]): Promise<void> {
    if (lines.length === 0) return;
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    const fd = openSync(sinkFile(this.dir, tenantId), 'a', 0o600);
    try {
      writeSync(fd, lines.map((l) => `${lineText(l)}\n`).join(''));
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    this.lastLines.set(tenantId, lines[lines.length - 1] as CheckpointLine);
  }
}

/** The last checkpoint line of a file, or null when there is no file (or it is empty). */
function readLastLine(path: string): CheckpointLine | null {
  if (!existsSync(path)) return null;
  const fd = openSync(path, 'r');
  try {
    const size = fstatSync(fd).size;
    const length = Math.min(size, TAIL_BYTES);
    const buf = Buffer.alloc(length);
    readSync(fd, buf, 0, length, size - length);
    const text = buf.toString('utf8');
    const lastLine = text.trimEnd().split('\n').pop() ?? '';
    if (lastLine === '') return null;
    const parsed = parseLines(lastLine);
    if (!parsed.ok || parsed.lines.length !== 1) throw new Error(`the last line of ${path} is not a checkpoint`);
    return parsed.lines[0] as CheckpointLine;
  } finally {
    closeSync(fd);
  }
}
