import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import { Worker } from "node:worker_threads";
import { type FileIdentity, fileIdentity } from "../storage-fault.js";
import type { DB } from "./db.js";

/**
 * Moves WAL checkpoints off the event loop. A checkpoint copies the WAL into the database file and
 * syncs it to disk; done by SQLite's automatic checkpoint it lands inside whichever request
 * commits the 1000th page, as a multi-millisecond stall. A worker thread with its own connection
 * runs PASSIVE checkpoints on a timer instead. The main connection keeps a far larger automatic
 * threshold as a safety net, should the worker ever stop.
 *
 * The worker's source uses only dynamic import(), which means the same in a script and in a
 * module: the eval'd code is read as a module when the host process runs with
 * `--input-type=module` (and in other ES-module set-ups), where `require` does not exist.
 */
const workerSource = `
(async () => {
  const { parentPort, workerData } = await import("node:worker_threads");
  const { statSync } = await import("node:fs");
  const { default: Database } = await import(workerData.driverUrl);
  // Only the file the gateway opened: another one moved to its path (a restore) would take the
  // lost file's WAL, still at the path, as its own.
  const same = () => {
    const now = statSync(workerData.path, { throwIfNoEntry: false });
    return now !== undefined && now.dev === workerData.dev && now.ino === workerData.ino;
  };
  if (!same()) {
    parentPort.once("message", () => parentPort.close());
    return;
  }
  // Never creates the file: one deleted before this worker started stays deleted.
  const db = new Database(workerData.path, { fileMustExist: true });
  db.pragma("busy_timeout = 50");
  const checkpoint = () => {
    if (!same()) return clearInterval(timer);
    try { db.pragma("wal_checkpoint(PASSIVE)"); } catch {}
  };
  const timer = setInterval(checkpoint, workerData.intervalMs);
  parentPort.once("message", () => {
    clearInterval(timer);
    checkpoint();
    db.close();
    parentPort.close();
  });
})();
`;

export interface Checkpointer {
  stop(): Promise<void>;
}

/**
 * `opened`: the file the connection `db` opened at `path` (the worker starts a little later, and
 * checkpoints only while that file is still the one there).
 */
export function startCheckpointer(
  db: DB,
  path: string,
  intervalMs = 1000,
  opened: FileIdentity | undefined = fileIdentity(path),
): Checkpointer {
  db.pragma("wal_autocheckpoint = 20000");
  const worker = new Worker(workerSource, {
    eval: true,
    workerData: {
      path,
      intervalMs,
      dev: opened?.dev,
      ino: opened?.ino,
      driverUrl: pathToFileURL(createRequire(import.meta.url).resolve("better-sqlite3")).href,
    },
  });
  worker.unref();
  worker.on("error", (err) => {
    console.error(`checkpointer stopped: ${err.message}; SQLite checkpoints on its own again`);
    db.pragma("wal_autocheckpoint = 1000");
  });
  return {
    stop: () =>
      new Promise<void>((resolve) => {
        // Unreferenced, the worker would let the process end while this waits, and the store
        // would never be closed (the serve binary's shutdown ended here).
        worker.ref();
        worker.once("exit", () => resolve());
        worker.postMessage("stop");
      }),
  };
}
