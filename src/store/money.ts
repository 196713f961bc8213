/** 1 IDR in the store's unit. All money is integer micro-IDR; floats never hold money. */
export const MICRO = 1_000_000;

/** Converts a config/API IDR amount (possibly fractional, e.g. 0.5) to integer micro-IDR. */
export function idrToMicro(idr: number): number {
  return Math.round(idr * MICRO);
}

/** For display only (JSON responses): micro-IDR to IDR with up to 6 decimals. */
export function microToIdr(micro: number): number {
  return micro / MICRO;
}
