import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { describe, expect, it } from "vitest";
import { type CliHome, saveLogin, spawnCli, useCliScratch } from "./support/cli.js";

/**
 * Every command that talks to a gateway, against one that takes the connection and then does not
 * answer in full: each ends on its own, within the bound docs/cli.md gives (GATEWAY_TIMEOUT_MS,
 * shortened here), with one line naming what did not come and what to do, and exit code 1.
 */

const { newHome, listen } = useCliScratch();

const KEY = "kn-test-standard-key-000000000000";

/** What the stand-in for a gateway does with each request. */
const silences: Record<string, (req: IncomingMessage, res: ServerResponse) => void> = {
  "takes the request and never answers": () => {},
  "sends its headers and never the body": (_req, res) => {
    res.writeHead(200, { "content-type": "application/json", "content-length": "200" });
    res.write('{"data":');
  },
  "answers a stream that stalls": (_req, res) => {
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.write("data: {}\n\n");
  },
};

/** Each command, as a user runs it against the gateway at `url`. */
function commands(url: string, home: (env?: NodeJS.ProcessEnv) => CliHome) {
  const withKey = () => home({ GATEWAY_API_KEY: KEY }).env;
  const loggedIn = () => {
    const h = home();
    saveLogin(h, { key: KEY, baseUrl: url, keyId: "key_login", accountId: "acct" });
    return h.env;
  };
  return [
    { args: ["login", "--no-browser", "--base-url", url], env: home().env },
    { args: ["whoami", "--base-url", url], env: withKey() },
    { args: ["keys", "list", "--base-url", url], env: withKey() },
    { args: ["keys", "create", "--label", "ci", "--base-url", url], env: withKey() },
    { args: ["keys", "revoke", "ci", "--base-url", url], env: withKey() },
    { args: ["mcp", "claude-code", "--base-url", url], env: withKey() },
    { args: ["logout"], env: loggedIn() },
  ];
}

describe("the CLI against a gateway that does not answer in full", () => {
  it.each(Object.keys(silences))(
    "a gateway that %s: every command ends with a line naming what timed out and the next step, exit code 1",
    async (silence) => {
      const server = createServer(silences[silence]!);
      const url = await listen(server);
      try {
        const runs = commands(url, newHome).map(({ args, env }) => ({
          args,
          run: spawnCli(args, { ...env, GATEWAY_TIMEOUT_MS: "700" }),
        }));
        for (const { args, run } of runs) {
          // Far past the bound: a command still running then waits on nothing but the server.
          const done = await run.exit(20_000);
          const said = `${args.join(" ")}: ${done.stderr}`;
          expect(done.code, said).toBe(1);
          const line = done.stderr.split("\n").find((l) => l.includes(url)) ?? "";
          expect(line, said).toMatch(
            silence === "takes the request and never answers"
              ? /did not answer (GET|POST|DELETE) \/api\/\S+ within 700 ms/
              : /sent the headers of its answer \(HTTP 200\) but not all of its body within 700 ms/,
          );
          expect(line, said).toContain("GATEWAY_TIMEOUT_MS");
          expect(line, said).toContain("gateway serve");
        }
      } finally {
        server.closeAllConnections();
      }
    },
    90_000,
  );

  it("a GATEWAY_TIMEOUT_MS that is no positive number of milliseconds is named, and nothing is sent", async () => {
    let asked = 0;
    const url = await listen(
      createServer((_req, res) => {
        asked++;
        res.end();
      }),
    );
    for (const value of ["0", "soon", "-5"]) {
      const done = await spawnCli(["whoami", "--base-url", url], {
        ...newHome({ GATEWAY_API_KEY: KEY }).env,
        GATEWAY_TIMEOUT_MS: value,
      }).exit();
      expect(done.code).toBe(1);
      expect(done.stderr).toContain(
        `GATEWAY_TIMEOUT_MS must be a whole number of milliseconds above 0, got "${value}"`,
      );
    }
    expect(asked).toBe(0);
  });
});
