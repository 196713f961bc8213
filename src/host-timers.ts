/**
 * The process's timers and monotonic time as they were when the gateway loaded. A test suite
 * that fakes the globals for its own code (`vi.useFakeTimers()`, jest's modern timers, sinon)
 * runs the gateway of `startGateway` in the same process: reading these instead, the gateway's
 * waits, keepalives, timeouts and manual-clock decisions neither stop nor jump with the app's
 * fake time. The gateway's time is its own clock's.
 */
export const {
  setTimeout,
  clearTimeout,
  setInterval,
  clearInterval,
  setImmediate,
  clearImmediate,
} = globalThis;

/** `performance.now()`, of the process. */
export const performanceNow: () => number = performance.now.bind(performance);
