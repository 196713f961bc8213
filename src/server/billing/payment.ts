import type { Payment, PaymentRefusal, TierRow } from "../../store/types.js";

export type { PaymentRefusal } from "../../store/types.js";

import { secondsToUtcMidnight, subscriptionWindowStart } from "../../store/utc-windows.js";
import { GatewayError } from "../errors.js";

export {
  nextUtcMidnight,
  secondsToUtcMidnight,
  subscriptionWindowStart,
  utcDay,
} from "../../store/utc-windows.js";

/**
 * The payment decision: from what an account has settled and holds, how a request is paid for
 * (subscription, then balance, then PAYG) or why it is refused. Pure: the Ledger gathers the
 * snapshot, places the hold and queues what the decision asks it to write.
 */

export interface SubscriptionWindowCount {
  name: string;
  /** Epoch milliseconds the window now running started at. */
  start: number;
  quota: number;
  /** Requests counted in this window so far. */
  used: number;
  /** Requests admitted in it and not yet settled. */
  held: number;
}

export interface PaymentSnapshot {
  now: number;
  /** Free models and BYOK requests hold no money; they only count allowances. */
  kind: "paid" | "free" | "byok";
  /** What the request may cost at most. */
  worstCaseMicro: number;
  balance: { settledMicro: number; heldMicro: number };
  payg: {
    enabled: boolean;
    limitMicro: number;
    spentMicro: number;
    heldMicro: number;
    windowStart: number;
    windowSeconds: number;
  };
  /** The account's subscription when it covers the requested model; else null. */
  subscription: {
    windows: SubscriptionWindowCount[];
    paygFallback: boolean;
    freeFallback: boolean;
  } | null;
  /** The free daily allowance: given when the request may be served from it, else null. */
  free: { day: string; used: number; held: number; dailyLimit: number } | null;
}

interface Rolled {
  /** The PAYG window ended: it starts again here, with nothing spent. */
  paygWindowStart?: number;
}

export type PaymentDecision =
  | (Rolled & {
      payment: Payment;
      reservedMicro: number;
      /** free: the UTC day counted; subscription: JSON of the window starts counted. */
      paymentRef: string | null;
    })
  | (Rolled & { refused: PaymentRefusal; retryAfter?: number });

export function decidePayment(snapshot: PaymentSnapshot): PaymentDecision {
  if (snapshot.kind === "byok") return { payment: "byok", reservedMicro: 0, paymentRef: null };
  if (snapshot.kind === "free") return takeFree(snapshot);
  const subscription = snapshot.subscription;
  if (subscription) {
    if (subscription.windows.every((window) => window.used + window.held < window.quota)) {
      const starts = Object.fromEntries(
        subscription.windows.map((window) => [window.name, window.start]),
      );
      return { payment: "subscription", reservedMicro: 0, paymentRef: JSON.stringify(starts) };
    }
    if (!subscription.paygFallback) {
      return subscription.freeFallback ? takeFree(snapshot) : { refused: "plan_limit_reached" };
    }
  }
  return holdMoney(snapshot);
}

function holdMoney({ balance, payg, worstCaseMicro, now }: PaymentSnapshot): PaymentDecision {
  if (balance.settledMicro - balance.heldMicro >= worstCaseMicro) {
    return { payment: "balance", reservedMicro: worstCaseMicro, paymentRef: null };
  }
  if (!payg.enabled) return { refused: "insufficient_balance" };
  const ended = now >= payg.windowStart + payg.windowSeconds * 1000;
  const rolled: Rolled = ended
    ? { paygWindowStart: subscriptionWindowStart(payg.windowStart, payg.windowSeconds, now) }
    : {};
  const spent = ended ? 0 : payg.spentMicro;
  if (spent + payg.heldMicro + worstCaseMicro > payg.limitMicro) {
    return { refused: "payg_limit_reached", ...rolled };
  }
  return { payment: "payg", reservedMicro: worstCaseMicro, paymentRef: null, ...rolled };
}

function takeFree({ free, now }: PaymentSnapshot): PaymentDecision {
  if (!free) throw new Error("payment: the free allowance was not in the snapshot");
  if (free.used + free.held >= free.dailyLimit) {
    return { refused: "free_quota_daily", retryAfter: secondsToUtcMidnight(now) };
  }
  return { payment: "free", reservedMicro: 0, paymentRef: free.day };
}

const refusals: Record<PaymentRefusal, { status: number; message: string }> = {
  plan_limit_reached: {
    status: 429,
    message:
      "Kuota paket langganan Anda untuk periode ini sudah habis. Tunggu hingga periode berikutnya dimulai atau aktifkan PAYG.",
  },
  insufficient_balance: {
    status: 402,
    message: "Your IDR balance is too low for this request. Top up first, then retry.",
  },
  payg_limit_reached: {
    status: 402,
    message: "PAYG spending limit reached; raise it in settings or wait for the reset window.",
  },
  free_quota_daily: {
    status: 429,
    message:
      "Free-model daily allowance used up; it resets at 00:00 UTC. A top-up or subscription raises it.",
  },
};

/**
 * A refusal for want of a way to pay (balance, PAYG, the subscription's window, its free
 * fallback), not of a limit on requests: one the account's own provider keys may serve instead.
 */
export function refusedPayment(err: unknown): boolean {
  return err instanceof GatewayError && Object.hasOwn(refusals, err.code);
}

/** The spec's error for a refusal. */
export function refusalError(refusal: PaymentRefusal, retryAfter?: number): GatewayError {
  const { status, message } = refusals[refusal];
  return new GatewayError(
    status,
    refusal,
    message,
    retryAfter === undefined ? undefined : { retryAfter },
  );
}

/**
 * The tier a top-up of `amountMicro` moves an account on `current` up to: the highest-ranked tier
 * whose minimum top-up it reaches, if that ranks above the current one; null to stay.
 */
export function topUpTier(
  tiers: ReadonlyMap<string, TierRow>,
  current: string,
  amountMicro: number,
): string | null {
  let best = tiers.get(current);
  for (const tier of tiers.values()) {
    if (
      tier.min_topup_micro !== null &&
      amountMicro >= tier.min_topup_micro &&
      tier.rank > (best?.rank ?? -1)
    )
      best = tier;
  }
  return best && best.name !== current ? best.name : null;
}
