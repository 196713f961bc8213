import type pg from "pg";
import type { ServeRecord, ServeRecordRepository } from "../serve-record.js";

/** The running server's record on Postgres (see ServeRecordRepository). */
export class PostgresServeRecord implements ServeRecordRepository {
  constructor(private readonly pool: pg.Pool) {}

  async record(server: ServeRecord & { startedAt: number }): Promise<void> {
    await this.pool.query({
      name: "serve_runtime_record",
      text: `INSERT INTO serve_runtime (id, url, owner_account_id, pid, started_at) VALUES (1, $1, $2, $3, $4)
        ON CONFLICT (id) DO UPDATE SET url = excluded.url, owner_account_id = excluded.owner_account_id,
          pid = excluded.pid, started_at = excluded.started_at`,
      values: [server.url, server.ownerAccountId, server.pid, server.startedAt],
    });
  }

  async forget(pid: number): Promise<void> {
    await this.pool.query({
      name: "serve_runtime_forget",
      text: "DELETE FROM serve_runtime WHERE pid = $1",
      values: [pid],
    });
  }

  async read(): Promise<ServeRecord | undefined> {
    const result = await this.pool.query<{
      url: string;
      owner_account_id: string | null;
      pid: number;
    }>({
      name: "serve_runtime_read",
      text: "SELECT url, owner_account_id, pid FROM serve_runtime WHERE id = 1",
    });
    const row = result.rows[0];
    return row && { url: row.url, ownerAccountId: row.owner_account_id, pid: row.pid };
  }
}
