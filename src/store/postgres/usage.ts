import type pg from "pg";
import { microToIdr } from "../money.js";
import type {
  PageQuery,
  RecentRequest,
  RequestLogRow,
  RequestPage,
  UsageByModel,
  UsageDay,
  UsageRepository,
  UsageSummary,
} from "../types.js";
import {
  freeTokenWindowStart,
  type LogPosition,
  LogPositions,
  requestPageOf,
} from "../usage-rows.js";

// Sums of bigint columns are numeric on Postgres: cast back to bigint, they arrive as numbers.
const summary = `SELECT count(*) AS requests,
    count(*) FILTER (WHERE state = 'settled') AS succeeded,
    count(*) FILTER (WHERE state IN ('failed', 'interrupted')) AS failed,
    sum(input_tokens)::bigint AS input_tokens, sum(output_tokens)::bigint AS output_tokens,
    sum(cost_micro)::bigint AS cost_micro
  FROM request_log WHERE account_id = $1 AND created_at >= $2`;

// The UTC day of a time in milliseconds, as SQLite's strftime of it in whole seconds.
const daily = `SELECT to_char(to_timestamp(created_at / 1000) AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day,
    count(*) AS requests, sum(input_tokens)::bigint AS input_tokens,
    sum(output_tokens)::bigint AS output_tokens, sum(cost_micro)::bigint AS cost_micro
  FROM request_log WHERE account_id = $1 AND created_at >= $2
  GROUP BY day ORDER BY day`;

const byModel = `SELECT coalesce(served_model, model, '-') AS model, count(*) AS requests,
    sum(input_tokens)::bigint AS input_tokens, sum(output_tokens)::bigint AS output_tokens,
    sum(cost_micro)::bigint AS cost_micro
  FROM request_log WHERE account_id = $1 AND created_at >= $2
  GROUP BY coalesce(served_model, model, '-') ORDER BY cost_micro DESC, requests DESC`;

// A request's row and the job its submission queued, if it queued one.
const columns = `l.id, l.account_id, l.key_id, l.endpoint, l.model, l.state, l.payment,
    l.payment_ref, l.reserved_micro, l.cost_micro, l.input_tokens, l.output_tokens, l.status,
    l.error_code, l.provider_id, l.served_model, l.stream, l.created_at, l.finished_at, l.tools_omitted,
    j.id AS job_id`;
const logged = `request_log l
  LEFT JOIN jobs j ON j.request_id = l.id AND j.account_id = l.account_id`;

// Rows written in the same millisecond come newest first by their write order, as SQLite's rowid.
const recent = `SELECT ${columns}
  FROM ${logged} WHERE l.account_id = $1 ORDER BY l.created_at DESC, l.seq DESC LIMIT $2`;

// A page of an account's log in either order, from its first row or after a request's place in it
// (its admission time, then `seq`): one range of the (account_id, created_at) index.
const pageColumns = `${columns}, l.seq AS position`;
const pages = {
  desc: {
    first: `SELECT ${pageColumns} FROM ${logged} WHERE l.account_id = $1
      ORDER BY l.created_at DESC, l.seq DESC LIMIT $2`,
    after: `SELECT ${pageColumns} FROM ${logged} WHERE l.account_id = $1
      AND l.created_at <= $3 AND (l.created_at < $3 OR l.seq < $4)
      ORDER BY l.created_at DESC, l.seq DESC LIMIT $2`,
  },
  asc: {
    first: `SELECT ${pageColumns} FROM ${logged} WHERE l.account_id = $1
      ORDER BY l.created_at ASC, l.seq ASC LIMIT $2`,
    after: `SELECT ${pageColumns} FROM ${logged} WHERE l.account_id = $1
      AND l.created_at >= $3 AND (l.created_at > $3 OR l.seq > $4)
      ORDER BY l.created_at ASC, l.seq ASC LIMIT $2`,
  },
};

// Newest first: a cursor not kept is most often one of the recent requests.
const position = `SELECT created_at, seq AS position FROM request_log
  WHERE id = $1 AND account_id = $2 ORDER BY created_at DESC, seq DESC LIMIT 1`;

const one = `SELECT ${columns} FROM ${logged} WHERE l.id = $1 AND l.account_id = $2`;

/** Usage read from the request log, and the free models' token budgets, on Postgres. */
export class PostgresUsage implements UsageRepository {
  private readonly positions = new LogPositions();

  constructor(private readonly pool: pg.Pool) {}

  async usageSummary(accountId: string, since: number): Promise<UsageSummary> {
    const result = await this.pool.query<{
      requests: number;
      succeeded: number;
      failed: number;
      input_tokens: number | null;
      output_tokens: number | null;
      cost_micro: number | null;
    }>({ name: "pg_usage_summary", text: summary, values: [accountId, since] });
    const row = result.rows[0];
    return {
      since: new Date(since).toISOString(),
      requests: row.requests,
      succeeded: row.succeeded,
      failed: row.failed,
      input_tokens: row.input_tokens ?? 0,
      output_tokens: row.output_tokens ?? 0,
      cost_idr: microToIdr(row.cost_micro ?? 0),
    };
  }

  async usageDaily(accountId: string, since: number): Promise<UsageDay[]> {
    const result = await this.pool.query<{
      day: string;
      requests: number;
      input_tokens: number;
      output_tokens: number;
      cost_micro: number;
    }>({ name: "pg_usage_daily", text: daily, values: [accountId, since] });
    return result.rows.map((day) => ({
      date: day.day,
      requests: day.requests,
      input_tokens: day.input_tokens,
      output_tokens: day.output_tokens,
      cost_idr: microToIdr(day.cost_micro),
    }));
  }

  async usageByModel(accountId: string, since: number): Promise<UsageByModel[]> {
    const result = await this.pool.query<UsageByModel>({
      name: "pg_usage_by_model",
      text: byModel,
      values: [accountId, since],
    });
    return result.rows;
  }

  async requestLog(accountId: string, limit: number): Promise<RequestLogRow[]> {
    const result = await this.pool.query<RequestLogRow>({
      name: "pg_usage_recent",
      text: recent,
      values: [accountId, limit],
    });
    return result.rows;
  }

  async requestOf(accountId: string, id: string): Promise<RequestLogRow | undefined> {
    const result = await this.pool.query<RequestLogRow>({
      name: "pg_usage_one_request",
      text: one,
      values: [id, accountId],
    });
    return result.rows[0];
  }

  async recentRequests(accountId: string, limit: number): Promise<RecentRequest[]> {
    return (await this.requestPage(accountId, { limit, order: "desc" }))!.requests;
  }

  async requestPage(accountId: string, page: PageQuery): Promise<RequestPage | undefined> {
    const values: (string | number)[] = [accountId, page.limit + 1];
    if (page.after !== undefined) {
      const from =
        this.positions.get(accountId, page.after) ??
        (
          await this.pool.query<LogPosition>({
            name: "pg_usage_request_position",
            text: position,
            values: [page.after, accountId],
          })
        ).rows[0];
      if (!from) return undefined;
      values.push(from.created_at, from.position);
    }
    const start = page.after === undefined ? "first" : "after";
    // One row past the page says whether there is more.
    const result = await this.pool.query<RequestLogRow & LogPosition>({
      name: `pg_usage_page_${page.order}_${start}`,
      text: pages[page.order][start],
      values,
    });
    return requestPageOf(accountId, result.rows, page.limit, this.positions);
  }

  async latestRecordedAt(): Promise<number> {
    // The newest rows by their number, not a scan of the whole log.
    const result = await this.pool.query<{ latest: number | null }>({
      name: "pg_usage_latest_recorded",
      text: `SELECT max(GREATEST(created_at, coalesce(finished_at, 0))) AS latest
        FROM (SELECT created_at, finished_at FROM request_log ORDER BY seq DESC LIMIT 64) newest`,
    });
    return Number(result.rows[0]?.latest ?? 0);
  }

  async freeTokensUsed(model: string, windowSeconds: number, now: number): Promise<number> {
    const result = await this.pool.query<{ window_start: number; tokens: number }>({
      name: "pg_usage_free_tokens",
      text: "SELECT window_start, tokens FROM free_token_usage WHERE model = $1",
      values: [model],
    });
    const row = result.rows[0];
    // A window newer than this gateway's clock is the one running: its tokens are spent.
    return row && row.window_start >= freeTokenWindowStart(windowSeconds, now) ? row.tokens : 0;
  }
}
