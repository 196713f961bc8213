import { execFile } from "node:child_process";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ownerSession, runCli, saveLogin, useCliScratch } from "./support/cli.js";
import {
  backends,
  gatewayOn,
  LOGIN_KEY,
  post,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";

/**
 * What a developer met after the first passes over the built CLI (`bin/gateway`, `npm run build`
 * first): per-tool keys that looked like any other key, a login that printed what a server sent as
 * it came, profile names no hint can carry, a help that claimed too much or showed the wrong page.
 */

// A new home keeps GATEWAY_SECRET_KEY: the gateways this file starts in-process were sealed with
// it, when the Postgres suite set it.
const { newHome, emptyDir, listen } = useCliScratch();

/** A finished CLI run that failed as docs/cli.md says a mistake fails: one line, this exit code. */
function oneLine(done: { code: number | null; stdout: string; stderr: string }, code: 1 | 2) {
  expect(done.stderr).not.toMatch(/unexpected error|please report/i);
  expect(done.stderr, done.stderr).toMatch(/^gateway: [^\n]*\n$/);
  expect(done.code, done.stderr).toBe(code);
  expect(done.stdout).toBe("");
  return done.stderr.trim();
}

/** A server that answers each request with `answer`, counting what it was asked. */
async function serving(
  answer: (req: IncomingMessage, res: ServerResponse) => void,
): Promise<{ url: string; asked: string[] }> {
  const asked: string[] = [];
  const server = createServer((req, res) => {
    asked.push(`${req.method} ${req.url}`);
    answer(req, res);
  });
  return { url: await listen(server), asked };
}

const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

interface KeyView {
  id: string;
  kind: string;
  parent_key_id: string | null;
}

describe.each(backends)(
  "per-tool keys are told apart from the account's other keys (%s)",
  (backend) => {
    let gw: TestGateway;
    beforeAll(async () => {
      gw = await gatewayOn(backend);
    });
    afterAll(() => gw?.close());

    it("/api/keys, /api/dashboard/keys, the create answers and whoami carry parent_key_id: the login key that minted it, else null", async () => {
      const minted = await post(gw, "/api/keys", { label: "editor" }, bearer(LOGIN_KEY));
      expect(minted.status).toBe(201);
      const tool = (await minted.json()) as KeyView & { key: string };
      expect(tool).toMatchObject({ kind: "standard", parent_key_id: "kl" });

      const listed = (await (
        await fetch(`${gw.url}/api/keys`, { headers: bearer(LOGIN_KEY) })
      ).json()) as { data: KeyView[] };
      expect(listed.data.find((k) => k.id === tool.id)).toMatchObject({
        kind: "standard",
        parent_key_id: "kl",
      });

      const owner = await ownerSession(gw);
      const dashboard = (await (
        await fetch(`${gw.url}/api/dashboard/keys`, { headers: { cookie: owner.cookie } })
      ).json()) as { data: KeyView[] };
      const byId = new Map(dashboard.data.map((k) => [k.id, k]));
      expect(byId.get(tool.id)).toMatchObject({ kind: "standard", parent_key_id: "kl" });
      // The config's keys and the login key itself are no login's per-tool keys.
      expect(byId.get("k1")).toMatchObject({ kind: "standard", parent_key_id: null });
      expect(byId.get("ks")).toMatchObject({ kind: "shared", parent_key_id: null });
      expect(byId.get("kl")).toMatchObject({ kind: "login", parent_key_id: null });

      const me = await (
        await fetch(`${gw.url}/api/auth/whoami`, { headers: bearer(tool.key) })
      ).json();
      expect(me).toMatchObject({ key_id: tool.id, kind: "standard", parent_key_id: "kl" });
    });
  },
);

describe("gateway keys create, list and whoami name a login's keys per-tool", () => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await testGateway();
  });
  afterAll(() => gw?.close());

  it("in the table, the notes and --json; a key made from the database file stays standard", async () => {
    const home = newHome();
    saveLogin(home, { key: LOGIN_KEY, baseUrl: gw.url, keyId: "kl", accountId: "acct" });

    const editor = await runCli(["keys", "create", "--label", "editor"], home.env);
    expect(editor.code, editor.stderr).toBe(0);
    expect(editor.stderr).toMatch(/^Created per-tool key key_\S+ "editor"\./);
    const shared = await runCli(
      ["keys", "create", "--label", "team", "--shared", "--json"],
      home.env,
    );
    expect(shared.code, shared.stderr).toBe(0);
    const team = JSON.parse(shared.stdout) as KeyView & { key: string };
    expect(team).toMatchObject({ kind: "shared", parent_key_id: "kl" });

    const table = await runCli(["keys", "list"], home.env);
    expect(table.code, table.stderr).toBe(0);
    const kindOf = (label: string) =>
      table.stdout
        .split("\n")
        .find((line) => line.includes(` ${label} `))
        ?.split(/ {2,}/)[2];
    expect(kindOf("editor")).toBe("per-tool");
    expect(kindOf("team")).toBe("per-tool, shared");

    const json = await runCli(["keys", "list", "--json"], home.env);
    const data = (JSON.parse(json.stdout) as { data: KeyView[] }).data;
    expect(data.map((k) => [k.kind, k.parent_key_id])).toEqual([
      ["standard", "kl"],
      ["shared", "kl"],
    ]);

    const asTool = await runCli(["whoami"], {
      ...home.env,
      GATEWAY_API_KEY: team.key,
      GATEWAY_BASE_URL: gw.url,
    });
    expect(asTool.code, asTool.stderr).toBe(0);
    expect(asTool.stdout).toContain(
      `key:       ${team.id} (${team.key.slice(0, 7)}..., per-tool, shared, "team")`,
    );
    const asToolJson = await runCli(["whoami", "--json"], {
      ...home.env,
      GATEWAY_API_KEY: team.key,
      GATEWAY_BASE_URL: gw.url,
    });
    expect(JSON.parse(asToolJson.stdout)).toMatchObject({ kind: "shared", parent_key_id: "kl" });

    const offline = await runCli(
      ["keys", "create", "--db", gw.dbPath, "--label", "app", "--json"],
      newHome().env,
    );
    expect(offline.code, offline.stderr).toBe(0);
    expect(JSON.parse(offline.stdout)).toMatchObject({ kind: "standard", parent_key_id: null });
  });

  it("whoami shows the label of the key in use as one line, with no terminal sequence of its own", async () => {
    const made = await post(gw, "/api/keys", { label: "ci\u001b[2J\nrm" }, bearer(LOGIN_KEY));
    const { key } = (await made.json()) as { key: string };
    const done = await runCli(["whoami"], {
      ...newHome().env,
      GATEWAY_API_KEY: key,
      GATEWAY_BASE_URL: gw.url,
    });
    expect(done.code, done.stderr).toBe(0);
    expect(done.stdout).not.toContain("\u001b");
    expect(done.stdout).toContain('"ci\uFFFD[2J\uFFFDrm")');
    expect(done.stdout.split("\n")).toHaveLength(5);
  });
});

/** A gateway whose device flow hands out a code, then answers every poll with `poll`. */
async function deviceFlow(poll: { status: number; type: string; body: string }) {
  const server = await serving((req, res) => {
    if (req.url === "/api/auth/device/code") {
      res.writeHead(200, { "content-type": "application/json" }).end(
        JSON.stringify({
          device_code: "dc",
          user_code: "BCDF-GHJK",
          verification_uri: `${server.url}/dashboard/device`,
          verification_uri_complete: `${server.url}/dashboard/device?user_code=BCDF-GHJK`,
          expires_in: 60,
          interval: 0.01,
        }),
      );
    } else if (req.url === "/api/auth/device/token") {
      res.writeHead(poll.status, { "content-type": poll.type }).end(poll.body);
    } else res.writeHead(200, { "content-type": "application/json" }).end("{}");
  });
  return server;
}

/** `gateway login` against `url` until it gives up: its last line on stderr. */
async function loginEnds(
  url: string,
): Promise<{ code: number | null; last: string; stderr: string }> {
  const done = await runCli(
    ["login", "--no-browser", "--base-url", url],
    newHome().env,
    15_000,
    emptyDir(),
  );
  const lines = done.stderr.split("\n").filter(Boolean);
  return { code: done.code, last: lines.at(-1) ?? "", stderr: done.stderr };
}

describe("gateway login: what a server answered to a poll is shown as one line", () => {
  it("an error RFC 8628 does not name: control characters replaced, a page on one line, cut short", async () => {
    const page = `<!doctype html>\n<html>\n<body>\n${"<p>sorry</p>\n".repeat(50)}</body>\n</html>`;
    const gateway = await deviceFlow({
      status: 400,
      type: "application/json",
      body: JSON.stringify({
        error: `server_exploded\u001b[2J\r\n${page}`,
        error_description: "first line\nsecond \u001b[31mred\u001b[0m",
      }),
    });
    const ended = await loginEnds(gateway.url);
    expect(ended.code, ended.stderr).toBe(1);
    expect(ended.stderr).not.toContain("\u001b");
    expect(ended.stderr).not.toContain("\r");
    expect(ended.last).toMatch(
      /^gateway: the gateway ended the login with "server_exploded\uFFFD\[2J <!doctype html> <html> <body> <p>sorry<\/p> .{0,60}\.\.\.": first line second \uFFFD\[31mred\uFFFD\[0m; run `.*login` again$/,
    );
    expect(ended.last.length).toBeLessThan(400);
  });

  it("a 400 that is no device-flow answer says what it said, not just Bad Request", async () => {
    const gateway = await deviceFlow({
      status: 400,
      type: "text/plain",
      body: "device login is turned off on this gateway\n",
    });
    const ended = await loginEnds(gateway.url);
    expect(ended.code, ended.stderr).toBe(1);
    expect(ended.last).toBe("gateway: device login is turned off on this gateway (HTTP 400)");
  });

  it("an approval URL or code with a terminal sequence is no gateway's answer, and is not printed", async () => {
    const gateway = await serving((_req, res) => {
      res.writeHead(200, { "content-type": "application/json" }).end(
        JSON.stringify({
          device_code: "dc",
          user_code: "BCDF\u001b[2J",
          verification_uri: "http://127.0.0.1/\u001b]8;;file:///etc/passwd\u0007x",
          expires_in: 60,
          interval: 0.01,
        }),
      );
    });
    const done = await runCli(
      ["login", "--no-browser", "--base-url", gateway.url],
      newHome().env,
      15_000,
      emptyDir(),
    );
    expect(oneLine(done, 1)).toBe(
      `gateway: the gateway at ${gateway.url} sent an unexpected response (HTTP 200); is the CLI the same version as the server?`,
    );
  });
});

describe("--profile", () => {
  it('"" and names no hint can carry are the command line\'s mistake (2), said before anything is sent', async () => {
    const gateway = await serving((_req, res) => res.writeHead(500).end("asked"));
    const home = newHome({ GATEWAY_BASE_URL: gateway.url });
    const everyCommand = [
      ["login", "--no-browser"],
      ["logout"],
      ["whoami"],
      ["keys", "list"],
      ["keys", "create", "--label", "x"],
      ["keys", "revoke", "x"],
      ["mcp"],
    ];
    const tries = [
      ...everyCommand.map((command) => [...command, "--profile", ""]),
      ...[" ", "a b", "x\u001b[31m", "-x", "__proto__"].flatMap((profile) => [
        ["login", "--no-browser", "--profile", profile],
        ["whoami", "--profile", profile],
      ]),
    ];
    for (const args of tries) {
      const done = await runCli(args, home.env, 15_000, emptyDir());
      expect(oneLine(done, 2), JSON.stringify(args)).toBe(
        "gateway: --profile must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit, e.g. --profile staging",
      );
    }
    expect(gateway.asked).toEqual([]);
  }, 120_000);

  it("a profile named after an object's property (constructor, toString) is a profile like any other, not a crash", async () => {
    const gw = await testGateway();
    try {
      const home = newHome();
      for (const profile of ["constructor", "toString"]) {
        const none = await runCli(["whoami", "--profile", profile], home.env);
        expect(oneLine(none, 1)).toMatch(
          new RegExp(`^gateway: not logged in; run \`.*login --profile ${profile}\``),
        );
        const nothing = await runCli(["logout", "--profile", profile], home.env);
        expect(oneLine(nothing, 1)).toBe(
          `gateway: not logged in with profile "${profile}"; nothing to log out`,
        );
      }
      saveLogin(
        home,
        { key: LOGIN_KEY, baseUrl: gw.url, keyId: "kl", accountId: "acct" },
        "constructor",
      );
      const me = await runCli(["whoami", "--profile", "constructor", "--json"], home.env);
      expect(me.code, me.stderr).toBe(0);
      expect(JSON.parse(me.stdout)).toMatchObject({ key_id: "kl", kind: "login" });
    } finally {
      await gw.close();
    }
  });

  it("a logout that failed says to run it again with its profile, not the default one's", async () => {
    const gateway = await serving((_req, res) =>
      res
        .writeHead(500, { "content-type": "application/json" })
        .end(JSON.stringify({ error: { message: "Internal error.", code: "internal_error" } })),
    );
    const home = newHome();
    saveLogin(
      home,
      { key: LOGIN_KEY, baseUrl: gateway.url, keyId: "kl", accountId: "acct" },
      "staging",
    );
    const done = await runCli(["logout", "--profile", "staging"], home.env);
    expect(oneLine(done, 1)).toMatch(
      /^gateway: Internal error \(500 internal_error\); the key was NOT revoked and is still stored, run `.*logout --profile staging` again$/,
    );
  });
});

describe("help", () => {
  it("`gateway keys --help` says keys create --db needs no login, and its example runs without one", async () => {
    const gw = await testGateway();
    try {
      const home = newHome();
      for (const args of [["keys", "--help"], ["keys"], ["--help"]]) {
        const help = await runCli(args, home.env, 15_000, gw.dir);
        expect(help.code).toBe(0);
        expect(help.stdout).not.toContain("(needs `gateway login`)");
        expect(help.stdout.replace(/\s+/g, " ")).toContain("`keys create --db` needs none");
      }
      const help = await runCli(["keys", "--help"], home.env, 15_000, gw.dir);
      const example = help.stdout
        .split("\n")
        .find((line) => /^\s*\$ .*keys create --db/.test(line))
        ?.replace(/^\s*\$ /, "");
      expect(example).toBeDefined();
      const before = gw.services.store.listKeys("acct").length;
      const ran = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
        execFile(
          "sh",
          ["-c", example!],
          { cwd: gw.dir, env: home.env, timeout: 15_000 },
          (err, stdout, stderr) =>
            resolve({ code: err ? Number(err.code ?? 1) : 0, stdout, stderr }),
        );
      });
      expect(ran.code, ran.stderr).toBe(0);
      expect(ran.stdout).toMatch(/^kn-\S+\n$/);
      expect(gw.services.store.listKeys("acct").length).toBe(before + 1);
    } finally {
      await gw.close();
    }
  });

  it("`gateway help <command> <subcommand>` shows that command's help; a name no command has is a mistake (2)", async () => {
    const home = newHome();
    for (const [args, usage] of [
      [["help", "keys", "create"], "keys create [options]"],
      [["help", "keys", "ls"], "keys list|ls [options]"],
      [["help", "status"], "whoami|status [options]"],
      [["keys", "help", "revoke"], "keys revoke [options] <id-or-label>"],
      [["help", "secrets", "rotate"], "secrets rotate [options]"],
      [["help"], "[options] [command]"],
    ] as const) {
      const help = await runCli([...args], home.env);
      expect(help.code, help.stderr).toBe(0);
      expect(help.stdout.split("\n")[0], args.join(" ")).toMatch(
        new RegExp(`^Usage: .*gateway ${usage.replace(/[|[\]]/g, "\\$&")}$`),
      );
    }
    expect(oneLine(await runCli(["help", "serv"], home.env), 2)).toBe(
      "gateway: unknown command 'serv' (did you mean serve?)",
    );
    expect(oneLine(await runCli(["help", "nosuch"], home.env), 2)).toBe(
      "gateway: unknown command 'nosuch'",
    );
    expect(oneLine(await runCli(["help", "keys", "craete"], home.env), 2)).toBe(
      "gateway: unknown command 'craete' (did you mean create?)",
    );
  });

  it("`gateway help keys revoke NAME` shows the help and revokes nothing", async () => {
    const gateway = await serving((_req, res) => res.writeHead(500).end("asked"));
    const home = newHome({ GATEWAY_API_KEY: LOGIN_KEY, GATEWAY_BASE_URL: gateway.url });
    const help = await runCli(["help", "keys", "revoke", "ci"], home.env);
    expect(help.code, help.stderr).toBe(0);
    expect(help.stdout).toMatch(/^Usage: .*gateway keys revoke /);
    expect(gateway.asked).toEqual([]);
  });

  it("-v and `version`, which print the version elsewhere, name --version", async () => {
    const home = newHome();
    expect(oneLine(await runCli(["-v"], home.env), 2)).toBe(
      "gateway: unknown option '-v' (did you mean --version?)",
    );
    expect(oneLine(await runCli(["version"], home.env), 2)).toBe(
      "gateway: unknown command 'version' (did you mean --version?)",
    );
    const version = await runCli(["--version"], home.env);
    expect(version.code).toBe(0);
    expect(version.stdout).toMatch(/^\d+\.\d+\.\d+\S*\n$/);
  });
});
