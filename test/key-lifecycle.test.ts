import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKeyInDatabase } from "../src/cli/keys/create-offline.js";
import { admin } from "./support/api.js";
import {
  ADMIN_KEY,
  chat,
  KEY,
  LOGIN_KEY,
  post,
  SHARED_KEY,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";

/** Key lifecycle and authentication, as a client and an owner see them. */

const bearer = (key: string) => ({ authorization: `Bearer ${key}` });
const get = (gw: { url: string }, path: string, headers: Record<string, string> = {}) =>
  fetch(`${gw.url}${path}`, { headers });
type Json = Record<string, unknown>;

describe("keys on one gateway", () => {
  let gw: TestGateway;
  const RUN_ADMIN = "kn-run-only-admin-key-000000000000000";
  beforeAll(async () => {
    gw = await testGateway({ clock: "manual", autoAdvance: false, adminKeys: [RUN_ADMIN] });
  });
  afterAll(() => gw?.close());
  const advance = (ms: number) =>
    (gw as unknown as { clock: { advance(ms: number): void } }).clock.advance(ms);

  it("an admin key of this run (startGateway adminKeys, serve --manual-clock) shows /v1/models' internal fields, as a config admin key does", async () => {
    // The run's key is an admin key: the admin API takes it.
    expect((await get(gw, "/api/admin/accounts", bearer(RUN_ADMIN))).status).toBe(200);
    const byConfigKey = (await (await get(gw, "/v1/models", bearer(ADMIN_KEY))).json()) as {
      data: Json[];
    };
    expect(byConfigKey.data[0].internal).toBeDefined();
    const byRunKey = (await (await get(gw, "/v1/models", bearer(RUN_ADMIN))).json()) as {
      data: Json[];
    };
    expect(byRunKey).toEqual(byConfigKey);
    const one = (await (await get(gw, "/v1/models/mock-gpt", bearer(RUN_ADMIN))).json()) as Json;
    expect(one.internal).toBeDefined();
  });

  it("a request refused before the API (a shared key's per-address limit, a non-login key on /api/keys) does not move the key's last_used_at", async () => {
    const lastUsed = (id: string) => gw.services.store.getKey(id)!.last_used_at;
    let refused = 0;
    for (let i = 0; i < 31; i++) {
      const res = await get(gw, "/v1/files", bearer(SHARED_KEY));
      if (res.status === 429) refused++;
    }
    expect(refused).toBe(1);
    const lastAdmitted = lastUsed("ks");
    expect(lastAdmitted).not.toBeNull();
    advance(5_000);
    const res = await get(gw, "/v1/files", bearer(SHARED_KEY));
    expect(res.status).toBe(429);
    expect(await res.text()).toBe("too many requests, try again shortly");
    expect(lastUsed("ks")).toBe(lastAdmitted);

    expect((await get(gw, "/v1/account/quota", bearer(KEY))).status).toBe(200);
    const standardUsed = lastUsed("k1");
    advance(5_000);
    expect((await post(gw, "/api/keys", { label: "not mine" }, bearer(KEY))).status).toBe(403);
    expect(lastUsed("k1")).toBe(standardUsed);
  });

  it("a revoked key is refused with 401 'API key revoked' by its very next request on every route family", async () => {
    const made = await admin(gw, "POST", "/accounts/acct/keys", { label: "every route" });
    const { id, value } = (await made.json()) as { id: string; value: string };
    expect((await post(gw, "/v1/chat/completions", chat(), bearer(value))).status).toBe(200);
    expect((await admin(gw, "DELETE", `/keys/${id}`)).status).toBe(200);
    const h = bearer(value);
    const attempts: Record<string, Promise<Response>> = {
      chat: post(gw, "/v1/chat/completions", chat(), h),
      messages: post(
        gw,
        "/v1/messages",
        { model: "mock-gpt", max_tokens: 5, messages: [{ role: "user", content: "hi" }] },
        { "x-api-key": value, "anthropic-version": "2023-06-01" },
      ),
      responses: post(gw, "/v1/responses", { model: "mock-gpt", input: "hi" }, h),
      images: post(gw, "/v1/images/generations", { model: "mock-image", prompt: "a" }, h),
      jobs: get(gw, "/v1/jobs/job_unknown", h),
      files: get(gw, "/v1/files", h),
      quota: get(gw, "/v1/account/quota", h),
      mcp: post(
        gw,
        "/mcp",
        { jsonrpc: "2.0", id: 1, method: "tools/list" },
        { ...h, accept: "application/json, text/event-stream" },
      ),
      whoami: get(gw, "/api/auth/whoami", h),
    };
    for (const [route, pending] of Object.entries(attempts)) {
      const res = await pending;
      expect({ route, status: res.status, body: await res.text() }).toEqual({
        route,
        status: 401,
        body: "API key revoked: make a new key on the dashboard's Keys page or with `gateway keys create`, and send that one",
      });
    }
  });

  it("gateway keys create --db refuses an empty, blank or 101-character label, as /api/keys and the dashboard do", async () => {
    for (const label of ["", "   ", "x".repeat(101)]) {
      expect((await post(gw, "/api/keys", { label }, bearer(LOGIN_KEY))).status).toBe(400);
      await expect(
        createKeyInDatabase({ db: gw.dbPath, label, shared: false }),
        `label of ${label.length} characters`,
      ).rejects.toThrow(/label/);
    }
  });

  it("the admin API refuses a blank or 101-character key label, for a new key and for a new account's first key", async () => {
    const blank = await admin(gw, "POST", "/accounts/acct/keys", { label: "   " });
    expect(blank.status).toBe(400);
    const long = await admin(gw, "POST", "/accounts", { id: "long", key_label: "y".repeat(101) });
    expect(long.status).toBe(400);
    const empty = await admin(gw, "POST", "/accounts", { id: "empty", key_label: "" });
    expect(empty.status).toBe(400);
  });
});
