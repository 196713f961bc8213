import { randomBytes } from "node:crypto";
import { once } from "node:events";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type pg from "pg";
import type { ConfigInput } from "../../src/server/config/schema.js";
import { openPostgresPool } from "../../src/store/postgres/connect.js";
import { createTestDatabase } from "./postgres.js";
import { type ServeProcess, serveProcess } from "./serve-process.js";

/**
 * Several real `gateway serve` processes (the built binary) on one fresh Postgres database of the
 * test run, each given the same config file and the same secret key, as an operator runs them
 * behind a load balancer. The test reads the database through a pool of its own.
 */
export interface GatewaysOnPostgres {
  databaseUrl: string;
  /** In start order; a stopped one stays listed (its process has exited). */
  gateways: ServeProcess[];
  /** One more gateway on the database, with the same config, key and environment (and `args`). */
  start(args?: string[]): Promise<ServeProcess>;
  /** Rows of a query on the test's own connection (bigint columns as numbers, as the gateway reads them). */
  sql<Row extends pg.QueryResultRow>(text: string, values?: unknown[]): Promise<Row[]>;
  /** Every gateway's stderr, for a failing assertion's message. */
  stderr(): string;
  /** Stops every gateway by its pid (SIGTERM, then SIGKILL past a deadline) and cleans up. */
  stop(): Promise<void>;
}

export interface GatewaysOptions {
  /** Added to every gateway's environment (a lease, say). */
  env?: NodeJS.ProcessEnv;
  /** Added to every gateway's command line. */
  args?: string[];
}

/** Starts `count` gateways at once on a new database; they migrate and apply the config together. */
export async function gatewaysOnPostgres(
  count: number,
  config: ConfigInput,
  options: GatewaysOptions = {},
): Promise<GatewaysOnPostgres> {
  const databaseUrl = await createTestDatabase();
  const dir = mkdtempSync(join(tmpdir(), "gateway-multi-"));
  const configPath = join(dir, "config.json");
  writeFileSync(configPath, JSON.stringify(config));
  const env: NodeJS.ProcessEnv = {
    // Every gateway on a database must open the BYOK credentials the others sealed.
    GATEWAY_SECRET_KEY: randomBytes(32).toString("base64"),
    ...options.env,
  };
  const args = ["--db", databaseUrl, "--config", configPath, "--quiet", ...(options.args ?? [])];
  const gateways: ServeProcess[] = [];
  const pool = openPostgresPool({ url: databaseUrl, max: 2, applicationName: "gateway-test" });
  const start = async (extra: string[] = []) => {
    let gateway: ServeProcess;
    try {
      gateway = await serveProcess([...args, ...extra], env);
    } catch (err) {
      // A start that hangs is most often a wait in the database: say what every session waits on.
      const sessions = await pool
        .query(
          `SELECT pid, application_name, state, wait_event_type, wait_event,
                  left(regexp_replace(query, '[[:space:]]+', ' ', 'g'), 120) AS query,
                  (extract(epoch FROM now() - query_start) * 1000)::int AS query_ms
             FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`,
        )
        .then(
          (result) => result.rows.map((row) => JSON.stringify(row)).join("\n"),
          (failed: Error) => `(sessions unknown: ${failed.message})`,
        );
      (err as Error).message += `\nthe database's sessions:\n${sessions}`;
      throw err;
    }
    gateways.push(gateway);
    return gateway;
  };
  const cluster: GatewaysOnPostgres = {
    databaseUrl,
    gateways,
    start,
    async sql<Row extends pg.QueryResultRow>(text: string, values: unknown[] = []) {
      return (await pool.query<Row>(text, values)).rows;
    },
    stderr: () =>
      gateways.map((gateway, index) => `gateway ${index}:\n${gateway.stderr()}`).join("\n"),
    async stop() {
      await Promise.all(gateways.map((gateway) => stopByPid(gateway)));
      await pool.end();
      rmSync(dir, { recursive: true, force: true });
    },
  };
  const started = await Promise.allSettled(Array.from({ length: count }, () => start()));
  const failed = started.find((result) => result.status === "rejected");
  if (failed) {
    await cluster.stop();
    throw failed.reason;
  }
  return cluster;
}

/** Ends one gateway by its pid: SIGTERM, and SIGKILL when it has not exited within a deadline. */
export async function stopByPid(gateway: ServeProcess, graceMs = 5_000): Promise<void> {
  const { child } = gateway;
  const exited = () => child.exitCode !== null || child.signalCode !== null;
  if (exited() || child.pid === undefined) return;
  const exit = once(child, "exit");
  process.kill(child.pid, "SIGTERM");
  const timer = setTimeout(() => {
    if (!exited() && child.pid !== undefined) process.kill(child.pid, "SIGKILL");
  }, graceMs);
  await exit;
  clearTimeout(timer);
}

/** SIGKILL by pid, as a machine that lost power; resolves once the process is gone. */
export async function killByPid(gateway: ServeProcess): Promise<void> {
  const { child } = gateway;
  if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined) return;
  const exit = once(child, "exit");
  process.kill(child.pid, "SIGKILL");
  await exit;
}

/** Polls `read` until `done` holds of its answer; throws, naming the last answer, past the deadline. */
export async function eventually<T>(
  read: () => Promise<T>,
  done: (value: T) => boolean,
  timeoutMs: number,
  what: string,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    if (Date.now() > deadline)
      throw new Error(`${what}: still ${JSON.stringify(value)} after ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
