import Anthropic from "@anthropic-ai/sdk";
import type OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { errorOf, idleMoney } from "./support/api.js";
import { useFakeProviders } from "./support/fake-providers.js";
import {
  anthropicStreamSteps,
  type FakeUpstream,
  openaiError,
  openaiJson,
  openaiStreamSteps,
  type Reply,
} from "./support/fake-upstream.js";
import { backends, baseConfig, KEY, POOR_KEY, post, type TestGateway } from "./support/gateway.js";

/**
 * A route's fallback and a BYOK chain as the client sees them when a provider fails before its
 * answer has any output: Anthropic's `overloaded_error` right after `message_start`, an OpenAI
 * stream cut after its role chunk, an account's own key rate-limited. The client gets the next
 * step's answer (or the spec's error naming whose key it was), and pays for what it got only.
 */

const OWN_KEY = "sk-own-p1-secret-4242";
const POOR_OWN_KEY = "sk-poor-own-p1-secret-77";
const SUBSCRIBER_KEY = "kn-test-subscriber-key-0000000000";

/** Anthropic's stream as it fails under load: a message started, then an error event, no text. */
const overloadedAfterStart = (): Reply => ({
  kind: "sse",
  steps: [
    anthropicStreamSteps(["never"], { usage: [13, 1] })[0],
    { event: "ping", data: { type: "ping" } },
    {
      event: "error",
      data: { type: "error", error: { type: "overloaded_error", message: "Overloaded" } },
    },
  ],
});

/** An OpenAI stream cut after its role chunk, before any text. */
const cutAfterRole = (): Reply => ({
  kind: "sse",
  steps: openaiStreamSteps(["never"]).slice(0, 1),
  end: "destroy",
});

const M2_USAGE: [number, number] = [11, 7];
/** What m2 charges for M2_USAGE: 3,000 and 5,000 IDR per million tokens, in micro-IDR. */
const M2_COST = 11 * 3_000 + 7 * 5_000;

describe.each(backends)("a step that fails before any output (%s)", (backend) => {
  let p1: FakeUpstream; // openai wire
  let p2: FakeUpstream; // openai wire
  let p3: FakeUpstream; // anthropic wire
  let gw: TestGateway;
  let openai: OpenAI;
  let anthropic: Anthropic;

  useFakeProviders({
    backend,
    wires: ["openai", "openai", "anthropic"],
    timeoutMs: 5_000,
    config: (providers) =>
      baseConfig({
        providers,
        models: [
          { name: "m1", provider: "p1", price_input_per_mtok: 1_000, price_output_per_mtok: 2_000 },
          { name: "m2", provider: "p2", price_input_per_mtok: 3_000, price_output_per_mtok: 5_000 },
          { name: "m3", provider: "p3", price_input_per_mtok: 1_000, price_output_per_mtok: 2_000 },
          {
            name: "pro",
            provider: "p1",
            subscribers_only: true,
            price_input_per_mtok: 1_000,
            price_output_per_mtok: 2_000,
          },
          { name: "pro:free", provider: "p1", upstream_model: "pro", subscribers_only: true },
        ],
        routes: [
          { name: "claude-first", steps: ["m3", "m2"] },
          { name: "gpt-first", steps: ["m1", "m2"] },
          { name: "pro-first", steps: ["pro", "m2"] },
        ],
        accounts: [
          {
            id: "acct",
            balance_idr: 1_000_000,
            rpm_limit: 1_000,
            keys: [{ id: "k1", value: KEY }],
            byok: [{ provider: "p1", key: OWN_KEY }],
          },
          {
            id: "subscriber",
            balance_idr: 1_000_000,
            keys: [{ id: "ks1", value: SUBSCRIBER_KEY }],
            subscription: { plan: "pro", windows: [{ name: "day", seconds: 86_400, quota: 100 }] },
          },
          {
            id: "poor",
            balance_idr: 0,
            keys: [{ id: "kp", value: POOR_KEY }],
            byok: [{ provider: "p1", key: POOR_OWN_KEY }],
          },
        ],
      }),
    ready: (started) => {
      ({ gw, openai, anthropic } = started);
      [p1, p2, p3] = started.fakes;
    },
  });

  it("an Anthropic step's overloaded_error after message_start falls back to the next step in all three styles, which alone is charged, one log row each", async () => {
    const before = await idleMoney(gw);
    const served = () =>
      p2.queue({ kind: "sse", steps: openaiStreamSteps(["from ", "two"], { usage: M2_USAGE }) });

    p3.queue(overloadedAfterStart());
    served();
    const chat = await openai.chat.completions
      .stream({ model: "claude-first", messages: [{ role: "user", content: "Hi" }] })
      .finalChatCompletion();
    expect(chat.choices[0].message.content).toBe("from two");
    expect(chat.model).toBe("claude-first");

    p3.queue(overloadedAfterStart());
    served();
    const message = await anthropic.messages
      .stream({
        model: "claude-first",
        max_tokens: 20,
        messages: [{ role: "user", content: "Hi" }],
      })
      .finalMessage();
    expect(message.content).toMatchObject([{ type: "text", text: "from two" }]);

    p3.queue(overloadedAfterStart());
    served();
    const response = await openai.responses
      .stream({ model: "claude-first", input: "Hi" })
      .finalResponse();
    expect(response.output_text).toBe("from two");

    expect(p3.requests).toHaveLength(3);
    expect(p2.requests).toHaveLength(3);
    const rows = (await gw.listRequests()).slice(0, 3);
    expect(
      rows.map((row) => [row.model, row.provider, row.status, row.error_code, row.state]),
    ).toEqual(Array.from({ length: 3 }, () => ["claude-first", "p2", 200, null, "settled"]));
    expect(rows.map((row) => row.cost_micro)).toEqual([M2_COST, M2_COST, M2_COST]);
    const after = await idleMoney(gw);
    expect(before.balance - after.balance).toBe(3 * M2_COST);
    expect(after.held).toBe(0);
  });

  it("an OpenAI step's stream cut after its role chunk falls back; on a model whose every credential does so, a 503 charged nothing", async () => {
    const before = await idleMoney(gw);
    // The account's own key for p1 first, then p1's pool: both cut after the role chunk.
    p1.queue(cutAfterRole(), cutAfterRole());
    p2.queue({ kind: "sse", steps: openaiStreamSteps(["second"], { usage: M2_USAGE }) });
    const chat = await openai.chat.completions
      .stream({ model: "gpt-first", messages: [{ role: "user", content: "Hi" }] })
      .finalChatCompletion();
    expect(chat.choices[0].message.content).toBe("second");
    expect(p1.requests).toHaveLength(2);
    const [routed] = await gw.listRequests();
    expect([routed.provider, routed.cost_micro, routed.error_code]).toEqual(["p2", M2_COST, null]);

    p1.queue(cutAfterRole(), cutAfterRole());
    const alone = await post(gw, "/v1/chat/completions", {
      model: "m1",
      stream: true,
      messages: [{ role: "user", content: "Hi" }],
    });
    expect(await errorOf(alone)).toMatchObject({ status: 503, code: "all_providers_failed" });
    const [failed] = await gw.listRequests();
    expect([failed.state, failed.cost_micro, failed.provider]).toEqual(["failed", 0, null]);
    const after = await idleMoney(gw);
    expect(before.balance - after.balance).toBe(M2_COST);
  });

  it("an account's own key its provider rate-limits: 429 upstream_error that says it was the account's own key, no Retry-After, nothing charged, in both styles", async () => {
    const limited = (): Reply => ({
      kind: "json",
      status: 429,
      headers: { "retry-after": "30" },
      body: {
        error: {
          message: `Rate limit reached for key ${POOR_OWN_KEY}`,
          type: "requests",
          code: "rate_limit_exceeded",
        },
      },
    });
    p1.queue(limited());
    const res = await post(
      gw,
      "/v1/chat/completions",
      { model: "m1", messages: [{ role: "user", content: "Hi" }] },
      { authorization: `Bearer ${POOR_KEY}` },
    );
    const text = await res.clone().text();
    const error = await errorOf(res);
    expect(error).toMatchObject({ status: 429, code: "upstream_error", retryAfter: null });
    expect(error.message).toContain("own key for p1 (BYOK) was rate-limited");
    expect(text).not.toContain(POOR_OWN_KEY.slice(-6));
    expect(text).not.toContain("Rate limit reached");
    expect(p1.last.headers.authorization).toBe(`Bearer ${POOR_OWN_KEY}`);

    p1.queue(limited());
    const poorAnthropic = new Anthropic({ apiKey: POOR_KEY, baseURL: gw.url, maxRetries: 0 });
    const refused = await poorAnthropic.messages
      .create({ model: "m1", max_tokens: 20, messages: [{ role: "user", content: "Hi" }] })
      .catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(Anthropic.RateLimitError);
    const apiError = refused as InstanceType<typeof Anthropic.RateLimitError>;
    expect(apiError.error).toMatchObject({ type: "error", error: { type: "rate_limit_error" } });
    expect(apiError.message).toContain("own key for p1 (BYOK) was rate-limited");
    expect(apiError.headers.get("retry-after")).toBeNull();

    const rows = (await gw.listRequests()).slice(0, 2);
    expect(rows.map((row) => [row.account, row.payment, row.cost_micro, row.status])).toEqual([
      ["poor", "byok", 0, 429],
      ["poor", "byok", 0, 429],
    ]);
    expect(await idleMoney(gw, POOR_KEY)).toEqual({ balance: 0, held: 0 });
  });

  it("an own key rate-limited and the pool failing after it: all_providers_failed says the own key was rate-limited; the pool after an own key's 429 is charged", async () => {
    p1.queue(openaiError(429, "slow down", "rate_limit_exceeded", "requests"));
    p1.queue(openaiError(500, "down", null, "server_error"));
    const res = await post(gw, "/v1/chat/completions", {
      model: "m1",
      messages: [{ role: "user", content: "Hi" }],
    });
    const error = await errorOf(res);
    expect(error).toMatchObject({ status: 503, code: "all_providers_failed" });
    expect(error.message).toContain("own key for p1 (BYOK) was rate-limited");

    const before = await idleMoney(gw);
    p1.queue(openaiError(429, "slow down", "rate_limit_exceeded", "requests"));
    p1.queue(openaiJson("pool served", { usage: [10, 5] }));
    const served = await openai.chat.completions.create({
      model: "m1",
      messages: [{ role: "user", content: "Hi" }],
    });
    expect(served.choices[0].message.content).toBe("pool served");
    expect(p1.requests.map((r) => r.headers.authorization)).toEqual([
      `Bearer ${OWN_KEY}`,
      "Bearer sk-p1-pool",
      `Bearer ${OWN_KEY}`,
      "Bearer sk-p1-pool",
    ]);
    const after = await idleMoney(gw);
    expect(before.balance - after.balance).toBe(10 * 1_000 + 5 * 2_000);
  });

  it("a route whose first step is for subscribers only serves a non-subscriber from the next step, and charges that step; a subscriber gets the first", async () => {
    p2.queue(openaiJson("from m2", { usage: M2_USAGE }));
    const served = await openai.chat.completions.create({
      model: "pro-first",
      messages: [{ role: "user", content: "Hi" }],
    });
    expect(served.choices[0].message.content).toBe("from m2");
    expect(p1.requests).toHaveLength(0);
    const [row] = await gw.listRequests();
    expect([row.provider, row.cost_micro]).toEqual(["p2", M2_COST]);

    // A free model for subscribers only, named alone: refused, as a paid one is.
    const free = await post(gw, "/v1/chat/completions", {
      model: "pro:free",
      messages: [{ role: "user", content: "Hi" }],
    });
    expect(await errorOf(free)).toMatchObject({ status: 403, code: "subscribers_only" });
    expect(p1.requests).toHaveLength(0);

    p1.queue(openaiJson("from pro"));
    const subscriber = await post(
      gw,
      "/v1/chat/completions",
      { model: "pro-first", messages: [{ role: "user", content: "Hi" }] },
      { authorization: `Bearer ${SUBSCRIBER_KEY}` },
    );
    expect(subscriber.status).toBe(200);
    expect(p1.last.body.model).toBe("pro");
  });
});
