import { randomBytes } from "node:crypto";
import pg from "pg";
import { inject } from "vitest";

declare module "vitest" {
  export interface ProvidedContext {
    /** The run's PostgreSQL server (test/support/postgres-global.ts), or why there is none. */
    postgres: { url: string } | { error: string };
  }
}

/**
 * A new, empty database on the run's PostgreSQL server, for one test file (or one test that
 * needs a fresh schema). Returns its URL. Fails, naming what to install, when the machine has no
 * PostgreSQL server binaries: the Postgres tests are never silently skipped.
 */
export async function createTestDatabase(): Promise<string> {
  const server = inject("postgres");
  if ("error" in server) throw new Error(`no PostgreSQL server for the tests: ${server.error}`);
  const name = `test_${process.pid}_${randomBytes(6).toString("hex")}`;
  const admin = new pg.Client({ connectionString: server.url });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name}`);
  } finally {
    await admin.end();
  }
  const url = new URL(server.url);
  url.pathname = `/${name}`;
  return url.toString();
}

/** Counts the statements sent through `pool` from now on: the answer is the count so far. */
export function countQueries(pool: pg.Pool): () => number {
  let sent = 0;
  const query = pool.query.bind(pool);
  pool.query = ((...args: Parameters<typeof query>) => {
    sent++;
    return query(...args);
  }) as typeof pool.query;
  return () => sent;
}
