import type { Context, Hono } from "hono";
import type { AppEnv } from "../app-env.js";
import { presentedKey } from "../auth.js";
import { PlainTextError } from "../errors.js";
import type { MetricsAccess } from "../metrics-access.js";
import type { Readiness } from "../observe/health.js";
import type { GatewayMetrics } from "../observe/metrics.js";
import type { Services } from "../services.js";

/**
 *   GET /health         liveness: 200 {"status":"ok"} while the process answers
 *   GET /health/ready   readiness (also /health?ready): 200 {"status":"ready"}, else 503 with why
 *   GET /metrics        Prometheus text format; absent when off, admin key when `admin`
 */
export function healthRoutes(
  readiness: Readiness,
  metrics: GatewayMetrics | undefined,
  access: MetricsAccess,
) {
  return (app: Hono<AppEnv>, s: Services): void => {
    const ready = (c: Context) => {
      const problem = readiness.problem();
      return problem === undefined
        ? c.json({ status: "ready" }, 200, noStore)
        : c.json({ status: "unavailable", reason: problem }, 503, noStore);
    };
    app.get("/health", (c) =>
      c.req.query("ready") === undefined ? c.json({ status: "ok" }, 200, noStore) : ready(c),
    );
    app.get("/health/ready", ready);
    if (!metrics) return;
    app.get("/metrics", async (c) => {
      if (access === "admin") {
        const key = presentedKey(c);
        if (!key || !s.store.isAdminKey(key)) throw new PlainTextError(401, "admin key required");
      }
      return c.body(await metrics.registry.metrics(), 200, {
        "content-type": metrics.registry.contentType,
        ...noStore,
      });
    });
  };
}

const noStore = { "cache-control": "no-store" };
