import { hostname } from "node:os";
import type pg from "pg";
import type { ServeRecord, ServeRecordRepository } from "../serve-record.js";

/**
 * The running servers' records on Postgres (see ServeRecordRepository): one per gateway process,
 * keyed by host and pid, so gateways on one database keep theirs apart; `read` answers the newest.
 */
export class PostgresServeRecord implements ServeRecordRepository {
  private readonly host = hostname();

  constructor(private readonly pool: pg.Pool) {}

  async record(server: ServeRecord & { startedAt: number }): Promise<void> {
    await this.pool.query({
      name: "serve_instances_record",
      text: `INSERT INTO serve_instances (host, pid, url, owner_account_id, started_at)
        VALUES ($1, $2, $3, $4, $5)
        ON CONFLICT (host, pid) DO UPDATE SET url = excluded.url,
          owner_account_id = excluded.owner_account_id, started_at = excluded.started_at`,
      values: [this.host, server.pid, server.url, server.ownerAccountId, server.startedAt],
    });
  }

  async forget(pid: number): Promise<void> {
    await this.pool.query({
      name: "serve_instances_forget",
      text: "DELETE FROM serve_instances WHERE host = $1 AND pid = $2",
      values: [this.host, pid],
    });
  }

  async read(): Promise<ServeRecord | undefined> {
    const result = await this.pool.query<{
      url: string;
      owner_account_id: string | null;
      pid: number;
    }>({
      name: "serve_instances_read",
      text: `SELECT url, owner_account_id, pid FROM serve_instances
        ORDER BY started_at DESC, pid DESC LIMIT 1`,
    });
    const row = result.rows[0];
    return row && { url: row.url, ownerAccountId: row.owner_account_id, pid: row.pid };
  }
}
