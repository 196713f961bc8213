/**
 * Whether `err` says the database cannot be reached or cannot take work right now (as opposed to
 * a statement it refused): a lost or refused connection, a pool that timed out waiting for one,
 * or the server's own classes 08 (connection), 53 (resources) and 57P (shutting down).
 */
export function isDatabaseUnavailable(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const code = (err as { code?: unknown }).code;
  if (typeof code === "string") {
    if (/^(08|53|57P)/.test(code)) return true;
    if (
      ["ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "EPIPE", "ENOTFOUND", "EHOSTUNREACH"].includes(
        code,
      )
    )
      return true;
  }
  return /Connection terminated|timeout exceeded when trying to connect|Query read timeout|Client has encountered a connection error/i.test(
    err.message,
  );
}

/**
 * Whether the database rolled the statement back to break a deadlock or a serialization conflict
 * (class 40): nothing of it was done, and the same statement sent again can succeed.
 */
export function isRolledBackConflict(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === "40P01" || code === "40001";
}
