/**
 * The keys directory, its rings and the checkpoint sink against the account next door: nobody but
 * their owner may plant a key the server trusts, read a private key, or redirect the evidence.
 */
import { chmodSync, chownSync, existsSync, lchownSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ensurePrivateDir, StartupRefused } from '../../src/node/datadir.js';
import { FileSink, sinkFile } from '../../src/node/file-sink.js';
import { keyFile, listKeyFile, loadKeys, rotateKeyFile } from '../../src/node/keyfile.js';
import { readConfig } from '../../src/node/config.js';
import type { CheckpointLine } from '../../src/audit/checkpoint.js';

const isRoot = process.getuid?.() === 0;
let dir: string;
const quiet = (): void => {};
const config = (keysDir: string) => readConfig({ WARRANT_KEYS_DIR: keysDir });

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'warrant-owned-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe('key rings', () => {
  it('creates a missing keys directory 0700 and its ring 0600', async () => {
    const keysDir = join(dir, 'a', 'keys');
    const ring = await loadKeys(config(keysDir), quiet);
    expect(ring.activeKid).toBeTruthy();
    expect(statSync(keysDir).mode & 0o777).toBe(0o700);
    expect(statSync(keyFile(keysDir)).mode & 0o777).toBe(0o600);
  });

  it('refuses a keys directory others can write, before reading or creating a ring in it', async () => {
    chmodSync(dir, 0o777);
    await expect(loadKeys(config(dir), quiet)).rejects.toThrow(/keys directory .* is writable by group or others/);
    await expect(rotateKeyFile(dir)).rejects.toThrow(StartupRefused);
    expect(existsSync(keyFile(dir))).toBe(false);
  });

  it('refuses a ring others can read (its private keys) or that is a link', async () => {
    await rotateKeyFile(dir);
    chmodSync(keyFile(dir), 0o644);
    await expect(loadKeys(config(dir), quiet)).rejects.toThrow(/key ring .* is reachable by group or others \(mode 644\)/);
    expect(() => listKeyFile(dir)).toThrow(StartupRefused);

    const elsewhere = mkdtempSync(join(tmpdir(), 'warrant-owned-ring-'));
    try {
      await rotateKeyFile(elsewhere);
      const linked = join(dir, 'linked');
      mkdirSync(linked, { mode: 0o700 });
      symlinkSync(keyFile(elsewhere), keyFile(linked));
      await expect(loadKeys(config(linked), quiet)).rejects.toThrow(/is a symbolic link/);
    } finally {
      rmSync(elsewhere, { recursive: true, force: true });
    }
  });

  it('writes a rotated ring through a new file of its own, never one planted beside it', async () => {
    await rotateKeyFile(dir);
    // The name the ring's temporary file used to have, planted writable by anyone.
    const planted = `${keyFile(dir)}.tmp`;
    writeFileSync(planted, 'planted\n', { mode: 0o666 });
    chmodSync(planted, 0o666);
    const kid = await rotateKeyFile(dir);
    expect(readFileSync(planted, 'utf8')).toBe('planted\n');
    expect(statSync(keyFile(dir)).mode & 0o777).toBe(0o600);
    expect(listKeyFile(dir).find((k) => k.active)?.kid).toBe(kid);
  });

  it.skipIf(!isRoot)("refuses a keys directory or ring that is another user's", async () => {
    await rotateKeyFile(dir);
    chownSync(keyFile(dir), 65534, 65534);
    await expect(loadKeys(config(dir), quiet)).rejects.toThrow(/key ring .* belongs to uid 65534/);
    chownSync(keyFile(dir), 0, 0);
    chownSync(dir, 65534, 65534);
    await expect(loadKeys(config(dir), quiet)).rejects.toThrow(/keys directory .* belongs to uid 65534/);
  });
});

describe('the checkpoint sink', () => {
  const line = { n: 1, jws: 'eyJ.x.y', consistency: [] } as unknown as CheckpointLine;

  it('refuses a directory others can write', async () => {
    chmodSync(dir, 0o777);
    await expect(new FileSink(dir).append('t1', [line])).rejects.toThrow(/checkpoint directory .* is writable by group or others/);
    expect(existsSync(sinkFile(dir, 't1'))).toBe(false);
  });

  it('never appends through a link planted as a tenant file', async () => {
    const victim = join(dir, 'victim');
    writeFileSync(victim, 'untouched\n');
    const sink = join(dir, 'sink');
    mkdirSync(sink, { mode: 0o700 });
    symlinkSync(victim, sinkFile(sink, 't1'));
    await expect(new FileSink(sink).append('t1', [line])).rejects.toThrow(/checkpoint file .* is a symbolic link/);
    expect(readFileSync(victim, 'utf8')).toBe('untouched\n');
  });

  it('never appends to a tenant file planted writable by others', async () => {
    const sink = join(dir, 'sink');
    mkdirSync(sink, { mode: 0o700 });
    writeFileSync(sinkFile(sink, 't1'), '');
    chmodSync(sinkFile(sink, 't1'), 0o666);
    await expect(new FileSink(sink).append('t1', [line])).rejects.toThrow(/checkpoint file .* is writable by group or others \(mode 666\)/);
    // Nor is its last line taken as the last checkpoint published.
    await expect(new FileSink(sink).last('t1')).rejects.toThrow(/checkpoint file .* is writable by group or others/);
    expect(readFileSync(sinkFile(sink, 't1'), 'utf8')).toBe('');
  });

  it('never reads or writes outside its directory, whatever tenant id the database gives', async () => {
    // Tenant ids come from the database: whoever can write it can name a tenant '../x' or 'a/../b'.
    const sink = join(dir, 'sink');
    mkdirSync(sink, { mode: 0o700 });
    await new FileSink(sink).append('t1', [line]);
    for (const id of ['../escaped', 'sub/../t1', '.', '']) {
      await expect(new FileSink(sink).append(id, [line])).rejects.toThrow(/tenant id/);
      await expect(new FileSink(sink).last(id)).rejects.toThrow(/tenant id/);
    }
    expect(existsSync(join(dir, 'escaped.jsonl'))).toBe(false);
    expect(readFileSync(sinkFile(sink, 't1'), 'utf8').split('\n')).toHaveLength(2);
  });

  it('appends to a tenant file of its own, created 0600', async () => {
    const sink = join(dir, 'sink');
    mkdirSync(sink, { mode: 0o700 });
    await new FileSink(sink).append('t1', [line]);
    expect(statSync(sinkFile(sink, 't1')).mode & 0o777).toBe(0o600);
    expect(await new FileSink(sink).last('t1')).toMatchObject({ n: 1 });
  });
});

describe('the directories above', () => {
  // Whoever can rename entries in a directory above the keys, checkpoint or data directory can move
  // it aside and put their own in its place, checks and all.
  const keysUnder = (parent: string): string => {
    const keysDir = join(parent, 'keys');
    mkdirSync(keysDir, { recursive: true, mode: 0o700 });
    return keysDir;
  };

  it('refuses a keys, checkpoint or data directory under one others can write, before using it', async () => {
    const open = join(dir, 'open');
    mkdirSync(open);
    chmodSync(open, 0o777);
    const keysDir = keysUnder(open);
    await expect(loadKeys(config(keysDir), quiet)).rejects.toThrow(/keys directory .* lies under .*open, which group or others can write \(mode 777\)/);
    expect(existsSync(keyFile(keysDir))).toBe(false);
    await expect(new FileSink(keysDir).append('t1', [{ n: 1, jws: 'eyJ.x.y', consistency: [] }])).rejects.toThrow(/checkpoint directory .* lies under/);
    expect(() => ensurePrivateDir(join(open, 'data'))).toThrow(/data directory .* lies under .*open, which group or others can write/);
    expect(existsSync(join(open, 'data'))).toBe(false);
  });

  it('accepts one that is sticky (like /tmp), where only an entry’s owner may rename it', async () => {
    const sticky = join(dir, 'sticky');
    mkdirSync(sticky);
    chmodSync(sticky, 0o1777);
    const ring = await loadKeys(config(keysUnder(sticky)), quiet);
    expect(ring.activeKid).toBeTruthy();
    ensurePrivateDir(join(sticky, 'data'));
  });

  it('refuses one reached through a link whose target lies under a directory others can write', async () => {
    const open = join(dir, 'open');
    keysUnder(join(open, 'real'));
    chmodSync(open, 0o777);
    symlinkSync(join(open, 'real'), join(dir, 'link'));
    await expect(loadKeys(config(join(dir, 'link', 'keys')), quiet)).rejects.toThrow(/lies under .*open, which group or others can write/);
  });

  it('refuses one reached through a link that lies in a directory others can write', async () => {
    // safe/ln -> open/hop -> real: neither the path as written nor the real path passes through
    // open, but whoever writes open can point hop elsewhere.
    const open = join(dir, 'open');
    mkdirSync(open);
    chmodSync(open, 0o777);
    keysUnder(join(dir, 'real'));
    symlinkSync(join(dir, 'real'), join(open, 'hop'));
    mkdirSync(join(dir, 'safe'));
    symlinkSync(join(open, 'hop'), join(dir, 'safe', 'ln'));
    await expect(loadKeys(config(join(dir, 'safe', 'ln', 'keys')), quiet)).rejects.toThrow(/lies under .*open, which group or others can write/);
  });

  it.skipIf(!isRoot)("refuses one reached through another user's link, even in a sticky directory", async () => {
    const sticky = join(dir, 'sticky');
    mkdirSync(sticky);
    chmodSync(sticky, 0o1777);
    keysUnder(join(dir, 'real'));
    symlinkSync(join(dir, 'real'), join(sticky, 'ln'));
    lchownSync(join(sticky, 'ln'), 1234, 1234);
    await expect(loadKeys(config(join(sticky, 'ln', 'keys')), quiet)).rejects.toThrow(/lies under .*ln, a link that belongs to uid 1234/);
  });

  it('follows relative links and .. in their targets as the kernel does', async () => {
    keysUnder(join(dir, 'real'));
    mkdirSync(join(dir, 'a', 'b'), { recursive: true });
    symlinkSync('../../real', join(dir, 'a', 'b', 'up'));
    const ring = await loadKeys(config(join(dir, 'a', 'b', 'up', 'keys')), quiet);
    expect(ring.activeKid).toBeTruthy();
  });

  it.skipIf(!isRoot)("refuses one under another user's directory", async () => {
    const theirs = join(dir, 'theirs');
    const keysDir = keysUnder(theirs);
    chownSync(theirs, 65534, 65534);
    await expect(loadKeys(config(keysDir), quiet)).rejects.toThrow(/lies under .*theirs, which belongs to uid 65534/);
  });
});
