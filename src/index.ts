import type { ConfigInput } from "./server/config/schema.js";
import { startGateway as startInternal } from "./server/gateway.js";

export { ConfigError } from "./server/config/load.js";
export type { ConfigInput as GatewayConfig } from "./server/config/schema.js";
export { type Stage, type StageMessage, stageChannelName } from "./server/http/stages.js";

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
  /** Device-flow timing for `gateway login` (defaults 600 s and 5 s). */
  deviceCodeTtlSeconds?: number;
  devicePollIntervalSeconds?: number;
}

export interface RunningGateway {
  /** Base URL, e.g. http://127.0.0.1:54321 (the OpenAI base URL is this plus /v1). */
  url: string;
  port: number;
  /** The demo key, when this start created the demo account. */
  demoKey?: string;
  /** One-time owner URL for the first account: opens a dashboard session. */
  ownerUrl?: string;
  /** Stops listening, finishes pending writes and closes the database. */
  close(): Promise<void>;
}

export async function startGateway(options: GatewayOptions = {}): Promise<RunningGateway> {
  const gateway = await startInternal({ ...options, db: options.db ?? ":memory:" });
  return {
    url: gateway.url,
    port: gateway.port,
    demoKey: gateway.demoKey,
    ownerUrl: gateway.ownerUrl,
    close: () => gateway.close(),
  };
}
