import { describe, expect, it } from "vitest";
import {
  decidePayment,
  nextUtcMidnight,
  type PaymentSnapshot,
  refusalError,
  secondsToUtcMidnight,
  subscriptionWindowStart,
  topUpTier,
  utcDay,
} from "./payment.js";

const now = Date.parse("2026-11-22T10:00:00Z");
const hour = 3_600_000;

/** A paid request its balance covers five times over, on an account with nothing else. */
function snapshot(change: Partial<PaymentSnapshot> = {}): PaymentSnapshot {
  return {
    now,
    kind: "paid",
    worstCaseMicro: 1_000,
    balance: { settledMicro: 5_000, heldMicro: 0 },
    payg: {
      enabled: false,
      limitMicro: 0,
      spentMicro: 0,
      heldMicro: 0,
      windowStart: now - hour,
      windowSeconds: 24 * 3600,
    },
    subscription: null,
    free: null,
    ...change,
  };
}

const payg = (change: Partial<PaymentSnapshot["payg"]>) => ({
  ...snapshot().payg,
  enabled: true,
  limitMicro: 3_000,
  ...change,
});

const window = (name: string, used: number, held = 0) => ({
  name,
  start: now - hour,
  quota: 2,
  used,
  held,
});

const subscription = (
  windows: ReturnType<typeof window>[],
  fallback: { payg?: boolean; free?: boolean } = {},
) => ({
  windows,
  paygFallback: fallback.payg ?? false,
  freeFallback: fallback.free ?? false,
});

const free = (used: number, held = 0) => ({ day: "2026-11-22", used, held, dailyLimit: 3 });

describe("the payment decision", () => {
  it("lets BYOK requests through holding nothing", () => {
    expect(
      decidePayment(snapshot({ kind: "byok", balance: { settledMicro: 0, heldMicro: 0 } })),
    ).toEqual({ payment: "byok", reservedMicro: 0, paymentRef: null });
  });

  describe("free models", () => {
    it("count the UTC day while the daily allowance has room, holds included", () => {
      expect(decidePayment(snapshot({ kind: "free", free: free(1, 1) }))).toEqual({
        payment: "free",
        reservedMicro: 0,
        paymentRef: "2026-11-22",
      });
    });

    it("refuse with free_quota_daily until midnight UTC once used and held reach the limit", () => {
      expect(decidePayment(snapshot({ kind: "free", free: free(2, 1) }))).toEqual({
        refused: "free_quota_daily",
        retryAfter: 14 * 3600,
      });
    });
  });

  describe("subscription first", () => {
    it("counts every window while each has room", () => {
      const decision = decidePayment(
        snapshot({ subscription: subscription([window("5h", 1), window("week", 0, 1)]) }),
      );
      expect(decision).toEqual({
        payment: "subscription",
        reservedMicro: 0,
        paymentRef: JSON.stringify({ "5h": now - hour, week: now - hour }),
      });
    });

    it("refuses with plan_limit_reached when one window is full (held requests count) and no fallback is on", () => {
      expect(
        decidePayment(
          snapshot({ subscription: subscription([window("5h", 1, 1), window("w", 0)]) }),
        ),
      ).toEqual({ refused: "plan_limit_reached" });
    });

    it("falls back to the balance with payg_fallback", () => {
      const full = subscription([window("5h", 2)], { payg: true });
      expect(decidePayment(snapshot({ subscription: full }))).toEqual({
        payment: "balance",
        reservedMicro: 1_000,
        paymentRef: null,
      });
    });

    it("falls back to the free allowance with free_fallback, and refuses when that is used up", () => {
      const full = subscription([window("5h", 2)], { free: true });
      expect(decidePayment(snapshot({ subscription: full, free: free(0) }))).toMatchObject({
        payment: "free",
        paymentRef: "2026-11-22",
      });
      expect(decidePayment(snapshot({ subscription: full, free: free(3) }))).toMatchObject({
        refused: "free_quota_daily",
      });
    });
  });

  describe("then the balance", () => {
    it("holds the worst case when the balance less what is held covers it", () => {
      expect(
        decidePayment(snapshot({ balance: { settledMicro: 5_000, heldMicro: 4_000 } })),
      ).toEqual({ payment: "balance", reservedMicro: 1_000, paymentRef: null });
    });

    it("refuses with insufficient_balance when holds leave too little and PAYG is off", () => {
      expect(
        decidePayment(snapshot({ balance: { settledMicro: 5_000, heldMicro: 4_001 } })),
      ).toEqual({ refused: "insufficient_balance" });
    });
  });

  describe("then PAYG", () => {
    const poor = { balance: { settledMicro: 500, heldMicro: 0 } };

    it("holds the worst case on PAYG within its limit, holds included", () => {
      expect(
        decidePayment(snapshot({ ...poor, payg: payg({ spentMicro: 1_000, heldMicro: 1_000 }) })),
      ).toEqual({ payment: "payg", reservedMicro: 1_000, paymentRef: null });
    });

    it("refuses with payg_limit_reached past the limit", () => {
      expect(
        decidePayment(snapshot({ ...poor, payg: payg({ spentMicro: 1_000, heldMicro: 1_001 }) })),
      ).toEqual({ refused: "payg_limit_reached" });
    });

    it("starts a new window with nothing spent once the old one ended, and says where it starts", () => {
      const ended = payg({ spentMicro: 3_000, windowStart: now - 25 * hour });
      expect(decidePayment(snapshot({ ...poor, payg: ended }))).toEqual({
        payment: "payg",
        reservedMicro: 1_000,
        paymentRef: null,
        paygWindowStart: now - hour,
      });
    });

    it("still rolls an ended window when the request is refused", () => {
      const ended = payg({ heldMicro: 2_500, windowStart: now - 25 * hour });
      expect(decidePayment(snapshot({ ...poor, payg: ended }))).toEqual({
        refused: "payg_limit_reached",
        paygWindowStart: now - hour,
      });
    });
  });

  it("gives each refusal the spec's status and code", () => {
    expect(
      (["plan_limit_reached", "insufficient_balance", "payg_limit_reached"] as const).map(
        (code) => {
          const err = refusalError(code);
          return [err.status, err.code, err.options.retryAfter];
        },
      ),
    ).toEqual([
      [429, "plan_limit_reached", undefined],
      [402, "insufficient_balance", undefined],
      [402, "payg_limit_reached", undefined],
    ]);
    const daily = refusalError("free_quota_daily", 60);
    expect([daily.status, daily.code, daily.options.retryAfter]).toEqual([
      429,
      "free_quota_daily",
      60,
    ]);
  });
});

describe("days and windows", () => {
  it("name the UTC day and count the seconds to its end, never zero", () => {
    expect(utcDay(now)).toBe("2026-11-22");
    expect(nextUtcMidnight(now)).toBe(Date.parse("2026-11-23T00:00:00Z"));
    expect(secondsToUtcMidnight(Date.parse("2026-11-22T23:59:59.500Z"))).toBe(1);
  });

  it("find the start of the window running now, counted from the first", () => {
    expect(subscriptionWindowStart(1_000, 60, 1_000)).toBe(1_000);
    expect(subscriptionWindowStart(1_000, 60, 61_000)).toBe(61_000);
    expect(subscriptionWindowStart(1_000, 60, 60_999)).toBe(1_000);
  });
});

describe("the tier a top-up reaches", () => {
  const tier = (name: string, rank: number, min: number | null) => ({
    name,
    rank,
    free_rpm: 0,
    free_daily: 0,
    burst_spacing_ms: 0,
    burst_queue: 0,
    min_topup_micro: min,
  });
  const tiers = new Map(
    [tier("free", 0, null), tier("paid", 1, 10_000), tier("pro", 2, 100_000)].map((t) => [
      t.name,
      t,
    ]),
  );

  it("moves up to the highest tier the amount reaches, never down, and stays otherwise", () => {
    expect(topUpTier(tiers, "free", 9_999)).toBeNull();
    expect(topUpTier(tiers, "free", 10_000)).toBe("paid");
    expect(topUpTier(tiers, "free", 250_000)).toBe("pro");
    expect(topUpTier(tiers, "pro", 10_000)).toBeNull();
    expect(topUpTier(tiers, "paid", 10_000)).toBeNull();
    expect(topUpTier(tiers, "gone", 10_000)).toBe("paid");
  });
});
