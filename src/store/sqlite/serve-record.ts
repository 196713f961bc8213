import Database, { type Statement } from "better-sqlite3";
import type { ServeRecord, ServeRecordRepository } from "../serve-record.js";
import type { DB } from "./db.js";

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
