/**
 * What an approval leaves behind beyond its decision (issue 14): the audit row's detail keeps the
 * target as the caller sent it and the args, bounded; a replayed `call_id` answer says it is one.
 */
import type { ApproveBody } from '../core/schemas.js';
import type { StoredResponse } from '../store/idempotency.js';
import type { Reply } from './authority.js';

/** Longest string an approve audit row keeps of the requested target and of each argument. */
export const AUDIT_STRING_CHARS = 1024;

/** `s` cut to AUDIT_STRING_CHARS; the row says when it was cut, so nobody mistakes it for the whole. */
function bounded(s: string): { value: string; truncated: boolean } {
  return s.length <= AUDIT_STRING_CHARS ? { value: s, truncated: false } : { value: s.slice(0, AUDIT_STRING_CHARS), truncated: true };
}

/**
 * An approve row's detail: the target as the caller sent it (before resolution, so `../../etc/passwd`
 * shows as sent; the resolved one is the row's `target`) and the args, strings bounded; the deny
 * message when denied.
 */
export function approveDetail(
  req: { requested: NonNullable<ApproveBody['target']> | null; args: Readonly<Record<string, unknown>> },
  message: string | null,
): Record<string, unknown> {
  let truncated = false;
  const cut = (v: unknown): unknown => {
    if (typeof v !== 'string') return v;
    const b = bounded(v);
    truncated ||= b.truncated;
    return b.value;
  };
  const requested = req.requested === null ? null : Object.fromEntries(Object.entries(req.requested).map(([k, v]) => [k, cut(v)]));
  // Nested values of a call by tool are kept as a whole only when short; a long one is cut as its JSON text.
  const args = Object.fromEntries(
    Object.entries(req.args).map(([k, v]) => [
      k,
      typeof v === 'object' && v !== null && JSON.stringify(v).length > AUDIT_STRING_CHARS ? cut(JSON.stringify(v)) : cut(v),
    ]),
  );
  return {
    ...(message === null ? {} : { message }),
    requested_target: requested,
    ...(Object.keys(args).length === 0 ? {} : { args }),
    ...(truncated ? { truncated: true } : {}),
  };
}

/**
 * A dry run's marks in its row's detail (hashed with the row, so a receipt shows them too): it
 * charged nothing, and the call_id it named, kept here and not in the row's `call_id`, was not
 * claimed. An auditor tells a dry-run grant from a real one by `dry_run`.
 */
export function dryRunDetail(callId: string | null): Record<string, unknown> {
  return { dry_run: true, ...(callId === null ? {} : { call_id: callId }) };
}

/**
 * A repeated `call_id` gets the first decision as it was made then, even if the capability was
 * revoked since: marked `replayed`, with the time it was decided (null for decisions stored before
 * that time was kept).
 */
export function replayedApproval(stored: StoredResponse): Reply {
  const body = stored.body as Record<string, unknown>;
  return { status: stored.status, body: { ...body, replayed: true, decided_at: body.decided_at ?? null } };
}
