import pg from "pg";
import { describePostgresUrl, isPostgresUrl } from "./url.js";

export interface PostgresPoolOptions {
  /** A `postgres://` or `postgresql://` URL; libpq's query parameters (sslmode...) are honoured. */
  url: string;
  /** Connections the pool keeps at most. */
  max?: number;
  /** How long opening a connection, or waiting for a free one, may take before the call fails. */
  connectTimeoutMs?: number;
  /** How long one statement may run on the server (lock waits included) before it is cancelled. */
  statementTimeoutMs?: number;
  /** Shown in `pg_stat_activity`, so an operator can tell the gateway's sessions apart. */
  applicationName?: string;
}

const defaults = {
  // A gateway's statements are short, and under load most of them wait on the same few rows (an
  // account's balance): more connections only add waiters on those row locks, and a busy server's
  // CPU to wake them. Measured with `npm run bench` (gw-pg-*): fewer than pg's default serve more.
  max: 5,
  connectTimeoutMs: 5_000,
  statementTimeoutMs: 10_000,
  applicationName: "model-gateway",
};

/**
 * int8 arrives as text from the server. Money (micro-IDR), token counts and millisecond times
 * are bigint columns that the rest of the gateway handles as numbers, exactly as it does SQLite's
 * integers; a value a number cannot hold exactly is an error, never a rounded amount.
 */
function parseInt8(text: string): number {
  const value = Number(text);
  if (!Number.isSafeInteger(value)) {
    throw new RangeError(`a bigint column holds ${text}, beyond what the gateway computes exactly`);
  }
  return value;
}

const int8Oid = 20;

const types = {
  getTypeParser: ((oid: number, format?: "text" | "binary") =>
    oid === int8Oid && format !== "binary"
      ? parseInt8
      : pg.types.getTypeParser(oid, format ?? "text")) as typeof pg.types.getTypeParser,
};

/**
 * A pool on the database at `options.url`. Every connection has bounded connect, statement and
 * idle-in-transaction times, so a stalled server fails requests instead of hanging them; the
 * client-side query timeout backs the server's up when the server cannot be reached at all.
 */
export function openPostgresPool(options: PostgresPoolOptions): pg.Pool {
  if (!isPostgresUrl(options.url)) throw new Error("not a postgres:// URL");
  const statementTimeoutMs = options.statementTimeoutMs ?? defaults.statementTimeoutMs;
  const pool = new pg.Pool({
    connectionString: options.url,
    max: options.max ?? defaults.max,
    connectionTimeoutMillis: options.connectTimeoutMs ?? defaults.connectTimeoutMs,
    statement_timeout: statementTimeoutMs,
    query_timeout: statementTimeoutMs + 1_000,
    idle_in_transaction_session_timeout: statementTimeoutMs * 3,
    application_name: options.applicationName ?? defaults.applicationName,
    keepAlive: true,
    types,
  });
  // An idle connection that breaks (a server restart, a dropped link) is reported here; left
  // unhandled it would end the process. The pool opens a new connection for the next query.
  // Connections still closing after `end()` report the server's goodbye: nothing to say then.
  pool.on("error", (err) => {
    if (pool.ending) return;
    console.error(
      `postgres: an idle connection to ${describePostgresUrl(options.url)} failed: ${err.message}`,
    );
  });
  return pool;
}
