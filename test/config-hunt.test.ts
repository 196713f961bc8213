import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { ConfigError } from "../src/server/config/load.js";
import type { ConfigInput } from "../src/server/config/schema.js";
import { type RunningGateway, startGateway } from "../src/server/gateway.js";
import type { FinishedRequest } from "../src/server/http/request-trace.js";
import { secretKeyEnv } from "../src/store/secret-box.js";
import { admin, idleMoney, lastLogged, quota } from "./support/api.js";
import { killRunningClis, runCli } from "./support/cli.js";
import { balanceOnDisk, foreignConnection } from "./support/database-file.js";
import { fakeGemini } from "./support/fake-gemini.js";
import {
  deferred,
  type FakeUpstream,
  fakeUpstream,
  openaiStreamSteps,
} from "./support/fake-upstream.js";
import {
  ADMIN_KEY,
  type BackendName,
  backends,
  baseConfig,
  chat,
  gatewayOn,
  KEY,
  post,
  testGateway,
} from "./support/gateway.js";
import { eventually } from "./support/gateways-on-postgres.js";
import { createTestDatabase } from "./support/postgres.js";
import { allStreamEvents } from "./support/sse.js";

/**
 * A developer writing a config: each mistake is refused before anything is opened or applied,
 * named by its path; what the file says is what the gateway serves, the next start too; a config
 * applied while a stream is in flight leaves that stream its admitted price.
 */

const dir = mkdtempSync(join(tmpdir(), "gateway-config-hunt-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
afterEach(killRunningClis);
// Gateways sharing a Postgres database open each other's sealed BYOK keys with this.
process.env[secretKeyEnv] ??= randomBytes(32).toString("base64");

const bearer = (key: string) => ({ authorization: `Bearer ${key}` });
/** The config syntax for an environment variable, a literal `${NAME}`. */
const envRef = (name: string) => ["$", `{${name}}`].join("");

/** The problems a config is refused with by `startGateway`, or [] when it starts. */
async function refusal(config: ConfigInput, db = ":memory:"): Promise<string[]> {
  let gw: RunningGateway | undefined;
  try {
    gw = await startGateway({ config, db, port: 0 });
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
  await gw.close();
  return [];
}

function writeConfig(name: string, config: unknown): string {
  const path = join(dir, name);
  writeFileSync(path, JSON.stringify(config));
  return path;
}

/**
 * `levels` levels of two routes (`level0a`, `level0b`, ...), each naming both routes of the level
 * below; the last level's name `model`.
 */
function levelsOfTwo(levels: number, model: string): { name: string; steps: string[] }[] {
  return Array.from({ length: levels }, (_, i) =>
    ["a", "b"].map((side) => ({
      name: `level${i}${side}`,
      steps: i === levels - 1 ? [model] : [`level${i + 1}a`, `level${i + 1}b`],
    })),
  ).flat();
}

async function modelIds(gw: { url: string }, key = KEY): Promise<string[]> {
  const res = await fetch(`${gw.url}/v1/models`, { headers: bearer(key) });
  return ((await res.json()) as { data: { id: string }[] }).data.map((m) => m.id);
}

describe("a provider's base_url", () => {
  let openai: FakeUpstream;
  let gemini: FakeUpstream;
  let gw: Awaited<ReturnType<typeof testGateway>>;
  beforeAll(async () => {
    openai = await fakeUpstream("openai");
    gemini = await fakeGemini();
    gw = await testGateway({
      config: baseConfig({
        providers: [
          { id: "mock", wire: "mock" },
          // Azure OpenAI's shape: the API version is a query string of every call.
          {
            id: "versioned",
            wire: "openai",
            base_url: `${openai.baseUrl}?api-version=2024-10-21`,
            api_keys: ["sk-versioned"],
          },
          { id: "slashed", wire: "openai", base_url: `${openai.baseUrl}/`, api_keys: ["sk-s"] },
          {
            id: "gemini",
            wire: "gemini",
            base_url: `${gemini.url}/?tenant=7#docs`,
            api_keys: ["AIza-test"],
          },
        ],
        models: [
          { name: "versioned", provider: "versioned", upstream_model: "gpt-4o" },
          { name: "slashed", provider: "slashed", upstream_model: "gpt-4o" },
          { name: "gem", provider: "gemini", upstream_model: "gemini-2.0-flash" },
        ],
        routes: [],
      }),
    });
  });
  afterAll(async () => {
    await gw?.close();
    await openai?.close();
    await gemini?.close();
  });

  it("keeps a query string after the API's path, streamed or not", async () => {
    const plain = await post(gw, "/v1/chat/completions", chat("hi", "versioned"));
    expect(plain.status).toBe(200);
    expect(openai.last.path).toBe("/v1/chat/completions?api-version=2024-10-21");
    openai.queue({ kind: "sse", steps: openaiStreamSteps(["o", "k"]) });
    const streamed = await post(
      gw,
      "/v1/chat/completions",
      chat("hi", "versioned", { stream: true }),
    );
    expect((await allStreamEvents(streamed)).at(-1)?.data).toBe("[DONE]");
    expect(openai.last.path).toBe("/v1/chat/completions?api-version=2024-10-21");
  });

  it("joins a trailing slash once", async () => {
    expect((await post(gw, "/v1/chat/completions", chat("hi", "slashed"))).status).toBe(200);
    expect(openai.last.path).toBe("/v1/chat/completions");
  });

  it("puts the base's query before a call's own (Gemini's alt=sse) and never sends a fragment", async () => {
    const res = await post(gw, "/v1/chat/completions", chat("hi", "gem", { stream: true }));
    expect(res.status).toBe(200);
    expect((await allStreamEvents(res)).at(-1)?.data).toBe("[DONE]");
    expect(gemini.last.path).toBe(
      "/v1beta/models/gemini-2.0-flash:streamGenerateContent?tenant=7&alt=sse",
    );
  });

  it("is refused at start when it is not an http(s) URL", async () => {
    const problems = await refusal({
      providers: [{ id: "local", wire: "openai", base_url: "localhost:8080/v1" }],
    });
    expect(problems).toEqual(["providers[0].base_url: must start with http:// or https://"]);
  });
});

describe("mistakes in a config file", () => {
  it("an integer beyond what the database stores is named by its path, on SQLite as on Postgres", async () => {
    const config = baseConfig();
    config.accounts![0].rpm_limit = 3_000_000_000;
    config.models![0].context_window = 3_000_000_000;
    config.tiers = { free: { free_rpm: 10, free_daily: 4_000_000_000 } };
    const expected = [
      "models[0].context_window: must be at most 2147483647",
      "tiers.free.free_daily: must be at most 2147483647",
      "accounts[0].rpm_limit: must be at most 2147483647",
    ];
    expect(await refusal(config, join(dir, "big.db"))).toEqual(expected);
    // The binary on Postgres: exit code 1 and the paths, not a crash asking for a report.
    const file = writeConfig("big.json", config);
    const run = await runCli(
      ["serve", "--port", "0", "--db", await createTestDatabase(), "--config", file],
      process.env,
    );
    expect(run.stderr).not.toMatch(/unexpected error|report|\n\s+at /);
    expect(run.stderr).toContain(`invalid ${file}:\n${expected.map((p) => `  - ${p}`).join("\n")}`);
    expect(run.code).toBe(1);
  });

  it("a fractional token price says what a token price is", async () => {
    const config = baseConfig();
    config.models![0].price_input_per_mtok = 2.5;
    expect(await refusal(config)).toEqual([
      "models[0].price_input_per_mtok: must be a whole number of IDR per million tokens (a token costs that many micro-IDR)",
    ]);
  });

  it("a token price whose model's largest request would cost more than the gateway counts is refused, naming the most it may be", async () => {
    const largest =
      "its largest request (context_window 128000 tokens in, max_output_tokens 4096 out, and price_per_request) would cost more than 9007199254 IDR, the most the gateway counts to the micro-IDR";
    const priced = (input: number, output = 0) => {
      const config = baseConfig();
      Object.assign(config.models![0], {
        price_input_per_mtok: input,
        price_output_per_mtok: output,
      });
      return config;
    };
    // One token of it would already cost about everything a balance can hold.
    expect(await refusal(priced(9e15))).toEqual([
      `models[0].price_input_per_mtok: ${largest}; at most 70368744177 with its other prices and bounds`,
    ]);
    expect(await refusal(priced(70_368_744_178))).toEqual([
      `models[0].price_input_per_mtok: ${largest}; at most 70368744177 with its other prices and bounds`,
    ]);
    expect(await refusal(priced(70_368_744_177))).toEqual([]);
    // Both too high on their own: both named.
    expect(await refusal(priced(9e15, 9e15))).toEqual([
      `models[0].price_input_per_mtok: ${largest}`,
      `models[0].price_output_per_mtok: ${largest}`,
    ]);
    // The priciest models of today are far inside the bound, at their own windows.
    const config = baseConfig();
    Object.assign(config.models![0], {
      price_input_per_mtok: 2_500_000,
      price_output_per_mtok: 10_000_000,
      context_window: 2_000_000,
      max_output_tokens: 128_000,
      price_per_request: 1_000_000,
    });
    expect(await refusal(config)).toEqual([]);
  });

  it("an amount finer than a micro-IDR is refused naming the field, not rounded", async () => {
    const micro =
      "must have at most 6 decimals: 0.000001 IDR (one micro-IDR) is the smallest amount the gateway stores";
    const config = baseConfig();
    config.models![4].price_per_unit = 0.0000004;
    config.models![0].price_per_request = 0.1234567;
    config.accounts![0].balance_idr = 1.0000004;
    config.accounts![0].payg = { enabled: true, limit_idr: 9_000_000_000.5 };
    config.tiers = { paid: { rank: 1, free_rpm: 1, free_daily: 1, min_topup_idr: 1e-7 } };
    expect(await refusal(config)).toEqual([
      `models[0].price_per_request: ${micro}`,
      `models[4].price_per_unit: ${micro}`,
      `tiers.paid.min_topup_idr: ${micro}`,
      `accounts[0].balance_idr: ${micro}`,
      "accounts[0].payg.limit_idr: must be whole IDR from 8589934592 IDR up (a number that large cannot hold every micro-IDR)",
    ]);
    // A micro-IDR is kept exactly, up to where a number holds every one (a million times this
    // balance in floating point is a micro-IDR more).
    const exact = baseConfig();
    exact.accounts![0].balance_idr = 4_466_117_824.100906;
    exact.accounts![1].balance_idr = 0.000001;
    const gw = await testGateway({ config: exact });
    try {
      const res = await fetch(`${gw.url}/api/admin/accounts`, { headers: bearer(ADMIN_KEY) });
      const accounts = ((await res.json()) as { data: { balance_idr: number }[] }).data;
      expect(accounts.map((a) => a.balance_idr)).toEqual([4_466_117_824.100906, 0.000001]);
      expect(balanceOnDisk(gw.dbPath, "acct")).toBe(4_466_117_824_100_906);
    } finally {
      await gw.close();
    }
  });

  it("a refused config creates no database file and no key beside it", async () => {
    const db = join(dir, "never.db");
    const file = writeConfig("refused.json", {
      providers: [{ id: "m", wire: "mock" }],
      models: [{ name: "a", provider: "m" }],
      routes: [{ name: "r", steps: ["zz"] }],
    });
    const run = await runCli(["serve", "--port", "0", "--db", db, "--config", file], process.env);
    expect(run.stderr).toContain('routes[0].steps[0]: unknown model or route "zz"');
    expect(run.code).toBe(1);
    expect(existsSync(db)).toBe(false);
    expect(existsSync(`${db}.key`)).toBe(false);
  });

  it("an account may be on the built-in paid tier without a tiers section", async () => {
    const config = baseConfig();
    config.accounts![0].tier = "paid";
    const gw = await testGateway({ config });
    try {
      const shown = await quota(gw);
      expect(shown.tier).toBe("paid");
      expect(shown.free.daily_limit).toBe(1000);
    } finally {
      await gw.close();
    }
  });

  it("a subscription names tiers and models that exist", async () => {
    const config = baseConfig();
    config.accounts![0].subscription = {
      windows: [{ name: "day", seconds: 86_400, quota: 5 }],
      models: ["mock-gpt", "mock-gtp", "auto"],
      tier: "gold",
    };
    expect(await refusal(config)).toEqual([
      'accounts[0].subscription.tier: unknown tier "gold"',
      'accounts[0].subscription.models[1]: unknown model or route "mock-gtp"',
    ]);
  });

  it("routes nested deeper than the gateway follows are refused, however they branch", async () => {
    const chain: ConfigInput["routes"] = Array.from({ length: 18 }, (_, i) => ({
      name: `r${i}`,
      steps: [i === 17 ? "mock-gpt" : `r${i + 1}`],
    }));
    const problems = await refusal(baseConfig({ routes: chain }));
    expect(problems[0]).toBe(
      `routes[0]: routes nest 17 deep (${chain.map((r) => r.name).join(" -> ")}); at most 16`,
    );
    expect(problems).toHaveLength(1);
    // Each level names the next twice over: every path through it is as deep, and there are many.
    const diamond: NonNullable<ConfigInput["routes"]> = [];
    for (let i = 0; i < 20; i++) {
      const next = i === 19 ? "mock-gpt" : `d${i + 1}`;
      diamond.push(
        { name: `d${i}`, steps: [`a${i}`, `b${i}`] },
        { name: `a${i}`, steps: [next] },
        { name: `b${i}`, steps: [next] },
      );
    }
    const branching = await refusal(baseConfig({ routes: diamond }));
    expect(branching[0]).toMatch(/^routes\[0\]: routes nest 39 deep \(d0 -> a0 -> d1 -> /);
  });

  it("a route that expands to more steps than a request walks is refused: routes naming the same routes multiply", async () => {
    // Each level's two routes both name the two of the level below: every level doubles.
    const shared = levelsOfTwo(6, "mock-gpt");
    const why =
      "at most 64: a route's steps count again each time a step names it, so routes that name the same routes multiply";
    expect(await refusal(baseConfig({ routes: shared }))).toEqual([
      `routes[0]: expands to 94 steps, ${why}`,
      `routes[1]: expands to 94 steps, ${why}`,
    ]);
    // One level less is 46 steps, and 64 plain steps are the most.
    expect(await refusal(baseConfig({ routes: shared.slice(2) }))).toEqual([]);
    const flat = (n: number) => [{ name: "flat", steps: Array<string>(n).fill("mock-down") }];
    expect(await refusal(baseConfig({ routes: flat(64) }))).toEqual([]);
    expect(await refusal(baseConfig({ routes: flat(65) }))).toEqual([
      `routes[0]: expands to 65 steps, ${why}`,
    ]);
  });

  it("a request walks at most 64 steps of a route a database holds unchecked (an older gateway wrote it)", async () => {
    const db = join(dir, "older-routes.db");
    await (await startGateway({ db, port: 0, config: baseConfig() })).close();
    // Every step fails (mock-down answers 503): unbounded, the request would try all 128 leaves.
    const older = foreignConnection(db);
    const insert = older.prepare("INSERT INTO routes (name, steps_json) VALUES (?, ?)");
    for (const route of levelsOfTwo(8, "mock-down"))
      insert.run(route.name, JSON.stringify(route.steps));
    older.close();
    const finished: FinishedRequest[] = [];
    const gw = await startGateway({ db, port: 0, onRequest: (r) => finished.push(r) });
    try {
      const res = await post(gw, "/v1/chat/completions", chat("hi", "level0a"));
      expect(res.status).toBe(503);
      const tried = finished.find((r) => r.path === "/v1/chat/completions")?.steps ?? [];
      expect(tried.length).toBeGreaterThan(0);
      expect(tried.length).toBeLessThanOrEqual(64);
      expect(new Set(tried)).toEqual(new Set(["mock-down 503"]));
    } finally {
      await gw.close();
    }
  });

  it("a paid route with a :free step is refused: the step would be served outside the free limits", async () => {
    const routes = [
      { name: "free-first", steps: ["mock-gpt:free", "mock-gpt"] },
      { name: "nested", steps: ["all-free", "mock-pro"] },
      { name: "all-free", steps: ["mock-gpt:free"] },
      // Free by its name: the config says so, its paid steps are served as free ones.
      { name: "anything:free", steps: ["mock-gpt:free", "mock-gpt"] },
    ];
    expect(await refusal(baseConfig({ routes }))).toEqual([
      "routes[0]: mixes :free models (mock-gpt:free) with paid ones, so those would be served outside the free limits; keep them in separate routes, or end the route's name in :free",
      "routes[1]: mixes :free models (mock-gpt:free) with paid ones, so those would be served outside the free limits; keep them in separate routes, or end the route's name in :free",
    ]);
    expect(await refusal(baseConfig({ routes: routes.slice(2) }))).toEqual([]);
  });

  it("a provider key a header cannot carry is refused without being shown", async () => {
    const problems = await refusal({
      providers: [
        {
          id: "o",
          wire: "openai",
          base_url: "http://127.0.0.1:9/v1",
          api_keys: ["sk-“pasted”"],
        },
      ],
    });
    expect(problems).toEqual([
      "providers[0].api_keys[0]: must be printable ASCII without spaces (a quote or dash pasted from a document?)",
    ]);
  });

  it("gateway keys from an env file keep working with the newline after them", async () => {
    const names = ["HUNT_CI_KEY", "HUNT_ADMIN_KEY"] as const;
    const ciKey = "kn-hunt-ci-key-00000000000000000";
    const adminKey = "kn-hunt-admin-key-00000000000000";
    process.env.HUNT_CI_KEY = `${ciKey}\n`;
    process.env.HUNT_ADMIN_KEY = `${adminKey}\r\n`;
    try {
      const config = baseConfig({ admin_keys: [envRef("HUNT_ADMIN_KEY")] });
      config.accounts![0].keys = [{ id: "ci", value: envRef("HUNT_CI_KEY") }];
      const gw = await testGateway({ config });
      try {
        expect((await post(gw, "/v1/chat/completions", chat(), bearer(ciKey))).status).toBe(200);
        const accounts = await fetch(`${gw.url}/api/admin/accounts`, { headers: bearer(adminKey) });
        expect(accounts.status).toBe(200);
      } finally {
        await gw.close();
      }
    } finally {
      for (const name of names) delete process.env[name];
    }
  });
});

describe("a config key the database already holds under another id", () => {
  it.each(backends)("%s: is refused by its path, and nothing is applied", async (backend) => {
    const db = backend === "sqlite" ? join(dir, `held-${backend}.db`) : await createTestDatabase();
    // The demo setup's key, minted into the database, then written into a config.
    const demo = await startGateway({ db, port: 0 });
    const demoKey = demo.demoKey!;
    const whoami = await fetch(`${demo.url}/api/auth/whoami`, { headers: bearer(demoKey) });
    const demoKeyId = ((await whoami.json()) as { key_id: string }).key_id;
    await demo.close();
    const config = baseConfig();
    config.accounts![0].keys!.push({ id: "mine", value: demoKey });
    const expected = `accounts[0].keys[4].value: the database already has this key as "${demoKeyId}" of account "demo"; give the config key that id to move it here, or use a new value`;
    if (backend === "sqlite") {
      const file = writeConfig("held.json", config);
      const run = await runCli(["serve", "--port", "0", "--db", db, "--config", file], process.env);
      expect(run.stderr).toContain(`invalid ${file}:\n  - ${expected}\n`);
      expect(run.stderr).not.toMatch(/unexpected error|report/);
      expect(run.code).toBe(1);
    } else {
      expect(await refusal(config, db)).toEqual([expected]);
    }
    // The database is as the demo left it: its key still works, on its own account.
    const again = await startGateway({ db, port: 0 });
    try {
      expect(await modelIds(again, demoKey)).toContain("mock-auto");
      expect((await quota(again, demoKey)).account_id).toBe("demo");
    } finally {
      await again.close();
    }
  });
});

describe("a BYOK key with whitespace around it (an env file's newline)", () => {
  let upstream: FakeUpstream;
  let gw: Awaited<ReturnType<typeof testGateway>>;
  beforeAll(async () => {
    upstream = await fakeUpstream("openai");
    const config = baseConfig({
      providers: [
        { id: "mock", wire: "mock" },
        { id: "team-openai", wire: "openai", base_url: upstream.baseUrl },
        { id: "own-openai", wire: "openai", base_url: upstream.baseUrl },
      ],
      models: [
        {
          name: "team-gpt",
          provider: "team-openai",
          price_input_per_mtok: 10_000,
          price_output_per_mtok: 10_000,
        },
        {
          name: "own-gpt",
          provider: "own-openai",
          price_input_per_mtok: 10_000,
          price_output_per_mtok: 10_000,
        },
      ],
      routes: [],
    });
    config.accounts![0].byok = [{ provider: "team-openai", key: " sk-team-byok\n" }];
    gw = await testGateway({ config });
  });
  afterAll(async () => {
    await gw?.close();
    await upstream?.close();
  });

  it("reaches the provider as the key, from the config", async () => {
    const before = await idleMoney(gw);
    expect((await post(gw, "/v1/chat/completions", chat("hi", "team-gpt"))).status).toBe(200);
    expect(upstream.last.headers.authorization).toBe("Bearer sk-team-byok");
    // Served on the account's own key: no token prices.
    expect((await idleMoney(gw)).balance).toBe(before.balance);
  });

  it("reaches the provider as the key, from the admin API", async () => {
    const added = await admin(gw, "POST", "/accounts/acct/byok", {
      provider: "own-openai",
      key: "sk-own-byok\n",
    });
    expect(added.status).toBe(201);
    expect(((await added.json()) as { key_hint: string }).key_hint).toBe("...byok");
    expect((await post(gw, "/v1/chat/completions", chat("hi", "own-gpt"))).status).toBe(200);
    expect(upstream.last.headers.authorization).toBe("Bearer sk-own-byok");
  });
});

describe("the admin API's account settings", () => {
  it.each(backends)(
    "%s: refuses what the database cannot store or a subscription naming nothing",
    async (backend: BackendName) => {
      const gw = await gatewayOn(backend);
      try {
        const tooMany = await admin(gw, "PATCH", "/accounts/acct", { rpm_limit: 3_000_000_000 });
        expect(tooMany.status).toBe(400);
        expect(await tooMany.text()).toContain("rpm_limit: must be at most 2147483647");
        const created = await admin(gw, "POST", "/accounts", {
          id: "big",
          rpm_limit: 3_000_000_000,
        });
        expect(created.status).toBe(400);
        const typo = await admin(gw, "PATCH", "/accounts/acct", {
          subscription: { windows: [{ name: "d", seconds: 60, quota: 1 }], models: ["mock-gtp"] },
        });
        expect(typo.status).toBe(400);
        expect(((await typo.json()) as { error: { message: string } }).error.message).toBe(
          'Unknown model or route "mock-gtp" in subscription.models.',
        );
        // Nothing of a refused change was applied.
        const account = (await (await admin(gw, "GET", "/accounts/acct")).json()) as {
          rpm_limit: number;
          subscription: unknown;
        };
        expect(account).toMatchObject({ rpm_limit: 1000, subscription: null });
      } finally {
        await gw.close();
      }
    },
  );
});

describe("what the file leaves out, the next start no longer serves", () => {
  const NEW_ADMIN = "kn-hunt-new-admin-key-0000000000";

  it.each(backends)(
    "%s: a model, a route and an admin key taken out are gone",
    async (backend: BackendName) => {
      const db = backend === "sqlite" ? join(dir, "removal.db") : await createTestDatabase();
      const first = await startGateway({ db, port: 0, config: baseConfig() });
      expect(await modelIds(first)).toEqual(expect.arrayContaining(["mock-image", "auto"]));
      await first.close();
      const next = baseConfig({
        admin_keys: [NEW_ADMIN],
        // The removed model's name now names a route.
        routes: [{ name: "mock-image", steps: ["mock-gpt"] }],
      });
      next.models = next.models!.filter((m) => m.name !== "mock-image");
      const second = await startGateway({ db, port: 0, config: next });
      try {
        const ids = await modelIds(second);
        expect(ids).not.toContain("auto");
        expect(ids.filter((id) => id === "mock-image")).toHaveLength(1);
        const routed = await post(second, "/v1/chat/completions", chat("hi", "mock-image"));
        expect(routed.status).toBe(200);
        expect(((await routed.json()) as { model: string }).model).toBe("mock-image");
        const old = await fetch(`${second.url}/api/admin/accounts`, { headers: bearer(ADMIN_KEY) });
        expect(old.status).toBe(401);
        const fresh = await fetch(`${second.url}/api/admin/accounts`, {
          headers: bearer(NEW_ADMIN),
        });
        expect(fresh.status).toBe(200);
      } finally {
        await second.close();
      }
    },
  );
});

describe("a config applied on a shared database while a stream is in flight (Postgres)", () => {
  const OLD_IN = 1_000;
  const NEW_IN = 50_000;
  const priced = (input: number, rpm = 1000): ConfigInput => {
    const config = baseConfig({
      providers: [
        { id: "mock", wire: "mock" },
        { id: "up", wire: "openai", base_url: upstream.baseUrl, api_keys: ["sk-up"] },
      ],
      models: [
        { name: "mock-gpt", provider: "mock" },
        {
          name: "gpt",
          provider: "up",
          price_input_per_mtok: input,
          price_output_per_mtok: 2 * input,
        },
      ],
      routes: [],
    });
    config.accounts![0].rpm_limit = rpm;
    return config;
  };
  let upstream: FakeUpstream;
  let db: string;
  let serving: RunningGateway;
  beforeAll(async () => {
    upstream = await fakeUpstream("openai");
    db = await createTestDatabase();
    serving = await startGateway({ db, port: 0, config: priced(OLD_IN) });
  });
  afterAll(async () => {
    await serving?.close();
    await upstream?.close();
  });

  const priceOn = async (gw: { url: string }) => {
    const res = await fetch(`${gw.url}/v1/models/gpt`, { headers: bearer(KEY) });
    return ((await res.json()) as { pricing: { input_per_mtok: number } }).pricing.input_per_mtok;
  };

  it("a refused config changes nothing the serving gateway answers", async () => {
    const file = writeConfig("shared-bad.json", priced(NEW_IN, 3_000_000_000));
    const run = await runCli(["serve", "--port", "0", "--db", db, "--config", file], process.env);
    expect(run.stderr).toContain("accounts[0].rpm_limit: must be at most 2147483647");
    expect(run.code).toBe(1);
    expect(await priceOn(serving)).toBe(OLD_IN);
  });

  it("the stream is charged once, at the price it was admitted with; the next at the new one", async () => {
    const gate = deferred();
    const steps = openaiStreamSteps(["a", "b"], { usage: [11, 7] });
    steps[2] = { ...steps[2], gate: gate.promise };
    upstream.queue({ kind: "sse", steps });
    const before = await idleMoney(serving);
    const res = await post(serving, "/v1/chat/completions", chat("hi", "gpt", { stream: true }));
    expect(res.status).toBe(200);
    const events = allStreamEvents(res);
    const other = await startGateway({ db, port: 0, config: priced(NEW_IN) });
    try {
      await eventually(
        () => priceOn(serving),
        (p) => p === NEW_IN,
        10_000,
        "the new price",
      );
      gate.resolve();
      expect((await events).at(-1)?.data).toBe("[DONE]");
      const admittedCost = 11 * OLD_IN + 7 * 2 * OLD_IN;
      const after = await idleMoney(serving);
      expect(before.balance - after.balance).toBe(admittedCost);
      expect(await lastLogged(serving)).toMatchObject({
        state: "settled",
        cost_idr: admittedCost / 1e6,
      });
      expect((await post(other, "/v1/chat/completions", chat("hi", "gpt"))).status).toBe(200);
      expect(before.balance - (await idleMoney(serving)).balance).toBe(
        admittedCost + 11 * NEW_IN + 7 * 2 * NEW_IN,
      );
    } finally {
      await other.close();
    }
  });
});
