import { randomBytes } from "node:crypto";
import {
  chmodSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { type RunningGateway, startGateway } from "../src/server/gateway.js";
import { SecretKeyError } from "../src/store/secret-box.js";
import { migrations } from "../src/store/sqlite/migrations.js";
import { Store } from "../src/store/sqlite/store.js";
import { killRunningClis, runCli } from "./support/cli.js";
import { byokSecretsOnDisk, foreignConnection } from "./support/database-file.js";
import {
  credentialSeen,
  type FakeUpstream,
  fakeUpstream,
  type Handler,
  openaiJson,
  openaiStreamSteps,
} from "./support/fake-upstream.js";
import { ADMIN_KEY, baseConfigWith, KEY, post } from "./support/gateway.js";
import { serveProcess } from "./support/serve-process.js";

/**
 * Issue 12, point 1: nothing the gateway writes is readable by other local users, provider keys
 * never reach the disk, and BYOK keys reach it only encrypted under a key kept apart.
 */

const POOL_KEY = "sk-pool-secret-AAAA-0123456789";
const CONFIG_BYOK = "sk-config-byok-BBBB-0123456789";
const ADMIN_BYOK = "sk-admin-byok-CCCC-0123456789";
const secrets = [POOL_KEY, CONFIG_BYOK, ADMIN_BYOK];

const root = mkdtempSync(join(tmpdir(), "gateway-secrets-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));
afterEach(() => killRunningClis());

let upstream: FakeUpstream;
const answer: Handler = (req) =>
  req.body.stream ? { kind: "sse", steps: openaiStreamSteps(["streamed"]) } : openaiJson("ok");
beforeAll(async () => {
  upstream = await fakeUpstream("openai");
});
afterAll(() => upstream?.close());

function config(): ConfigInput {
  return baseConfigWith({
    providers: [
      { id: "pooled", wire: "openai", base_url: upstream.baseUrl, api_keys: [POOL_KEY] },
      { id: "byok-prov", wire: "openai", base_url: upstream.baseUrl, api_keys: [] },
    ],
    models: [
      { name: "pooled-model", provider: "pooled", price_input_per_mtok: 1_000 },
      { name: "byok-model", provider: "byok-prov", price_input_per_mtok: 1_000 },
    ],
    accounts: (accounts) => [
      {
        ...accounts[0],
        byok: [{ provider: "byok-prov", key: CONFIG_BYOK }],
      },
      ...accounts.slice(1),
    ],
  });
}

const freshDir = () => mkdtempSync(join(root, "db-"));

function modes(dir: string): Record<string, string> {
  return Object.fromEntries(
    readdirSync(dir).map((f) => [f, (statSync(join(dir, f)).mode & 0o777).toString(8)]),
  );
}

/** Every file in the directory, byte for byte, that contains one of `needles`. */
function filesHolding(dir: string, needles: string[]): string[] {
  const found: string[] = [];
  for (const file of readdirSync(dir)) {
    const bytes = readFileSync(join(dir, file));
    for (const needle of needles) {
      if (bytes.includes(Buffer.from(needle))) found.push(`${file}: ${needle}`);
    }
  }
  return found;
}

const openai = (gw: { url: string }) =>
  new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 10_000 });

/** Asks each model once whole and once streamed; returns the credentials the upstream saw. */
async function useEveryKey(gw: RunningGateway): Promise<(string | undefined)[]> {
  upstream.reset(answer);
  const client = openai(gw);
  for (const model of ["pooled-model", "byok-model"]) {
    const messages = [{ role: "user" as const, content: "hi" }];
    await client.chat.completions.create({ model, messages });
    await client.chat.completions.stream({ model, messages }).finalChatCompletion();
  }
  return upstream.requests.map(credentialSeen);
}

describe("files the gateway writes", () => {
  it("are owner-only and hold no provider or BYOK key, across requests and a restart", async () => {
    const dir = freshDir();
    const db = join(dir, "gateway.db");
    let gw = await startGateway({ config: config(), db, port: 0 });
    const linked = await post(
      gw,
      "/api/admin/accounts/acct/byok",
      { provider: "byok-prov", key: ADMIN_BYOK },
      { authorization: `Bearer ${ADMIN_KEY}` },
    );
    expect(linked.status).toBe(201);
    expect(await useEveryKey(gw)).toEqual([POOL_KEY, POOL_KEY, CONFIG_BYOK, CONFIG_BYOK]);

    // While it runs: the WAL and shared memory exist, the journal too.
    const running = modes(dir);
    expect(Object.keys(running).sort()).toEqual(
      [
        "gateway.db",
        "gateway.db-lock",
        "gateway.db-settlements",
        "gateway.db-shm",
        "gateway.db-wal",
        "gateway.db.key",
      ].sort(),
    );
    for (const [file, mode] of Object.entries(running)) expect([file, mode]).toEqual([file, "600"]);
    expect(filesHolding(dir, secrets)).toEqual([]);
    await gw.close();
    expect(filesHolding(dir, secrets)).toEqual([]);

    // The same config at the next start: pool keys from memory, BYOK keys opened from the file.
    gw = await startGateway({ config: config(), db, port: 0 });
    try {
      expect(await useEveryKey(gw)).toEqual([POOL_KEY, POOL_KEY, CONFIG_BYOK, CONFIG_BYOK]);
      const listed = await fetch(`${gw.url}/api/admin/accounts/acct/byok`, {
        headers: { authorization: `Bearer ${ADMIN_KEY}` },
      });
      const hints = ((await listed.json()) as { data: { key_hint: string }[] }).data;
      expect(hints.map((b) => b.key_hint)).toEqual(["...6789", "...6789"]);
      expect(gw.services.store.listByok("acct").map((b) => b.secret)).toEqual([
        CONFIG_BYOK,
        ADMIN_BYOK,
      ]);
      for (const [file, mode] of Object.entries(modes(dir))) {
        expect([file, mode]).toEqual([file, "600"]);
      }
      expect(filesHolding(dir, secrets)).toEqual([]);
    } finally {
      await gw.close();
    }
  });

  it("tightens a database and its WAL that were created readable by everyone", async () => {
    const dir = freshDir();
    const db = join(dir, "gateway.db");
    const old = foreignConnection(db);
    old.pragma("journal_mode = WAL");
    old.exec("CREATE TABLE leftover (x)");
    // A process that died leaves its WAL behind.
    writeFileSync(`${db}-settlements`, "");
    for (const f of readdirSync(dir)) chmodSync(join(dir, f), 0o644);
    const gw = await startGateway({ config: config(), db, port: 0 });
    try {
      old.close();
      for (const [file, mode] of Object.entries(modes(dir))) {
        expect([file, mode]).toEqual([file, "600"]);
      }
    } finally {
      await gw.close();
    }
  });
});

describe("a database written before secrets left it", () => {
  it("loses its plain provider and BYOK keys at the upgrade, keeping BYOK usable", () => {
    const dir = freshDir();
    const db = join(dir, "old.db");
    const old = foreignConnection(db);
    old.pragma("journal_mode = WAL");
    for (let v = 0; v < 4; v++) old.exec(migrations[v]);
    old.pragma("user_version = 4");
    old.exec(`
      INSERT INTO accounts (id, created_at) VALUES ('acct', 0);
      INSERT INTO providers (id, wire, base_url, api_keys_json) VALUES ('p', 'openai', 'http://x', '["${POOL_KEY}"]');
      INSERT INTO byok_credentials (id, account_id, provider_id, secret, created_at) VALUES ('b1', 'acct', 'p', '${CONFIG_BYOK}', 0);
      INSERT INTO byok_credentials (id, account_id, provider_id, secret, created_at) VALUES ('b2', 'acct', 'p', '${ADMIN_BYOK}', 1);
    `);
    // A row deleted earlier left its bytes in a free page; a copy sits in the WAL.
    old.exec(
      "INSERT INTO byok_credentials VALUES ('gone', 'acct', 'p', 'sk-deleted-DDDD-012345', '', 9, 2)",
    );
    old.exec("DELETE FROM byok_credentials WHERE id = 'gone'");
    expect(filesHolding(dir, [POOL_KEY, CONFIG_BYOK])).not.toEqual([]);

    const store = new Store(db);
    try {
      expect(store.listByok("acct").map((b) => b.secret)).toEqual([CONFIG_BYOK, ADMIN_BYOK]);
      expect(store.getCatalog().providers.get("p")?.api_key_count).toBe(1);
      expect(store.providersWithoutKeys()).toEqual(["p"]);
    } finally {
      store.close();
      old.close();
    }
    expect(filesHolding(dir, [...secrets, "sk-deleted-DDDD-012345"])).toEqual([]);
  });
});

describe("the secret key", () => {
  async function sealedDatabase(env: NodeJS.ProcessEnv = {}): Promise<string> {
    const dir = freshDir();
    const db = join(dir, "gateway.db");
    const gw = await serveProcess(["--db", db, "--config", writeConfig(dir)], env);
    const linked = await post(
      gw,
      "/api/admin/accounts/acct/byok",
      { provider: "byok-prov", key: ADMIN_BYOK },
      { authorization: `Bearer ${ADMIN_KEY}` },
    );
    expect(linked.status).toBe(201);
    expect(await gw.stop()).toBe(0);
    return db;
  }
  const writeConfig = (dir: string) => {
    const path = join(dir, "..", `${dir.split("/").pop()}.json`);
    writeFileSync(path, JSON.stringify(config()));
    return path;
  };
  const byokOf = (db: string, secretKey?: string) => {
    const store = new Store(db, { secretKey });
    try {
      return store.listByok("acct").map((b) => b.secret);
    } finally {
      store.close();
    }
  };

  it("stops start-up with one clear line when the key is wrong or missing", async () => {
    const db = await sealedDatabase();
    const wrong = randomBytes(32).toString("base64");
    const started = await runCli(["serve", "--port", "0", "--db", db], {
      ...process.env,
      GATEWAY_SECRET_KEY: wrong,
    });
    expect(started.code).not.toBe(0);
    expect(started.stderr.trim()).toBe(
      `gateway: the secret key from GATEWAY_SECRET_KEY does not open the BYOK keys in ${db} (a wrong key, or one from another database); use the key this database was sealed with: ${db}.key beside it may hold that key (unset GATEWAY_SECRET_KEY to use it)`,
    );
    expect(() => byokOf(db, wrong)).toThrow(SecretKeyError);

    rmSync(`${db}.key`);
    const missing = await runCli(["serve", "--port", "0", "--db", db], process.env);
    expect(missing.code).not.toBe(0);
    expect(missing.stderr).toMatch(/holds BYOK keys sealed with a key that is missing/);
    // The missing key was not silently replaced by a new one.
    expect(existsSync(`${db}.key`)).toBe(false);
  });

  it("takes the key from GATEWAY_SECRET_KEY and writes no key file then", async () => {
    const key = randomBytes(32).toString("base64");
    const db = await sealedDatabase({ GATEWAY_SECRET_KEY: key });
    expect(existsSync(`${db}.key`)).toBe(false);
    expect(byokOf(db, key)).toEqual([CONFIG_BYOK, ADMIN_BYOK]);
  });

  it("rotates: every BYOK key re-encrypted under a new key file; the old key opens nothing", async () => {
    const db = await sealedDatabase();
    const oldKey = readFileSync(`${db}.key`, "utf8").trim();
    const sealed = byokSecretsOnDisk(db);
    expect(sealed).toHaveLength(2);
    const rotated = await runCli(["secrets", "rotate", "--db", db, "--json"], process.env);
    expect(rotated.stderr).toBe("");
    expect(JSON.parse(rotated.stdout)).toEqual({ rotated: 2, base_urls: 0, key: `${db}.key` });
    const newKey = readFileSync(`${db}.key`, "utf8").trim();
    expect(newKey).not.toBe(oldKey);
    expect((statSync(`${db}.key`).mode & 0o777).toString(8)).toBe("600");
    expect(() => byokOf(db, oldKey)).toThrow(SecretKeyError);
    expect(byokOf(db)).toEqual([CONFIG_BYOK, ADMIN_BYOK]);
    // Old ciphertexts are not left behind in freed space, where the old key would open them.
    expect(filesHolding(join(db, ".."), [...secrets, ...sealed])).toEqual([]);

    // And the gateway serves BYOK requests with the rotated key.
    const gw = await serveProcess(["--db", db, "--config", writeConfig(join(db, ".."))]);
    try {
      upstream.reset(answer);
      await openai(gw).chat.completions.create({
        model: "byok-model",
        messages: [{ role: "user", content: "hi" }],
      });
      expect(upstream.requests.map(credentialSeen)).toEqual([CONFIG_BYOK]);
      // Not while a server holds the old key in memory.
      const refused = await runCli(["secrets", "rotate", "--db", db], process.env);
      expect(refused.code).not.toBe(0);
      expect(refused.stderr).toMatch(/`gateway serve` \(pid \d+\) runs on .*; stop it/);
    } finally {
      await gw.stop();
    }
  });

  it("rotates a key kept in the environment to GATEWAY_NEW_SECRET_KEY", async () => {
    const oldKey = randomBytes(32).toString("base64");
    const newKey = randomBytes(32).toString("base64");
    const db = await sealedDatabase({ GATEWAY_SECRET_KEY: oldKey });
    const asked = await runCli(["secrets", "rotate", "--db", db], {
      ...process.env,
      GATEWAY_SECRET_KEY: oldKey,
    });
    expect(asked.code).not.toBe(0);
    expect(asked.stderr).toMatch(/put the new key in GATEWAY_NEW_SECRET_KEY/);
    const rotated = await runCli(["secrets", "rotate", "--db", db], {
      ...process.env,
      GATEWAY_SECRET_KEY: oldKey,
      GATEWAY_NEW_SECRET_KEY: newKey,
    });
    expect(rotated.code).toBe(0);
    expect(() => byokOf(db, oldKey)).toThrow(SecretKeyError);
    expect(byokOf(db, newKey)).toEqual([CONFIG_BYOK, ADMIN_BYOK]);
  });
});
