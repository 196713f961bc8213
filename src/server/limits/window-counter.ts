import type { LimitCounters } from "../../store/types.js";
import { windowEnd } from "../../store/utc-windows.js";

/** The window of every per-minute limit. */
export const minuteMs = 60_000;

/**
 * Fixed-window counters in memory: exact within one process, O(1) per check.
 * A window is identified by floor(now / windowMs); a new window starts the count at zero.
 */
export class WindowCounter {
  private readonly counts = new Map<string, { window: number; count: number }>();

  constructor(readonly windowMs: number) {}

  windowEnd(now: number): number {
    return windowEnd(now, this.windowMs);
  }

  used(key: string, now: number): number {
    const entry = this.counts.get(key);
    return entry && entry.window === Math.floor(now / this.windowMs) ? entry.count : 0;
  }

  /** Counts one if the key is under `limit`; returns whether it was counted. */
  tryTake(key: string, limit: number, now: number): boolean {
    return this.take(key, limit, now) !== null;
  }

  /** Counts one if the key is under `limit`: the count after, or null when it was not counted. */
  take(key: string, limit: number, now: number): number | null {
    const window = Math.floor(now / this.windowMs);
    let entry = this.counts.get(key);
    if (!entry || entry.window !== window) {
      if (this.counts.size > 10_000) this.sweep(window);
      entry = { window, count: 0 };
      this.counts.set(key, entry);
    }
    if (entry.count >= limit) return null;
    return ++entry.count;
  }

  /**
   * Counts `requests` admitted at `at` in the window they fell in, whatever the limit (they were
   * admitted): a start restoring counts from the request log. A later window's count stays.
   */
  restore(key: string, at: number, requests: number): void {
    const window = Math.floor(at / this.windowMs);
    const entry = this.counts.get(key);
    if (!entry || entry.window < window) this.counts.set(key, { window, count: requests });
    else if (entry.window === window) entry.count += requests;
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

/**
 * The limits' counters in this process's memory (SQLite: one gateway per database). Every answer
 * is synchronous, so a limit checked on the request path costs no promise. A start restores the
 * per-minute counts of the requests the request log has from the current minute on
 * (`restoredCounters` in billing/admission.ts), so a restart grants no new minute.
 */
export class MemoryCounters implements LimitCounters {
  /** One counter per window length, so the same key may be counted over a minute and a day. */
  private readonly windows = new Map<number, WindowCounter>();
  private readonly slots = new Map<string, { nextSlot: number; waiting: number }>();

  take(key: string, limit: number, windowMs: number, now: number): number | null {
    return this.counterFor(windowMs).take(key, limit, now);
  }

  giveBack(key: string, windowMs: number, now: number): void {
    this.windows.get(windowMs)?.giveBack(key, now);
  }

  /** See `WindowCounter.restore`. */
  restore(key: string, windowMs: number, at: number, requests: number): void {
    this.counterFor(windowMs).restore(key, at, requests);
  }

  used(key: string, windowMs: number, now: number): number {
    return this.windows.get(windowMs)?.used(key, now) ?? 0;
  }

  claimSlot(key: string, spacingMs: number, queueLimit: number, now: number): number | null {
    const slot = this.slots.get(key);
    // The last slot handed out has passed: whoever waited for it is through, the queue is empty.
    // One further ahead than a full queue reaches was handed out before the clock went back (a
    // manual clock set back, a wall clock stepped back): nobody waits for the step, the queue
    // starts over.
    if (!slot || slot.nextSlot <= now || slot.nextSlot - now > (queueLimit + 1) * spacingMs) {
      this.slots.set(key, { nextSlot: now + spacingMs, waiting: 0 });
      if (this.slots.size > 10_000) this.sweepSlots(now);
      return 0;
    }
    if (slot.waiting >= queueLimit) return null;
    const wait = slot.nextSlot - now;
    slot.nextSlot += spacingMs;
    slot.waiting++;
    return wait;
  }

  leaveSlot(key: string): void {
    const slot = this.slots.get(key);
    if (slot && slot.waiting > 0) slot.waiting--;
  }

  private counterFor(windowMs: number): WindowCounter {
    let counter = this.windows.get(windowMs);
    if (!counter) {
      counter = new WindowCounter(windowMs);
      this.windows.set(windowMs, counter);
    }
    return counter;
  }

  private sweepSlots(now: number): void {
    for (const [key, slot] of this.slots) if (slot.nextSlot <= now) this.slots.delete(key);
  }
}
