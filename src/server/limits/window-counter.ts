/**
 * Fixed-window counters in memory: exact within one process, O(1) per check.
 * A window is identified by floor(now / windowMs); a new window starts the count at zero.
 */
export class WindowCounter {
  private readonly counts = new Map<string, { window: number; count: number }>();

  constructor(readonly windowMs: number) {}

  windowEnd(now: number): number {
    return (Math.floor(now / this.windowMs) + 1) * this.windowMs;
  }

  used(key: string, now: number): number {
    const entry = this.counts.get(key);
    return entry && entry.window === Math.floor(now / this.windowMs) ? entry.count : 0;
  }

  /** Counts one if the key is under `limit`; returns whether it was counted. */
  tryTake(key: string, limit: number, now: number): boolean {
    const window = Math.floor(now / this.windowMs);
    let entry = this.counts.get(key);
    if (!entry || entry.window !== window) {
      if (this.counts.size > 10_000) this.sweep(window);
      entry = { window, count: 0 };
      this.counts.set(key, entry);
    }
    if (entry.count >= limit) return false;
    entry.count++;
    return true;
  }

  /** Gives back one count taken in the current window (a request that did not happen). */
  giveBack(key: string, now: number): void {
    const entry = this.counts.get(key);
    if (entry && entry.window === Math.floor(now / this.windowMs) && entry.count > 0) entry.count--;
  }

  private sweep(window: number): void {
    for (const [key, entry] of this.counts) if (entry.window !== window) this.counts.delete(key);
  }
}
