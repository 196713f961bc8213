import type { Statement } from "better-sqlite3";
import type {
  ListedRequest,
  RecentFilter,
  RequestLogReadsRepository,
} from "../request-log-reads.js";
import type { DB } from "./db.js";

export class SqliteRequestLogReads implements RequestLogReadsRepository {
  private readonly select: Statement;

  /** `landQueuedWrites`: the ledger's answered writes still waiting for their transaction. */
  constructor(
    db: DB,
    private readonly landQueuedWrites: () => void = () => {},
  ) {
    this.select = db.prepare(
      `SELECT l.*, k.label AS key_label, j.id AS job_id
         FROM request_log l LEFT JOIN api_keys k ON k.id = l.key_id
         LEFT JOIN jobs j ON j.request_id = l.id AND j.account_id = l.account_id
        WHERE (@model IS NULL OR l.model = @model) AND (@status IS NULL OR l.status = @status)
        ORDER BY l.rowid DESC LIMIT @limit`,
    );
  }

  async recent(filter: RecentFilter): Promise<ListedRequest[]> {
    this.landQueuedWrites();
    return this.select.all({
      model: filter.model ?? null,
      status: filter.status ?? null,
      limit: filter.limit,
    }) as ListedRequest[];
  }
}
