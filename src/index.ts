import type { GatewayClock } from "./server/clock.js";
import type { ConfigInput } from "./server/config/schema.js";
import { startGateway as startInternal } from "./server/gateway.js";
import type { ConnectionLimits } from "./server/http/connection-guards.js";
import type { FinishedRequest } from "./server/http/request-trace.js";
import type { CassetteOptions } from "./server/kit/cassettes.js";
import type { InspectedRequest, RequestsQuery } from "./server/kit/inspected.js";
import type { MetricsAccess } from "./server/metrics-access.js";
import type { GatewayMock } from "./server/providers/mock-script.js";

export type { GatewayClock } from "./server/clock.js";
export { ConfigError } from "./server/config/load.js";
export type { ConfigInput as GatewayConfig } from "./server/config/schema.js";
export type { ConnectionLimits } from "./server/http/connection-guards.js";
export {
  type FinishedRequest,
  type RequestTrace,
  requestChannelName,
} from "./server/http/request-trace.js";
export { type Stage, type StageMessage, stageChannelName } from "./server/http/stages.js";
export type { CassetteMode, CassetteOptions } from "./server/kit/cassettes.js";
export type {
  InspectedRequest,
  RequestsQuery,
  UpstreamExchange,
} from "./server/kit/inspected.js";
export type { MetricsAccess } from "./server/metrics-access.js";
export type {
  GatewayMock,
  MockMatch,
  MockReply,
  MockRule,
} from "./server/providers/mock-script.js";
export { GatewayAlreadyRunning } from "./server/serve-lock.js";

/**
 * The package's public surface, declared here on purpose: the server's internal options and
 * services stay out of the published types.
 */

export interface GatewayOptions {
  /** A config object (as the JSON file would hold) or the path of a JSON file. */
  config?: ConfigInput | string;
  /**
   * SQLite file. Default ":memory:": a gateway started from code writes nothing to disk unless
   * told where (the `gateway serve` command keeps its ./gateway.db default).
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
  /** Device-flow timing for `gateway login` (defaults 600 s and 5 s). */
  deviceCodeTtlSeconds?: number;
  devicePollIntervalSeconds?: number;
  /** Called once per finished HTTP request (what `gateway serve` prints a line from). */
  onRequest?: (request: FinishedRequest) => void;
  /** `GET /metrics`: off, public, or admin (an admin key; the default). */
  metrics?: MetricsAccess;
  /** Header, request and keep-alive timeouts and the per-address connection cap. */
  connections?: Partial<ConnectionLimits>;
  /** The address browsers use to reach the gateway, when it is not the listening address. */
  publicUrl?: string;
  /** Test kit: record upstream exchanges to cassette files, or answer from them. */
  cassettes?: CassetteOptions;
  /** Test kit: keep what each request received, sent upstream and answered (see `requests()`). */
  captureBodies?: boolean;
  /** How many requests' bodies `captureBodies` keeps (default 100). */
  captureLimit?: number;
}

export interface RunningGateway {
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
  /** Recent requests, newest first, with their bodies when `captureBodies` is on. */
  requests(query?: RequestsQuery): InspectedRequest[];
  /** Stops listening, finishes pending writes and closes the database. */
  close(): Promise<void>;
}

export async function startGateway(options: GatewayOptions = {}): Promise<RunningGateway> {
  const { services: _internal, ...gateway } = await startInternal({
    ...options,
    db: options.db ?? ":memory:",
  });
  return gateway;
}
