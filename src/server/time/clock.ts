import type { RequestListener } from "node:http";
import { setImmediate } from "../../host-timers.js";
import { clientClosed } from "../errors.js";
import type { GoneSignal } from "./gone-signal.js";
import { sleep } from "./sleep.js";

/**
 * The one clock every window, quota, cooldown and job wait of a gateway reads. The real clock is
 * `Date.now` and a timer; a manual clock moves only when a test advances or sets it, and waits on
 * it end when it passes their deadline, so no test sleeps through a window.
 */
export interface Clock {
  readonly now: () => number;
  /**
   * Waits until the clock has moved `ms` on; a client that leaves ends the wait (client_closed).
   * `forRequest`: a request in flight is held by this wait (a burst slot), not a background job.
   */
  readonly sleep: (ms: number, signal?: GoneSignal, forRequest?: boolean) => Promise<void>;
}

export const realClock: Clock = { now: Date.now, sleep };

export interface ManualClockOptions {
  /**
   * Like tokio's paused clock: when every request in flight waits only on this clock, it jumps to
   * the earliest of their deadlines, so a test that awaits its requests one by one never hangs.
   * Waits of background work (jobs) never move it. Off for a clock made here (nothing counts its
   * requests); `startGateway({ clock: "manual" })` turns it on unless told `autoAdvance: false`.
   */
  autoAdvance?: boolean;
}

/** The last time a JavaScript Date can hold (ECMAScript's time range). */
const maxDateMs = 8.64e15;

interface Waiter {
  until: number;
  forRequest: boolean;
  wake: () => void;
}

/** A clock at a given time; only its methods (and, with auto-advance, idle requests) move it. */
export class ManualClock implements Clock {
  private time: number;
  private waiters: Waiter[] = [];
  private inFlight = 0;
  private requestWaiters = 0;
  private checkScheduled = false;
  readonly autoAdvance: boolean;

  constructor(start: number = Date.now(), options: ManualClockOptions = {}) {
    this.time = start;
    this.autoAdvance = options.autoAdvance ?? false;
  }

  readonly now = (): number => this.time;

  readonly sleep = (ms: number, signal?: GoneSignal, forRequest = false): Promise<void> => {
    // As the real clock's sleep: a signal gone before the wait began would never fire its abort
    // (a job stopped while its budget's hold was in flight waited for good, and so did stop()).
    if (signal?.aborted) return Promise.reject(clientClosed());
    if (ms <= 0) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const waiter: Waiter = {
        until: this.time + ms,
        forRequest,
        wake: () => {
          signal?.removeEventListener("abort", onAbort);
          resolve();
        },
      };
      const onAbort = () => {
        if (!this.waiters.includes(waiter)) return;
        this.waiters = this.waiters.filter((w) => w !== waiter);
        if (forRequest) this.requestWaiters--;
        reject(clientClosed());
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.waiters.push(waiter);
      if (forRequest) {
        this.requestWaiters++;
        this.scheduleCheck();
      }
    });
  };

  /**
   * Counts a request in flight until the returned function is called (once its response closed):
   * the auto-advance moves the clock only when every request counted here waits on the clock.
   */
  requestStarted(): () => void {
    this.inFlight++;
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.inFlight--;
      this.scheduleCheck();
    };
  }

  advance(ms: number): number {
    if (!Number.isFinite(ms) || ms < 0) throw new RangeError("advance takes a non-negative number");
    return this.set(this.time + ms);
  }

  /** Moves the clock to `to` (back as well as on); waits whose time it passes end. */
  set(to: number | Date): number {
    const t = typeof to === "number" ? to : to.getTime();
    // A Date holds at most 8.64e15 ms either side of 1970: past it every date the gateway writes
    // is invalid, and a clock that never goes back would stay there.
    if (!Number.isFinite(t) || Math.abs(t) > maxDateMs)
      throw new RangeError("set takes a valid time (a JavaScript Date's range)");
    // A wait is for the clock to move on by its time, as a timer is not moved by a wall clock
    // stepped back: set back, each wait keeps what it had left.
    if (t < this.time) for (const w of this.waiters) w.until -= this.time - t;
    this.time = t;
    const due = this.waiters.filter((w) => w.until <= t);
    this.waiters = this.waiters.filter((w) => w.until > t);
    for (const w of due.sort((a, b) => a.until - b.until)) {
      if (w.forRequest) this.requestWaiters--;
      w.wake();
    }
    return t;
  }

  private idle(): boolean {
    return this.autoAdvance && this.requestWaiters > 0 && this.requestWaiters >= this.inFlight;
  }

  /**
   * Decided after the event loop's pending I/O and callbacks have run (two turns of immediates),
   * not at once: a request whose bytes are already here, or a response about to close, is counted
   * first, so the clock moves only when nothing but the clock can make progress.
   */
  private scheduleCheck(): void {
    if (this.checkScheduled || !this.idle()) return;
    this.checkScheduled = true;
    setImmediate(() =>
      setImmediate(() => {
        this.checkScheduled = false;
        if (!this.idle()) return;
        let next = Number.POSITIVE_INFINITY;
        for (const w of this.waiters) if (w.forRequest && w.until < next) next = w.until;
        if (next > this.time) this.set(next);
      }),
    );
  }
}

/** `listener`, with each request counted in flight on `clock` until its response closes. */
export function countInFlight(clock: ManualClock, listener: RequestListener): RequestListener {
  return (incoming, outgoing) => {
    outgoing.once("close", clock.requestStarted());
    listener(incoming, outgoing);
  };
}

/**
 * `now` that never goes back: a manual clock set back, or a wall clock stepped back by NTP, reads
 * as the latest time already seen, so a window used stays used and nothing spent is granted again.
 * `since`: the latest time already recorded before this process started (its request log).
 */
export function monotonic(now: () => number, since = Number.NEGATIVE_INFINITY): () => number {
  let latest = since;
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
