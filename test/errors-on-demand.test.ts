import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { admin, errorOf } from "./support/api.js";
import { baseConfigWith, chat, post, type TestGateway, testGateway } from "./support/gateway.js";

/**
 * Every row of the spec's error table, produced the way README's "Every error on demand" table
 * says, in one or two calls of the kit. Each test is a row; a row the table changes must change
 * here too.
 */

let gw: TestGateway;

beforeAll(async () => {
  gw = await testGateway({
    clock: "manual",
    now: () => Date.parse("2030-01-01T23:00:00Z"),
    config: baseConfigWith({
      providers: [
        { id: "mock-pool", wire: "mock", api_keys: ["pool-key"], cooldown_ms: 60_000 },
        { id: "mock-jobs", wire: "mock", mock: { job_seconds: 3600 } },
      ],
      models: [
        { name: "pooled", provider: "mock-pool", price_input_per_mtok: 1000 },
        {
          name: "budget:free",
          provider: "mock",
          free_token_budget: { tokens: 1, window_seconds: 3600 },
        },
        { name: "slow-music", provider: "mock-jobs", modality: "music", price_per_unit: 1 },
      ],
      tiers: {
        free: { free_rpm: 1000, free_daily: 1000, burst_spacing_ms: 0 },
        daily1: { free_rpm: 1000, free_daily: 1, burst_spacing_ms: 0 },
        rpm1: { free_rpm: 1, free_daily: 1000, burst_spacing_ms: 0 },
        bursty: { free_rpm: 1000, free_daily: 1000, burst_spacing_ms: 60_000, burst_queue: 0 },
      },
    }),
    extraRoutes: [
      {
        method: "GET",
        path: "/v1/boom",
        access: "key",
        errors: "chat",
        handler: () => {
          throw new Error("a gateway bug");
        },
      },
    ],
  });
});
afterAll(() => gw.close());
afterEach(() => gw.mock.reset());

/** A fresh account (admin API): its limits are this test's alone. */
async function account(patch: object = {}, create: object = {}): Promise<string> {
  const res = await admin(gw, "POST", "/accounts", { balance_idr: 1000, ...create });
  const created = (await res.json()) as { account: { id: string }; key: { value: string } };
  if (Object.keys(patch).length > 0) {
    const patched = await admin(gw, "PATCH", `/accounts/${created.account.id}`, patch);
    expect(patched.status).toBe(200);
  }
  return created.key.value;
}

/**
 * Moves the clock on to the next `hh:mm:ss` UTC after now. Never back: the gateway reads time as
 * never going back, so a test that set an earlier time after another set a later one would see
 * the later one.
 */
function forwardTo(timeOfDay: string): void {
  const now = gw.clock.now();
  let at = Date.parse(`${new Date(now).toISOString().slice(0, 10)}T${timeOfDay}Z`);
  while (at <= now) at += 86_400_000;
  gw.clock.set(at);
}

const as = (key: string) => ({ authorization: `Bearer ${key}` });
const chatAs = (key: string, body: object = chat()) =>
  post(gw, "/v1/chat/completions", body, as(key));
const messagesAs = (key: string, body: object = { ...chat(), max_tokens: 50 }) =>
  post(gw, "/v1/messages", body, as(key));

async function messagesError(res: Response) {
  const body = (await res.json()) as { type: string; error: { type: string } };
  expect(body.type).toBe("error");
  return { status: res.status, type: body.error.type, retryAfter: res.headers.get("retry-after") };
}

let key: string;
beforeAll(async () => {
  key = await account();
});

describe("chat-completions codes", () => {
  it("400 bad_request: a body without messages", async () => {
    expect(await errorOf(await chatAs(key, { model: "mock-gpt" }))).toMatchObject({
      status: 400,
      code: "bad_request",
      type: "bad_request",
    });
  });

  it("400 model_not_found: a model no config names", async () => {
    expect(await errorOf(await chatAs(key, chat("hi", "no-such-model")))).toMatchObject({
      status: 400,
      code: "model_not_found",
    });
  });

  it("400 provider 4xx rejection: script error {status: 400}", async () => {
    gw.mock.reply({ reply: { error: { status: 400 } }, times: 1 });
    expect(await errorOf(await chatAs(key))).toMatchObject({
      status: 400,
      type: "invalid_request_error",
      code: "upstream_rejected",
    });
  });

  it("401 plain text: no key", async () => {
    const res = await post(gw, "/v1/chat/completions", chat(), {});
    expect(res.status).toBe(401);
    expect(res.headers.get("content-type")).toMatch(/^text\/plain/);
  });

  it("402 insufficient_balance: an account with balance 0", async () => {
    const poor = await account({}, { balance_idr: 0 });
    expect(await errorOf(await chatAs(poor))).toMatchObject({
      status: 402,
      code: "insufficient_balance",
    });
  });

  it("402 payg_limit_reached: balance 0 and a PAYG limit of 0", async () => {
    const payg = await account({ payg: { limit_idr: 0 } }, { balance_idr: 0 });
    expect(await errorOf(await chatAs(payg))).toMatchObject({
      status: 402,
      code: "payg_limit_reached",
    });
  });

  it("403 subscribers_only: a subscribers-only model without a subscription", async () => {
    expect(await errorOf(await chatAs(key, chat("hi", "mock-pro")))).toMatchObject({
      status: 403,
      code: "subscribers_only",
    });
  });

  it("403 shared_key_not_allowed: a shared key reads the quota", async () => {
    const res = await admin(gw, "POST", "/accounts/acct/keys", { label: "shared", kind: "shared" });
    const shared = ((await res.json()) as { value: string }).value;
    const quota = await fetch(`${gw.url}/v1/account/quota`, { headers: as(shared) });
    expect(await errorOf(quota)).toMatchObject({ status: 403, code: "shared_key_not_allowed" });
  });

  it("429 rate_limit_exceeded (account limit), no Retry-After: rpm_limit 1, two requests", async () => {
    const limited = await account({ rpm_limit: 1 });
    expect((await chatAs(limited)).status).toBe(200);
    expect(await errorOf(await chatAs(limited))).toMatchObject({
      status: 429,
      code: "rate_limit_exceeded",
      retryAfter: null,
    });
  });

  it("429 rate_limit_exceeded (usage endpoints), no Retry-After: 61 reads in a minute", async () => {
    const reader = await account();
    for (let i = 0; i < 60; i++) {
      expect((await fetch(`${gw.url}/v1/usage/summary`, { headers: as(reader) })).status).toBe(200);
    }
    const res = await fetch(`${gw.url}/v1/usage/summary`, { headers: as(reader) });
    expect(await errorOf(res)).toMatchObject({
      status: 429,
      code: "rate_limit_exceeded",
      retryAfter: null,
    });
  });

  it("429 rate_limit_exceeded (per-tool key creation), no Retry-After: 21 keys in a minute", async () => {
    const res = await admin(gw, "POST", "/accounts/acct/keys", { label: "login", kind: "login" });
    const login = ((await res.json()) as { value: string }).value;
    for (let i = 0; i < 20; i++) {
      expect((await post(gw, "/api/keys", { label: `tool-${i}` }, as(login))).status).toBe(201);
    }
    expect(
      await errorOf(await post(gw, "/api/keys", { label: "one-too-many" }, as(login))),
    ).toMatchObject({
      status: 429,
      code: "rate_limit_exceeded",
      retryAfter: null,
    });
  });

  it("429 rate_limit_exceeded (free burst flood): tier with burst_queue 0, two requests", async () => {
    const flood = await account({ tier: "bursty" });
    expect((await chatAs(flood, chat("hi", "mock-gpt:free"))).status).toBe(200);
    expect(await errorOf(await chatAs(flood, chat("hi", "mock-gpt:free")))).toMatchObject({
      status: 429,
      code: "rate_limit_exceeded",
    });
  });

  it("429 rate_limit_exceeded (free token budget): a model whose budget the first request uses", async () => {
    expect((await chatAs(key, chat("hi", "budget:free"))).status).toBe(200);
    expect(await errorOf(await chatAs(key, chat("hi", "budget:free")))).toMatchObject({
      status: 429,
      code: "rate_limit_exceeded",
    });
  });

  it("429 rate_limit_exceeded (concurrent music), Retry-After 60: a third job while two run", async () => {
    const musician = await account();
    const job = () =>
      post(
        gw,
        "/v1/music/generations",
        { model: "slow-music", prompt: "a", seconds: 1 },
        as(musician),
      );
    expect((await job()).status).toBe(202);
    expect((await job()).status).toBe(202);
    expect(await errorOf(await job())).toMatchObject({
      status: 429,
      code: "rate_limit_exceeded",
      retryAfter: "60",
    });
  });

  it("429 free_quota_daily, Retry-After to 00:00 UTC: tier free_daily 1, clock at 23:00", async () => {
    const daily = await account({ tier: "daily1" });
    forwardTo("23:00:00");
    expect((await chatAs(daily, chat("hi", "mock-gpt:free"))).status).toBe(200);
    expect(await errorOf(await chatAs(daily, chat("hi", "mock-gpt:free")))).toMatchObject({
      status: 429,
      code: "free_quota_daily",
      retryAfter: "3600",
    });
  });

  it("429 free_quota_rpm, Retry-After to the window's end: tier free_rpm 1", async () => {
    const rpm = await account({ tier: "rpm1" });
    forwardTo("23:30:15");
    expect((await chatAs(rpm, chat("hi", "mock-gpt:free"))).status).toBe(200);
    expect(await errorOf(await chatAs(rpm, chat("hi", "mock-gpt:free")))).toMatchObject({
      status: 429,
      code: "free_quota_rpm",
      retryAfter: "45",
    });
  });

  it("429 plan_limit_reached, no Retry-After: a subscription window of quota 0", async () => {
    const subscriber = await account({
      subscription: { windows: [{ name: "day", seconds: 86_400, quota: 0 }] },
    });
    expect(await errorOf(await chatAs(subscriber))).toMatchObject({
      status: 429,
      code: "plan_limit_reached",
      retryAfter: null,
    });
  });

  it("429 upstream_error, no Retry-After: script error {status: 429}", async () => {
    gw.mock.reply({ reply: { error: { status: 429 } }, times: 1 });
    expect(await errorOf(await chatAs(key))).toMatchObject({
      status: 429,
      code: "upstream_error",
      retryAfter: null,
    });
  });

  for (const [status, reason] of [
    [422, "invalid_request_error"],
    [413, "context_length_exceeded"],
    [403, "content_policy_violation"],
    [404, "upstream_rejected"],
  ] as const) {
    it(`${status} ${reason}: script error {status: ${status}, reason: "${reason}"}`, async () => {
      gw.mock.reply({ reply: { error: { status, reason } }, times: 1 });
      expect(await errorOf(await chatAs(key))).toMatchObject({
        status,
        code: reason,
        type: "invalid_request_error",
      });
    });
  }

  it("a rejection status outside 400/403/404/413/422/429 becomes 400: script error {status: 418}", async () => {
    gw.mock.reply({ reply: { error: { status: 418 } }, times: 1 });
    expect(await errorOf(await chatAs(key))).toMatchObject({
      status: 400,
      code: "upstream_rejected",
    });
  });

  it("503 upstream_error: script error {status: 503}", async () => {
    gw.mock.reply({ reply: { error: { status: 503 } }, times: 1 });
    expect(await errorOf(await chatAs(key))).toMatchObject({ status: 503, code: "upstream_error" });
  });

  it("503 all_providers_failed, no Retry-After: a route whose every step fails", async () => {
    gw.mock.reply({ model: "mock-gpt" }, { error: { status: 503 } }, { times: 1 });
    expect(await errorOf(await chatAs(key, chat("hi", "auto")))).toMatchObject({
      status: 503,
      code: "all_providers_failed",
      retryAfter: null,
    });
  });

  it("503 all_providers_failed with Retry-After: the provider's only key cooling after a 429", async () => {
    gw.mock.reply({ model: "pooled" }, { error: { status: 429 } }, { times: 1 });
    expect((await chatAs(key, chat("hi", "pooled"))).status).toBe(429);
    expect(await errorOf(await chatAs(key, chat("hi", "pooled")))).toMatchObject({
      status: 503,
      code: "all_providers_failed",
      retryAfter: "60",
    });
    gw.clock.advance(60_000);
  });

  it("503 no_wire_for_modality: an image request to a chat model", async () => {
    const res = await post(
      gw,
      "/v1/images/generations",
      { model: "mock-gpt", prompt: "a cat" },
      as(key),
    );
    expect(await errorOf(res)).toMatchObject({ status: 503, code: "no_wire_for_modality" });
  });

  it("500 internal_error: a route of startGateway's extraRoutes that throws", async () => {
    const res = await fetch(`${gw.url}/v1/boom`, { headers: as(key) });
    expect(await errorOf(res)).toMatchObject({ status: 500, code: "internal_error" });
  });
});

describe("messages-style types", () => {
  it("invalid_request_error 400: a body without messages", async () => {
    expect(
      await messagesError(await messagesAs(key, { model: "mock-gpt", max_tokens: 5 })),
    ).toMatchObject({
      status: 400,
      type: "invalid_request_error",
    });
  });

  it("not_found_error 400: an unknown model", async () => {
    expect(
      await messagesError(await messagesAs(key, { ...chat("hi", "no-such-model"), max_tokens: 5 })),
    ).toMatchObject({ status: 400, type: "not_found_error" });
  });

  it("payment_required 402: an account with balance 0", async () => {
    const poor = await account({}, { balance_idr: 0 });
    expect(await messagesError(await messagesAs(poor))).toMatchObject({
      status: 402,
      type: "payment_required",
    });
  });

  it("permission_error 403: a subscribers-only model", async () => {
    expect(
      await messagesError(await messagesAs(key, { ...chat("hi", "mock-pro"), max_tokens: 5 })),
    ).toMatchObject({ status: 403, type: "permission_error" });
  });

  it("rate_limit_error 429, Retry-After kept: free_quota_rpm on /v1/messages", async () => {
    const rpm = await account({ tier: "rpm1" });
    forwardTo("23:40:50");
    const ask = () => messagesAs(rpm, { ...chat("hi", "mock-gpt:free"), max_tokens: 5 });
    expect((await ask()).status).toBe(200);
    expect(await messagesError(await ask())).toMatchObject({
      status: 429,
      type: "rate_limit_error",
      retryAfter: "10",
    });
  });

  it("api_error 503: script error {status: 503}", async () => {
    gw.mock.reply({ reply: { error: { status: 503 } }, times: 1 });
    expect(await messagesError(await messagesAs(key))).toMatchObject({
      status: 503,
      type: "api_error",
    });
  });
});
