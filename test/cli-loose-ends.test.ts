import { execFile } from "node:child_process";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { runCli, useCliScratch } from "./support/cli.js";
import { LOGIN_KEY } from "./support/gateway.js";

/**
 * What was left after the passes over the built CLI (`bin/gateway`, `npm run build` first): an
 * echoed label that drove the terminal, a spinner that drew on a dumb one, a poll interval that
 * outwaited the login, and an option given before its command with no hint.
 */

const bin = join(import.meta.dirname, "..", "bin", "gateway");
const { newHome, emptyDir, listen } = useCliScratch();

async function serving(
  answer: (req: IncomingMessage, res: ServerResponse, url: string) => void,
): Promise<string> {
  let url = "";
  const server = createServer((req, res) => answer(req, res, url));
  url = await listen(server);
  return url;
}

const json = (res: ServerResponse, status: number, body: unknown) =>
  res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));

/**
 * A gateway whose device flow hands out a code for `expiresIn` seconds at `interval`, then
 * answers every poll with `poll`.
 */
function deviceFlow(expiresIn: number, interval: number, poll: Record<string, unknown>) {
  return serving((req, res, url) => {
    if (req.url === "/api/auth/device/code")
      json(res, 200, {
        device_code: "dc",
        user_code: "BCDF-GHJK",
        verification_uri: `${url}/dashboard/device`,
        verification_uri_complete: `${url}/dashboard/device?user_code=BCDF-GHJK`,
        expires_in: expiresIn,
        interval,
      });
    else if (req.url === "/api/auth/device/token") json(res, 400, poll);
    else json(res, 200, {});
  });
}

/** `command` (words, quoted here) in a pseudo-terminal, as a user's shell runs it. */
function inTerminal(
  command: string[],
  env: NodeJS.ProcessEnv,
  cwd: string,
): Promise<{ code: number; output: string }> {
  const line = command.map((word) => `'${word.replace(/'/g, "'\\''")}'`).join(" ");
  return new Promise((resolve) => {
    execFile(
      "script",
      ["-qec", line, "/dev/null"],
      { env, cwd, timeout: 20_000, killSignal: "SIGKILL" },
      (err, stdout) =>
        resolve({
          code: err ? Number((err as { code?: number }).code ?? 1) : 0,
          output: stdout,
        }),
    );
  });
}

describe("gateway mcp shows what the server echoed as plain one-line text", () => {
  it("a key id and label with an escape sequence and a line break reach the terminal as U+FFFD", async () => {
    const url = await serving((req, res) => {
      if (req.method === "POST" && req.url === "/api/keys")
        json(res, 201, {
          id: "key_\u001b[31mred",
          key: "kn-echoed-key-0123456789abcdef",
          label: "claude-code-mcp\u001b[2J\nrm -rf",
          kind: "standard",
          parent_key_id: "kl",
          created_at: 1,
        });
      else json(res, 404, { error: { message: "no", code: null } });
    });
    const done = await runCli(
      ["mcp", "claude-code", "--base-url", url],
      newHome({ GATEWAY_API_KEY: LOGIN_KEY }).env,
    );
    expect(done.code, done.stderr).toBe(0);
    expect(done.stdout + done.stderr).not.toContain("\u001b");
    expect(done.stderr).toContain('key_\uFFFD[31mred "claude-code-mcp\uFFFD[2J\uFFFDrm -rf"');
    expect(done.stderr.split("\n").filter(Boolean)).toHaveLength(1);
    expect(done.stdout).toContain(
      '--header "Authorization: Bearer kn-echoed-key-0123456789abcdef"',
    );
  });

  it("a key with a control character is no gateway's answer, and is not pasted into a snippet", async () => {
    const url = await serving((_req, res) =>
      json(res, 201, {
        id: "key_1",
        key: "kn-abc\u001b]0;owned\u0007",
        label: "claude-code-mcp",
        kind: "standard",
        parent_key_id: "kl",
        created_at: 1,
      }),
    );
    const done = await runCli(
      ["mcp", "claude-code", "--base-url", url],
      newHome({ GATEWAY_API_KEY: LOGIN_KEY }).env,
    );
    expect(done.code).toBe(1);
    expect(done.stdout).toBe("");
    expect(done.stderr).toBe(
      `gateway: the gateway at ${url} sent an unexpected response (HTTP 201); is the CLI the same version as the server?\n`,
    );
  });
});

/** How login ends when the code ran out; the command is as the CLI is run from that directory. */
const expiredLine = /^gateway: the code expired before it was approved; run `.*login` again$/;

describe("gateway login's wait for approval", () => {
  it("under TERM=dumb in a terminal: plain lines, no cursor movement or colour", async () => {
    const url = await deviceFlow(1, 0.2, { error: "authorization_pending" });
    const home = newHome({ TERM: "dumb" });
    delete home.env.NO_COLOR;
    const ran = await inTerminal(
      [process.execPath, bin, "login", "--no-browser", "--base-url", url],
      home.env,
      emptyDir(),
    );
    expect(ran.code, ran.output).toBe(1);
    expect(ran.output).not.toContain("\u001b");
    const lines = ran.output.split("\r\n");
    expect(lines.filter((line) => line.startsWith("Waiting for approval"))).toEqual([
      "Waiting for approval in the browser (code expires in 0:01)...",
    ]);
    expect(lines.filter((line) => expiredLine.test(line))).toHaveLength(1);
  });

  it("a slow_down interval past the code's life ends at the code's deadline with the timeout message", async () => {
    const url = await deviceFlow(2, 0.01, { error: "slow_down", interval: 1_000_000 });
    const done = await runCli(
      ["login", "--no-browser", "--base-url", url],
      newHome().env,
      15_000,
      emptyDir(),
    );
    expect(done.code, done.stderr).toBe(1);
    expect(done.stderr).toContain("The gateway asked to poll slower: every 1000000 s now.\n");
    expect(done.stderr.split("\n").filter(Boolean).at(-1)).toMatch(expiredLine);
  });

  it("a first interval past the code's life does too", async () => {
    const url = await deviceFlow(1, 1_000_000, { error: "authorization_pending" });
    const done = await runCli(
      ["login", "--no-browser", "--base-url", url],
      newHome().env,
      15_000,
      emptyDir(),
    );
    expect(done.code, done.stderr).toBe(1);
    expect(done.stderr.split("\n").filter(Boolean).at(-1)).toMatch(expiredLine);
  });
});

describe("an option given before its command", () => {
  it("is named with the command that takes it, at the top and in every group", async () => {
    const home = newHome();
    const cases: [string[], string][] = [
      [["--prot", "8080"], "unknown option '--prot' (did you mean `npx gateway serve --port`?)"],
      [["-p", "8080"], "unknown option '-p' (did you mean `npx gateway serve -p`?)"],
      [
        ["keys", "--label", "ci"],
        "unknown option '--label' (did you mean `npx gateway keys create --label`?)",
      ],
      [
        ["keys", "--lable=ci"],
        "unknown option '--lable=ci' (did you mean `npx gateway keys create --label`?)",
      ],
      [
        ["secrets", "--db", "gateway.db"],
        "unknown option '--db' (did you mean `npx gateway secrets rotate --db`?)",
      ],
      [
        ["--profle", "staging"],
        "unknown option '--profle' (did you mean --profile after one of login, logout, whoami, mcp, keys create, keys list, keys revoke?)",
      ],
      // Still the command's own options first, and nothing made up for a name nobody takes.
      [["serve", "--prot", "8080"], "unknown option '--prot' (did you mean --port?)"],
      [["--nosuch"], "unknown option '--nosuch'"],
    ];
    for (const [args, line] of cases) {
      const done = await runCli(args, home.env);
      expect(done.stdout, args.join(" ")).toBe("");
      expect(done.stderr, args.join(" ")).toBe(`gateway: ${line}\n`);
      expect(done.code, args.join(" ")).toBe(2);
    }
  });
});
