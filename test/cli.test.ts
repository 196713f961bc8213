import { existsSync, readFileSync, statSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { dirname } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it, onTestFinished } from "vitest";
import { openKeychainStore } from "../src/cli/credentials/keychain-store.js";
import { readServeRecordOf } from "../src/store/sqlite/serve-record.js";
import {
  approvalPage,
  type CliHome,
  cliHome,
  killRunningClis,
  loginPrompt,
  ownerDecides,
  ownerSession,
  runCli,
  saveLogin,
  spawnCli,
} from "./support/cli.js";
import { chat, post, type TestGateway, testGateway } from "./support/gateway.js";
import { serveProcess } from "./support/serve-process.js";

/** The real `bin/gateway` as a subprocess (run `npm run build` first), against real gateways. */

let gw: TestGateway;
let shortLived: TestGateway;
const homes: CliHome[] = [];

beforeAll(async () => {
  [gw, shortLived] = await Promise.all([
    testGateway({ devicePollIntervalSeconds: 1 }),
    testGateway({ devicePollIntervalSeconds: 1, deviceCodeTtlSeconds: 2 }),
  ]);
});
afterAll(async () => {
  await Promise.all([gw?.close(), shortLived?.close()]);
});
afterEach(() => {
  killRunningClis();
  for (const home of homes.splice(0)) home.remove();
});

function newHome(env: NodeJS.ProcessEnv = {}): CliHome {
  const home = cliHome(env);
  homes.push(home);
  return home;
}

function storedKey(home: CliHome, profile = "default"): string {
  const file = JSON.parse(readFileSync(home.credentialsPath, "utf8")) as {
    profiles: Record<string, { key: string }>;
  };
  return file.profiles[profile].key;
}

/** A logged-in CLI home without the browser dance: a fresh login key written to the file store. */
function loggedInHome(
  baseUrl = gw.url,
  on: TestGateway = gw,
): { home: CliHome; loginKey: string; loginKeyId: string } {
  const home = newHome();
  const { key, value } = on.services.store.createKey({
    accountId: "acct",
    label: "cli test",
    kind: "login",
  });
  saveLogin(home, { key: value, baseUrl, keyId: key.id, accountId: "acct" });
  return { home, loginKey: value, loginKeyId: key.id };
}

/** A port nothing listens on: bound, read and released. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

const noStackTrace = (text: string) => expect(text).not.toMatch(/\n\s+at .+:\d+:\d+/);

const packageVersion = (
  JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as {
    version: string;
  }
).version;

describe("gateway --version", () => {
  it("prints the version package.json declares", async () => {
    const home = cliHome();
    homes.push(home);
    const done = await runCli(["--version"], home.env);
    expect(done.code).toBe(0);
    expect(done.stdout.trim()).toBe(packageVersion);
  });
});

describe("gateway login", () => {
  it("completes the device flow approved over HTTP and stores a working key in a 0600 file", async () => {
    const home = newHome();
    const cli = spawnCli(["login", "--no-browser", "--base-url", gw.url], home.env);
    const { url, userCode } = await loginPrompt(cli);
    expect(url).toBe(`${gw.url}/dashboard/device?user_code=${userCode}`);
    const approved = await ownerDecides(gw, userCode, "approve");
    expect(approved.status).toBe(200);
    const done = await cli.exit();
    expect(done.code).toBe(0);
    expect(done.stdout).toMatch(/Logged in to .* as account acct/);
    expect(done.stderr).toContain("Waiting for approval");

    const key = storedKey(home);
    expect(key).toMatch(/^kn-/);
    expect(done.stdout + done.stderr).not.toContain(key);
    expect(statSync(dirname(home.credentialsPath)).mode & 0o777).toBe(0o700);
    expect(statSync(home.credentialsPath).mode & 0o777).toBe(0o600);
    const res = await post(gw, "/v1/chat/completions", chat(), { authorization: `Bearer ${key}` });
    expect(res.status).toBe(200);
  });

  it("login --json prints the account, key id and store, never the key", async () => {
    const home = newHome();
    const cli = spawnCli(["login", "--no-browser", "--json", "--base-url", gw.url], home.env);
    const { userCode } = await loginPrompt(cli);
    expect((await ownerDecides(gw, userCode, "approve")).status).toBe(200);
    const done = await cli.exit();
    expect(done.code).toBe(0);
    const out = JSON.parse(done.stdout) as Record<string, string>;
    const key = storedKey(home);
    expect(out).toEqual({
      base_url: gw.url,
      account_id: "acct",
      key_id: expect.stringMatching(/^key_/),
      prefix: key.slice(0, 7),
      stored_in: home.credentialsPath,
    });
    expect(done.stdout).not.toContain(key);
  });

  it("ends with a non-zero exit and a clear message when the owner denies", async () => {
    const home = newHome();
    const cli = spawnCli(["login", "--no-browser", "--base-url", gw.url], home.env);
    const { userCode } = await loginPrompt(cli);
    await ownerDecides(gw, userCode, "deny");
    const done = await cli.exit();
    expect(done.code).toBe(1);
    expect(done.stderr).toContain("gateway: login denied in the browser; no key was created");
    noStackTrace(done.stderr);
    expect(() => statSync(home.credentialsPath)).toThrow();
  });

  it("ends with a non-zero exit and a clear message when the code expires", async () => {
    const home = newHome();
    const done = await runCli(["login", "--no-browser", "--base-url", shortLived.url], home.env);
    expect(done.code).toBe(1);
    expect(done.stderr).toContain(
      "gateway: the code expired before it was approved; run `npx gateway login` again",
    );
    noStackTrace(done.stderr);
  });

  it("honours slow_down by adding 5 s to its polling interval", async () => {
    let polls = 0;
    const fake: Server = createServer((req, res) => {
      const reply = (status: number, body: object) => {
        res.writeHead(status, { "content-type": "application/json" });
        res.end(JSON.stringify(body));
      };
      if (req.url === "/api/auth/device/code") {
        const uri = "http://127.0.0.1/dashboard/device";
        return reply(200, {
          device_code: "fake-device-code",
          user_code: "BCDF-GHJK",
          verification_uri: uri,
          verification_uri_complete: `${uri}?user_code=BCDF-GHJK`,
          expires_in: 60,
          interval: 1,
        });
      }
      polls++;
      if (polls === 1) return reply(400, { error: "slow_down" });
      return reply(200, {
        access_token: "kn-fake-token-for-slow-down-test",
        token_type: "bearer",
        key_id: "key_fake",
        account_id: "fake",
      });
    });
    await new Promise<void>((resolve) => fake.listen(0, "127.0.0.1", resolve));
    try {
      const home = newHome();
      const url = `http://127.0.0.1:${(fake.address() as AddressInfo).port}`;
      const done = await runCli(["login", "--no-browser", "--base-url", url], home.env, 15_000);
      expect(done.code).toBe(0);
      expect(polls).toBe(2);
      // The pacing itself is asserted on a fake clock in test/login-flow.test.ts.
      expect(done.stderr).toContain("The gateway asked to poll slower: every 6 s now.\n");
    } finally {
      fake.close();
    }
  }, 20_000);

  it("Ctrl-C cancels the code on the gateway: the approval page then refuses it", async () => {
    const home = newHome();
    const cli = spawnCli(["login", "--no-browser", "--base-url", gw.url], home.env);
    const { userCode } = await loginPrompt(cli);
    cli.child.kill("SIGINT");
    const done = await cli.exit();
    expect(done.code).toBe(130);
    expect(done.stderr).toContain("gateway: login cancelled; the code can no longer be approved\n");
    const refused = await ownerDecides(gw, userCode, "approve").catch((e: Error) => e.message);
    expect(refused).toBe("approval page answered 400");
    const owner = await ownerSession(gw);
    const page = await approvalPage(gw, owner, userCode);
    expect(page.html).toContain("This login was cancelled");
    expect(page.csrf).toBeUndefined();
  });

  it("takes the OpenAI-style base URL ending in /v1 (flag or GATEWAY_BASE_URL), and says what is wrong with others", async () => {
    const home = newHome();
    const key = gw.services.store.createKey({
      accountId: "acct",
      label: "v1",
      kind: "standard",
    }).value;
    const env = { ...home.env, GATEWAY_API_KEY: key };
    const flag = await runCli(["whoami", "--json", "--base-url", `${gw.url}/v1/`], env);
    expect(flag.code).toBe(0);
    expect(JSON.parse(flag.stdout)).toMatchObject({ label: "v1" });
    const fromEnv = await runCli(["whoami", "--json"], {
      ...env,
      GATEWAY_BASE_URL: `${gw.url}/v1`,
    });
    expect(fromEnv.code).toBe(0);
    for (const [url, message] of [
      [
        "ftp://127.0.0.1:1",
        'gateway: the gateway URL must start with http:// or https://, got "ftp://127.0.0.1:1"',
      ],
      [
        "127.0.0.1:8787",
        'gateway: the gateway URL must start with http:// or https://, got "127.0.0.1:8787"',
      ],
      [
        "not a url",
        'gateway: the gateway URL must start with http:// or https://, got "not a url"',
      ],
      [
        "http://exa mple",
        'gateway: "http://exa mple" is not a URL; use something like http://127.0.0.1:8787',
      ],
      [
        `${gw.url}/v1?x=1`,
        `gateway: the gateway URL takes no query, fragment or credentials, got "${gw.url}/v1?***"; use something like http://127.0.0.1:8787`,
      ],
    ]) {
      const bad = await runCli(["whoami", "--base-url", url], env);
      // A flag value the CLI cannot use: the command line's mistake (docs/cli.md's exit codes).
      expect(bad.code).toBe(2);
      expect(bad.stderr.trim()).toBe(message);
    }
  });

  it("says plainly when the gateway cannot be reached", async () => {
    const url = `http://127.0.0.1:${await closedPort()}`;
    const done = await runCli(["login", "--no-browser", "--base-url", url], newHome().env);
    expect(done.code).toBe(1);
    expect(done.stderr).toMatch(
      /^gateway: cannot reach the gateway at http:\/\/127\.0\.0\.1:\d+ \(connection refused\); is `npx gateway serve` running\?/,
    );
    noStackTrace(done.stderr);
  });
});

describe("gateway keys", () => {
  it("creates, lists and revokes per-tool keys; a revoked key gets 401 on the next request", async () => {
    const { home, loginKey } = loggedInHome();
    const created = await runCli(["keys", "create", "--label", "ci"], home.env);
    expect(created.code).toBe(0);
    const key = created.stdout.trim();
    expect(key).toMatch(/^kn-[A-Za-z0-9_-]{43}$/);
    expect(created.stderr).toMatch(/Created per-tool key key_\S+ "ci"\. Copy it now/);
    expect(
      (await post(gw, "/v1/chat/completions", chat(), { authorization: `Bearer ${key}` })).status,
    ).toBe(200);

    const json = await runCli(
      ["keys", "create", "--label", "team", "--shared", "--json"],
      home.env,
    );
    const shared = JSON.parse(json.stdout) as {
      id: string;
      key: string;
      kind: string;
      label: string;
    };
    expect(shared).toMatchObject({ kind: "shared", label: "team" });

    const list = await runCli(["keys", "list"], home.env);
    expect(list.code).toBe(0);
    expect(list.stdout).toMatch(
      /^ID\s+LABEL\s+KIND\s+PREFIX\s+CREATED \(UTC\)\s+LAST USED \(UTC\)\s+STATUS/,
    );
    expect(list.stdout).toMatch(/\sci\s+per-tool\s/);
    expect(list.stdout).toMatch(/\steam\s+per-tool, shared\s/);
    for (const secret of [key, shared.key, loginKey])
      expect(list.stdout + list.stderr).not.toContain(secret);

    const listJson = JSON.parse((await runCli(["keys", "list", "--json"], home.env)).stdout) as {
      data: { id: string; label: string; last_used_at: number | null }[];
    };
    expect(listJson.data.map((k) => k.label)).toEqual(["ci", "team"]);
    expect(listJson.data[0].last_used_at).not.toBeNull();

    const revoked = await runCli(["keys", "revoke", "ci"], home.env);
    expect(revoked.code).toBe(0);
    expect(revoked.stdout).toMatch(/^Revoked key key_/);
    const after = await post(gw, "/v1/chat/completions", chat(), {
      authorization: `Bearer ${key}`,
    });
    expect(after.status).toBe(401);
    const byId = await runCli(["keys", "revoke", shared.id], home.env);
    expect(byId.code).toBe(0);

    const unknown = await runCli(["keys", "revoke", "no-such-key"], home.env);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toBe(
      'gateway: No key with id or label "no-such-key" among your keys (404 not_found)\n',
    );
  }, 90_000); // nine CLI processes one after another: about 2.5 s each on a loaded 2-core runner

  it("keys revoke lists the ids of an ambiguous label, says when a key was already revoked, and prints JSON", async () => {
    const { home, loginKeyId } = loggedInHome();
    const ids = [0, 1].map(
      (i) =>
        gw.services.store.createKey({
          accountId: "acct",
          label: "dup",
          kind: "standard",
          parentKeyId: loginKeyId,
          now: Date.now() + i,
        }).key.id,
    );
    const ambiguous = await runCli(["keys", "revoke", "dup"], home.env);
    expect(ambiguous.code).toBe(1);
    expect(ambiguous.stderr).toBe(
      `gateway: 2 active keys are labelled "dup" (${ids[0]}, ${ids[1]}); revoke one by its id (400 bad_request)\n`,
    );
    const json = await runCli(["keys", "revoke", ids[0], "--json"], home.env);
    expect(json.code).toBe(0);
    expect(JSON.parse(json.stdout)).toMatchObject({
      id: ids[0],
      revoked: true,
      already_revoked: false,
    });
    const again = await runCli(["keys", "revoke", ids[0]], home.env);
    expect(again.code).toBe(0);
    expect(again.stdout).toMatch(
      new RegExp(
        `^Key ${ids[0]} was already revoked \\(\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d UTC\\); nothing changed\\.\\n$`,
      ),
    );
    // One active "dup" is left: the label is no longer ambiguous.
    const last = await runCli(["keys", "revoke", "dup"], home.env);
    expect(last.stdout).toBe(`Revoked key ${ids[1]}; requests with it now get 401.\n`);
  });

  it("reports the 21st create in a minute as a plain 429; list and revoke keep working", async () => {
    // The limit counts in the clock's minute: on a gateway of its own with a manual clock, the
    // 21st stays in the minute of the first 20.
    const held = await testGateway({ clock: "manual" });
    onTestFinished(() => held.close());
    const { home, loginKey } = loggedInHome(held.url, held);
    const made: string[] = [];
    for (let i = 0; i < 20; i++) {
      const res = await post(
        held,
        "/api/keys",
        { label: `bulk-${i}` },
        { authorization: `Bearer ${loginKey}` },
      );
      expect(res.status).toBe(201);
      made.push(((await res.json()) as { id: string }).id);
    }
    const limited = await runCli(["keys", "create", "--label", "one-too-many"], home.env);
    expect(limited.code).toBe(1);
    expect(limited.stdout).toBe("");
    expect(limited.stderr).toMatch(
      /^gateway: the gateway is rate limiting this \(429 rate_limit_exceeded\): .*20 per minute/,
    );
    noStackTrace(limited.stderr);
    const list = await runCli(["keys", "list", "--json"], home.env);
    expect(list.code).toBe(0);
    const listed = (JSON.parse(list.stdout) as { data: { id: string }[] }).data.map((k) => k.id);
    expect(listed).toEqual(expect.arrayContaining(made));
    expect((await runCli(["keys", "revoke", "bulk-0"], home.env)).code).toBe(0);
  }, 40_000);

  it("never sends the stored login key to another gateway than the one it logged in to", async () => {
    const { home, loginKey } = loggedInHome();
    // Another server, as a mistyped URL or a shell left pointing elsewhere would reach.
    const seen: (string | undefined)[] = [];
    const other = createServer((req, res) => {
      seen.push(req.headers.authorization);
      res.end("{}");
    });
    await new Promise<void>((resolve) => other.listen(0, "127.0.0.1", resolve));
    const otherUrl = `http://127.0.0.1:${(other.address() as AddressInfo).port}`;
    try {
      for (const env of [
        { args: ["--base-url", otherUrl], extra: {} },
        { args: [], extra: { GATEWAY_BASE_URL: otherUrl } },
      ]) {
        const done = await runCli(["keys", "list", ...env.args], { ...home.env, ...env.extra });
        expect(done.code).toBe(1);
        expect(done.stderr).toBe(
          `gateway: the login key is for ${gw.url}, not ${otherUrl}; run \`npx gateway login --base-url ${otherUrl}\` to log in there (or set GATEWAY_API_KEY)\n`,
        );
        expect(done.stderr).not.toContain(loginKey);
      }
      expect(seen).toEqual([]);
      // The gateway it logged in to, named or not, still works.
      expect((await runCli(["keys", "list", "--base-url", `${gw.url}/v1`], home.env)).code).toBe(0);
    } finally {
      await new Promise((resolve) => other.close(resolve));
    }
  });

  it("says what is wrong with a GATEWAY_API_KEY pasted with typographic quotes, not that the gateway is unreachable", async () => {
    const home = newHome();
    const pasted = "\u201ckn-pasted-from-a-chat-app-0000000000\u201d";
    const done = await runCli(["keys", "list", "--base-url", gw.url], {
      ...home.env,
      GATEWAY_API_KEY: pasted,
    });
    expect(done.code).toBe(1);
    expect(done.stderr).toBe(
      "gateway: GATEWAY_API_KEY holds characters no key has (a typographic quote, a space or a line break?); paste the key again as plain text\n",
    );
    expect(done.stderr).not.toContain("kn-pasted");
  });

  it("says 'not logged in' without a stored key, and refuses a non-login GATEWAY_API_KEY plainly", async () => {
    const home = newHome();
    const done = await runCli(["keys", "list", "--base-url", gw.url], home.env);
    expect(done.code).toBe(1);
    expect(done.stderr).toBe(
      "gateway: not logged in; run `npx gateway login` (or set GATEWAY_API_KEY)\n",
    );
    const standard = gw.services.store.createKey({
      accountId: "acct",
      label: "plain",
      kind: "standard",
    }).value;
    const withEnv = await runCli(["keys", "create", "--label", "x", "--base-url", gw.url], {
      ...home.env,
      GATEWAY_API_KEY: standard,
    });
    expect(withEnv.code).toBe(1);
    expect(withEnv.stderr).toMatch(/needs a login key .*\(403 forbidden\)/);
    expect(withEnv.stderr).not.toContain(standard);
  });
});

describe("gateway whoami and logout", () => {
  it("whoami (and its alias status) shows the account, key and where the key is stored", async () => {
    const { home, loginKey, loginKeyId } = loggedInHome();
    const text = await runCli(["whoami"], home.env);
    expect(text.code).toBe(0);
    expect(text.stdout).toContain("account:   acct");
    expect(text.stdout).toContain(
      `key:       ${loginKeyId} (${loginKey.slice(0, 7)}..., login, "cli test")`,
    );
    expect(text.stdout).toContain(`stored in: ${home.credentialsPath}, profile "default"`);
    expect(text.stdout).not.toContain(loginKey);
    const json = JSON.parse((await runCli(["status", "--json"], home.env)).stdout) as Record<
      string,
      string
    >;
    expect(json).toMatchObject({
      account_id: "acct",
      key_id: loginKeyId,
      kind: "login",
      base_url: gw.url,
    });
  });

  it("GATEWAY_API_KEY overrides the stored key and is never written", async () => {
    const home = newHome();
    const key = gw.services.store.createKey({
      accountId: "acct",
      label: "from-env",
      kind: "standard",
    }).value;
    const done = await runCli(["whoami", "--json", "--base-url", gw.url], {
      ...home.env,
      GATEWAY_API_KEY: key,
    });
    expect(done.code).toBe(0);
    expect(JSON.parse(done.stdout)).toMatchObject({
      label: "from-env",
      stored_in: "GATEWAY_API_KEY environment variable",
    });
    expect(() => statSync(home.credentialsPath)).toThrow();
  });

  it("logout revokes the login key on the gateway and removes it locally", async () => {
    const { home, loginKey, loginKeyId } = loggedInHome();
    const done = await runCli(["logout"], home.env);
    expect(done.code).toBe(0);
    expect(done.stdout).toContain(`login key ${loginKeyId} revoked`);
    expect(gw.services.store.getKey(loginKeyId)!.revoked_at).not.toBeNull();
    expect(readFileSync(home.credentialsPath, "utf8")).not.toContain(loginKey);
    const after = await runCli(["whoami"], home.env);
    expect(after.code).toBe(1);
    expect(after.stderr).toContain("gateway: not logged in");
  });

  it("logout --json prints what it did", async () => {
    const { home, loginKeyId } = loggedInHome();
    const done = await runCli(["logout", "--json"], home.env);
    expect(done.code).toBe(0);
    expect(JSON.parse(done.stdout)).toEqual({
      key_id: loginKeyId,
      revoked_on_server: true,
      base_url: gw.url,
      removed_from: home.credentialsPath,
    });
  });

  it("logout keeps the key when the gateway is unreachable, so it can be retried", async () => {
    const { home, loginKey } = loggedInHome(`http://127.0.0.1:${await closedPort()}`);
    const done = await runCli(["logout"], home.env);
    expect(done.code).toBe(1);
    expect(done.stderr).toMatch(
      /cannot reach the gateway .* the key was NOT revoked and is still stored/,
    );
    expect(storedKey(home)).toBe(loginKey);
  });
});

describe("help and serve", () => {
  it("prints --help with examples for every command", async () => {
    const home = newHome();
    for (const args of [
      ["login"],
      ["logout"],
      ["whoami"],
      ["keys"],
      ["keys", "create"],
      ["keys", "list"],
      ["keys", "revoke"],
      ["owner-link"],
    ]) {
      const done = await runCli([...args, "--help"], home.env);
      expect(done.code, args.join(" ")).toBe(0);
      expect(done.stdout, args.join(" ")).toContain("Examples:");
    }
  });

  it("gateway serve prints a one-time owner URL that opens a dashboard session", async () => {
    const home = newHome();
    const serve = await serveProcess(["--db", `${home.dir}/serve.db`]);
    try {
      const ready = serve.ready as typeof serve.ready & { owner_url?: string };
      expect(ready.owner_url).toMatch(new RegExp(`^${serve.url}/dashboard/login\\?token=`));
      const res = await fetch(ready.owner_url!, { redirect: "manual" });
      expect(res.status).toBe(303);
      expect(res.headers.get("set-cookie")).toMatch(/^gateway_session=.*HttpOnly.*SameSite=Strict/);
    } finally {
      await serve.stop();
    }
  });
});

describe("gateway owner-link", () => {
  it("mints a new one-time owner link for the running serve, from its database file", async () => {
    const home = newHome();
    const db = `${home.dir}/serve.db`;
    const serve = await serveProcess(["--db", db]);
    try {
      // The start-up link is spent (or lost): a new one opens a session all the same.
      const ready = serve.ready as typeof serve.ready & { owner_url?: string };
      await fetch(ready.owner_url!, { redirect: "manual" });
      const done = await runCli(["owner-link", "--db", db, "--json"], home.env);
      expect(done.code, done.stderr).toBe(0);
      const { owner_url } = JSON.parse(done.stdout) as { owner_url: string };
      expect(owner_url).toMatch(new RegExp(`^${serve.url}/dashboard/login\\?token=`));
      expect(owner_url).not.toBe(ready.owner_url);
      const opened = await fetch(owner_url, { redirect: "manual" });
      expect(opened.status).toBe(303);
      const cookie = opened.headers.get("set-cookie") ?? "";
      expect(cookie).toMatch(/^gateway_session=.*HttpOnly.*SameSite=Strict/);
      const dashboard = await fetch(`${serve.url}/dashboard`, {
        headers: { cookie: cookie.split(";")[0] },
      });
      expect(await dashboard.text()).toContain("Dashboard of account demo");
      // One time only.
      const again = await fetch(owner_url, { redirect: "manual" });
      expect(again.status).not.toBe(303);

      const plain = await runCli(["owner-link", "--db", db], home.env);
      expect(plain.stdout).toMatch(/^owner dashboard \(one-time link, opens a session\): http/);
    } finally {
      await serve.stop();
    }
    // A clean stop runs to its end: the store is closed (no WAL left) and the record is gone.
    expect(existsSync(`${db}-wal`)).toBe(false);
    expect(await readServeRecordOf(db)).toBeUndefined();
    // Stopped: a link nobody would serve is refused, with what to do instead.
    const after = await runCli(["owner-link", "--db", db], home.env);
    expect(after.code).toBe(1);
    expect(after.stderr).toContain("no running `gateway serve` uses");
    noStackTrace(after.stderr);
  });

  it("tells a server that died without cleaning up from a running one", async () => {
    const home = newHome();
    const db = `${home.dir}/killed.db`;
    const serve = await serveProcess(["--db", db]);
    await serve.stop("SIGKILL");
    const done = await runCli(["owner-link", "--db", db], home.env);
    expect(done.code).toBe(1);
    expect(done.stderr).toContain("no running `gateway serve` uses");
  });

  it("refuses a database that does not exist, without creating it", async () => {
    const home = newHome();
    const missing = `${home.dir}/nowhere.db`;
    const done = await runCli(["owner-link", "--db", missing], home.env);
    expect(done.code).toBe(1);
    expect(done.stderr).toContain(`no database at ${missing}`);
    expect(existsSync(missing)).toBe(false);
  });
});

describe("OS keychain store (real Secret Service)", () => {
  it("stores, reads and deletes a login under a unique service name", async (ctx) => {
    if (!process.env.DBUS_SESSION_BUS_ADDRESS) {
      ctx.skip("no D-Bus session: run under dbus-run-session with an unlocked gnome-keyring");
      return;
    }
    const service = `model-gateway-test-${process.pid}-${Date.now()}`;
    const probe = await openKeychainStore({ service });
    if (!probe.ok) {
      ctx.skip(`no working Secret Service: ${probe.reason}`);
      return;
    }
    const login = {
      key: "kn-keychain-test-value",
      baseUrl: "http://127.0.0.1:1",
      keyId: "key_x",
      accountId: "acct",
      savedAt: new Date().toISOString(),
    };
    await probe.store.set("default", login);
    expect(await probe.store.get("default")).toEqual(login);
    expect(await probe.store.delete("default")).toBe(true);
    expect(await probe.store.get("default")).toBeUndefined();
  });

  it("gateway login stores the key in the keychain when one works, and logout removes it", async (ctx) => {
    const probe = process.env.DBUS_SESSION_BUS_ADDRESS ? await openKeychainStore() : undefined;
    if (!probe?.ok) {
      ctx.skip("no working Secret Service in this session");
      return;
    }
    const profile = `test-${process.pid}-${Date.now()}`;
    const home = newHome({ GATEWAY_CREDENTIAL_STORE: "keychain" });
    const cli = spawnCli(
      ["login", "--no-browser", "--base-url", gw.url, "--profile", profile],
      home.env,
    );
    const { userCode } = await loginPrompt(cli);
    await ownerDecides(gw, userCode, "approve");
    const done = await cli.exit();
    expect(done.code).toBe(0);
    expect(done.stdout).toContain('stored in OS keychain (service "model-gateway")');
    expect(() => statSync(home.credentialsPath)).toThrow();
    const stored = await probe.store.get(profile);
    expect(stored?.key).toMatch(/^kn-/);
    const whoami = await runCli(["whoami", "--profile", profile], home.env);
    expect(whoami.stdout).toContain("stored in: OS keychain");
    expect((await runCli(["logout", "--profile", profile], home.env)).code).toBe(0);
    expect(await probe.store.get(profile)).toBeUndefined();
  });
});
