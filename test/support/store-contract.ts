import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { ConfigRows } from "../../src/store/config-apply.js";
import { loggedEndpoint, type RequestSource } from "../../src/store/request-source.js";
import { hashSecret } from "../../src/store/secrets.js";
import type { GatewayStore, RequestLogValues } from "../../src/store/types.js";

/** A store on a fresh, empty database, with what a test needs beside the store's own interface. */
export interface StoreUnderTest {
  store: GatewayStore;
  /** Writes a config's rows and tells the store, as the gateway applies a config. */
  applyConfig(rows: ConfigRows): Promise<void>;
  /** Writes request_log rows as settlement writes them. */
  recordRequests(rows: RequestLogValues[]): Promise<void>;
  /** Counts a free model's tokens as the ledger does. */
  addFreeTokens(model: string, windowSeconds: number, tokens: number, now: number): Promise<void>;
  /** A BYOK credential's `secret` column as the database holds it. */
  storedByokSecret(id: string): Promise<string | undefined>;
  /** A provider's row, every column, as the database holds it. */
  storedProvider(id: string): Promise<Record<string, unknown> | undefined>;
  close(): Promise<void>;
}

export const adminSecret = "admin-secret-value";

/** A catalog with one provider (BYOK credentials name it), one model, one route, two tiers. */
export const catalogConfig = (models = ["fast-model"]): ConfigRows => ({
  tiers: [
    {
      name: "free",
      rank: 0,
      free_rpm: 20,
      free_daily: 50,
      burst_spacing_ms: 200,
      burst_queue: 8,
      min_topup_micro: null,
    },
    {
      name: "pro",
      rank: 1,
      free_rpm: 60,
      free_daily: 500,
      burst_spacing_ms: 100,
      burst_queue: 16,
      min_topup_micro: 10_000_000,
    },
  ],
  providers: [
    {
      id: "upstream",
      wire: "openai",
      base_url: "http://127.0.0.1:9/v1",
      base_url_sealed: null,
      base_url_shown: "http://127.0.0.1:9/v1",
      api_key_count: 1,
      timeout_ms: 30_000,
      max_concurrency: null,
      options_json: "{}",
      responses_native: 0,
    },
  ],
  models: models.map((name) => ({
    name,
    provider_id: "upstream",
    upstream_model: `${name}-upstream`,
    modality: "chat",
    price_input_per_mtok: 1_000_000,
    price_output_per_mtok: 2_000_000,
    price_per_request: 0,
    price_per_unit: 0,
    subscribers_only: 0,
    context_window: 128_000,
    max_output_tokens: 4096,
    free_token_budget: null,
    free_token_window_seconds: null,
    active: 1,
    created_at: 1_000,
    unsupported_tools: null,
  })),
  routes: [{ name: "chain", steps_json: JSON.stringify(models) }],
  accounts: [],
  adminKeys: [{ id: "admin_1", hash: hashSecret(adminSecret) }],
  now: 1_000,
});

const day = (iso: string) => Date.parse(iso);

/** A request_log row as settlement writes it, from the fields a test cares about. */
export function logRow(
  fields: Partial<{
    id: string;
    accountId: string;
    keyId: string | null;
    model: string | null;
    state: "settled" | "failed" | "interrupted";
    payment: RequestLogValues[6];
    costMicro: number;
    inputTokens: number;
    outputTokens: number;
    status: number;
    errorCode: string | null;
    stream: number;
    createdAt: number;
    toolsOmitted: string | null;
    source: RequestSource;
    servedModel: string | null;
  }>,
): RequestLogValues {
  const createdAt = fields.createdAt ?? day("2024-01-01T10:00:00Z");
  return [
    fields.id ?? "req",
    fields.accountId ?? "acct",
    fields.keyId ?? null,
    loggedEndpoint("/v1/chat/completions", fields.source),
    fields.model === undefined ? "fast-model" : fields.model,
    fields.state ?? "settled",
    fields.payment ?? "balance",
    null,
    fields.costMicro ?? 0,
    fields.costMicro ?? 0,
    fields.inputTokens ?? 0,
    fields.outputTokens ?? 0,
    fields.status ?? 200,
    fields.errorCode ?? null,
    "upstream",
    fields.stream ?? 0,
    createdAt,
    createdAt + 250,
    fields.toolsOmitted ?? null,
    fields.servedModel ?? null,
  ];
}

const newAccount = (id: string, now = 5_000) => ({
  id,
  name: `Account ${id}`,
  balanceMicro: 2_000_000,
  rpmLimit: 60,
  tier: "free",
  now,
});

/**
 * What every backend of the store must do through `GatewayStore`, each test on a fresh database
 * (`open`): SQLite (src/store/store-contract.test.ts) and Postgres (src/store/postgres/store.test.ts).
 */
export function describeStore(backend: string, open: () => Promise<StoreUnderTest>): void {
  describe(`store (${backend})`, () => {
    let under: StoreUnderTest;
    let store: GatewayStore;
    beforeEach(async () => {
      under = await open();
      store = under.store;
      await under.applyConfig(catalogConfig());
    });
    afterEach(async () => {
      await under.close();
    });

    describe("accounts", () => {
      it("create, read back, list in creation order and count", async () => {
        const created = await store.createAccount(newAccount("acct-b", 5_000));
        expect(created).toMatchObject({
          id: "acct-b",
          name: "Account acct-b",
          status: "active",
          balance_micro: 2_000_000,
          rpm_limit: 60,
          tier: "free",
          payg_enabled: 0,
          payg_window_start: 5_000,
          payg_spent_micro: 0,
          subscription_json: null,
          created_at: 5_000,
        });
        await store.createAccount(newAccount("acct-a", 5_000));
        await store.createAccount(newAccount("acct-c", 4_000));
        expect(store.getAccount("acct-b")).toMatchObject({
          id: "acct-b",
          balance_micro: 2_000_000,
        });
        expect(store.getAccount("nobody")).toBeUndefined();
        expect(store.listAccounts().map((account) => account.id)).toEqual([
          "acct-c",
          "acct-a",
          "acct-b",
        ]);
        expect(store.accountCount()).toBe(3);
        expect(await store.readAccount("acct-a")).toMatchObject({ id: "acct-a", tier: "free" });
        expect(await store.readAccount("nobody")).toBeUndefined();
        expect(
          (await store.readAccounts()).map(({ id, balance_micro }) => ({ id, balance_micro })),
        ).toEqual([
          { id: "acct-c", balance_micro: 2_000_000 },
          { id: "acct-a", balance_micro: 2_000_000 },
          { id: "acct-b", balance_micro: 2_000_000 },
        ]);
        await expect((async () => store.createAccount(newAccount("acct-a")))()).rejects.toThrow();
      });

      it("update sets only profile columns; status changes are seen at once", async () => {
        await store.createAccount(newAccount("acct"));
        const subscription = JSON.stringify({ plan: "team", windows: [] });
        expect(
          await store.updateAccount("acct", {
            name: "Renamed",
            tier: "pro",
            rpm_limit: 120,
            subscription_json: subscription,
            subscription_started_at: 7_000,
            // Money is the Ledger's: an account write leaves it alone.
            balance_micro: 1,
          } as Parameters<GatewayStore["updateAccount"]>[1]),
        ).toBe(true);
        expect(store.getAccount("acct")).toMatchObject({
          name: "Renamed",
          tier: "pro",
          rpm_limit: 120,
          subscription_json: subscription,
          subscription_started_at: 7_000,
          balance_micro: 2_000_000,
        });
        expect(await store.readAccount("acct")).toMatchObject({
          name: "Renamed",
          balance_micro: 2_000_000,
        });
        expect(await store.updateAccount("acct", {})).toBe(true);
        expect(await store.updateAccount("nobody", { name: "x" })).toBe(false);
        expect(await store.updateAccount("nobody", {})).toBe(false);

        expect(await store.setAccountStatus("acct", "suspended")).toBe(true);
        expect(store.getAccount("acct")?.status).toBe("suspended");
        expect(await store.setAccountStatus("nobody", "suspended")).toBe(false);
      });
    });

    describe("keys", () => {
      beforeEach(async () => {
        await store.createAccount(newAccount("acct"));
      });

      it("a key is minted once, stored as a hash and found by its value", async () => {
        const { key, value } = await store.createKey({
          accountId: "acct",
          label: "laptop",
          kind: "standard",
          now: 10_000,
        });
        expect(value).toMatch(/^kn-[A-Za-z0-9_-]{43}$/);
        expect(key).toEqual({
          id: key.id,
          account_id: "acct",
          prefix: value.slice(0, 7),
          label: "laptop",
          kind: "standard",
          parent_key_id: null,
          created_at: 10_000,
          last_used_at: null,
          revoked_at: null,
        });
        expect(store.getKey(key.id)).toEqual(key);
        expect(await store.findKeyByValue(value)).toEqual({ ...key, account_status: "active" });
        expect(await store.findKeyByValue(`${value}x`)).toBeUndefined();
        expect(await store.findKeyByValue("kn-never-made")).toBeUndefined();

        store.touchKey(key.id, 12_000);
        expect(store.getKey(key.id)?.last_used_at).toBe(12_000);
        expect((await store.findKeyByValue(value))?.last_used_at).toBe(12_000);
        // A listing shows the use at once, though the request did not wait for its write.
        expect(await store.listKeys("acct")).toEqual([{ ...key, last_used_at: 12_000 }]);
      });

      it("revoke once; the key is then found revoked, and listed with the others", async () => {
        const first = await store.createKey({
          accountId: "acct",
          label: "one",
          kind: "standard",
          now: 10_000,
        });
        const second = await store.createKey({
          accountId: "acct",
          label: "two",
          kind: "shared",
          now: 9_000,
        });
        expect(await store.revokeKey(first.key.id, 11_000)).toBe(true);
        expect(await store.revokeKey(first.key.id, 12_000)).toBe(false);
        expect(await store.revokeKey("key_nothing", 12_000)).toBe(false);
        expect(await store.findKeyByValue(first.value)).toMatchObject({
          id: first.key.id,
          revoked_at: 11_000,
        });
        expect(store.getKey(first.key.id)?.revoked_at).toBe(11_000);
        expect((await store.listKeys("acct")).map((key) => [key.id, key.revoked_at])).toEqual([
          [second.key.id, null],
          [first.key.id, 11_000],
        ]);
        expect(await store.listKeys("nobody")).toEqual([]);
      });

      it("tool keys: every key a login key of the account minted, whichever login, in creation order", async () => {
        await store.createAccount(newAccount("other"));
        const mintedBy = async (accountId: string) =>
          (await store.createKey({ accountId, label: "login", kind: "login" })).key.id;
        const [firstLogin, secondLogin, otherLogin] = [
          await mintedBy("acct"),
          await mintedBy("acct"),
          await mintedBy("other"),
        ];
        const tool = (accountId: string, parentKeyId: string, now: number) =>
          store.createKey({ accountId, label: "tool", kind: "standard", parentKeyId, now });
        const later = await tool("acct", firstLogin, 30_000);
        const earlier = await tool("acct", secondLogin, 20_000);
        await tool("other", otherLogin, 25_000);
        // The account's own keys that no login key minted: the dashboard's, the config's.
        await store.createKey({ accountId: "acct", label: "app", kind: "standard", now: 10_000 });
        expect(later.key.parent_key_id).toBe(firstLogin);
        expect((await store.listToolKeys("acct")).map((key) => key.id)).toEqual([
          earlier.key.id,
          later.key.id,
        ]);
        expect(await store.listToolKeys("nobody")).toEqual([]);
      });

      it("a suspended account's key is found with its status", async () => {
        const { value } = await store.createKey({
          accountId: "acct",
          label: "k",
          kind: "standard",
        });
        await store.setAccountStatus("acct", "suspended");
        expect((await store.findKeyByValue(value))?.account_status).toBe("suspended");
        await store.setAccountStatus("acct", "active");
        expect((await store.findKeyByValue(value))?.account_status).toBe("active");
      });

      it("admin keys from the config are recognised by value", () => {
        expect(store.isAdminKey(adminSecret)).toBe(true);
        expect(store.isAdminKey(`${adminSecret}!`)).toBe(false);
      });
    });

    describe("BYOK", () => {
      beforeEach(async () => {
        await store.createAccount(newAccount("acct"));
        await store.createAccount(newAccount("other"));
      });

      it("credentials are kept in order, opened in memory and sealed in the database", async () => {
        const first = await store.addByok("acct", "upstream", "sk-first-secret", "main", 20_000);
        const second = await store.addByok("acct", "upstream", "sk-second-secret", "spare", 20_000);
        expect(first).toMatchObject({
          account_id: "acct",
          provider_id: "upstream",
          secret: "sk-first-secret",
          label: "main",
          position: 0,
          created_at: 20_000,
        });
        expect(second.position).toBe(1);
        expect(
          store.listByok("acct").map((row) => [row.id, row.secret, row.label, row.position]),
        ).toEqual([
          [first.id, "sk-first-secret", "main", 0],
          [second.id, "sk-second-secret", "spare", 1],
        ]);
        expect(store.listByok("other")).toEqual([]);

        const stored = await under.storedByokSecret(first.id);
        expect(stored).toBeDefined();
        expect(stored).not.toBe("sk-first-secret");
        expect(stored).not.toContain("sk-first-secret");
        expect(stored).toMatch(/^v1\./);
        const sealed = store.sealByok(first.id, "sk-other");
        expect(sealed).not.toContain("sk-other");
        expect(sealed).not.toBe(store.sealByok(first.id, "sk-other"));
      });

      it("delete only the account's own credential", async () => {
        const kept = await store.addByok("acct", "upstream", "sk-kept", "kept", 20_000);
        const gone = await store.addByok("acct", "upstream", "sk-gone", "gone", 20_000);
        expect(await store.deleteByok("other", gone.id)).toBe(false);
        expect(store.listByok("acct")).toHaveLength(2);
        expect(await store.deleteByok("acct", gone.id)).toBe(true);
        expect(await store.deleteByok("acct", gone.id)).toBe(false);
        expect(store.listByok("acct").map((row) => row.id)).toEqual([kept.id]);
        expect(await under.storedByokSecret(gone.id)).toBeUndefined();
      });

      it("mark a credential refused from its first refusal until it is cleared", async () => {
        const first = await store.addByok("acct", "upstream", "sk-first", "first", 20_000);
        const second = await store.addByok("acct", "upstream", "sk-second", "second", 20_000);
        expect(first.refused_at).toBeNull();
        await store.markByokRefused("acct", first.id, 30_000);
        await store.markByokRefused("acct", first.id, 40_000);
        // Another account's id changes nothing.
        await store.markByokRefused("other", second.id, 30_000);
        expect(store.listByok("acct").map((row) => [row.id, row.secret, row.refused_at])).toEqual([
          [first.id, "sk-first", 30_000],
          [second.id, "sk-second", null],
        ]);
        await store.markByokRefused("acct", first.id, null);
        expect(store.listByok("acct").map((row) => row.refused_at)).toEqual([null, null]);
      });
    });

    describe("catalog", () => {
      it("holds the config's rows, in name order, with the provider keys given in memory", async () => {
        await under.applyConfig(catalogConfig(["zeta", "Alpha", "beta"]));
        const catalog = store.getCatalog();
        // Byte order, as SQLite compares text: capitals first. The models are this config's: the
        // earlier one's fast-model, left out, is gone.
        expect([...catalog.models.keys()]).toEqual(["Alpha", "beta", "zeta"]);
        expect(catalog.models.get("zeta")).toMatchObject({
          provider_id: "upstream",
          upstream_model: "zeta-upstream",
          price_input_per_mtok: 1_000_000,
          active: 1,
          unsupported_tools: null,
        });
        expect(catalog.routes.get("chain")).toEqual(["zeta", "Alpha", "beta"]);
        expect([...catalog.tiers.keys()]).toEqual(["free", "pro"]);
        expect(catalog.tiers.get("pro")).toMatchObject({ rank: 1, min_topup_micro: 10_000_000 });
        expect(catalog.providers.get("upstream")).toMatchObject({
          wire: "openai",
          api_key_count: 1,
          api_keys: [],
        });
        expect(store.providersWithoutKeys()).toEqual(["upstream"]);

        store.setProviderKeys("upstream", ["sk-provider"]);
        const keys = store.getCatalog().providers.get("upstream")?.api_keys;
        expect(keys).toEqual(["sk-provider"]);
        expect(store.providersWithoutKeys()).toEqual([]);
        // The same keys keep their array, so the key pool built on it keeps its state.
        store.setProviderKeys("upstream", ["sk-provider"]);
        expect(store.getCatalog().providers.get("upstream")?.api_keys).toBe(keys);
        await store.invalidateAll();
        expect(store.getCatalog().providers.get("upstream")?.api_keys).toBe(keys);
      });

      it("seals a base URL that carries a credential, opens it in memory only, and keeps its sealed form while the URL stays", async () => {
        const url =
          "https://proxy-user:proxy-pass@api.example.test/v1?key=url-secret-0123&api-version=2024-10-21";
        const columns = store.baseUrlColumns("upstream", url);
        expect(columns).toMatchObject({
          base_url: null,
          base_url_shown: "https://***@api.example.test/v1?***",
        });
        const config = catalogConfig();
        const provider = { ...config.providers[0], ...columns };
        await under.applyConfig({ ...config, providers: [provider] });
        const row = JSON.stringify(await under.storedProvider("upstream"));
        for (const secret of ["proxy-user", "proxy-pass", "url-secret-0123", "api-version"])
          expect(row).not.toContain(secret);
        expect(row).toContain("https://***@api.example.test/v1?***");
        expect(store.getCatalog().providers.get("upstream")?.base_url).toBe(url);

        // Applying the same URL again writes the same row; another URL is sealed afresh.
        expect(store.baseUrlColumns("upstream", url)).toEqual(columns);
        expect(store.baseUrlColumns("upstream", `${url}&v=2`).base_url_sealed).not.toBe(
          columns.base_url_sealed,
        );
        const plain = "https://api.example.test/v1";
        expect(store.baseUrlColumns("upstream", plain)).toEqual({
          base_url: plain,
          base_url_sealed: null,
          base_url_shown: plain,
        });

        // A sealed URL copied onto another provider's row does not open there: that provider has
        // no URL to send to, and the log says so without the URL.
        const logged = vi.spyOn(console, "error").mockImplementation(() => {});
        try {
          await under.applyConfig({
            ...config,
            providers: [provider, { ...provider, id: "copy" }],
          });
          expect(store.getCatalog().providers.get("copy")?.base_url).toBeNull();
          expect(store.getCatalog().providers.get("upstream")?.base_url).toBe(url);
          const lines = logged.mock.calls.map((call) => call.join(" "));
          expect(lines).toContain(
            "provider copy: its sealed base_url does not open; its calls fail",
          );
          expect(lines.join("\n")).not.toContain("url-secret-0123");
        } finally {
          logged.mockRestore();
        }
      });
    });

    describe("usage", () => {
      const since = day("2024-01-01T00:00:00Z");

      beforeEach(async () => {
        await store.createAccount(newAccount("acct"));
        await under.recordRequests([
          logRow({
            id: "r-old",
            createdAt: day("2023-12-31T23:59:59.999Z"),
            costMicro: 9_000_000,
            inputTokens: 100,
          }),
          // A route's request its step served.
          logRow({
            id: "r1",
            keyId: "key_1",
            model: "a-route",
            servedModel: "fast-model",
            costMicro: 1_500_000,
            inputTokens: 10,
            outputTokens: 20,
          }),
          // A route's request none of its steps served.
          logRow({
            id: "r2",
            model: "a-route",
            state: "failed",
            status: 502,
            errorCode: "upstream_error",
            stream: 1,
            inputTokens: 5,
            createdAt: day("2024-01-02T00:00:00.500Z"),
            toolsOmitted: JSON.stringify(["web_search"]),
          }),
          logRow({
            id: "r3",
            model: null,
            state: "interrupted",
            costMicro: 250_001,
            inputTokens: 1,
            outputTokens: 2,
            createdAt: day("2024-01-02T23:59:59.999Z"),
          }),
          // Written after r3 in the same millisecond: newer.
          logRow({
            id: "r4",
            payment: "byok",
            createdAt: day("2024-01-02T23:59:59.999Z"),
            source: "mcp",
          }),
          logRow({ id: "elsewhere", accountId: "other", costMicro: 7_000_000 }),
        ]);
      });

      it("summary, per day and per model since a time", async () => {
        expect(await store.usageSummary("acct", since)).toEqual({
          since: "2024-01-01T00:00:00.000Z",
          requests: 4,
          succeeded: 2,
          failed: 2,
          input_tokens: 16,
          output_tokens: 22,
          cost_idr: 1.750001,
        });
        expect(await store.usageDaily("acct", since)).toEqual([
          { date: "2024-01-01", requests: 1, input_tokens: 10, output_tokens: 20, cost_idr: 1.5 },
          {
            date: "2024-01-02",
            requests: 3,
            input_tokens: 6,
            output_tokens: 2,
            cost_idr: 0.250001,
          },
        ]);
        // By the model that served (r1: the route's step), else the one asked for (r2: the
        // route none of whose steps served; r3: none named).
        expect(await store.usageByModel("acct", since)).toEqual([
          {
            model: "fast-model",
            requests: 2,
            input_tokens: 10,
            output_tokens: 20,
            cost_micro: 1_500_000,
          },
          { model: "-", requests: 1, input_tokens: 1, output_tokens: 2, cost_micro: 250_001 },
          { model: "a-route", requests: 1, input_tokens: 5, output_tokens: 0, cost_micro: 0 },
        ]);
      });

      it("the latest time the newest requests record, an end included", async () => {
        expect(await store.latestRecordedAt()).toBe(day("2024-01-02T23:59:59.999Z") + 250);
      });

      it("an account with nothing logged has zeros and empty lists", async () => {
        expect(await store.usageSummary("nobody", since)).toEqual({
          since: "2024-01-01T00:00:00.000Z",
          requests: 0,
          succeeded: 0,
          failed: 0,
          input_tokens: 0,
          output_tokens: 0,
          cost_idr: 0,
        });
        expect(await store.usageDaily("nobody", since)).toEqual([]);
        expect(await store.usageByModel("nobody", since)).toEqual([]);
        expect(await store.recentRequests("nobody", 10)).toEqual([]);
        expect(await store.requestLog("nobody", 10)).toEqual([]);
      });

      it("recent requests newest first, as the usage endpoints show them", async () => {
        const recent = await store.recentRequests("acct", 3);
        expect(recent.map((request) => request.id)).toEqual(["r4", "r3", "r2"]);
        // A tool call of the MCP server: its endpoint, and where it came from apart.
        expect(recent[0]).toMatchObject({ endpoint: "/v1/chat/completions", via: "mcp" });
        expect(recent[1]).toEqual({
          id: "r3",
          created_at: "2024-01-02T23:59:59.999Z",
          endpoint: "/v1/chat/completions",
          model: null,
          served_model: null,
          state: "interrupted",
          status: 200,
          error_code: null,
          stream: false,
          payment: "balance",
          input_tokens: 1,
          output_tokens: 2,
          cost_idr: 0.250001,
          key_id: null,
        });
        expect(Object.keys(recent[1])).not.toContain("tools_omitted");
        expect(recent[2]).toMatchObject({
          id: "r2",
          model: "a-route",
          served_model: null,
          stream: true,
          status: 502,
          error_code: "upstream_error",
          tools_omitted: ["web_search"],
        });
        const all = await store.recentRequests("acct", 10);
        expect(all.map((request) => request.id)).toEqual(["r4", "r3", "r2", "r1", "r-old"]);
        expect(all[3]).toMatchObject({ model: "a-route", served_model: "fast-model" });

        const log = await store.requestLog("acct", 2);
        expect(log.map((row) => row.id)).toEqual(["r4", "r3"]);
        // One request by id, the same row the log lists; another account's id finds nothing.
        expect(await store.requestOf("acct", "r4")).toEqual(log[0]);
        expect(await store.requestOf("nobody", "r4")).toBeUndefined();
        expect(await store.requestOf("acct", "r-missing")).toBeUndefined();
        expect(log[0]).toMatchObject({
          account_id: "acct",
          key_id: null,
          endpoint: "mcp:/v1/chat/completions",
          model: "fast-model",
          state: "settled",
          payment: "byok",
          reserved_micro: 0,
          cost_micro: 0,
          stream: 0,
          created_at: day("2024-01-02T23:59:59.999Z"),
          finished_at: day("2024-01-02T23:59:59.999Z") + 250,
          tools_omitted: null,
        });
      });

      it("free tokens count in their model's current window only", async () => {
        const now = day("2024-01-01T10:30:00Z");
        await under.addFreeTokens("free-model", 3600, 120, now);
        await under.addFreeTokens("free-model", 3600, 30, now + 60_000);
        expect(await store.freeTokensUsed("free-model", 3600, now)).toBe(150);
        expect(await store.freeTokensUsed("free-model", 3600, now + 3_600_000)).toBe(0);
        expect(await store.freeTokensUsed("other-model", 3600, now)).toBe(0);
      });

      it("free tokens of a window older than the stored one count in the stored one, which a clock behind it reads", async () => {
        const hour = 3_600_000;
        const now = day("2024-01-01T10:30:00Z");
        await under.addFreeTokens("free-model", 3600, 100, now + hour);
        // A stream's mark applied after the window rolled, or a gateway whose clock is behind.
        await under.addFreeTokens("free-model", 3600, 7, now);
        expect(await store.freeTokensUsed("free-model", 3600, now + hour)).toBe(107);
        expect(await store.freeTokensUsed("free-model", 3600, now)).toBe(107);
        await under.addFreeTokens("free-model", 3600, 5, now + 2 * hour);
        expect(await store.freeTokensUsed("free-model", 3600, now + 2 * hour)).toBe(5);
      });
    });
  });
}
