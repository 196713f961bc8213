import { clearTimeout, setTimeout } from "../../host-timers.js";
import { clientClosed } from "../errors.js";
import type { GoneSignal } from "./gone-signal.js";

/** Waits `ms`; a client that leaves meanwhile (the signal aborts) ends the wait with client_closed. */
export function sleep(ms: number, signal?: GoneSignal): Promise<void> {
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
