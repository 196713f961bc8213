import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { errorOf, lastLogged, quota } from "./support/api.js";
import { fakeGemini, geminiError, geminiJson, geminiQuotaExceeded } from "./support/fake-gemini.js";
import type { FakeUpstream, JsonReply, RecordedRequest } from "./support/fake-upstream.js";
import { baseConfig, chat, KEY, post, type TestGateway, testGateway } from "./support/gateway.js";
import { deliveredTokens } from "./support/metering.js";

/**
 * Gemini as a client finds it through the gateway, with the official SDKs: answers Gemini ends
 * as broken, its 429's own retry hint, a project Google will not serve, and an image type OpenAI
 * takes that Gemini does not.
 */

const POOL = ["AIza-hunt-pool-A-0000000000000000", "AIza-hunt-pool-B-0000000000000000"];
const ONE = "AIza-hunt-single-key-000000000000";
const PNG =
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

let upstream: FakeUpstream;
let gw: TestGateway;
let openai: OpenAI;
let anthropic: Anthropic;

beforeAll(async () => {
  upstream = await fakeGemini({ apiKeys: [...POOL, ONE], maxOutputTokens: 1000 });
  const gemini = (id: string, keys: string[]) => ({
    id,
    wire: "gemini" as const,
    base_url: upstream.url,
    api_keys: keys,
    timeout_ms: 3_000,
  });
  const model = (name: string, provider: string) => ({
    name,
    provider,
    upstream_model: "gemini-2.5-flash",
    // 1 IDR an input token, 2 an output token.
    price_input_per_mtok: 1_000_000,
    price_output_per_mtok: 2_000_000,
    max_output_tokens: 1000,
  });
  gw = await testGateway({
    config: baseConfig({
      providers: [...(baseConfig().providers ?? []), gemini("gem", POOL), gemini("gem-one", [ONE])],
      models: [
        ...(baseConfig().models ?? []),
        model("gemini-flash", "gem"),
        model("gemini-one", "gem-one"),
      ],
      routes: [{ name: "gemini-then-mock", steps: ["gemini-flash", "mock-gpt"] }],
    }),
  });
  openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 10_000 });
  anthropic = new Anthropic({ apiKey: KEY, baseURL: gw.url, maxRetries: 0, timeout: 10_000 });
});
afterAll(async () => {
  await gw?.close();
  await upstream?.close();
});
beforeEach(() => upstream.reset());

const balance = async () => (await quota(gw)).balance_idr;
const keySeen = (req: RecordedRequest) => req.headers["x-goog-api-key"];
const ask = (model = "gemini-flash") =>
  openai.chat.completions.create({ model, messages: [{ role: "user", content: "Weather?" }] });

/** A candidate Gemini ended as `reason`, with nothing in it (as Google sends a malformed call). */
function brokenAnswer(reason: string): JsonReply {
  return {
    kind: "json",
    body: {
      candidates: [{ finishReason: reason, index: 0 }],
      usageMetadata: { promptTokenCount: 30, totalTokenCount: 30 },
      modelVersion: "gemini-fake",
    },
  };
}

describe("gemini wire: an answer Gemini ended as broken", () => {
  const tools: OpenAI.ChatCompletionTool[] = [
    {
      type: "function",
      function: {
        name: "get_weather",
        parameters: { type: "object", properties: { city: { type: "string" } } },
      },
    },
  ];

  it("MALFORMED_FUNCTION_CALL is 503 upstream_error in every style, never an empty finished answer, and costs nothing", async () => {
    const before = await balance();
    upstream.queue(brokenAnswer("MALFORMED_FUNCTION_CALL"));
    const chatErr = await openai.chat.completions
      .create({
        model: "gemini-flash",
        messages: [{ role: "user", content: "Weather in Jakarta?" }],
        tools,
      })
      .catch((e: unknown) => e);
    expect(chatErr).toMatchObject({ status: 503, error: { code: "upstream_error" } });

    upstream.queue(brokenAnswer("MALFORMED_FUNCTION_CALL"));
    const messagesErr = await anthropic.messages
      .create({
        model: "gemini-flash",
        max_tokens: 100,
        messages: [{ role: "user", content: "Weather in Jakarta?" }],
      })
      .catch((e: unknown) => e);
    expect(messagesErr).toBeInstanceOf(Anthropic.APIError);
    expect(messagesErr).toMatchObject({ status: 503, error: { error: { type: "api_error" } } });

    upstream.queue(brokenAnswer("MALFORMED_FUNCTION_CALL"));
    const responsesErr = await openai.responses
      .create({ model: "gemini-flash", input: "Weather in Jakarta?", store: false })
      .catch((e: unknown) => e);
    expect(responsesErr).toMatchObject({ status: 503, error: { code: "upstream_error" } });

    // Google sends a malformed call in a stream as one event holding only that finish.
    upstream.queue({
      kind: "sse",
      steps: [{ data: brokenAnswer("MALFORMED_FUNCTION_CALL").body }],
    });
    const streamErr = await openai.chat.completions
      .create({
        model: "gemini-flash",
        messages: [{ role: "user", content: "Weather in Jakarta?" }],
        tools,
        stream: true,
      })
      .catch((e: unknown) => e);
    expect(streamErr).toMatchObject({ status: 503, error: { code: "upstream_error" } });

    expect(upstream.requests).toHaveLength(4);
    expect(await balance()).toBe(before);
    expect(await lastLogged(gw)).toMatchObject({ state: "failed", cost_idr: 0 });
  });

  it("UNEXPECTED_TOOL_CALL and TOO_MANY_TOOL_CALLS are the same provider failure", async () => {
    for (const reason of ["UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS"]) {
      upstream.queue(brokenAnswer(reason));
      await expect(ask()).rejects.toMatchObject({ status: 503, error: { code: "upstream_error" } });
    }
  });

  it("is retried by an SDK that retries 503s, and a route's next step answers it", async () => {
    upstream.queue(brokenAnswer("MALFORMED_FUNCTION_CALL"), geminiJson("31 C in Jakarta."));
    const retrying = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 1 });
    const completion = await retrying.chat.completions.create({
      model: "gemini-flash",
      messages: [{ role: "user", content: "Weather in Jakarta?" }],
    });
    expect(completion.choices[0].message.content).toBe("31 C in Jakarta.");
    expect(upstream.requests).toHaveLength(2);

    upstream.reset();
    upstream.queue(brokenAnswer("MALFORMED_FUNCTION_CALL"));
    const routed = await ask("gemini-then-mock");
    expect(upstream.requests).toHaveLength(1);
    expect(routed.model).toBe("gemini-then-mock");
    expect(routed.choices[0].message.content).toBeTruthy();
  });

  it("breaks a stream that had begun: an error event, no clean finish, charged what was delivered", async () => {
    const usage = { promptTokenCount: 40, candidatesTokenCount: 3, totalTokenCount: 43 };
    upstream.queue({
      kind: "sse",
      steps: [
        {
          data: {
            candidates: [{ content: { role: "model", parts: [{ text: "Let me check " }] } }],
            usageMetadata: usage,
          },
        },
        {
          data: { candidates: [{ finishReason: "MALFORMED_FUNCTION_CALL" }], usageMetadata: usage },
        },
      ],
    });
    const res = await post(gw, "/v1/chat/completions", {
      model: "gemini-flash",
      messages: [{ role: "user", content: "Weather in Jakarta?" }],
      tools,
      stream: true,
    });
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).toContain("Let me check ");
    expect(text).toContain("upstream_error");
    expect(text).not.toContain('"finish_reason":"stop"');
    expect(text).not.toContain("[DONE]");
    expect(await lastLogged(gw)).toMatchObject({
      input_tokens: 40,
      output_tokens: Math.max(3, deliveredTokens(["Let me check "])),
    });
  });
});

describe("gemini wire: Google's refusals that are the key's, not the request's", () => {
  it("a 429's retryDelay (Google sends no Retry-After) cools the key as long as Google asked", async () => {
    upstream.queue(geminiQuotaExceeded("120s"));
    await expect(ask("gemini-one")).rejects.toMatchObject({
      status: 429,
      error: { code: "upstream_error" },
    });
    // The only key rests for Google's two minutes, not the gateway's default half minute.
    const res = await post(gw, "/v1/chat/completions", chat("Weather?", "gemini-one"));
    expect(res.status).toBe(503);
    expect(res.headers.get("retry-after")).toBe("120");
    expect((await errorOf(res)).code).toBe("all_providers_failed");
    expect(upstream.requests).toHaveLength(1);
  });

  it("a project Google will not serve (400 FAILED_PRECONDITION) is 503 upstream_error, and that key cools", async () => {
    let refusedKey: unknown;
    upstream.handle((req) => {
      if (refusedKey !== undefined) return geminiJson("ok");
      refusedKey = keySeen(req);
      return geminiError(
        400,
        "FAILED_PRECONDITION",
        "Gemini API free tier is not available in your country. Please enable billing on your project in Google AI Studio.",
      );
    });
    const err = await ask().catch((e: unknown) => e);
    expect(err).toMatchObject({ status: 503, error: { code: "upstream_error" } });
    expect(JSON.stringify((err as { error: unknown }).error)).not.toContain("billing");
    for (let i = 0; i < 3; i++) await ask();
    const other = POOL.find((key) => key !== refusedKey);
    expect(upstream.requests.slice(1).map(keySeen)).toEqual([other, other, other]);
  });
});

describe("gemini wire: images in the input", () => {
  it("a data:image/jpg URL, which OpenAI takes, reaches Gemini as image/jpeg (chat and Responses)", async () => {
    const jpgUrl = `data:image/jpg;base64,${PNG}`;
    const sent = { inlineData: { mimeType: "image/jpeg", data: PNG } };
    const completion = await openai.chat.completions.create({
      model: "gemini-flash",
      messages: [
        {
          role: "user",
          content: [
            { type: "text", text: "What is in it?" },
            { type: "image_url", image_url: { url: jpgUrl } },
          ],
        },
      ],
    });
    expect(upstream.refused).toEqual([]);
    expect(completion.choices[0].message.content).toBe("ok");
    expect(upstream.last.body.contents).toEqual([
      { role: "user", parts: [{ text: "What is in it?" }, sent] },
    ]);

    const response = await openai.responses.create({
      model: "gemini-flash",
      store: false,
      input: [
        {
          role: "user",
          content: [
            { type: "input_text", text: "What is in it?" },
            { type: "input_image", image_url: jpgUrl, detail: "auto" },
          ],
        },
      ],
    });
    expect(upstream.refused).toEqual([]);
    expect(response.output_text).toBe("ok");
    expect(upstream.last.body.contents).toEqual([
      { role: "user", parts: [{ text: "What is in it?" }, sent] },
    ]);
  });
});
