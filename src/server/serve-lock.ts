import Database from "better-sqlite3";
import { ensurePrivateFile } from "../store/private-files.js";
import { liveServeRuntime } from "./dashboard/serve-runtime.js";

/**
 * A second gateway on a database file that one already serves: refused before it opens the
 * database, so the running one's settlement journal and serve record stay as they are.
 */
export class GatewayAlreadyRunning extends Error {
  constructor(
    readonly db: string,
    readonly running: { pid: number; url: string } | undefined,
  ) {
    const who = running
      ? `another gateway (pid ${running.pid}, ${running.url}) is serving ${db}`
      : `another gateway is starting on ${db}`;
    super(`${who}; stop it first, or use another database (--db other.db)`);
    this.name = "GatewayAlreadyRunning";
  }
}

const lockWaitMs = 250;

export interface ServeLock {
  release(): void;
}

/**
 * Takes `<db>-lock` for this process, or throws GatewayAlreadyRunning. The lock is SQLite's own
 * exclusive file lock (fcntl on POSIX, LockFileEx on Windows) held by a connection in exclusive
 * locking mode: the kernel drops it when its process dies, so a crashed server leaves nothing to
 * clean up, and two starting at once cannot both get it. The file itself stays: removing it
 * would let a third process lock a fresh file while the second still holds the old one.
 * An in-memory database belongs to its process alone and takes no lock.
 */
export function lockDatabase(dbPath: string): ServeLock | undefined {
  if (dbPath === ":memory:") return undefined;
  ensurePrivateFile(`${dbPath}-lock`);
  // The wait lets the winner of a simultaneous start finish taking the lock while the loser lets
  // go of its shared one; a lock already held is refused when it runs out.
  const lock = new Database(`${dbPath}-lock`, { timeout: lockWaitMs });
  try {
    // The lock file holds no data: a journal would only leave a second file beside it.
    lock.pragma("journal_mode = MEMORY");
    lock.pragma("locking_mode = EXCLUSIVE");
    lock.exec("BEGIN EXCLUSIVE");
    lock.exec("COMMIT");
  } catch (err) {
    lock.close();
    if ((err as { code?: string }).code === "SQLITE_BUSY") {
      throw new GatewayAlreadyRunning(dbPath, runningServer(dbPath));
    }
    throw err;
  }
  return { release: () => lock.close() };
}

/** Who holds the lock, from the serve record in the database (read-only: nothing is written). */
function runningServer(dbPath: string): { pid: number; url: string } | undefined {
  try {
    const db = new Database(dbPath, { readonly: true, fileMustExist: true, timeout: 1000 });
    try {
      const server = liveServeRuntime(db);
      return server && { pid: server.pid, url: server.url };
    } finally {
      db.close();
    }
  } catch {
    // Not yet recorded: the other server is still starting.
    return undefined;
  }
}
