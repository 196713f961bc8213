import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { type AddressInfo, connect, type Server } from "node:net";
import { dirname, join } from "node:path";
import { createServer as createTlsServer } from "node:tls";
import { pathToFileURL } from "node:url";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { FinishedRequest } from "../src/server/http/request-trace.js";
import {
  type CliHome,
  cliHome,
  killRunningClis,
  loginPrompt,
  ownerDecides,
  runCli,
  saveLogin,
  spawnCli,
} from "./support/cli.js";
import {
  backends,
  chat,
  gatewayOn,
  KEY,
  post,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";
import { hasOpenssl, selfSignedCertificate } from "./support/tls.js";

/**
 * A developer's day with the built CLI (`bin/gateway` as a subprocess; `npm run build` first)
 * against real gateways on 127.0.0.1: two gateways, a login key revoked behind the CLI's back,
 * a locked keychain, URLs that lead elsewhere.
 */

let gwA: TestGateway;
let gwB: TestGateway;
const homes: CliHome[] = [];
const servers: Server[] = [];

/** Gateway B's serve lines, which a refusal's quoted request id must name. */
const linesB: FinishedRequest[] = [];

beforeAll(async () => {
  [gwA, gwB] = await Promise.all([
    testGateway({ devicePollIntervalSeconds: 1 }),
    testGateway({ devicePollIntervalSeconds: 1, onRequest: (line) => linesB.push(line) }),
  ]);
});
afterAll(async () => {
  await Promise.all([gwA?.close(), gwB?.close()]);
});
afterEach(async () => {
  killRunningClis();
  for (const home of homes.splice(0)) home.remove();
  await Promise.all(servers.splice(0).map((s) => new Promise((resolve) => s.close(resolve))));
});

function newHome(env: NodeJS.ProcessEnv = {}): CliHome {
  const home = cliHome(env);
  homes.push(home);
  return home;
}

/** A login key minted on `gw`, as `gateway login` would have stored it under `profile`. */
async function logIn(home: CliHome, gw: TestGateway, profile = "default", baseUrl = gw.url) {
  const { key, value } = await gw.services.store.createKey({
    accountId: "acct",
    label: "gateway login on this machine",
    kind: "login",
  });
  saveLogin(home, { key: value, baseUrl, keyId: key.id, accountId: "acct" }, profile);
  return { key: value, id: key.id };
}

async function works(gw: TestGateway, key: string): Promise<number> {
  return (await post(gw, "/v1/chat/completions", chat(), { authorization: `Bearer ${key}` }))
    .status;
}

/** A server that is not the gateway: it records the keys sent to it and refuses them all. */
async function keyCollector(): Promise<{ url: string; seen: (string | undefined)[] }> {
  const seen: (string | undefined)[] = [];
  const server = createServer((req, res) => {
    seen.push(req.headers.authorization);
    res.writeHead(401, { "content-type": "text/plain" }).end("invalid API key");
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

/** A port nothing listens on: bound, read and released. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

const storedKey = (home: CliHome, profile = "default") =>
  (
    JSON.parse(readFileSync(home.credentialsPath, "utf8")) as {
      profiles: Record<string, { key: string; baseUrl: string; keyId: string }>;
    }
  ).profiles[profile];

describe("gateway logout and another gateway's URL", () => {
  it("refuses a --base-url or GATEWAY_BASE_URL naming another server: nothing is sent, the key stays stored and working", async () => {
    const home = newHome();
    const login = await logIn(home, gwA);
    const other = await keyCollector();
    for (const run of [
      { args: ["--base-url", other.url], env: {} },
      { args: [], env: { GATEWAY_BASE_URL: `${other.url}/v1` } },
    ]) {
      const done = await runCli(["logout", ...run.args], { ...home.env, ...run.env });
      expect(done.code).toBe(1);
      expect(done.stderr).toBe(
        `gateway: the login key is for ${gwA.url}, not ${other.url}; run \`npx gateway login --base-url ${other.url}\` to log in there (or set GATEWAY_API_KEY)\n`,
      );
      expect(done.stdout).toBe("");
    }
    expect(other.seen).toEqual([]);
    expect(storedKey(home).key).toBe(login.key);
    expect(await works(gwA, login.key)).toBe(200);
  });
});

describe("gateway login to a second gateway under the same profile", () => {
  it("says before the browser that it replaces the first login, and revokes that login key on its own gateway", async () => {
    const home = newHome();
    const first = await logIn(home, gwA);
    const cli = spawnCli(["login", "--no-browser", "--base-url", gwB.url], home.env);
    const { userCode } = await loginPrompt(cli);
    expect(cli.stderr()).toContain(
      `Note: profile "default" is logged in to ${gwA.url}; this login replaces it and revokes that login key there. To keep both, stop now (Ctrl-C) and add --profile NAME.\n`,
    );
    expect(cli.stderr().indexOf("Note: profile")).toBeLessThan(
      cli.stderr().indexOf("Open this URL"),
    );
    expect((await ownerDecides(gwB, userCode, "approve")).status).toBe(200);
    const done = await cli.exit();
    expect(done.code).toBe(0);
    expect(storedKey(home).baseUrl).toBe(gwB.url);
    expect(await works(gwB, storedKey(home).key)).toBe(200);
    // Nobody holds the first key any more: it must not stay valid on its gateway.
    expect(await works(gwA, first.key)).toBe(401);
    expect(gwA.services.store.getKey(first.id)!.revoked_at).not.toBeNull();
  });

  it("says so when the first gateway cannot be reached to revoke its login key", async () => {
    const home = newHome();
    const gone = `http://127.0.0.1:${await closedPort()}`;
    const first = await logIn(home, gwA, "default", gone);
    const cli = spawnCli(["login", "--no-browser", "--base-url", gwB.url], home.env);
    const { userCode } = await loginPrompt(cli);
    await ownerDecides(gwB, userCode, "approve");
    const done = await cli.exit();
    expect(done.code).toBe(0);
    expect(done.stderr).toContain(
      `gateway: the previous login key ${first.id} of profile "default" could not be revoked on ${gone} (not reachable); it stays valid there until revoked in that gateway's dashboard\n`,
    );
  });
});

describe("a login key the gateway no longer takes", () => {
  /** The request id a refusal names, which must be the id of that request's serve line. */
  const quotedId = (stderr: string) => /\(HTTP 401, request (req_[\w-]+)\)/.exec(stderr)?.[1];

  it("every command says which login key (id and prefix, never the key), that it was revoked, the request, and the login that gets a new key for that gateway and profile", async () => {
    const home = newHome();
    const login = await logIn(home, gwB, "staging");
    await gwB.services.store.revokeKey(login.id);
    for (const args of [
      ["keys", "list", "--profile", "staging"],
      ["keys", "create", "--label", "ci", "--profile", "staging"],
      ["whoami", "--profile", "staging"],
    ]) {
      const done = await runCli(args, home.env);
      expect(done.code).toBe(1);
      expect(done.stdout).toBe("");
      const id = quotedId(done.stderr);
      expect(done.stderr).toBe(
        `gateway: the gateway at ${gwB.url} refused the login key ${login.id} (${login.key.slice(0, 7)}...) of profile "staging": it was revoked, on the gateway's dashboard or by a logout (HTTP 401, request ${id}); run \`npx gateway login --base-url ${gwB.url} --profile staging\` again\n`,
      );
      expect(done.stderr).not.toContain(login.key.slice(7));
      expect(linesB.find((line) => line.requestId === id)).toMatchObject({
        status: 401,
        errorCode: "key_revoked",
      });
    }
  });

  it("a login key the gateway has no record of (its database replaced) and a GATEWAY_API_KEY it refuses are named as such", async () => {
    const home = newHome();
    const unknown = "kn-never-made-on-this-gateway-000000000";
    saveLogin(home, { key: unknown, baseUrl: gwB.url, keyId: "key_gone", accountId: "acct" });
    const cases: [NodeJS.ProcessEnv, string, string][] = [
      [
        home.env,
        `the login key key_gone (${unknown.slice(0, 7)}...) of profile "default"`,
        `run \`npx gateway login --base-url ${gwB.url}\` again`,
      ],
      [
        { ...home.env, GATEWAY_API_KEY: unknown },
        `the key in GATEWAY_API_KEY (${unknown.slice(0, 7)}...)`,
        "check GATEWAY_API_KEY, or unset it to use the key from `npx gateway login`",
      ],
    ];
    for (const [env, which, next] of cases) {
      const done = await runCli(["whoami"], { ...env, GATEWAY_BASE_URL: gwB.url });
      expect(done.code).toBe(1);
      const id = quotedId(done.stderr);
      expect(done.stderr).toBe(
        `gateway: the gateway at ${gwB.url} refused ${which}: this gateway has no such key, as when its database was replaced or the key is another gateway's (HTTP 401, request ${id}); ${next}\n`,
      );
      expect(done.stderr).not.toContain(unknown.slice(7));
      expect(linesB.find((line) => line.requestId === id)).toMatchObject({
        status: 401,
        errorCode: "key_unknown",
      });
    }
  });
});

describe("gateway keys revoke of the login key itself", () => {
  it("points to logout instead of answering that no such key exists, and revokes nothing", async () => {
    const home = newHome();
    const login = await logIn(home, gwA);
    const done = await runCli(["keys", "revoke", login.id], home.env);
    expect(done.code).toBe(1);
    expect(done.stderr).toBe(
      `gateway: ${login.id} is the login key this CLI uses, not a per-tool key; \`npx gateway logout\` revokes it and removes it from this machine\n`,
    );
    expect(await works(gwA, login.key)).toBe(200);
  });
});

describe.each(backends)("per-tool keys after a re-login (%s)", (backend) => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await gatewayOn(backend, { devicePollIntervalSeconds: 1 });
  });
  afterAll(() => gw?.close());

  it("keys list shows the keys the replaced login key made and keys revoke revokes them; the account's other keys are neither listed nor revoked", async () => {
    const home = newHome();
    const first = await logIn(home, gw);
    const made = await runCli(["keys", "create", "--label", "my-editor", "--json"], home.env);
    expect(made.code, made.stderr).toBe(0);
    const editor = JSON.parse(made.stdout) as { id: string; key: string };
    // A key the owner made in the dashboard: the account's, not one this CLI made.
    const owners = await gw.services.store.createKey({
      accountId: "acct",
      label: "owner-app",
      kind: "standard",
    });

    const relogin = spawnCli(["login", "--no-browser", "--base-url", gw.url], home.env);
    const { userCode } = await loginPrompt(relogin);
    expect((await ownerDecides(gw, userCode, "approve")).status).toBe(200);
    expect((await relogin.exit()).code).toBe(0);
    expect(storedKey(home).keyId).not.toBe(first.id);
    expect(await works(gw, first.key)).toBe(401);

    const list = await runCli(["keys", "list", "--json"], home.env);
    expect(list.code, list.stderr).toBe(0);
    expect((JSON.parse(list.stdout) as { data: { id: string }[] }).data.map((k) => k.id)).toEqual([
      editor.id,
    ]);
    const revoked = await runCli(["keys", "revoke", "my-editor"], home.env);
    expect(revoked.code, revoked.stderr).toBe(0);
    expect(revoked.stdout).toBe(`Revoked key ${editor.id}; requests with it now get 401.\n`);
    expect(await works(gw, editor.key)).toBe(401);

    for (const target of [owners.key.id, owners.key.label]) {
      const refused = await runCli(["keys", "revoke", target], home.env);
      expect(refused.code).toBe(1);
      expect(refused.stderr).toBe(
        `gateway: No key with id or label "${target}" among your keys (404 not_found)\n`,
      );
    }
    expect(await works(gw, owners.value)).toBe(200);
  });
});

describe("a stored login that cannot be read", () => {
  const fakeKeyring = pathToFileURL(
    join(import.meta.dirname, "support", "fake-keyring", "register.mjs"),
  ).href;

  it("a locked keychain holding the login is named, not taken for 'not logged in'; the login survives it", async () => {
    const home = newHome();
    const keyringFile = join(home.dir, "keyring.json");
    const { key, value } = gwA.services.store.createKey({
      accountId: "acct",
      label: "in the keychain",
      kind: "login",
    });
    const entry = { key: value, baseUrl: gwA.url, keyId: key.id, accountId: "acct", savedAt: "" };
    writeFileSync(
      keyringFile,
      JSON.stringify({ entries: { "model-gateway/default": JSON.stringify(entry) }, calls: [] }),
    );
    const env: NodeJS.ProcessEnv = {
      ...home.env,
      NODE_OPTIONS: `--import=${fakeKeyring}`,
      FAKE_KEYRING_FILE: keyringFile,
    };
    delete env.GATEWAY_CREDENTIAL_STORE;
    const unlocked = await runCli(["whoami", "--json"], env);
    expect(unlocked.code).toBe(0);
    expect(JSON.parse(unlocked.stdout)).toMatchObject({ key_id: key.id });

    const locked = {
      ...env,
      FAKE_KEYRING_UNAVAILABLE: "Cannot create an item in a locked collection",
    };
    const list = await runCli(["keys", "list"], locked);
    expect(list.code).toBe(1);
    expect(list.stderr).toBe(
      "gateway: not logged in, or the login is in the OS keychain, which could not be read (Cannot create an item in a locked collection); unlock the keychain and try again, or run `npx gateway login` (or set GATEWAY_API_KEY)\n",
    );
    const logout = await runCli(["logout"], locked);
    expect(logout.code).toBe(1);
    expect(logout.stderr).toBe(
      'gateway: no login found for profile "default", but the OS keychain, which may hold it, could not be read (Cannot create an item in a locked collection); unlock the keychain and run this again\n',
    );
    expect(await works(gwA, value)).toBe(200);
    expect((await runCli(["whoami"], env)).code).toBe(0);
  });

  it("a login made while the keychain was locked is the one used once it opens; the keychain's older login is revoked and removed", async () => {
    const home = newHome();
    const keyringFile = join(home.dir, "keyring.json");
    const { key, value } = gwA.services.store.createKey({
      accountId: "acct",
      label: "in the keychain",
      kind: "login",
    });
    const entry = {
      key: value,
      baseUrl: gwA.url,
      keyId: key.id,
      accountId: "acct",
      savedAt: new Date().toISOString(),
    };
    writeFileSync(
      keyringFile,
      JSON.stringify({ entries: { "model-gateway/default": JSON.stringify(entry) }, calls: [] }),
    );
    const env: NodeJS.ProcessEnv = {
      ...home.env,
      NODE_OPTIONS: `--import=${fakeKeyring}`,
      FAKE_KEYRING_FILE: keyringFile,
    };
    delete env.GATEWAY_CREDENTIAL_STORE;
    const locked = {
      ...env,
      FAKE_KEYRING_UNAVAILABLE: "Cannot create an item in a locked collection",
    };
    const cli = spawnCli(["login", "--no-browser", "--base-url", gwA.url], locked);
    const { userCode } = await loginPrompt(cli);
    await ownerDecides(gwA, userCode, "approve");
    const login = await cli.exit();
    expect(login.code, login.stderr).toBe(0);
    const newer = storedKey(home);

    const unlocked = await runCli(["whoami", "--json"], env);
    expect(unlocked.code, unlocked.stderr).toBe(0);
    expect(JSON.parse(unlocked.stdout)).toMatchObject({
      key_id: newer.keyId,
      stored_in: `${home.credentialsPath}, profile "default"`,
    });
    expect(unlocked.stderr).toBe(
      `gateway: revoked login key ${key.id} of profile "default", which a newer login replaced, and removed it from OS keychain (service "model-gateway")\n`,
    );
    // Nobody holds the keychain's key any more: as with any replaced login, it must not stay valid.
    expect(await works(gwA, value)).toBe(401);
    expect((JSON.parse(readFileSync(keyringFile, "utf8")) as { entries: object }).entries).toEqual(
      {},
    );
    const again = await runCli(["keys", "list"], env);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stderr).toBe("");
    expect(await works(gwA, newer.key)).toBe(200);
  });

  it("a damaged credentials file is named, not taken for 'not logged in'", async () => {
    const home = newHome();
    mkdirSync(dirname(home.credentialsPath), { recursive: true, mode: 0o700 });
    writeFileSync(home.credentialsPath, '{"version":1,"profiles":', { mode: 0o600 });
    const done = await runCli(["keys", "list", "--base-url", gwA.url], home.env);
    expect(done.code).toBe(1);
    expect(done.stderr).toBe(
      `gateway: ${home.credentialsPath} is damaged; delete it and run \`npx gateway login\` again\n`,
    );
  });
});

describe("a gateway URL that leads elsewhere", () => {
  it("https to the gateway's plain-http port: one line saying to use http://", async () => {
    const home = newHome({ GATEWAY_API_KEY: KEY });
    const https = gwA.url.replace(/^http:/, "https:");
    const done = await runCli(["whoami", "--base-url", https], home.env);
    expect(done.code).toBe(1);
    expect(done.stderr).toBe(
      `gateway: the gateway at ${https} answers plain HTTP, not HTTPS; use ${gwA.url} (--base-url or GATEWAY_BASE_URL)\n`,
    );
  });

  it.skipIf(!hasOpenssl)(
    `http:// to a port that speaks HTTPS: one line saying the server may speak HTTPS, and the https:// URL it names works${hasOpenssl ? "" : " [SKIPPED: openssl is not on PATH]"}`,
    async () => {
      const home = newHome({ GATEWAY_API_KEY: KEY });
      const { key, cert } = selfSignedCertificate();
      // TLS in front of the gateway, as a proxy would terminate it.
      const terminator = createTlsServer({ key, cert }, (socket) => {
        const gateway = connect(Number(new URL(gwA.url).port), "127.0.0.1");
        socket.pipe(gateway).pipe(socket);
        socket.on("error", () => gateway.destroy());
        gateway.on("error", () => socket.destroy());
      });
      servers.push(terminator);
      await new Promise<void>((resolve) => terminator.listen(0, "127.0.0.1", resolve));
      const { port } = terminator.address() as AddressInfo;

      const done = await runCli(["whoami", "--base-url", `http://127.0.0.1:${port}`], home.env);
      expect(done.code).toBe(1);
      expect(done.stderr).toBe(
        `gateway: the server at http://127.0.0.1:${port} closed the connection without answering; it may speak HTTPS: try https://127.0.0.1:${port} (--base-url or GATEWAY_BASE_URL)\n`,
      );
      const ca = join(home.dir, "ca.pem");
      writeFileSync(ca, cert);
      const https = await runCli(["whoami", "--base-url", `https://127.0.0.1:${port}`], {
        ...home.env,
        NODE_EXTRA_CA_CERTS: ca,
      });
      expect(https.code, https.stderr).toBe(0);
      expect(https.stdout).toContain("account:   acct");
    },
  );

  it("a path under which no gateway answers (an endpoint's whole URL, a wrong prefix) says to give the gateway's address", async () => {
    const home = newHome({ GATEWAY_API_KEY: KEY });
    for (const url of [`${gwA.url}/gw`, `${gwA.url}/v1/chat/completions`]) {
      const done = await runCli(["whoami", "--base-url", url], home.env);
      expect(done.code).toBe(1);
      expect(done.stderr).toBe(
        `gateway: no gateway API at ${url} (HTTP 404); give --base-url or GATEWAY_BASE_URL the gateway's address, such as http://127.0.0.1:8787, or its /v1 URL\n`,
      );
    }
    const login = await runCli(["login", "--no-browser", "--base-url", `${gwA.url}/gw`], home.env);
    expect(login.code).toBe(1);
    expect(login.stderr).toContain(`gateway: no gateway API at ${gwA.url}/gw (HTTP 404)`);
  });
});

describe("gateway keys create --label, logged in", () => {
  it("a label that is blank or over 100 characters is refused in the CLI's words before anything is sent; characters count as the gateway counts them, an emoji as one", async () => {
    const home = newHome();
    // The database file's own key beside it (`<db>.key`), not one a Postgres suite here exported.
    delete home.env.GATEWAY_SECRET_KEY;
    await logIn(home, gwA);
    const keysBefore = gwA.services.store.listKeys("acct").length;
    for (const label of ["x".repeat(101), "\u{1F511}".repeat(101), "   "]) {
      for (const where of [[], ["--db", gwA.dbPath]]) {
        const done = await runCli(["keys", "create", "--label", label, ...where], home.env);
        // A flag value out of range: the command line's mistake (docs/cli.md's exit codes).
        expect(done.code).toBe(2);
        expect(done.stderr).toBe(
          "gateway: --label must be 1 to 100 characters (what the key is for), e.g. --label ci\n",
        );
      }
    }
    expect(gwA.services.store.listKeys("acct")).toHaveLength(keysBefore);

    // 100 emoji: 200 UTF-16 units, 100 characters, taken by the gateway and the database file alike.
    const emoji = "\u{1F511}".repeat(100);
    for (const where of [[], ["--db", gwA.dbPath]]) {
      const done = await runCli(["keys", "create", "--label", emoji, "--json", ...where], home.env);
      expect(done.code, done.stderr).toBe(0);
      expect((JSON.parse(done.stdout) as { label: string }).label).toBe(emoji);
    }
  });
});

describe("gateway with a command group and no subcommand", () => {
  it("prints the group's help as --help does: on stdout, exit 0, its Usage line as this user runs the CLI", async () => {
    const home = newHome();
    for (const group of [[], ["keys"], ["secrets"]]) {
      const bare = await runCli(group, home.env);
      const help = await runCli([...group, "--help"], home.env);
      expect(bare.code, group.join(" ")).toBe(0);
      expect(bare.stderr, group.join(" ")).toBe("");
      expect(bare.stdout, group.join(" ")).toBe(help.stdout);
      expect(bare.stdout).toMatch(new RegExp(`^Usage: npx gateway ${group.join(" ")}`));
    }
  });
});
