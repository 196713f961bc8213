import { clearTimeout, setTimeout } from "../../host-timers.js";
import type { Reservation } from "./holds.js";

/**
 * Requests admitted and not yet settled (a job's hold outlives its request, and is not one of
 * them). A gateway that closes cuts their connections, and each settles as it notices (as
 * `client_closed`, or with what it delivered): `close()` waits for that before it closes the
 * database, so none of those charges and request log rows is written to a closed store.
 */
export class Unsettled {
  private readonly open = new Set<Reservation>();
  private waiters: (() => void)[] = [];

  add(reservation: Reservation): void {
    this.open.add(reservation);
  }

  /** The request settled (a second settlement of the same request changes nothing). */
  settled(reservation: Reservation): void {
    if (!this.open.delete(reservation) || this.open.size > 0) return;
    const waiters = this.waiters;
    this.waiters = [];
    for (const wake of waiters) wake();
  }

  /**
   * Resolves once every request admitted so far has settled, or after `boundMs`: a wait that does
   * not end with its client's connection must not hold `close()` for ever.
   */
  drained(boundMs: number): Promise<void> {
    if (this.open.size === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(done, boundMs);
      this.waiters.push(done);
    });
  }
}
