import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { sealingKeyAccount } from "../src/store/sqlite/sealing-key.js";
import { type CliHome, cliHome, killRunningClis, runCli, saveLogin } from "./support/cli.js";
import { LOGIN_KEY, type TestGateway, testGateway } from "./support/gateway.js";

/**
 * A developer's first day with the built CLI (`bin/gateway`, `npm run build` first): the mistakes
 * they make and the failures they meet, each one line on stderr with docs/cli.md's exit code
 * (1: theirs to fix, not the command line; 2: the command line), never "please report" (70).
 */

let gw: TestGateway;
const homes: CliHome[] = [];
const servers: Server[] = [];
const dirs: string[] = [];

beforeAll(async () => {
  gw = await testGateway();
});
afterAll(async () => {
  await gw?.close();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});
afterEach(async () => {
  killRunningClis();
  for (const home of homes.splice(0)) home.remove();
  await Promise.all(servers.splice(0).map((s) => new Promise((resolve) => s.close(resolve))));
});

function newHome(env: NodeJS.ProcessEnv = {}): CliHome {
  const home = cliHome(env);
  // The database's own key file, not a key a Postgres suite in this process exported.
  delete home.env.GATEWAY_SECRET_KEY;
  homes.push(home);
  return home;
}

function loggedIn(): CliHome {
  const home = newHome();
  saveLogin(home, { key: LOGIN_KEY, baseUrl: gw.url, keyId: "kl", accountId: "acct" });
  return home;
}

/** A finished CLI run that failed as docs/cli.md says a mistake fails: one line, this exit code. */
function expectOneLine(
  done: { code: number | null; stdout: string; stderr: string },
  code: 1 | 2,
): string {
  expect(done.stderr).not.toMatch(/unexpected error|please report/i);
  expect(done.stderr, done.stderr).toMatch(/^gateway: [^\n]*\n$/);
  expect(done.code, done.stderr).toBe(code);
  expect(done.stdout).toBe("");
  return done.stderr.trim();
}

/** Requests each server of `answering` was sent, by its URL. */
const asked = new Map<string, number>();

/** A server in front of the gateway's URL that answers every request with `status` and `body`. */
async function answering(status: number, type: string, body: string): Promise<string> {
  let url = "";
  const server = createServer((_req, res) => {
    asked.set(url, (asked.get(url) ?? 0) + 1);
    res.writeHead(status, { "content-type": type }).end(body);
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return url;
}

const keyCount = () => gw.services.store.listKeys("acct").length;

describe("gateway keys create --db with the database's sealing key not at hand", () => {
  it("a GATEWAY_SECRET_KEY that is not the database's: exit 1, one line naming it and the key file beside the database", async () => {
    const home = newHome();
    const before = keyCount();
    const wrong = await runCli(["keys", "create", "--db", gw.dbPath, "--label", "app"], {
      ...home.env,
      GATEWAY_SECRET_KEY: randomBytes(32).toString("base64"),
    });
    expect(expectOneLine(wrong, 1)).toBe(
      `gateway: the secret key from GATEWAY_SECRET_KEY does not open the BYOK keys in ${gw.dbPath} (a wrong key, or one from another database); use the key this database was sealed with: ${gw.dbPath}.key beside it may hold that key (unset GATEWAY_SECRET_KEY to use it)`,
    );

    const notAKey = await runCli(["keys", "create", "--db", gw.dbPath, "--label", "app"], {
      ...home.env,
      GATEWAY_SECRET_KEY: "hunter2",
    });
    expect(expectOneLine(notAKey, 1)).toBe(
      "gateway: GATEWAY_SECRET_KEY must be 32 bytes in base64 (make one with: openssl rand -base64 32)",
    );
    const badStore = await runCli(["keys", "create", "--db", gw.dbPath, "--label", "app"], {
      ...home.env,
      GATEWAY_SECRET_KEY_STORE: "vault",
    });
    expect(expectOneLine(badStore, 1)).toBe(
      'gateway: GATEWAY_SECRET_KEY_STORE must be "auto", "file" or "keychain", got "vault"',
    );
    expect(keyCount()).toBe(before);

    // The same command without the stray variable works.
    const fixed = await runCli(["keys", "create", "--db", gw.dbPath, "--label", "app"], home.env);
    expect(fixed.code, fixed.stderr).toBe(0);
    expect(keyCount()).toBe(before + 1);
  });

  it("a keychain that holds the key but is locked is named, for keys create --db and serve alike; no key file that opens nothing is made", async () => {
    const dir = mkdtempSync(join(tmpdir(), "gateway-first-day-"));
    dirs.push(dir);
    const db = join(dir, "gateway.db");
    const kit = await testGateway({ db });
    await kit.close();
    // The key moved into the keychain, as docs/security.md tells how to.
    const keyringFile = join(dir, "keyring.json");
    writeFileSync(
      keyringFile,
      JSON.stringify({
        entries: {
          [`model-gateway/${sealingKeyAccount(db)}`]: readFileSync(`${db}.key`, "utf8").trim(),
        },
        calls: [],
      }),
    );
    rmSync(`${db}.key`);
    const home = newHome({
      NODE_OPTIONS: `--import=${pathToFileURL(join(import.meta.dirname, "support", "fake-keyring", "register.mjs")).href}`,
      FAKE_KEYRING_FILE: keyringFile,
    });
    delete home.env.GATEWAY_SECRET_KEY_STORE;

    const unlocked = await runCli(["keys", "create", "--db", db, "--label", "a"], home.env);
    expect(unlocked.code, unlocked.stderr).toBe(0);

    const locked = {
      ...home.env,
      FAKE_KEYRING_UNAVAILABLE: "Cannot create an item in a locked collection",
    };
    const line = `gateway: the BYOK sealing key of ${db} is not in ${db}.key or GATEWAY_SECRET_KEY, and the OS keychain, which may hold it, could not be read (Cannot create an item in a locked collection); unlock the keychain and try again, or restore ${db}.key, or set GATEWAY_SECRET_KEY`;
    const create = await runCli(["keys", "create", "--db", db, "--label", "b"], locked);
    expect(expectOneLine(create, 1)).toBe(line);
    const serve = await runCli(["serve", "--port", "0", "--db", db], locked);
    expect(serve.code).toBe(1);
    expect(serve.stderr.trim()).toBe(line);
    expect(existsSync(`${db}.key`)).toBe(false);
  });
});

describe("gateway keys create: label and flag mistakes are the command line's (exit 2)", () => {
  it("no --label, --account without --db, --db :memory: or a Postgres URL", async () => {
    const home = loggedIn();
    const before = keyCount();
    for (const [args, line] of [
      [["keys", "create"], "gateway: --label is required (what the key is for), e.g. --label ci"],
      [
        ["keys", "create", "--label", "x", "--account", "acct"],
        "gateway: --account needs --db: a login key mints keys for its own account",
      ],
      [
        ["keys", "create", "--label", "x", "--db", ":memory:"],
        "gateway: an in-memory database belongs to its server alone; give a file to --db",
      ],
      [["owner-link", "--db", ":memory:"], undefined],
      [["secrets", "rotate", "--db", ":memory:"], undefined],
      [["owner-link", "--db", "postgres://u:secret@127.0.0.1:1/db"], undefined],
    ] as const) {
      const done = await runCli([...args], home.env);
      const said = expectOneLine(done, 2);
      if (line) expect(said).toBe(line);
      expect(said).not.toContain("secret@");
    }
    expect(keyCount()).toBe(before);
  });

  it("the label shown after a create is one line with no escape sequence of its own", async () => {
    const home = loggedIn();
    const done = await runCli(["keys", "create", "--label", "ci\u001b[2J\nrm"], home.env);
    expect(done.code, done.stderr).toBe(0);
    expect(done.stderr).toMatch(/^Created per-tool key key_\S+ "ci\uFFFD\[2J\uFFFDrm"\. Copy it/);
    expect(done.stderr).not.toContain("\u001b");
    expect(done.stdout).toMatch(/^kn-\S+\n$/);
  });
});

describe("--help examples", () => {
  it("keys create's offline example runs as written, its note a comment and not arguments", async () => {
    const home = newHome();
    const help = await runCli(["keys", "create", "--help"], home.env, 15_000, gw.dir);
    const example = help.stdout
      .split("\n")
      .find((line) => line.includes("--db gateway.db"))
      ?.replace(/^\s*\$ /, "");
    expect(example).toBeDefined();
    const before = keyCount();
    // In the folder of the gateway's database, as the example's `--db gateway.db` assumes.
    const ran = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
      execFile(
        "sh",
        ["-c", example!],
        { cwd: gw.dir, env: home.env, timeout: 15_000 },
        (err, stdout, stderr) => resolve({ code: err ? Number(err.code ?? 1) : 0, stdout, stderr }),
      );
    });
    expect(ran.code, ran.stderr).toBe(0);
    expect(ran.stdout).toMatch(/^kn-\S+\n$/);
    expect(keyCount()).toBe(before + 1);
  });
});

describe("a --base-url the CLI cannot use", () => {
  it("is the command line's mistake (2), said before a missing login; GATEWAY_BASE_URL's is not (1)", async () => {
    const home = newHome();
    for (const command of [["keys", "list"], ["keys", "create", "--label", "x"], ["whoami"]]) {
      const flag = await runCli([...command, "--base-url", "localhost:8787"], home.env);
      expect(expectOneLine(flag, 2)).toBe(
        'gateway: the gateway URL must start with http:// or https://, got "localhost:8787"',
      );
    }
    const fromEnv = await runCli(["keys", "list"], {
      ...home.env,
      GATEWAY_API_KEY: LOGIN_KEY,
      GATEWAY_BASE_URL: "localhost:8787",
    });
    expect(expectOneLine(fromEnv, 1)).toBe(
      'gateway: the gateway URL must start with http:// or https://, got "localhost:8787"',
    );
  });
});

describe("gateway keys revoke with what no URL can carry", () => {
  it("an empty id is the command line's mistake; a label of . or .. is to be revoked by id; nothing is sent", async () => {
    const home = newHome();
    const gateway = await answering(500, "text/plain", "nothing should have been asked");
    saveLogin(home, { key: LOGIN_KEY, baseUrl: gateway, keyId: "kl", accountId: "acct" });
    const empty = await runCli(["keys", "revoke", ""], home.env);
    expect(expectOneLine(empty, 2)).toMatch(
      /^gateway: give the key's id or label, e\.g\. `.*keys revoke ci`/,
    );
    for (const label of [".", ".."]) {
      const dots = await runCli(["keys", "revoke", label], home.env);
      expect(expectOneLine(dots, 1)).toMatch(
        new RegExp(
          `^gateway: a key labelled "${label.replace(/\./g, "\\.")}" can be revoked only by its id`,
        ),
      );
    }
    expect(asked.get(gateway)).toBeUndefined();
  });
});

describe("a gateway URL whose server fails (a gateway that answers 500, a proxy's error page)", () => {
  it("keys create, list, revoke, whoami and login say so in one line, with nothing of a page or a terminal sequence", async () => {
    const plain = await answering(
      500,
      "text/plain",
      "boom\n    at handler (/srv/app.js:10:3)\n\u001b[31mred\u001b[0m",
    );
    const html = await answering(
      502,
      "text/html",
      "<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1></center><hr><center>nginx</center></body></html>",
    );
    const json = await answering(
      500,
      "application/json",
      JSON.stringify({
        error: { message: "Internal error.", type: "server_error", code: "internal_error" },
      }),
    );
    const home = newHome({ GATEWAY_API_KEY: LOGIN_KEY });
    const commands = [
      ["keys", "create", "--label", "x", "--json"],
      ["keys", "list", "--json"],
      ["keys", "list"],
      ["keys", "revoke", "x"],
      ["whoami", "--json"],
      ["login", "--no-browser", "--json"],
    ];
    for (const command of commands) {
      const fromPlain = expectOneLine(await runCli([...command, "--base-url", plain], home.env), 1);
      expect(fromPlain).toBe(
        "gateway: boom at handler (/srv/app.js:10:3) \uFFFD[31mred\uFFFD[0m (HTTP 500)",
      );
      const fromHtml = expectOneLine(await runCli([...command, "--base-url", html], home.env), 1);
      expect(fromHtml).toBe(
        `gateway: the server at ${html} answered with an HTML page, not a gateway's JSON: is a proxy in front of the gateway failing, or is no Model Gateway there? (HTTP 502)`,
      );
      const fromJson = expectOneLine(await runCli([...command, "--base-url", json], home.env), 1);
      expect(fromJson).toBe("gateway: Internal error (500 internal_error)");
    }
  }, 60_000);
});
