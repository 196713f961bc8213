import OpenAI from "openai";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { money } from "./support/api.js";
import { type OwnerBrowser, ownerSession } from "./support/cli.js";
import {
  credentialSeen,
  type FakeUpstream,
  fakeUpstream,
  openaiError,
  openaiJson,
  openaiStreamSteps,
} from "./support/fake-upstream.js";
import {
  ADMIN_KEY,
  backends,
  baseConfigWith,
  gatewayOn,
  KEY,
  POOR_KEY,
  type TestGateway,
} from "./support/gateway.js";

/**
 * The account's own provider keys (BYOK) as their owner sees them: how a request they served is
 * recorded (the usage report, the admin listing, the dashboard), and what the caller and the owner
 * are told when the provider refuses one.
 */

const OWN_KEY = "sk-owner-own-key-secret-4242";
const POOR_OWN_KEY = "sk-poor-own-key-secret-5353";
const POOL_KEY = "sk-gateway-pool-key-6464";

interface ListedByok {
  id: string;
  provider: string;
  key_hint: string;
  status: string;
  refused_at: number | null;
}

interface UsageEntry {
  id: string;
  payment: string;
  cost_idr: number;
  state: string;
}

describe.each(backends)("BYOK keys as their owner sees them (%s)", (backend) => {
  let upstream: FakeUpstream;
  let gw: TestGateway;
  let owner: OwnerBrowser;
  let csrf: string;
  let openai: OpenAI;

  const dashboardApi = (method: string, path: string, body?: unknown) =>
    fetch(`${gw.url}/api/dashboard${path}`, {
      method,
      headers: { cookie: owner.cookie, "x-csrf-token": csrf, "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  const dashboardPage = async (path = "/dashboard") => {
    const res = await fetch(`${gw.url}${path}`, { headers: { cookie: owner.cookie } });
    expect(res.status).toBe(200);
    return res.text();
  };
  const ownKeys = async (): Promise<ListedByok[]> =>
    ((await (await dashboardApi("GET", "/byok")).json()) as { data: ListedByok[] }).data;
  const usage = async (key = KEY, limit = 20): Promise<UsageEntry[]> => {
    const res = await fetch(`${gw.url}/v1/usage/requests?limit=${limit}`, {
      headers: { authorization: `Bearer ${key}` },
    });
    return ((await res.json()) as { data: UsageEntry[] }).data;
  };
  const ask = (client = openai) =>
    client.chat.completions.create({
      model: "own-model",
      max_tokens: 20,
      messages: [{ role: "user", content: "hi" }],
    });

  beforeAll(async () => {
    upstream = await fakeUpstream("openai");
    gw = await gatewayOn(backend, {
      config: baseConfigWith({
        providers: [
          {
            id: "own-prov",
            wire: "openai",
            base_url: upstream.baseUrl,
            api_keys: [POOL_KEY],
            timeout_ms: 3_000,
          },
        ],
        models: [
          {
            name: "own-model",
            provider: "own-prov",
            // 1 IDR per input token, 2 per output token: the fake's usage (11 in, 7 out) is 25 IDR.
            price_input_per_mtok: 1_000_000,
            price_output_per_mtok: 2_000_000,
            max_output_tokens: 100,
          },
        ],
      }),
    });
    owner = await ownerSession(gw);
    const html = await dashboardPage();
    csrf = /name="csrf-token" content="([^"]+)"/.exec(html)![1];
    const linked = await dashboardApi("POST", "/byok", { provider: "own-prov", key: OWN_KEY });
    expect(linked.status).toBe(201);
    const poor = await fetch(`${gw.url}/api/admin/accounts/poor/byok`, {
      method: "POST",
      headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ provider: "own-prov", key: POOR_OWN_KEY }),
    });
    expect(poor.status).toBe(201);
    openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 10_000 });
  });
  afterAll(async () => {
    await gw?.close();
    await upstream?.close();
  });
  beforeEach(() => upstream.reset());

  it('records a request served with the account\'s own key as payment "byok" at no cost, though the account has balance', async () => {
    const before = await money(gw);
    // One at a time, then several at once: a backend settles them alone, together or (Postgres)
    // from a lease of the balance, and each way must say who paid the provider.
    for (let i = 0; i < 3; i++) expect((await ask()).choices[0].message.content).toBe("ok");
    upstream.queue({ kind: "sse", steps: openaiStreamSteps(["o", "k"]) });
    await openai.chat.completions
      .stream({ model: "own-model", messages: [{ role: "user", content: "x" }] })
      .finalChatCompletion();
    await Promise.all(Array.from({ length: 4 }, () => ask()));
    expect(upstream.requests.map(credentialSeen)).toEqual(Array(8).fill(OWN_KEY));
    expect(await money(gw)).toEqual(before);

    const served = (await usage()).filter((r) => r.state === "settled").slice(0, 8);
    expect(served).toHaveLength(8);
    for (const r of served) expect(r).toMatchObject({ payment: "byok", cost_idr: 0 });

    const listed = await fetch(`${gw.url}/api/admin/requests?model=own-model&limit=8`, {
      headers: { authorization: `Bearer ${ADMIN_KEY}` },
    });
    const adminRows = ((await listed.json()) as { data: { payment: string }[] }).data;
    expect(adminRows.map((r) => r.payment)).toEqual(Array(8).fill("byok"));

    // The owner's pages: the request's own page says it was paid with their own key.
    const page = await dashboardPage(`/dashboard/requests/${encodeURIComponent(served[0].id)}`);
    expect(page).toMatch(/<dt>Paid by<\/dt><dd>[^<]*own provider key/);
    const dashboard = await dashboardPage();
    const row = new RegExp(`<tr id="request-${served[0].id}">[\\s\\S]*?</tr>`).exec(dashboard);
    expect(row?.[0]).toContain("own key");
  });

  it("names the account's own key when its provider refuses it, and shows the owner the key refused until it works again", async () => {
    upstream.handle((req) =>
      credentialSeen(req) === OWN_KEY
        ? openaiError(401, `Incorrect API key provided: ${OWN_KEY}`, "invalid_api_key")
        : openaiError(500, "down", null, "server_error"),
    );
    const before = await money(gw);
    const sentAt = Date.now();
    const res = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "own-model", messages: [{ role: "user", content: "x" }] }),
    });
    const text = await res.text();
    const answeredAt = Date.now();
    expect(res.status).toBe(503);
    expect(upstream.requests.map(credentialSeen)).toEqual([OWN_KEY, POOL_KEY]);
    for (const secret of [OWN_KEY, OWN_KEY.slice(-4), POOL_KEY]) expect(text).not.toContain(secret);
    const { error } = JSON.parse(text) as {
      error: { code: string; type: string; message: string };
    };
    expect(error).toMatchObject({ code: "all_providers_failed", type: "all_providers_failed" });
    expect(error.message).toMatch(/own key for own-prov.*refused|refused.*own key for own-prov/);
    expect(await money(gw)).toEqual(before);

    // The owner's list (JSON and page) marks the key refused, with when.
    const [refused] = await ownKeys();
    expect(refused.status).toBe("refused");
    // Marked while the request ran, on the gateway's (real) clock.
    expect(refused.refused_at).toBeGreaterThanOrEqual(sentAt);
    expect(refused.refused_at).toBeLessThanOrEqual(answeredAt);
    const adminList = await fetch(`${gw.url}/api/admin/accounts/acct/byok`, {
      headers: { authorization: `Bearer ${ADMIN_KEY}` },
    });
    expect(((await adminList.json()) as { data: ListedByok[] }).data[0].refused_at).toBe(
      refused.refused_at,
    );
    const byokRow = () =>
      dashboardPage().then(
        (html) => new RegExp(`<tr id="byok-${refused.id}">[\\s\\S]*?</tr>`).exec(html)?.[0] ?? "",
      );
    const marked = await byokRow();
    expect(marked).toContain("Refused by the provider");
    expect(marked).toContain(`datetime="${new Date(refused.refused_at!).toISOString()}"`);

    // The key refused again, the pool answering: the caller is served (and charged); the key
    // stays marked from its first refusal.
    upstream.reset((req) =>
      credentialSeen(req) === OWN_KEY
        ? openaiError(401, "Incorrect API key provided", "invalid_api_key")
        : openaiJson("from the pool"),
    );
    expect((await ask()).choices[0].message.content).toBe("from the pool");
    expect((await usage(KEY, 1))[0]).toMatchObject({ payment: "balance", cost_idr: 25 });
    expect((await ownKeys())[0].refused_at).toBe(refused.refused_at);

    // Once the provider takes the key again, the mark goes.
    upstream.reset();
    expect((await ask()).choices[0].message.content).toBe("ok");
    expect(upstream.requests.map(credentialSeen)).toEqual([OWN_KEY]);
    expect((await ownKeys())[0]).toMatchObject({ status: "active", refused_at: null });
    const row = await byokRow();
    expect(row).toContain(refused.key_hint);
    expect(row).not.toContain("Refused by the provider");
  });

  it("treats a 403 for the account's own key as the key refused", async () => {
    upstream.handle((req) =>
      credentialSeen(req) === OWN_KEY
        ? openaiError(
            403,
            "Project does not have access",
            "model_access_denied",
            "permission_error",
          )
        : openaiJson("from the pool"),
    );
    expect((await ask()).choices[0].message.content).toBe("from the pool");
    expect((await ownKeys())[0]).toMatchObject({
      status: "refused",
      refused_at: expect.any(Number),
    });
    upstream.reset();
    await ask();
    expect((await ownKeys())[0].refused_at).toBeNull();
  });

  it("tells an account that can only use its own key that the provider refused it, with the spec's status and code", async () => {
    const poor = new OpenAI({
      apiKey: POOR_KEY,
      baseURL: `${gw.url}/v1`,
      maxRetries: 0,
      timeout: 10_000,
    });
    upstream.handle(() => openaiError(401, "Incorrect API key provided", "invalid_api_key"));
    const err = (await ask(poor).catch((e: unknown) => e)) as {
      status: number;
      code: string;
      message: string;
    };
    expect(err).toMatchObject({ status: 503, code: "upstream_error" });
    expect(err.message).toMatch(/own key for own-prov.*refused|refused.*own key for own-prov/);
    expect(err.message).not.toContain(POOR_OWN_KEY.slice(-4));
    expect(upstream.requests.map(credentialSeen)).toEqual([POOR_OWN_KEY]);
    const listed = await fetch(`${gw.url}/api/admin/accounts/poor/byok`, {
      headers: { authorization: `Bearer ${ADMIN_KEY}` },
    });
    expect(((await listed.json()) as { data: ListedByok[] }).data[0]).toMatchObject({
      status: "refused",
      refused_at: expect.any(Number),
    });
    // Its failed request is recorded as its own key's, and free.
    expect((await usage(POOR_KEY, 1))[0]).toMatchObject({
      payment: "byok",
      state: "failed",
      cost_idr: 0,
    });
  });
});
