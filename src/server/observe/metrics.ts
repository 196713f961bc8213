import { METHODS } from "node:http";
import type { Services } from "../compose/services.js";
import type { FinishedRequest } from "../http/request-trace.js";
import {
  Counter,
  type CounterSeries,
  Gauge,
  Histogram,
  type HistogramSeries,
  Registry,
} from "./prometheus.js";

/**
 * The gateway's Prometheus metrics, fed by the per-request trace (`model-gateway:request:finished`)
 * and the dispatcher's failed attempts; holds are read from the ledger at scrape time. One
 * registry per gateway, so several in one process keep their own numbers.
 */
export interface GatewayMetrics {
  registry: Registry;
  observe(request: FinishedRequest): void;
  /** Route patterns become known once the route table is built. */
  knowRoutes(routes: Iterable<{ method: string; path: string }>): void;
}

interface Series {
  requests: CounterSeries;
  latency: HistogramSeries;
  input: CounterSeries;
  output: CounterSeries;
  charged: CounterSeries;
}

/** The methods Node parses; a label is one of these or `other`. */
const knownMethods = new Set<string>(METHODS);

/** Latency buckets in seconds: a mock answer takes milliseconds, a long stream a minute. */
const latencyBuckets = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];

export function createMetrics(services: Services): GatewayMetrics {
  const registry = new Registry();
  const requests = registry.add(
    new Counter(
      "gateway_http_requests_total",
      "HTTP requests answered, by route pattern, method, status and model",
      ["route", "method", "status", "model"],
    ),
  );
  const latency = registry.add(
    new Histogram(
      "gateway_http_request_duration_seconds",
      "Time from a request's arrival to its response's end (a stream's last byte)",
      ["route", "method"],
      latencyBuckets,
    ),
  );
  const tokens = registry.add(
    new Counter("gateway_tokens_total", "Tokens billed, by model and direction (input or output)", [
      "model",
      "direction",
    ]),
  );
  const charged = registry.add(
    new Counter(
      "gateway_charged_micro_idr_total",
      "Money charged, in micro-IDR (1 IDR = 1000000), by model",
      ["model"],
    ),
  );
  // A series of its own rather than a label of the request counter: its series are the catalog's
  // (each name asked for, by the models that serve it), not multiplied by route, method and status.
  const served = registry.add(
    new Counter(
      "gateway_served_requests_total",
      "Requests a model answered, by the model or route asked for and the model that served it",
      ["model", "served_model"],
    ),
  );
  const upstreamFailures = registry.add(
    new Counter(
      "gateway_upstream_failures_total",
      "Failed provider attempts (fallbacks included), by provider and kind",
      ["provider", "kind"],
    ),
  );
  registry.add(
    new Gauge(
      "gateway_holds_in_flight",
      "Admitted requests and jobs whose hold is not yet settled",
      () => services.ledger.holdsInFlight().count,
    ),
  );
  registry.add(
    new Gauge(
      "gateway_held_micro_idr",
      "Money held by requests and jobs in flight, in micro-IDR",
      () => services.ledger.holdsInFlight().micro,
    ),
  );

  services.dispatcher.upstreamFailed = (provider, failure) =>
    upstreamFailures.labels(provider, failure.kind).inc();
  // Only names the catalog knows: a client must not grow the label set with made-up models.
  const modelLabel = (name: string | undefined) => {
    const catalog = services.store.getCatalog();
    return name !== undefined && (catalog.models.has(name) || catalog.routes.has(name))
      ? name
      : "none";
  };
  // Tokens and money of a job count by its model once its charge committed; its requests
  // (the 202 and the polls) count as requests only.
  services.jobCharged = (job) => {
    const model = modelLabel(job.model);
    if (job.inputTokens) tokens.labels(model, "input").inc(job.inputTokens);
    if (job.outputTokens) tokens.labels(model, "output").inc(job.outputTokens);
    if (job.costMicro) charged.labels(model).inc(job.costMicro);
  };

  let routeOf: (method: string, path: string) => string = () => "unmatched";

  // A request's five series are found once per distinct label set, then only counted. Maps
  // nested by label rather than one keyed by the labels joined: a joined key is a new string
  // whose hash is computed again at every request.
  const series = new Map<string, Map<string, Map<number, Map<string, Series>>>>();
  const seriesOf = (route: string, method: string, status: number, model: string): Series => {
    const byModel = inner(inner(inner(series, route), method), status);
    let found = byModel.get(model);
    if (!found) {
      found = {
        requests: requests.labels(route, method, String(status), model),
        latency: latency.labels(route, method),
        input: tokens.labels(model, "input"),
        output: tokens.labels(model, "output"),
        charged: charged.labels(model),
      };
      byModel.set(model, found);
    }
    return found;
  };

  const servedSeries = new Map<string, Map<string, CounterSeries>>();
  const servedOf = (model: string, servedModel: string): CounterSeries => {
    const byServed = inner(servedSeries, model);
    let found = byServed.get(servedModel);
    if (!found) {
      found = served.labels(model, servedModel);
      byServed.set(servedModel, found);
    }
    return found;
  };

  return {
    registry,
    knowRoutes(routes) {
      routeOf = routeMatcher(routes);
    },
    observe(r) {
      // A request line Node could not take may name any method: it never becomes a label value.
      const method = knownMethods.has(r.method) ? r.method : "other";
      const route = r.status === 404 ? "unmatched" : routeOf(method, r.path);
      const model = modelLabel(r.model);
      const series = seriesOf(route, method, r.status, model);
      series.requests.inc();
      if (r.servedModel) servedOf(model, modelLabel(r.servedModel)).inc();
      series.latency.observe(r.durationMs / 1000);
      if (r.inputTokens) series.input.inc(r.inputTokens);
      if (r.outputTokens) series.output.inc(r.outputTokens);
      if (r.costMicro) series.charged.inc(r.costMicro);
      // A stream that broke after its 200 failed upstream too; the dispatcher never saw it.
      if (r.status < 400 && r.errorCode === "upstream_error" && r.providerId)
        upstreamFailures.labels(r.providerId, "stream_broken").inc();
    },
  };
}

/** The map under `key`, made empty the first time. */
function inner<K, K2, V>(outer: Map<K, Map<K2, V>>, key: K): Map<K2, V> {
  let found = outer.get(key);
  if (!found) {
    found = new Map();
    outer.set(key, found);
  }
  return found;
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
