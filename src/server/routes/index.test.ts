import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { type RunningGateway, startGateway } from "../gateway.js";

const modules = vi.hoisted(() => ({ loaded: new Set<string>(), dashboardsBuilt: 0 }));

vi.mock("./admin.js", async (original) => {
  modules.loaded.add("admin");
  return original();
});
vi.mock("./images.js", async (original) => {
  modules.loaded.add("images");
  return original();
});
vi.mock("./jobs.js", async (original) => {
  modules.loaded.add("jobs");
  return original();
});
vi.mock("./dashboard.js", async (original) => {
  modules.loaded.add("dashboard");
  const actual = await original<typeof import("./dashboard.js")>();
  return {
    ...actual,
    dashboardHandlers: (...args: Parameters<typeof actual.dashboardHandlers>) => {
      modules.dashboardsBuilt++;
      return actual.dashboardHandlers(...args);
    },
  };
});

const key = "kn-route-table-key-0000000000000";
const adminKey = "kn-route-table-admin-00000000000";

describe("the route table", () => {
  let gateway: RunningGateway;
  // The other test loads modules of its own: what the start loaded is taken before any test runs.
  let loadedAtStart: string[];
  beforeAll(async () => {
    gateway = await startGateway({
      config: {
        providers: [{ id: "mock", wire: "mock" }],
        models: [{ name: "mock-gpt", provider: "mock", price_input_per_mtok: 1_000 }],
        accounts: [{ id: "acct", balance_idr: 1_000_000, keys: [{ id: "k1", value: key }] }],
        admin_keys: [adminKey],
      },
    });
    loadedAtStart = [...modules.loaded];
  });
  afterAll(() => gateway.close());

  it("loads the modules of rows off the completion path on their first request, not at start", async () => {
    expect(loadedAtStart).toEqual([]);
    const before = [...modules.loaded];
    const completion = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "mock-gpt", messages: [{ role: "user", content: "hi" }] }),
    });
    expect(completion.status).toBe(200);
    expect([...modules.loaded]).toEqual(before);

    const accounts = await fetch(`${gateway.url}/api/admin/accounts`, {
      headers: { authorization: `Bearer ${adminKey}` },
    });
    expect(accounts.status).toBe(200);
    expect(((await accounts.json()) as { data: { id: string }[] }).data[0].id).toBe("acct");
    // The dashboard's handlers use the admin module too, so it may be loaded already.
    expect([...modules.loaded]).toContain("admin");
  });

  it("builds a module's handlers once for all its rows, however many first requests arrive together", async () => {
    const answers = await Promise.all(
      ["/dashboard/login", "/dashboard/assets/dashboard.js", "/dashboard/login"].map((path) =>
        fetch(`${gateway.url}${path}`),
      ),
    );
    // The sign-in page without an owner link's token is a 401, the script a 200.
    expect(answers.map((answer) => answer.status)).toEqual([401, 200, 401]);
    expect(modules.dashboardsBuilt).toBe(1);
    expect(modules.loaded.has("images")).toBe(false);
    expect(modules.loaded.has("jobs")).toBe(false);
  });
});
