/** 1 IDR in the store's unit. All money is integer micro-IDR; floats never hold money. */
export const MICRO = 1_000_000;

/**
 * The most micro-IDR an amount or a balance may hold: beyond it a number no longer counts every
 * micro-IDR (Postgres refuses to hand such a value back, SQLite would round it).
 */
export const MAX_MICRO = Number.MAX_SAFE_INTEGER;

/** The most IDR config and the admin API take for one amount: about 9 billion. */
export const MAX_IDR = Math.floor(MAX_MICRO / MICRO);

/** Converts a config/API IDR amount (possibly fractional, e.g. 0.5) to integer micro-IDR. */
export function idrToMicro(idr: number): number {
  return Math.round(idr * MICRO);
}

/** For display only (JSON responses): micro-IDR to IDR with up to 6 decimals. */
export function microToIdr(micro: number): number {
  return micro / MICRO;
}
