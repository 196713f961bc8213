import Database, { type Statement } from "better-sqlite3";
import type { DB } from "./db.js";

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

export class SqliteServeRecord implements ServeRecordRepository {
  private readonly upsert: Statement;
  private readonly remove: Statement;
  private readonly select: Statement;

  constructor(db: DB) {
    this.upsert = db.prepare(
      `INSERT INTO serve_runtime (id, url, owner_account_id, pid, started_at) VALUES (1, ?, ?, ?, ?)
       ON CONFLICT(id) DO UPDATE SET url = excluded.url, owner_account_id = excluded.owner_account_id,
         pid = excluded.pid, started_at = excluded.started_at`,
    );
    this.remove = db.prepare("DELETE FROM serve_runtime WHERE pid = ?");
    this.select = db.prepare("SELECT url, owner_account_id, pid FROM serve_runtime WHERE id = 1");
  }

  async record(server: ServeRecord & { startedAt: number }): Promise<void> {
    this.upsert.run(server.url, server.ownerAccountId, server.pid, server.startedAt);
  }

  async forget(pid: number): Promise<void> {
    this.remove.run(pid);
  }

  async read(): Promise<ServeRecord | undefined> {
    const row = this.select.get() as
      | { url: string; owner_account_id: string | null; pid: number }
      | undefined;
    return row && { url: row.url, ownerAccountId: row.owner_account_id, pid: row.pid };
  }
}

/**
 * The record in a database file another process serves, read without migrating or writing
 * anything. Throws when the file (or its table) is not there yet.
 */
export async function readServeRecordOf(path: string): Promise<ServeRecord | undefined> {
  const db = new Database(path, { readonly: true, fileMustExist: true, timeout: 1000 });
  try {
    return await new SqliteServeRecord(db).read();
  } finally {
    db.close();
  }
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

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: alive, but another user's process.
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}
