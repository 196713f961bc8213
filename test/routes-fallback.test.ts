import type Anthropic from "@anthropic-ai/sdk";
import type OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { upstreamModel, useFakeProviders } from "./support/fake-providers.js";
import {
  anthropicError,
  anthropicJson,
  anthropicStreamSteps,
  type FakeUpstream,
  openaiError,
  openaiJson,
  openaiStreamSteps,
} from "./support/fake-upstream.js";
import { baseConfig, post, type TestGateway } from "./support/gateway.js";

/** Routes: ordered steps with fallback, nesting, and a body rewritten for each backend's wire. */

let first: FakeUpstream; // openai wire
let second: FakeUpstream; // anthropic wire
let third: FakeUpstream; // openai wire
let gw: TestGateway;
let openai: OpenAI;
let anthropic: Anthropic;

useFakeProviders({
  backend: "sqlite",
  wires: ["openai", "anthropic", "openai"],
  timeoutMs: 3_000,
  config: (providers) =>
    baseConfig({
      providers,
      models: [upstreamModel("m1", "p1"), upstreamModel("m2", "p2"), upstreamModel("m3", "p3")],
      routes: [
        { name: "pair", steps: ["m1", "m2"] },
        { name: "inner", steps: ["m2"] },
        { name: "nested", steps: ["m1", "inner", "m3"] },
      ],
    }),
  ready: (started) => {
    ({ gw, openai, anthropic } = started);
    [first, second, third] = started.fakes;
  },
});

const ask = (model: string) =>
  openai.chat.completions.create({
    model,
    max_tokens: 20,
    messages: [
      { role: "system", content: "Short answers." },
      { role: "user", content: "Hi" },
    ],
  });

describe("routes", () => {
  it("falls back to the second step when the first upstream fails, rewriting the body for each wire", async () => {
    first.queue(openaiError(500, "down", null, "server_error"));
    second.queue(anthropicJson("from step two"));
    const completion = await ask("pair");

    expect(completion.choices[0].message.content).toBe("from step two");
    expect(completion.model).toBe("pair");
    expect(first.requests).toHaveLength(1);
    expect(second.requests).toHaveLength(1);
    // Step one speaks chat completions, step two messages: each got its own format and key.
    expect(first.last.path).toBe("/v1/chat/completions");
    expect(first.last.headers.authorization).toBe("Bearer sk-p1-pool");
    expect(first.last.body).toMatchObject({
      model: "m1-upstream",
      messages: [
        { role: "system", content: "Short answers." },
        { role: "user", content: "Hi" },
      ],
    });
    expect(second.last.path).toBe("/v1/messages");
    expect(second.last.headers["x-api-key"]).toBe("sk-p2-pool");
    expect(second.last.body).toMatchObject({
      model: "m2-upstream",
      max_tokens: 20,
      system: "Short answers.",
      messages: [{ role: "user", content: [{ type: "text", text: "Hi" }] }],
    });
    expect(second.last.body).not.toHaveProperty("stream_options");
  });

  it("moves on after an upstream rejection inside a route (it is not final there)", async () => {
    first.queue(
      openaiError(400, "unsupported parameter for this backend", "invalid_request_error"),
    );
    second.queue(anthropicJson("served anyway"));
    const completion = await ask("pair");
    expect(completion.choices[0].message.content).toBe("served anyway");
    expect(first.requests).toHaveLength(1);
    expect(second.requests).toHaveLength(1);
  });

  it("moves on after an upstream 429 inside a route", async () => {
    first.queue(openaiError(429, "slow down", "rate_limit_exceeded", "requests"));
    second.queue(anthropicJson("second"));
    expect((await ask("pair")).choices[0].message.content).toBe("second");
  });

  it("skips a step whose wire cannot carry the request, without calling it", async () => {
    const audio = {
      role: "user",
      content: [
        { type: "text", text: "What is said here?" },
        { type: "input_audio", input_audio: { data: "UklGRg==", format: "wav" } },
      ],
    };
    first.queue(openaiError(500, "down", null, "server_error"));
    third.queue(openaiJson("from step three"));
    const served = await post(gw, "/v1/chat/completions", { model: "nested", messages: [audio] });
    expect(served.status).toBe(200);
    expect(second.requests).toHaveLength(0);
    expect(third.last.body.messages).toEqual([audio]);

    // Only the anthropic step: the request itself is the problem, so say so.
    const only = await post(gw, "/v1/chat/completions", { model: "inner", messages: [audio] });
    expect(only.status).toBe(400);
    const body = (await only.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("bad_request");
    expect(body.error.message).toContain("Audio input");

    // A step that failed and one that could not carry it: every provider failed.
    first.queue(openaiError(500, "down", null, "server_error"));
    const mixed = await post(gw, "/v1/chat/completions", { model: "pair", messages: [audio] });
    expect(mixed.status).toBe(503);
    expect(((await mixed.json()) as { error: { code: string } }).error.code).toBe(
      "all_providers_failed",
    );
    expect(second.requests).toHaveLength(0);
  });

  it("serves an Anthropic server tool from the route's anthropic step, passed through intact", async () => {
    second.queue(anthropicJson("searched"));
    const tool = { type: "web_search_20250305", name: "web_search", max_uses: 3 };
    const message = await anthropic.messages.create({
      model: "pair",
      max_tokens: 50,
      tools: [tool as Anthropic.ToolUnion],
      messages: [{ role: "user", content: "News?" }],
    });
    expect(message.content).toEqual([{ type: "text", text: "searched" }]);
    expect(first.requests).toHaveLength(0);
    expect(second.last.body.tools).toEqual([tool]);
  });

  it("brings each step's output limit within that model's max_output_tokens, same wire included", async () => {
    first.queue(openaiJson("one"));
    await openai.chat.completions.create({
      model: "pair",
      max_tokens: 10_000,
      messages: [{ role: "user", content: "Hi" }],
    });
    expect(first.last.body.max_tokens).toBe(4096);

    second.queue(anthropicJson("two"));
    await anthropic.messages.create({
      model: "inner",
      max_tokens: 10_000,
      messages: [{ role: "user", content: "Hi" }],
    });
    expect(second.last.body.max_tokens).toBe(4096);
  });

  it("walks nested routes depth-first: m1, then inner's m2, then m3", async () => {
    first.queue(openaiError(502, "bad gateway", null, "server_error"));
    second.queue(anthropicError(529, "overloaded_error", "overloaded"));
    third.queue(openaiJson("third serves"));
    const completion = await ask("nested");
    expect(completion.choices[0].message.content).toBe("third serves");
    expect([first.requests.length, second.requests.length, third.requests.length]).toEqual([
      1, 1, 1,
    ]);
    expect(third.last.body.model).toBe("m3-upstream");
  });

  it("answers 503 all_providers_failed when every step failed, in both styles", async () => {
    first.handle(() => openaiError(500, "down", null, "server_error"));
    second.handle(() => anthropicError(400, "invalid_request_error", "nope"));
    third.handle(() => openaiError(503, "down", null, "server_error"));

    const res = await post(gw, "/v1/chat/completions", {
      model: "nested",
      messages: [{ role: "user", content: "x" }],
    });
    expect(res.status).toBe(503);
    expect(res.headers.get("retry-after")).toBeNull();
    expect(await res.json()).toMatchObject({
      error: { type: "all_providers_failed", code: "all_providers_failed" },
    });
    expect([first.requests.length, second.requests.length, third.requests.length]).toEqual([
      1, 1, 1,
    ]);

    await expect(
      anthropic.messages.create({
        model: "nested",
        max_tokens: 5,
        messages: [{ role: "user", content: "x" }],
      }),
    ).rejects.toMatchObject({
      status: 503,
      error: { type: "error", error: { type: "api_error" } },
    });
  });

  it("rewrites a messages request for each backend too: translated for openai, passed through for anthropic", async () => {
    first.queue(openaiError(500, "down", null, "server_error"));
    second.queue(anthropicJson("native"));
    const message = await anthropic.messages.create({
      model: "pair",
      max_tokens: 30,
      system: "Be terse.",
      messages: [{ role: "user", content: [{ type: "text", text: "Hello" }] }],
    });
    expect(message.content).toEqual([{ type: "text", text: "native" }]);
    expect(message.model).toBe("pair");
    expect(first.last.body).toMatchObject({
      model: "m1-upstream",
      messages: [
        { role: "system", content: "Be terse." },
        // A lone text block becomes plain string content, which every chat server accepts.
        { role: "user", content: "Hello" },
      ],
    });
    expect(second.last.body).toEqual({
      model: "m2-upstream",
      max_tokens: 30,
      system: "Be terse.",
      messages: [{ role: "user", content: [{ type: "text", text: "Hello" }] }],
    });
  });

  it("falls back before the first byte of a stream, and streams from the step that served", async () => {
    first.queue(openaiError(503, "down", null, "server_error"));
    second.queue({ kind: "sse", steps: anthropicStreamSteps(["streamed ", "fallback"]) });
    const final = await openai.chat.completions
      .stream({ model: "pair", messages: [{ role: "user", content: "x" }] })
      .finalChatCompletion();
    expect(final.choices[0].message.content).toBe("streamed fallback");
    expect(first.requests).toHaveLength(1);
    expect(second.requests).toHaveLength(1);
  });

  it("falls back when a stream breaks after its 200 but before its first chunk, in both styles", async () => {
    first.queue({ kind: "sse", steps: [], end: "destroy" });
    second.queue({ kind: "sse", steps: anthropicStreamSteps(["second ", "served"]) });
    const chat = await openai.chat.completions
      .stream({ model: "pair", messages: [{ role: "user", content: "x" }] })
      .finalChatCompletion();
    expect(chat.choices[0].message.content).toBe("second served");

    first.queue({
      kind: "sse",
      steps: [{ data: { error: { message: "overloaded", type: "server_error" } } }],
    });
    second.queue({ kind: "sse", steps: anthropicStreamSteps(["again"]) });
    const message = await anthropic.messages
      .stream({ model: "pair", max_tokens: 20, messages: [{ role: "user", content: "x" }] })
      .finalMessage();
    expect(message.content).toMatchObject([{ type: "text", text: "again" }]);
    expect(first.requests).toHaveLength(2);
    expect(second.requests).toHaveLength(2);
  });

  it("answers 503 all_providers_failed when every step's stream breaks before its first chunk", async () => {
    first.queue({ kind: "sse", steps: [], end: "destroy" });
    second.queue({ kind: "sse", steps: [], end: "destroy" });
    const res = await post(gw, "/v1/chat/completions", {
      model: "pair",
      stream: true,
      messages: [{ role: "user", content: "x" }],
    });
    expect(res.status).toBe(503);
    expect(await res.json()).toMatchObject({ error: { code: "all_providers_failed" } });
  });

  it("does not fall back once a stream has started: a break becomes an error event", async () => {
    first.queue({ kind: "sse", steps: openaiStreamSteps(["started"]).slice(0, 2), end: "destroy" });
    const res = await post(gw, "/v1/chat/completions", {
      model: "pair",
      stream: true,
      messages: [{ role: "user", content: "x" }],
    });
    const text = await res.text();
    expect(res.status).toBe(200);
    expect(text).toContain("started");
    expect(text).toContain('"error"');
    expect(text).not.toContain("[DONE]");
    expect(second.requests).toHaveLength(0);
  });
});
