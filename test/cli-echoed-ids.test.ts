import { existsSync, readFileSync } from "node:fs";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { describe, expect, it } from "vitest";
import { runCli, type SavedLogin, saveLogin, useCliScratch } from "./support/cli.js";
import { LOGIN_KEY } from "./support/gateway.js";

/**
 * `gateway whoami`, `keys create` and `keys revoke` print ids the server sent: from a server that
 * echoes an escape sequence and a line break in them, the built CLI (`npm run build` first)
 * prints one plain line per field, the control characters as U+FFFD.
 */

const { newHome, emptyDir, listen } = useCliScratch();

const ESC = "\u001b";
/** An id as a hostile or broken server may send it: a terminal sequence and a forged line. */
const echoed = (id: string) => `${id}${ESC}]0;owned${"\u0007"}\nforged: line`;
const shown = (id: string) => `${id}\uFFFD]0;owned\uFFFD\uFFFDforged: line`;

const serving = (answer: (req: IncomingMessage, res: ServerResponse) => void) =>
  listen(createServer(answer));

const json = (res: ServerResponse, status: number, body: unknown) =>
  res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));

async function run(args: string[], url: string) {
  const home = newHome({ GATEWAY_API_KEY: LOGIN_KEY });
  const done = await runCli([...args, "--base-url", url], home.env);
  expect(done.code, done.stderr).toBe(0);
  expect(done.stdout + done.stderr).not.toContain(ESC);
  expect(done.stdout + done.stderr).not.toContain("\u0007");
  return done;
}

describe("ids a server sent reach the terminal as plain one-line text", () => {
  it("gateway whoami: the account id, key id, prefix and kind", async () => {
    const url = await serving((_req, res) =>
      json(res, 200, {
        account_id: echoed("acct"),
        key_id: echoed("key_1"),
        kind: echoed("login"),
        parent_key_id: null,
        label: "",
        prefix: echoed("kn-ab"),
      }),
    );
    const done = await run(["whoami"], url);
    const lines = done.stdout.split("\n").filter(Boolean);
    expect(lines).toHaveLength(4);
    expect(lines[0]).toBe(`account:   ${shown("acct")}`);
    expect(lines[1]).toBe(`key:       ${shown("key_1")} (${shown("kn-ab")}..., ${shown("login")})`);
  });

  it("gateway keys create: the new key's id", async () => {
    const url = await serving((_req, res) =>
      json(res, 201, {
        id: echoed("key_2"),
        key: "kn-echoed-key-0123456789abcdef",
        label: "ci",
        kind: "standard",
        parent_key_id: "kl",
        created_at: 1,
      }),
    );
    const done = await run(["keys", "create", "--label", "ci"], url);
    expect(done.stdout).toBe("kn-echoed-key-0123456789abcdef\n");
    const lines = done.stderr.split("\n").filter(Boolean);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(`per-tool key ${shown("key_2")} "ci"`);
  });

  it("gateway keys revoke: the revoked key's id, revoked now or before", async () => {
    let before = false;
    const url = await serving((_req, res) =>
      json(res, 200, {
        id: echoed("key_3"),
        revoked: true,
        ...(before ? { already_revoked: true, revoked_at: 0 } : {}),
      }),
    );
    const now = await run(["keys", "revoke", "key_3"], url);
    expect(now.stdout).toBe(`Revoked key ${shown("key_3")}; requests with it now get 401.\n`);
    before = true;
    const earlier = await run(["keys", "revoke", "key_3"], url);
    expect(earlier.stdout).toBe(
      `Key ${shown("key_3")} was already revoked (1970-01-01 00:00 UTC); nothing changed.\n`,
    );
  });
});

/** A gateway whose device flow hands out a code, then approves it at once with `token`. */
async function approvingWith(token: Record<string, string>) {
  let url = "";
  url = await serving((req, res) => {
    if (req.url === "/api/auth/device/code")
      json(res, 200, {
        device_code: "dc",
        user_code: "BCDF-GHJK",
        verification_uri: `${url}/dashboard/device`,
        expires_in: 60,
        interval: 0.01,
      });
    else if (req.url === "/api/auth/device/token")
      json(res, 200, { token_type: "bearer", ...token });
    else json(res, 200, { id: "x", revoked: true });
  });
  return url;
}

const approved = {
  access_token: "kn-echoed-login-key-0123456789abcdef",
  key_id: "key_login",
  account_id: "acct",
};

describe("gateway login keeps only ids it can show: printable ASCII", () => {
  /** `gateway login` in a fresh home (no gateway.db where it runs), with what it stored. */
  async function login(url: string) {
    const home = newHome();
    const done = await runCli(
      ["login", "--no-browser", "--base-url", url],
      home.env,
      15_000,
      emptyDir(),
    );
    return { done, home };
  }

  it.each([
    ["key_id", { ...approved, key_id: echoed("key_login") }],
    ["account_id", { ...approved, account_id: echoed("acct") }],
    ["access_token", { ...approved, access_token: `kn-key${ESC}[2J\nforged` }],
  ])(
    "a %s with an escape sequence and a line break: refused with the unexpected-response line, nothing stored",
    async (_field, token) => {
      const url = await approvingWith(token);
      const { done, home } = await login(url);
      expect(done.code, done.stderr).toBe(1);
      expect(done.stdout).toBe("");
      expect(done.stdout + done.stderr).not.toContain(ESC);
      expect(done.stderr.split("\n").filter(Boolean).at(-1)).toBe(
        `gateway: the gateway at ${url} sent an unexpected response (HTTP 200); is the CLI the same version as the server?`,
      );
      expect(existsSync(home.credentialsPath)).toBe(false);
    },
  );

  it("plain ids: logged in, the ids printed as they came and stored (a name outside ASCII too)", async () => {
    const url = await approvingWith({ ...approved, account_id: "Acme Café" });
    const { done, home } = await login(url);
    expect(done.code, done.stderr).toBe(0);
    expect(done.stdout).toContain("as account Acme Café (login key key_login, kn-echo...)");
    const file = JSON.parse(readFileSync(home.credentialsPath, "utf8"));
    expect(file.profiles.default).toMatchObject({ keyId: "key_login", accountId: "Acme Café" });
  });

  it("gateway logout: a login an older CLI stored with such an id shows it as plain one-line text", async () => {
    const url = await serving((_req, res) => json(res, 200, { id: "key_login", revoked: true }));
    const home = newHome();
    const stored: SavedLogin = {
      key: approved.access_token,
      baseUrl: url,
      keyId: echoed("key_login"),
      accountId: "acct",
    };
    saveLogin(home, stored);
    const done = await runCli(["logout"], home.env);
    expect(done.code, done.stderr).toBe(0);
    expect(done.stdout + done.stderr).not.toContain(ESC);
    expect(done.stdout).toBe(
      `Logged out: login key ${shown("key_login")} revoked on ${url} and removed from ${home.credentialsPath}.\n`,
    );
  });
});
