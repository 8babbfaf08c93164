/**
 * Key rings for the Node entry. Token signing keys: `WARRANT_SIGNING_KEYS` (a JWK set as JSON) when
 * set; else the ring in `<keys dir>/signing-keys.json`, generated on first start (git-ignored, mode
 * 0600). Audit keys, which sign only audit checkpoints: `WARRANT_AUDIT_KEYS`, else
 * `<keys dir>/audit-keys.json`, the same way. Two rings, so a leaked token key cannot sign a
 * checkpoint and the audit key can be held apart (another host, an HSM-backed signer later).
 */
import { closeSync, linkSync, readFileSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import type { JWK } from 'jose';
import { generateSigningJwk, loadKeyRing, rotate, type KeyRing } from '../crypto/keys.js';
import type { Config } from './config.js';
import { ensureOwnDir, openOwnFile, replaceFile, writeExclusive } from './owned.js';

/** Which ring: the token signing keys or the audit checkpoint keys. */
export type RingKind = 'signing' | 'audit';

const FILES: Record<RingKind, string> = { signing: 'signing-keys.json', audit: 'audit-keys.json' };

export const keyFile = (keysDir: string, kind: RingKind = 'signing'): string => join(keysDir, FILES[kind]);

const KEYS_DIR = 'the keys directory';
const RING = 'the key ring';

const text = (set: { keys: JWK[] }): string => `${JSON.stringify(set, null, 2)}\n`;

/** Creates the file only if it does not exist yet (link is atomic); false when another process won. */
function createSet(path: string, set: { keys: JWK[] }): boolean {
  const tmp = writeExclusive(path, text(set), 0o600);
  try {
    linkSync(tmp, path);
    return true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw e;
  } finally {
    unlinkSync(tmp);
  }
}

/** The ring in `path`, once it is shown to be this user's private file; null when there is none. */
function readSet(path: string): { keys: JWK[] } | null {
  const fd = openOwnFile(path, RING, true);
  if (fd === null) return null;
  try {
    return JSON.parse(readFileSync(fd, 'utf8')) as { keys: JWK[] };
  } finally {
    closeSync(fd);
  }
}

export async function loadKeys(config: Config, log: (e: Record<string, unknown>) => void, kind: RingKind = 'signing'): Promise<KeyRing> {
  const given = kind === 'signing' ? config.signingKeys : config.auditKeys;
  if (given !== undefined) {
    let set: unknown;
    try {
      set = JSON.parse(given);
    } catch {
      throw new Error(`${kind === 'signing' ? 'WARRANT_SIGNING_KEYS' : 'WARRANT_AUDIT_KEYS'} is not valid JSON (expected a JWK set)`);
    }
    return loadKeyRing(set as { keys?: unknown });
  }
  ensureOwnDir(config.keysDir, KEYS_DIR);
  const path = keyFile(config.keysDir, kind);
  let set = readSet(path);
  if (set === null) {
    // Instances starting together (start:cluster) must end up with one ring, not one each.
    if (createSet(path, { keys: [await generateSigningJwk()] })) log({ msg: `generated a new ${kind} key`, file: path });
    set = readSet(path);
  }
  if (set === null) throw new Error(`${path} vanished while it was being created`);
  return loadKeyRing(set);
}

/** `npm run keys -- rotate`: append a new active key, keep the old ones to verify. */
export async function rotateKeyFile(keysDir: string, kind: RingKind = 'signing'): Promise<string> {
  ensureOwnDir(keysDir, KEYS_DIR);
  const path = keyFile(keysDir, kind);
  const next = await rotate(readSet(path) ?? { keys: [] });
  replaceFile(path, text(next), 0o600);
  return next.keys[next.keys.length - 1]?.kid as string;
}

export function listKeyFile(keysDir: string, kind: RingKind = 'signing'): { kid: string; active: boolean }[] {
  const keys = readSet(keyFile(keysDir, kind))?.keys ?? [];
  const activeIndex = keys.map((k) => typeof k.d === 'string').lastIndexOf(true);
  return keys.map((k, i) => ({ kid: String(k.kid), active: i === activeIndex }));
}
