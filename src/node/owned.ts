/**
 * Directories and files only their owner can change: the keys directory and its rings, the checkpoint
 * sink. Whoever can write a key ring can make the server trust their key (and then sign any
 * capability); whoever can write the sink can rewrite the evidence the audit is checked against. So
 * such a directory must be this user's, a real directory (not a link), and not writable by group or
 * others; a ring must be this user's regular file, closed to group and others, and a sink's file this
 * user's regular file, closed to their writes; both checked on the file opened. Readable is allowed
 * where nothing secret is (a sink's checkpoints are public; a 0755 keys directory lists only names).
 */
import { closeSync, constants, fstatSync, fsyncSync, lstatSync, mkdirSync, openSync, renameSync, unlinkSync, writeSync, type Stats } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { checkAncestors, StartupRefused } from './datadir.js';

function lstatOrNull(path: string): Stats | null {
  try {
    return lstatSync(path);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw e;
  }
}

function ownerProblem(st: Stats): string | null {
  const uid = process.getuid?.();
  return uid !== undefined && st.uid !== uid ? `belongs to uid ${st.uid}, not to this user (uid ${uid})` : null;
}

/**
 * Creates `dir` (and missing parents) 0700 when absent; otherwise refuses (StartupRefused) a link, a
 * non-directory, another user's directory or one group or others can write; and, either way, one
 * under a directory another user can write (checkAncestors). `what` names it in the message.
 */
export function ensureOwnDir(dir: string, what: string): void {
  let st = lstatOrNull(dir);
  if (st === null) {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    st = lstatSync(dir);
  }
  checkAncestors(dir, what);
  if (st.isSymbolicLink()) throw new StartupRefused(`${what} ${dir} is a symbolic link; give its real path`);
  if (!st.isDirectory()) throw new StartupRefused(`${what} ${dir} is not a directory`);
  const owner = ownerProblem(st);
  if (owner !== null) throw new StartupRefused(`${what} ${dir} ${owner}: whoever owns it can replace what is in it. Use a directory of your own`);
  if ((st.mode & 0o022) !== 0)
    throw new StartupRefused(`${what} ${dir} is writable by group or others, who could replace what is in it. Fix: chmod go-w '${dir}'`);
}

/**
 * Opens `path` (`flags`, plus O_NOFOLLOW) and returns the descriptor once the file it names is shown
 * to be fine; refuses (StartupRefused) a link, anything but a regular file, another user's file, or one
 * open to group or others (`secret`: any permission bit; else a write bit). Absent is fine: null. The
 * checks are made on the open file (fstat), so what is read or written is the file that was checked,
 * not whatever a racing process put at `path` after a check by name.
 */
export function openOwnFile(path: string, what: string, secret: boolean, flags: number = constants.O_RDONLY, mode = 0o600): number | null {
  let fd: number;
  try {
    // O_NONBLOCK: a FIFO planted at `path` must be refused below, not hang the open.
    fd = openSync(path, flags | constants.O_NOFOLLOW | constants.O_NONBLOCK, mode);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return null;
    if (code === 'ELOOP') throw new StartupRefused(`${what} ${path} is a symbolic link; refusing to follow it`);
    throw e;
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw new StartupRefused(`${what} ${path} is not a regular file`);
    const owner = ownerProblem(st);
    if (owner !== null) throw new StartupRefused(`${what} ${path} ${owner}: whoever owns it can change it`);
    if ((st.mode & (secret ? 0o077 : 0o022)) !== 0)
      throw new StartupRefused(
        `${what} ${path} is ${secret ? 'reachable' : 'writable'} by group or others (mode ${(st.mode & 0o777).toString(8)}). Fix: chmod go-${secret ? 'rwx' : 'w'} '${path}'`,
      );
  } catch (e) {
    closeSync(fd);
    throw e;
  }
  return fd;
}

/**
 * Writes all of `bytes` to the open file `name`, or throws. A full disk takes part of a write without
 * an error: `writeSync` returns the bytes it wrote, and the rest would be silently lost.
 */
export function writeWhole(fd: number, bytes: Buffer, name: string): void {
  const written = writeSync(fd, bytes);
  if (written !== bytes.length) throw new Error(`only ${written} of ${bytes.length} bytes of ${name} could be written (is its disk full?)`);
}

/**
 * Writes `text` to a new file in `path`'s directory under an unguessable name, created exclusively
 * (never an existing file, never through a link) with `mode`, and returns that name: the caller
 * renames or links it into place, so a reader sees the old file or the whole new one.
 */
export function writeExclusive(path: string, text: string, mode: number): string {
  const tmp = `${path}.${randomBytes(9).toString('base64url')}.tmp`;
  const fd = openSync(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, mode);
  try {
    // Cut short, the ring renamed into place would replace the whole one (its private keys lost) with
    // a file that no longer loads.
    writeWhole(fd, Buffer.from(text), tmp);
    fsyncSync(fd); // a crash after the rename must not leave an empty ring in place
  } catch (e) {
    closeSync(fd);
    unlinkSync(tmp);
    throw e;
  }
  closeSync(fd);
  return tmp;
}

/** `writeExclusive` then rename over `path`. */
export function replaceFile(path: string, text: string, mode: number): void {
  const tmp = writeExclusive(path, text, mode);
  try {
    renameSync(tmp, path);
  } catch (e) {
    unlinkSync(tmp);
    throw e;
  }
}
