import type { Handler } from "../http/context.js";
import type { Readiness } from "../observe/health.js";
import type { GatewayMetrics } from "../observe/metrics.js";

/**
 *   GET /health         liveness: 200 {"status":"ok"} while the process answers
 *   GET /health/ready   readiness (also /health?ready): 200 {"status":"ready"}, else 503 with why
 *   GET /metrics        Prometheus text format (its access is the gateway's `metrics` option)
 */
export function healthHandlers(readiness: Readiness) {
  const ready: Handler = (c) => {
    const problem = readiness.problem();
    return problem === undefined
      ? c.json({ status: "ready" }, 200, noStore)
      : c.json({ status: "unavailable", reason: problem }, 503, noStore);
  };
  const live: Handler = (c) =>
    c.req.query("ready") === undefined ? c.json({ status: "ok" }, 200, noStore) : ready(c);
  return { live, ready };
}

export function metricsHandler(metrics: GatewayMetrics): Handler {
  return async (c) =>
    c.body(await metrics.registry.metrics(), 200, {
      "content-type": metrics.registry.contentType,
      ...noStore,
    });
}

const noStore = { "cache-control": "no-store" };
