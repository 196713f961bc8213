/** UTC days and fixed windows: the periods allowances and subscriptions are counted in. */

export function utcDay(now: number): string {
  return new Date(now).toISOString().slice(0, 10);
}

export function nextUtcMidnight(now: number): number {
  const next = new Date(now);
  next.setUTCHours(24, 0, 0, 0);
  return next.getTime();
}

export function secondsToUtcMidnight(now: number): number {
  return Math.max(1, Math.ceil((nextUtcMidnight(now) - now) / 1000));
}

/** The start of the window of `windowSeconds` running at `now`, windows counted from `startedAt`. */
export function subscriptionWindowStart(
  startedAt: number,
  windowSeconds: number,
  now: number,
): number {
  const length = windowSeconds * 1000;
  return startedAt + Math.floor((now - startedAt) / length) * length;
}

/** The end of the fixed window of `windowMs` that `now` falls in, windows counted from the epoch. */
export function windowEnd(now: number, windowMs: number): number {
  return (Math.floor(now / windowMs) + 1) * windowMs;
}
