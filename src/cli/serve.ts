import type { Command } from "commander";
import { defaultConnectionLimits } from "../server/http/connection-guards.js";
import { UserError } from "./errors.js";

interface ServeOptions {
  port: string;
  host: string;
  db: string;
  config?: string;
  keepaliveMs: string;
  headersTimeoutMs: string;
  requestTimeoutMs: string;
  keepAliveTimeoutMs: string;
  maxConnectionsPerIp: string;
  publicUrl?: string;
  upstreamAnswerLimitMb?: string;
  json?: boolean;
}

export function registerServe(program: Command): void {
  program
    .command("serve")
    .description(
      "Run the gateway on this machine (SQLite; a built-in mock provider answers offline)",
    )
    .option("-p, --port <port>", "port to listen on (0 picks a free one)", "8787")
    .option("--host <host>", "interface to bind", "127.0.0.1")
    .option("--db <file>", "SQLite database file (:memory: for a throwaway one)", "gateway.db")
    .option("-c, --config <file>", "JSON config to apply (upserted; see README)")
    .option(
      "--keepalive-ms <ms>",
      "SSE keepalive interval while a stream waits for its first token",
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
      "--max-connections-per-ip <n>",
      "open connections one client address may hold (0: no cap)",
      String(defaultConnectionLimits.maxConnectionsPerIp),
    )
    .option(
      "--public-url <url>",
      "the URL browsers reach the gateway at, when it is not the listening address (dashboard origin checks, owner link)",
    )
    .option(
      "--upstream-answer-limit-mb <mb>",
      "largest whole answer (JSON, audio) read from a provider, default 32; a larger one fails with 503",
    )
    .option("--json", "print the ready line as JSON, for scripts")
    .addHelpText(
      "after",
      `
Examples:
  $ gateway serve                         demo setup in ./gateway.db, prints a key once
  $ gateway serve --port 0 --json         pick a free port; print {"url":...} when ready
  $ gateway serve --config gateway.json   providers, models, routes and accounts from a file`,
    )
    .action(async (opts: ServeOptions) => {
      const started = performance.now();
      const port = parseInteger(opts.port, "--port");
      const keepaliveMs = parseInteger(opts.keepaliveMs, "--keepalive-ms");
      const connections = {
        headersTimeoutMs: parseInteger(opts.headersTimeoutMs, "--headers-timeout-ms"),
        requestTimeoutMs: parseInteger(opts.requestTimeoutMs, "--request-timeout-ms"),
        keepAliveTimeoutMs: parseInteger(opts.keepAliveTimeoutMs, "--keep-alive-timeout-ms"),
        maxConnectionsPerIp: parseInteger(opts.maxConnectionsPerIp, "--max-connections-per-ip"),
      };
      const upstreamAnswerLimitBytes =
        opts.upstreamAnswerLimitMb === undefined
          ? undefined
          : parseInteger(opts.upstreamAnswerLimitMb, "--upstream-answer-limit-mb") * 1024 * 1024;
      if (
        connections.requestTimeoutMs > 0 &&
        connections.headersTimeoutMs > connections.requestTimeoutMs
      )
        throw new UserError("--headers-timeout-ms cannot be longer than --request-timeout-ms");
      // Loaded here, not at the top: the client commands should not pay for the server's modules.
      const { startGateway } = await import("../server/gateway.js");
      const { ConfigError } = await import("../server/config/load.js");
      let gateway: Awaited<ReturnType<typeof startGateway>>;
      try {
        gateway = await startGateway({
          port,
          host: opts.host,
          db: opts.db,
          config: opts.config,
          keepaliveMs,
          connections,
          publicUrl: opts.publicUrl,
          upstreamAnswerLimitBytes,
        });
      } catch (err) {
        if (err instanceof ConfigError) throw new UserError(err.message);
        const code = (err as NodeJS.ErrnoException).code;
        if (code === "EADDRINUSE")
          throw new UserError(`port ${port} is already in use; try --port 0`);
        if (code === "SQLITE_CANTOPEN") throw new UserError(`cannot open database ${opts.db}`);
        throw err;
      }
      // Before the ready line: a script may signal us as soon as it reads it.
      const stop = () => {
        // Shutdown waits on things that do not keep Node alive by themselves (an unreferenced
        // worker, say); this does, so the store is always closed before the process ends.
        const alive = setInterval(() => {}, 60_000);
        gateway.close().then(
          () => process.exit(0),
          (err: Error) => {
            clearInterval(alive);
            process.stderr.write(`gateway: shutdown failed: ${err.name}: ${err.message}\n`);
            process.exit(1);
          },
        );
      };
      process.once("SIGINT", stop);
      process.once("SIGTERM", stop);
      // A stray rejection is a bug to report, not a reason to drop every client of the gateway.
      process.on("unhandledRejection", (reason) => {
        const what =
          reason instanceof Error ? `${reason.name}: ${reason.message}` : "a non-error value";
        process.stderr.write(`gateway: unhandled rejection (still serving): ${what}\n`);
      });
      const readyMs = Math.round(performance.now() - started);
      if (opts.json) {
        process.stdout.write(
          `${JSON.stringify({ url: gateway.url, port: gateway.port, demo_key: gateway.demoKey, owner_url: gateway.ownerUrl, ready_ms: readyMs })}\n`,
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
        }
      }
    });
}

function parseInteger(value: string, flag: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0)
    throw new UserError(`${flag} must be a non-negative integer, got "${value}"`);
  return n;
}
