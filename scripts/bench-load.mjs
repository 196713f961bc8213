// Closed-loop load generator: N keep-alive connections (undici Pool), each sending the next
// request as soon as the previous answer is read. Records latency of every request and, for
// streams, the time to the first body byte. Runs in-process or as a child process (IPC). Given
// several URLs (gateways sharing one database), the connections are dealt out over them in turn;
// with `alternate`, one connection to each, and one request at a time to each URL in turn, each
// URL's latencies apart (`perUrl`): a difference between two targets measured under the same
// moment's conditions, which on a shared VM drift by more than the difference from one run to the
// next.
import { performance } from "node:perf_hooks";
import { Pool } from "undici";

/**
 * @param {{ url: string | string[], path: string, headers: Record<string,string>, body: string,
 *   connections: number, durationMs: number, warmupMs: number, stream: boolean,
 *   warmBody?: string, beforeBody?: string, beforeWarmBody?: string,
 *   onPhase?: (phase: "measuring" | "measured") => void }} o
 */
export async function runLoad(o) {
  if (o.alternate) return runAlternating(o);
  if (o.blockMs) return runBlocks(o);
  const urls = Array.isArray(o.url) ? o.url : [o.url];
  const pools = urls.map(
    (url, i) =>
      new Pool(url, {
        connections: Math.ceil((o.connections - i) / urls.length),
        pipelining: 1,
        keepAliveTimeout: 60_000,
      }),
  );
  const latencies = new Float64Array(4_000_000);
  const ttfbs = new Float64Array(o.stream ? 4_000_000 : 0);
  let count = 0;
  /** Every answered request, warm-up included (to relate a CPU profile to requests). */
  let total = 0;
  let errors = 0;
  let firstError = "";
  let measuring = false;
  let stop = false;

  async function one(pool) {
    if (o.beforeBody !== undefined) {
      const before = await ask(pool, measuring ? beforeMeasured : beforeWarm);
      if (before.status !== 200) throw new Error(`HTTP ${before.status} before the request`);
    }
    const { status, latency, ttfb } = await ask(pool, measuring ? o : warm);
    if (status !== 200) {
      errors++;
      firstError ||= `HTTP ${status}`;
      return;
    }
    total++;
    if (!measuring) return;
    if (o.stream) ttfbs[count] = ttfb;
    latencies[count++] = latency;
  }

  async function worker(pool) {
    while (!stop) {
      try {
        await one(pool);
      } catch (err) {
        errors++;
        firstError ||= String(err?.message ?? err);
      }
    }
  }

  // A warm-up body of its own: a paced stream's warm-up goes through the same code unpaced.
  const warm = o.warmBody === undefined ? o : { ...o, body: o.warmBody };
  // `beforeBody`: a stream sent, unmeasured, before each request on its connection, so that the
  // request is measured after what a paced stream leaves behind (idle turns, other code run
  // meanwhile); in the warm-up, `beforeWarmBody` instead.
  const beforeMeasured = { ...o, body: o.beforeBody, stream: true };
  const beforeWarm = { ...o, body: o.beforeWarmBody ?? o.beforeBody, stream: true };
  const cpuBefore = process.cpuUsage();
  const workers = Array.from({ length: o.connections }, (_, i) => worker(pools[i % pools.length]));
  await new Promise((r) => setTimeout(r, o.warmupMs));
  measuring = true;
  o.onPhase?.("measuring");
  const started = performance.now();
  await new Promise((r) => setTimeout(r, o.durationMs));
  measuring = false;
  o.onPhase?.("measured");
  const elapsed = performance.now() - started;
  stop = true;
  await Promise.all(workers);
  await Promise.all(pools.map((pool) => pool.close()));
  return {
    ...summary({ count, total, errors, firstError, elapsed, cpuBefore, requests: total }),
    p50: percentile(latencies, count, 0.5),
    p99: percentile(latencies, count, 0.99),
    ttfbP50: o.stream ? percentile(ttfbs, count, 0.5) : undefined,
    ttfbP99: o.stream ? percentile(ttfbs, count, 0.99) : undefined,
  };
}

async function runAlternating(o) {
  const pools = o.url.map(
    (url) => new Pool(url, { connections: 1, pipelining: 1, keepAliveTimeout: 60_000 }),
  );
  const latencies = o.url.map(() => new Float64Array(1_000_000));
  let count = 0;
  let total = 0;
  let errors = 0;
  let firstError = "";
  const cpuBefore = process.cpuUsage();
  const measureFrom = performance.now() + o.warmupMs;
  const end = measureFrom + o.durationMs;
  while (performance.now() < end && count < latencies[0].length) {
    const measuring = performance.now() >= measureFrom;
    for (const [i, pool] of pools.entries()) {
      try {
        const { status, latency } = await ask(pool, o);
        if (status !== 200) {
          errors++;
          firstError ||= `HTTP ${status} from ${o.url[i]}`;
        }
        if (measuring) latencies[i][count] = latency;
      } catch (err) {
        errors++;
        firstError ||= String(err?.message ?? err);
      }
    }
    total++;
    if (measuring) count++;
  }
  const elapsed = performance.now() - measureFrom;
  await Promise.all(pools.map((pool) => pool.close()));
  const perUrl = latencies.map((values) => ({
    p50: percentile(values, count, 0.5),
    p90: percentile(values, count, 0.9),
    p99: percentile(values, count, 0.99),
  }));
  return {
    ...summary({
      count,
      total,
      errors,
      firstError,
      elapsed,
      cpuBefore,
      requests: total * pools.length,
    }),
    ...perUrl[perUrl.length - 1],
    perUrl,
  };
}

/**
 * Blocks of `blockMs` at each URL in turn, `rounds` times (every other round in the reverse order),
 * after a warm-up of `warmupMs` at each: two servers compared under the same minutes' conditions,
 * in closed loops of `connections` each, where rows a minute apart meet a VM that has drifted.
 * `onBlock(phase, index)` is awaited before a block starts and after its last answer, for the
 * caller to read the CPU it spent; each URL's latencies and requests are reported apart.
 */
async function runBlocks(o) {
  const pools = o.url.map(
    (url) => new Pool(url, { connections: o.connections, pipelining: 1, keepAliveTimeout: 60_000 }),
  );
  const latencies = o.url.map(() => new Float64Array(2_000_000));
  const counts = o.url.map(() => 0);
  let errors = 0;
  let firstError = "";
  let total = 0;
  const cpuBefore = process.cpuUsage();
  const block = async (i, ms, measured) => {
    const end = performance.now() + ms;
    const worker = async () => {
      while (performance.now() < end) {
        try {
          const { status, latency } = await ask(pools[i], o);
          total++;
          if (status !== 200) {
            errors++;
            firstError ||= `HTTP ${status} from ${o.url[i]}`;
          } else if (measured && counts[i] < latencies[i].length)
            latencies[i][counts[i]++] = latency;
        } catch (err) {
          errors++;
          firstError ||= String(err?.message ?? err);
        }
      }
    };
    await Promise.all(Array.from({ length: o.connections }, worker));
  };
  for (let i = 0; i < pools.length; i++) await block(i, o.warmupMs, false);
  const started = performance.now();
  for (let round = 0; round < o.rounds; round++) {
    const order = pools.map((_, i) => i);
    if (round % 2 === 1) order.reverse();
    for (const i of order) {
      await o.onBlock?.("start", i);
      await block(i, o.blockMs, true);
      await o.onBlock?.("end", i);
    }
  }
  const elapsed = performance.now() - started;
  await Promise.all(pools.map((pool) => pool.close()));
  const perUrl = latencies.map((values, i) => ({
    count: counts[i],
    rps: counts[i] / ((o.rounds * o.blockMs) / 1000),
    p50: percentile(values, counts[i], 0.5),
    p99: percentile(values, counts[i], 0.99),
  }));
  return {
    ...summary({
      count: counts.reduce((a, b) => a + b),
      total,
      errors,
      firstError,
      elapsed,
      cpuBefore,
      requests: total,
    }),
    ...perUrl[perUrl.length - 1],
    perUrl,
  };
}

/**
 * What every mode reports: requests measured and answered in all, errors, requests per second over
 * `elapsed` ms, and this process's CPU per request sent (`requests`, warm-up included).
 */
function summary({ count, total, errors, firstError, elapsed, cpuBefore, requests }) {
  const cpu = process.cpuUsage(cpuBefore);
  return {
    count,
    total,
    errors,
    firstError,
    rps: count / (elapsed / 1000),
    loadCpuUs: (cpu.user + cpu.system) / Math.max(1, requests),
  };
}

/** One request on `pool`: its status, latency and, for a stream, the time to its first data. */
async function ask(pool, o) {
  const start = performance.now();
  const res = await pool.request({
    path: o.path,
    method: "POST",
    headers: o.headers,
    body: o.body,
  });
  let ttfb = 0;
  if (o.stream) {
    for await (const piece of res.body) {
      // A keepalive comment is not the answer; the first data byte is.
      if (ttfb === 0 && !piece.toString("latin1").startsWith(":")) ttfb = performance.now() - start;
    }
  } else {
    await res.body.dump({ limit: Number.POSITIVE_INFINITY });
  }
  return { status: res.statusCode, latency: performance.now() - start, ttfb };
}

function percentile(values, n, q) {
  if (n === 0) return Number.NaN;
  const sorted = values.slice(0, n).sort();
  return sorted[Math.min(n - 1, Math.floor(q * n))];
}

if (process.send && process.argv.includes("--child")) {
  process.once("message", async (options) => {
    // A parent that asks (`phases`) is told when the measured window opens and closes, to read
    // the CPU of the processes it measures then.
    const onPhase = options.phases ? (phase) => process.send({ phase }) : undefined;
    // A block waits for the parent's word that it has read the CPU.
    const onBlock = options.phases
      ? (phase, index) =>
          new Promise((resolve) => {
            process.once("message", resolve);
            process.send({ phase: `block-${phase}`, index });
          })
      : undefined;
    const result = await runLoad({ ...options, onPhase, onBlock });
    process.send(result, () => process.exit(0));
  });
  process.on("disconnect", () => process.exit(0));
}
