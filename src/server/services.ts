import type { Store } from "../store/store.js";
import { Ledger } from "./billing/ledger.js";
import { Dispatcher } from "./dispatch/dispatcher.js";
import { KeyPools } from "./dispatch/key-pool.js";
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
  /** Largest whole answer read from a provider (default in http-upstream.ts). */
  upstreamAnswerLimitBytes?: number;
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
}

export function createServices(store: Store, options: ServerOptions): Services {
  const http = new UpstreamHttp(options.upstreamAnswerLimitBytes);
  const pools = new KeyPools(options.now);
  const dispatcher = new Dispatcher(store, pools, {
    mock: new MockAdapter(),
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
  };
}
