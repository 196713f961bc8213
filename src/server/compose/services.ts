import type { Repositories } from "../../store/repositories.js";
import type { GatewayStore } from "../../store/types.js";
import { SuspensionWatch } from "../auth/suspension-watch.js";
import type { Backend } from "../backends/backend.js";
import { restoredCounters } from "../billing/admission.js";
import type { Ledger } from "../billing/ledger.js";
import { Unsettled } from "../billing/unsettled.js";
import { CompactionSeal } from "../dispatch/compaction.js";
import { Dispatcher } from "../dispatch/dispatcher.js";
import { KeyPools } from "../dispatch/key-pool.js";
import { Closing } from "../http/closing.js";
import type { ForwardingOptions } from "../http/request.js";
import type { RequestTrace } from "../http/request-trace.js";
import type { ShelfOptions } from "../kit/cassettes.js";
import { RequestInspector } from "../kit/inspect.js";
import { KitUpstream } from "../kit/kit-upstream.js";
import { RequestLimits } from "../limits/request-limits.js";
import { SharedKeyLimiter } from "../limits/shared-key.js";
import { minuteMs } from "../limits/window-counter.js";
import { UpstreamHttp } from "../providers/http-upstream.js";
import { MockScript } from "../providers/mock-script.js";
import type { Clock } from "../time/clock.js";

export interface ServerOptions extends ForwardingOptions {
  /**
   * Interval of SSE keepalive comments while a stream waits for its first token or an MCP tool
   * call runs (and of that call's progress notifications); 0 sends none.
   */
  keepaliveMs: number;
  bodyLimitBytes: number;
  /** The gateway's one clock; `now` is its `now`, kept as the short name every route reads. */
  clock: Clock;
  now: () => number;
  /** Lifetime of a `gateway login` device code (default 600 s). */
  deviceCodeTtlSeconds?: number;
  /** Poll interval the device flow asks clients for (default 5 s). */
  devicePollIntervalSeconds?: number;
  /** How long a stored response or conversation is kept after its last turn (default 30 days). */
  responsesTtlMs: number;
  /** How long a finished music or video job is kept after it finished (default 30 days). */
  jobsTtlMs: number;
  /** Largest whole answer read from a provider (default in http-upstream.ts). */
  upstreamAnswerLimitBytes?: number;
  /**
   * The origin browsers reach the gateway at (`publicUrl`, else the listening address), set once
   * the server listens. Same-origin checks compare against it, never against the Host header.
   */
  publicOrigin?: string;
  /** Test kit: record or replay upstream exchanges as cassette files. */
  cassettes?: ShelfOptions;
  /** Test kit: keep the bodies of the last `limit` requests in memory for inspection. */
  capture?: { limit: number };
  /** Hashes of admin keys valid for this run only (never written to the database). */
  runAdminKeys?: ReadonlySet<string>;
}

/** Everything a request handler needs, built once at start-up. */
export interface Services {
  store: GatewayStore;
  /** Jobs, login, sessions, files, threads and the other data outside money and accounts. */
  repos: Repositories;
  options: ServerOptions;
  ledger: Ledger;
  limits: RequestLimits;
  sharedKeys: SharedKeyLimiter;
  /** Admitted requests not yet settled: what a closing gateway waits for. */
  unsettled: Unsettled;
  dispatcher: Dispatcher;
  /** Seals the summaries of POST /v1/responses/compact; the dispatcher opens them. */
  compactions: CompactionSeal;
  http: UpstreamHttp;
  /** Scripted answers of the mock provider (config `mock.script`, admin API, `gateway.mock`). */
  mockScript: MockScript;
  inspector: RequestInspector;
  /** Open streams by account, ended when their account is suspended. */
  suspensions: SuspensionWatch;
  /** Answers ended in their own words when the gateway closes, before its connections are cut. */
  closing: Closing;
  /**
   * Streams a stopping `serve` cuts (its second signal, or its drain bound passing): each ends
   * with its style's error event before the connections are cut, not as a dropped connection.
   */
  streamsCut: Closing;
  /** Told each job charge once committed (a job settles after its request finished): /metrics. */
  jobCharged?: (charged: RequestTrace) => void;
}

export function createServices(backend: Backend, options: ServerOptions): Services {
  const { store, repos, ledger } = backend;
  const inspector = new RequestInspector(repos.requestLog, options.capture);
  // Only a gateway with the test kit on gets the upstream that records, replays and captures.
  const http =
    options.cassettes || options.capture
      ? new KitUpstream(
          options.cassettes,
          options.capture ? inspector : undefined,
          options.upstreamAnswerLimitBytes,
        )
      : new UpstreamHttp(options.upstreamAnswerLimitBytes);
  inspector.watch(ledger);
  const pools = new KeyPools(options.now, backend.keyPoolSync);
  const mockScript = new MockScript();
  const compactions = new CompactionSeal(backend.secrets);
  const dispatcher = new Dispatcher(
    store,
    pools,
    { http, mockScript, options },
    options.now,
    compactions,
  );
  // Counters of this process's own start from the minute's requests in the request log (before the
  // config is applied: the catalog the log's requests were admitted under).
  const minuteStart = Math.floor(options.now() / minuteMs) * minuteMs;
  const counters =
    backend.counters ??
    restoredCounters(store.getCatalog(), backend.admittedSince?.(minuteStart, minuteMs) ?? []);
  return {
    store,
    repos,
    options,
    ledger,
    limits: new RequestLimits(counters),
    sharedKeys: new SharedKeyLimiter(counters),
    unsettled: new Unsettled(),
    dispatcher,
    compactions,
    http,
    mockScript,
    inspector,
    suspensions: new SuspensionWatch((id) => store.getAccount(id)?.status === "suspended"),
    closing: new Closing(),
    streamsCut: new Closing(),
  };
}
