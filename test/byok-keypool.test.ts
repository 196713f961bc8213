import OpenAI from "openai";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import {
  credentialSeen,
  deferred,
  type FakeUpstream,
  fakeUpstream,
  openaiError,
  openaiJson,
  openaiStreamSteps,
} from "./support/fake-upstream.js";
import {
  ADMIN_KEY,
  baseConfig,
  KEY,
  POOR_KEY,
  post,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";

/** Provider key pools (cooling, busy keys) and the account's own provider keys (BYOK). */

let upstream: FakeUpstream;
let gw: TestGateway;
let openai: OpenAI;

const BYOK_ONE = "sk-user-byok-one-1111";
const BYOK_TWO = "sk-user-byok-two-2222";
const POOL_BYOK_PROVIDER = "sk-pool-for-byok-9999";

beforeAll(async () => {
  upstream = await fakeUpstream("openai");
  const openaiProvider = (id: string, apiKeys: string[], extra: object = {}) => ({
    id,
    wire: "openai" as const,
    base_url: upstream.baseUrl,
    api_keys: apiKeys,
    timeout_ms: 3_000,
    ...extra,
  });
  const model = (name: string, provider: string) => ({
    name,
    provider,
    upstream_model: `${name}-upstream`,
    // 1 IDR per input token, 2 per output token: the fake's default usage (11 in, 7 out) costs 25 IDR.
    price_input_per_mtok: 1_000_000,
    price_output_per_mtok: 2_000_000,
    max_output_tokens: 100,
  });
  gw = await testGateway({
    config: baseConfig({
      providers: [
        openaiProvider("two-keys", ["sk-pool-A", "sk-pool-B"]),
        openaiProvider("one-key", ["sk-pool-single"], { max_concurrency: 1 }),
        openaiProvider("cooling", ["sk-cool-1", "sk-cool-2"]),
        openaiProvider("byok-prov", [POOL_BYOK_PROVIDER]),
        openaiProvider("refusing", ["sk-ref-A", "sk-ref-B"]),
      ],
      models: [
        model("two-keys-model", "two-keys"),
        model("one-key-model", "one-key"),
        model("cooling-model", "cooling"),
        model("byok-model", "byok-prov"),
        model("refusing-model", "refusing"),
        { name: "image-only", provider: "byok-prov", modality: "image", price_per_unit: 100 },
      ],
      routes: [],
    }),
  });
  openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 10_000 });
});
afterAll(async () => {
  await gw?.close();
  await upstream?.close();
});
beforeEach(() => upstream.reset());

const ask = (model: string, client = openai) =>
  client.chat.completions.create({
    model,
    max_tokens: 20,
    messages: [{ role: "user", content: "hi" }],
  });

describe("provider key pools", () => {
  it("treats a pool key the provider refuses (401) as a provider failure and cools that key", async () => {
    let refused = false;
    upstream.handle((req) => {
      if (credentialSeen(req) === "sk-ref-A" && !refused) {
        refused = true;
        return openaiError(401, "Incorrect API key provided: sk-ref-A", "invalid_api_key", "auth");
      }
      return openaiJson("ok");
    });
    const err = await ask("refusing-model").catch((e: unknown) => e);
    expect(err).toMatchObject({ status: 503, error: { code: "upstream_error" } });
    expect(JSON.stringify((err as { error: unknown }).error)).not.toContain("sk-ref");
    for (let i = 0; i < 2; i++) await ask("refusing-model");
    expect(upstream.requests.map(credentialSeen)).toEqual(["sk-ref-A", "sk-ref-B", "sk-ref-B"]);
  });

  it("cools a key that got 429: the next requests use the other key", async () => {
    let limited = false;
    upstream.handle((req) => {
      if (credentialSeen(req) === "sk-pool-A" && !limited) {
        limited = true;
        return openaiError(429, "rate limited", "rate_limit_exceeded", "requests");
      }
      return openaiJson("ok");
    });
    // Round robin would alternate A and B; until A cools down every request must use B.
    await expect(ask("two-keys-model")).rejects.toMatchObject({ status: 429 });
    for (let i = 0; i < 3; i++) await ask("two-keys-model");
    expect(upstream.requests.map(credentialSeen)).toEqual([
      "sk-pool-A",
      "sk-pool-B",
      "sk-pool-B",
      "sk-pool-B",
    ]);
  });

  it("answers 503 all_providers_failed with Retry-After when the only key is at max_concurrency", async () => {
    const release = deferred();
    upstream.handle(async () => {
      await release.promise;
      return openaiJson("slow but fine");
    });
    const slow = ask("one-key-model");
    while (upstream.requests.length === 0) await new Promise((r) => setTimeout(r, 5));

    const res = await post(gw, "/v1/chat/completions", {
      model: "one-key-model",
      messages: [{ role: "user", content: "x" }],
    });
    expect(res.status).toBe(503);
    expect(Number(res.headers.get("retry-after"))).toBeGreaterThan(0);
    expect(await res.json()).toMatchObject({
      error: { code: "all_providers_failed", type: "all_providers_failed" },
    });
    expect(upstream.requests).toHaveLength(1);

    release.resolve();
    expect((await slow).choices[0].message.content).toBe("slow but fine");
    // The key is free again once the first request finished.
    expect((await ask("one-key-model")).choices[0].message.content).toBe("slow but fine");
  });

  it("frees a busy key when the client abandons its stream", async () => {
    const never = deferred();
    const steps = openaiStreamSteps(["first", "never sent"]);
    steps[2] = { ...steps[2], gate: never.promise };
    upstream.queue({ kind: "sse", steps });
    const abort = new AbortController();
    const stream = await openai.chat.completions.create(
      { model: "one-key-model", stream: true, messages: [{ role: "user", content: "x" }] },
      { signal: abort.signal },
    );
    for await (const chunk of stream) if (chunk.choices[0]?.delta?.content) break;
    abort.abort();
    for (let i = 0; i < 200 && upstream.aborted === 0; i++)
      await new Promise((r) => setTimeout(r, 10));
    never.resolve();
    // max_concurrency is 1: this only succeeds if the abandoned stream gave its key back.
    expect((await ask("one-key-model")).choices[0].message.content).toBe("ok");
  });

  it("answers 503 all_providers_failed with Retry-After when every key is cooling", async () => {
    upstream.handle(() => ({
      ...openaiError(429, "limited", "rate_limit_exceeded", "requests"),
      headers: { "retry-after": "30" },
    }));
    await expect(ask("cooling-model")).rejects.toMatchObject({ status: 429 });
    await expect(ask("cooling-model")).rejects.toMatchObject({ status: 429 });
    expect(upstream.requests.map(credentialSeen)).toEqual(["sk-cool-1", "sk-cool-2"]);

    const res = await post(gw, "/v1/chat/completions", {
      model: "cooling-model",
      messages: [{ role: "user", content: "x" }],
    });
    expect(res.status).toBe(503);
    const retryAfter = Number(res.headers.get("retry-after"));
    expect(retryAfter).toBeGreaterThan(0);
    expect(retryAfter).toBeLessThanOrEqual(30);
    expect(await res.json()).toMatchObject({ error: { code: "all_providers_failed" } });
    expect(upstream.requests).toHaveLength(2);
  });
});

describe("BYOK credentials", () => {
  const admin = { authorization: `Bearer ${ADMIN_KEY}` };
  const balance = async (key = KEY): Promise<number> => {
    const res = await fetch(`${gw.url}/v1/account/quota`, {
      headers: { authorization: `Bearer ${key}` },
    });
    return ((await res.json()) as { balance_idr: number }).balance_idr;
  };
  const link = async (account: string, key: string) => {
    const res = await post(
      gw,
      `/api/admin/accounts/${account}/byok`,
      { provider: "byok-prov", key },
      admin,
    );
    const text = await res.text();
    expect(res.status).toBe(201);
    expect(text).not.toContain(key);
    return JSON.parse(text) as { id: string; key_hint: string };
  };

  beforeAll(async () => {
    expect((await link("acct", BYOK_ONE)).key_hint).toBe("...1111");
    expect((await link("acct", BYOK_TWO)).key_hint).toBe("...2222");
  });

  it("never returns a linked key whole: the list shows only the last four characters", async () => {
    const res = await fetch(`${gw.url}/api/admin/accounts/acct/byok`, { headers: admin });
    const text = await res.text();
    expect(text).not.toContain(BYOK_ONE);
    expect(text).not.toContain(BYOK_TWO);
    const list = JSON.parse(text) as { data: { provider: string; key_hint: string }[] };
    expect(list.data.map((b) => [b.provider, b.key_hint])).toEqual([
      ["byok-prov", "...1111"],
      ["byok-prov", "...2222"],
    ]);
  });

  it("uses the first linked key first and charges no token prices for it", async () => {
    const before = await balance();
    const completion = await ask("byok-model");
    expect(completion.choices[0].message.content).toBe("ok");
    expect(upstream.requests.map(credentialSeen)).toEqual([BYOK_ONE]);
    expect(await balance()).toBe(before);
  });

  it("moves to the second linked key when the first is rejected, still free", async () => {
    upstream.handle((req) =>
      credentialSeen(req) === BYOK_ONE
        ? openaiError(401, "Incorrect API key provided", "invalid_api_key")
        : openaiJson("ok"),
    );
    const before = await balance();
    await ask("byok-model");
    expect(upstream.requests.map(credentialSeen)).toEqual([BYOK_ONE, BYOK_TWO]);
    expect(await balance()).toBe(before);
  });

  it("moves to the second linked key when the first key's stream breaks before its first chunk", async () => {
    upstream.handle((req) =>
      credentialSeen(req) === BYOK_ONE
        ? { kind: "sse", steps: [], end: "destroy" }
        : { kind: "sse", steps: openaiStreamSteps(["own ", "key"]) },
    );
    const before = await balance();
    const final = await openai.chat.completions
      .stream({ model: "byok-model", messages: [{ role: "user", content: "x" }] })
      .finalChatCompletion();
    expect(final.choices[0].message.content).toBe("own key");
    expect(upstream.requests.map(credentialSeen)).toEqual([BYOK_ONE, BYOK_TWO]);
    expect(await balance()).toBe(before);
  });

  it("moves to the provider's pool when every linked key fails, and charges token prices then", async () => {
    upstream.handle((req) => {
      const key = credentialSeen(req);
      if (key === BYOK_ONE)
        return openaiError(401, "Incorrect API key provided", "invalid_api_key");
      if (key === BYOK_TWO)
        return openaiError(429, "quota exceeded", "insufficient_quota", "insufficient_quota");
      return openaiJson("ok");
    });
    const before = await balance();
    await ask("byok-model");
    expect(upstream.requests.map(credentialSeen)).toEqual([BYOK_ONE, BYOK_TWO, POOL_BYOK_PROVIDER]);
    expect(await balance()).toBe(before - 25);
  });

  it("charges a streamed pool request by the usage the upstream reported", async () => {
    upstream.handle((req) =>
      credentialSeen(req) === POOL_BYOK_PROVIDER
        ? { kind: "sse", steps: openaiStreamSteps(["a", "b"], { usage: [30, 10] }) }
        : openaiError(401, "Incorrect API key provided", "invalid_api_key"),
    );
    const before = await balance();
    const final = await openai.chat.completions
      .stream({ model: "byok-model", messages: [{ role: "user", content: "x" }] })
      .finalChatCompletion();
    expect(final.choices[0].message.content).toBe("ab");
    expect(upstream.requests.map(credentialSeen)).toEqual([BYOK_ONE, BYOK_TWO, POOL_BYOK_PROVIDER]);
    // 30 input tokens at 1 IDR + 10 output tokens at 2 IDR.
    expect(await balance()).toBe(before - 50);
  });

  it("answers all_providers_failed when the linked keys and the pool all fail", async () => {
    upstream.handle(() => openaiError(500, "down", null, "server_error"));
    const res = await post(gw, "/v1/chat/completions", {
      model: "byok-model",
      messages: [{ role: "user", content: "x" }],
    });
    expect(res.status).toBe(503);
    const text = await res.text();
    for (const secret of [BYOK_ONE, BYOK_TWO, POOL_BYOK_PROVIDER])
      expect(text).not.toContain(secret);
    expect(JSON.parse(text)).toMatchObject({ error: { code: "all_providers_failed" } });
    expect(upstream.requests).toHaveLength(3);
  });

  it("admits an account that cannot pay when it has its own key, using only that key", async () => {
    const poorClient = new OpenAI({
      apiKey: POOR_KEY,
      baseURL: `${gw.url}/v1`,
      maxRetries: 0,
      timeout: 10_000,
    });
    await expect(ask("byok-model", poorClient)).rejects.toMatchObject({
      status: 402,
      code: "insufficient_balance",
    });
    expect(upstream.requests).toHaveLength(0);

    const poorKey = "sk-poor-own-key-7777";
    await link("poor", poorKey);
    expect((await ask("byok-model", poorClient)).choices[0].message.content).toBe("ok");
    expect(upstream.requests.map(credentialSeen)).toEqual([poorKey]);
    expect(await balance(POOR_KEY)).toBe(0);

    // Its own key failing never falls through to the pool it cannot pay for.
    upstream.reset(() => openaiError(500, "down", null, "server_error"));
    await expect(ask("byok-model", poorClient)).rejects.toMatchObject({ status: 503 });
    expect(upstream.requests.map(credentialSeen)).toEqual([poorKey]);
  });
});

describe("modality", () => {
  it("answers 503 no_wire_for_modality for a chat request to an image-only model", async () => {
    const res = await post(gw, "/v1/chat/completions", {
      model: "image-only",
      messages: [{ role: "user", content: "x" }],
    });
    expect(res.status).toBe(503);
    expect(await res.json()).toMatchObject({
      error: { code: "no_wire_for_modality", type: "no_wire_for_modality" },
    });
    expect(upstream.requests).toHaveLength(0);
  });
});
