/** The one error class of the service: a stable `code` and HTTP status, as API.md lists them. */

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

export const unavailable = (): ApiError => new ApiError(503, 'unavailable', 'the authority cannot reach its database; nothing was granted');
