import { PerformanceObserver } from "node:perf_hooks";
import { getHeapSpaceStatistics, setFlagsFromString } from "node:v8";

/**
 * V8's heap settings for the process `gateway serve` owns. startGateway runs inside other
 * programs, whose heap is theirs to tune, so only serve calls these; an operator's own node flag
 * for the same setting wins (`node --flag` or NODE_OPTIONS).
 */

/** On node's command line or in NODE_OPTIONS, where a container or a service manager puts it. */
function flagGiven(name: RegExp): boolean {
  const fromEnvironment = (process.env.NODE_OPTIONS ?? "").split(/\s+/);
  return [...process.execArgv, ...fromEnvironment].some((flag) => name.test(flag));
}

/**
 * V8 lets the old generation grow to several times what survived the last full collection before
 * it collects again; under load that is tens of megabytes of promoted request garbage, the largest
 * part of serve's peak memory (`scripts/bench-rss.mjs`). Half again is plenty for a server whose
 * live heap is small, and costs no throughput there.
 */
export function keepHeapTight(): void {
  if (flagGiven(/^--heap[-_]growing[-_]percent\b/)) return;
  setFlagsFromString("--heap-growing-percent=50");
}

/** Both semi-spaces of the young generation together, where V8 stops growing it for serve. */
export const youngGenerationCapBytes = 16 * 1024 * 1024;

/** V8's own growth factor of the young generation. */
const defaultGrowthFactor = 2;

/**
 * The young generation doubles whenever what survived its collections since it last grew exceeds
 * its size, up to 32 MB on 64-bit machines. A server under load always gets there: a gateway,
 * whose requests leave more alive at each collection, within a second of the bench's load, and a
 * bare undici proxy after several. At half that size a collection runs twice as often and each
 * costs about the same (it copies what is alive, not what died): the requests' CPU stayed within
 * the noise, as with `node --max-semi-space-size=8`, the same size from the command line.
 *
 * `--max-semi-space-size` takes effect only on the command line, but V8 reads its growth factor
 * each time the young generation grows: at the cap, a factor of 1 keeps it there. Each minor
 * collection reports its end here and the factor follows the size, so a young generation that V8
 * shrinks (its memory reducer may, once a server goes idle) grows back to the cap under the next
 * load instead of staying small.
 */
export function capYoungGeneration(capBytes = youngGenerationCapBytes): void {
  if (flagGiven(/^--(max|min)[-_]semi[-_]space[-_]size\b|^--semi[-_]space[-_]growth[-_]factor\b/))
    return;
  let capped = false;
  const follow = () => {
    const size =
      getHeapSpaceStatistics().find((space) => space.space_name === "new_space")?.space_size ?? 0;
    if (size >= capBytes === capped) return;
    capped = !capped;
    setFlagsFromString(`--semi-space-growth-factor=${capped ? 1 : defaultGrowthFactor}`);
  };
  follow();
  new PerformanceObserver(follow).observe({ entryTypes: ["gc"] });
}
