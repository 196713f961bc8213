import { afterAll, describe, expect, it } from "vitest";
import { createTestDatabase } from "../../../test/support/postgres.js";
import { openDatabase } from "../db.js";
import { openPostgresPool } from "./connect.js";
import { migratePostgres, postgresMigrations } from "./migrations.js";

const pools: { end(): Promise<void> }[] = [];

afterAll(async () => {
  await Promise.all(pools.map((pool) => pool.end()));
});

async function freshPools(count: number) {
  const url = await createTestDatabase();
  return Array.from({ length: count }, () => {
    const pool = openPostgresPool({ url, max: 2 });
    pools.push(pool);
    return pool;
  });
}

describe("postgres migrations", () => {
  it("two gateways migrating at once: each step runs exactly once", async () => {
    const [first, second, third] = await freshPools(3);
    const applied = await Promise.all([
      migratePostgres(first),
      migratePostgres(second),
      migratePostgres(third),
    ]);
    const everyStep = postgresMigrations.map((step) => step.id);
    expect(applied.flat().sort()).toEqual([...everyStep].sort());
    // One of them did all the work in order; the others found nothing left.
    expect(applied.filter((steps) => steps.length > 0)).toEqual([everyStep]);
    const recorded = await first.query<{ id: string }>("SELECT id FROM schema_migrations");
    expect(recorded.rows.map((row) => row.id).sort()).toEqual([...everyStep].sort());
    expect(await migratePostgres(second)).toEqual([]);
  });

  it("has SQLite's tables and columns, plus only what holds across gateways need", async () => {
    const [pool] = await freshPools(1);
    await migratePostgres(pool);
    const sqlite = openDatabase(":memory:");
    const sqliteTables = (
      sqlite.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").all() as {
        name: string;
      }[]
    ).map((row) => row.name);
    const postgresOnly: Record<string, string[]> = {
      accounts: ["held_micro", "payg_held_micro", "leased_micro"],
      free_usage: ["held"],
      subscription_usage: ["held"],
      request_log: ["seq"],
      owner_links: ["issuer"],
    };
    const columns = await pool.query<{ table_name: string; column_name: string }>(
      `SELECT table_name, column_name FROM information_schema.columns
       WHERE table_schema = 'public' ORDER BY table_name, ordinal_position`,
    );
    const postgresTables = new Map<string, string[]>();
    for (const row of columns.rows) {
      postgresTables.set(row.table_name, [
        ...(postgresTables.get(row.table_name) ?? []),
        row.column_name,
      ]);
    }
    for (const table of sqliteTables) {
      const sqliteColumns = (
        sqlite.prepare(`PRAGMA table_info(${table})`).all() as { name: string }[]
      ).map((column) => column.name);
      expect(postgresTables.get(table), table).toEqual([
        ...sqliteColumns,
        ...(postgresOnly[table] ?? []),
      ]);
    }
    expect([...postgresTables.keys()].filter((table) => !sqliteTables.includes(table))).toEqual([
      "holds",
      "instances",
      "leases",
      "limit_counts",
      "limit_slots",
      "provider_key_cooldowns",
      "schema_migrations",
      "serve_instances",
    ]);
    sqlite.close();
  });
});
