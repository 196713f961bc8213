import type { Store } from "../store/store.js";
import { Ledger } from "./billing/ledger.js";
import type { Clock } from "./clock.js";
import { Dispatcher } from "./dispatch/dispatcher.js";
import { KeyPools } from "./dispatch/key-pool.js";
import { RequestLimits } from "./limits/request-limits.js";
import { SharedKeyLimiter } from "./limits/shared-key.js";
import { AnthropicAdapter } from "./providers/anthropic-adapter.js";
import { UpstreamHttp } from "./providers/http-upstream.js";
import { MockAdapter } from "./providers/mock-adapter.js";
import { MockScript } from "./providers/mock-script.js";
import { OpenAIAdapter } from "./providers/openai-adapter.js";

export interface ServerOptions {
  /** Interval of SSE keepalive comments while a stream waits for its first token. */
  keepaliveMs: number;
  bodyLimitBytes: number;
  /** The gateway's one clock; `now` is its `now`, kept as the short name every route reads. */
  clock: Clock;
  now: () => number;
  /** Lifetime of a `gateway login` device code (default 600 s). */
  deviceCodeTtlSeconds?: number;
  /** Poll interval the device flow asks clients for (default 5 s). */
  devicePollIntervalSeconds?: number;
  /**
   * The origin browsers reach the gateway at (`publicUrl`, else the listening address), set once
   * the server listens. Same-origin checks compare against it, never against the Host header.
   */
  publicOrigin?: string;
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
  /** Scripted answers of the mock provider (config `mock.script`, admin API, `gateway.mock`). */
  mockScript: MockScript;
}

export function createServices(store: Store, options: ServerOptions): Services {
  const http = new UpstreamHttp();
  const pools = new KeyPools(options.now);
  const mockScript = new MockScript();
  const dispatcher = new Dispatcher(store, pools, {
    mock: new MockAdapter(mockScript),
    openai: new OpenAIAdapter(http),
    anthropic: new AnthropicAdapter(http),
  });
  return {
    store,
    options,
    ledger: new Ledger(store),
    limits: new RequestLimits(),
    sharedKeys: new SharedKeyLimiter(),
    dispatcher,
    http,
    mockScript,
  };
}
