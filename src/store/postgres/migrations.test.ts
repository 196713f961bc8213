import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import type pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { createTestDatabase } from "../../../test/support/postgres.js";
import { openDatabase } from "../sqlite/db.js";
import { openPostgresPool } from "./connect.js";
import { type MigrationStep, migratePostgres, postgresMigrations } from "./migrations.js";

/** The step list as it was when each step still defined its own functions (commit 9f70e13). */
const stepsBeforeFunctionsModule = JSON.parse(
  readFileSync(
    new URL("../../../test/fixtures/postgres/migrations-9f70e13.json", import.meta.url),
    "utf8",
  ),
) as MigrationStep[];

/** What an older gateway did: each step in its transaction, recorded as migratePostgres records it. */
async function migrateWith(pool: pg.Pool, steps: MigrationStep[]): Promise<void> {
  await pool.query(
    "CREATE TABLE schema_migrations (id text PRIMARY KEY, applied_at bigint NOT NULL)",
  );
  for (const step of steps) {
    await pool.query(
      `BEGIN; ${step.sql}; INSERT INTO schema_migrations VALUES ('${step.id}', 0); COMMIT`,
    );
  }
}

async function functionDefinitions(pool: pg.Pool): Promise<Record<string, string>> {
  const rows = await pool.query<{ signature: string; definition: string }>(
    `SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')' AS signature,
       pg_get_functiondef(p.oid) AS definition
     FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
     WHERE n.nspname = 'public' ORDER BY signature`,
  );
  return Object.fromEntries(rows.rows.map((row) => [row.signature, row.definition]));
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(full);
    return entry.name.endsWith(".ts") && !entry.name.endsWith(".test.ts") ? [full] : [];
  });
}

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
      jobs: ["seq"],
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
      // A column added after a Postgres-only one (jobs' `progress` after `seq`) comes after it.
      const own = postgresOnly[table] ?? [];
      const columnsThere = postgresTables.get(table) ?? [];
      expect(
        columnsThere.filter((name) => !own.includes(name)),
        table,
      ).toEqual(sqliteColumns);
      expect(
        columnsThere.filter((name) => own.includes(name)),
        table,
      ).toEqual(own);
    }
    expect([...postgresTables.keys()].filter((table) => !sqliteTables.includes(table))).toEqual([
      "deliveries",
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

  it("a database migrated before functions.ts and a new one end with the same functions", async () => {
    const [[fresh], [migratedBefore], [halfMigratedBefore]] = await Promise.all(
      [1, 2, 3].map(() => freshPools(1)),
    );
    await migratePostgres(fresh);
    const current = await functionDefinitions(fresh);
    expect(Object.keys(current).length).toBeGreaterThan(10);

    // functions.ts has changed since (the lock order, say): a start brings them up to date.
    await migrateWith(migratedBefore, stepsBeforeFunctionsModule);
    expect(await migratePostgres(migratedBefore)).toEqual(
      postgresMigrations.slice(stepsBeforeFunctionsModule.length).map((step) => step.id),
    );
    expect(await functionDefinitions(migratedBefore)).toEqual(current);

    // Stopped before leases: gateway_hold_all and gateway_settle_all still have their old result.
    const beforeLeases = stepsBeforeFunctionsModule.findIndex((step) => step.id === "money-leases");
    await migrateWith(halfMigratedBefore, stepsBeforeFunctionsModule.slice(0, beforeLeases));
    expect(await functionDefinitions(halfMigratedBefore)).not.toEqual(current);
    expect(await migratePostgres(halfMigratedBefore)).toEqual(
      postgresMigrations.slice(beforeLeases).map((step) => step.id),
    );
    expect(await functionDefinitions(halfMigratedBefore)).toEqual(current);
  });

  it("keeps message threads and stored responses through the steps that key threads per account and give native responses their server's id", async () => {
    const [pool] = await freshPools(1);
    const first = postgresMigrations.findIndex((step) => step.id === "message-threads-per-account");
    await migrateWith(pool, postgresMigrations.slice(0, first));
    await pool.query(`INSERT INTO message_threads (message_id, account_id, conversation_json, expires_at)
      VALUES ('msg_1', 'acct', '{"messages":[]}', 10)`);
    await pool.query(`INSERT INTO stored_responses (account_id, id, previous_response_id,
        native_provider_id, response_json, input_items_json, created_at, expires_at)
      VALUES ('acct', 'resp_native', NULL, 'native key', '{}', '[]', 1, 10),
        ('acct', 'resp_translated', NULL, NULL, '{}', '[]', 1, 10)`);
    const otherAccount = () =>
      pool.query(`INSERT INTO message_threads VALUES ('msg_1', 'other', '{"messages":[1]}', 10)`);
    await expect(otherAccount()).rejects.toThrow(/duplicate key/);
    expect(await migratePostgres(pool)).toEqual(
      postgresMigrations.slice(first).map((step) => step.id),
    );
    await otherAccount();
    const threads = await pool.query(
      "SELECT account_id, conversation_json FROM message_threads ORDER BY 1",
    );
    expect(threads.rows).toEqual([
      { account_id: "acct", conversation_json: '{"messages":[]}' },
      { account_id: "other", conversation_json: '{"messages":[1]}' },
    ]);
    const responses = await pool.query(
      "SELECT id, native_id, signed_reasoning FROM stored_responses ORDER BY id",
    );
    expect(responses.rows).toEqual([
      { id: "resp_native", native_id: "resp_native", signed_reasoning: null },
      { id: "resp_translated", native_id: null, signed_reasoning: null },
    ]);
  });

  it("takes the wires a provider may speak from the list each start gives", async () => {
    const [pool] = await freshPools(1);
    await migratePostgres(pool, { wires: ["openai", "mock"] });
    const insert = (id: string, wire: string) =>
      pool.query("INSERT INTO providers (id, wire) VALUES ($1, $2)", [id, wire]);
    await insert("m", "mock");
    await expect(insert("g", "gemini")).rejects.toThrow(/not a wire this gateway speaks/);
    await expect(pool.query("UPDATE providers SET wire = 'nope' WHERE id = 'm'")).rejects.toThrow(
      /not a wire/,
    );
    await migratePostgres(pool, { wires: ["openai", "mock", "gemini"] });
    await insert("g", "gemini");
    const rows = await pool.query<{ wire: string }>("SELECT wire FROM providers ORDER BY id");
    expect(rows.rows.map((row) => row.wire)).toEqual(["gemini", "mock"]);
  });

  it("defines each function in one place in the source", () => {
    const definitions = new Map<string, string[]>();
    const src = new URL("../..", import.meta.url).pathname;
    for (const file of sourceFiles(src)) {
      const text = readFileSync(file, "utf8");
      for (const match of text.matchAll(/CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+(\w+)/gi)) {
        const name = match[1] as string;
        definitions.set(name, [...(definitions.get(name) ?? []), path.relative(src, file)]);
      }
    }
    expect(definitions.get("gateway_hold_all")).toEqual(["store/postgres/functions.ts"]);
    const twice = [...definitions].filter(([, files]) => files.length > 1);
    expect(twice).toEqual([]);
  });
});
