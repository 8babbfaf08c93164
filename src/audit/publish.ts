/**
 * Publishing checkpoints outside the database: a sink (on Node, an append-only JSON-lines file per
 * tenant) receives every checkpoint in order, each checked against the one before it. The sink is the
 * copy that whoever can write the database cannot rewrite; so before anything is appended, the
 * database's copy of the sink's last checkpoint must be that same checkpoint. If it is not, or is
 * gone, the database's audit history was rewritten or rolled back: nothing more is appended or signed
 * for that tenant, and the caller raises the alarm.
 */
import type { Db } from '../store/store.js';
import { checkNext, openCheckpoint, type AuditKeys, type CheckpointLine, type Verified } from './checkpoint.js';
import { AuditIntegrityError, checkpointLines } from './checkpointer.js';

/** Where checkpoints go besides the database. */
export interface CheckpointSink {
  /** The last checkpoint this sink holds for the tenant, if any. */
  last(tenantId: string): Promise<CheckpointLine | null>;
  /** Appends checkpoints (in order, each the successor of the last) durably. */
  append(tenantId: string, lines: readonly CheckpointLine[]): Promise<void>;
}

/**
 * Brings the sink up to the database's checkpoints for a tenant; returns how many were appended.
 * Throws AuditIntegrityError when the database's history no longer matches the sink's.
 * `adopted` is told when the sink held nothing for the tenant and the database's checkpoints were
 * taken into it as they stand: expected for a new sink, but if the sink lost its files, a database
 * rolled back (or rewritten and re-signed) since would go unnoticed from here on.
 */
export async function publishCheckpoints(db: Db, sink: CheckpointSink, keys: AuditKeys, tenantId: string, adopted?: (count: number) => void): Promise<number> {
  const last = await sink.last(tenantId);
  const lines = await checkpointLines(db, tenantId, last === null ? 0 : last.n - 1);
  let prev: Verified | null = null;
  if (last !== null) {
    const same = lines.shift();
    if (same === undefined || same.jws !== last.jws) {
      throw new AuditIntegrityError(
        `checkpoint ${last.n} of tenant ${tenantId} in the database is ${same === undefined ? 'gone' : 'not the one exported'}: the audit history in the database was rewritten or rolled back`,
      );
    }
    const opened = await openCheckpoint(keys, last.jws);
    if (!opened.ok) throw new AuditIntegrityError(`the sink's last checkpoint for tenant ${tenantId} does not verify: ${opened.reason}`);
    prev = { payload: opened.payload, jws: last.jws };
  }
  const fresh: CheckpointLine[] = [];
  for (const line of lines) {
    const next = await checkNext(keys, tenantId, prev, line);
    if (typeof next === 'string') throw new AuditIntegrityError(`tenant ${tenantId}: ${next}`);
    fresh.push(line);
    prev = next;
  }
  if (fresh.length > 0) await sink.append(tenantId, fresh);
  if (last === null && fresh.length > 0) adopted?.(fresh.length);
  return fresh.length;
}
