import type { Store } from "../store/store.js";
import { Ledger } from "./billing/ledger.js";
import { Dispatcher } from "./dispatch/dispatcher.js";
import { KeyPools } from "./dispatch/key-pool.js";
import type { CassetteOptions } from "./kit/cassettes.js";
import { RequestInspector } from "./kit/inspect.js";
import { KitUpstream } from "./kit/kit-upstream.js";
import { RequestLimits } from "./limits/request-limits.js";
import { SharedKeyLimiter } from "./limits/shared-key.js";
import { AnthropicAdapter } from "./providers/anthropic-adapter.js";
import { UpstreamHttp } from "./providers/http-upstream.js";
import { MockAdapter } from "./providers/mock-adapter.js";
import { OpenAIAdapter } from "./providers/openai-adapter.js";

export interface ServerOptions {
  /** Interval of SSE keepalive comments while a stream waits for its first token. */
  keepaliveMs: number;
  bodyLimitBytes: number;
  now: () => number;
  /** Lifetime of a `gateway login` device code (default 600 s). */
  deviceCodeTtlSeconds?: number;
  /** Poll interval the device flow asks clients for (default 5 s). */
  devicePollIntervalSeconds?: number;
  /** Test kit: record or replay upstream exchanges as cassette files. */
  cassettes?: CassetteOptions;
  /** Test kit: keep the bodies of the last `limit` requests in memory for inspection. */
  capture?: { limit: number };
}

/** Everything a request handler needs, built once at start-up. */
export interface Services {
  store: Store;
  options: ServerOptions;
  ledger: Ledger;
  limits: RequestLimits;
  sharedKeys: SharedKeyLimiter;
  dispatcher: Dispatcher;
  http: UpstreamHttp;
  inspector: RequestInspector;
}

export function createServices(store: Store, options: ServerOptions): Services {
  const inspector = new RequestInspector(store, options.capture);
  // Only a gateway with the test kit on gets the upstream that records, replays and captures.
  const http =
    options.cassettes || options.capture
      ? new KitUpstream(options.cassettes, options.capture ? inspector : undefined)
      : new UpstreamHttp();
  const ledger = new Ledger(store);
  inspector.watch(ledger);
  const pools = new KeyPools(options.now);
  const dispatcher = new Dispatcher(store, pools, {
    mock: new MockAdapter(),
    openai: new OpenAIAdapter(http),
    anthropic: new AnthropicAdapter(http),
  });
  return {
    store,
    options,
    ledger,
    limits: new RequestLimits(),
    sharedKeys: new SharedKeyLimiter(),
    dispatcher,
    http,
    inspector,
  };
}
