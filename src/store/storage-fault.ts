import { statfsSync } from "node:fs";
import { dirname } from "node:path";

/**
 * A database or journal write that failed for want of space. SQLite reports SQLITE_FULL
 * ("database or disk is full"); the journal's own writes report ENOSPC.
 */
export function isStorageFull(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const code = (err as NodeJS.ErrnoException).code;
  return (
    code === "SQLITE_FULL" ||
    code === "ENOSPC" ||
    /database or disk is full|no space left on device/i.test(err.message)
  );
}

/** Why the gateway cannot record requests right now; what readiness reports. */
export interface StorageFault {
  /** The database file whose writes fail. */
  path: string;
  message: string;
  /** Epoch milliseconds of the first failure. */
  since: number;
}

/**
 * Whether the filesystem holding `path` has `bytes` free for this user. A small write can succeed
 * on a full disk (SQLite reuses its WAL), so recovery also asks the filesystem. Where it cannot
 * be asked, the answer is yes and the write decides.
 */
export function hasFreeSpace(path: string, bytes: number): boolean {
  if (path === ":memory:" || path === "") return true;
  try {
    const stats = statfsSync(dirname(path));
    return stats.bavail * stats.bsize >= bytes;
  } catch {
    return true;
  }
}
