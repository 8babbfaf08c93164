/**
 * Runs `npx warrant` (bin/warrant.mjs) as a real process, with only PATH and HOME from this
 * environment besides `env`, and reads its exit code and standard output (parsed when it is JSON).
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';

const ROOT = join(import.meta.dirname, '..', '..');

export interface Ran {
  readonly code: number | null;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- the CLI's JSON is read freely
  readonly json: any;
  readonly stdout: string;
}

export function warrant(args: string[], env: Record<string, string>, stdin = ''): Promise<Ran> {
  const child = spawn(process.execPath, [join(ROOT, 'bin/warrant.mjs'), ...args], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', ...env },
  });
  let stdout = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stdin.end(stdin);
  return new Promise((done, fail) => {
    child.once('error', fail);
    child.once('close', (code) => {
      let json: unknown = null;
      try {
        json = JSON.parse(stdout);
      } catch {
        // not JSON (delegated commands print lines)
      }
      done({ code, json, stdout });
    });
  });
}
