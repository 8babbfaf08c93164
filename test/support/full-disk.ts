/**
 * A disk of its own to fill, for what a full disk does to the files Warrant writes: a tmpfs mounted on
 * a temporary directory. Only root can mount one (CI runs as root on the team's machine); elsewhere
 * `mounted` is false and the tests that need it are skipped.
 */
import { execFileSync } from 'node:child_process';
import { closeSync, fstatSync, ftruncateSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface FullDisk {
  /** The mount point. */
  readonly dir: string;
  readonly mounted: boolean;
  /** Fills the disk with the file `name`, then frees one page of it (4 KiB): a write longer than that is cut short. */
  fill(name: string): void;
  /** Unmounts the tmpfs and removes its directory. */
  remove(): void;
}

export function fullDisk(size = '128k'): FullDisk {
  const dir = mkdtempSync(join(tmpdir(), 'warrant-disk-'));
  let mounted = false;
  if (process.getuid?.() === 0) {
    try {
      execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${size},mode=0700`, 'tmpfs', dir], { stdio: 'ignore' });
      mounted = true;
    } catch {
      // not allowed here (e.g. a container without CAP_SYS_ADMIN)
    }
  }
  return {
    dir,
    mounted,
    fill(name) {
      const fd = openSync(join(dir, name), 'w');
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
    },
    remove() {
      if (mounted) execFileSync('umount', [dir]);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
