import type { TestProject } from "vitest/node";
import type { PostgresServer } from "./postgres-server.mjs";
import { startPostgresServer } from "./postgres-server.mjs";

/**
 * vitest's globalSetup: one throwaway PostgreSQL server for the whole run (each test file makes
 * its own database on it, see postgres.ts), stopped by its pid when the run ends. A machine
 * without the server binaries still runs every other test; the Postgres tests fail, saying what
 * to install.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  let server: PostgresServer | undefined;
  try {
    server = await startPostgresServer();
    project.provide("postgres", { url: server.url() });
  } catch (err) {
    project.provide("postgres", { error: (err as Error).message });
  }
  return async () => {
    await server?.stop();
  };
}
