import { clearTimeout, setTimeout } from "../../host-timers.js";
import { clientClosed } from "../errors.js";
import type { GoneSignal } from "./gone-signal.js";

/**
 * Waits `ms`; a client that leaves meanwhile (the signal aborts) ends the wait with client_closed,
 * and one already gone ends it at once, a wait of nothing included: the mock, whose answers wait
 * here, makes no answer for a client that left while the gateway was admitting it.
 */
export function sleep(ms: number, signal?: GoneSignal): Promise<void> {
  if (signal?.aborted) return Promise.reject(clientClosed());
  if (ms <= 0) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener(
      "abort",
      () => {
        clearTimeout(timer);
        reject(clientClosed());
      },
      { once: true },
    );
  });
}
