import { execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { type CliHome, cliHome, killRunningClis, runCli, spawnCli } from "./support/cli.js";
import { LOGIN_KEY, type TestGateway, testGateway } from "./support/gateway.js";
import { mcpResponse } from "./support/mcp.js";

/**
 * What a developer who just found the gateway meets when they follow the README and the guides
 * as written: the commands the CLI prints work where it was run (through npx too), docs/cli.md
 * names every flag of every command, and what `gateway serve` prints is what the guides show.
 */

const root = join(import.meta.dirname, "..");
const bin = join(root, "bin", "gateway");
const read = (file: string) => readFileSync(join(root, file), "utf8");
/** A machine where the package is not installed globally. */
const noGlobal = { PATH: "/usr/bin:/bin" };

const dirs: string[] = [];
const tempDir = () => {
  const dir = mkdtempSync(join(tmpdir(), "gateway-newcomer-"));
  dirs.push(dir);
  return dir;
};
afterAll(() => {
  killRunningClis();
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function run(
  command: string,
  args: string[],
  cwd: string,
  env: NodeJS.ProcessEnv,
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((done) => {
    execFile(command, args, { cwd, env, timeout: 90_000 }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === "number" ? err.code : 1) : 0;
      done({ code, stdout, stderr });
    });
  });
}

describe("run through npx or an npm script, the CLI names itself as the user runs it", () => {
  let home: CliHome;
  beforeAll(() => {
    home = cliHome({
      // No global install; npm from its own cache of this run, with no registry and no notices.
      PATH: `${process.env.PATH}`
        .split(":")
        .filter((p) => !/gateway/.test(p))
        .join(":"),
      npm_config_cache: join(tempDir(), "npm-cache"),
      npm_config_offline: "true",
      npm_config_update_notifier: "false",
      npm_config_fund: "false",
    });
  });
  afterAll(() => home.remove());

  const notLoggedIn = "gateway: not logged in; run `npx gateway login` (or set GATEWAY_API_KEY)";

  it("`npx gateway keys list` in the clone (README: npm ci && npx gateway serve)", async () => {
    const done = await run("npx", ["--yes", "gateway", "keys", "list"], root, home.env);
    expect(done.code).toBe(1);
    expect(done.stderr).toContain(notLoggedIn);
  }, 120_000);

  it("`npx gateway keys list` in a project that depends on the package", async () => {
    const project = tempDir();
    writeFileSync(join(project, "package.json"), '{"name":"app","private":true}');
    mkdirSync(join(project, "node_modules", ".bin"), { recursive: true });
    symlinkSync(bin, join(project, "node_modules", ".bin", "gateway"));
    const done = await run("npx", ["gateway", "keys", "list"], project, home.env);
    expect(done.code).toBe(1);
    expect(done.stderr).toContain(notLoggedIn);
  }, 120_000);

  it("`gateway keys list` in a project's npm script", async () => {
    const project = tempDir();
    writeFileSync(
      join(project, "package.json"),
      '{"name":"app","private":true,"scripts":{"keys":"gateway keys list"}}',
    );
    mkdirSync(join(project, "node_modules", ".bin"), { recursive: true });
    symlinkSync(bin, join(project, "node_modules", ".bin", "gateway"));
    const done = await run("npm", ["run", "--silent", "keys"], project, home.env);
    expect(done.code).not.toBe(0);
    expect(done.stderr).toContain(notLoggedIn);
  }, 120_000);
});

describe("the commands the CLI prints, in a clone without a global install", () => {
  let gw: TestGateway | undefined;
  afterEach(async () => {
    await gw?.close();
    gw = undefined;
  });

  it("gateway mcp's note says how to revoke a key with the CLI as run here", async () => {
    gw = await testGateway();
    const home = cliHome();
    try {
      const done = await runCli(
        ["mcp", "codex", "--base-url", gw.url],
        { ...home.env, ...noGlobal, GATEWAY_API_KEY: LOGIN_KEY },
        30_000,
        root,
      );
      expect(done.code, done.stderr).toBe(0);
      expect(done.stderr).toContain("Revoke one with `npx gateway keys revoke <label>`.");
    } finally {
      home.remove();
    }
  }, 60_000);
});

// ---- every command's flags --------------------------------------------------------------------

interface Command {
  /** `keys create`, and its aliases: `keys list` and `keys ls`. */
  names: string[];
  help: string;
}

/** The section of a help text under `title:`, up to the next blank line. */
function helpSection(help: string, title: string): string[] {
  const lines = help.split("\n");
  const start = lines.indexOf(`${title}:`);
  if (start < 0) return [];
  const end = lines.findIndex((l, i) => i > start && l.trim() === "");
  return lines.slice(start + 1, end < 0 ? undefined : end);
}

/** Every command with no subcommands, from `gateway --help` down, as its help shows it. */
async function leafCommands(env: NodeJS.ProcessEnv): Promise<Command[]> {
  const found: Command[] = [];
  const visit = async (words: string[], names: string[]) => {
    const done = await runCli([...words, "--help"], env, 30_000, root);
    expect(done.code, done.stderr).toBe(0);
    const subcommands = helpSection(done.stdout, "Commands")
      .map((line) => /^ {2}(\S+)/.exec(line)?.[1])
      .filter((entry): entry is string => entry !== undefined && entry !== "help");
    if (subcommands.length === 0 && words.length > 0) {
      found.push({ names, help: done.stdout });
      return;
    }
    for (const entry of subcommands) {
      const [name, ...aliases] = entry.split("|");
      await visit(
        [...words, name],
        [name, ...aliases].map((n) => [...words, n].join(" ")),
      );
    }
  };
  await visit([], []);
  return found;
}

function flagsOfHelp(help: string): string[] {
  const flags: string[] = [];
  for (const line of helpSection(help, "Options")) {
    const m = /^ {2}(?:(-[a-zA-Z]), )?(--[a-z][\w-]*)/.exec(line);
    if (!m) continue;
    if (m[2] === "--help" || m[2] === "--version") continue;
    if (m[1]) flags.push(m[1]);
    flags.push(m[2]);
  }
  return flags.sort();
}

/** The flags a table cell names: each code span's words that start with a dash. */
function flagsOfCell(cell: string): string[] {
  return [...cell.matchAll(/`([^`]+)`/g)].flatMap((m) =>
    m[1].split(/,\s*|\s+/).filter((word) => /^--?[a-zA-Z]/.test(word)),
  );
}

/** The `## ` section of a markdown file under this heading, up to the next one. */
function sectionOf(text: string, heading: string): string {
  const start = text.indexOf(`\n## ${heading}\n`);
  if (start < 0) throw new Error(`no section "## ${heading}"`);
  const end = text.indexOf("\n## ", start + 1);
  return text.slice(start, end < 0 ? undefined : end);
}

describe("docs/cli.md and the CLI's --help", () => {
  let commands: Command[];
  beforeAll(async () => {
    const home = cliHome(noGlobal);
    try {
      commands = await leafCommands(home.env);
    } finally {
      home.remove();
    }
  }, 120_000);

  it("name the same commands, each with the same flags", () => {
    const cliMd = read("docs/cli.md");
    const table = sectionOf(cliMd, "Every command and its flags");
    const documented = new Map<string, string[]>();
    for (const row of table.matchAll(/^\| (`gateway [^|]*) \| (.*) \|$/gm)) {
      const names = [...row[1].matchAll(/`gateway ([^`]+)`/g)].map((m) =>
        m[1]
          .split(" ")
          .filter((w) => /^[a-z][a-z-]*$/.test(w))
          .join(" "),
      );
      // serve's flags are the table of its own section.
      const flags = row[2].includes("the table in")
        ? [...sectionOf(cliMd, "`gateway serve`").matchAll(/^\| (`-(?:\\\||[^|])*) \|/gm)].flatMap(
            (m) => flagsOfCell(m[1]),
          )
        : flagsOfCell(row[2]);
      for (const name of names) documented.set(name, [...new Set(flags)].sort());
    }
    expect(commands.length).toBeGreaterThan(8);
    const actual = new Map<string, string[]>();
    for (const command of commands)
      for (const name of command.names) actual.set(name, flagsOfHelp(command.help));
    expect(Object.fromEntries(documented)).toEqual(Object.fromEntries(actual));
  });

  it("every example in --help runs the CLI as it is run here (npx gateway in a clone)", () => {
    const wrong: string[] = [];
    for (const command of commands) {
      for (const line of helpSection(command.help, "Examples")) {
        // `gateway` where a shell runs a command: after `$ `, an assignment, `$(`.
        if (/(^|[\s(])gateway(?= |$)/.test(line.replaceAll("npx gateway", ""))) wrong.push(line);
      }
    }
    expect(commands.some((c) => helpSection(c.help, "Examples").length > 0)).toBe(true);
    expect(wrong).toEqual([]);
  });
});

// ---- what serve prints, as the guides show it --------------------------------------------------

/** The lines of the first fenced block of `file` that has a line starting with `start`. */
function shownBlock(file: string, start: string): string[] {
  for (const m of read(file).matchAll(/^```[^\n]*\n([\s\S]*?)^```$/gm)) {
    const lines = m[1].trimEnd().split("\n");
    const at = lines.findIndex((l) => l.startsWith(start));
    if (at >= 0) return lines;
  }
  throw new Error(`${file}: no block with a line starting "${start}"`);
}

/** What differs from run to run made alike: times, durations, amounts, keys, ids, the port. */
function shape(line: string): string {
  return line
    .replace(/http:\/\/127\.0\.0\.1:\d+/g, "http://127.0.0.1:8787")
    .replace(/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z/g, "<iso time>")
    .replace(/^\d\d:\d\d:\d\d\b/, "<time>")
    .replace(/\b\d+(\.\d+)? ms\b/g, "<n> ms")
    .replace(/IDR \d+\.\d+/g, "IDR <n>")
    .replace(/\b(kn-|req_|file_)[\w.-]+/g, "$1<id>")
    .replace(/token=[\w.-]+/g, "token=<token>");
}

describe("what gateway serve prints", () => {
  it("is docs/cli.md's sample: the ready lines, then a line per request", async () => {
    const dir = tempDir();
    const home = cliHome();
    const serve = spawnCli(
      ["serve", "--port", "0", "--db", join(dir, "gateway.db")],
      home.env,
      dir,
    );
    try {
      const [, url, key] = await serve.waitFor(
        /try: curl (\S+)\/v1\/\S+ -H "Authorization: Bearer (\S+)"/,
        30_000,
      );
      const ask = (model: string, extra: object = {}, auth = true) =>
        fetch(`${url}/v1/chat/completions`, {
          method: "POST",
          headers: {
            ...(auth ? { authorization: `Bearer ${key}` } : {}),
            "content-type": "application/json",
          },
          body: JSON.stringify({ model, messages: [{ role: "user", content: "hello" }], ...extra }),
        }).then(async (res) => ({ status: res.status, body: await res.text() }));
      expect((await ask("mock-gpt")).status).toBe(200);
      expect((await ask("mock-gpt", { stream: true })).body).toContain("[DONE]");
      expect((await ask("mock-flaky")).status).toBe(503);
      expect((await ask("mock-gpt", {}, false)).status).toBe(401);
      await serve.waitFor(/ 401 .*\n/);
      const printed = serve.stdout().trimEnd().split("\n").map(shape);
      expect(printed).toEqual(shownBlock("docs/cli.md", "gateway listening on").map(shape));

      // docs/mcp.md: an MCP tool call, served as /v1 requests on a key labelled for the agent.
      const made = await runCli(
        ["keys", "create", "--db", join(dir, "gateway.db"), "--label", "claude-code-mcp"],
        home.env,
        30_000,
        dir,
      );
      expect(made.code, made.stderr).toBe(0);
      const call = await fetch(`${url}/mcp`, {
        method: "POST",
        headers: {
          authorization: `Bearer ${made.stdout.trim()}`,
          "content-type": "application/json",
          accept: "application/json, text/event-stream",
        },
        body: JSON.stringify({
          jsonrpc: "2.0",
          id: 1,
          method: "tools/call",
          params: {
            name: "generate_image",
            arguments: { model: "mock-image", prompt: "a lighthouse at dusk", size: "256x256" },
          },
        }),
      });
      const answer = await mcpResponse<{ result: { isError?: boolean } }>(call);
      expect(answer.result.isError).toBeUndefined();
      await serve.waitFor(/ POST \/mcp .*\n/);
      const shown = shownBlock("docs/mcp.md", "10:42:07").map(shape);
      const lines = serve.stdout().trimEnd().split("\n").map(shape);
      expect(lines.slice(-shown.length)).toEqual(shown);
    } finally {
      serve.child.kill("SIGTERM");
      await serve.exit(30_000);
      home.remove();
    }
  }, 90_000);

  it("with --manual-clock and --log-format json: test-kit.md's hint, and cli.md's fields", async () => {
    const home = cliHome();
    const serve = spawnCli(
      ["serve", "--port", "0", "--db", ":memory:", "--manual-clock", "--log-format", "json"],
      home.env,
      tempDir(),
    );
    try {
      const [, url, key] = await serve.waitFor(
        /try: curl (\S+)\/v1\/\S+ -H "Authorization: Bearer (\S+)"/,
        30_000,
      );
      await serve.waitFor(/\(or -d .*\n/);
      const lines = serve.stdout().trimEnd().split("\n");
      const hint = lines.slice(lines.findIndex((l) => l.startsWith("manual clock at")));
      expect(hint.map(shape)).toEqual(shownBlock("docs/test-kit.md", "manual clock at").map(shape));

      const res = await fetch(`${url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "mock-gpt", messages: [{ role: "user", content: "hi" }] }),
      });
      expect(res.status).toBe(200);
      await res.text();
      const [line] = await serve.waitFor(/^\{.*\}$/m);
      const fields = /one object per line \(`([^`]+)`\)/.exec(read("docs/cli.md"))?.[1];
      expect(fields, "cli.md lists --log-format json's fields").toBeDefined();
      expect(Object.keys(JSON.parse(line) as object)).toEqual(fields!.split(", "));
    } finally {
      serve.child.kill("SIGTERM");
      await serve.exit(30_000);
      home.remove();
    }
  }, 90_000);
});
