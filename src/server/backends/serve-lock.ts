import { existsSync } from "node:fs";
import { setTimeout } from "../../host-timers.js";
import { liveServeRecord } from "../../store/serve-record.js";
import { type FileLock, lockFile } from "../../store/sqlite/file-lock.js";
import { readServeRecordOf } from "../../store/sqlite/serve-record.js";
import { GatewayAlreadyRunning } from "./already-running.js";

const lockWaitMs = 250;
/** Tries before a lock still held is refused. */
const lockTries = 3;

export type ServeLock = FileLock;

/** The file whose lock says which process serves the database at `dbPath`. */
export const lockFileOf = (dbPath: string) => `${dbPath}-lock`;

/**
 * Takes `<db>-lock` for this process (see lockFile), or throws GatewayAlreadyRunning naming the
 * server that holds it. An in-memory database belongs to its process alone and takes no lock.
 */
export async function lockDatabase(dbPath: string): Promise<ServeLock | undefined> {
  if (dbPath === ":memory:") return undefined;
  for (let tried = 1; ; tried++) {
    const lock = lockFile(lockFileOf(dbPath), lockWaitMs);
    if (lock) return lock;
    if (tried === lockTries) break;
    // Two serves started at once on a busy machine can each give up waiting for the other: both
    // let go, and each tries again after a pause of its own, so that one of them takes the file.
    await new Promise((resolve) => setTimeout(resolve, 50 + Math.random() * 150));
  }
  throw new GatewayAlreadyRunning(dbPath, await runningServer(dbPath));
}

/**
 * Throws GatewayAlreadyRunning when a gateway serves `dbPath`, and creates nothing: a start
 * refused for something the running gateway has (its port) names that gateway, not the port.
 */
export async function refuseIfServed(dbPath: string): Promise<void> {
  if (dbPath === ":memory:" || !existsSync(lockFileOf(dbPath))) return;
  (await lockDatabase(dbPath))?.release();
}

/** Who holds the lock, from the serve record in the database (read-only: nothing is written). */
async function runningServer(dbPath: string): Promise<{ pid: number; url: string } | undefined> {
  try {
    const server = liveServeRecord(await readServeRecordOf(dbPath));
    return server && { pid: server.pid, url: server.url };
  } catch {
    // Not yet recorded: the other server is still starting.
    return undefined;
  }
}
