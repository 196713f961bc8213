/**
 * The running `gateway serve`, as recorded in its database: where it listens, whose dashboard its
 * owner links open, and its pid (to tell a live server from one that died without cleaning up).
 */
export interface ServeRecord {
  url: string;
  ownerAccountId: string | null;
  pid: number;
}

export interface ServeRecordRepository {
  record(server: ServeRecord & { startedAt: number }): Promise<void>;
  /** Only the record of this pid: another server may have started since. */
  forget(pid: number): Promise<void>;
  read(): Promise<ServeRecord | undefined>;
}

/** The recorded server if its process is still alive, else undefined. */
export async function readLiveServeRecord(
  record: ServeRecordRepository,
): Promise<ServeRecord | undefined> {
  return liveServeRecord(await record.read());
}

/** The record, unless its process has died without cleaning up. */
export function liveServeRecord(record: ServeRecord | undefined): ServeRecord | undefined {
  return record && processAlive(record.pid) ? record : undefined;
}

/** Whether a process of this machine runs under `pid` (one of another user's too). */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: alive, but another user's process.
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}
