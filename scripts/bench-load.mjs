// Closed-loop load generator: N keep-alive connections (undici Pool), each sending the next
// request as soon as the previous answer is read. Records latency of every request and, for
// streams, the time to the first body byte. Runs in-process or as a child process (IPC). Given
// several URLs (gateways sharing one database), the connections are dealt out over them in turn.
import { performance } from "node:perf_hooks";
import { Pool } from "undici";

/**
 * @param {{ url: string | string[], path: string, headers: Record<string,string>, body: string,
 *   connections: number, durationMs: number, warmupMs: number, stream: boolean }} o
 */
export async function runLoad(o) {
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
        if (ttfb === 0 && !piece.toString("latin1").startsWith(":"))
          ttfb = performance.now() - start;
      }
    } else {
      await res.body.dump({ limit: Number.POSITIVE_INFINITY });
    }
    const latency = performance.now() - start;
    if (res.statusCode !== 200) {
      errors++;
      firstError ||= `HTTP ${res.statusCode}`;
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

  const cpuBefore = process.cpuUsage();
  const workers = Array.from({ length: o.connections }, (_, i) => worker(pools[i % pools.length]));
  await new Promise((r) => setTimeout(r, o.warmupMs));
  measuring = true;
  const started = performance.now();
  await new Promise((r) => setTimeout(r, o.durationMs));
  measuring = false;
  const elapsed = performance.now() - started;
  stop = true;
  await Promise.all(workers);
  await Promise.all(pools.map((pool) => pool.close()));
  const cpu = process.cpuUsage(cpuBefore);

  return {
    count,
    total,
    errors,
    firstError,
    rps: count / (elapsed / 1000),
    /** This process's CPU per answered request, warm-up included. */
    loadCpuUs: (cpu.user + cpu.system) / Math.max(1, total),
    p50: percentile(latencies, count, 0.5),
    p99: percentile(latencies, count, 0.99),
    ttfbP50: o.stream ? percentile(ttfbs, count, 0.5) : undefined,
    ttfbP99: o.stream ? percentile(ttfbs, count, 0.99) : undefined,
  };
}

function percentile(values, n, q) {
  if (n === 0) return Number.NaN;
  const sorted = values.slice(0, n).sort();
  return sorted[Math.min(n - 1, Math.floor(q * n))];
}

if (process.send && process.argv.includes("--child")) {
  process.once("message", async (options) => {
    const result = await runLoad(options);
    process.send(result, () => process.exit(0));
  });
  process.on("disconnect", () => process.exit(0));
}
