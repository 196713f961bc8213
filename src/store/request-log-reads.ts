import type { Statement } from "better-sqlite3";
import type { DB } from "./db.js";
import type { RequestLogRow } from "./types.js";

/** A request log row with its key's label. */
export type ListedRequest = RequestLogRow & { key_label: string | null };

/** The test kit's listing of recent requests, read from the request log the ledger writes. */
export interface RequestLogReadsRepository {
  /** Newest first; a filter left undefined matches every row. */
  recent(filter: RecentFilter): Promise<ListedRequest[]>;
}

export interface RecentFilter {
  model?: string;
  status?: number;
  limit: number;
}

/**
 * SQLite also answers at once (`recentSync`): the kit's public `gateway.requests()` is
 * synchronous, and the kit runs on SQLite.
 */
export class SqliteRequestLogReads implements RequestLogReadsRepository {
  private readonly select: Statement;

  constructor(db: DB) {
    this.select = db.prepare(
      `SELECT l.*, k.label AS key_label FROM request_log l LEFT JOIN api_keys k ON k.id = l.key_id
        WHERE (@model IS NULL OR l.model = @model) AND (@status IS NULL OR l.status = @status)
        ORDER BY l.rowid DESC LIMIT @limit`,
    );
  }

  async recent(filter: RecentFilter): Promise<ListedRequest[]> {
    return this.recentSync(filter);
  }

  recentSync(filter: RecentFilter): ListedRequest[] {
    return this.select.all({
      model: filter.model ?? null,
      status: filter.status ?? null,
      limit: filter.limit,
    }) as ListedRequest[];
  }
}
