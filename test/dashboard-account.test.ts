import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { quota } from "./support/api.js";
import { dashboardCsrf, type OwnerBrowser, ownerSession } from "./support/cli.js";
import { baseConfigWith, chat, post, type TestGateway, testGateway } from "./support/gateway.js";

let gw: TestGateway;
let owner: OwnerBrowser;
let csrf: string;

beforeAll(async () => {
  gw = await testGateway({
    config: baseConfigWith({
      providers: [{ id: "openai", wire: "openai", base_url: "http://127.0.0.1:9/v1" }],
    }),
  });
  owner = await ownerSession(gw);
  csrf = await dashboardCsrf(gw, owner);
});
afterAll(() => gw.close());

const api = (method: string, path: string, body?: unknown, headers: Record<string, string> = {}) =>
  fetch(`${gw.url}/api/dashboard${path}`, {
    method,
    headers: {
      cookie: owner.cookie,
      "x-csrf-token": csrf,
      "content-type": "application/json",
      ...headers,
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });

describe("the owner's dashboard API", () => {
  it("links, lists and unlinks BYOK keys, never returning a key whole", async () => {
    const secret = "sk-owner-linked-secret-9876";
    const created = await api("POST", "/byok", { provider: "openai", key: secret });
    expect(created.status).toBe(201);
    const linked = (await created.json()) as { id: string; key_hint: string };
    expect(linked.key_hint).toBe("...9876");
    const listText = await (await api("GET", "/byok")).text();
    expect(listText).not.toContain(secret);
    expect(JSON.parse(listText).data).toHaveLength(1);
    expect((await api("POST", "/byok", { provider: "nope", key: "x" })).status).toBe(400);
    expect((await api("DELETE", `/byok/${linked.id}`)).status).toBe(200);
    expect((await api("DELETE", `/byok/${linked.id}`)).status).toBe(404);
  });

  it("needs the session for reads and the CSRF token for writes", async () => {
    expect((await fetch(`${gw.url}/api/dashboard/byok`)).status).toBe(401);
    const noCsrf = await api(
      "POST",
      "/byok",
      { provider: "openai", key: "k" },
      { "x-csrf-token": "" },
    );
    expect(noCsrf.status).toBe(403);
    const crossSite = await api("GET", "/byok", undefined, { origin: "https://evil.example" });
    expect(crossSite.status).toBe(403);
  });

  it("sets PAYG without resetting what was spent", async () => {
    const res = await api("PUT", "/payg", { enabled: true, limit_idr: 50_000 });
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ payg: { enabled: true, limit_idr: 50_000 } });
    expect((await quota(gw)).payg).toMatchObject({ enabled: true, limit_idr: 50_000 });
    expect((await api("PUT", "/payg", { enabled: true, limit_idr: -1 })).status).toBe(400);
  });

  it("reports usage for the session's account", async () => {
    await post(gw, "/v1/chat/completions", chat());
    const summary = (await (await api("GET", "/usage/summary")).json()) as {
      requests: number;
      account_id: string;
    };
    expect(summary).toMatchObject({ account_id: "acct", requests: 1 });
    const recent = (await (await api("GET", "/usage/requests")).json()) as { data: unknown[] };
    expect(recent.data).toHaveLength(1);
  });
});
