import { rmSync, type Stats, statSync } from "node:fs";
import Database from "better-sqlite3";
import { ensurePrivateFile } from "../private-files.js";

export interface FileLock {
  /** Lets go (with `tidy`, the file goes too when no other process shares it). */
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
 * it runs out. A `shared` lock is SQLite's read lock, kept: any number of holders share it, and
 * it keeps the exclusive one from being taken (and is refused while that is held).
 */
export function lockFile(
  path: string,
  waitMs: number,
  mode: "exclusive" | "shared" = "exclusive",
  tidy?: TidyLock,
): FileLock | undefined {
  for (;;) {
    ensurePrivateFile(path);
    const opened = statSync(path, { throwIfNoEntry: false });
    if (tidy) {
      const left = leftBehind(path, opened);
      if (left) {
        tidy.takenOver(left.pid);
        continue;
      }
    }
    const lock = new Database(path, { timeout: waitMs });
    try {
      // The lock file holds no data: a journal would only leave a second file beside it.
      lock.pragma("journal_mode = MEMORY");
      lock.pragma("locking_mode = EXCLUSIVE");
      if (mode === "exclusive") lock.exec("BEGIN EXCLUSIVE");
      else {
        lock.exec("BEGIN");
        lock.prepare("SELECT count(*) FROM sqlite_schema").get();
      }
      lock.exec("COMMIT");
    } catch (err) {
      lock.close();
      if ((err as { code?: string }).code === "SQLITE_BUSY") return undefined;
      throw err;
    }
    if (sameFile(opened, statSync(path, { throwIfNoEntry: false }))) {
      return {
        release: () => {
          lock.close();
          if (tidy) removeIfAlone(path, opened);
        },
        remove: () => {
          rmSync(path, { force: true });
          lock.close();
        },
      };
    }
    lock.close();
  }
}

/**
 * A lock file that goes with its last holder, and names the process that holds it: a file found
 * with nobody holding it and naming a process that is gone was left by one that died (a SIGKILL,
 * a crash) and is taken over, `takenOver` told that pid. Only for a lock file no one else reads:
 * its holders write their pid into it.
 */
export interface TidyLock {
  takenOver(pid: number): void;
}

/**
 * Probes `path` with a connection of its own that takes the write lock without waiting, so only
 * when no process holds the file: then it writes this process's pid into it, unless the pid it
 * holds is of a process that is gone, when the file is removed and that pid answered. A probe
 * that finds the file held, or no longer at `path`, changes nothing.
 */
function leftBehind(path: string, opened: Stats | undefined): { pid: number } | undefined {
  const probe = new Database(path, { timeout: 0 });
  try {
    probe.pragma("journal_mode = MEMORY");
    probe.exec("BEGIN EXCLUSIVE");
    if (!sameFile(opened, statSync(path, { throwIfNoEntry: false }))) return undefined;
    probe.exec("CREATE TABLE IF NOT EXISTS holder (pid INTEGER NOT NULL)");
    const row = probe.prepare("SELECT pid FROM holder").get() as { pid: number } | undefined;
    if (row && !running(row.pid)) {
      rmSync(path, { force: true });
      return { pid: row.pid };
    }
    probe.exec("DELETE FROM holder");
    probe.prepare("INSERT INTO holder (pid) VALUES (?)").run(process.pid);
    probe.exec("COMMIT");
    return undefined;
  } catch (err) {
    if ((err as { code?: string }).code === "SQLITE_BUSY") return undefined;
    throw err;
  } finally {
    probe.close();
  }
}

/**
 * After a holder let go: the file goes if no process holds it any longer (another holder that
 * shares it removes it when it lets go in turn). A process that opened it meanwhile finds it
 * gone once it holds it, and takes the one at the path instead.
 */
function removeIfAlone(path: string, opened: Stats | undefined): void {
  let probe: Database.Database | undefined;
  try {
    probe = new Database(path, { timeout: 0, fileMustExist: true });
    probe.pragma("journal_mode = MEMORY");
    probe.exec("BEGIN EXCLUSIVE");
    if (sameFile(opened, statSync(path, { throwIfNoEntry: false }))) rmSync(path, { force: true });
  } catch {
    // Held by another process, or gone already: it is theirs to remove.
  } finally {
    probe?.close();
  }
}

function running(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: a process of another user's, running under that pid.
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

function sameFile(a: Stats | undefined, b: Stats | undefined): boolean {
  return a !== undefined && b !== undefined && a.ino === b.ino && a.dev === b.dev;
}
