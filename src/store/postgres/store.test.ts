import { randomBytes } from "node:crypto";
import type pg from "pg";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { countQueries, createTestDatabase } from "../../../test/support/postgres.js";
import {
  catalogConfig,
  describeStore,
  type StoreUnderTest,
} from "../../../test/support/store-contract.js";
import { SecretKeyError } from "../secret-box.js";
import { hashSecret } from "../secrets.js";
import type { RequestLogValues } from "../types.js";
import { freeTokenWindowStart } from "../usage-rows.js";
import { openPostgresPool } from "./connect.js";
import { migratePostgres } from "./migrations.js";
import { openPostgresRepositories } from "./repositories.js";
import { PostgresStore, type PostgresStoreOptions } from "./store.js";

// Two gateways on one database, each with its own pool as separate processes would have; a
// third pool plays the operator reaching in from outside.
let pools: pg.Pool[] = [];
let tables: string[] = [];
const secretKey = randomBytes(32).toString("base64");
const opened: PostgresStore[] = [];

beforeAll(async () => {
  const url = await createTestDatabase();
  pools = [0, 1, 2].map(() => openPostgresPool({ url, max: 6 }));
  await migratePostgres(pools[0]);
  const listed = await pools[0].query<{ tablename: string }>(
    "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename",
  );
  tables = listed.rows
    .map((row) => row.tablename)
    .filter((table) => table !== "schema_migrations" && table !== "ledger_journal");
});

afterEach(async () => {
  await Promise.all(opened.splice(0).map((store) => store.close()));
});

afterAll(async () => {
  await Promise.all(pools.map((pool) => pool.end()));
});

async function emptyDatabase(): Promise<void> {
  await pools[2].query(`TRUNCATE ${tables.join(", ")} RESTART IDENTITY CASCADE`);
}

/** A gateway's store; the safety reload is far off, so a test sees only what notifications do. */
async function gateway(pool: pg.Pool, options: PostgresStoreOptions = {}): Promise<PostgresStore> {
  const store = await PostgresStore.open(pool, { secretKey, safetyTtlMs: 600_000, ...options });
  opened.push(store);
  return store;
}

const logInsert = `INSERT INTO request_log (id, account_id, key_id, endpoint, model, state, payment,
  payment_ref, reserved_micro, cost_micro, input_tokens, output_tokens, status, error_code,
  provider_id, stream, created_at, finished_at, tools_omitted, served_model)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19,
    $20)`;

function underTest(store: PostgresStore, pool: pg.Pool): StoreUnderTest {
  const repos = openPostgresRepositories(pool, store.keyRows, { instanceId: "gateway-under-test" });
  return {
    store,
    applyConfig: async (rows) => {
      await repos.configApply.apply(rows);
      await store.invalidateAll();
    },
    recordRequests: async (rows: RequestLogValues[]) => {
      for (const row of rows) await pool.query(logInsert, [...row.slice(0, 19), row[19] ?? null]);
    },
    addFreeTokens: async (model, windowSeconds, tokens, now) => {
      await pool.query("SELECT gateway_count_free_tokens($1, $2, $3)", [
        model,
        freeTokenWindowStart(windowSeconds, now),
        tokens,
      ]);
    },
    storedByokSecret: async (id) =>
      (
        await pool.query<{ secret: string }>("SELECT secret FROM byok_credentials WHERE id = $1", [
          id,
        ])
      ).rows[0]?.secret,
    storedProvider: async (id) =>
      (await pool.query("SELECT * FROM providers WHERE id = $1", [id])).rows[0] as
        | Record<string, unknown>
        | undefined,
    close: () => store.close(),
  };
}

describeStore("Postgres", async () => {
  await emptyDatabase();
  return underTest(await gateway(pools[0]), pools[0]);
});

/** Polls `read` until it gives what `expected` accepts; fails with the last value after `ms`. */
async function eventually<T>(
  read: () => T | Promise<T>,
  accept: (value: T) => boolean,
  ms = 5_000,
) {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await read();
    if (accept(value)) return value;
    if (Date.now() > deadline) throw new Error(`still ${JSON.stringify(value)} after ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** Gateways A and B on one database with the contract's catalog and an account with a key. */
async function twoGateways(options: PostgresStoreOptions = {}) {
  await emptyDatabase();
  const a = await gateway(pools[0], options);
  const b = await gateway(pools[1], options);
  await underTest(a, pools[0]).applyConfig(catalogConfig());
  await a.createAccount({
    id: "acct",
    name: "Shared",
    balanceMicro: 1_000_000,
    rpmLimit: 60,
    tier: "free",
    now: 1_000,
  });
  return { a, b };
}

describe("store across gateways (Postgres)", () => {
  it("a key minted on A is in B's memory once A has answered", async () => {
    const { a, b } = await twoGateways();
    const { key, value } = await a.createKey({ accountId: "acct", label: "k", kind: "standard" });
    expect(b.getKey(key.id)).toEqual(key);
    expect(await b.listKeys("acct")).toEqual([key]);
    expect(b.findKeyByValue(value)).toEqual({ ...key, account_status: "active" });
  });

  it("a use recorded on A is in B's listings once A's listing has it, unannounced", async () => {
    const { a, b } = await twoGateways();
    const { key } = await a.createKey({ accountId: "acct", label: "k", kind: "standard" });
    a.touchKey(key.id, 5_000);
    // A's listing waits for A's write of the use.
    expect(await a.listKeys("acct")).toEqual([{ ...key, last_used_at: 5_000 }]);
    expect(await b.listKeys("acct")).toEqual([{ ...key, last_used_at: 5_000 }]);
    expect(await b.listToolKeys("nobody")).toEqual([]);
    // B's memory was not told: a use is no announcement.
    expect(b.getKey(key.id)?.last_used_at).toBeNull();
  });

  it("a key B has not heard of is looked up in the database, then answered from memory", async () => {
    const { b } = await twoGateways();
    // Written by a writer that announces nothing: only the lookup can find it.
    const value = "kn-written-behind-the-gateways-backs-0000000000";
    await pools[2].query(
      `INSERT INTO api_keys (id, account_id, hash, prefix, label, kind, created_at)
       VALUES ('key_quiet', 'acct', $1, $2, 'quiet', 'standard', 3000)`,
      [hashSecret(value), value.slice(0, 7)],
    );
    const lookup = b.findKeyByValue(value);
    expect(lookup).toBeInstanceOf(Promise);
    expect(await lookup).toMatchObject({ id: "key_quiet", account_status: "active" });
    expect(b.findKeyByValue(value)).toMatchObject({ id: "key_quiet", label: "quiet" });
    // A miss is not remembered: each one asks again, and memory does not grow.
    expect(await b.findKeyByValue("kn-never-made")).toBeUndefined();
    expect(b.findKeyByValue("kn-never-made")).toBeInstanceOf(Promise);
  });

  it("a key revoked on A is revoked in B's memory once A's revoke has answered", async () => {
    const { a, b } = await twoGateways();
    const { key, value } = await a.createKey({ accountId: "acct", label: "k", kind: "standard" });
    expect(await b.findKeyByValue(value)).toMatchObject({ revoked_at: null });
    expect(await a.revokeKey(key.id, 50_000)).toBe(true);
    expect(b.getKey(key.id)?.revoked_at).toBe(50_000);
    expect(await b.findKeyByValue(value)).toMatchObject({ id: key.id, revoked_at: 50_000 });
  });

  it("an account suspended or changed on A is so on B once A has answered", async () => {
    const { a, b } = await twoGateways();
    const { value } = await a.createKey({ accountId: "acct", label: "k", kind: "standard" });
    expect(b.getAccount("acct")).toMatchObject({ name: "Shared", status: "active" });
    await a.setAccountStatus("acct", "suspended");
    expect(b.getAccount("acct")?.status).toBe("suspended");
    expect((await b.findKeyByValue(value))?.account_status).toBe("suspended");
    await a.updateAccount("acct", { name: "Renamed", tier: "pro" });
    expect(b.getAccount("acct")).toMatchObject({ name: "Renamed", tier: "pro" });
    expect(b.listAccounts().map((account) => account.id)).toEqual(["acct"]);
  });

  it("a BYOK credential added and removed on A is added and removed on B", async () => {
    const { a, b } = await twoGateways();
    const credential = await a.addByok("acct", "upstream", "sk-shared-secret", "main", 2_000);
    expect(b.listByok("acct").map((row) => [row.id, row.secret])).toEqual([
      [credential.id, "sk-shared-secret"],
    ]);
    expect(await a.deleteByok("acct", credential.id)).toBe(true);
    expect(a.listByok("acct")).toEqual([]);
    expect(b.listByok("acct")).toEqual([]);
  });

  it("a config applied on A reaches B's catalog and admin keys", async () => {
    const { a, b } = await twoGateways();
    expect(b.getCatalog().models.has("new-model")).toBe(false);
    const config = catalogConfig(["fast-model", "new-model"]);
    config.adminKeys.push({ id: "admin_2", hash: hashSecret("second-admin") });
    await underTest(a, pools[0]).applyConfig(config);
    expect(a.getCatalog().models.has("new-model")).toBe(true);
    expect(b.getCatalog().routes.get("chain")).toEqual(["fast-model", "new-model"]);
    expect(b.getCatalog().models.get("new-model")).toMatchObject({ provider_id: "upstream" });
    expect(b.isAdminKey("second-admin")).toBe(true);
  });

  it("money read for showing comes from the database, not B's memory", async () => {
    const { a, b } = await twoGateways();
    await pools[2].query("UPDATE accounts SET balance_micro = 777 WHERE id = 'acct'");
    expect((await b.readAccount("acct"))?.balance_micro).toBe(777);
    expect(b.getAccount("acct")?.balance_micro).toBe(777);
    expect(a.getAccount("acct")?.balance_micro).toBe(1_000_000);
    // All of them in one read, an account written behind every gateway's back among them.
    await pools[2].query(
      "INSERT INTO accounts (id, created_at, balance_micro) VALUES ('behind', 9e15, 5)",
    );
    const reads = countQueries(pools[0]);
    const listed = await a.readAccounts();
    expect(reads()).toBe(1);
    expect(listed.map(({ id, balance_micro }) => ({ id, balance_micro }))).toEqual([
      { id: "acct", balance_micro: 777 },
      { id: "behind", balance_micro: 5 },
    ]);
  });

  it("the listener reconnects after its connection is cut, and reads what it missed", async () => {
    // A slow first reconnect leaves room to change things while B is not listening; A waits
    // only briefly for B's confirmation that cannot come.
    const { a, b } = await twoGateways({ reconnectDelayMs: 2_000, echoTimeoutMs: 300 });
    const { key, value } = await a.createKey({ accountId: "acct", label: "k", kind: "standard" });
    const credential = await a.addByok("acct", "upstream", "sk-before", "main", 2_000);
    expect(b.listByok("acct")).toHaveLength(1);

    const pid = b.changes.backendPid;
    expect(pid).toBeTypeOf("number");
    await pools[2].query("SELECT pg_terminate_backend($1)", [pid]);
    await eventually(
      () => b.changes.listening,
      (listening) => !listening,
    );

    // Changed while B listens to nothing: no notification reaches it.
    await a.revokeKey(key.id, 60_000);
    await a.deleteByok("acct", credential.id);
    await a.updateAccount("acct", { name: "Changed while away" });
    expect(b.changes.listening).toBe(false);
    expect(b.getKey(key.id)?.revoked_at).toBeNull();
    // Meanwhile B does not trust its memory for keys: it asks the database.
    expect(await b.findKeyByValue(value)).toMatchObject({ revoked_at: 60_000 });

    await eventually(
      () => b.changes.listening && b.getAccount("acct")?.name === "Changed while away",
      (done) => done,
    );
    expect(b.getKey(key.id)?.revoked_at).toBe(60_000);
    expect(b.listByok("acct")).toEqual([]);
    expect(b.changes.backendPid).not.toBe(pid);

    // It listens again, and A waits for it again: the next change is in B's memory at once.
    await a.setAccountStatus("acct", "suspended");
    expect(b.getAccount("acct")?.status).toBe("suspended");
    expect(b.findKeyByValue(value)).toMatchObject({ account_status: "suspended" });
  });

  it("a write whose own notification cannot come back still answers, and is in memory", async () => {
    const { a } = await twoGateways({ reconnectDelayMs: 60_000 });
    await pools[2].query("SELECT pg_terminate_backend($1)", [a.changes.backendPid]);
    await eventually(
      () => a.changes.listening,
      (listening) => !listening,
    );
    const { key, value } = await a.createKey({ accountId: "acct", label: "k", kind: "standard" });
    expect(a.getKey(key.id)).toMatchObject({ id: key.id });
    expect(await a.findKeyByValue(value)).toMatchObject({ id: key.id });
  });

  it("a gateway that closed is not waited for", async () => {
    const { a, b } = await twoGateways({ echoTimeoutMs: 15_000 });
    await a.createKey({ accountId: "acct", label: "both there", kind: "standard" });
    await b.close();
    const started = Date.now();
    await a.createKey({ accountId: "acct", label: "alone", kind: "standard" });
    expect(Date.now() - started).toBeLessThan(7_500);
  });

  it("the safety reload reads what no notification announced", async () => {
    await emptyDatabase();
    const b = await gateway(pools[1], { safetyTtlMs: 100 });
    await pools[2].query(
      "INSERT INTO accounts (id, name, created_at) VALUES ('quiet', 'Written behind its back', 1)",
    );
    await eventually(
      () => b.getAccount("quiet")?.name,
      (name) => name === "Written behind its back",
    );
  });
});

describe("opening on Postgres", () => {
  it("refuses to open without a secret key, saying which variable to set", async () => {
    await emptyDatabase();
    const failure = PostgresStore.open(pools[0], { secretKey: undefined });
    await expect(failure).rejects.toThrow(SecretKeyError);
    await expect(failure).rejects.toThrow(/GATEWAY_SECRET_KEY/);
  });

  it("refuses a key other than the one the database's credentials were sealed with", async () => {
    await emptyDatabase();
    await gateway(pools[0]);
    await expect(
      PostgresStore.open(pools[1], { secretKey: randomBytes(32).toString("base64") }),
    ).rejects.toThrow(/does not open/);
  });

  it("seals credentials still in plain text", async () => {
    const { a } = await twoGateways();
    await pools[2].query(
      `INSERT INTO byok_credentials (id, account_id, provider_id, secret, label, position, created_at, sealed)
       VALUES ('byok_plain', 'acct', 'upstream', 'sk-plain', 'old', 5, 1, 0)`,
    );
    const c = await gateway(pools[2]);
    const stored = await pools[2].query<{ secret: string; sealed: number }>(
      "SELECT secret, sealed FROM byok_credentials WHERE id = 'byok_plain'",
    );
    expect(stored.rows[0].sealed).toBe(1);
    expect(stored.rows[0].secret).not.toContain("sk-plain");
    expect(c.listByok("acct").map((row) => row.secret)).toEqual(["sk-plain"]);
    await eventually(
      () => a.listByok("acct").map((row) => row.secret),
      (secrets) => secrets.join() === "sk-plain",
    );
  });
});
