import { microToIdr } from "./money.js";
import { readLoggedEndpoint } from "./request-source.js";
import type { RecentRequest, RequestLogRow, RequestPage } from "./types.js";

/** A request_log row as the usage endpoints show it (both backends). */
export function recentRequest(row: RequestLogRow): RecentRequest {
  return {
    id: row.id,
    created_at: new Date(row.created_at).toISOString(),
    ...readLoggedEndpoint(row.endpoint),
    model: row.model,
    served_model: row.served_model ?? null,
    state: row.state,
    status: row.status,
    error_code: row.error_code,
    stream: row.stream === 1,
    payment: row.payment,
    input_tokens: row.input_tokens,
    output_tokens: row.output_tokens,
    cost_idr: microToIdr(row.cost_micro),
    key_id: row.key_id,
    ...(row.tools_omitted ? { tools_omitted: JSON.parse(row.tools_omitted) as string[] } : {}),
    ...(row.job_id ? { job_id: row.job_id } : {}),
  };
}

/**
 * A request's place in its account's log, the order every listing of it follows: its admission
 * time, then the order the rows were written (SQLite's rowid, Postgres's `seq`), which tells apart
 * the many requests one millisecond may hold.
 */
export interface LogPosition {
  created_at: number;
  position: number;
}

/** A few walks' worth of pages; a cursor no longer kept is found by a scan, not refused. */
const keptPositions = 256;

/**
 * The places of the last requests of pages that had more after them, where the next page starts:
 * its `after` names one. The log has no index on request ids (both backends dropped it to keep a
 * settlement's writes small), so finding an id otherwise scans the account's rows. A log row is
 * never changed or removed, so a kept place stays right; one not kept (an old cursor, a page
 * another gateway on the database answered) is found by the scan.
 */
export class LogPositions {
  private readonly kept = new Map<string, LogPosition>();

  get(accountId: string, id: string): LogPosition | undefined {
    return this.kept.get(`${accountId}\n${id}`);
  }

  keep(accountId: string, row: RequestLogRow & LogPosition): void {
    if (this.kept.size >= keptPositions) {
      const oldest = this.kept.keys().next().value;
      if (oldest !== undefined) this.kept.delete(oldest);
    }
    this.kept.set(`${accountId}\n${row.id}`, {
      created_at: row.created_at,
      position: row.position,
    });
  }
}

/** A page from its rows and one more if there is more, keeping where the next page starts. */
export function requestPageOf(
  accountId: string,
  rows: (RequestLogRow & LogPosition)[],
  limit: number,
  positions: LogPositions,
): RequestPage {
  const hasMore = rows.length > limit;
  if (hasMore) {
    rows.length = limit;
    const last = rows.at(-1);
    if (last) positions.keep(accountId, last);
  }
  return { requests: rows.map(recentRequest), hasMore };
}

/** The start of the fixed window of a free model's token budget running at `now`. */
export function freeTokenWindowStart(windowSeconds: number, now: number): number {
  return Math.floor(now / (windowSeconds * 1000)) * windowSeconds * 1000;
}
