import type { AccountRow, TierRow } from "../../store/types.js";
import type { Clock } from "../clock.js";
import { GatewayError } from "../errors.js";
import type { GoneSignal } from "../http/client-signal.js";
import { WindowCounter } from "./window-counter.js";

export interface RateHeaders {
  "X-RateLimit-Limit": string;
  "X-RateLimit-Remaining": string;
  "X-RateLimit-Reset": string;
}

const rateLimited = (message: string) => new GatewayError(429, "rate_limit_exceeded", message);

/**
 * Per-minute counters live in memory: exact within this process and free of I/O on the hot path.
 * (Daily and money state lives in SQLite, see Ledger.)
 */
export class RequestLimits {
  private readonly paidRpm = new WindowCounter(60_000);
  private readonly freeRpm = new WindowCounter(60_000);
  private readonly usage = new WindowCounter(60_000);
  private readonly keyCreation = new WindowCounter(60_000);
  private readonly bursts = new Map<string, { nextSlot: number; waiting: number }>();

  /** The account's own limit for paid models on chat completions, messages and responses. */
  takePaidRpm(account: AccountRow, now: number): void {
    if (!this.paidRpm.tryTake(account.id, account.rpm_limit, now)) {
      throw rateLimited(
        `Rate limit of ${account.rpm_limit} requests per minute reached for this account.`,
      );
    }
  }

  giveBackPaidRpm(accountId: string, now: number): void {
    this.paidRpm.giveBack(accountId, now);
  }

  takeFreeRpm(accountId: string, tier: TierRow, now: number): RateHeaders {
    if (!this.freeRpm.tryTake(accountId, tier.free_rpm, now)) {
      const end = this.freeRpm.windowEnd(now);
      throw new GatewayError(
        429,
        "free_quota_rpm",
        `Free-model limit of ${tier.free_rpm} requests per minute reached.`,
        { retryAfter: Math.max(1, Math.ceil((end - now) / 1000)) },
      );
    }
    return this.freeHeaders(accountId, tier, now);
  }

  freeHeaders(accountId: string, tier: TierRow, now: number): RateHeaders {
    return {
      "X-RateLimit-Limit": String(tier.free_rpm),
      "X-RateLimit-Remaining": String(
        Math.max(0, tier.free_rpm - this.freeRpm.used(accountId, now)),
      ),
      "X-RateLimit-Reset": String(Math.floor(this.freeRpm.windowEnd(now) / 1000)),
    };
  }

  giveBackFreeRpm(accountId: string, now: number): void {
    this.freeRpm.giveBack(accountId, now);
  }

  /**
   * Free-model bursts: requests closer together than the tier's spacing wait their turn, one after
   * another; once `burst_queue` are already waiting, the flood is rejected.
   */
  async spaceFreeBurst(
    accountId: string,
    tier: TierRow,
    clock: Clock,
    signal?: GoneSignal,
  ): Promise<void> {
    if (tier.burst_spacing_ms <= 0) return;
    const t = clock.now();
    let state = this.bursts.get(accountId);
    if (!state || state.nextSlot <= t) {
      state = { nextSlot: t + tier.burst_spacing_ms, waiting: 0 };
      this.bursts.set(accountId, state);
      return;
    }
    if (state.waiting >= tier.burst_queue) {
      throw rateLimited("Too many free-model requests at once; slow down.");
    }
    const wait = state.nextSlot - t;
    state.nextSlot += tier.burst_spacing_ms;
    state.waiting++;
    try {
      await clock.sleep(wait, signal);
    } finally {
      state.waiting--;
    }
  }

  /** The three usage endpoints share one budget per account, apart from the account limit. */
  takeUsageRead(accountId: string, now: number): void {
    if (!this.usage.tryTake(accountId, 60, now)) {
      throw rateLimited("Usage endpoints are limited to 60 requests per minute.");
    }
  }

  takeKeyCreation(loginKeyId: string, now: number): void {
    if (!this.keyCreation.tryTake(loginKeyId, 20, now)) {
      throw rateLimited("Per-tool key creation is limited to 20 per minute per login key.");
    }
  }
}
