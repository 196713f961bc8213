import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { getRequestListener } from "@hono/node-server";
import { startCheckpointer } from "../store/checkpointer.js";
import { Store } from "../store/store.js";
import { buildApp, type RouteInstaller } from "./app.js";
import { applyConfig } from "./config/apply.js";
import { demoAccountId, demoConfig } from "./config/demo.js";
import { loadConfigFile, parseConfig } from "./config/load.js";
import type { ConfigInput } from "./config/schema.js";
import { createOwnerLink, forgetUnusedOwnerLinks } from "./dashboard/owner-session.js";
import { forgetServeRuntime, recordServeRuntime } from "./dashboard/serve-runtime.js";
import { defaultBodyLimitBytes } from "./http/json-body.js";
import { nodeListener } from "./http/node-listener.js";
import { startJobRunner } from "./jobs/runner.js";
import { type CassetteOptions, parseCassetteOptions } from "./kit/cassettes.js";
import { defaultCaptureLimit, type InspectedRequest, type RequestsQuery } from "./kit/inspect.js";
import { completionRoutes } from "./routes/completions.js";
import { createServices, type Services } from "./services.js";

export interface GatewayOptions {
  /** A config object (as the JSON file would hold) or the path of a JSON file. */
  config?: ConfigInput | string;
  /** SQLite file; ":memory:" for a throwaway gateway. Default "gateway.db". */
  db?: string;
  port?: number;
  host?: string;
  keepaliveMs?: number;
  bodyLimitBytes?: number;
  /** Create the demo setup when the database is empty and no config is given. Default true. */
  demo?: boolean;
  now?: () => number;
  extraRoutes?: RouteInstaller[];
  /** Device-flow timing for `gateway login` (defaults 600 s and 5 s); tests shorten them. */
  deviceCodeTtlSeconds?: number;
  devicePollIntervalSeconds?: number;
  /** Test kit: record upstream exchanges to cassette files, or answer from them. */
  cassettes?: CassetteOptions;
  /** Test kit: keep what each request received, sent upstream and answered (see `requests()`). */
  captureBodies?: boolean;
  /** How many requests' bodies `captureBodies` keeps (`defaultCaptureLimit` when unset). */
  captureLimit?: number;
}

export interface RunningGateway {
  url: string;
  port: number;
  /** Printed once: the demo key when this start created the demo account. */
  demoKey?: string;
  /** One-time owner URL for the first account: opens a dashboard session (printed by `serve`). */
  ownerUrl?: string;
  services: Services;
  /** Recent requests, newest first, with their bodies when `captureBodies` is on. */
  requests(query?: RequestsQuery): InspectedRequest[];
  close(): Promise<void>;
}

export async function startGateway(options: GatewayOptions = {}): Promise<RunningGateway> {
  const dbPath = options.db ?? "gateway.db";
  const store = new Store(dbPath);
  try {
    const now = options.now ?? Date.now;
    const services = createServices(store, {
      keepaliveMs: options.keepaliveMs ?? 15_000,
      bodyLimitBytes: options.bodyLimitBytes ?? defaultBodyLimitBytes,
      now,
      deviceCodeTtlSeconds: options.deviceCodeTtlSeconds,
      devicePollIntervalSeconds: options.devicePollIntervalSeconds,
      cassettes: options.cassettes && parseCassetteOptions(options.cassettes),
      capture: options.captureBodies
        ? { limit: options.captureLimit ?? defaultCaptureLimit }
        : undefined,
    });
    let ownerAccountId: string | undefined;
    let demoKey: string | undefined;
    if (options.config !== undefined) {
      const config =
        typeof options.config === "string"
          ? loadConfigFile(options.config)
          : parseConfig(options.config);
      applyConfig(store, config, now());
      ownerAccountId = config.accounts[0]?.id;
    } else if (options.demo !== false && store.accountCount() === 0) {
      applyConfig(store, parseConfig(demoConfig), now());
      demoKey = store.createKey({
        accountId: demoAccountId,
        label: "demo",
        kind: "standard",
        now: now(),
      }).value;
    }

    const app = buildApp(services, options.extraRoutes ?? []);
    const host = options.host ?? "127.0.0.1";
    const listener = services.inspector.listener(
      nodeListener(completionRoutes(services), getRequestListener(app.fetch, { hostname: host })),
    );
    const server = await new Promise<Server>((resolve, reject) => {
      const s = createServer(listener);
      s.once("error", reject);
      s.listen(options.port ?? 0, host, () => resolve(s));
    });
    const port = (server.address() as AddressInfo).port;
    const jobRunner = startJobRunner(services);
    // After the ready line is possible, not before: a mock-only gateway never needs undici.
    if ([...store.getCatalog().providers.values()].some((p) => p.wire !== "mock")) {
      setImmediate(() => void services.http.warm());
    }
    const checkpointer = dbPath === ":memory:" ? undefined : startCheckpointer(store.db, dbPath);
    const shownHost = host.includes(":") ? `[${host}]` : host === "0.0.0.0" ? "127.0.0.1" : host;
    const url = `http://${shownHost}:${port}`;
    ownerAccountId ??= store.listAccounts()[0]?.id;
    forgetUnusedOwnerLinks(store.db);
    const ownerUrl = ownerAccountId ? createOwnerLink(store.db, ownerAccountId, url) : undefined;
    recordServeRuntime(store.db, { url, ownerAccountId, startedAt: now() });
    let closing: Promise<void> | undefined;
    return {
      url,
      port,
      demoKey,
      ownerUrl,
      services,
      requests: (query) => services.inspector.requests(query),
      close() {
        closing ??= (async () => {
          await new Promise<void>((resolve) => {
            server.close(() => resolve());
            server.closeAllConnections();
          });
          await jobRunner.stop();
          await services.http.close();
          services.ledger.close();
          await checkpointer?.stop();
          forgetServeRuntime(store.db);
          store.close();
        })();
        return closing;
      },
    };
  } catch (err) {
    store.close();
    throw err;
  }
}
