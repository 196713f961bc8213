import type pg from "pg";
import type {
  ListedRequest,
  RecentFilter,
  RequestLogReadsRepository,
} from "../request-log-reads.js";

/** The kit's listing of recent requests, on Postgres (see RequestLogReadsRepository). */
export class PostgresRequestLogReads implements RequestLogReadsRepository {
  constructor(private readonly pool: pg.Pool) {}

  async recent(filter: RecentFilter): Promise<ListedRequest[]> {
    const result = await this.pool.query<ListedRequest & { seq?: number }>({
      name: "request_log_recent",
      text: `SELECT l.*, k.label AS key_label, j.id AS job_id
        FROM request_log l LEFT JOIN api_keys k ON k.id = l.key_id
        LEFT JOIN jobs j ON j.request_id = l.id AND j.account_id = l.account_id
        WHERE ($1::text IS NULL OR l.model = $1) AND ($2::integer IS NULL OR l.status = $2)
        ORDER BY l.seq DESC LIMIT $3`,
      values: [filter.model ?? null, filter.status ?? null, filter.limit],
    });
    // The write order is Postgres's own column; the row is what SQLite lists.
    return result.rows.map(({ seq: _seq, ...row }) => row);
  }
}
