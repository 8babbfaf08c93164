/** The one error class of the service: a stable `code` and HTTP status, as docs/api.md "Errors" lists them. */
import { StoreUnavailable } from '../store/store.js';

/**
 * Every error code the service answers, with its one HTTP status. A list, not only a type, so the
 * reference's test reads the real set (and checks each `new ApiError(status, code)` against it).
 */
export const ERROR_STATUS = {
  invalid_request: 400,
  unauthorized: 401,
  forbidden: 403,
  attenuation_refused: 403,
  self_approval: 403,
  not_found: 404,
  idempotency_conflict: 409,
  in_flight: 409,
  not_yet_covered: 409,
  approval_resolved: 409,
  payload_too_large: 413,
  unsupported_media_type: 415,
  tool_schema_refused: 422,
  unavailable: 503,
} as const;
export type ErrorCode = keyof typeof ERROR_STATUS;

export interface FieldError {
  readonly path: string;
  readonly message: string;
}

export class ApiError extends Error {
  constructor(
    readonly status: (typeof ERROR_STATUS)[ErrorCode],
    readonly code: ErrorCode,
    message: string,
    readonly extra: Record<string, unknown> = {},
  ) {
    super(message);
  }

  /** `{"error": {"code", "message", ...}}` (docs/api.md "Errors"). Never carries tokens or keys. */
  toBody(): { error: Record<string, unknown> } {
    return { error: { code: this.code, message: this.message, ...this.extra } };
  }
}

export function invalidRequest(fields: readonly FieldError[]): ApiError {
  const message = fields.map((f) => `${f.path}: ${f.message}`).join('; ');
  return new ApiError(400, 'invalid_request', message, { fields });
}

/**
 * What a 503 `unavailable` says of the request's effect, in `error.outcome`: `not_committed`, it
 * certainly changed nothing (repeat it freely); `unknown`, its COMMIT was sent and not confirmed, so
 * it may have taken effect (repeat it with the same call_id / Idempotency-Key to learn which).
 */
export type UnavailableOutcome = 'not_committed' | 'unknown';

/** 503 `unavailable`: the authority fails closed. */
export function unavailable(outcome: UnavailableOutcome = 'not_committed'): ApiError {
  const message =
    outcome === 'unknown'
      ? 'the database did not confirm whether the decision committed: repeat the request with the same call_id / Idempotency-Key to learn its outcome'
      : 'the authority could not reach its database in time; nothing was committed or granted';
  return new ApiError(503, 'unavailable', message, { outcome });
}

/**
 * A read after the request's own write committed: the write took effect, so no failure here may say
 * `not_committed`. A store failure is 503 `unknown`, and so is any 503 the read raises itself;
 * other errors pass. Repeating the request reads the result (a tool registered again unchanged is
 * `created: false`; a resolution repeated answers the approval as it stands).
 */
export async function readAfterCommit<R>(read: () => Promise<R>): Promise<R> {
  try {
    return await read();
  } catch (e) {
    if (e instanceof ApiError && e.status !== 503) throw e;
    if (e instanceof ApiError) throw new ApiError(503, e.code, e.message, { ...e.extra, outcome: 'unknown' });
    throw new ApiError(503, 'unavailable', 'the request committed, but reading back its result failed: repeat it to read the result', {
      outcome: 'unknown',
    });
  }
}

/** The 503 for a failure of the store: `unknown` only when a COMMIT was sent and not confirmed. */
export function unavailableFrom(e: unknown): ApiError {
  return unavailable(e instanceof StoreUnavailable && e.outcome === 'unknown' ? 'unknown' : 'not_committed');
}
