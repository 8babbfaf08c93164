/**
 * What an approval leaves behind beyond its decision (issue 14): the audit row's detail keeps the
 * target as the caller sent it and the args, bounded; a replayed `call_id` answer says it is one.
 */
import type { ApproveBody } from '../core/schemas.js';
import { cutAt } from '../core/storable.js';
import type { StoredResponse } from '../store/idempotency.js';
import type { Reply } from './authority.js';

/** Longest string an approve audit row keeps of the requested target and of each argument. */
export const AUDIT_STRING_CHARS = 1024;

/**
 * `s` cut to AUDIT_STRING_CHARS, never through a surrogate pair (half an emoji is a string the store
 * refuses); the row says when it was cut, so nobody mistakes it for the whole.
 */
function bounded(s: string): { value: string; truncated: boolean } {
  return s.length <= AUDIT_STRING_CHARS ? { value: s, truncated: false } : { value: cutAt(s, AUDIT_STRING_CHARS), truncated: true };
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
  // Plain loops, no entries arrays or spreads: this runs on every approval.
  let requested: Record<string, unknown> | null = null;
  if (req.requested !== null) {
    requested = {};
    for (const [k, v] of Object.entries(req.requested)) put(requested, k, cut(v));
  }
  // Nested values of a call by tool are kept as a whole only when short; a long one is cut as its JSON text.
  let args: Record<string, unknown> | null = null;
  for (const [k, v] of Object.entries(req.args)) {
    args ??= {};
    if (typeof v === 'object' && v !== null) {
      const text = JSON.stringify(v);
      put(args, k, text.length > AUDIT_STRING_CHARS ? cut(text) : v);
    } else put(args, k, cut(v));
  }
  const detail: Record<string, unknown> = {};
  if (message !== null) detail.message = message;
  detail.requested_target = requested;
  if (args !== null) detail.args = args;
  if (truncated) detail.truncated = true;
  return detail;
}

/** Sets an own property, as Object.fromEntries would: a key `__proto__` (refused at the door, but never trusted here) stays data. */
function put(o: Record<string, unknown>, key: string, value: unknown): void {
  if (key === '__proto__') Object.defineProperty(o, key, { value, enumerable: true, writable: true, configurable: true });
  else o[key] = value;
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
