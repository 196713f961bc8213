import {
  type AccountRow,
  andThen,
  type CountTake,
  type LimitCounters,
  type MaybeAsync,
  type TierRow,
} from "../../store/types.js";
import { windowEnd } from "../../store/utc-windows.js";
import { GatewayError } from "../errors.js";
import type { Clock } from "../time/clock.js";
import type { GoneSignal } from "../time/gone-signal.js";
import { MemoryCounters, minuteMs as minute } from "./window-counter.js";

export interface RateHeaders {
  "X-RateLimit-Limit": string;
  "X-RateLimit-Remaining": string;
  "X-RateLimit-Reset": string;
  /** Milliseconds (of the gateway's clock) a free request waited for its burst slot. */
  "X-Gateway-Burst-Wait-Ms"?: string;
}

const rateLimited = (message: string) => new GatewayError(429, "rate_limit_exceeded", message);

/** The counters' names of an account's per-minute counts, paid and free models apart. */
export const paidRpmKey = (accountId: string) => `paid-rpm|${accountId}`;
export const freeRpmKey = (accountId: string) => `free-rpm|${accountId}`;

/** The answer to a request over its account's own per-minute limit. */
export const paidRpmRefused = (limit: number) =>
  rateLimited(`Rate limit of ${limit} requests per minute reached for this account.`);

/**
 * The per-minute limits of accounts, free models, the usage endpoints and key creation, and the
 * spacing of free-model bursts. Their counts live in `counters`: this process's memory (exact
 * within it, free of I/O on the hot path), or the database several gateways share, which makes
 * each limit one limit across all of them. Each method answers as its counters do: at once from
 * memory, as a promise from the database.
 */
export class RequestLimits {
  constructor(private readonly counters: LimitCounters = new MemoryCounters()) {}

  /** The account's own limit for paid models on chat completions, messages and responses. */
  takePaidRpm(account: AccountRow, now: number): MaybeAsync<void> {
    const { key, limit, windowMs } = this.paidRpmCount(account);
    return andThen(this.counters.take(key, limit, windowMs, now), (count) => {
      if (count === null) throw paidRpmRefused(limit);
    });
  }

  /** The count `takePaidRpm` takes, for a ledger that takes it with the hold. */
  paidRpmCount(account: AccountRow): CountTake {
    return { key: paidRpmKey(account.id), limit: account.rpm_limit, windowMs: minute };
  }

  giveBackPaidRpm(accountId: string, now: number): MaybeAsync<void> {
    return this.counters.giveBack(paidRpmKey(accountId), minute, now);
  }

  takeFreeRpm(accountId: string, tier: TierRow, now: number): MaybeAsync<RateHeaders> {
    return andThen(
      this.counters.take(freeRpmKey(accountId), tier.free_rpm, minute, now),
      (count) => {
        if (count === null) {
          throw new GatewayError(
            429,
            "free_quota_rpm",
            `Free-model limit of ${tier.free_rpm} requests per minute reached.`,
            { retryAfter: Math.max(1, Math.ceil((windowEnd(now, minute) - now) / 1000)) },
          );
        }
        return rateHeaders(tier.free_rpm, count, now);
      },
    );
  }

  freeHeaders(accountId: string, tier: TierRow, now: number): MaybeAsync<RateHeaders> {
    return andThen(this.counters.used(freeRpmKey(accountId), minute, now), (count) =>
      rateHeaders(tier.free_rpm, count, now),
    );
  }

  giveBackFreeRpm(accountId: string, now: number): MaybeAsync<void> {
    return this.counters.giveBack(freeRpmKey(accountId), minute, now);
  }

  /**
   * Free-model bursts: requests closer together than the tier's spacing wait their turn, one after
   * another; once `burst_queue` are already waiting, the flood is rejected. Answers the time waited
   * on the clock (0 when the request had its slot at once).
   */
  spaceFreeBurst(
    accountId: string,
    tier: TierRow,
    clock: Clock,
    signal?: GoneSignal,
  ): MaybeAsync<number> {
    if (tier.burst_spacing_ms <= 0) return 0;
    const key = `burst|${accountId}`;
    const claimedAt = clock.now();
    return andThen(
      this.counters.claimSlot(key, tier.burst_spacing_ms, tier.burst_queue, claimedAt),
      (wait): MaybeAsync<number> => {
        if (wait === null) throw rateLimited("Too many free-model requests at once; slow down.");
        if (wait === 0) return 0;
        // The slot is a time: a round trip to shared counters has already used part of the wait.
        // A clock set back meanwhile still had the request wait its slot, whatever it reads now.
        return this.waitForSlot(key, claimedAt + wait - clock.now(), clock, signal).then(() =>
          Math.max(wait, clock.now() - claimedAt),
        );
      },
    );
  }

  private async waitForSlot(
    key: string,
    wait: number,
    clock: Clock,
    signal: GoneSignal | undefined,
  ): Promise<void> {
    try {
      await clock.sleep(wait, signal, true);
    } finally {
      await this.counters.leaveSlot(key);
    }
  }

  /** The three usage endpoints share one budget per account, apart from the account limit. */
  takeUsageRead(accountId: string, now: number): MaybeAsync<void> {
    return andThen(this.counters.take(`usage|${accountId}`, 60, minute, now), (count) => {
      if (count === null) {
        throw rateLimited("Usage endpoints are limited to 60 requests per minute.");
      }
    });
  }

  /**
   * One more device code for the client address this minute, if under `limit`: false when not.
   * Counted before the code's own checks, so a code those refuse gives its count back.
   */
  takeDeviceCode(address: string, limit: number, now: number): MaybeAsync<boolean> {
    return andThen(
      this.counters.take(`device-code|${address}`, limit, minute, now),
      (count) => count !== null,
    );
  }

  giveBackDeviceCode(address: string, now: number): MaybeAsync<void> {
    return this.counters.giveBack(`device-code|${address}`, minute, now);
  }

  takeKeyCreation(loginKeyId: string, now: number): MaybeAsync<void> {
    return andThen(this.counters.take(`key-creation|${loginKeyId}`, 20, minute, now), (count) => {
      if (count === null) {
        throw rateLimited("Per-tool key creation is limited to 20 per minute per login key.");
      }
    });
  }
}

function rateHeaders(limit: number, count: number, now: number): RateHeaders {
  return {
    "X-RateLimit-Limit": String(limit),
    "X-RateLimit-Remaining": String(Math.max(0, limit - count)),
    "X-RateLimit-Reset": String(Math.floor(windowEnd(now, minute) / 1000)),
  };
}
