import type { ServeRecord, ServeRecordRepository } from "../../store/serve-record.js";

/** The recorded server if its process is still alive, else undefined. */
export async function liveServeRuntime(
  record: ServeRecordRepository,
): Promise<ServeRecord | undefined> {
  return liveServer(await record.read());
}

/** The record, unless its process has died without cleaning up. */
export function liveServer(record: ServeRecord | undefined): ServeRecord | undefined {
  return record && processAlive(record.pid) ? record : undefined;
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: alive, but another user's process.
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}
