import { clearInterval, setInterval } from "../../host-timers.js";
/**
 * The spec's suspension stops every key of an account "at once, everywhere": the next request is
 * refused by the key check, and a stream already open is ended here. The account's status is read
 * from the store's memory (kept current on every backend: on Postgres by LISTEN/NOTIFY), a few
 * times a second and only while some stream is open, so an idle gateway never wakes for it.
 */
export class SuspensionWatch {
  private readonly open = new Map<string, Set<() => void>>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly suspended: (accountId: string) => boolean,
    private readonly intervalMs = 250,
  ) {}

  /** Calls `stop` once if the account is suspended while it is watched; returns the unwatch. */
  watch(accountId: string, stop: () => void): () => void {
    let stops = this.open.get(accountId);
    if (!stops) {
      stops = new Set();
      this.open.set(accountId, stops);
    }
    stops.add(stop);
    this.timer ??= setInterval(() => this.check(), this.intervalMs).unref();
    return () => this.unwatch(accountId, stop);
  }

  private unwatch(accountId: string, stop: () => void): void {
    const stops = this.open.get(accountId);
    if (!stops?.delete(stop) || stops.size > 0) return;
    this.open.delete(accountId);
    if (this.open.size === 0) this.stopTimer();
  }

  private check(): void {
    for (const [accountId, stops] of this.open) {
      if (!this.suspended(accountId)) continue;
      this.open.delete(accountId);
      for (const stop of stops) stop();
    }
    if (this.open.size === 0) this.stopTimer();
  }

  private stopTimer(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }
}
