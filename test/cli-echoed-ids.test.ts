import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { type CliHome, cliHome, killRunningClis, runCli } from "./support/cli.js";
import { LOGIN_KEY } from "./support/gateway.js";

/**
 * `gateway whoami`, `keys create` and `keys revoke` print ids the server sent: from a server that
 * echoes an escape sequence and a line break in them, the built CLI (`npm run build` first)
 * prints one plain line per field, the control characters as U+FFFD.
 */

const homes: CliHome[] = [];
const servers: Server[] = [];

afterEach(async () => {
  killRunningClis();
  for (const home of homes.splice(0)) home.remove();
  await Promise.all(servers.splice(0).map((s) => new Promise((resolve) => s.close(resolve))));
});

const ESC = "\u001b";
/** An id as a hostile or broken server may send it: a terminal sequence and a forged line. */
const echoed = (id: string) => `${id}${ESC}]0;owned${"\u0007"}\nforged: line`;
const shown = (id: string) => `${id}\uFFFD]0;owned\uFFFD\uFFFDforged: line`;

async function serving(answer: (req: IncomingMessage, res: ServerResponse) => void) {
  const server = createServer(answer);
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

const json = (res: ServerResponse, status: number, body: unknown) =>
  res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));

async function run(args: string[], url: string) {
  const home = cliHome({ GATEWAY_API_KEY: LOGIN_KEY });
  homes.push(home);
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
