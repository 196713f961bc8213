import type { DB } from "./db.js";

/**
 * BEGIN IMMEDIATE ... COMMIT around a function: the write lock is taken at the start, so what the
 * function reads cannot change under it, even from another process. One wrapper per handle.
 */
export function immediateTransactions(db: DB): <T>(fn: () => T) => T {
  const run = db.transaction((fn: () => unknown) => fn());
  return <T>(fn: () => T) => run.immediate(fn) as T;
}
