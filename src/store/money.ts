/** 1 IDR in the store's unit. All money is integer micro-IDR; floats never hold money. */
export const MICRO = 1_000_000;

/**
 * The most micro-IDR an amount or a balance may hold: beyond it a number no longer counts every
 * micro-IDR (Postgres refuses to hand such a value back, SQLite would round it).
 */
export const MAX_MICRO = Number.MAX_SAFE_INTEGER;

/** The most IDR config and the admin API take for one amount: about 9 billion. */
export const MAX_IDR = Math.floor(MAX_MICRO / MICRO);

/**
 * From this many IDR up, two amounts a micro-IDR apart can be the same number (a number's step
 * there is wider than a micro-IDR), so only whole IDR are taken.
 */
export const MIN_WHOLE_IDR = 2 ** 33;

/** Digits after the decimal point of `idr` as JavaScript writes it (`1e-7` has seven). */
function decimalPlaces(idr: number): number {
  const [digits, exponent = "0"] = String(idr).split("e");
  return Math.max(0, (digits.split(".")[1]?.length ?? 0) - Number(exponent));
}

/**
 * Why an IDR amount is not a whole number of micro-IDR, the smallest unit the gateway stores, or
 * undefined when it is one; `idrToMicro` converts exactly what this accepts.
 */
export function subMicroProblem(idr: number): string | undefined {
  if (Number.isInteger(idr)) return undefined;
  if (Math.abs(idr) >= MIN_WHOLE_IDR)
    return `must be whole IDR from ${MIN_WHOLE_IDR} IDR up (a number that large cannot hold every micro-IDR)`;
  if (decimalPlaces(idr) > 6)
    return "must have at most 6 decimals: 0.000001 IDR (one micro-IDR) is the smallest amount the gateway stores";
  return undefined;
}

/**
 * A config/API IDR amount (possibly fractional, e.g. 0.5) as integer micro-IDR, exactly: from its
 * decimal digits, as multiplying by a million in floating point can be a micro-IDR off. An amount
 * finer than a micro-IDR is refused where it comes in (`subMicroProblem`); here it is a bug.
 */
export function idrToMicro(idr: number): number {
  const problem = subMicroProblem(idr);
  if (problem !== undefined) throw new RangeError(`${idr} IDR ${problem}`);
  if (Number.isInteger(idr)) return idr * MICRO;
  const [whole, fraction] = String(Math.abs(idr)).split(".");
  return Math.sign(idr) * (Number(whole) * MICRO + Number(fraction.padEnd(6, "0")));
}

/** For display only (JSON responses): micro-IDR to IDR with up to 6 decimals. */
export function microToIdr(micro: number): number {
  return micro / MICRO;
}
