import { describe, expect, it } from "vitest";
import type { AccountRow, TierRow } from "../../store/types.js";
import { ManualClock } from "../time/clock.js";
import { RequestLimits } from "./request-limits.js";
import { SharedKeyLimiter } from "./shared-key.js";

const now = Date.UTC(2025, 5, 15, 12, 0, 30);

const payer = { id: "acct", rpm_limit: 2 } as AccountRow;
const tier = { free_rpm: 2, burst_spacing_ms: 100, burst_queue: 1 } as TierRow;

function thrown(work: () => unknown): unknown {
  try {
    work();
  } catch (err) {
    return err;
  }
  throw new Error("nothing thrown");
}

describe("RequestLimits over memory", () => {
  it("answers every check at once, never with a promise", () => {
    const limits = new RequestLimits();
    expect(limits.takePaidRpm(payer, now)).toBeUndefined();
    expect(limits.giveBackPaidRpm(payer.id, now)).toBeUndefined();
    expect(limits.takeFreeRpm(payer.id, tier, now)).toEqual({
      "X-RateLimit-Limit": "2",
      "X-RateLimit-Remaining": "1",
      "X-RateLimit-Reset": String(Date.UTC(2025, 5, 15, 12, 1, 0) / 1000),
    });
    expect(limits.freeHeaders(payer.id, tier, now)).toMatchObject({ "X-RateLimit-Remaining": "1" });
    expect(limits.spaceFreeBurst(payer.id, tier, new ManualClock(now))).toBe(0);
    expect(limits.takeUsageRead(payer.id, now)).toBeUndefined();
    expect(limits.takeKeyCreation("login-key", now)).toBeUndefined();
    const shared = new SharedKeyLimiter();
    expect(shared.admitIp("key", "203.0.113.9", now)).toBe(true);
    expect(shared.admitKey("key", 2, now)).toBe(true);
    expect(shared.admitKey("key", 2, now)).toBe(false);
  });

  it("throws its refusals synchronously, with the spec's codes and messages", () => {
    const limits = new RequestLimits();
    limits.takePaidRpm(payer, now);
    limits.takePaidRpm(payer, now);
    expect(thrown(() => limits.takePaidRpm(payer, now))).toMatchObject({
      status: 429,
      code: "rate_limit_exceeded",
      message: "Rate limit of 2 requests per minute reached for this account.",
    });
    limits.giveBackPaidRpm(payer.id, now);
    expect(limits.takePaidRpm(payer, now)).toBeUndefined();
    limits.takeFreeRpm(payer.id, tier, now);
    limits.takeFreeRpm(payer.id, tier, now);
    expect(thrown(() => limits.takeFreeRpm(payer.id, tier, now))).toMatchObject({
      status: 429,
      code: "free_quota_rpm",
      options: { retryAfter: 30 },
    });
  });

  it("keeps each limit's counts apart for the same id", () => {
    const limits = new RequestLimits();
    limits.takePaidRpm(payer, now);
    limits.takePaidRpm(payer, now);
    expect(limits.takeFreeRpm(payer.id, tier, now)).toMatchObject({ "X-RateLimit-Remaining": "1" });
    for (let index = 0; index < 20; index++) limits.takeKeyCreation(payer.id, now);
    expect(limits.takeUsageRead(payer.id, now)).toBeUndefined();
  });

  it("queues a burst behind the spacing and lets it go when its slot comes", async () => {
    const limits = new RequestLimits();
    const clock = new ManualClock(now);
    limits.spaceFreeBurst(payer.id, tier, clock);
    const waiting = limits.spaceFreeBurst(payer.id, tier, clock);
    expect(waiting).toBeInstanceOf(Promise);
    expect(thrown(() => limits.spaceFreeBurst(payer.id, tier, clock))).toMatchObject({
      status: 429,
      message: "Too many free-model requests at once; slow down.",
    });
    clock.advance(100);
    await waiting;
    expect(limits.spaceFreeBurst(payer.id, tier, clock)).toBeInstanceOf(Promise);
  });
});
