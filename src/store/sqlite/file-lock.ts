import { rmSync, type Stats, statSync } from "node:fs";
import Database from "better-sqlite3";
import { ensurePrivateFile } from "../private-files.js";

export interface FileLock {
  /** Lets go; the file stays (see lockFile). */
  release(): void;
  /**
   * Removes the file, then lets go: for a lock file this process made for a start it gave up, so
   * that the refused start leaves nothing behind. A process waiting on the file then finds it
   * gone once it holds it, and takes the one at the path instead (see lockFile).
   */
  remove(): void;
}

/**
 * Takes `path` for this process, or returns undefined when another process holds it (another
 * holder in this process too). The lock is SQLite's own exclusive file lock (fcntl on POSIX,
 * LockFileEx on Windows) held by a connection in exclusive locking mode: the kernel drops it when
 * its process dies, so a crashed holder leaves nothing to clean up, and two taking it at once
 * cannot both get it. The file itself stays: removing it would let a third process lock a fresh
 * file while the second still holds the old one, which is why a lock is kept only while the path
 * still names the file it was taken on. `waitMs` lets the winner of a simultaneous start finish
 * taking the lock while the loser lets go of its shared one; a lock already held is refused when
 * it runs out.
 */
export function lockFile(path: string, waitMs: number): FileLock | undefined {
  for (;;) {
    ensurePrivateFile(path);
    const opened = statSync(path, { throwIfNoEntry: false });
    const lock = new Database(path, { timeout: waitMs });
    try {
      // The lock file holds no data: a journal would only leave a second file beside it.
      lock.pragma("journal_mode = MEMORY");
      lock.pragma("locking_mode = EXCLUSIVE");
      lock.exec("BEGIN EXCLUSIVE");
      lock.exec("COMMIT");
    } catch (err) {
      lock.close();
      if ((err as { code?: string }).code === "SQLITE_BUSY") return undefined;
      throw err;
    }
    if (sameFile(opened, statSync(path, { throwIfNoEntry: false }))) {
      return {
        release: () => lock.close(),
        remove: () => {
          rmSync(path, { force: true });
          lock.close();
        },
      };
    }
    lock.close();
  }
}

function sameFile(a: Stats | undefined, b: Stats | undefined): boolean {
  return a !== undefined && b !== undefined && a.ino === b.ino && a.dev === b.dev;
}
