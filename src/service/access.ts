/**
 * Refusals of a call outside the caller's roles (issue 14): 403 `forbidden` naming the roles it
 * needs, nothing granted, and an audit row like any other refusal (on the tenant's own chain, with
 * the key id and request id), written before the answer.
 */
import { storableText } from '../core/storable.js';
import { newId } from '../crypto/hash.js';
import type { Deadline } from '../store/deadline.js';
import { tenantDraft, type AuditDraft, type CallerIds, type DecisionWriter } from '../store/writer.js';
import { ApiError } from './errors.js';
import type { Role } from './keys.js';

/** The audit event of a refused route: the decision it asked for, else `access` (reads, key management). */
function eventOf(route: string): AuditDraft['event'] {
  const events: Record<string, AuditDraft['event']> = {
    'POST /v1/capabilities': 'mint',
    'POST /v1/attenuate': 'attenuate',
    'POST /v1/approve': 'approve',
    'POST /v1/revoke': 'revoke',
    'PUT /v1/tools/:name': 'tool',
    'POST /v1/approvals/:id': 'approval',
  };
  return events[route] ?? 'access';
}

/** Audits the refusal, then returns the 403 to throw. */
export async function forbidden(
  writer: DecisionWriter,
  tenantId: string,
  caller: CallerIds,
  route: string,
  needed: readonly Role[],
  deadline?: Deadline,
): Promise<ApiError> {
  // An unlisted route is the caller's path as sent (decoded: `%00` is a NUL), recorded in a form the store keeps.
  const audit = tenantDraft(newId('aud'), eventOf(route), 'deny', 'forbidden', { route: storableText(route), required_roles: needed });
  await writer.submit({ tenantId, fence: null, caller, run: async () => ({ result: null, audit }) }, deadline);
  return new ApiError(403, 'forbidden', `this API key lacks the role this call needs: one of ${needed.join(', ')}`, { required_roles: needed });
}
