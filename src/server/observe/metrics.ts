import { createRequire } from "node:module";
import type * as Prom from "prom-client";
import type { Services } from "../compose/services.js";
import type { FinishedRequest } from "../http/request-trace.js";

/**
 * The gateway's Prometheus metrics, fed by the per-request trace (`model-gateway:request:finished`)
 * and the dispatcher's failed attempts; holds are read from the ledger at scrape time. One
 * registry per gateway, so several in one process keep their own numbers.
 */
export interface GatewayMetrics {
  registry: Prom.Registry;
  observe(request: FinishedRequest): void;
  /** Route patterns become known once the route table is built. */
  knowRoutes(routes: Iterable<{ method: string; path: string }>): void;
}

// The package's index also loads its push gateway, cluster aggregator and default collectors,
// several times the start-up cost of the four classes /metrics uses.
const require = createRequire(import.meta.url);
const Registry = require("prom-client/lib/registry") as typeof Prom.Registry;
const Counter = require("prom-client/lib/counter") as typeof Prom.Counter;
const Gauge = require("prom-client/lib/gauge") as typeof Prom.Gauge;
const Histogram = require("prom-client/lib/histogram") as typeof Prom.Histogram;

interface Series {
  requests: Prom.Counter.Internal;
  latency: Prom.Histogram.Internal<string>;
  input: Prom.Counter.Internal;
  output: Prom.Counter.Internal;
  charged: Prom.Counter.Internal;
}

/** Latency buckets in seconds: a mock answer takes milliseconds, a long stream a minute. */
const latencyBuckets = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];

export function createMetrics(services: Services): GatewayMetrics {
  const registry = new Registry();
  const registers = [registry];
  const requests = new Counter({
    name: "gateway_http_requests_total",
    help: "HTTP requests answered, by route pattern, method, status and model",
    labelNames: ["route", "method", "status", "model"] as const,
    registers,
  });
  const latency = new Histogram({
    name: "gateway_http_request_duration_seconds",
    help: "Time from a request's arrival to its response's end (a stream's last byte)",
    labelNames: ["route", "method"] as const,
    buckets: latencyBuckets,
    registers,
  });
  const tokens = new Counter({
    name: "gateway_tokens_total",
    help: "Tokens billed, by model and direction (input or output)",
    labelNames: ["model", "direction"] as const,
    registers,
  });
  const charged = new Counter({
    name: "gateway_charged_micro_idr_total",
    help: "Money charged, in micro-IDR (1 IDR = 1000000), by model",
    labelNames: ["model"] as const,
    registers,
  });
  const upstreamFailures = new Counter({
    name: "gateway_upstream_failures_total",
    help: "Failed provider attempts (fallbacks included), by provider and kind",
    labelNames: ["provider", "kind"] as const,
    registers,
  });
  new Gauge({
    name: "gateway_holds_in_flight",
    help: "Admitted requests and jobs whose hold is not yet settled",
    registers,
    collect() {
      this.set(services.ledger.holdsInFlight().count);
    },
  });
  new Gauge({
    name: "gateway_held_micro_idr",
    help: "Money held by requests and jobs in flight, in micro-IDR",
    registers,
    collect() {
      this.set(services.ledger.holdsInFlight().micro);
    },
  });

  services.dispatcher.upstreamFailed = (provider, failure) =>
    upstreamFailures.inc({ provider, kind: failure.kind });

  let routeOf: (method: string, path: string) => string = () => "unmatched";

  // prom-client hashes a label object on every call; a series' children are found once here.
  const series = new Map<string, Series>();
  const seriesOf = (route: string, method: string, status: number, model: string): Series => {
    const key = `${route} ${method} ${status} ${model}`;
    let found = series.get(key);
    if (!found) {
      found = {
        requests: requests.labels(route, method, String(status), model),
        latency: latency.labels(route, method),
        input: tokens.labels(model, "input"),
        output: tokens.labels(model, "output"),
        charged: charged.labels(model),
      };
      series.set(key, found);
    }
    return found;
  };

  return {
    registry,
    knowRoutes(routes) {
      routeOf = routeMatcher(routes);
    },
    observe(r) {
      const route = r.status === 404 ? "unmatched" : routeOf(r.method, r.path);
      // Only names the catalog knows: a client must not grow the label set with made-up models.
      const catalog = services.store.getCatalog();
      const model =
        r.model !== undefined && (catalog.models.has(r.model) || catalog.routes.has(r.model))
          ? r.model
          : "none";
      const series = seriesOf(route, r.method, r.status, model);
      series.requests.inc();
      series.latency.observe(r.durationMs / 1000);
      if (r.inputTokens) series.input.inc(r.inputTokens);
      if (r.outputTokens) series.output.inc(r.outputTokens);
      if (r.costMicro) series.charged.inc(r.costMicro);
      // A stream that broke after its 200 failed upstream too; the dispatcher never saw it.
      if (r.status < 400 && r.errorCode === "upstream_error" && r.providerId)
        upstreamFailures.inc({ provider: r.providerId, kind: "stream_broken" });
    },
  };
}

/** The registered pattern of a request (`/v1/files/:id`), so ids never become label values. */
function routeMatcher(
  routes: Iterable<{ method: string; path: string }>,
): (method: string, path: string) => string {
  const exact = new Map<string, string>();
  const patterns: { method: string; pattern: RegExp; route: string }[] = [];
  for (const r of routes) {
    if (r.path.includes("*")) continue;
    if (!r.path.includes(":")) {
      exact.set(`${r.method} ${r.path}`, r.path);
      continue;
    }
    const source = r.path
      .split("/")
      .map((part) => (part.startsWith(":") ? "[^/]+" : part.replace(/[.+?^${}()|[\]\\]/g, "\\$&")))
      .join("/");
    patterns.push({ method: r.method, pattern: new RegExp(`^${source}$`), route: r.path });
  }
  return (method, path) => {
    const known = exact.get(`${method} ${path}`);
    if (known) return known;
    for (const p of patterns) if (p.method === method && p.pattern.test(path)) return p.route;
    return "unmatched";
  };
}
