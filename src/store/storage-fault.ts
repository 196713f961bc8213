import { statfsSync, statSync } from "node:fs";
import { dirname } from "node:path";

/**
 * Why the database cannot take writes:
 *   full     no space (SQLITE_FULL, ENOSPC): over once space is freed
 *   failing  the disk refuses writes (read-only: SQLITE_READONLY*, EROFS; or errors:
 *            SQLITE_IOERR*, EIO): over once a write lands again
 *   lost     the file the gateway opened is no longer the one at its path (deleted or
 *            replaced): over only with a restart, which opens the file now there
 *   unreachable  the Postgres server cannot be reached (a lost or refused connection, a pool
 *            that timed out): over once a write lands again
 */
export type StorageFaultKind = "full" | "failing" | "lost" | "unreachable";

/** Whether `err` is a write the disk refused, and how (undefined for any other error). */
export function storageFaultKind(err: unknown): StorageFaultKind | undefined {
  if (!(err instanceof Error)) return undefined;
  const code = (err as NodeJS.ErrnoException).code ?? "";
  if (
    code === "SQLITE_FULL" ||
    code === "ENOSPC" ||
    /database or disk is full|no space left on device/i.test(err.message)
  ) {
    return "full";
  }
  if (
    code.startsWith("SQLITE_READONLY") ||
    code.startsWith("SQLITE_IOERR") ||
    code === "EROFS" ||
    code === "EIO"
  ) {
    return "failing";
  }
  return undefined;
}

/** Why the gateway cannot record requests right now; what readiness reports. */
export interface StorageFault {
  /** The database file whose writes fail. */
  path: string;
  message: string;
  /** Epoch milliseconds of the first failure. */
  since: number;
  kind?: StorageFaultKind;
}

/** Which file a path names: its device and inode. */
export interface FileIdentity {
  dev: number;
  ino: number;
}

/** The identity of the file at `path` now, or undefined when there is none. */
export function fileIdentity(path: string): FileIdentity | undefined {
  const stats = statSync(path, { throwIfNoEntry: false });
  return stats && { dev: stats.dev, ino: stats.ino };
}

/**
 * What became of the file a gateway opened as `path` (identity `opened`): "deleted" when nothing
 * is at the path any more, "replaced" when another file is, undefined when it is still there.
 */
export function fileMoved(path: string, opened: FileIdentity): "deleted" | "replaced" | undefined {
  let now: FileIdentity | undefined;
  try {
    now = fileIdentity(path);
  } catch {
    // A path that cannot be looked at (its folder's permissions changed) says nothing either way.
    return undefined;
  }
  if (!now) return "deleted";
  return now.dev === opened.dev && now.ino === opened.ino ? undefined : "replaced";
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
