import { clientClosed } from "./errors.js";
import type { GoneSignal } from "./http/client-signal.js";
import { sleep } from "./sleep.js";

/**
 * The one clock every window, quota, cooldown and job wait of a gateway reads. The real clock is
 * `Date.now` and a timer; a manual clock moves only when a test advances or sets it, and waits on
 * it end when it passes their deadline, so no test sleeps through a window.
 */
export interface Clock {
  readonly now: () => number;
  /** Waits until the clock has moved `ms` on; a client that leaves ends the wait (client_closed). */
  readonly sleep: (ms: number, signal?: GoneSignal) => Promise<void>;
}

export const realClock: Clock = { now: Date.now, sleep };

/** A clock at a given time; only its methods move it. */
export class ManualClock implements Clock {
  private time: number;
  private waiters: { until: number; wake: () => void }[] = [];

  constructor(start: number = Date.now()) {
    this.time = start;
  }

  readonly now = (): number => this.time;

  readonly sleep = (ms: number, signal?: GoneSignal): Promise<void> => {
    if (ms <= 0) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const waiter = {
        until: this.time + ms,
        wake: () => {
          signal?.removeEventListener("abort", onAbort);
          resolve();
        },
      };
      const onAbort = () => {
        this.waiters = this.waiters.filter((w) => w !== waiter);
        reject(clientClosed());
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.waiters.push(waiter);
    });
  };

  advance(ms: number): number {
    if (!Number.isFinite(ms) || ms < 0) throw new RangeError("advance takes a non-negative number");
    return this.set(this.time + ms);
  }

  /** Moves the clock to `to` (back as well as on); waits whose deadline it passes end. */
  set(to: number | Date): number {
    const t = typeof to === "number" ? to : to.getTime();
    if (!Number.isFinite(t)) throw new RangeError("set takes a valid time");
    this.time = t;
    const due = this.waiters.filter((w) => w.until <= t);
    this.waiters = this.waiters.filter((w) => w.until > t);
    for (const w of due.sort((a, b) => a.until - b.until)) w.wake();
    return t;
  }
}

/**
 * `now` that never goes back: a manual clock set back, or a wall clock stepped back by NTP, reads
 * as the latest time already seen, so a window used stays used and nothing spent is granted again.
 */
export function monotonic(now: () => number): () => number {
  let latest = Number.NEGATIVE_INFINITY;
  return () => {
    const t = now();
    if (t > latest) latest = t;
    return latest;
  };
}

/** The clock as a test drives it (`gateway.clock`). */
export interface GatewayClock {
  /** Milliseconds since the epoch, as the gateway sees them. */
  now(): number;
  /** Manual clock only: moves time on; returns the new time. */
  advance(ms: number): number;
  /** Manual clock only: moves time to a date (or epoch milliseconds). */
  set(to: Date | number): number;
}
