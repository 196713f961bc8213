import type { DB } from "../../store/db.js";

/**
 * The running `gateway serve`, as recorded in its database: where it listens, whose dashboard its
 * owner links open, and its pid (to tell a live server from one that died without cleaning up).
 */
export interface ServeRuntime {
  url: string;
  ownerAccountId: string | null;
  pid: number;
}

export function recordServeRuntime(
  db: DB,
  runtime: { url: string; ownerAccountId: string | undefined; startedAt: number },
): void {
  db.prepare(
    `INSERT INTO serve_runtime (id, url, owner_account_id, pid, started_at) VALUES (1, ?, ?, ?, ?)
     ON CONFLICT(id) DO UPDATE SET url = excluded.url, owner_account_id = excluded.owner_account_id,
       pid = excluded.pid, started_at = excluded.started_at`,
  ).run(runtime.url, runtime.ownerAccountId ?? null, process.pid, runtime.startedAt);
}

/** On a clean stop; only this process's own record (another server may have started since). */
export function forgetServeRuntime(db: DB): void {
  db.prepare("DELETE FROM serve_runtime WHERE pid = ?").run(process.pid);
}

/** The recorded server if its process is still alive, else undefined. */
export function liveServeRuntime(db: DB): ServeRuntime | undefined {
  const row = db
    .prepare("SELECT url, owner_account_id, pid FROM serve_runtime WHERE id = 1")
    .get() as { url: string; owner_account_id: string | null; pid: number } | undefined;
  if (!row || !processAlive(row.pid)) return undefined;
  return { url: row.url, ownerAccountId: row.owner_account_id, pid: row.pid };
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
