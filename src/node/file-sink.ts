/**
 * The checkpoint sink on Node: one append-only JSON-lines file per tenant (`<dir>/<tenant id>.jsonl`,
 * mode 0600 in a 0700 directory), each append fsync'd before it counts. The directory must be this
 * user's and closed to others' writes, and a tenant's file is never opened through a link nor appended
 * to unless it is this user's regular file closed to others' writes: whoever could swap or write either
 * could rewrite or misdirect the evidence (owned.ts). Copy these files off the host
 * (or point the directory at storage the database's administrators cannot write) and the audit holds
 * up against them: `npm run audit -- verify --checkpoints <dir>` checks the database against them.
 */
import { closeSync, constants, fstatSync, fsyncSync, ftruncateSync, readSync } from 'node:fs';
import { join } from 'node:path';
import { lineText, parseLines, type CheckpointLine } from '../audit/checkpoint.js';
import type { CheckpointSink } from '../audit/publish.js';
import { ensureOwnDir, openOwnFile, writeWhole } from './owned.js';

const SINK_DIR = 'the checkpoint directory';
const SINK_FILE = 'the checkpoint file';

/** What a tenant id may be to name a file: ids are `ten_` and base64url, and a checkpoint's tenant is at most 128 characters. */
const FILE_NAME_ID = /^[A-Za-z0-9_-]{1,128}$/;

/**
 * The file that holds a tenant's checkpoints in a sink directory. Tenant ids come from the database,
 * which whoever can write it can make '../x' or 'a/../b': such an id names no file here (it throws),
 * or the evidence would be written outside the directory, or another tenant's file read as this one's.
 */
export function sinkFile(dir: string, tenantId: string): string {
  if (!FILE_NAME_ID.test(tenantId))
    throw new Error(`tenant id ${JSON.stringify(tenantId.slice(0, 140))} is not a file name: the database's tenants were tampered with`);
  return join(dir, `${tenantId}.jsonl`);
}

/** How much of a file's end is read to find its last line: a line is well under 4 KiB. */
const TAIL_BYTES = 16 * 1024;

export class FileSink implements CheckpointSink {
  constructor(private readonly dir: string) {}

  /** Read from the file each time (its tail only): another process may share the directory. */
  async last(tenantId: string): Promise<CheckpointLine | null> {
    return readLastLine(sinkFile(this.dir, tenantId));
  }

  async append(tenantId: string, lines: readonly CheckpointLine[]): Promise<void> {
    const first = lines[0];
    if (first === undefined) return;
    // Appended only right after the file's last line: a process sharing the directory may have
    // appended these already (between its check and this one, two could still race: give each
    // server a directory of its own, README "Audit checkpoints").
    if (first.n !== ((await this.last(tenantId))?.n ?? 0) + 1) return;
    ensureOwnDir(this.dir, SINK_DIR);
    // An existing file must be this user's regular file, closed to others' writes: one planted
    // writable by others (or a FIFO, a device) could be rewritten behind the evidence or misdirect it.
    const path = sinkFile(this.dir, tenantId);
    const fd = openOwnFile(path, SINK_FILE, false, constants.O_RDWR | constants.O_APPEND | constants.O_CREAT, 0o600);
    if (fd === null) throw new Error(`${path} vanished while it was being created`);
    try {
      appendWhole(fd, path, Buffer.from(lines.map((l) => `${lineText(l)}\n`).join('')));
    } finally {
      closeSync(fd);
    }
  }
}

/**
 * Appends `text` (whole lines) to the open file, fsync'd, or leaves the file as it was and throws. A
 * line cut short by a full disk (`writeWhole`), kept, would make the file's last line no checkpoint,
 * and every later round of the tenant fail on it, after the disk has room again too. An unfinished
 * line at the end (`tail`) is cut first.
 */
function appendWhole(fd: number, path: string, text: Buffer): void {
  const size = fstatSync(fd).size;
  const at = size - tail(fd, size).unfinished;
  if (at !== size) ftruncateSync(fd, at);
  try {
    writeWhole(fd, text, path);
    fsyncSync(fd);
  } catch (e) {
    ftruncateSync(fd, at);
    throw new Error(`could not append to ${path}, left as it was: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
  }
}

/**
 * The end of an open file of `size` bytes (its last TAIL_BYTES): the text up to its last newline, and
 * how many bytes follow that newline, an unfinished line (an append cut short by a crash, never fsync'd
 * whole: it does not count, and the next append cuts it). Lines are well under TAIL_BYTES; a longer
 * stretch with no newline is returned as text, for the parse to refuse.
 */
function tail(fd: number, size: number): { text: string; unfinished: number } {
  const length = Math.min(size, TAIL_BYTES);
  const buf = Buffer.alloc(length);
  readSync(fd, buf, 0, length, size - length);
  const newline = buf.lastIndexOf(0x0a);
  if (newline === -1) return length === size ? { text: '', unfinished: size } : { text: buf.toString('utf8'), unfinished: 0 };
  return { text: buf.toString('utf8', 0, newline + 1), unfinished: length - newline - 1 };
}

/** The last checkpoint line of a file, or null when there is no file (or it is empty). */
function readLastLine(path: string): CheckpointLine | null {
  // Held to the same rule as an append: the last line read decides what the database is checked against.
  const fd = openOwnFile(path, SINK_FILE, false);
  if (fd === null) return null;
  try {
    const { text } = tail(fd, fstatSync(fd).size);
    const lastLine = text.trimEnd().split('\n').pop() ?? '';
    if (lastLine === '') return null;
    const parsed = parseLines(lastLine);
    if (!parsed.ok || parsed.lines.length !== 1) throw new Error(`the last line of ${path} is not a checkpoint`);
    return parsed.lines[0] as CheckpointLine;
  } finally {
    closeSync(fd);
  }
}
