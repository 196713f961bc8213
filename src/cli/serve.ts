import { existsSync } from "node:fs";
import { networkInterfaces } from "node:os";
import { dirname, resolve } from "node:path";
import { type Command, Option } from "commander";
import { cliCommand } from "../cli-command.js";
import { defaultConnectionLimits } from "../server/http/connection-guards.js";
import { type MetricsAccess, metricsAccesses } from "../server/observe/metrics-access.js";
import { newGatewayKey } from "../store/secrets.js";
import { databaseProblem, UsageError, UserError } from "./errors.js";
import { capYoungGeneration, keepHeapTight } from "./heap.js";
import { type LogFormat, logFormats, requestLinePrinter } from "./request-lines.js";

/**
 * How long a stop lets the requests in flight finish: under the grace a container's stop gives
 * (docker stop's is the shortest) before it kills the process, with time left to settle the
 * requests it cuts.
 */
const defaultDrainTimeoutMs = 8_000;

interface ServeOptions {
  port: string;
  host: string;
  db?: string;
  config?: string;
  keepaliveMs: string;
  headersTimeoutMs: string;
  requestTimeoutMs: string;
  keepAliveTimeoutMs: string;
  maxConnectionsPerIp: string;
  sendTimeoutMs: string;
  drainTimeoutMs: string;
  publicUrl?: string;
  trustedProxy: string[];
  upstreamAnswerLimitMb?: string;
  json?: boolean;
  quiet?: boolean;
  logFormat: LogFormat;
  metrics: MetricsAccess;
  manualClock?: boolean;
  autoAdvance: boolean;
  record?: string;
  replay?: string;
  recordMissing?: boolean;
  replayTiming: string;
  captureBodies?: boolean;
  captureLimit?: string;
}

export function registerServe(program: Command): void {
  program
    .command("serve")
    .description(
      "Run the gateway on this machine (SQLite; a built-in mock provider answers offline)",
    )
    .option("-p, --port <port>", "port to listen on (0 picks a free one)", "8787")
    .option("--host <host>", "interface to bind", "127.0.0.1")
    .option(
      "--db <file|url>",
      "SQLite database file (:memory: for a throwaway one), or a postgres:// URL that several gateways share (default: gateway.db, or GATEWAY_DB_URL when set)",
    )
    .option("-c, --config <file>", "JSON config to apply at start (see docs/configuration.md)")
    .option(
      "--keepalive-ms <ms>",
      "SSE keepalive interval while a stream waits for its first token or an MCP tool call runs (0: none)",
      "15000",
    )
    .option(
      "--headers-timeout-ms <ms>",
      "a request's line and headers must arrive within this (0: no limit)",
      String(defaultConnectionLimits.headersTimeoutMs),
    )
    .option(
      "--request-timeout-ms <ms>",
      "a whole request, body included, must arrive within this; answers may stream longer (0: no limit)",
      String(defaultConnectionLimits.requestTimeoutMs),
    )
    .option(
      "--keep-alive-timeout-ms <ms>",
      "close a keep-alive connection idle this long",
      String(defaultConnectionLimits.keepAliveTimeoutMs),
    )
    .option(
      "--send-timeout-ms <ms>",
      "close a connection whose client takes none of its answer (a stream included) for this long (0: no limit)",
      String(defaultConnectionLimits.sendTimeoutMs),
    )
    .option(
      "--max-connections-per-ip <n>",
      "open connections one client address may hold (0: no cap)",
      String(defaultConnectionLimits.maxConnectionsPerIp),
    )
    .option(
      "--drain-timeout-ms <ms>",
      "on SIGTERM or Ctrl-C, how long the requests in flight may take to finish before they are cut (0: cut them at once; a second signal cuts them too)",
      String(defaultDrainTimeoutMs),
    )
    .option(
      "--public-url <url>",
      "the URL browsers reach the gateway at, when it is not the listening address (dashboard origin checks, owner link)",
    )
    .option(
      "--trusted-proxy <address>",
      "a proxy in front of the gateway: an IPv4 or IPv6 address or a CIDR range (repeatable; default GATEWAY_TRUSTED_PROXIES, comma-separated): its X-Forwarded-For/Proto/Host name the client and origin",
      (address: string, earlier: string[]) => [...earlier, address],
      [],
    )
    .option(
      "--upstream-answer-limit-mb <mb>",
      "largest whole answer (JSON, audio) read from a provider, default 32; a larger one fails with 503",
    )
    .option("--json", "print the ready line as JSON, for scripts")
    .option("-q, --quiet", "no line per request")
    .addOption(
      new Option("--log-format <format>", "the line per request: text, or one JSON object")
        .choices(logFormats)
        .default("text"),
    )
    .addOption(
      new Option(
        "--metrics <access>",
        "GET /metrics (Prometheus): off, public, or admin (needs an admin key)",
      )
        .choices(metricsAccesses)
        .default("admin"),
    )
    .option(
      "--manual-clock",
      "time moves only by POST /api/admin/clock (tests reach window resets at once); prints an admin key for this run to move it",
    )
    .option(
      "--no-auto-advance",
      "with --manual-clock: hold the clock even when every request in flight waits on it (a free request's burst spacing)",
    )
    .option(
      "--record <dir>",
      "test kit: call providers and save each exchange as a cassette in <dir>",
    )
    .option("--replay <dir>", "test kit: answer from the cassettes in <dir>; never call a provider")
    .option("--record-missing", "with --replay: record what has no cassette yet")
    .option("--replay-timing <timing>", "recorded (replay the recorded waits) or none", "none")
    .option(
      "--capture-bodies",
      "test kit: keep request and upstream bodies for /api/admin/requests",
    )
    .option("--capture-limit <n>", "how many requests --capture-bodies keeps (default 100)")
    .addHelpText(
      "after",
      `
Examples:
  $ gateway serve                         demo setup in ./gateway.db, prints a key once
  $ gateway serve --port 0 --json         pick a free port; print {"url":...} when ready
  $ gateway serve --config gateway.json   providers, models, routes and accounts from a file
  $ gateway serve --log-format json       one JSON object per request, for machines
  $ gateway serve --config ci.json --record cassettes     record real answers once
  $ gateway serve --config ci.json --replay cassettes     replay them offline in CI`,
    )
    .action(async (opts: ServeOptions) => {
      const started = performance.now();
      const port = parseInteger(opts.port, "--port");
      if (port > 65_535) throw new UsageError(`--port must be 0 to 65535, got ${port}`);
      const keepaliveMs = parseInteger(opts.keepaliveMs, "--keepalive-ms");
      const connections = {
        headersTimeoutMs: parseInteger(opts.headersTimeoutMs, "--headers-timeout-ms"),
        requestTimeoutMs: parseInteger(opts.requestTimeoutMs, "--request-timeout-ms"),
        keepAliveTimeoutMs: parseInteger(opts.keepAliveTimeoutMs, "--keep-alive-timeout-ms"),
        maxConnectionsPerIp: parseInteger(opts.maxConnectionsPerIp, "--max-connections-per-ip"),
        sendTimeoutMs: parseInteger(opts.sendTimeoutMs, "--send-timeout-ms"),
      };
      const drainTimeoutMs = parseInteger(opts.drainTimeoutMs, "--drain-timeout-ms");
      const upstreamAnswerLimitBytes =
        opts.upstreamAnswerLimitMb === undefined
          ? undefined
          : parseInteger(opts.upstreamAnswerLimitMb, "--upstream-answer-limit-mb") * 1024 * 1024;
      if (
        connections.requestTimeoutMs > 0 &&
        connections.headersTimeoutMs > connections.requestTimeoutMs
      )
        throw new UsageError("--headers-timeout-ms cannot be longer than --request-timeout-ms");
      const cassettes = cassetteFlags(opts);
      // Not a flag: a crash test's takeover waits this out, an operator has no reason to change it.
      const jobLeaseMs =
        process.env.GATEWAY_JOB_LEASE_MS === undefined
          ? undefined
          : parseInteger(process.env.GATEWAY_JOB_LEASE_MS, "GATEWAY_JOB_LEASE_MS");
      if (jobLeaseMs === 0) throw new UserError("GATEWAY_JOB_LEASE_MS must be positive");
      const captureLimit =
        opts.captureLimit === undefined
          ? undefined
          : parseInteger(opts.captureLimit, "--capture-limit");
      keepHeapTight();
      capYoungGeneration();
      // Loaded here, not at the top: the client commands should not pay for the server's modules.
      const { startGateway } = await import("../server/gateway.js");
      const { ConfigError } = await import("../server/config/load.js");
      const { SecretKeyError } = await import("../store/secret-box.js");
      const { GatewayAlreadyRunning } = await import("../server/backends/already-running.js");
      const { storageFaultKind } = await import("../store/storage-fault.js");
      const { describePostgresUrl, isPostgresUrl, selectPostgresUrl } = await import(
        "../store/postgres/url.js"
      );
      let db: string;
      try {
        db = opts.db ?? selectPostgresUrl(undefined) ?? "gateway.db";
      } catch (err) {
        throw new UserError((err as Error).message);
      }
      const postgres = isPostgresUrl(db);
      // Never print a URL's password.
      const shownDb = postgres ? describePostgresUrl(db) : db;
      // Any setup (the demo has no admin key) can move a manual clock: with a key of this run only.
      const clockKey = opts.manualClock ? newGatewayKey() : undefined;
      let gateway: Awaited<ReturnType<typeof startGateway>>;
      try {
        gateway = await startGateway({
          port,
          host: opts.host,
          db,
          config: opts.config,
          keepaliveMs,
          metrics: opts.metrics,
          onRequest: opts.quiet ? undefined : requestLinePrinter(opts.logFormat),
          connections,
          publicUrl: opts.publicUrl,
          trustedProxies: trustedProxies(opts.trustedProxy),
          clock: opts.manualClock ? "manual" : "real",
          autoAdvance: opts.autoAdvance,
          adminKeys: clockKey === undefined ? undefined : [clockKey],
          cassettes,
          cassettesFrom: "flags",
          captureBodies: opts.captureBodies === true,
          captureLimit,
          upstreamAnswerLimitBytes,
          jobLeaseMs,
          // The long-lived server keeps a new database's key in the OS keychain where one works.
          secretKeyStore: "auto",
        });
      } catch (err) {
        // Flags startGateway checks itself are still the command line's mistakes.
        if (err instanceof ConfigError && /^invalid (public URL|trusted proxy):/.test(err.message))
          throw new UsageError(err.message);
        if (
          err instanceof ConfigError ||
          err instanceof SecretKeyError ||
          err instanceof GatewayAlreadyRunning
        )
          throw new UserError(err.message);
        const code = (err as NodeJS.ErrnoException).code;
        if (postgres)
          throw new UserError(
            `cannot use the Postgres database ${shownDb}: ${(err as Error).message}${code ? ` (${code})` : ""}`,
          );
        if (db !== ":memory:" && !existsSync(dirname(resolve(db))))
          throw new UserError(`no such directory: ${dirname(db)} (for --db ${db})`);
        if (code === "EADDRINUSE")
          throw new UserError(`port ${port} is already in use; try --port 0`);
        if (code === "SQLITE_CANTOPEN") throw new UserError(`cannot open database ${db}`);
        const problem = databaseProblem(db, err);
        if (problem) throw problem;
        if (code === "ENOTFOUND" || code === "EAI_AGAIN" || code === "EADDRNOTAVAIL")
          throw new UsageError(
            `cannot listen on --host ${opts.host}: it is not an address of this machine (127.0.0.1 for this machine only, 0.0.0.0 for every interface)`,
          );
        if (code === "EACCES" || code === "EPERM") {
          // Not a crash: a port or a path this user may not use, which they can change.
          const { syscall, path } = err as NodeJS.ErrnoException;
          if (syscall === "listen")
            throw new UserError(
              `cannot listen on port ${port}: permission denied (ports below 1024 need privileges); try --port 8787, or --port 0 for a free one`,
            );
          throw new UserError(
            `cannot write ${path ?? db}: permission denied; run serve where this user may write (--db, --record), or fix the permissions`,
          );
        }
        const fault = storageFaultKind(err);
        if (fault === "full")
          throw new UserError(`cannot write ${db}: the disk is full; free space and start again`);
        if (fault === "failing")
          throw new UserError(
            `cannot write ${db}: the disk refuses writes (${(err as Error).message}); start it on a writable disk`,
          );
        throw err;
      }
      // Before the ready line: a script may signal us as soon as it reads it.
      let stopping = false;
      const stop = () => {
        if (stopping) {
          // A second signal: what is still in flight is cut now (and settles as it notices).
          void gateway.close();
          return;
        }
        stopping = true;
        // Shutdown waits on things that do not keep Node alive by themselves (an unreferenced
        // worker, say); this does, so the store is always closed before the process ends.
        const alive = setInterval(() => {}, 60_000);
        const { underWay, drained } = gateway.drain(drainTimeoutMs);
        if (underWay > 0 && drainTimeoutMs > 0)
          process.stderr.write(
            `gateway: stopping: finishing ${underWay === 1 ? "the request" : `${underWay} requests`} in flight (up to ${drainTimeoutMs} ms; Ctrl-C or SIGTERM again cuts ${underWay === 1 ? "it" : "them"} now)\n`,
          );
        drained
          .then(() => gateway.close())
          .then(
            () => process.exit(0),
            (err: Error) => {
              clearInterval(alive);
              process.stderr.write(`gateway: shutdown failed: ${err.name}: ${err.message}\n`);
              process.exit(1);
            },
          );
      };
      process.on("SIGINT", stop);
      process.on("SIGTERM", stop);
      // A stray rejection is a bug to report, not a reason to drop every client of the gateway.
      process.on("unhandledRejection", (reason) => {
        const what =
          reason instanceof Error ? `${reason.name}: ${reason.message}` : "a non-error value";
        process.stderr.write(`gateway: unhandled rejection (still serving): ${what}\n`);
      });
      const readyMs = Math.round(performance.now() - started);
      const exposed = !isLoopback(opts.host);
      const networkUrl = exposed ? reachableUrl(opts.host, gateway.port) : undefined;
      if (exposed) {
        const where = networkUrl ?? "(no network interface is up on this machine right now)";
        process.stderr.write(
          `gateway: warning: listening on ${opts.host}, so the dashboard and the API are reachable from the network: ${where}; keys are still needed, and an owner link opens the dashboard for whoever has it\n`,
        );
      }
      if (opts.json) {
        process.stdout.write(
          `${JSON.stringify({ url: gateway.url, port: gateway.port, demo_key: gateway.demoKey, owner_url: gateway.ownerUrl, ready_ms: readyMs, network_url: networkUrl, clock_admin_key: clockKey })}\n`,
        );
      } else {
        process.stdout.write(`gateway listening on ${gateway.url} (ready in ${readyMs} ms)\n`);
        if (gateway.ownerUrl)
          process.stdout.write(
            `owner dashboard (one-time link, opens a session): ${gateway.ownerUrl}\n`,
          );
        if (gateway.demoKey) {
          process.stdout.write(
            `demo key (shown once, store it now): ${gateway.demoKey}\n` +
              `try: curl ${gateway.url}/v1/chat/completions -H "Authorization: Bearer ${gateway.demoKey}" -H "content-type: application/json" -d '{"model":"mock-gpt","messages":[{"role":"user","content":"hello"}]}'\n`,
          );
        } else if (postgres) {
          process.stdout.write(
            "keys are stored only as hashes, so none is shown again; a new one: the owner dashboard, or POST /api/admin/accounts/{id}/keys with an admin key\n",
          );
        } else if (db !== ":memory:") {
          process.stdout.write(
            `keys are stored only as hashes, so none is shown again; a new one: ${cliCommand(`keys create --db ${shellWord(db)} --label NAME`)}\n`,
          );
        }
        if (clockKey) process.stdout.write(clockHint(gateway, clockKey, opts.autoAdvance));
      }
    });
}

/** How to move a `--manual-clock` serve's clock, with the admin key minted for this run. */
function clockHint(gateway: { url: string; clock: { now(): number } }, key: string, auto: boolean) {
  const moves = auto
    ? "it jumps by itself only when every request in flight waits on it (a free request's burst spacing; --no-auto-advance holds it)"
    : "it moves only when told (--no-auto-advance)";
  return (
    `manual clock at ${new Date(gateway.clock.now()).toISOString()}: ${moves}. Move it with this run's admin key (shown once, valid until this serve stops):\n` +
    `  curl -X POST ${gateway.url}/api/admin/clock -H "Authorization: Bearer ${key}" -H "content-type: application/json" -d '{"advance_ms":60000}'\n` +
    `  (or -d '{"set":"2030-01-02T00:00:00Z"}')\n`
  );
}

function isLoopback(host: string): boolean {
  return host === "localhost" || host === "::1" || host.startsWith("127.");
}

/**
 * Where other machines reach a server bound to `host`: the address itself, or for a wildcard the
 * first interface address that is not loopback (undefined when there is none).
 */
function reachableUrl(host: string, port: number): string | undefined {
  let address: string | undefined = host;
  if (host === "0.0.0.0" || host === "::") {
    const addresses = Object.values(networkInterfaces())
      .flat()
      .filter((a) => a !== undefined && !a.internal);
    address = (addresses.find((a) => a?.family === "IPv4") ?? addresses[0])?.address;
  }
  if (address === undefined) return undefined;
  return `http://${address.includes(":") ? `[${address}]` : address}:${port}`;
}

/** The path as one shell word, for a command line the user copies. */
function shellWord(path: string): string {
  return /^[\w./:@%+=,-]+$/.test(path) ? path : `'${path.replace(/'/g, "'\\''")}'`;
}

function parseInteger(value: string, flag: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0)
    throw new UsageError(`${flag} must be a non-negative integer, got "${value}"`);
  return n;
}

/** One of --record DIR, --replay DIR (with --record-missing): the cassettes option of startGateway. */
function cassetteFlags(opts: ServeOptions) {
  const timing: "recorded" | "none" = opts.replayTiming === "recorded" ? "recorded" : "none";
  if (opts.replayTiming !== timing)
    throw new UsageError(`--replay-timing must be recorded or none, got "${opts.replayTiming}"`);
  if (opts.record && opts.replay) throw new UsageError("use --record or --replay, not both");
  if (opts.recordMissing && !opts.replay)
    throw new UsageError("--record-missing goes with --replay <dir>");
  if (opts.record) return { dir: opts.record, mode: "record" as const, timing };
  if (opts.replay) {
    const mode = opts.recordMissing ? ("record-missing" as const) : ("replay" as const);
    return { dir: opts.replay, mode, timing };
  }
  return undefined;
}

/** The flags when given, else the environment's list: a flag is the nearer word. */
function trustedProxies(flags: string[]): string[] {
  if (flags.length > 0) return flags;
  return (process.env.GATEWAY_TRUSTED_PROXIES ?? "")
    .split(",")
    .map((address) => address.trim())
    .filter((address) => address !== "");
}
