import { andThen, type LimitCounters, type MaybeAsync } from "../../store/types.js";
import { PlainTextError } from "../errors.js";
import { MemoryCounters, minuteMs as minute } from "./window-counter.js";

export const sharedKeyPerIpPerMinute = 30;
/** Share of the owner's per-minute limit that all holders of one shared key may use together. */
const sharedKeyAccountShare = 0.5;

/** The answer to a shared key's request over its address's limit (the spec's text, not JSON). */
export const sharedKeyIpRefusal = () =>
  new PlainTextError(429, "too many requests, try again shortly", "shared_key_ip_limit");

const ipCounter = (keyId: string, ip: string) => `shared-ip|${keyId}|${ip}`;
/** The counter of a shared key's share of its account's per-minute limit. */
export const sharedKeyCounter = (keyId: string) => `shared-key|${keyId}`;

/**
 * Shared keys' own limits, counted in `counters` (memory, or the database several gateways
 * share); each answer is synchronous when the counters' is.
 */
export class SharedKeyLimiter {
  constructor(private readonly counters: LimitCounters = new MemoryCounters()) {}

  admitIp(keyId: string, ip: string, now: number): MaybeAsync<boolean> {
    return andThen(
      this.counters.take(ipCounter(keyId, ip), sharedKeyPerIpPerMinute, minute, now),
      (count) => count !== null,
    );
  }

  /**
   * The `requests` of one HTTP request (the JSON-RPC requests of a POST to /mcp): all of them, or
   * none, as a refused request counts nothing.
   */
  async admitIpRequests(
    keyId: string,
    ip: string,
    requests: number,
    now: number,
  ): Promise<boolean> {
    const counter = ipCounter(keyId, ip);
    for (let taken = 0; taken < requests; taken++) {
      if ((await this.counters.take(counter, sharedKeyPerIpPerMinute, minute, now)) === null) {
        await this.giveBackIp(keyId, ip, taken, now);
        return false;
      }
    }
    return true;
  }

  /** Gives back `requests` that `admitIpRequests` admitted at `now` and that did not happen. */
  async giveBackIp(keyId: string, ip: string, requests: number, now: number): Promise<void> {
    const counter = ipCounter(keyId, ip);
    for (let i = 0; i < requests; i++) await this.counters.giveBack(counter, minute, now);
  }

  /** Paces the key as a whole so sharers cannot exhaust the owner's account limit. */
  admitKey(keyId: string, accountRpm: number, now: number): MaybeAsync<boolean> {
    const limit = Math.max(1, Math.floor(accountRpm * sharedKeyAccountShare));
    return andThen(
      this.counters.take(sharedKeyCounter(keyId), limit, minute, now),
      (count) => count !== null,
    );
  }
}
