import { randomBytes } from "node:crypto";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import OpenAI from "openai";
import pg from "pg";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { type RunningGateway, startGateway } from "../src/server/gateway.js";
import { openPostgresPool } from "../src/store/postgres/connect.js";
import { migratePostgres, postgresMigrations } from "../src/store/postgres/migrations.js";
import { PostgresStore } from "../src/store/postgres/store.js";
import { secretKeyEnv } from "../src/store/secret-box.js";
import { migrations } from "../src/store/sqlite/migrations.js";
import { Store } from "../src/store/sqlite/store.js";
import { killRunningClis, runCli } from "./support/cli.js";
import { foreignConnection } from "./support/database-file.js";
import {
  type FakeUpstream,
  fakeUpstream,
  type Handler,
  openaiError,
  openaiJson,
  openaiStreamSteps,
} from "./support/fake-upstream.js";
import { ADMIN_KEY, type BackendName, backends, baseConfigWith, KEY } from "./support/gateway.js";
import { createTestDatabase } from "./support/postgres.js";

/**
 * A provider's base_url can carry a credential: Gemini and several OpenAI-compatible servers take
 * their key in the query (`?key=`). On both backends the providers row keeps none of it in plain
 * text (it is sealed as BYOK keys are), calls still carry it, and no answer, error, log line or
 * cassette shows it. A user and password in it, which the gateway does not send, are refused in a
 * config; a database from before that holds one seals it all the same.
 */

const URL_KEY = "AIzaSy-url-key-secret-0123456789";
const USER = "proxy-user-7f3a";
const PASS = "proxy-pass-9c2e1b";
const secrets = [URL_KEY, USER, PASS];

let upstream: FakeUpstream;

/** The fake provider answers only a call that carries the URL's key (as Gemini takes it). */
const keyedAnswer: Handler = (req) => {
  const query = new URL(req.path, "http://fake").searchParams;
  if (query.get("key") !== URL_KEY)
    return openaiError(401, "API key not valid.", "invalid_api_key");
  return req.body.stream ? { kind: "sse", steps: openaiStreamSteps(["ok"]) } : openaiJson("ok");
};

beforeAll(async () => {
  upstream = await fakeUpstream("openai", keyedAnswer);
});
afterAll(() => upstream?.close());
afterEach(() => killRunningClis());

const keyedUrl = () => `${upstream.baseUrl}?key=${URL_KEY}&api-version=2024-10-21`;

function config(): ConfigInput {
  return baseConfigWith({
    providers: [
      { id: "keyed", wire: "openai", base_url: keyedUrl() },
      { id: "plain", wire: "openai", base_url: upstream.baseUrl },
    ],
    models: [{ name: "keyed-model", provider: "keyed", price_input_per_mtok: 1_000 }],
  });
}

const root = mkdtempSync(join(tmpdir(), "gateway-url-secrets-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** A fresh database on the backend: a file in a directory of its own, or a Postgres database. */
async function freshDatabase(backend: BackendName): Promise<{ db: string; dir?: string }> {
  if (backend === "postgres") return { db: await createTestDatabase() };
  const dir = mkdtempSync(join(root, "db-"));
  return { db: join(dir, "gateway.db"), dir };
}

/** Every providers row with every column, read past the gateway as the database holds it. */
async function providerRows(backend: BackendName, db: string): Promise<Record<string, unknown>[]> {
  if (backend === "sqlite") {
    const file = new Database(db, { readonly: true });
    try {
      return file.prepare("SELECT * FROM providers ORDER BY id").all() as Record<string, unknown>[];
    } finally {
      file.close();
    }
  }
  const client = new pg.Client({ connectionString: db });
  await client.connect();
  try {
    return (await client.query("SELECT * FROM providers ORDER BY id")).rows;
  } finally {
    await client.end();
  }
}

/** Runs SQL on the database past the gateway (an older gateway's writes). */
async function runSql(backend: BackendName, db: string, sql: string): Promise<void> {
  if (backend === "sqlite") {
    const file = foreignConnection(db);
    try {
      file.exec(sql);
    } finally {
      file.close();
    }
    return;
  }
  const client = new pg.Client({ connectionString: db });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

/** The secrets that any file under `dir` holds, byte for byte. */
function secretsInFiles(dir: string): string[] {
  const found: string[] = [];
  for (const file of readdirSync(dir, { recursive: true }) as string[]) {
    let bytes: Buffer;
    try {
      bytes = readFileSync(join(dir, file));
    } catch {
      continue;
    }
    for (const secret of secrets)
      if (bytes.includes(Buffer.from(secret))) found.push(`${file}: ${secret}`);
  }
  return found;
}

const openai = (gw: { url: string }) =>
  new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 10_000 });

/** One whole and one streamed answer; the fake answered only with the key. */
async function askBoth(gw: RunningGateway): Promise<string[]> {
  upstream.reset(keyedAnswer);
  const client = openai(gw);
  const messages = [{ role: "user" as const, content: "hi" }];
  const whole = await client.chat.completions.create({ model: "keyed-model", messages });
  const streamed = await client.chat.completions
    .stream({ model: "keyed-model", messages })
    .finalChatCompletion();
  return [whole.choices[0].message.content ?? "", streamed.choices[0].message.content ?? ""];
}

/** Every line the gateway logs in this process while `run` runs, and what `run` returned. */
async function logsOf<T>(run: () => Promise<T>): Promise<{ value: T; lines: string[] }> {
  const lines: string[] = [];
  const spies = (["log", "info", "warn", "error"] as const).map((level) =>
    vi.spyOn(console, level).mockImplementation((...args: unknown[]) => {
      lines.push(args.map(String).join(" "));
    }),
  );
  try {
    return { value: await run(), lines };
  } finally {
    for (const spy of spies) spy.mockRestore();
  }
}

describe.each(backends)("a base_url carrying a credential, on %s", (backend) => {
  let savedKey: string | undefined;
  beforeEach(() => {
    savedKey = process.env[secretKeyEnv];
    // Postgres's gateways share the key from the environment; SQLite keeps its own key file.
    if (backend === "postgres") process.env[secretKeyEnv] = randomBytes(32).toString("base64");
    else delete process.env[secretKeyEnv];
  });
  afterEach(() => {
    if (savedKey === undefined) delete process.env[secretKeyEnv];
    else process.env[secretKeyEnv] = savedKey;
  });

  it("is kept out of the providers row, still sent with every call, across a restart without the config, and shown nowhere", async () => {
    const { db, dir } = await freshDatabase(backend);
    const shown: string[] = [];
    const { lines } = await logsOf(async () => {
      let gw = await startGateway({ config: config(), db, port: 0 });
      try {
        expect(await askBoth(gw)).toEqual(["ok", "ok"]);
        expect(upstream.requests.slice(0, 2).map((req) => req.path)).toEqual([
          `/v1/chat/completions?key=${URL_KEY}&api-version=2024-10-21`,
          `/v1/chat/completions?key=${URL_KEY}&api-version=2024-10-21`,
        ]);

        // The row, read past the gateway, holds none of it.
        const rows = await providerRows(backend, db);
        for (const secret of secrets) expect(JSON.stringify(rows)).not.toContain(secret);
        expect(rows.find((row) => row.id === "keyed")).toMatchObject({
          base_url: null,
          base_url_shown: `${upstream.baseUrl}?***`,
          base_url_sealed: expect.stringMatching(/^v1\./),
        });
        // A URL with nothing to hide stays as it was.
        expect(rows.find((row) => row.id === "plain")).toMatchObject({
          base_url: upstream.baseUrl,
          base_url_sealed: null,
          base_url_shown: upstream.baseUrl,
        });

        // An admin is shown where each provider is, its credential as `***`.
        const adminView = async (model: string) => {
          const res = await fetch(`${gw.url}/v1/models/${model}`, {
            headers: { authorization: `Bearer ${ADMIN_KEY}` },
          });
          const text = await res.text();
          shown.push(text);
          return (JSON.parse(text) as { internal: { base_url: string } }).internal.base_url;
        };
        expect(await adminView("keyed-model")).toBe(`${upstream.baseUrl}?***`);

        // A provider that fails, and one that refuses the call: the errors name no credential.
        upstream.reset();
        upstream.queue(openaiError(500, `failed on ${keyedUrl()}`, null, "server_error"));
        upstream.queue(openaiError(400, `bad request to ${keyedUrl()}`, null));
        for (let i = 0; i < 2; i++) {
          const refused = await fetch(`${gw.url}/v1/chat/completions`, {
            method: "POST",
            headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
            body: JSON.stringify({
              model: "keyed-model",
              messages: [{ role: "user", content: "x" }],
            }),
          });
          expect(refused.status).toBeGreaterThanOrEqual(400);
          shown.push(await refused.text());
        }
      } finally {
        await gw.close();
      }

      if (dir) expect(secretsInFiles(dir)).toEqual([]);

      // Without the config the sealed URL is all the gateway has, and its calls carry the key.
      gw = await startGateway({ db, port: 0 });
      try {
        upstream.reset(keyedAnswer);
        const answer = await openai(gw).chat.completions.create({
          model: "keyed-model",
          messages: [{ role: "user", content: "again" }],
        });
        expect(answer.choices[0].message.content).toBe("ok");
      } finally {
        await gw.close();
      }
      if (dir) expect(secretsInFiles(dir)).toEqual([]);
    });
    for (const text of [...shown, ...lines]) {
      for (const secret of secrets) expect(text).not.toContain(secret);
    }
  });

  it("written in plain text by the version before (or an older gateway since) is sealed at the next start, and its calls still carry it", async () => {
    const { db, dir } = await freshDatabase(backend);
    let gw = await startGateway({ config: config(), db, port: 0 });
    await gw.close();
    // The database as the version before left it: no sealed columns, the URL in plain text.
    const before =
      backend === "sqlite"
        ? // Steps after 20 are undone too, as they run again.
          `PRAGMA user_version = 19; ALTER TABLE conversation_items DROP COLUMN kind;
             DROP INDEX jobs_kept_finished; DROP INDEX conversation_items_by_id;
             ALTER TABLE stored_responses DROP COLUMN conversation_id;
             ALTER TABLE stored_responses DROP COLUMN conversation_seq;
             ALTER TABLE stored_responses DROP COLUMN conversation_count;
             ALTER TABLE conversations DROP COLUMN deleted_at;
             ALTER TABLE jobs DROP COLUMN progress;
             ALTER TABLE request_log DROP COLUMN served_model;`
        : "DELETE FROM schema_migrations WHERE id = 'provider-base-url-sealed';";
    await runSql(
      backend,
      db,
      `${before}
       ALTER TABLE providers DROP COLUMN base_url_sealed;
       ALTER TABLE providers DROP COLUMN base_url_shown;
       UPDATE providers SET base_url = '${keyedUrl()}' WHERE id = 'keyed';`,
    );
    expect(JSON.stringify(await providerRows(backend, db))).toContain(URL_KEY);

    /** A start without the config: the call carries `url`'s query; the row is sealed after. */
    const restarted = async (url: string) => {
      const { lines } = await logsOf(async () => {
        gw = await startGateway({ db, port: 0 });
        try {
          upstream.reset(keyedAnswer);
          const answer = await openai(gw).chat.completions.create({
            model: "keyed-model",
            messages: [{ role: "user", content: "after the upgrade" }],
          });
          expect(answer.choices[0].message.content).toBe("ok");
          expect(upstream.last.path).toBe(`/v1/chat/completions${url.slice(url.indexOf("?"))}`);
        } finally {
          await gw.close();
        }
      });
      for (const line of lines) expect(line).not.toContain(URL_KEY);
      const rows = await providerRows(backend, db);
      expect(JSON.stringify(rows)).not.toContain(URL_KEY);
      expect(rows.find((row) => row.id === "keyed")).toMatchObject({
        base_url: null,
        base_url_shown: `${upstream.baseUrl}?***`,
        base_url_sealed: expect.stringMatching(/^v1\./),
      });
      if (dir) expect(secretsInFiles(dir)).toEqual([]);
    };
    await restarted(keyedUrl());

    // An older gateway that applied its config since wrote its URL in plain text, beside the
    // sealed one: the plain one is the URL meant, and it is sealed at the next start.
    const rewritten = `${keyedUrl()}&tenant=7`;
    await runSql(backend, db, `UPDATE providers SET base_url = '${rewritten}' WHERE id = 'keyed'`);
    await restarted(rewritten);
  });

  it("with a user and password, left by a gateway from before they were refused, gets one start-up line naming the provider and what to do, without the password", async () => {
    const { db } = await freshDatabase(backend);
    let gw = await startGateway({ config: config(), db, port: 0 });
    await gw.close();
    const withUserinfo = upstream.baseUrl.replace("http://", `http://${USER}:${PASS}@`);
    await runSql(
      backend,
      db,
      `UPDATE providers SET base_url = '${withUserinfo}' WHERE id = 'plain'`,
    );
    const { lines } = await logsOf(async () => {
      gw = await startGateway({ db, port: 0 });
      await gw.close();
    });
    const told = lines.filter((line) => line.includes("user and password"));
    expect(told).toEqual([
      "gateway: provider plain's base_url carries a user and password (user:password@), which the gateway does not send, so its calls go without them: remove them from its base_url in your config and start with --config, and have the proxy let the gateway in by the provider key it sends (api_keys) or by its address",
    ]);
    for (const line of lines) for (const secret of [USER, PASS]) expect(line).not.toContain(secret);
  });
});

describe("a base_url with a user and password", () => {
  const refusal =
    "must not carry a user or password (user:password@): the gateway does not send them, so a proxy that needs them would refuse every call; remove them, and have the proxy let the gateway in by the provider key it sends (api_keys) or by its address";
  const withUserinfo = (url: string, wire: "openai" | "anthropic" | "gemini") => {
    return baseConfigWith({
      providers: [{ id: "proxied", wire, base_url: url, api_keys: ["sk-x"] }],
      models: [{ name: "proxied-model", provider: "proxied" }],
    }) satisfies ConfigInput;
  };

  it("is refused in a config file, naming the field and what to do, and the password is shown nowhere", async () => {
    const dir = mkdtempSync(join(root, "userinfo-"));
    const file = join(dir, "gateway.json");
    const url = upstream.baseUrl.replace("http://", `http://${USER}:${PASS}@`);
    writeFileSync(file, JSON.stringify(withUserinfo(url, "anthropic")));
    const db = join(dir, "gateway.db");
    upstream.reset(keyedAnswer);
    const done = await runCli(["serve", "--port", "0", "--db", db, "--config", file], {
      ...process.env,
      NO_COLOR: "1",
    });
    expect(done.code).toBe(1);
    expect(done.stdout).toBe("");
    expect(done.stderr).toBe(`gateway: invalid ${file}:\n  - providers[2].base_url: ${refusal}\n`);
    for (const secret of [USER, PASS]) expect(done.stderr).not.toContain(secret);
    // Refused before anything was stored.
    expect(secretsInFiles(dir).filter((found) => !found.startsWith("gateway.json"))).toEqual([]);
    expect(upstream.requests).toEqual([]);
  });

  it("is refused from the programmatic API for every wire, a user or a password alone too", async () => {
    const cases: [string, "openai" | "anthropic" | "gemini"][] = [
      [`https://${USER}:${PASS}@proxy.example/v1`, "openai"],
      [`https://${USER}@proxy.example/v1`, "anthropic"],
      [`https://:${PASS}@proxy.example`, "gemini"],
    ];
    for (const [url, wire] of cases) {
      const refused = await startGateway({
        config: withUserinfo(url, wire),
        db: ":memory:",
        port: 0,
      })
        .then(async (gw) => {
          await gw.close();
          return undefined;
        })
        .catch((err: unknown) => err as Error);
      expect(refused?.message, url).toBe(`invalid config:\n  - providers[2].base_url: ${refusal}`);
      for (const secret of [USER, PASS]) expect(refused?.message).not.toContain(secret);
    }
  });
});

describe("a database from before base URLs were sealed", () => {
  it("SQLite: the upgrade seals the URL and leaves no copy of it in the file", () => {
    const dir = mkdtempSync(join(root, "old-"));
    const db = join(dir, "old.db");
    const old = foreignConnection(db);
    old.pragma("journal_mode = WAL");
    for (let v = 0; v < 19; v++) old.exec(migrations[v]);
    old.pragma("user_version = 19");
    old.exec(`
      INSERT INTO providers (id, wire, base_url) VALUES ('keyed', 'openai', 'https://generativelanguage.example/v1?key=${URL_KEY}');
      INSERT INTO providers (id, wire, base_url) VALUES ('userinfo', 'openai', 'https://${USER}:${PASS}@proxy.example/v1');
      INSERT INTO providers (id, wire, base_url) VALUES ('plain', 'openai', 'https://api.example/v1');
    `);
    expect(secretsInFiles(dir)).not.toEqual([]);

    const store = new Store(db, { secretKey: undefined });
    try {
      const providers = store.getCatalog().providers;
      expect(providers.get("keyed")?.base_url).toBe(
        `https://generativelanguage.example/v1?key=${URL_KEY}`,
      );
      expect(providers.get("userinfo")?.base_url).toBe(`https://${USER}:${PASS}@proxy.example/v1`);
      expect(providers.get("plain")?.base_url).toBe("https://api.example/v1");
    } finally {
      store.close();
      old.close();
    }
    expect(secretsInFiles(dir)).toEqual([]);
    const rows = new Database(db, { readonly: true });
    try {
      expect(
        rows.prepare("SELECT id, base_url, base_url_shown FROM providers ORDER BY id").all(),
      ).toEqual([
        {
          id: "keyed",
          base_url: null,
          base_url_shown: "https://generativelanguage.example/v1?***",
        },
        {
          id: "plain",
          base_url: "https://api.example/v1",
          base_url_shown: "https://api.example/v1",
        },
        { id: "userinfo", base_url: null, base_url_shown: "https://***@proxy.example/v1" },
      ]);
    } finally {
      rows.close();
    }
  });

  it("Postgres: the upgrade seals the URL, and every gateway opens it", async () => {
    const url = await createTestDatabase();
    const pool = openPostgresPool({ url, max: 2 });
    const secretKey = randomBytes(32).toString("base64");
    const stores: PostgresStore[] = [];
    try {
      await pool.query(
        "CREATE TABLE schema_migrations (id text PRIMARY KEY, applied_at bigint NOT NULL)",
      );
      const step = postgresMigrations.findIndex((s) => s.id === "provider-base-url-sealed");
      expect(step).toBeGreaterThan(0);
      for (const { id, sql } of postgresMigrations.slice(0, step)) {
        await pool.query(
          `BEGIN; ${sql}; INSERT INTO schema_migrations VALUES ('${id}', 0); COMMIT`,
        );
      }
      await pool.query(
        `INSERT INTO providers (id, wire, base_url) VALUES
          ('keyed', 'openai', 'https://generativelanguage.example/v1?key=${URL_KEY}'),
          ('plain', 'openai', 'https://api.example/v1')`,
      );
      expect(await migratePostgres(pool)).toEqual(
        postgresMigrations.slice(step).map((later) => later.id),
      );
      stores.push(await PostgresStore.open(pool, { secretKey }));
      stores.push(await PostgresStore.open(pool, { secretKey }));
      for (const store of stores) {
        expect(store.getCatalog().providers.get("keyed")?.base_url).toBe(
          `https://generativelanguage.example/v1?key=${URL_KEY}`,
        );
        expect(store.getCatalog().providers.get("plain")?.base_url).toBe("https://api.example/v1");
      }
      const rows = await pool.query(
        "SELECT id, base_url, base_url_shown FROM providers ORDER BY id",
      );
      expect(rows.rows).toEqual([
        {
          id: "keyed",
          base_url: null,
          base_url_shown: "https://generativelanguage.example/v1?***",
        },
        {
          id: "plain",
          base_url: "https://api.example/v1",
          base_url_shown: "https://api.example/v1",
        },
      ]);
      const all = await pool.query("SELECT * FROM providers");
      expect(JSON.stringify(all.rows)).not.toContain(URL_KEY);
    } finally {
      for (const store of stores) await store.close();
      await pool.end();
    }
  });
});

describe("gateway secrets rotate", () => {
  it("re-seals a sealed base URL with the new key, which the next start opens", async () => {
    const saved = process.env[secretKeyEnv];
    delete process.env[secretKeyEnv];
    try {
      const { db } = await freshDatabase("sqlite");
      let gw = await startGateway({ config: config(), db, port: 0 });
      await gw.close();
      const sealedBefore = (await providerRows("sqlite", db)).find((row) => row.id === "keyed");
      const env = { ...process.env };
      const rotated = await runCli(["secrets", "rotate", "--db", db, "--json"], env);
      expect(rotated.stderr).toBe("");
      expect(JSON.parse(rotated.stdout)).toEqual({ rotated: 0, base_urls: 1, key: `${db}.key` });
      const sealedAfter = (await providerRows("sqlite", db)).find((row) => row.id === "keyed");
      expect(sealedAfter?.base_url_sealed).not.toBe(sealedBefore?.base_url_sealed);

      gw = await startGateway({ db, port: 0 });
      try {
        upstream.reset(keyedAnswer);
        const answer = await openai(gw).chat.completions.create({
          model: "keyed-model",
          messages: [{ role: "user", content: "rotated" }],
        });
        expect(answer.choices[0].message.content).toBe("ok");
      } finally {
        await gw.close();
      }
    } finally {
      if (saved !== undefined) process.env[secretKeyEnv] = saved;
    }
  });
});

describe("record mode", () => {
  it("writes no key of the base URL into a cassette, wherever the answer echoed it", async () => {
    const cassettes = mkdtempSync(join(root, "cassettes-"));
    const { db } = await freshDatabase("sqlite");
    const gw = await startGateway({
      config: config(),
      db,
      port: 0,
      cassettes: { dir: cassettes, mode: "record" },
    });
    try {
      // A provider that quotes the URL it was called on, whole and streamed.
      upstream.reset((req) =>
        req.body.stream
          ? { kind: "sse", steps: openaiStreamSteps(["you called ", req.path]) }
          : openaiJson(`you called ${req.path}`),
      );
      const client = openai(gw);
      const messages = [{ role: "user" as const, content: "echo" }];
      const whole = await client.chat.completions.create({ model: "keyed-model", messages });
      const streamed = await client.chat.completions
        .stream({ model: "keyed-model", messages })
        .finalChatCompletion();
      // The client gets the provider's answer as it came: the kit scrubs only what it writes.
      expect(whole.choices[0].message.content).toContain(URL_KEY);
      expect(streamed.choices[0].message.content).toContain(URL_KEY);
      expect(readdirSync(cassettes)).toHaveLength(2);
      expect(secretsInFiles(cassettes)).toEqual([]);
      // api-version is no credential: the recorded answer keeps it.
      expect(readFileSync(join(cassettes, readdirSync(cassettes)[0]), "utf8")).toContain(
        "api-version=2024-10-21",
      );
    } finally {
      await gw.close();
    }
  });
});
