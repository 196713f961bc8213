import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase } from "../../../test/support/postgres.js";
import type { GatewayError } from "../../server/errors.js";
import { RequestLimits } from "../../server/limits/request-limits.js";
import { SharedKeyLimiter } from "../../server/limits/shared-key.js";
import { ManualClock } from "../../server/time/clock.js";
import type { AccountRow, TierRow } from "../types.js";
import { openPostgresPool } from "./connect.js";
import { PostgresCounters } from "./limit-counters.js";
import { migratePostgres } from "./migrations.js";

// Two gateways on one database: each has its own pool and its own counters object.
let poolA: pg.Pool;
let poolB: pg.Pool;
let countersA: PostgresCounters;
let countersB: PostgresCounters;

const minute = 60_000;
const now = Date.UTC(2025, 5, 15, 12, 0, 0);
let sequence = 0;
/** A key no other test counts under. */
const fresh = (name: string) => `${name}-${++sequence}`;

beforeAll(async () => {
  const url = await createTestDatabase();
  poolA = openPostgresPool({ url, max: 10 });
  poolB = openPostgresPool({ url, max: 10 });
  await migratePostgres(poolA);
  countersA = new PostgresCounters(poolA);
  countersB = new PostgresCounters(poolB);
});

afterAll(async () => {
  await poolA?.end();
  await poolB?.end();
});

/** What a call that should be refused threw. */
async function refusal(work: () => unknown): Promise<GatewayError> {
  try {
    await work();
  } catch (err) {
    return err as GatewayError;
  }
  throw new Error("not refused");
}

describe("PostgresCounters", () => {
  it("counts exactly the limit across two gateways under a hundred concurrent takes", async () => {
    const key = fresh("account");
    const takes = await Promise.all(
      Array.from({ length: 100 }, (_, index) =>
        (index % 2 === 0 ? countersA : countersB).take(key, 37, minute, now + index),
      ),
    );
    const counted = takes.filter((count) => count !== null);
    expect(counted).toHaveLength(37);
    // Each take that counted saw a distinct count: none was counted twice, none skipped.
    expect([...counted].sort((a, b) => (a ?? 0) - (b ?? 0))).toEqual(
      Array.from({ length: 37 }, (_, index) => index + 1),
    );
    expect(await countersA.used(key, minute, now)).toBe(37);
    expect(await countersB.used(key, minute, now)).toBe(37);
  });

  it("starts a new window at zero at the window's boundary", async () => {
    const key = fresh("account");
    const start = Math.floor(now / minute) * minute;
    expect(await countersA.take(key, 1, minute, start + minute - 1)).toBe(1);
    expect(await countersB.take(key, 1, minute, start + minute - 1)).toBeNull();
    expect(await countersB.used(key, minute, start + minute)).toBe(0);
    expect(await countersB.take(key, 1, minute, start + minute)).toBe(1);
    expect(await countersA.used(key, minute, start + minute - 1)).toBe(1);
  });

  it("refuses everything under a limit of zero without counting it", async () => {
    const key = fresh("account");
    expect(await countersA.take(key, 0, minute, now)).toBeNull();
    expect(await countersA.used(key, minute, now)).toBe(0);
  });

  it("keeps each key and each window length apart", async () => {
    const key = fresh("account");
    await countersA.take(key, 5, minute, now);
    await countersA.take(key, 5, 1_000, now);
    await countersB.take(key, 5, 1_000, now);
    expect(await countersB.used(key, minute, now)).toBe(1);
    expect(await countersB.used(key, 1_000, now)).toBe(2);
    expect(await countersB.used(fresh("never seen"), minute, now)).toBe(0);
  });

  it("gives a count back to every gateway in the same window, never below zero", async () => {
    const key = fresh("account");
    expect(await countersA.take(key, 1, minute, now)).toBe(1);
    expect(await countersB.take(key, 1, minute, now)).toBeNull();
    await countersB.giveBack(key, minute, now + minute);
    expect(await countersA.used(key, minute, now)).toBe(1);
    await countersB.giveBack(key, minute, now);
    await countersB.giveBack(key, minute, now);
    await countersA.giveBack(fresh("never seen"), minute, now);
    expect(await countersA.used(key, minute, now)).toBe(0);
    expect(await countersA.take(key, 1, minute, now)).toBe(1);
  });

  it("forgets windows long past, and only those, when it sweeps", async () => {
    const old = fresh("old");
    const current = fresh("current");
    await countersA.take(old, 5, minute, now - 60 * minute);
    await countersA.take(current, 5, minute, now);
    await countersA.claimSlot(old, 100, 1, now - 60 * minute);
    await countersA.sweep(now);
    const counts = await poolA.query<{ key: string }>(
      "SELECT key FROM limit_counts WHERE key = ANY($1)",
      [[old, current]],
    );
    expect(counts.rows.map((row) => row.key)).toEqual([current]);
    const slots = await poolA.query("SELECT 1 FROM limit_slots WHERE key = $1", [old]);
    expect(slots.rowCount).toBe(0);
    expect(await countersB.used(current, minute, now)).toBe(1);
  });

  it("queues slots one spacing apart across gateways, then refuses past the queue limit", async () => {
    const key = fresh("burst");
    expect(await countersA.claimSlot(key, 100, 2, now + 1_000)).toBe(0);
    expect(await countersB.claimSlot(key, 100, 2, now + 1_010)).toBe(90);
    expect(await countersA.claimSlot(key, 100, 2, now + 1_020)).toBe(180);
    expect(await countersB.claimSlot(key, 100, 2, now + 1_030)).toBeNull();
    await countersA.leaveSlot(key);
    expect(await countersB.claimSlot(key, 100, 2, now + 1_040)).toBe(260);
    // Once the last slot handed out has passed, the queue starts over, whoever failed to leave.
    expect(await countersA.claimSlot(key, 100, 2, now + 1_400)).toBe(0);
    expect(await countersB.claimSlot(key, 100, 2, now + 1_400)).toBe(100);
  });

  it("starts the queue over from a clock behind the last slot by more than a full queue reaches", async () => {
    const key = fresh("burst");
    await countersA.claimSlot(key, 100, 2, now + 10_000);
    expect(await countersB.claimSlot(key, 100, 2, now + 10_000)).toBe(100);
    expect(await countersB.claimSlot(key, 100, 2, now + 1_000)).toBe(0);
    expect(await countersA.claimSlot(key, 100, 2, now + 1_000)).toBe(100);
  });

  it("hands every concurrent claimant its own slot and refuses the rest", async () => {
    const key = fresh("burst");
    await countersA.claimSlot(key, 50, 5, now);
    const waits = await Promise.all(
      Array.from({ length: 20 }, (_, index) =>
        (index % 2 === 0 ? countersA : countersB).claimSlot(key, 50, 5, now),
      ),
    );
    const queued = waits.filter((wait) => wait !== null).sort((a, b) => (a ?? 0) - (b ?? 0));
    expect(queued).toEqual([50, 100, 150, 200, 250]);
  });
});

function account(id: string, rpm: number): AccountRow {
  return {
    id,
    name: id,
    status: "active",
    balance_micro: 0,
    rpm_limit: rpm,
    tier: "free",
    payg_enabled: 0,
    payg_limit_micro: 0,
    payg_window_seconds: 0,
    payg_window_start: 0,
    payg_spent_micro: 0,
    subscription_json: null,
    subscription_started_at: null,
    created_at: now,
  };
}

const tier: TierRow = {
  name: "free",
  rank: 0,
  free_rpm: 4,
  free_daily: 100,
  burst_spacing_ms: 1_000,
  burst_queue: 1,
  min_topup_micro: null,
};

describe("RequestLimits over PostgresCounters", () => {
  it("holds an account's paid per-minute limit exactly across two gateways", async () => {
    const limitsA = new RequestLimits(countersA);
    const limitsB = new RequestLimits(countersB);
    const payer = account(fresh("acct"), 25);
    const outcomes = await Promise.allSettled(
      Array.from({ length: 60 }, (_, index) =>
        (index % 2 === 0 ? limitsA : limitsB).takePaidRpm(payer, now),
      ),
    );
    expect(outcomes.filter((outcome) => outcome.status === "fulfilled")).toHaveLength(25);
    const refused = outcomes.find((outcome) => outcome.status === "rejected");
    expect((refused as PromiseRejectedResult).reason).toMatchObject({
      status: 429,
      code: "rate_limit_exceeded",
      message: "Rate limit of 25 requests per minute reached for this account.",
    });
    // A request given back on one gateway frees its place on the other.
    await limitsA.giveBackPaidRpm(payer.id, now);
    await limitsB.takePaidRpm(payer, now);
    expect(await refusal(() => limitsA.takePaidRpm(payer, now))).toMatchObject({ status: 429 });
  });

  it("reports the shared free-model count in the rate headers of both gateways", async () => {
    const limitsA = new RequestLimits(countersA);
    const limitsB = new RequestLimits(countersB);
    const id = fresh("acct");
    const first = await limitsA.takeFreeRpm(id, tier, now);
    const second = await limitsB.takeFreeRpm(id, tier, now);
    const reset = String(Math.floor((Math.floor(now / minute) + 1) * minute) / 1000);
    expect(first).toEqual({
      "X-RateLimit-Limit": "4",
      "X-RateLimit-Remaining": "3",
      "X-RateLimit-Reset": reset,
    });
    expect(second["X-RateLimit-Remaining"]).toBe("2");
    expect(await limitsA.freeHeaders(id, tier, now)).toEqual(second);
    await limitsA.takeFreeRpm(id, tier, now);
    expect((await limitsB.takeFreeRpm(id, tier, now))["X-RateLimit-Remaining"]).toBe("0");
    const refused = await refusal(() => limitsA.takeFreeRpm(id, tier, now + 30_000));
    expect(refused).toMatchObject({
      status: 429,
      code: "free_quota_rpm",
      options: { retryAfter: 30 },
    });
  });

  it("spaces one account's free-model bursts across gateways, refusing past the queue", async () => {
    const clock = new ManualClock(now);
    const limitsA = new RequestLimits(countersA);
    const limitsB = new RequestLimits(countersB);
    const id = fresh("acct");
    const waitingFor = async () =>
      (
        await poolA.query<{ waiting: number }>("SELECT waiting FROM limit_slots WHERE key = $1", [
          `burst|${id}`,
        ])
      ).rows[0]?.waiting;
    await limitsA.spaceFreeBurst(id, tier, clock);
    let waited = false;
    const waiting = Promise.resolve(limitsB.spaceFreeBurst(id, tier, clock)).then(() => {
      waited = true;
    });
    await expect.poll(waitingFor).toBe(1);
    expect(await refusal(() => limitsA.spaceFreeBurst(id, tier, clock))).toMatchObject({
      status: 429,
      code: "rate_limit_exceeded",
      message: "Too many free-model requests at once; slow down.",
    });
    expect(waited).toBe(false);
    clock.advance(1_000);
    await waiting;
    // The waiter left its place: the next one queues instead of being refused.
    expect(await waitingFor()).toBe(0);
    const next = Promise.resolve(limitsA.spaceFreeBurst(id, tier, clock));
    await expect.poll(waitingFor).toBe(1);
    clock.advance(1_000);
    await next;
    expect(await waitingFor()).toBe(0);
  });

  it("counts usage reads, key creation and shared keys across gateways", async () => {
    const limitsA = new RequestLimits(countersA);
    const limitsB = new RequestLimits(countersB);
    const id = fresh("acct");
    for (let index = 0; index < 60; index++) {
      await (index % 2 === 0 ? limitsA : limitsB).takeUsageRead(id, now);
    }
    expect(await refusal(() => limitsA.takeUsageRead(id, now))).toMatchObject({
      message: "Usage endpoints are limited to 60 requests per minute.",
    });
    for (let index = 0; index < 20; index++) {
      await (index % 2 === 0 ? limitsA : limitsB).takeKeyCreation(id, now);
    }
    expect(await refusal(() => limitsB.takeKeyCreation(id, now))).toMatchObject({
      message: "Per-tool key creation is limited to 20 per minute per login key.",
    });

    const sharedA = new SharedKeyLimiter(countersA);
    const sharedB = new SharedKeyLimiter(countersB);
    const key = fresh("key");
    const ips = await Promise.all(
      Array.from({ length: 40 }, (_, index) =>
        (index % 2 === 0 ? sharedA : sharedB).admitIp(key, "203.0.113.9", now),
      ),
    );
    expect(ips.filter(Boolean)).toHaveLength(30);
    expect(await sharedB.admitIp(key, "203.0.113.10", now)).toBe(true);
    const paced = await Promise.all(
      Array.from({ length: 10 }, (_, index) =>
        (index % 2 === 0 ? sharedA : sharedB).admitKey(key, 8, now),
      ),
    );
    expect(paced.filter(Boolean)).toHaveLength(4);
  });
});
