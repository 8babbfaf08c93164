/**
 * The re-seal sweep (README "Keys and rotation"). A seal names the signing key it was made under
 * and holds only while that key stays in the ring with its private part (src/service/seal.ts). Tool
 * versions are kept for good, so once an old key was retired every tool it sealed would answer 503
 * until registered again. The sweep takes each tool version and each pending approval whose seal
 * holds under another key of the ring and seals it again under the active key: retiring the old key
 * once its tokens have expired then strands none of them. Settled approvals and stored idempotent
 * answers are left as they are: each answers only repeats of a call whose token expires before its
 * key may be retired, and its decision is in the audit.
 *
 * Only a seal that holds is renewed: renewing one that does not would vouch for whatever a database
 * writer put in the row. Each row is written by a compare-and-set on its old seal, and the new seal
 * covers the content that was verified, not the row as the update finds it: a row changed in
 * between holds neither seal and stays refused. Only `seal` is written, never a version (the
 * rollback check of src/service/tools.ts reads versions). Instances that start together sweep
 * alike; the compare-and-set lets one of them write each row.
 *
 * It writes no audit row: it decides nothing and changes nothing a seal covers, and each row it
 * renews already has the audit row of the decision that wrote it. The caller logs the counts.
 *
 * The Node server runs it at each start (src/node/main.ts), `npm run keys -- reseal` on demand; the
 * Workers entry never does (src/worker.ts says why).
 */
import { and, asc, eq, gt, isNotNull, sql, type AnyColumn, type SQL } from 'drizzle-orm';
import type { KeyRing } from '../crypto/keys.js';
import { approvals, tools } from '../store/schema.js';
import type { Db } from '../store/store.js';
import type { ApprovalRecord, ToolRecord } from '../store/tools.js';
import { approvalParts } from './approvals.js';
import { ResponseSealer } from './seal.js';
import { toolParts } from './tools.js';
import { errorFields } from '../store/error-fields.js';

/** Rows read at a time. */
const PAGE = 256;

export interface Resealed {
  /** Tool versions sealed again under the active key. */
  readonly tools: number;
  /** Pending approvals sealed again under the active key. */
  readonly approvals: number;
  /** Rows sealed under another kid whose seal does not hold (changed in the database, or its key retired already): left as they are, still refused. */
  readonly notHeld: number;
}

/** The seal names a kid (all before its last dot) other than `kid`. */
const notUnder = (seal: AnyColumn, kid: string): SQL => sql`regexp_replace(${seal}, '[.][^.]*$', '') <> ${kid}`;

/** Seals every tool version and pending approval held by an older key of `keys` again under its active key. */
export async function resealAll(db: Db, keys: KeyRing): Promise<Resealed> {
  const sealer = await ResponseSealer.from(keys);
  const kid = sealer.activeKid;
  const t = await sweep<ToolRecord>(
    'tool',
    sealer,
    (after) =>
      db
        .select()
        .from(tools)
        .where(
          and(
            isNotNull(tools.seal),
            notUnder(tools.seal, kid),
            after && sql`(${tools.tenantId}, ${tools.name}, ${tools.version}) > (${after.tenantId}, ${after.name}, ${after.version})`,
          ),
        )
        .orderBy(asc(tools.tenantId), asc(tools.name), asc(tools.version))
        .limit(PAGE),
    toolParts,
    async (r, seal) =>
      (
        await db
          .update(tools)
          .set({ seal })
          .where(and(eq(tools.tenantId, r.tenantId), eq(tools.name, r.name), eq(tools.version, r.version), eq(tools.seal, r.seal as string)))
          .returning({ version: tools.version })
      ).length,
  );
  const a = await sweep<ApprovalRecord>(
    'approval',
    sealer,
    (after) =>
      db
        .select()
        .from(approvals)
        .where(and(eq(approvals.state, 'pending'), isNotNull(approvals.seal), notUnder(approvals.seal, kid), after && gt(approvals.id, after.id)))
        .orderBy(asc(approvals.id))
        .limit(PAGE),
    approvalParts,
    async (r, seal) =>
      (
        await db
          .update(approvals)
          .set({ seal })
          .where(and(eq(approvals.id, r.id), eq(approvals.state, 'pending'), eq(approvals.seal, r.seal as string)))
          .returning({ id: approvals.id })
      ).length,
  );
  return { tools: t.resealed, approvals: a.resealed, notHeld: t.notHeld + a.notHeld };
}

/**
 * resealAll with its counts logged (a warning when some rows do not hold), or its failure: it never
 * rejects, and a failed sweep leaves the rows it had not reached as they were (the next one takes them).
 */
export async function resealLogged(db: Db, keys: KeyRing, log: (entry: Record<string, unknown>) => void): Promise<void> {
  try {
    const n = await resealAll(db, keys);
    log({ level: n.notHeld > 0 ? 'warn' : 'info', msg: SWEPT, kid: keys.activeKid, tools: n.tools, approvals: n.approvals, not_held: n.notHeld });
  } catch (e) {
    log({ level: 'warn', msg: 'the re-seal sweep failed; seals of older keys hold while those keys stay in the ring', ...errorFields(e) });
  }
}

/** The log line of a sweep's counts. */
export const SWEPT = 'sealed again under the active signing key';

/** Pages through `read` (rows after the last one read), sealing again each row whose seal holds; `write` answers how many rows it changed. */
async function sweep<R extends { readonly seal: string | null }>(
  kind: string,
  sealer: ResponseSealer,
  read: (after: R | undefined) => Promise<R[]>,
  parts: (r: R) => unknown[],
  write: (r: R, seal: string) => Promise<number>,
): Promise<{ resealed: number; notHeld: number }> {
  let resealed = 0;
  let notHeld = 0;
  let after: R | undefined;
  for (;;) {
    const rows = await read(after);
    for (const r of rows) {
      const p = parts(r);
      if (sealer.holdsOf(kind, p, r.seal)) resealed += await write(r, sealer.sealOf(kind, p));
      else notHeld++;
    }
    if (rows.length < PAGE) return { resealed, notHeld };
    after = rows[rows.length - 1];
  }
}
