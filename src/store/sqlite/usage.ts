import type { Statement } from "better-sqlite3";
import { microToIdr } from "../money.js";
import type {
  AdmittedCount,
  PageQuery,
  RecentRequest,
  RequestLogRow,
  RequestPage,
  UsageByModel,
  UsageDay,
  UsageSummary,
} from "../types.js";
import { type LogPosition, LogPositions, requestPageOf } from "../usage-rows.js";
import type { DB } from "./db.js";

/** Usage read from the request log on SQLite (the free models' token budgets are the ledger's). */
export class SqliteUsage {
  private readonly statements: ReturnType<typeof prepare>;
  private readonly positions = new LogPositions();

  constructor(db: DB) {
    this.statements = prepare(db);
  }

  usageSummary(accountId: string, since: number): UsageSummary {
    const row = this.statements.summary.get(accountId, since) as {
      requests: number;
      succeeded: number | null;
      failed: number | null;
      input_tokens: number | null;
      output_tokens: number | null;
      cost_micro: number | null;
    };
    return {
      since: new Date(since).toISOString(),
      requests: row.requests,
      succeeded: row.succeeded ?? 0,
      failed: row.failed ?? 0,
      input_tokens: row.input_tokens ?? 0,
      output_tokens: row.output_tokens ?? 0,
      cost_idr: microToIdr(row.cost_micro ?? 0),
    };
  }

  usageDaily(accountId: string, since: number): UsageDay[] {
    return (
      this.statements.daily.all(accountId, since) as {
        day: string;
        requests: number;
        input_tokens: number;
        output_tokens: number;
        cost_micro: number;
      }[]
    ).map((day) => ({
      date: day.day,
      requests: day.requests,
      input_tokens: day.input_tokens,
      output_tokens: day.output_tokens,
      cost_idr: microToIdr(day.cost_micro),
    }));
  }

  usageByModel(accountId: string, since: number): UsageByModel[] {
    return this.statements.byModel.all(accountId, since) as UsageByModel[];
  }

  requestLog(accountId: string, limit: number): RequestLogRow[] {
    return this.statements.recent.all(accountId, limit) as RequestLogRow[];
  }

  recentRequests(accountId: string, limit: number): RecentRequest[] {
    return this.requestPage(accountId, { limit, order: "desc" })!.requests;
  }

  requestPage(accountId: string, page: PageQuery): RequestPage | undefined {
    let from: LogPosition | undefined;
    if (page.after !== undefined) {
      from =
        this.positions.get(accountId, page.after) ??
        (this.statements.position.get(page.after, accountId) as LogPosition | undefined);
      if (!from) return undefined;
    }
    const statements = this.statements.page[page.order];
    // One row past the page says whether there is more.
    const limit = page.limit + 1;
    const rows = (
      from
        ? statements.after.all({ account: accountId, ...from, limit })
        : statements.first.all({ account: accountId, limit })
    ) as (RequestLogRow & LogPosition)[];
    return requestPageOf(accountId, rows, page.limit, this.positions);
  }

  requestOf(accountId: string, id: string): RequestLogRow | undefined {
    return this.statements.one.get(id, accountId) as RequestLogRow | undefined;
  }

  latestRecordedAt(): number {
    return (this.statements.latest.get() as { latest: number | null }).latest ?? 0;
  }

  /** Requests admitted from `since` on (their admission time), counted per window of `windowMs`. */
  admittedSince(since: number, windowMs: number): AdmittedCount[] {
    // A BigInt binds as an integer, so the windows' starts are integers too.
    const rows = this.statements.admitted.all({ since, window: BigInt(windowMs) }) as (Omit<
      AdmittedCount,
      "shared"
    > & { shared: number })[];
    return rows.map((row) => ({ ...row, shared: row.shared === 1 }));
  }
}

/** A request's row and the job its submission queued, if it queued one. */
const loggedColumns = "l.*, j.id AS job_id";
const loggedWithJob = `request_log l
  LEFT JOIN jobs j ON j.request_id = l.id AND j.account_id = l.account_id`;

/**
 * A page of an account's log in `order`, from its first row or after a position: one range of
 * the (account_id, created_at) index, whose entries are in rowid order within a millisecond.
 */
function pageStatements(db: DB, order: "asc" | "desc") {
  const [beyond, direction] = order === "desc" ? ["<", "DESC"] : [">", "ASC"];
  const select = (where: string) =>
    db.prepare(
      `SELECT l.rowid AS position, ${loggedColumns} FROM ${loggedWithJob}
        WHERE l.account_id = @account${where}
        ORDER BY l.created_at ${direction}, l.rowid ${direction} LIMIT @limit`,
    );
  return {
    first: select(""),
    after: select(
      ` AND l.created_at ${beyond}= @created_at
        AND (l.created_at ${beyond} @created_at OR l.rowid ${beyond} @position)`,
    ),
  };
}

function prepare(db: DB) {
  const statement = (sql: string): Statement => db.prepare(sql);
  return {
    // The newest rows by insertion, not a scan of the whole log.
    latest: statement(
      `SELECT max(max(created_at, coalesce(finished_at, 0))) AS latest
         FROM (SELECT created_at, finished_at FROM request_log ORDER BY rowid DESC LIMIT 64)`,
    ),
    summary: statement(
      `SELECT count(*) AS requests, sum(state = 'settled') AS succeeded, sum(state IN ('failed', 'interrupted')) AS failed,
              sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens, sum(cost_micro) AS cost_micro
         FROM request_log WHERE account_id = ? AND created_at >= ?`,
    ),
    daily: statement(
      `SELECT strftime('%Y-%m-%d', created_at / 1000, 'unixepoch') AS day, count(*) AS requests,
              sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens, sum(cost_micro) AS cost_micro
         FROM request_log WHERE account_id = ? AND created_at >= ? GROUP BY day ORDER BY day`,
    ),
    byModel: statement(
      `SELECT coalesce(served_model, model, '-') AS model, count(*) AS requests,
              sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
              sum(cost_micro) AS cost_micro
         FROM request_log WHERE account_id = ? AND created_at >= ?
        GROUP BY coalesce(served_model, model, '-') ORDER BY cost_micro DESC, requests DESC`,
    ),
    recent: statement(
      `SELECT ${loggedColumns} FROM ${loggedWithJob} WHERE l.account_id = ?
        ORDER BY l.created_at DESC, l.rowid DESC LIMIT ?`,
    ),
    page: { desc: pageStatements(db, "desc"), asc: pageStatements(db, "asc") },
    // Newest first: a cursor not kept is most often one of the recent requests.
    position: statement(
      `SELECT created_at, rowid AS position FROM request_log WHERE id = ? AND account_id = ?
        ORDER BY created_at DESC, rowid DESC LIMIT 1`,
    ),
    one: statement(
      `SELECT ${loggedColumns} FROM ${loggedWithJob} WHERE l.id = ? AND l.account_id = ?`,
    ),
    // Account by account, each a range of the (account_id, created_at) index: the log has no
    // index on its time alone, and this runs once, at start.
    admitted: statement(
      `SELECT l.account_id AS accountId, l.key_id AS keyId, coalesce(k.kind = 'shared', 0) AS shared,
              l.endpoint, coalesce(l.model, '') AS model,
              l.created_at - l.created_at % @window AS windowStart, count(*) AS requests
         FROM request_log l LEFT JOIN api_keys k ON k.id = l.key_id
        WHERE l.account_id IN (SELECT id FROM accounts) AND l.created_at >= @since
        GROUP BY l.account_id, l.key_id, l.endpoint, l.model, windowStart
        ORDER BY windowStart`,
    ),
  };
}
