/**
 * The embedded store's data directory: private to its owner (0700, nothing in it reachable by group
 * or others, no symbolic link in it or as it) and held by one process at a time (a lock file naming
 * the holder's pid). PGlite keeps the WAL and the commit log there; anyone who can write them can
 * undo a committed revocation, and two processes on one directory fork the audit chain.
 */
import { closeSync, constants, lstatSync, mkdirSync, openSync, readFileSync, readdirSync, readlinkSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';

/** A refusal to start, with what to do about it; the entries print the message and exit with `exitCode`. */
export class StartupRefused extends Error {
  constructor(
    message: string,
    readonly exitCode = 2,
  ) {
    super(message);
  }
}

/** Links followed at most while walking a path, as Linux's own limit (ELOOP after 40). */
const MAX_LINKS = 40;

/**
 * Refuses (StartupRefused) a directory that another user can swap from above: whoever can rename
 * entries in a directory over it, or replace a link on the way to it, can put their own in its
 * place, checks and all. The path to `dir`'s parent is walked as the kernel resolves it, from `/`,
 * one name at a time: every directory a name is looked up in must belong to root or this user, and
 * one that group or others can write must be sticky (like /tmp: there only an entry's owner may
 * rename it); every link passed must belong to root or this user too, and its target is walked on
 * from the directory that holds it. `what` names `dir` in the message.
 */
export function checkAncestors(dir: string, what: string): void {
  const uid = process.getuid?.();
  if (uid === undefined) return;
  const refuse = (p: string, why: string, fix: string): never => {
    throw new StartupRefused(`${what} ${dir} lies under ${p}, ${why}: they can put another directory in its place. Fix: ${fix}`);
  };
  const checkDir = (p: string): void => {
    const st = lstatSync(p);
    if (st.uid !== 0 && st.uid !== uid) refuse(p, `which belongs to uid ${st.uid}`, `keep it under directories that only root or this user (uid ${uid}) own`);
    if ((st.mode & 0o022) !== 0 && (st.mode & 0o1000) === 0)
      refuse(p, `which group or others can write (mode ${(st.mode & 0o777).toString(8)})`, `chmod go-w '${p}'`);
  };
  let cur = '/';
  checkDir(cur);
  const names = resolve(dir).split('/').slice(1, -1);
  for (let links = 0, name = names.shift(); name !== undefined; name = names.shift()) {
    if (name === '' || name === '.') continue;
    if (name === '..') {
      cur = dirname(cur); // checked on the way down
      continue;
    }
    const next = join(cur, name);
    const st = lstatSync(next);
    if (st.isSymbolicLink()) {
      if (st.uid !== 0 && st.uid !== uid) refuse(next, `a link that belongs to uid ${st.uid}`, `give the real path`);
      if (++links > MAX_LINKS) refuse(next, 'a chain of more than 40 links', 'give the real path');
      const target = readlinkSync(next);
      if (target.startsWith('/')) cur = '/';
      names.unshift(...target.split('/'));
      continue;
    }
    checkDir(next);
    cur = next;
  }
}

const LOCK_FILE = 'warrant.lock';
/** Locks this process holds, by lock file path: the server takes its lock before opening, and opening asks again. */
const held = new Map<string, () => void>();

/**
 * Refuses a data directory under one another user can write (checkAncestors). Creates `dir` 0700
 * when absent; otherwise checks that it and everything in it is closed to group and others, that neither it nor anything in it is a symbolic link, and that it is owned by this
 * user. Throws `StartupRefused` (naming the path and saying how to fix it) when not.
 */
export function ensurePrivateDir(dir: string): void {
  checkAncestors(dir, 'the data directory');
  let created = false;
  try {
    mkdirSync(dir, { mode: 0o700 });
    created = true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
  }
  if (created) return;
  const top = lstatSync(dir);
  // Refused rather than followed: whoever controls the link or its target's path controls the data.
  if (top.isSymbolicLink())
    throw new StartupRefused(
      `the data directory ${dir} is a symbolic link (to ${linkTarget(dir)}): its target is not checked and may be swapped. ` +
        `Fix: set WARRANT_DATA_DIR to the real directory`,
    );
  if (!top.isDirectory()) throw new StartupRefused(`the data directory ${dir} is not a directory`);
  const uid = process.getuid?.();
  if (uid !== undefined && top.uid !== uid)
    throw new StartupRefused(`the data directory ${dir} belongs to uid ${top.uid}, not to this user (uid ${uid}); run as its owner`);
  const { open, links } = reachableByOthers(dir);
  if (links.length > 0) {
    throw new StartupRefused(
      `the data directory ${dir} holds ${links.length === 1 ? 'a symbolic link' : `${links.length} symbolic links, e.g. the symbolic link`} ` +
        `${links[0]} (to ${linkTarget(links[0] as string)}): what it points to lies outside the directory's checks, where another user may ` +
        `write it. Fix: remove it; the data directory holds its files itself`,
    );
  }
  if (open.length > 0) {
    throw new StartupRefused(
      `the data directory ${dir} is reachable by other users (${open.length} entr${open.length === 1 ? 'y' : 'ies'} with group or other ` +
        `permissions, e.g. ${open[0]}): anyone who can write its WAL or commit log can undo committed decisions. ` +
        `Fix: chmod -R go-rwx '${dir}'`,
    );
  }
}

/** Where a link points, for a message; `?` when it is gone already. */
function linkTarget(path: string): string {
  try {
    return readlinkSync(path);
  } catch {
    return '?';
  }
}

/**
 * Paths under `dir` (itself included) that others may reach, depth first, without following links:
 * `open`, with any group/other permission bit; `links`, symbolic links, whose own mode means nothing
 * and whose targets lie outside this walk (another user's directory, or one swapped in later).
 */
export function reachableByOthers(dir: string): { open: string[]; links: string[] } {
  const open: string[] = [];
  const links: string[] = [];
  const stack = [dir];
  for (let path = stack.pop(); path !== undefined; path = stack.pop()) {
    const st = lstatSync(path);
    if (st.isSymbolicLink()) links.push(path);
    else if ((st.mode & 0o077) !== 0) open.push(path);
    if (st.isDirectory()) for (const name of readdirSync(path)) stack.push(join(path, name));
  }
  return { open, links };
}

/** The process holding a data directory, as its lock file says. */
export interface LockHolder {
  readonly pid: number;
  readonly command: string;
}

function readHolder(path: string): LockHolder | null {
  try {
    const v = JSON.parse(readFileSync(path, 'utf8')) as Partial<LockHolder>;
    return typeof v.pid === 'number' && Number.isInteger(v.pid) && v.pid > 0 ? { pid: v.pid, command: String(v.command ?? '?') } : null;
  } catch {
    return null;
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    // EPERM: it exists but belongs to someone else, so it is alive.
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Creates the lock file only if absent (O_EXCL), holding our pid; false when it exists. */
function tryCreate(path: string, command: string): boolean {
  let fd: number;
  try {
    fd = openSync(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, 0o600);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw e;
  }
  try {
    writeSync(fd, `${JSON.stringify({ pid: process.pid, command })}\n`);
  } finally {
    closeSync(fd);
  }
  return true;
}

/**
 * Takes the exclusive lock of a data directory for this process, before anything opens it. A lock
 * left by a process that no longer exists is taken over. Returns the release function (also run at
 * exit). Throws `StartupRefused` (exit 2) naming the holder when another live process has it.
 *
 * Node has no flock(2) without a native addon, hence a pid file. What it cannot rule out: two
 * processes taking over the same stale lock in the same instant, and a stale lock whose pid was
 * reused by an unrelated process (then the message says to remove the file).
 */
export function lockDataDir(dir: string, command: string): () => void {
  const path = join(dir, LOCK_FILE);
  const own = held.get(path);
  if (own !== undefined) return own;
  for (let attempt = 0; attempt < 3; attempt += 1) {
    if (tryCreate(path, command)) {
      const release = releaser(path);
      held.set(path, release);
      return release;
    }
    const holder = readHolder(path);
    if (holder !== null && holder.pid !== process.pid && isAlive(holder.pid)) {
      throw new StartupRefused(
        `the data directory ${dir} is in use by process ${holder.pid} (${holder.command}); one process at a time may open an embedded ` +
          `database. Stop it first, or manage tenants and keys through its admin API. If process ${holder.pid} is not Warrant, remove ${path}`,
      );
    }
    // A file without a pid is being written right now, unless it is old (a crash between create and write).
    if (holder === null && Date.now() - mtimeMs(path) < 10_000) throw new StartupRefused(`the data directory ${dir} is being opened by another process`);
    // Stale: its process is gone. Take it over (only if it is still the same stale file).
    if (holder === null || readHolder(path)?.pid === holder.pid) unlinkQuietly(path);
  }
  throw new StartupRefused(`could not take the lock ${path}; another process keeps taking it`);
}

function mtimeMs(path: string): number {
  try {
    return statSync(path).mtimeMs;
  } catch {
    return 0;
  }
}

function releaser(path: string): () => void {
  let holding = true;
  const release = (): void => {
    if (!holding) return;
    holding = false;
    held.delete(path);
    if (readHolder(path)?.pid === process.pid) unlinkQuietly(path);
  };
  process.once('exit', release);
  return release;
}

function unlinkQuietly(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    // already gone
  }
}
