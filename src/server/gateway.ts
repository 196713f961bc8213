import {
  createServer,
  type IncomingMessage,
  type RequestListener,
  type ServerResponse,
} from "node:http";
import type { AddressInfo } from "node:net";
import { clearTimeout, setImmediate, setTimeout } from "../host-timers.js";
import { isPostgresUrl } from "../store/postgres/url.js";
import { hashSecret, shownUrl } from "../store/secrets.js";
import type { SecretKeyStore } from "../store/sqlite/sealing-key.js";
import { gatewayListener } from "./app.js";
import { createOwnerLink } from "./auth/owner-session.js";
import type { Backend } from "./backends/backend.js";
import { createServices, type Services } from "./compose/services.js";
import { applyConfig } from "./config/apply.js";
import { demoAccountId, demoConfig } from "./config/demo.js";
import { ConfigError, formatZodError, loadConfigFile, parseConfig } from "./config/load.js";
import { carriesUserinfo } from "./config/schema.js";
import type { PublicGatewayOptions, PublicRunningGateway } from "./gateway-types.js";
import { defaultBodyLimitBytes } from "./http/body.js";
import {
  type ConnectionLimits,
  connectionServerOptions,
  defaultConnectionLimits,
  guardConnections,
  inTurn,
  refuseUnservable,
} from "./http/connection-guards.js";
import { Loopback } from "./http/loopback.js";
import { InvalidProxies, ProxyList } from "./http/request.js";
import { withRequestIds } from "./http/request-id.js";
import { onFinishedRequests, tracedListener } from "./http/request-trace.js";
import { shownText } from "./http/shown-text.js";
import { targetPath } from "./http/target.js";
import { type JobRunner, startJobRunner } from "./jobs/runner.js";
import { parseCassetteOptions } from "./kit/cassettes.js";
import { defaultCaptureLimit } from "./kit/inspect.js";
import { Readiness } from "./observe/health.js";
import {
  type MockMatch,
  type MockReply,
  type MockRule,
  mockRuleSchema,
} from "./providers/mock-script.js";
import { routeTable } from "./routes/index.js";
import {
  type Clock,
  countInFlight,
  type GatewayClock,
  ManualClock,
  monotonic,
  realClock,
} from "./time/clock.js";

/** The public options, and the timings tests inside this repository tune. */
export interface GatewayOptions extends PublicGatewayOptions {
  /** How long a job claimed here stays this gateway's without a renewal (the runner's default). */
  jobLeaseMs?: number;
  /** How often this gateway's runner looks at the job queue unasked (the runner's default). */
  jobPollMs?: number;
  /** SQLite: how long settlements answered from the journal may wait for their transaction. */
  journaledWaitMs?: number;
  /**
   * SQLite: the BYOK sealing key's store when GATEWAY_SECRET_KEY_STORE is unset. `gateway serve`
   * passes "auto" (a new database's key goes to the OS keychain where one works). The default,
   * "kit", writes nothing to the keychain and prints nothing (sealing-key.ts).
   */
  secretKeyStore?: "auto" | "kit";
  /** `gateway serve` sets "flags": the kit's messages name its flags, not `startGateway`'s options. */
  cassettesFrom?: "flags" | "option";
}

/** The public handle, and the services and job runner for tests inside this repository. */
export interface RunningGateway extends PublicRunningGateway {
  services: Services;
  jobRunner: JobRunner;
  /**
   * Stops taking requests and lets those in flight finish (`gateway serve`'s stop): idle
   * connections close, each connection closes once its answer is written, and a new one is taken
   * only for an MCP client's cancellation of a call in flight; the server stops listening once
   * the answers under way are written. `underWay`: the answers being written when it began; `drained` resolves once every
   * connection has closed, or after `boundMs`. `close()` after it cuts whatever is left.
   */
  drain(boundMs: number): { underWay: number; drained: Promise<void> };
}

function gatewayClock(clock: Clock): GatewayClock {
  const manual = (): ManualClock => {
    if (clock instanceof ManualClock) return clock;
    throw new Error('the clock is not manual: start the gateway with clock: "manual"');
  };
  return {
    now: () => clock.now(),
    advance: (ms) => manual().advance(ms),
    set: (to) => manual().set(to),
  };
}

/**
 * How long `close()` waits for the requests it cut off to settle. Each ends as soon as it sees its
 * client gone; the bound is for a wait that would not.
 */
const settleOnCloseMs = 5_000;

/** OpenAI keeps a stored response 30 days. */
const defaultResponsesTtlSeconds = 30 * 24 * 60 * 60;
/** As long as a stored response: a job's media is what its client fetches later. */
const defaultJobsTtlSeconds = defaultResponsesTtlSeconds;

/**
 * The longest `close` waits for the answers that end in their own words (`services.closing`)
 * before it cuts every connection: they are written from memory, so a client that takes longer
 * is one that does not read.
 */
const closingBoundMs = 2_000;

export async function startGateway(options: GatewayOptions = {}): Promise<RunningGateway> {
  // What a start can refuse without the database (options, the config, the address) is refused
  // before it is opened, so nothing is written for a start that never serves.
  const configuredOrigin = publicOrigin(options.publicUrl);
  const trustedProxies = proxyAddresses(options.trustedProxies ?? []);
  const config =
    typeof options.config === "string"
      ? loadConfigFile(options.config)
      : options.config && parseConfig(options.config);
  const db = options.db ?? ":memory:";
  const limits = { ...defaultConnectionLimits, ...options.connections };
  const host = options.host ?? "127.0.0.1";
  const listening = await listenFirst(limits, host, options.port ?? 0, db);
  let backend: Backend;
  try {
    backend = await openBackend(db, options.journaledWaitMs, options.secretKeyStore ?? "kit");
  } catch (err) {
    await listening.close();
    throw err;
  }
  const { store } = backend;
  // The upstream client of the services, once made: a refused start takes back what it made.
  let upstream: Services["http"] | undefined;
  try {
    const clock: Clock =
      options.clock === "manual"
        ? new ManualClock((options.now ?? Date.now)(), {
            autoAdvance: options.autoAdvance ?? true,
          })
        : options.now
          ? { ...realClock, now: options.now }
          : realClock;
    // Windows and allowances read a time that never goes back, across a restart too; waits
    // follow the clock itself.
    const now = monotonic(clock.now, await store.latestRecordedAt());
    const services = createServices(backend, {
      keepaliveMs: options.keepaliveMs ?? 15_000,
      bodyLimitBytes: options.bodyLimitBytes ?? defaultBodyLimitBytes,
      clock,
      now,
      deviceCodeTtlSeconds: options.deviceCodeTtlSeconds,
      devicePollIntervalSeconds: options.devicePollIntervalSeconds,
      cassettes:
        options.cassettes && parseCassetteOptions(options.cassettes, options.cassettesFrom),
      capture: options.captureBodies
        ? { limit: options.captureLimit ?? defaultCaptureLimit }
        : undefined,
      upstreamAnswerLimitBytes: options.upstreamAnswerLimitBytes,
      responsesTtlMs: (options.responsesTtlSeconds ?? defaultResponsesTtlSeconds) * 1000,
      jobsTtlMs: (options.jobsTtlSeconds ?? defaultJobsTtlSeconds) * 1000,
      publicUrlOrigin: configuredOrigin,
      trustedProxies,
      runAdminKeys: options.adminKeys && new Set(options.adminKeys.map(hashSecret)),
    });
    upstream = services.http;
    let ownerAccountId: string | undefined;
    let demoKey: string | undefined;
    if (config !== undefined) {
      await applyConfig(
        store,
        services.repos.configApply,
        config,
        now(),
        typeof options.config === "string" ? options.config : undefined,
      );
      services.mockScript.setBaseline(config.mock?.script ?? []);
      const ttlSeconds = options.responsesTtlSeconds ?? config.responses?.ttl_seconds;
      if (ttlSeconds !== undefined) services.options.responsesTtlMs = ttlSeconds * 1000;
      const jobsTtlSeconds = options.jobsTtlSeconds ?? config.jobs?.ttl_seconds;
      if (jobsTtlSeconds !== undefined) services.options.jobsTtlMs = jobsTtlSeconds * 1000;
      ownerAccountId = config.accounts[0]?.id;
    } else if (options.demo !== false && store.accountCount() === 0) {
      await applyConfig(store, services.repos.configApply, parseConfig(demoConfig), now());
      demoKey = (
        await store.createKey({
          accountId: demoAccountId,
          label: "demo",
          kind: "standard",
          now: now(),
        })
      ).value;
    }
    const keyless = store.providersWithoutKeys();
    if (keyless.length > 0) {
      console.error(
        `gateway: providers ${keyless.join(", ")} have API keys only in their config, which the database does not keep: start with --config to use them`,
      );
    }
    // Only a database from before such URLs were refused holds one; its calls go without them.
    for (const provider of store.getCatalog().providers.values()) {
      if (provider.base_url === null || !carriesUserinfo(provider.base_url)) continue;
      console.error(
        `gateway: provider ${shownText(provider.id)}'s base_url carries a user and password (user:password@), which the gateway does not send, so its calls go without them: remove them from its base_url in your config and start with --config, and have the proxy let the gateway in by the provider key it sends (api_keys) or by its address`,
      );
    }

    const readiness = new Readiness(() => services.ledger.storageFault());
    const metricsAccess = options.metrics ?? "admin";
    // Loaded only when wanted: a gateway without /metrics pays neither its start-up nor its counting.
    const metrics =
      metricsAccess === "off"
        ? undefined
        : (await import("./observe/metrics.js")).createMetrics(services);
    const loopback = new Loopback();
    const routes = routeTable(services, {
      readiness,
      metrics,
      metricsAccess,
      loopback,
      extra: options.extraRoutes,
    });
    metrics?.knowRoutes(routes);
    const traceSource = { url: "" };
    const app = gatewayListener(services, routes, host);
    const served = withRequestIds(
      services.inspector.listener(
        tracedListener(
          traceSource,
          refuseUnservable(app.listener, () => services.options.publicOrigin),
        ),
      ),
    );
    listening.connections.serving(traceSource, app.methodsTaken);
    const listener =
      clock instanceof ManualClock && clock.autoAdvance ? countInFlight(clock, served) : served;
    // Uncounted: a loopback request (an MCP tool's /v1 call) is what its counted caller waits on,
    // so the clock still jumps when that inner request waits on a burst slot.
    loopback.attach(served);
    const { port } = listening;
    const jobRunner = await startJobRunner(services, {
      leaseMs: options.jobLeaseMs,
      pollMs: options.jobPollMs,
    });
    backend.startUpkeep();
    const shownHost = host.includes(":") ? `[${host}]` : host === "0.0.0.0" ? "127.0.0.1" : host;
    const url = `http://${shownHost}:${port}`;
    traceSource.url = url;
    services.options.publicOrigin = configuredOrigin ?? url;
    const observers = [options.onRequest, metrics?.observe].flatMap((observe) =>
      observe ? [onFinishedRequests(traceSource, observe)] : [],
    );
    ownerAccountId ??= store.listAccounts()[0]?.id;
    const { sessions, serveRecord } = services.repos;
    // Links printed by earlier runs stop working, only the newly printed one does.
    await sessions.forgetUnusedOwnerLinks();
    const ownerUrl = ownerAccountId
      ? await createOwnerLink(sessions, ownerAccountId, options.publicUrl ?? url)
      : undefined;
    await serveRecord.record({
      url,
      ownerAccountId: ownerAccountId ?? null,
      pid: process.pid,
      startedAt: now(),
    });
    listening.serve(inTurn(listener));
    readiness.ready();
    let closing: Promise<void> | undefined;
    let draining: Promise<void> | undefined;
    let underWay = 0;
    return {
      url,
      port,
      demoKey,
      ownerUrl,
      services,
      jobRunner,
      mock: {
        reply(ruleOrMatch: MockRule | MockMatch, reply?: MockReply, opts?: { times?: number }) {
          const rule = reply ? { match: ruleOrMatch, reply, times: opts?.times } : ruleOrMatch;
          // The fields as the test wrote them, as the admin API's 400 names them.
          const checked = mockRuleSchema.safeParse(rule);
          if (!checked.success) throw new ConfigError(formatZodError(checked.error), "mock rule");
          services.mockScript.add([rule as MockRule]);
        },
        reset: () => services.mockScript.reset(),
      },
      clock: gatewayClock(clock),
      listRequests: (query) =>
        closing !== undefined
          ? Promise.reject(new Error("listRequests(): this gateway is closed (close() was called)"))
          : services.inspector.requests(query),
      drain(boundMs) {
        if (!draining) {
          readiness.stopping();
          services.closing.draining = true;
          // The server keeps listening until the answers under way are written, for the one
          // request a client can only send on a new connection: an MCP client's cancellation of
          // its call in flight (the call's own connection carries its answer).
          const drained = listening.connections.drain(
            (incoming) => incoming.method === "POST" && targetPath(incoming.url ?? "") === "/mcp",
          );
          underWay = drained.underWay;
          const gone = drained.finished.then(() => listening.stop());
          draining = new Promise<void>((resolve) => {
            const bound = setTimeout(resolve, boundMs);
            void gone.then(() => {
              clearTimeout(bound);
              resolve();
            });
          });
        }
        return { underWay, drained: draining };
      },
      close() {
        closing ??= (async () => {
          readiness.stopping();
          const gone = listening.stop();
          // A gateway that drained first is a serve stopping: its clients are told their streams
          // were cut. A test's close() hangs up on them, as documented.
          void Promise.all([
            services.closing.run(closingBoundMs),
            draining && services.streamsCut.run(closingBoundMs),
          ]).finally(() => listening.connections.cut());
          await gone;
          // The requests just cut off settle as they notice; their writes go before the store closes.
          await services.unsettled.drained(settleOnCloseMs);
          for (const unobserve of observers) unobserve();
          await jobRunner.stop();
          await services.http.close();
          await serveRecord.forget(process.pid);
          await backend.close();
        })();
        return closing;
      },
    };
  } catch (err) {
    await listening.close();
    await upstream?.abandon();
    await backend.abandon();
    throw err;
  }
}

/**
 * The server, listening before the database is opened: an address or a port it cannot have
 * refuses the start before anything is written. A request that comes before the gateway is
 * ready waits for `serve`, and is dropped with its connection if the start is refused.
 */
async function listenFirst(limits: ConnectionLimits, host: string, port: number, db: string) {
  const waiting: [IncomingMessage, ServerResponse][] = [];
  const wait = (req: IncomingMessage, res: ServerResponse) => {
    waiting.push([req, res]);
  };
  const server = createServer(connectionServerOptions(limits), wait);
  const connections = guardConnections(server, limits);
  // Node calls a second `close`'s callback only if the server has not closed yet: the one close,
  // kept, is what a drain and the close after it both wait for.
  let stopped: Promise<void> | undefined;
  const stop = () => {
    stopped ??= new Promise<void>((resolve) => server.close(() => resolve())).then(handleReleased);
    return stopped;
  };
  try {
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(port, host, () => resolve());
    });
  } catch (err) {
    // Most often the port of a gateway already serving this database: that gateway is named.
    if ((err as NodeJS.ErrnoException).code === "EADDRINUSE" && !isPostgresUrl(db))
      await (await import("./backends/serve-lock.js")).refuseIfServed(db);
    throw err;
  }
  return {
    port: (server.address() as AddressInfo).port,
    connections,
    serve(listener: RequestListener) {
      const served = connections.listener(listener);
      server.off("request", wait);
      server.on("request", served);
      for (const [req, res] of waiting.splice(0)) served(req, res);
    },
    /** Stops listening; resolves once every connection is gone. */
    stop,
    close() {
      const gone = stop();
      connections.cut();
      return gone;
    },
  };
}

/**
 * Resolves once the event loop has run its close callbacks: a server's `close` event comes before
 * the loop lets go of its handle, which a suite counting the process's handles (or vitest's
 * hanging-process reporter) right after `close()` would see. An immediate queued from the loop's
 * check phase runs on the next turn, after the close callbacks of this one.
 */
function handleReleased(): Promise<void> {
  return new Promise((resolve) => setImmediate(() => setImmediate(resolve)));
}

/**
 * Opens the database `db` names: a postgres:// URL is Postgres, anything else a SQLite file.
 * (The environment's GATEWAY_DB_URL is serve's to read: a test suite's gateway stays where its
 * options put it.)
 */
async function openBackend(
  db: string,
  journaledWaitMs: number | undefined,
  secretKeyStore: SecretKeyStore,
): Promise<Backend> {
  // Each backend is loaded only when used: an embedded gateway never pays for pg, nor one on
  // Postgres for better-sqlite3 and the SQLite store (a restart's time to ready).
  if (isPostgresUrl(db)) {
    const { openPostgresBackend } = await import("./backends/postgres.js");
    return openPostgresBackend(db, process.env);
  }
  const { openSqliteBackend } = await import("./backends/sqlite.js");
  return openSqliteBackend(db, journaledWaitMs, secretKeyStore);
}

function publicOrigin(publicUrl: string | undefined): string | undefined {
  if (publicUrl === undefined) return undefined;
  const parsed = URL.canParse(publicUrl) ? new URL(publicUrl) : undefined;
  if (!parsed || (parsed.protocol !== "http:" && parsed.protocol !== "https:"))
    throw new ConfigError(
      [`must be an http:// or https:// URL, got "${shownUrl(publicUrl)}"`],
      "public URL",
    );
  return parsed.origin;
}

function proxyAddresses(entries: string[]): ProxyList {
  try {
    return new ProxyList(entries);
  } catch (err) {
    if (!(err instanceof InvalidProxies)) throw err;
    throw new ConfigError(
      err.entries.map(
        (entry) => `must be an IPv4 or IPv6 address or a CIDR range (10.0.0.0/8), got "${entry}"`,
      ),
      "trusted proxy",
    );
  }
}
