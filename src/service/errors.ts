/** The one error class of the service: a stable `code` and HTTP status, as API.md lists them. */
import { StoreUnavailable } from '../store/store.js';

export interface FieldError {
  readonly path: string;
  readonly message: string;
}

export class ApiError extends Error {
  constructor(
    readonly status: 400 | 401 | 403 | 404 | 409 | 413 | 415 | 503,
    readonly code: string,
    message: string,
    readonly extra: Record<string, unknown> = {},
  ) {
    super(message);
  }

  /** `{"error": {"code", "message", ...}}` (API.md "Errors"). Never carries tokens or keys. */
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

/** The 503 for a failure of the store: `unknown` only when a COMMIT was sent and not confirmed. */
export function unavailableFrom(e: unknown): ApiError {
  return unavailable(e instanceof StoreUnavailable && e.outcome === 'unknown' ? 'unknown' : 'not_committed');
}
