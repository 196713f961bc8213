import { WindowCounter } from "./window-counter.js";

export const sharedKeyPerIpPerMinute = 30;
/** Share of the owner's per-minute limit that all holders of one shared key may use together. */
export const sharedKeyAccountShare = 0.5;

export class SharedKeyLimiter {
  private readonly perIp = new WindowCounter(60_000);
  private readonly perKey = new WindowCounter(60_000);

  admitIp(keyId: string, ip: string, now: number): boolean {
    return this.perIp.tryTake(`${keyId}|${ip}`, sharedKeyPerIpPerMinute, now);
  }

  /** Paces the key as a whole so sharers cannot exhaust the owner's account limit. */
  admitKey(keyId: string, accountRpm: number, now: number): boolean {
    const limit = Math.max(1, Math.floor(accountRpm * sharedKeyAccountShare));
    return this.perKey.tryTake(keyId, limit, now);
  }
}
