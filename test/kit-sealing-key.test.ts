import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { sealingKeyAccount } from "../src/store/sqlite/sealing-key.js";
import { killRunningClis, spawnCli, spawnNode } from "./support/cli.js";
import {
  credentialSeen,
  type FakeUpstream,
  fakeUpstream,
  openaiJson,
} from "./support/fake-upstream.js";
import { ADMIN_KEY, baseConfigWith, KEY } from "./support/gateway.js";

/**
 * The test kit (`startGateway` from the package) on a database file, in a process whose
 * environment does not set GATEWAY_SECRET_KEY_STORE, as a user's suite runs it: it must leave the
 * developer's OS keychain alone (a temporary database per test would leave one entry each) and
 * print nothing, yet a restart on the same file opens the BYOK keys it sealed. The keychain is a
 * fake (test/support/fake-keyring) that records every call, so this holds on any machine.
 */

const root = join(import.meta.dirname, "..");
const kitEntry = pathToFileURL(join(root, "dist", "index.js")).href;
const fakeKeyring = pathToFileURL(
  join(import.meta.dirname, "support", "fake-keyring", "register.mjs"),
);
const BYOK = "sk-kit-byok-DDDD-0123456789";
const dirs: string[] = [];

let upstream: FakeUpstream;
let configFile: string;
beforeAll(async () => {
  upstream = await fakeUpstream("openai", () => openaiJson("ok"));
  const config: ConfigInput = baseConfigWith({
    providers: [{ id: "byok-prov", wire: "openai", base_url: upstream.baseUrl, api_keys: [] }],
    models: [{ name: "byok-model", provider: "byok-prov" }],
  });
  configFile = join(freshDir(), "config.json");
  writeFileSync(configFile, JSON.stringify(config));
});
afterAll(async () => {
  await upstream?.close();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});
afterEach(() => killRunningClis());

function freshDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "gateway-kit-sealing-"));
  dirs.push(dir);
  return dir;
}

/** A user's test: the kit on `KIT_DB`, a BYOK key linked when `KIT_LINK` holds one, one request on it. */
const kitScript = `
const { startGateway } = await import(process.env.KIT_ENTRY);
const gw = await startGateway({ db: process.env.KIT_DB, config: process.env.KIT_CONFIG });
try {
  if (process.env.KIT_LINK) {
    const linked = await fetch(gw.url + "/api/admin/accounts/acct/byok", {
      method: "POST",
      headers: { authorization: "Bearer " + process.env.KIT_ADMIN_KEY, "content-type": "application/json" },
      body: JSON.stringify({ provider: "byok-prov", key: process.env.KIT_LINK }),
    });
    if (linked.status !== 201) throw new Error("linking: " + linked.status + " " + (await linked.text()));
  }
  const res = await fetch(gw.url + "/v1/chat/completions", {
    method: "POST",
    headers: { authorization: "Bearer " + process.env.KIT_KEY, "content-type": "application/json" },
    body: JSON.stringify({ model: "byok-model", messages: [{ role: "user", content: "hi" }] }),
  });
  console.log(JSON.stringify({ status: res.status }));
} finally {
  await gw.close();
}
`;

interface Keychain {
  file: string;
  /** Set: every call fails with this text, as where no keychain works. */
  unavailable?: string;
}

interface Keyring {
  entries: Record<string, string>;
  calls: string[];
}

function keyringOf(keychain: Keychain): Keyring {
  return existsSync(keychain.file)
    ? (JSON.parse(readFileSync(keychain.file, "utf8")) as Keyring)
    : { entries: {}, calls: [] };
}

/** The user's environment: no GATEWAY_SECRET_KEY_STORE (vitest's own is not theirs), the fake keychain. */
function userEnv(keychain: Keychain, extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  delete env.GATEWAY_SECRET_KEY_STORE;
  delete env.GATEWAY_SECRET_KEY;
  delete env.FAKE_KEYRING_UNAVAILABLE;
  if (keychain.unavailable) env.FAKE_KEYRING_UNAVAILABLE = keychain.unavailable;
  return {
    ...env,
    NODE_OPTIONS: `--import=${fakeKeyring.href}`,
    FAKE_KEYRING_FILE: keychain.file,
    ...extra,
  };
}

/** Runs the user's test once: its exit, what it printed, and the key the provider was sent. */
async function runKit(db: string, keychain: Keychain, link?: string, extra?: NodeJS.ProcessEnv) {
  const script = join(freshDir(), "kit.mjs");
  writeFileSync(script, kitScript);
  const seen = upstream.requests.length;
  const done = await spawnNode(
    [script],
    userEnv(keychain, {
      KIT_ENTRY: kitEntry,
      KIT_DB: db,
      KIT_CONFIG: configFile,
      KIT_KEY: KEY,
      KIT_ADMIN_KEY: ADMIN_KEY,
      KIT_LINK: link ?? "",
      ...extra,
    }),
  ).exit(30_000);
  return {
    code: done.code,
    stdout: done.stdout,
    stderr: done.stderr,
    sent: upstream.requests.slice(seen).map(credentialSeen),
  };
}

describe("a test kit gateway on a database file, GATEWAY_SECRET_KEY_STORE unset", () => {
  for (const [where, unavailable] of [
    ["with an OS keychain that works", undefined],
    ["on a machine without one (headless CI)", "Cannot autolaunch D-Bus without X11 $DISPLAY"],
  ] as const) {
    it(`${where}: the keychain is not touched, nothing is printed, and a restart opens the BYOK key`, async () => {
      const keychain: Keychain = { file: join(freshDir(), "keyring.json"), unavailable };
      const db = join(freshDir(), "test.db");

      const first = await runKit(db, keychain, BYOK);
      expect(first.code, first.stderr).toBe(0);
      expect(first.stdout.trim()).toBe('{"status":200}');
      expect(first.sent).toEqual([BYOK]);
      expect(first.stderr).toBe("");

      // The next test (or the same one after a restart) on the same file.
      const second = await runKit(db, keychain);
      expect(second.code, second.stderr).toBe(0);
      expect(second.stdout.trim()).toBe('{"status":200}');
      expect(second.sent).toEqual([BYOK]);
      expect(second.stderr).toBe("");

      expect(keyringOf(keychain)).toEqual({ entries: {}, calls: [] });
      // The key beside the database, which only its owner reads.
      expect((statSync(`${db}.key`).mode & 0o777).toString(8)).toBe("600");
    }, 60_000);
  }

  it("a kit database whose key is in the keychain (an earlier version's, or serve's) still opens, and the keychain is only read", async () => {
    const keychain: Keychain = { file: join(freshDir(), "keyring.json") };
    const db = join(freshDir(), "kept.db");
    const account = sealingKeyAccount(db);
    const before = await runKit(db, keychain, BYOK, { GATEWAY_SECRET_KEY_STORE: "auto" });
    expect(before.code, before.stderr).toBe(0);
    expect(Object.keys(keyringOf(keychain).entries)).toEqual([`model-gateway/${account}`]);
    expect(existsSync(`${db}.key`)).toBe(false);
    const callsBefore = keyringOf(keychain).calls.length;

    const after = await runKit(db, keychain);
    expect(after.code, after.stderr).toBe(0);
    expect(after.sent).toEqual([BYOK]);
    expect(after.stderr).toBe("");
    expect(keyringOf(keychain).calls.slice(callsBefore)).toEqual([`get model-gateway ${account}`]);
    expect(existsSync(`${db}.key`)).toBe(false);
  }, 60_000);
});

/** `gateway serve --db db` started until it is ready, then stopped. */
async function serve(db: string, keychain: Keychain) {
  const served = spawnCli(["serve", "--port", "0", "--json", "--db", db], userEnv(keychain));
  await served.waitFor(/"url"/, 25_000);
  served.child.kill("SIGTERM");
  return served.exit();
}

describe("gateway serve, GATEWAY_SECRET_KEY_STORE unset", () => {
  it("keeps a new database's key in the OS keychain, as before", async () => {
    const keychain: Keychain = { file: join(freshDir(), "keyring.json") };
    const db = join(freshDir(), "gateway.db");
    const served = await serve(db, keychain);
    expect(served.code).toBe(0);
    expect(served.stderr).toBe("");
    expect(Object.keys(keyringOf(keychain).entries)).toEqual([
      `model-gateway/${sealingKeyAccount(db)}`,
    ]);
    expect(existsSync(`${db}.key`)).toBe(false);
  }, 60_000);

  it("announces the key file where no keychain works, as before", async () => {
    const keychain: Keychain = {
      file: join(freshDir(), "keyring.json"),
      unavailable: "Cannot autolaunch D-Bus without X11 $DISPLAY",
    };
    const db = join(freshDir(), "gateway.db");
    const served = await serve(db, keychain);
    expect(served.code).toBe(0);
    expect(served.stderr).toContain(
      `gateway: no OS keychain available (Cannot autolaunch D-Bus without X11 $DISPLAY); the BYOK sealing key is kept in ${db}.key beside the database`,
    );
    expect(existsSync(`${db}.key`)).toBe(true);
  }, 60_000);
});
