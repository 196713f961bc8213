/** What an operating-system error means, in the words a user reads (not `ENOENT`). */
const meanings: Record<string, string> = {
  ENOENT: "no such file or directory",
  EACCES: "permission denied",
  EPERM: "operation not permitted",
  EISDIR: "is a directory",
  ENOTDIR: "a part of the path is not a directory",
  ENOSPC: "no space left on the device",
  EROFS: "read-only file system",
  ECONNREFUSED: "connection refused",
  ECONNRESET: "connection reset",
  ENOTFOUND: "host not found",
  EAI_AGAIN: "host name lookup failed",
  ETIMEDOUT: "timed out",
  EHOSTUNREACH: "host unreachable",
  ENETUNREACH: "network unreachable",
};

export function describeSystemError(err: unknown): string {
  const { code, message } = (err ?? {}) as { code?: unknown; message?: unknown };
  if (typeof code === "string" && meanings[code]) return meanings[code];
  if (typeof message === "string") return message.replace(/^E[A-Z]+: /, "");
  return String(err);
}
