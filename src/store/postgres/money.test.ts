import { spawn } from "node:child_process";
import { once } from "node:events";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eventually } from "../../../test/support/gateways-on-postgres.js";
import { moneyInputs } from "../../../test/support/money-inputs.js";
import { createTestDatabase } from "../../../test/support/postgres.js";
import { refusalError } from "../../server/billing/payment.js";
import type { GatewayError } from "../../server/errors.js";
import type { Reservation, ReserveInput } from "../types.js";
import { utcDay } from "../utc-windows.js";
import { openPostgresPool } from "./connect.js";
import { countColumns } from "./limit-counters.js";
import { migratePostgres } from "./migrations.js";
import { CountRefused, HoldRefused, LateAnswerUnpaid, PostgresMoney } from "./money.js";

// Two gateways on one database: each has its own pool and instance id.
let url: string;
let poolA: pg.Pool;
let poolB: pg.Pool;
let gatewayA: PostgresMoney;
let gatewayB: PostgresMoney;

const now = Date.UTC(2025, 5, 15, 12, 0, 0);
let sequence = 0;

beforeAll(async () => {
  url = await createTestDatabase();
  poolA = openPostgresPool({ url, max: 10 });
  poolB = openPostgresPool({ url, max: 10 });
  await migratePostgres(poolA);
  gatewayA = new PostgresMoney(poolA, { instanceId: "gateway-a" });
  gatewayB = new PostgresMoney(poolB, { instanceId: "gateway-b" });
  await gatewayA.register();
  await gatewayB.register();
});

afterAll(async () => {
  await poolA?.end();
  await poolB?.end();
});

async function account(fields: Record<string, string | number | null>): Promise<string> {
  const id = `acct-${++sequence}`;
  const columns = ["id", "created_at", ...Object.keys(fields)];
  const values = [id, now, ...Object.values(fields)];
  await poolA.query(
    `INSERT INTO accounts (${columns.join(", ")}) VALUES (${columns.map((_, i) => `$${i + 1}`).join(", ")})`,
    values,
  );
  return id;
}

const { request, outcome } = moneyInputs(now);

/** What the gateway answers for a refused hold (billing maps the store's refusal). */
function asSpecError(reason: unknown): GatewayError {
  expect(reason).toBeInstanceOf(HoldRefused);
  const { refusal, retryAfter } = reason as HoldRefused;
  return refusalError(refusal, retryAfter);
}

/** 100 attempts at once, alternating between the two gateways; the admitted and the refusals. */
async function race(make: () => ReserveInput, attempts = 100) {
  const results = await Promise.allSettled(
    Array.from({ length: attempts }, (_, i) => (i % 2 ? gatewayB : gatewayA).reserve(make())),
  );
  const admitted = results.flatMap((r) => (r.status === "fulfilled" ? [r.value] : []));
  const refused = results.flatMap((r) => (r.status === "rejected" ? [asSpecError(r.reason)] : []));
  return { admitted, refused };
}

async function accountRow(id: string) {
  const result = await poolA.query("SELECT * FROM accounts WHERE id = $1", [id]);
  return result.rows[0];
}

async function holdsOf(id: string): Promise<number> {
  const result = await poolA.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM holds WHERE account_id = $1",
    [id],
  );
  return result.rows[0].n;
}

/** An account's per-minute counts, by window. */
async function counted(key: string): Promise<{ window_end: number; count: number }[]> {
  const result = await poolA.query(
    "SELECT window_end::float8 AS window_end, count FROM limit_counts WHERE key = $1 ORDER BY window_end",
    [key],
  );
  return result.rows;
}

describe("holds exact across two gateways", () => {
  it("a balance for exactly N holds admits exactly N of 100 concurrent requests", async () => {
    const id = await account({ balance_micro: 37 * 1_000 + 999 });
    const { admitted, refused } = await race(() => request(id));
    expect(admitted).toHaveLength(37);
    expect(admitted.every((r) => r.payment === "balance" && r.reservedMicro === 1_000)).toBe(true);
    expect(new Set(refused.map((e) => `${e.status} ${e.code}`))).toEqual(
      new Set(["402 insufficient_balance"]),
    );
    const row = await accountRow(id);
    expect(row.held_micro).toBe(37_000);
    expect(row.balance_micro).toBe(37_999);
    // Each gateway asked 50 times, and alone would have admitted 37: the total of 37 shows each
    // saw the other's holds. Which gateway got how many depends on whose batch came first.
    expect(await holdsOf(id)).toBe(37);
  });

  it("PAYG admits exactly up to its limit, after the balance", async () => {
    const id = await account({
      balance_micro: 5_000,
      payg_enabled: 1,
      payg_limit_micro: 23 * 1_000 + 500,
      payg_window_start: now - 1_000,
    });
    const { admitted, refused } = await race(() => request(id));
    expect(admitted.filter((r) => r.payment === "balance")).toHaveLength(5);
    expect(admitted.filter((r) => r.payment === "payg")).toHaveLength(23);
    expect(new Set(refused.map((e) => `${e.status} ${e.code}`))).toEqual(
      new Set(["402 payg_limit_reached"]),
    );
    const row = await accountRow(id);
    expect(row.held_micro).toBe(5_000);
    expect(row.payg_held_micro).toBe(23_000);
  });

  it("a PAYG window that has run out starts over before the limit is checked", async () => {
    const day = 86_400;
    const id = await account({
      payg_enabled: 1,
      payg_limit_micro: 2_000,
      payg_spent_micro: 2_000,
      payg_window_seconds: day,
      payg_window_start: now - 3 * day * 1000 - 5,
    });
    const { admitted } = await race(() => request(id), 10);
    expect(admitted).toHaveLength(2);
    const row = await accountRow(id);
    expect(row.payg_spent_micro).toBe(0);
    expect(row.payg_window_start).toBe(now - 5);
  });

  it("subscription windows admit exactly their smallest quota, counted in every window", async () => {
    const subscription = {
      plan: "team",
      windows: [
        { name: "5h", seconds: 5 * 3600, quota: 12 },
        { name: "week", seconds: 7 * 86_400, quota: 9 },
      ],
      payg_fallback: false,
      free_fallback: false,
    };
    const id = await account({
      balance_micro: 1_000_000,
      subscription_json: JSON.stringify(subscription),
      subscription_started_at: now - 1_000,
    });
    const { admitted, refused } = await race(() => request(id, { subscriptionModel: true }));
    expect(admitted).toHaveLength(9);
    expect(admitted.every((r) => r.payment === "subscription" && r.reservedMicro === 0)).toBe(true);
    expect(admitted[0].paymentRef).toBe(JSON.stringify({ "5h": now - 1_000, week: now - 1_000 }));
    expect(new Set(refused.map((e) => `${e.status} ${e.code}`))).toEqual(
      new Set(["429 plan_limit_reached"]),
    );
    const usage = await poolA.query(
      "SELECT window_name, used, held FROM subscription_usage WHERE account_id = $1 ORDER BY window_name",
      [id],
    );
    expect(usage.rows).toEqual([
      { window_name: "5h", used: 0, held: 9 },
      { window_name: "week", used: 0, held: 9 },
    ]);
    // The full window refused the rest without holding anything on the balance.
    expect((await accountRow(id)).held_micro).toBe(0);
  });

  it("a full subscription falls back to PAYG when the plan says so", async () => {
    const id = await account({
      payg_enabled: 1,
      payg_limit_micro: 4_000,
      payg_window_start: now,
      subscription_json: JSON.stringify({
        windows: [{ name: "day", seconds: 86_400, quota: 3 }],
        payg_fallback: true,
      }),
    });
    const { admitted, refused } = await race(() => request(id, { subscriptionModel: true }), 20);
    expect(admitted.filter((r) => r.payment === "subscription")).toHaveLength(3);
    expect(admitted.filter((r) => r.payment === "payg")).toHaveLength(4);
    expect(refused.every((e) => e.code === "payg_limit_reached")).toBe(true);
  });

  it("a full subscription falls back to the free allowance when the plan says so", async () => {
    const id = await account({
      balance_micro: 1_000_000,
      subscription_json: JSON.stringify({
        windows: [{ name: "day", seconds: 86_400, quota: 2 }],
        free_fallback: true,
      }),
    });
    const { admitted, refused } = await race(
      () => request(id, { subscriptionModel: true, freeDailyLimit: 3 }),
      10,
    );
    expect(admitted.filter((r) => r.payment === "subscription")).toHaveLength(2);
    expect(admitted.filter((r) => r.payment === "free")).toHaveLength(3);
    expect(refused.every((e) => e.code === "free_quota_daily")).toBe(true);
    expect((await accountRow(id)).held_micro).toBe(0);
  });

  it("a subscription window that has rolled over counts from zero again", async () => {
    const hour = 3600;
    const started = now - 3 * hour * 1000 - 10;
    const id = await account({
      subscription_json: JSON.stringify({ windows: [{ name: "1h", seconds: hour, quota: 4 }] }),
      subscription_started_at: started,
    });
    await poolA.query(
      `INSERT INTO subscription_usage (account_id, window_name, window_start, used, held)
       VALUES ($1, '1h', $2, 4, 1)`,
      [id, started + hour * 1000],
    );
    const { admitted } = await race(() => request(id, { subscriptionModel: true }), 10);
    expect(admitted).toHaveLength(4);
    const usage = await poolA.query(
      "SELECT window_start, used, held FROM subscription_usage WHERE account_id = $1",
      [id],
    );
    expect(usage.rows).toEqual([{ window_start: now - 10, used: 0, held: 4 }]);
  });

  it("the free daily allowance admits exactly its limit, and says when it resets", async () => {
    const id = await account({});
    const { admitted, refused } = await race(() =>
      request(id, { payment: "free", worstCaseMicro: 0, freeDailyLimit: 11 }),
    );
    expect(admitted).toHaveLength(11);
    expect(admitted.every((r) => r.payment === "free" && r.paymentRef === "2025-06-15")).toBe(true);
    expect(refused).toHaveLength(89);
    expect(refused[0].status).toBe(429);
    expect(refused[0].code).toBe("free_quota_daily");
    expect(refused[0].options.retryAfter).toBe(12 * 3600);
  });

  it("BYOK holds nothing and touches no row", async () => {
    const id = await account({});
    const r = await gatewayA.reserve(request(id, { payment: "byok" }));
    expect(r).toMatchObject({ payment: "byok", reservedMicro: 0, paymentRef: null });
    expect(await holdsOf(id)).toBe(0);
    expect(await gatewayA.settle(r, outcome())).toBe(0);
    const log = await poolA.query(
      "SELECT payment, cost_micro, state FROM request_log WHERE id = $1",
      [r.id],
    );
    expect(log.rows).toEqual([{ payment: "byok", cost_micro: 0, state: "settled" }]);
  });
});

describe("the per-minute count taken with the hold", () => {
  const perMinute = (id: string, limit: number) => ({
    key: `paid-rpm|${id}`,
    limit,
    windowMs: 60_000,
  });

  it("a limit of N admits exactly N of 100 concurrent requests, and refuses the rest unheld", async () => {
    const id = await account({ balance_micro: 1_000_000 });
    const results = await Promise.allSettled(
      Array.from({ length: 100 }, (_, i) =>
        (i % 2 ? gatewayB : gatewayA).reserve(request(id, { count: perMinute(id, 23) })),
      ),
    );
    const admitted = results.filter((r) => r.status === "fulfilled");
    const refused = results.flatMap((r) => (r.status === "rejected" ? [r.reason] : []));
    expect(admitted).toHaveLength(23);
    expect(refused).toHaveLength(77);
    expect(refused.every((e) => e instanceof CountRefused && e.limit === 23)).toBe(true);
    expect(await holdsOf(id)).toBe(23);
    expect((await accountRow(id)).held_micro).toBe(23_000);
    expect(await counted(`paid-rpm|${id}`)).toEqual([{ window_end: now + 60_000, count: 23 }]);
  });

  it("a request refused for its money keeps its count; one over the limit holds nothing", async () => {
    const id = await account({ balance_micro: 2_500 });
    const count = perMinute(id, 3);
    await gatewayA.reserve(request(id, { count }));
    await gatewayB.reserve(request(id, { count }));
    expect(asSpecError(await gatewayA.reserve(request(id, { count })).catch((e) => e)).code).toBe(
      "insufficient_balance",
    );
    const over = await gatewayB.reserve(request(id, { count })).catch((e) => e);
    expect(over).toBeInstanceOf(CountRefused);
    expect(await counted(`paid-rpm|${id}`)).toEqual([{ window_end: now + 60_000, count: 3 }]);
    expect(await holdsOf(id)).toBe(2);
    // The next window counts again from one.
    const later = await gatewayA.reserve(
      request(id, { count, worstCaseMicro: 0, now: now + 60_000 }),
    );
    expect(later.payment).toBe("balance");
    expect((await counted(`paid-rpm|${id}`)).at(-1)).toEqual({
      window_end: now + 120_000,
      count: 1,
    });
  });

  it("a window's first take forgets its key's windows long past, and no other key's", async () => {
    const id = await account({ balance_micro: 1_000_000 });
    const key = `paid-rpm|${id}`;
    const other = `paid-rpm|someone-else-${id}`;
    const longAgo = now - 30 * 60_000;
    const recent = now - 60_000;
    for (const [k, end] of [
      [key, longAgo],
      [key, recent],
      [other, longAgo],
    ] as const) {
      await poolA.query("INSERT INTO limit_counts (key, window_end, count) VALUES ($1, $2, 5)", [
        k,
        end,
      ]);
    }
    await gatewayA.reserve(request(id, { count: perMinute(id, 10) }));
    expect((await counted(key)).map((row) => row.window_end)).toEqual([recent, now + 60_000]);
    expect(await counted(other)).toEqual([{ window_end: longAgo, count: 5 }]);
  });
});

describe("settlement", () => {
  it("charges the real cost once, releases the rest and writes one request_log row", async () => {
    const id = await account({ balance_micro: 5_000 });
    const r = await gatewayA.reserve(request(id));
    expect((await accountRow(id)).held_micro).toBe(1_000);
    // The same reservation settled by both gateways at once (a retry, a confused caller).
    const copies: Reservation[] = [r, { ...r }, { ...r }, { ...r }];
    const charges = await Promise.all(
      copies.map((copy, i) => (i % 2 ? gatewayB : gatewayA).settle(copy, outcome())),
    );
    expect(charges.sort()).toEqual([0, 0, 0, 300]);
    const row = await accountRow(id);
    expect(row.balance_micro).toBe(4_700);
    expect(row.held_micro).toBe(0);
    expect(await holdsOf(id)).toBe(0);
    const log = await poolA.query("SELECT * FROM request_log WHERE id = $1", [r.id]);
    expect(log.rows).toHaveLength(1);
    expect(log.rows[0]).toMatchObject({
      account_id: id,
      state: "settled",
      payment: "balance",
      reserved_micro: 1_000,
      cost_micro: 300,
      input_tokens: 10,
      output_tokens: 20,
      status: 200,
      provider_id: "mock",
      stream: 0,
      created_at: now,
      finished_at: now + 1,
      tools_omitted: null,
    });
    // Released money is there for the next request at once, on the other gateway too.
    const again = await gatewayB.reserve(request(id, { worstCaseMicro: 4_700 }));
    expect(again.payment).toBe("balance");
  });

  it("never charges more than was held, and nothing for a request that delivered nothing", async () => {
    const id = await account({ balance_micro: 10_000 });
    const over = await gatewayA.reserve(request(id));
    expect(await gatewayA.settle(over, outcome({ costMicro: 9_999 }))).toBe(1_000);
    const failed = await gatewayB.reserve(request(id));
    expect(
      await gatewayB.settle(
        failed,
        outcome({ delivered: false, status: 502, errorCode: "upstream_error" }),
      ),
    ).toBe(0);
    const row = await accountRow(id);
    expect(row.balance_micro).toBe(9_000);
    expect(row.held_micro).toBe(0);
    const log = await poolA.query(
      "SELECT state, cost_micro, error_code FROM request_log WHERE id = $1",
      [failed.id],
    );
    expect(log.rows).toEqual([{ state: "failed", cost_micro: 0, error_code: "upstream_error" }]);
  });

  it("PAYG settlement moves the charge from held to spent", async () => {
    const id = await account({ payg_enabled: 1, payg_limit_micro: 10_000, payg_window_start: now });
    const r = await gatewayA.reserve(request(id));
    expect(r.payment).toBe("payg");
    expect(await gatewayB.settle(r, outcome({ costMicro: 450 }))).toBe(450);
    const row = await accountRow(id);
    expect(row.payg_spent_micro).toBe(450);
    expect(row.payg_held_micro).toBe(0);
  });

  it("allowances count only delivered requests", async () => {
    const id = await account({
      subscription_json: JSON.stringify({ windows: [{ name: "day", seconds: 86_400, quota: 5 }] }),
      subscription_started_at: now,
    });
    const delivered = await gatewayA.reserve(request(id, { subscriptionModel: true }));
    const undelivered = await gatewayB.reserve(request(id, { subscriptionModel: true }));
    await gatewayA.settle(delivered, outcome());
    await gatewayB.settle(undelivered, outcome({ delivered: false }));
    const usage = await poolA.query(
      "SELECT used, held FROM subscription_usage WHERE account_id = $1",
      [id],
    );
    expect(usage.rows).toEqual([{ used: 1, held: 0 }]);

    const free = await gatewayA.reserve(
      request(id, { payment: "free", worstCaseMicro: 0, freeDailyLimit: 3 }),
    );
    await gatewayB.settle(free, outcome({ costMicro: 0 }));
    const freeUsage = await poolA.query(
      "SELECT day, used, held FROM free_usage WHERE account_id = $1",
      [id],
    );
    expect(freeUsage.rows).toEqual([{ day: "2025-06-15", used: 1, held: 0 }]);
  });

  it("release gives the hold back without charging or recording anything", async () => {
    const id = await account({ balance_micro: 2_000 });
    const r = await gatewayA.reserve(request(id));
    expect(await gatewayB.release({ ...r })).toBe(true);
    expect(await gatewayA.release(r)).toBe(false);
    expect(await accountRow(id)).toMatchObject({ balance_micro: 2_000, held_micro: 0 });
    const log = await poolA.query("SELECT count(*)::int AS n FROM request_log WHERE id = $1", [
      r.id,
    ]);
    expect(log.rows[0].n).toBe(0);
  });
});

describe("many gateways' requests at once", () => {
  it("free and paid requests of one account, held and settled in batches on two gateways, never deadlock", async () => {
    const id = await account({ balance_micro: 10_000_000 });
    // A deadlock would not show in the answers: the batch it broke is sent again call by call.
    // So the test counts the database's refusals itself.
    let deadlocks = 0;
    const undo = [poolA, poolB].map((pool) => {
      const query = pool.query;
      pool.query = ((...args: Parameters<typeof query>) =>
        (query.apply(pool, args) as unknown as Promise<unknown>).catch((err: { code?: string }) => {
          if (err.code === "40P01") deadlocks++;
          throw err;
        })) as typeof query;
      return () => {
        pool.query = query;
      };
    });
    try {
      await Promise.all(
        Array.from({ length: 1500 }, async (_, i) => {
          const free = i % 3 === 0;
          const r = await (i % 2 ? gatewayB : gatewayA).reserve(
            request(id, free ? { payment: "free", worstCaseMicro: 0, freeDailyLimit: 1_000 } : {}),
          );
          await (i % 2 ? gatewayA : gatewayB).settle(r, outcome({ costMicro: free ? 0 : 300 }));
        }),
      );
    } finally {
      for (const restore of undo) restore();
    }
    expect(deadlocks).toBe(0);
    expect((await accountRow(id)).balance_micro).toBe(10_000_000 - 1000 * 300);
  });

  it("holds of one account in two minute windows, batched on two gateways at once, never deadlock", async () => {
    const id = await account({ balance_micro: 10_000_000 });
    const count = { key: `paid-rpm|${id}`, limit: 1_000, windowMs: 60_000 };
    const edge = Math.ceil((now + 1) / 60_000) * 60_000;
    // A hold as gateway_hold_all reads it, counted in the minute `at` falls in.
    const holds = (name: string, at: number) =>
      JSON.stringify([
        {
          position: 0,
          id: `${id}-${name}`,
          account_id: id,
          instance_id: null,
          amount: 1_000,
          free: false,
          subscription_model: false,
          free_day: utcDay(at),
          free_limit: 0,
          now: at,
          ttl_ms: null,
          ...countColumns(count, at),
        },
      ]);
    const holdAll = "SELECT refusal FROM gateway_hold_all($1::jsonb)";
    const first = await poolA.connect();
    const second = await poolB.connect();
    try {
      const [{ pid }] = (await second.query<{ pid: number }>("SELECT pg_backend_pid() AS pid"))
        .rows;
      // One gateway's batch holds a request of the minute before the edge, then one after it; the
      // other gateway's batch, in between, holds only one after it. Each statement below is a
      // part of the first batch's one transaction.
      await first.query("BEGIN");
      await first.query(holdAll, [holds("before", edge - 1)]);
      const other = second.query(holdAll, [holds("other-after", edge + 1)]);
      const otherSettled = other.then(
        () => undefined,
        (err: Error) => err,
      );
      await eventually(
        async () =>
          (await poolA.query("SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1", [pid]))
            .rows[0]?.wait_event_type,
        (waiting) => waiting === "Lock",
        10_000,
        "the other gateway's batch waiting for a lock",
      );
      await first.query(holdAll, [holds("after", edge + 1)]);
      await first.query("COMMIT");
      expect(await otherSettled).toBeUndefined();
    } finally {
      first.release();
      second.release();
    }
    expect(await holdsOf(id)).toBe(3);
    expect(await counted(count.key)).toEqual([
      { window_end: edge, count: 1 },
      { window_end: edge + 60_000, count: 2 },
    ]);
  });

  it("a lone call the database broke off to end a deadlock is sent again", async () => {
    const id = await account({ balance_micro: 10_000 });
    const query = poolA.query;
    let brokenOff = 0;
    poolA.query = ((...args: Parameters<typeof query>) => {
      const config = args[0] as { name?: string };
      if (config?.name === "gateway_hold_all" && brokenOff === 0) {
        brokenOff++;
        return Promise.reject(Object.assign(new Error("deadlock detected"), { code: "40P01" }));
      }
      return query.apply(poolA, args);
    }) as typeof query;
    try {
      const r = await gatewayA.reserve(request(id));
      expect(r.payment).toBe("balance");
    } finally {
      poolA.query = query;
    }
    expect(brokenOff).toBe(1);
    expect(await holdsOf(id)).toBe(1);
  });

  it("holds, settlements and releases interleaved leave every count and balance consistent", async () => {
    const id = await account({
      balance_micro: 40_000,
      payg_enabled: 1,
      payg_limit_micro: 30_000,
      payg_window_start: now,
      subscription_json: JSON.stringify({
        windows: [
          { name: "5h", seconds: 5 * 3600, quota: 15 },
          { name: "day", seconds: 86_400, quota: 25 },
        ],
        payg_fallback: true,
      }),
      subscription_started_at: now,
    });
    const charged: number[] = [];
    const admitted: Reservation[] = [];
    const results = await Promise.allSettled(
      Array.from({ length: 120 }, async (_, i) => {
        const gateway = i % 2 ? gatewayB : gatewayA;
        const other = i % 2 ? gatewayA : gatewayB;
        const r = await gateway.reserve(request(id, { subscriptionModel: i % 3 !== 0 }));
        admitted.push(r);
        if (i % 7 === 0) {
          await other.release(r);
          return;
        }
        const cost = (i * 137) % 1_500;
        charged.push(await other.settle(r, outcome({ costMicro: cost, delivered: i % 5 !== 0 })));
      }),
    );
    // Only refusals for want of money; no deadlock, no failed settlement.
    for (const result of results) {
      if (result.status === "rejected") {
        expect(asSpecError(result.reason).code).toBe("payg_limit_reached");
      }
    }
    const row = await accountRow(id);
    expect(row.held_micro).toBe(0);
    expect(row.payg_held_micro).toBe(0);
    expect(await holdsOf(id)).toBe(0);
    const byPayment = (payment: string) => admitted.filter((r) => r.payment === payment).length;
    expect(byPayment("balance")).toBeGreaterThan(0);
    expect(byPayment("payg")).toBeGreaterThan(0);
    expect(byPayment("subscription")).toBeGreaterThan(0);
    const log = await poolA.query<{ payment: string; cost: number; n: number }>(
      `SELECT payment, sum(cost_micro)::bigint AS cost, count(*)::int AS n FROM request_log
       WHERE account_id = $1 GROUP BY payment`,
      [id],
    );
    const logged = Object.fromEntries(log.rows.map((entry) => [entry.payment, entry]));
    expect(40_000 - row.balance_micro).toBe(logged.balance?.cost ?? 0);
    expect(row.payg_spent_micro).toBe(logged.payg?.cost ?? 0);
    expect(charged.reduce((sum, charge) => sum + charge, 0)).toBe(
      (logged.balance?.cost ?? 0) + (logged.payg?.cost ?? 0),
    );
    expect(log.rows.reduce((sum, entry) => sum + entry.n, 0)).toBe(charged.length);
    const usage = await poolA.query(
      "SELECT window_name, used, held FROM subscription_usage WHERE account_id = $1",
      [id],
    );
    const delivered = await poolA.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM request_log
       WHERE account_id = $1 AND payment = 'subscription' AND state = 'settled'`,
      [id],
    );
    for (const window of usage.rows) {
      expect(window.held).toBe(0);
      expect(window.used).toBe(delivered.rows[0].n);
    }
  });
});

describe("the reaper", () => {
  it("releases the holds of a gateway that was killed once its lease runs out", async () => {
    const id = await account({ balance_micro: 10_000 });
    const mine = await gatewayB.reserve(request(id, { worstCaseMicro: 2_000 }));
    // A real process that registers with a lease, holds three requests and is SIGKILLed. The lease
    // is long, and ends below when the test moves it into the past: a loaded machine can spend any
    // short lease before the first reap, which then rightly releases the holds.
    const script = `
      import pg from "pg";
      const client = new pg.Client({ connectionString: process.env.DB_URL });
      await client.connect();
      await client.query("INSERT INTO instances (id, started_at, lease_until) VALUES ('doomed', gateway_now_ms(), gateway_now_ms() + 600000)");
      for (let i = 0; i < 3; i++) {
        await client.query("SELECT * FROM gateway_hold($1, $2, 'doomed', 1000, false, false, '', 0, $3, NULL)", ["doomed-" + i, process.env.ACCOUNT, ${now}]);
      }
      console.log("held");
      setInterval(() => {}, 1000);
    `;
    const child = spawn(process.execPath, ["--input-type=module", "-e", script], {
      env: { ...process.env, DB_URL: url, ACCOUNT: id },
      stdio: ["ignore", "pipe", "inherit"],
    });
    const [line] = (await once(child.stdout!, "data")) as [Buffer];
    expect(line.toString().trim()).toBe("held");
    child.kill("SIGKILL");
    await once(child, "exit");
    expect((await accountRow(id)).held_micro).toBe(5_000);

    // Its lease has not run out yet: a slow gateway is not a dead one.
    expect(await gatewayB.reap()).toBe(0);
    expect((await accountRow(id)).held_micro).toBe(5_000);

    // Its lease runs out, as the database's clock passes its end.
    await poolA.query(
      "UPDATE instances SET lease_until = gateway_now_ms() - 1 WHERE id = 'doomed'",
    );
    expect(await gatewayB.reap()).toBe(3);
    const row = await accountRow(id);
    expect(row.held_micro).toBe(2_000);
    expect(row.balance_micro).toBe(10_000);
    expect(await holdsOf(id)).toBe(1);
    const instances = await poolA.query("SELECT id FROM instances WHERE id = 'doomed'");
    expect(instances.rowCount).toBe(0);

    // The live gateway's own hold was untouched and settles as usual.
    expect(await gatewayB.settle(mine, outcome({ costMicro: 1_500 }))).toBe(1_500);
    expect(await accountRow(id)).toMatchObject({ balance_micro: 8_500, held_micro: 0 });
  });

  it("a gateway that renews its lease keeps its holds; one that closes gives them back", async () => {
    const pool = openPostgresPool({ url, max: 2 });
    const short = new PostgresMoney(pool, { instanceId: "short-lease", leaseMs: 300 });
    try {
      await short.start();
      const id = await account({ balance_micro: 3_000 });
      await short.reserve(request(id));
      await new Promise((resolve) => setTimeout(resolve, 700));
      expect(await gatewayA.reap()).toBe(0);
      expect((await accountRow(id)).held_micro).toBe(1_000);
      await short.close();
      expect((await accountRow(id)).held_micro).toBe(0);
    } finally {
      await pool.end();
    }
  });

  it("a settlement after the reaper released its hold charges it once while the account can pay, and is refused (recorded, nothing charged) once it cannot", async () => {
    const pool = openPostgresPool({ url, max: 2 });
    const lapsed = new PostgresMoney(pool, { instanceId: "lapsed", leaseMs: 50 });
    try {
      await lapsed.register();
      const id = await account({ balance_micro: 3_000 });
      const paid = await lapsed.reserve(request(id));
      const unpaid = await lapsed.reserve(request(id));
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(await gatewayA.reap()).toBe(2);
      expect(await lapsed.heartbeat()).toBe(false);
      expect(await lapsed.settle(paid, outcome())).toBe(300);
      expect(await lapsed.settle({ ...paid, settled: false }, outcome())).toBe(0);
      expect(await accountRow(id)).toMatchObject({ balance_micro: 2_700, held_micro: 0 });
      await poolA.query("UPDATE accounts SET balance_micro = 200 WHERE id = $1", [id]);
      await expect(lapsed.settle(unpaid, outcome())).rejects.toBeInstanceOf(LateAnswerUnpaid);
      expect(await accountRow(id)).toMatchObject({ balance_micro: 200, held_micro: 0 });
      const log = await poolA.query(
        "SELECT id, state, status, error_code, cost_micro FROM request_log WHERE account_id = $1 ORDER BY state",
        [id],
      );
      expect(log.rows).toEqual([
        {
          id: unpaid.id,
          state: "failed",
          status: 503,
          error_code: "storage_unavailable",
          cost_micro: 0,
        },
        { id: paid.id, state: "settled", status: 200, error_code: null, cost_micro: 300 },
      ]);
    } finally {
      await pool.end();
    }
  });
});

describe("delivery marks", () => {
  it("marks asked for while another is in flight go in one statement, each stream's last kept", async () => {
    const pool = openPostgresPool({ url, max: 4 });
    const names: string[] = [];
    const query = pool.query.bind(pool) as (...args: unknown[]) => unknown;
    (pool as { query: unknown }).query = (...args: unknown[]) => {
      const first = args[0] as { name?: string };
      if (first?.name?.startsWith("gateway_mark")) names.push(first.name);
      return query(...args);
    };
    const gateway = new PostgresMoney(pool, {
      instanceId: "gateway-marks",
      parallelBatches: 1,
      leases: false,
    });
    try {
      const id = await account({ balance_micro: 50_000 });
      const streams = await Promise.all(
        Array.from({ length: 5 }, () => gateway.reserve(request(id, { stream: true }))),
      );
      // The first goes at once; the rest, one of them marked twice, wait and go together.
      await Promise.all([
        ...streams.map((r, i) => gateway.markDelivery(r, outcome({ outputTokens: 16 + i }))),
        gateway.markDelivery(streams[4], outcome({ outputTokens: 64 })),
      ]);
      expect(names).toEqual(["gateway_mark_delivery", "gateway_mark_all"]);
      const marks = await poolA.query(
        "SELECT id, instance_id, (settlement->>'output_tokens')::int AS output FROM deliveries WHERE account_id = $1 ORDER BY id",
        [id],
      );
      expect(marks.rows).toEqual(
        streams
          .map((r, i) => ({
            id: r.id,
            instance_id: "gateway-marks",
            output: i === 4 ? 64 : 16 + i,
          }))
          .sort((a, b) => a.id.localeCompare(b.id)),
      );
      // A batched mark settles its stream as a lone one does, should its gateway die.
      const applied = await poolA.query("SELECT gateway_settle_interrupted($1) AS applied", [
        streams[4].id,
      ]);
      expect(applied.rows).toEqual([{ applied: true }]);
      const log = await poolA.query("SELECT state, output_tokens FROM request_log WHERE id = $1", [
        streams[4].id,
      ]);
      expect(log.rows).toEqual([{ state: "interrupted", output_tokens: 64 }]);
    } finally {
      await pool.end();
    }
  });
});
