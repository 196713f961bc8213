import { liveServeRecord } from "../../store/serve-record.js";
import { type FileLock, lockFile } from "../../store/sqlite/file-lock.js";
import { readServeRecordOf } from "../../store/sqlite/serve-record.js";

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
