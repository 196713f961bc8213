import type { ConfigInput } from "./config/schema.js";
import type { ConnectionLimits } from "./http/connection-guards.js";
import type { FinishedRequest } from "./http/request-trace.js";
import type { CassetteOptions, InspectedRequest, RequestsQuery } from "./kit/types.js";
import type { MetricsAccess } from "./observe/metrics-access.js";
import type { GatewayMock } from "./providers/mock-script.js";
import type { GatewayClock } from "./time/clock.js";

/**
 * What `startGateway` takes and gives, as the package publishes it (src/index.ts). It imports
 * only modules whose declarations reach no store or services, so a consumer's type check with
 * `skipLibCheck: false` needs nothing but the runtime dependencies. The server's own entry
 * (gateway.ts) extends both with what tests inside this repository use.
 */

export interface PublicGatewayOptions {
  /** A config object (as the JSON file would hold) or the path of a JSON file. */
  config?: ConfigInput | string;
  /**
   * SQLite file, or a postgres:// URL shared with other gateways (their GATEWAY_SECRET_KEY must
   * match). Default ":memory:": a gateway started from code writes nothing to disk unless told
   * where (the `gateway serve` command keeps its ./gateway.db default, and reads GATEWAY_DB_URL).
   * A new file's BYOK sealing key goes in `<db>.key` beside it, not the OS keychain
   * (docs/security.md).
   */
  db?: string;
  /** Default 0: any free port (read it from `port` or `url`). */
  port?: number;
  /** Default "127.0.0.1". */
  host?: string;
  /** Milliseconds between keep-alive comments on a quiet stream. Default 15000. */
  keepaliveMs?: number;
  /** Largest request body accepted, in bytes. */
  bodyLimitBytes?: number;
  /** Create the demo setup when the database is empty and no config is given. Default true. */
  demo?: boolean;
  /** Clock in epoch milliseconds, for tests that move time. Default Date.now. */
  now?: () => number;
  /**
   * "manual": time moves only by `gateway.clock.advance/set` (or `POST /api/admin/clock`), from
   * the real time at start (or `now()`); every window, quota, cooldown and job wait follows it.
   */
  clock?: "real" | "manual";
  /**
   * Manual clock only. Default true: when every request in flight waits only on the clock (a free
   * request spaced by the tier's `burst_spacing_ms`, say), the clock jumps to the earliest of their
   * deadlines, as tokio's paused clock does, so awaiting requests one by one never hangs. false:
   * the clock stays where the test put it, and a spaced request waits for `advance`.
   */
  autoAdvance?: boolean;
  /**
   * Admin keys valid for this run only: kept in memory as hashes, never written to the database
   * (`gateway serve --manual-clock` mints one so its clock can be moved on any setup).
   */
  adminKeys?: string[];
  /** Device-flow timing for `gateway login` (defaults 600 s and 5 s). */
  deviceCodeTtlSeconds?: number;
  devicePollIntervalSeconds?: number;
  /**
   * How long a stored response (`previous_response_id`, `GET /v1/responses/{id}`) or a
   * conversation is kept after its last turn, in seconds. Default: the config's
   * `responses.ttl_seconds`, else 30 days.
   */
  responsesTtlSeconds?: number;
  /**
   * How long a finished (completed or failed) music or video job is kept after it finished, in
   * seconds; then its media and submission are deleted. Default: the config's `jobs.ttl_seconds`,
   * else 30 days.
   */
  jobsTtlSeconds?: number;
  /** Called once per finished HTTP request (what `gateway serve` prints a line from). */
  onRequest?: (request: FinishedRequest) => void;
  /** `GET /metrics`: off, public, or admin (an admin key; the default). */
  metrics?: MetricsAccess;
  /** Header, request and keep-alive timeouts and the per-address connection cap. */
  connections?: Partial<ConnectionLimits>;
  /** Largest whole answer (JSON, audio) read from a provider, in bytes (default 32 MB). */
  upstreamAnswerLimitBytes?: number;
  /** The address browsers use to reach the gateway, when it is not the listening address. */
  publicUrl?: string;
  /**
   * Addresses (exact IPv4 or IPv6) of the proxies in front of the gateway. A request from one of
   * them is taken to come from its X-Forwarded-For client (per-address limits), at the origin its
   * X-Forwarded-Proto and X-Forwarded-Host name (`Secure` cookies, URLs handed out when there is
   * no `publicUrl`). Anyone else's X-Forwarded-* headers are ignored.
   */
  trustedProxies?: string[];
  /** Test kit: record upstream exchanges to cassette files, or answer from them. */
  cassettes?: CassetteOptions;
  /** Test kit: keep what each request received, sent upstream and answered (see `listRequests()`). */
  captureBodies?: boolean;
  /** How many requests' bodies `captureBodies` keeps (default 100). */
  captureLimit?: number;
  /** Test kit: routes of the test's own, served beside the gateway's (see `ExtraRoute`). */
  extraRoutes?: ExtraRoute[];
}

/**
 * A route a test adds, registered as the gateway's own are: its access is checked, and what its
 * handler throws is answered in its error style, as the 500 `internal_error` of an unexpected
 * fault. The handler's Response is the answer.
 */
export interface ExtraRoute {
  method: "GET" | "POST" | "PUT" | "PATCH" | "DELETE";
  /** The path, e.g. `/v1/boom`. */
  path: string;
  /** Who may call it: anyone, a gateway key, or an admin key. */
  access: "public" | "key" | "admin";
  /** The JSON style of its errors: chat completions' or messages'. */
  errors: "chat" | "messages";
  handler: () => Response | Promise<Response>;
}

export interface PublicRunningGateway {
  /** Base URL, e.g. http://127.0.0.1:54321 (the OpenAI base URL is this plus /v1). */
  url: string;
  port: number;
  /** The demo key, when this start created the demo account. */
  demoKey?: string;
  /** One-time owner URL for the first account: opens a dashboard session. */
  ownerUrl?: string;
  /** Scripted answers of the mock provider. */
  mock: GatewayMock;
  /** The gateway's clock (movable with `clock: "manual"`). */
  clock: GatewayClock;
  /**
   * Recent requests, newest first (in the order they finished), with their bodies when
   * `captureBodies` is on; the same on SQLite and on Postgres.
   */
  listRequests(query?: RequestsQuery): Promise<InspectedRequest[]>;
  /**
   * Stops listening and cuts the connections of requests in flight; once those have settled,
   * finishes pending writes and closes the database. Again: the same promise.
   */
  close(): Promise<void>;
}
