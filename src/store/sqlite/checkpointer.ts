import { closeSync, fstatSync, fsync, openSync } from "node:fs";
import Database from "better-sqlite3";
import { clearTimeout, setTimeout } from "../../host-timers.js";
import { type FileIdentity, fileIdentity, fileMoved } from "../storage-fault.js";
import type { DB } from "./db.js";

/**
 * Moves WAL checkpoints off the request path. A checkpoint copies the WAL into the database file
 * and syncs both to disk; done by SQLite's automatic checkpoint it lands inside whichever request
 * commits the 1000th page, as a multi-millisecond stall. Here a timer runs PASSIVE checkpoints
 * instead, and the main connection keeps a far larger automatic threshold as a safety net.
 *
 * The two fsyncs are what block (0.5-1.4 ms each on a VM's disk), so they run in libuv's thread
 * pool (`fs.fsync`) and only the copy, pages already in the OS's cache, runs on the event loop.
 * A worker thread did the same with its own V8 isolate, about 9 MB resident for a timer.
 *
 * SQLite's own checkpoint would sync on the calling thread, so the copying connection runs with
 * synchronous=OFF and the order SQLite keeps is kept here around it:
 *  1. a read transaction on a second connection pins the WAL's end as it is (frame m): while it
 *     is open no writer restarts the WAL over frames copied but not yet synced into the database
 *     file, and no checkpoint copies a frame past m;
 *  2. the WAL is synced, so every frame up to m is on disk before any is copied;
 *  3. the copying connection checkpoints (up to m), without syncing;
 *  4. the database file is synced;
 *  5. the read transaction ends: the WAL may restart.
 * An OS crash at any step finds the frames still in the WAL on disk.
 */
export interface Checkpointer {
  stop(): Promise<void>;
}

/**
 * `opened`: the file the connection `db` opened at `path` (the checkpointer starts a little later,
 * and checkpoints only while that file is still the one there).
 */
export function startCheckpointer(
  db: DB,
  path: string,
  intervalMs = 1000,
  opened: FileIdentity | undefined = fileIdentity(path),
): Checkpointer {
  const files = openFiles(path, opened);
  // Only the file the gateway opened: another one moved to its path (a restore) would take the
  // lost file's WAL, still at the path, as its own.
  if (!files) return { stop: async () => {} };
  const { dbFd, walFd, identity } = files;
  const connect = () => {
    // Never creates the file: one deleted before this started stays deleted.
    const connection = new Database(path, { fileMustExist: true });
    // Neither ever waits for a lock on the event loop: a busy turn is skipped and the next tries.
    connection.pragma("busy_timeout = 0");
    connection.pragma("cache_size = 8");
    return connection;
  };
  const connections: DB[] = [];
  try {
    for (let i = 0; i < 2; i++) connections.push(connect());
  } catch (err) {
    for (const connection of connections) connection.close();
    // SQLite keeps checkpointing on its own. The database file's descriptor stays open: closing
    // it would drop the main connection's locks.
    closeSync(walFd);
    console.error(`checkpointer not started: ${(err as Error).message}`);
    return { stop: async () => {} };
  }
  const [pin, copier] = connections as [DB, DB];
  copier.pragma("synchronous = OFF");
  db.pragma("wal_autocheckpoint = 20000");
  const readPin = pin.prepare("SELECT 1 FROM sqlite_schema LIMIT 1");
  const dataVersion = pin.prepare("PRAGMA data_version").pluck();
  // The first turn checkpoints what was committed before it started.
  let seen: unknown;

  const sync = (fd: number) =>
    new Promise<void>((resolve, reject) => fsync(fd, (err) => (err ? reject(err) : resolve())));
  const checkpoint = async () => {
    if (fileMoved(path, identity) !== undefined) return false;
    // Only commits made by the other connections since the last turn call for a checkpoint.
    const version = dataVersion.get();
    if (version === seen) return true;
    pin.exec("BEGIN");
    try {
      readPin.get();
      await sync(walFd);
      copier.pragma("wal_checkpoint(PASSIVE)");
      await sync(dbFd);
      seen = version;
    } finally {
      pin.exec("COMMIT");
    }
    return true;
  };

  let running: Promise<boolean> | undefined;
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  const turn = () => {
    running = checkpoint().catch(() => true);
    void running.then((again) => {
      running = undefined;
      if (again && !stopped) schedule();
    });
  };
  const schedule = () => {
    timer = setTimeout(turn, intervalMs);
    timer.unref();
  };
  schedule();

  return {
    async stop() {
      stopped = true;
      clearTimeout(timer);
      await running;
      await checkpoint().catch(() => {});
      pin.close();
      copier.close();
      closeSync(walFd);
      // Closing a descriptor of the database file drops every lock this process holds on it,
      // the main connection's too: the store closes that connection next.
      closeSync(dbFd);
    },
  };
}

/** The database file and its WAL, opened for syncing; undefined when `path` is not `opened`. */
function openFiles(path: string, opened: FileIdentity | undefined) {
  if (!opened) return undefined;
  // The WAL first: SQLite locks no byte of it, so closing it drops no lock; a descriptor of the
  // database file is closed here only when it is another file (locks are held per file).
  let walFd: number;
  let dbFd: number;
  try {
    walFd = openSync(`${path}-wal`, "r");
  } catch {
    return undefined;
  }
  try {
    dbFd = openSync(path, "r");
  } catch {
    closeSync(walFd);
    return undefined;
  }
  const stats = fstatSync(dbFd);
  if (stats.dev !== opened.dev || stats.ino !== opened.ino) {
    closeSync(dbFd);
    closeSync(walFd);
    return undefined;
  }
  return { dbFd, walFd, identity: opened };
}
