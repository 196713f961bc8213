import type { Statement } from "better-sqlite3";
import { microToIdr } from "../money.js";
import type {
  RecentRequest,
  RequestLogRow,
  UsageByModel,
  UsageDay,
  UsageSummary,
} from "../types.js";
import { freeTokenWindowStart, recentRequest } from "../usage-rows.js";
import type { DB } from "./db.js";

/** Usage read from the request log, and the free models' token budgets, on SQLite. */
export class SqliteUsage {
  private readonly statements: ReturnType<typeof prepare>;

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
    return this.requestLog(accountId, limit).map(recentRequest);
  }

  requestOf(accountId: string, id: string): RequestLogRow | undefined {
    return this.statements.one.get(id, accountId) as RequestLogRow | undefined;
  }

  latestRecordedAt(): number {
    return (this.statements.latest.get() as { latest: number | null }).latest ?? 0;
  }

  freeTokensUsed(model: string, windowSeconds: number, now: number): number {
    const row = this.statements.freeTokens.get(model) as
      | { window_start: number; tokens: number }
      | undefined;
    return row && row.window_start === freeTokenWindowStart(windowSeconds, now) ? row.tokens : 0;
  }
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
      `SELECT coalesce(model, '-') AS model, count(*) AS requests, sum(input_tokens) AS input_tokens,
              sum(output_tokens) AS output_tokens, sum(cost_micro) AS cost_micro
         FROM request_log WHERE account_id = ? AND created_at >= ?
        GROUP BY coalesce(model, '-') ORDER BY cost_micro DESC, requests DESC`,
    ),
    recent: statement(
      "SELECT * FROM request_log WHERE account_id = ? ORDER BY created_at DESC, rowid DESC LIMIT ?",
    ),
    one: statement("SELECT * FROM request_log WHERE id = ? AND account_id = ?"),
    freeTokens: statement("SELECT window_start, tokens FROM free_token_usage WHERE model = ?"),
  };
}
