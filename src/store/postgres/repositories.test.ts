import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase } from "../../../test/support/postgres.js";
import {
  config,
  describeRepositories,
  gatewayA,
  gatewayB,
  job,
  lease,
} from "../../../test/support/repositories-contract.js";
import type { NewDeviceCode } from "../device-codes.js";
import type { JobResult } from "../jobs.js";
import type { Reservation, SettleInput } from "../types.js";
import { openPostgresPool } from "./connect.js";
import { PostgresKeyRows } from "./key-rows.js";
import { migratePostgres } from "./migrations.js";
import { PostgresMoney, settleReservation } from "./money.js";
import { openPostgresRepositories, type PostgresRepositories } from "./repositories.js";

// Three gateways on one database: each has its own pool, as separate processes would.
let pools: pg.Pool[] = [];
let tables: string[] = [];

beforeAll(async () => {
  const url = await createTestDatabase();
  pools = [0, 1, 2].map(() => openPostgresPool({ url, max: 10 }));
  await migratePostgres(pools[0]);
  const listed = await pools[0].query<{ tablename: string }>(
    "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename",
  );
  // The schema's own bookkeeping stays; every table of data starts empty for each test.
  tables = listed.rows
    .map((row) => row.tablename)
    .filter((table) => table !== "schema_migrations" && table !== "ledger_journal");
  await openConnections();
});

/**
 * Every pool opens its connections now, so that no gateway's first statements wait on them. Done
 * again before each race: a pool closes what stayed idle for 10 s, and the contract's tests before
 * it use only the first pool, so on a loaded machine the second one came to a race cold and the
 * first took every job before it had connected.
 */
async function openConnections(): Promise<void> {
  await Promise.all(
    pools.flatMap((pool) => Array.from({ length: 10 }, () => pool.query("SELECT pg_sleep(0.05)"))),
  );
}

afterAll(async () => {
  await Promise.all(pools.map((pool) => pool.end()));
});

async function emptyDatabase(): Promise<void> {
  await pools[0].query(`TRUNCATE ${tables.join(", ")} RESTART IDENTITY CASCADE`);
}

const repositoriesOn = (pool: pg.Pool, index = 0) =>
  openPostgresRepositories(pool, new PostgresKeyRows(), { instanceId: `gateway-${index}` });

describeRepositories("Postgres", async () => {
  await emptyDatabase();
  return repositoriesOn(pools[0]);
});

/** The repositories of each of the three gateways, on a database with the contract's config. */
async function threeGateways(): Promise<PostgresRepositories[]> {
  await emptyDatabase();
  const gateways = pools.map((pool, index) => repositoriesOn(pool, index));
  await gateways[0].configApply.apply(config());
  await openConnections();
  return gateways;
}

describe("repositories across gateways (Postgres)", () => {
  it("two gateways claiming at once never get the same job", async () => {
    const [a, b] = await threeGateways();
    const count = 30;
    for (let i = 0; i < count; i++) await a.jobs.insert(job(`j${i}`, i));
    const claims = await Promise.all(
      Array.from({ length: count * 2 }, (_, i) =>
        i % 2 ? a.jobs.claimNext(gatewayA, lease, 100) : b.jobs.claimNext(gatewayB, lease, 100),
      ),
    );
    const claimed = claims.flatMap((row) => (row ? [row] : []));
    expect(claimed).toHaveLength(count);
    expect(new Set(claimed.map((row) => row.id)).size).toBe(count);
    // Both took some: the claims really ran side by side.
    expect(new Set(claimed.map((row) => row.lease_owner))).toEqual(new Set([gatewayA, gatewayB]));
  });

  it("a gateway's start-up leaves the jobs other gateways hold under live leases", async () => {
    const [a, b] = await threeGateways();
    await a.jobs.insert(job("held", 1));
    await a.jobs.claimNext(gatewayA, lease, 2);
    const unfinished = await b.jobs.requeueInterrupted();
    expect(unfinished.map((row) => [row.id, row.status, row.lease_owner])).toEqual([
      ["held", "running", gatewayA],
    ]);
    expect(await b.jobs.claimNext(gatewayB, lease, 3)).toBeUndefined();
  });

  it("parallel submissions on two gateways count against one unfinished limit", async () => {
    const [a, b] = await threeGateways();
    const submitted = await Promise.all(
      Array.from({ length: 10 }, (_, i) => (i % 2 ? a : b).jobs.insert(job(`p${i}`, i), 2)),
    );
    expect(submitted.filter(Boolean)).toHaveLength(2);
  });

  it("a login started on one gateway, approved on another and polled on a third mints one key", async () => {
    const [first, second, third] = await threeGateways();
    const started = await first.deviceCodes.issue(code("login", 0), {
      purgeBefore: 0,
      newUserCode: () => "BCDFGHJK",
      refuse: () => undefined,
    });
    expect(started).toEqual({ ok: true, userCode: "BCDFGHJK" });
    const approvals = await Promise.all(
      [second, third, second, third].map((gateway, i) =>
        gateway.deviceCodes.approve("login", approvedKey(`key_${i}`), 10),
      ),
    );
    expect(approvals.filter(Boolean)).toHaveLength(1);
    const loginKeys = (await first.configApply.tables()).api_keys.filter(
      (row) => (row as { kind: string }).kind === "login",
    );
    expect(loginKeys).toHaveLength(1);
    const polls = await Promise.all(
      [first, second, third].map((gateway) => gateway.deviceCodes.consume("login")),
    );
    expect(polls.filter(Boolean)).toHaveLength(1);
    expect(await third.deviceCodes.byHash("login")).toMatchObject({
      status: "consumed",
      key_value_sealed: null,
      key_id: (loginKeys[0] as { id: string }).id,
    });
  });

  it("device codes issued at once on two gateways respect one pending limit", async () => {
    const [a, b] = await threeGateways();
    let next = 0;
    const issued = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        (i % 2 ? a : b).deviceCodes.issue(code(`h${i}`, 1_000), {
          purgeBefore: 0,
          newUserCode: () => `CODE${next++}`,
          refuse: ({ all }) => (all.count >= 3 ? "full" : undefined),
        }),
      ),
    );
    expect(issued.filter((answer) => answer.ok)).toHaveLength(3);
  });

  it("an owner link opened on two gateways at once opens one session", async () => {
    const [a, b] = await threeGateways();
    await a.sessions.createOwnerLink("link", "acct", 1);
    const opened = await Promise.all(
      [a, b, a, b].map((gateway, i) =>
        gateway.sessions.redeemOwnerLink(
          "link",
          { tokenHash: `session-${i}`, csrfTokenHash: `csrf-${i}`, expiresAt: 1_000 },
          2,
        ),
      ),
    );
    expect(opened.filter((account) => account === "acct")).toHaveLength(1);
  });

  it("a gateway's start forgets its own and dead gateways' unused owner links, not a live one's", async () => {
    const [a, b, c] = await threeGateways();
    // gateway-0 and gateway-1 hold leases; gateway-2 never registered (it died long ago).
    await pools[0].query(
      `INSERT INTO instances (id, host, pid, started_at, lease_until)
       VALUES ('gateway-0', 'h', 1, 0, gateway_now_ms() + 60000),
              ('gateway-1', 'h', 2, 0, gateway_now_ms() + 60000)`,
    );
    await a.sessions.createOwnerLink("a-link", "acct", 1);
    await b.sessions.createOwnerLink("b-link", "acct", 1);
    await c.sessions.createOwnerLink("c-link", "acct", 1);
    await b.sessions.forgetUnusedOwnerLinks();
    const redeem = (gateway: PostgresRepositories, link: string) =>
      gateway.sessions.redeemOwnerLink(
        link,
        { tokenHash: `session-${link}`, csrfTokenHash: `csrf-${link}`, expiresAt: 1_000 },
        2,
      );
    expect(await redeem(b, "b-link")).toBeUndefined();
    expect(await redeem(c, "c-link")).toBeUndefined();
    expect(await redeem(b, "a-link")).toBe("acct");
  });

  it("each gateway keeps its own serve record", async () => {
    const [a, b] = await threeGateways();
    await a.serveRecord.record({ url: "http://a", ownerAccountId: "acct", pid: 101, startedAt: 1 });
    await b.serveRecord.record({ url: "http://b", ownerAccountId: "acct", pid: 102, startedAt: 2 });
    await b.serveRecord.forget(102);
    expect(await a.serveRecord.read()).toMatchObject({ url: "http://a", pid: 101 });
  });

  it("two gateways applying the same config at once leave what one apply does", async () => {
    const [a, b] = await threeGateways();
    const once = JSON.stringify(await a.configApply.tables());
    await Promise.all([a.configApply.apply(config()), b.configApply.apply(config())]);
    expect(JSON.stringify(await b.configApply.tables())).toBe(once);
  });
});

describe("config apply beside holds (Postgres)", () => {
  it("locks the accounts it changes in the order holds lock them, so the two never deadlock", async () => {
    const [a] = await threeGateways();
    const base = config().accounts[0];
    const accounts = (hash: string) =>
      // Listed against the database's order: a hold batch locks "alpha" before "zeta".
      ["zeta", "alpha"].map((id, i) => ({
        ...base,
        id,
        config_hash: hash,
        keys: [{ ...base.keys[0], id: `${id}-key`, hash: `hash-${id}`, prefix: `kn-${id}` }],
        balance_micro: 1_000 + i,
      }));
    await a.configApply.apply(config(accounts("first")));
    // A batch of holds (here by hand) has locked "alpha" and goes on to "zeta".
    const batch = await pools[1].connect();
    try {
      await batch.query("BEGIN");
      await batch.query("SELECT 1 FROM accounts WHERE id = 'alpha' FOR UPDATE");
      const applied = a.configApply.apply(config(accounts("second"))).then(
        () => "applied",
        (err: Error) => err.message,
      );
      // The apply is under way and waiting on "alpha".
      await new Promise((resolve) => setTimeout(resolve, 300));
      const next = await batch.query("SELECT 1 FROM accounts WHERE id = 'zeta' FOR UPDATE").then(
        () => "locked",
        (err: Error) => err.message,
      );
      await batch.query(next === "locked" ? "COMMIT" : "ROLLBACK");
      expect(next).toBe("locked");
      expect(await applied).toBe("applied");
    } finally {
      batch.release();
    }
  });
});

describe("a job's charge on Postgres", () => {
  let gateways: PostgresRepositories[];
  let money: PostgresMoney;
  const result: JobResult = { content_type: "audio/wav", duration: 5, bytes: 1 };
  const now = Date.UTC(2025, 5, 15, 12);

  async function heldJob(id: string): Promise<Reservation> {
    gateways = await threeGateways();
    money = new PostgresMoney(pools[0], { instanceId: gatewayA });
    await money.register();
    const reservation = await money.reserve({
      id: `req_${id}`,
      accountId: "acct",
      keyId: "k1",
      endpoint: "music.generations",
      model: "mock-music",
      stream: false,
      worstCaseMicro: 400_000,
      subscriptionModel: false,
      now,
    });
    await gateways[0].jobs.insert(job(id, now));
    await gateways[0].jobs.claimNext(gatewayA, lease, now);
    return reservation;
  }

  const outcome = (delivered: boolean, costMicro: number): SettleInput => ({
    status: delivered ? 200 : 503,
    costMicro,
    inputTokens: 0,
    outputTokens: 0,
    providerId: "mock",
    errorCode: delivered ? null : "upstream_error",
    delivered,
    now: now + 1,
  });

  async function moneyState(): Promise<{ balance: number; held: number; holds: number }> {
    const account = await pools[0].query<{ balance_micro: number; held_micro: number }>(
      "SELECT balance_micro, held_micro FROM accounts WHERE id = 'acct'",
    );
    const holds = await pools[0].query<{ n: number }>("SELECT count(*) AS n FROM holds");
    return {
      balance: account.rows[0].balance_micro,
      held: account.rows[0].held_micro,
      holds: holds.rows[0].n,
    };
  }

  async function logged() {
    const rows = await gateways[0].requestLog.recent({ limit: 10 });
    return rows.map(({ id, state, cost_micro }) => ({ id, state, cost_micro }));
  }

  it("completes the job and settles its hold in one transaction", async () => {
    const reservation = await heldJob("j");
    expect(await moneyState()).toEqual({ balance: 1_000_000, held: 400_000, holds: 1 });
    const done = await gateways[1].jobs.complete(
      "j",
      gatewayA,
      result,
      new Uint8Array([1]),
      now,
      (m) => m.settle(reservation, outcome(true, 300_000)),
    );
    expect(done).toBe(true);
    expect(await moneyState()).toEqual({ balance: 700_000, held: 0, holds: 0 });
    expect(await logged()).toEqual([{ id: "req_j", state: "settled", cost_micro: 300_000 }]);
  });

  it("a charge that throws after settling leaves the job running and its hold in place", async () => {
    const reservation = await heldJob("j");
    await expect(
      gateways[0].jobs.complete("j", gatewayA, result, new Uint8Array([1]), now, (m) => {
        m.settle(reservation, outcome(true, 300_000));
        throw new Error("charge failed");
      }),
    ).rejects.toThrow("charge failed");
    expect(await gateways[0].jobs.get("j", "acct")).toMatchObject({ status: "running" });
    expect(await moneyState()).toEqual({ balance: 1_000_000, held: 400_000, holds: 1 });
    expect(await logged()).toEqual([]);
  });

  /**
   * The job's gateway died (its lease ran out unrenewed) and its hold ran out (holds expire after
   * 6 h): a reaper releases it. A live job's hold outlasts its expiry.
   */
  async function holdRunsOut(): Promise<void> {
    await pools[0].query("UPDATE holds SET expires_at = 0");
    expect(await money.reap()).toBe(0);
    await pools[0].query("UPDATE jobs SET lease_expires_at = 0");
    expect(await money.reap()).toBe(1);
    expect(await moneyState()).toEqual({ balance: 1_000_000, held: 0, holds: 0 });
  }

  it("a job whose hold ran out before it ended is charged when it completes, while the account can pay", async () => {
    const reservation = await heldJob("j");
    await holdRunsOut();
    const done = await gateways[1].jobs.complete(
      "j",
      gatewayA,
      result,
      new Uint8Array([1]),
      now,
      (m) => m.settle(reservation, outcome(true, 300_000)),
    );
    expect(done).toBe(true);
    expect(await moneyState()).toEqual({ balance: 700_000, held: 0, holds: 0 });
    expect(await logged()).toEqual([{ id: "req_j", state: "settled", cost_micro: 300_000 }]);
  });

  it("a job whose hold ran out before it ended, which the account can no longer pay, fails: logged 503, charged nothing", async () => {
    const reservation = await heldJob("j");
    await holdRunsOut();
    await pools[0].query("UPDATE accounts SET balance_micro = 200000 WHERE id = 'acct'");
    const done = await gateways[1].jobs.complete(
      "j",
      gatewayA,
      result,
      new Uint8Array([1]),
      now,
      (m) => m.settle(reservation, outcome(true, 300_000)),
    );
    expect(done).toBe(false);
    const failed = await gateways[0].jobs.get("j", "acct");
    expect(failed?.status).toBe("failed");
    expect(JSON.parse(failed?.error ?? "{}")).toMatchObject({ code: "storage_unavailable" });
    expect(await moneyState()).toEqual({ balance: 200_000, held: 0, holds: 0 });
    expect(await logged()).toEqual([{ id: "req_j", state: "failed", cost_micro: 0 }]);
  });

  it("a job finished by a gateway that lost its lease settles nothing", async () => {
    const reservation = await heldJob("j");
    let asked = 0;
    const charge = (m: { settle: (r: Reservation, o: SettleInput) => void }) => {
      asked++;
      m.settle(reservation, outcome(true, 300_000));
    };
    expect(
      await gateways[0].jobs.complete("j", gatewayB, result, new Uint8Array([1]), now, charge),
    ).toBe(false);
    expect(asked).toBe(0);
    expect(await moneyState()).toEqual({ balance: 1_000_000, held: 400_000, holds: 1 });
  });

  it("fails the job and gives its hold back in one transaction, logged as failed", async () => {
    const reservation = await heldJob("j");
    const failed = await gateways[2].jobs.fail("j", gatewayA, now, (m) => {
      m.settle(reservation, outcome(false, 0));
      return { code: "upstream_error", message: "no" };
    });
    expect(failed).toBe(true);
    expect(await moneyState()).toEqual({ balance: 1_000_000, held: 0, holds: 0 });
    expect(await logged()).toEqual([{ id: "req_j", state: "failed", cost_micro: 0 }]);
    expect(await gateways[0].jobs.get("j", "acct")).toMatchObject({ status: "failed" });
  });
});

describe("the request listing on Postgres", () => {
  it("lists newest first in write order, filtered, with each key's label", async () => {
    const [gateway] = await threeGateways();
    const at = 5_000;
    const write = (id: string, model: string, status: number) =>
      settleReservation(
        pools[0],
        {
          id,
          accountId: "acct",
          keyId: "k1",
          endpoint: "/v1/chat/completions",
          model,
          stream: false,
          createdAt: at,
          payment: "byok",
          reservedMicro: 0,
          paymentRef: null,
        },
        {
          status,
          costMicro: 0,
          inputTokens: 1,
          outputTokens: 2,
          providerId: "mock",
          delivered: status === 200,
          now: at,
        },
      );
    // Written in the same millisecond: only the write order tells them apart.
    await write("first", "model-a", 200);
    await write("second", "model-b", 200);
    await write("third", "model-a", 503);
    const ids = async (filter: { model?: string; status?: number; limit: number }) =>
      (await gateway.requestLog.recent(filter)).map((row) => row.id);
    expect(await ids({ limit: 10 })).toEqual(["third", "second", "first"]);
    expect(await ids({ limit: 2 })).toEqual(["third", "second"]);
    expect(await ids({ model: "model-a", limit: 10 })).toEqual(["third", "first"]);
    expect(await ids({ status: 200, limit: 10 })).toEqual(["second", "first"]);
    const [row] = await gateway.requestLog.recent({ limit: 1 });
    expect(row).toMatchObject({ id: "third", key_label: "one", state: "failed", stream: 0 });
    expect(row).not.toHaveProperty("seq");
  });
});

function code(hash: string, now: number): NewDeviceCode {
  return {
    deviceCodeHash: hash,
    clientName: "laptop",
    clientAddress: "10.0.0.1",
    intervalSeconds: 5,
    createdAt: now,
    expiresAt: now + 600_000,
  };
}

function approvedKey(keyId: string) {
  return {
    accountId: "acct",
    keyId,
    keyHash: `hash-of-${keyId}`,
    keyPrefix: "kn-login",
    label: "laptop",
    keyValueSealed: "sealed-value",
  };
}
