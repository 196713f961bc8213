import { andThen, type LimitCounters, type MaybeAsync } from "../../store/types.js";
import { MemoryCounters, minuteMs as minute } from "./window-counter.js";

export const sharedKeyPerIpPerMinute = 30;
/** Share of the owner's per-minute limit that all holders of one shared key may use together. */
const sharedKeyAccountShare = 0.5;

/**
 * Shared keys' own limits, counted in `counters` (memory, or the database several gateways
 * share); each answer is synchronous when the counters' is.
 */
export class SharedKeyLimiter {
  constructor(private readonly counters: LimitCounters = new MemoryCounters()) {}

  admitIp(keyId: string, ip: string, now: number): MaybeAsync<boolean> {
    return andThen(
      this.counters.take(`shared-ip|${keyId}|${ip}`, sharedKeyPerIpPerMinute, minute, now),
      (count) => count !== null,
    );
  }

  /** Paces the key as a whole so sharers cannot exhaust the owner's account limit. */
  admitKey(keyId: string, accountRpm: number, now: number): MaybeAsync<boolean> {
    const limit = Math.max(1, Math.floor(accountRpm * sharedKeyAccountShare));
    return andThen(
      this.counters.take(`shared-key|${keyId}`, limit, minute, now),
      (count) => count !== null,
    );
  }
}
