import type { Command } from "commander";
import { UserError } from "./errors.js";

interface ServeOptions {
  port: string;
  host: string;
  db: string;
  config?: string;
  keepaliveMs: string;
  json?: boolean;
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
    .option("--db <file>", "SQLite database file (:memory: for a throwaway one)", "gateway.db")
    .option("-c, --config <file>", "JSON config to apply (upserted; see README)")
    .option(
      "--keepalive-ms <ms>",
      "SSE keepalive interval while a stream waits for its first token",
      "15000",
    )
    .option("--json", "print the ready line as JSON, for scripts")
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
  $ gateway serve --config ci.json --record cassettes     record real answers once
  $ gateway serve --config ci.json --replay cassettes     replay them offline in CI`,
    )
    .action(async (opts: ServeOptions) => {
      const started = performance.now();
      const port = parseInteger(opts.port, "--port");
      const keepaliveMs = parseInteger(opts.keepaliveMs, "--keepalive-ms");
      const cassettes = cassetteFlags(opts);
      const captureLimit =
        opts.captureLimit === undefined
          ? undefined
          : parseInteger(opts.captureLimit, "--capture-limit");
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
          cassettes,
          captureBodies: opts.captureBodies === true,
          captureLimit,
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

/** One of --record DIR, --replay DIR (with --record-missing): the cassettes option of startGateway. */
function cassetteFlags(opts: ServeOptions) {
  const timing: "recorded" | "none" = opts.replayTiming === "recorded" ? "recorded" : "none";
  if (opts.replayTiming !== timing)
    throw new UserError(`--replay-timing must be recorded or none, got "${opts.replayTiming}"`);
  if (opts.record && opts.replay) throw new UserError("use --record or --replay, not both");
  if (opts.recordMissing && !opts.replay)
    throw new UserError("--record-missing goes with --replay <dir>");
  if (opts.record) return { dir: opts.record, mode: "record" as const, timing };
  if (opts.replay) {
    const mode = opts.recordMissing ? ("record-missing" as const) : ("replay" as const);
    return { dir: opts.replay, mode, timing };
  }
  return undefined;
}
