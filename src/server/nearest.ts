/**
 * The candidate nearest to `name` by edit distance (case aside), if it is near at all: a typo of
 * it. `name` itself is no candidate.
 */
export function nearest(name: string, candidates: Iterable<string>): string | undefined {
  // A name far longer than any candidate is no typo of one; it is not worth the comparisons.
  if (name.length > 200) return undefined;
  const wanted = name.toLowerCase();
  let best: string | undefined;
  let bestDistance = Math.max(2, Math.floor(wanted.length / 3)) + 1;
  const consider = (candidate: string) => {
    if (candidate === name) return;
    const d = editDistance(wanted, candidate.toLowerCase(), bestDistance);
    if (d < bestDistance) {
      best = candidate;
      bestDistance = d;
    }
  };
  for (const candidate of candidates) consider(candidate);
  return best;
}

/** Levenshtein distance of `a` and `b`, or `limit` once it is known to be at least that. */
function editDistance(a: string, b: string, limit: number): number {
  if (Math.abs(a.length - b.length) >= limit) return limit;
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    let rowMin = i;
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      current[j] = Math.min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost);
      if (current[j] < rowMin) rowMin = current[j];
    }
    if (rowMin >= limit) return limit;
    previous = current;
  }
  return Math.min(previous[b.length], limit);
}
