import { liveServeRecord } from "../../store/serve-record.js";
import { type FileLock, lockFile } from "../../store/sqlite/file-lock.js";
import { readServeRecordOf } from "../../store/sqlite/serve-record.js";
import { GatewayAlreadyRunning } from "./already-running.js";

const lockWaitMs = 250;

export type ServeLock = FileLock;

/**
 * Takes `<db>-lock` for this process (see lockFile), or throws GatewayAlreadyRunning naming the
 * server that holds it. An in-memory database belongs to its process alone and takes no lock.
 */
export async function lockDatabase(dbPath: string): Promise<ServeLock | undefined> {
  if (dbPath === ":memory:") return undefined;
  const lock = lockFile(`${dbPath}-lock`, lockWaitMs);
  if (!lock) throw new GatewayAlreadyRunning(dbPath, await runningServer(dbPath));
  return lock;
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
