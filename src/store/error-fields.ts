/**
 * A failure as log fields. drizzle wraps a database error in one of its own whose message quotes the
 * query and its parameters and whose `cause` holds what the database said: the innermost cause is
 * what an operator needs (its message, name and SQLSTATE `code`), and the query text is noise.
 */
export function errorFields(e: unknown): { error: string; name?: string; code?: unknown } {
  let c: unknown = e;
  while (c instanceof Error && c.cause instanceof Error) c = c.cause;
  return c instanceof Error ? { error: c.message, name: c.name, code: (c as { code?: unknown }).code } : { error: String(c) };
}
