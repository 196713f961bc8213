import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { applyConfig } from "../src/server/config/apply.js";
import { ConfigError, loadConfigFile, parseConfig } from "../src/server/config/load.js";
import type { GatewayConfig } from "../src/server/config/schema.js";
import { Store } from "../src/store/sqlite/store.js";
import { baseConfig, KEY } from "./support/gateway.js";

const dir = mkdtempSync(join(tmpdir(), "gateway-config-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function problemsOf(raw: unknown, env: NodeJS.ProcessEnv = {}): string[] {
  try {
    parseConfig(raw, env);
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
  return [];
}

describe("config validation", () => {
  it("accepts the base test config", () => {
    expect(problemsOf(baseConfig())).toEqual([]);
  });

  it("names every bad path at once", () => {
    const problems = problemsOf({
      providers: [
        { id: "p", wire: "grpc" },
        { id: "q", wire: "openai" },
      ],
      models: [{ name: "m", provider: "p", price_input_per_mtok: -1 }],
      accounts: [{ id: "a", keys: [{ id: "k", value: "sk-nope" }] }],
      bogus: true,
    });
    const text = problems.join("\n");
    expect(text).toMatch(/providers\[0\]\.wire/);
    expect(text).toMatch(/providers\[1\]\.base_url: required for wire "openai"/);
    expect(text).toMatch(/models\[0\]\.price_input_per_mtok/);
    expect(text).toMatch(/accounts\[0\]\.keys\[0\]\.value: must start with kn-/);
    expect(text).toMatch(/bogus|Unrecognized key/);
    expect(problems.length).toBeGreaterThanOrEqual(5);
  });

  it("refuses an amount beyond what the gateway counts exactly in micro-IDR", () => {
    const base = baseConfig();
    const problems = problemsOf({
      ...base,
      accounts: [
        { id: "rich", balance_idr: 1e12, payg: { enabled: true, limit_idr: 1e10 } },
        { id: "fine", balance_idr: 9_007_199_254 },
      ],
    });
    expect(problems).toEqual([
      "accounts[0].balance_idr: must be at most 9007199254 IDR (the most the gateway counts to the micro-IDR)",
      "accounts[0].payg.limit_idr: must be at most 9007199254 IDR (the most the gateway counts to the micro-IDR)",
    ]);
  });

  it("reports unknown references: provider, route step, tier, BYOK provider, duplicate keys", () => {
    const problems = problemsOf({
      providers: [{ id: "mock", wire: "mock" }],
      models: [{ name: "m", provider: "ghost" }],
      routes: [{ name: "r", steps: ["nothing"] }],
      accounts: [
        {
          id: "a",
          tier: "platinum",
          byok: [{ provider: "ghost", key: "x" }],
          keys: [
            { id: "k", value: KEY },
            { id: "k", value: KEY },
          ],
        },
      ],
    });
    const text = problems.join("\n");
    expect(text).toMatch(/models\[0\]\.provider: unknown provider "ghost"/);
    expect(text).toMatch(/routes\[0\]\.steps\[0\]: unknown model or route "nothing"/);
    expect(text).toMatch(/accounts\[0\]\.tier: unknown tier "platinum"/);
    expect(text).toMatch(/accounts\[0\]\.byok\[0\]\.provider/);
    expect(text).toMatch(/duplicate key id "k"/);
    expect(text).toMatch(/same key value is used twice/);
  });

  it("names schema errors and reference errors together in one run", () => {
    const problems = problemsOf({
      providers: [
        { id: "mock", wire: "mock" },
        { id: "oa", wire: "openai", timeout_ms: "soon" },
      ],
      models: [
        { name: "m", provider: "ghost", price_input_per_mtok: -1 },
        { name: "n", provider: "mock", modality: "smell" },
      ],
      routes: [
        { name: "r", steps: ["nothing", "m"] },
        { name: "loop", steps: ["loop"] },
      ],
      accounts: [{ id: "a", tier: "platinum", keys: [{ id: "k", value: "sk-nope" }] }],
    });
    const text = problems.join("\n");
    // Schema errors...
    expect(text).toMatch(/providers\[1\]\.base_url: required for wire "openai"/);
    expect(text).toMatch(/providers\[1\]\.timeout_ms/);
    expect(text).toMatch(/models\[0\]\.price_input_per_mtok/);
    expect(text).toMatch(/models\[1\]\.modality/);
    expect(text).toMatch(/accounts\[0\]\.keys\[0\]\.value: must start with kn-/);
    // ...and every cross-reference, in the same run.
    expect(text).toMatch(/models\[0\]\.provider: unknown provider "ghost"/);
    expect(text).toMatch(/routes\[0\]\.steps\[0\]: unknown model or route "nothing"/);
    expect(text).toMatch(/routes\[1\]: route cycle loop -> loop/);
    expect(text).toMatch(/accounts\[0\]\.tier: unknown tier "platinum"/);
    expect(problems).toHaveLength(9);
  });

  it("skips references in entries of the wrong shape rather than failing on them", () => {
    const problems = problemsOf({
      providers: "none",
      models: [7, { name: "m", provider: 3 }],
      routes: [{ name: "r", steps: "m" }],
      accounts: [null],
    });
    expect(problems.length).toBeGreaterThan(0);
    expect(problems.join("\n")).not.toMatch(/unknown/);
  });

  it("refuses route cycles, direct and nested", () => {
    const base = {
      providers: [{ id: "mock", wire: "mock" }],
      models: [{ name: "m", provider: "mock" }],
    };
    expect(
      problemsOf({ ...base, routes: [{ name: "self", steps: ["m", "self"] }] }).join(),
    ).toMatch(/route cycle self -> self/);
    const nested = problemsOf({
      ...base,
      routes: [
        { name: "a", steps: ["b"] },
        { name: "b", steps: ["m", "c"] },
        { name: "c", steps: ["a"] },
      ],
    }).join("\n");
    expect(nested).toMatch(/route cycle a -> b -> c -> a/);
  });

  it("substitutes $-brace NAME from the environment and names missing variables", () => {
    // The config syntax is a literal `${NAME}` in a plain string.
    const placeholder = ["$", "{OPENAI_KEY}"].join("");
    const raw = {
      providers: [
        { id: "o", wire: "openai", base_url: "http://127.0.0.1:1/v1", api_keys: [placeholder] },
      ],
    };
    expect(parseConfig(raw, { OPENAI_KEY: "sk-from-env" }).providers[0].api_keys).toEqual([
      "sk-from-env",
    ]);
    expect(problemsOf(raw, {})).toEqual([
      "environment variable OPENAI_KEY is not set (used at providers[0].api_keys[0])",
    ]);
  });

  it("takes a provider key without the whitespace around it (a newline from an env file)", () => {
    const placeholder = ["$", "{OPENAI_KEY}"].join("");
    const raw = {
      providers: [
        { id: "o", wire: "openai", base_url: "http://127.0.0.1:1/v1", api_keys: [placeholder] },
      ],
    };
    expect(parseConfig(raw, { OPENAI_KEY: " sk-from-env\r\n" }).providers[0].api_keys).toEqual([
      "sk-from-env",
    ]);
    expect(problemsOf(raw, { OPENAI_KEY: "\n" })).toEqual([
      "providers[0].api_keys[0]: Too small: expected string to have >=1 characters",
    ]);
  });

  it("names a missing variable once, with every place that uses it", () => {
    const placeholder = ["$", "{TEAM_KEY}"].join("");
    const raw = {
      providers: [
        {
          id: "o",
          wire: "openai",
          base_url: "http://127.0.0.1:1/v1",
          api_keys: [placeholder, placeholder],
        },
      ],
      accounts: [{ id: "a", byok: [{ provider: "o", key: placeholder }], keys: [] }],
    };
    expect(problemsOf(raw, {})).toEqual([
      "environment variable TEAM_KEY is not set (used at providers[0].api_keys[0], providers[0].api_keys[1], accounts[0].byok[0].key)",
    ]);
  });

  it("refuses a file that is missing or not JSON, saying which", () => {
    const bad = join(dir, "bad.json");
    writeFileSync(bad, "{ nope");
    expect(() => loadConfigFile(bad)).toThrow(/is not valid JSON/);
    expect(() => loadConfigFile(join(dir, "missing.json"))).toThrow(
      /cannot read .*missing\.json: no such file or directory; write it \(every field, with its default, is in docs\/configuration\.md\) or give the path of yours$/m,
    );
  });
});

describe("applying a config", () => {
  /** A store with the config-apply repository over its database. */
  const open = (name: string) => {
    const store = new Store(join(dir, name));
    const { configApply } = store.repos;
    const apply = (config: GatewayConfig, now?: number) =>
      applyConfig(store, configApply, config, now);
    return { store, apply, dump: () => configApply.tables() };
  };

  it("is idempotent: applying twice equals applying once", async () => {
    const { store, apply, dump } = open("idem.db");
    const config = parseConfig(baseConfig());
    await apply(config, 1_000);
    const once = JSON.stringify(await dump());
    await apply(config, 2_000);
    expect(JSON.stringify(await dump())).toBe(once);
    store.close();
  });

  it("keeps an unchanged account's runtime state and updates a changed one", async () => {
    const { store, apply } = open("state.db");
    await apply(parseConfig(baseConfig()));
    store.ledgerRepository.updateAccount("acct", { balance_micro: 5 });
    await apply(parseConfig(baseConfig()));
    expect(store.getAccount("acct")!.balance_micro).toBe(5);
    const changed = baseConfig();
    changed.accounts![0] = { ...changed.accounts![0], balance_idr: 7 };
    await apply(parseConfig(changed));
    expect(store.getAccount("acct")!.balance_micro).toBe(7_000_000);
    store.close();
  });

  it("stores key values only as SHA-256 hashes", async () => {
    const { store, apply, dump } = open("hash.db");
    await apply(parseConfig(baseConfig()));
    const raw = JSON.stringify(await dump());
    expect(raw).not.toContain(KEY);
    expect(store.findKeyByValue(KEY)?.id).toBe("k1");
    store.close();
  });
});
