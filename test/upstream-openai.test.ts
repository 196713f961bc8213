import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import type { FinishedRequest } from "../src/index.js";
import { lastLogged } from "./support/api.js";
import {
  deferred,
  type FakeUpstream,
  fakeUpstream,
  openaiError,
  openaiJson,
  openaiStreamSteps,
  openaiToolStreamSteps,
} from "./support/fake-upstream.js";
import { baseConfig, KEY, post, type TestGateway, testGateway } from "./support/gateway.js";
import { deliveredTokens, loggedAs, requestTextTokens } from "./support/metering.js";
import { streamDataInText } from "./support/sse.js";

/** An OpenAI-compatible provider behind the gateway: passthrough, errors, and messages -> chat translation. */

const POOL_KEY = "sk-oa-pool-secret-4242";
const PNG_B64 =
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

let upstream: FakeUpstream;
let gw: TestGateway;
let config: ReturnType<typeof baseConfig>;
let openai: OpenAI;
let anthropic: Anthropic;
const finished: FinishedRequest[] = [];

beforeAll(async () => {
  upstream = await fakeUpstream("openai");
  config = baseConfig({
    providers: [
      // A 429 cools the pool's only key; keep that short so later tests are not affected.
      {
        id: "oa",
        wire: "openai",
        base_url: upstream.baseUrl,
        api_keys: [POOL_KEY],
        timeout_ms: 3_000,
        cooldown_ms: 1,
      },
      // For a 429 whose Retry-After (honoured as the key's cooldown) would otherwise block "oa".
      { id: "oa-rl", wire: "openai", base_url: upstream.baseUrl, api_keys: [POOL_KEY] },
      // Same fake, short timeout: a hanging upstream must become 503 quickly.
      {
        id: "oa-slow",
        wire: "openai",
        base_url: upstream.baseUrl,
        api_keys: [POOL_KEY],
        timeout_ms: 300,
      },
      // Refuses a request with tools it cannot run rather than leaving them out.
      {
        id: "oa-strict",
        wire: "openai",
        base_url: upstream.baseUrl,
        api_keys: [POOL_KEY],
        unsupported_tools: "reject",
      },
    ],
    models: [
      {
        name: "gpt-x",
        provider: "oa",
        upstream_model: "gpt-upstream",
        price_input_per_mtok: 10_000,
        price_output_per_mtok: 20_000,
      },
      // Known upstream by its own name: nothing to rename.
      {
        name: "gpt-same",
        provider: "oa",
        upstream_model: "gpt-same",
        price_input_per_mtok: 10_000,
      },
      {
        name: "gpt-slow",
        provider: "oa-slow",
        upstream_model: "gpt-upstream",
        price_input_per_mtok: 10_000,
      },
      {
        name: "gpt-rl",
        provider: "oa-rl",
        upstream_model: "gpt-upstream",
        price_input_per_mtok: 10_000,
      },
      {
        name: "gpt-strict",
        provider: "oa-strict",
        upstream_model: "gpt-upstream",
        price_input_per_mtok: 10_000,
      },
      // A model's own choice wins over its provider's, either way.
      {
        name: "gpt-x-strict",
        provider: "oa",
        upstream_model: "gpt-upstream",
        price_input_per_mtok: 10_000,
        unsupported_tools: "reject",
      },
      {
        name: "gpt-strict-lenient",
        provider: "oa-strict",
        upstream_model: "gpt-upstream",
        price_input_per_mtok: 10_000,
        unsupported_tools: "omit",
      },
    ],
    routes: [],
  });
  gw = await testGateway({ config, onRequest: (r) => finished.push(r) });
  openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 10_000 });
  anthropic = new Anthropic({ apiKey: KEY, baseURL: gw.url, maxRetries: 0, timeout: 10_000 });
});
afterAll(async () => {
  await gw?.close();
  await upstream?.close();
});
beforeEach(() => upstream.reset());

describe("openai wire: chat completions pass through", () => {
  it("forwards a non-stream body as sent, with only model mapped, and answers with the client's model name", async () => {
    upstream.queue(openaiJson("Hi there", { usage: [12, 3] }));
    const params = {
      model: "gpt-x",
      messages: [
        { role: "system" as const, content: "Be brief." },
        { role: "user" as const, content: "Hello" },
      ],
      temperature: 0.3,
      top_p: 0.9,
      seed: 7,
      max_tokens: 50,
      user: "user-1",
      logit_bias: { "50256": -100 },
      response_format: { type: "json_object" as const },
    };
    const completion = await openai.chat.completions.create(params);

    expect(upstream.requests).toHaveLength(1);
    expect(upstream.last.path).toBe("/v1/chat/completions");
    expect(upstream.last.headers.authorization).toBe(`Bearer ${POOL_KEY}`);
    expect(upstream.last.body).toEqual({ ...params, model: "gpt-upstream" });
    expect(completion.model).toBe("gpt-x");
    expect(completion.choices[0].message.content).toBe("Hi there");
    expect(completion.usage).toMatchObject({ prompt_tokens: 12, completion_tokens: 3 });
  });

  it("forwards the client's body text as written, with only its model renamed", async () => {
    upstream.queue(openaiJson("Hi"));
    // Pretty-printed, with a tool whose schema has a property named model.
    const sent = JSON.stringify(
      {
        model: "gpt-x",
        messages: [{ role: "user", content: 'Say "model": "gpt-x"' }],
        tools: [
          {
            type: "function",
            function: {
              name: "pick",
              parameters: { type: "object", properties: { model: { type: "string" } } },
            },
          },
        ],
      },
      null,
      2,
    );
    const res = await post(gw, "/v1/chat/completions", sent);
    expect(res.status).toBe(200);
    expect(upstream.last.raw).toBe(sent.replace('"model": "gpt-x"', '"model": "gpt-upstream"'));
  });

  it("forwards the text as written when a nested object has a model string of its own", async () => {
    upstream.queue(openaiJson("Hi"));
    // The top-level model is the request's; a tool's default and the metadata's are the client's.
    const sent = JSON.stringify(
      {
        metadata: { model: "gpt-x" },
        messages: [{ role: "user", content: "Hi" }],
        tools: [
          {
            type: "function",
            function: {
              name: "pick",
              parameters: { type: "object", properties: { model: { default: "gpt-x" } } },
            },
          },
        ],
        model: "gpt-x",
      },
      null,
      2,
    );
    const res = await post(gw, "/v1/chat/completions", sent);
    expect(res.status).toBe(200);
    const renamed = `${sent.slice(0, sent.lastIndexOf('"gpt-x"'))}"gpt-upstream"\n}`;
    expect(upstream.last.raw).toBe(renamed);
    expect(upstream.last.body.metadata).toEqual({ model: "gpt-x" });
  });

  // A short body is spliced as text, a long one (a conversation) as bytes: both ways here.
  for (const [size, pad] of [
    ["a short", ""],
    ["a long", "Grüße ✓ ".repeat(2_000)],
  ] as const) {
    it(`forwards ${size} body outside ASCII byte for byte, its model renamed where it is`, async () => {
      upstream.queue(openaiJson("Hi"));
      // Two- to four-byte characters before the model: its place in bytes is not its place in text.
      const content = `${pad}Grüße — 你好 🚀 "model": "gpt-x"`;
      const sent = JSON.stringify(
        { messages: [{ role: "user", content }], model: "gpt-x" },
        null,
        1,
      );
      const res = await post(gw, "/v1/chat/completions", sent);
      expect(res.status).toBe(200);
      const at = sent.lastIndexOf('"gpt-x"');
      expect(upstream.last.raw).toBe(`${sent.slice(0, at)}"gpt-upstream"${sent.slice(at + 7)}`);
    });

    it(`adds the usage option in front of ${size} streamed body outside ASCII, the rest byte for byte`, async () => {
      upstream.queue({ kind: "sse", steps: openaiStreamSteps(["Hi"]) });
      const content = JSON.stringify(`${pad}Ünïcödé ✓`);
      const sent = `  {"messages":[{"role":"user","content":${content}}],"stream":true,"model":"gpt-x"}`;
      const res = await post(gw, "/v1/chat/completions", sent);
      await res.text();
      expect(res.status).toBe(200);
      expect(upstream.last.raw).toBe(
        `{"stream_options":{"include_usage":true},${sent.trimStart().slice(1).replace('"gpt-x"', '"gpt-upstream"')}`,
      );
    });

    it(`sends ${size} body under the same model name as it came`, async () => {
      upstream.queue(openaiJson("Hi"));
      const sent = JSON.stringify({
        model: "gpt-same",
        messages: [{ role: "user", content: `${pad}hi` }],
      });
      const res = await post(gw, "/v1/chat/completions", sent);
      expect(res.status).toBe(200);
      expect(upstream.last.raw).toBe(sent);
    });
  }

  it("sends a long body that is not valid UTF-8 as the gateway read it, replacement characters and all", async () => {
    upstream.queue(openaiJson("Hi"));
    // Lone bytes that are no UTF-8 (0xff, a cut 3-byte sequence) before the model of a long body.
    const text = JSON.stringify({
      messages: [{ role: "user", content: `${"x".repeat(9_000)}@@` }],
      model: "gpt-x",
    });
    const at = text.indexOf("@@");
    const sent = Buffer.concat([
      Buffer.from(text.slice(0, at)),
      Buffer.from([0xff, 0xe2, 0x82]),
      Buffer.from(text.slice(at + 2)),
    ]);
    const res = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${KEY}` },
      body: sent,
    });
    expect(res.status).toBe(200);
    expect(upstream.last.body.model).toBe("gpt-upstream");
    expect(upstream.last.raw).toBe(
      sent.toString("utf8").replace('"model":"gpt-x"', '"model":"gpt-upstream"'),
    );
  });

  it("writes a body with a repeated key anew, as parsed: a provider might read the other value", async () => {
    upstream.queue(openaiJson("Hi"));
    const sent =
      '{"model":"gpt-x","max_tokens":100,"messages":[{"role":"user","content":"Hi"}],"max_tokens":5}';
    const res = await post(gw, "/v1/chat/completions", sent);
    expect(res.status).toBe(200);
    expect(upstream.last.raw.match(/max_tokens/g)).toHaveLength(1);
    expect(upstream.last.body.max_tokens).toBe(5);
  });

  it("adds the usage option in front of a streamed body that has no stream options", async () => {
    upstream.queue({ kind: "sse", steps: openaiStreamSteps(["Hi"]) });
    const sent = JSON.stringify({
      model: "gpt-x",
      stream: true,
      messages: [{ role: "user", content: "Hello" }],
    });
    const res = await post(gw, "/v1/chat/completions", sent);
    await res.text();
    expect(upstream.last.raw).toBe(
      `{"stream_options":{"include_usage":true},${sent.slice(1).replace('"gpt-x"', '"gpt-upstream"')}`,
    );
  });

  it("passes a JSON answer on as the upstream wrote it, with only its model renamed", async () => {
    // Pretty-printed, as OpenAI answers, and a text that quotes a model pair of its own.
    const answer = openaiJson('He said "model": "gpt-upstream".', {
      usage: [5, 4],
      model: "gpt-upstream",
    });
    const written = JSON.stringify(answer.body, null, 2);
    upstream.queue({ ...answer, body: written });
    const res = await post(gw, "/v1/chat/completions", {
      model: "gpt-x",
      messages: [{ role: "user", content: "Quote it" }],
    });
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).toBe(written.replace('"model": "gpt-upstream"', '"model": "gpt-x"'));
    expect(JSON.parse(text).choices[0].message.content).toBe('He said "model": "gpt-upstream".');
    expect(res.headers.get("content-length")).toBe(String(Buffer.byteLength(text)));
  });

  it("writes the answer anew when its model's pair is not the only one", async () => {
    const answer = openaiJson("Hi", { model: "gpt-upstream" });
    const body = answer.body as Record<string, unknown>;
    upstream.queue({ ...answer, body: { ...body, metadata: { model: "gpt-upstream" } } });
    const res = await post(gw, "/v1/chat/completions", {
      model: "gpt-x",
      messages: [{ role: "user", content: "Hello" }],
    });
    const json = (await res.json()) as { model: string; metadata: unknown };
    expect(json.model).toBe("gpt-x");
    expect(json.metadata).toEqual({ model: "gpt-upstream" });
  });

  it("streams chunk by chunk: the client sees the first chunk before the upstream sends the second", async () => {
    const clientSawFirst = deferred();
    const steps = openaiStreamSteps(["Hel", "lo"]);
    // steps: role, "Hel", "lo", finish, usage, [DONE]. "lo" waits until the client has "Hel".
    const secondIndex = 2;
    steps[secondIndex] = { ...steps[secondIndex], gate: clientSawFirst.promise };
    upstream.queue({ kind: "sse", steps });

    const params = {
      model: "gpt-x",
      messages: [{ role: "user" as const, content: "Hi" }],
      stream: true as const,
    };
    const stream = await openai.chat.completions.create(params);
    const texts: string[] = [];
    let stepsSentWhenFirstSeen = -1;
    let sawUsageChunk = false;
    for await (const chunk of stream) {
      const text = chunk.choices[0]?.delta?.content;
      if (chunk.usage) sawUsageChunk = true;
      if (!text) continue;
      texts.push(text);
      if (texts.length === 1) {
        stepsSentWhenFirstSeen = upstream.sent.length;
        clientSawFirst.resolve();
      }
    }

    expect(texts.join("")).toBe("Hello");
    expect(stepsSentWhenFirstSeen).toBe(secondIndex);
    expect(upstream.last.body).toEqual({
      ...params,
      model: "gpt-upstream",
      stream_options: { include_usage: true },
    });
    // The gateway asked for usage (billing needs it); the client did not, so it gets no usage chunk.
    expect(sawUsageChunk).toBe(false);
  });

  it("passes each chunk on as the upstream wrote it, with only the model's value replaced, and bills its usage", async () => {
    // Python-style spacing, "usage": null in every chunk, a quoted "model" inside the content and
    // an escaped character: the chunk text reaches the client as written, model aside.
    const raw = (delta: string, finish: string | null, usage = "null", choices = true) =>
      `{"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-upstream-2024-01-01", "choices": ${
        choices
          ? `[{"index": 0, "delta": ${delta}, "finish_reason": ${finish ? `"${finish}"` : "null"}}]`
          : "[]"
      }, "usage": ${usage}}`;
    upstream.queue({
      kind: "sse",
      steps: [
        { data: raw('{"role": "assistant", "content": "say \\"model\\": \\"x\\" "}', null) },
        { data: raw('{"content": "caf\\u00e9"}', null) },
        { data: raw("{}", "stop") },
        {
          data: raw(
            "{}",
            null,
            '{"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}',
            false,
          ),
        },
        { data: "[DONE]" },
      ],
    });
    const res = await post(gw, "/v1/chat/completions", {
      model: "gpt-x",
      stream: true,
      messages: [{ role: "user", content: "Hi" }],
    });
    const text = await res.text();
    const data = await streamDataInText(text);
    expect(data.at(-1)).toBe("[DONE]");
    const chunks = data.slice(0, -1);
    expect(chunks).toHaveLength(3); // the forced usage chunk is not the client's
    expect(chunks.map((c) => c.model)).toEqual(["gpt-x", "gpt-x", "gpt-x"]);
    expect(chunks.map((c) => c.choices[0].delta.content ?? "").join("")).toBe(
      'say "model": "x" café',
    );
    expect(text).toContain('"content": "caf\\u00e9"');
    expect(text).not.toContain("gpt-upstream");
    expect(await lastLogged(gw)).toMatchObject({
      input_tokens: 5,
      output_tokens: 3,
      cost_idr: 0.11,
    });
  });

  it("re-frames a chunk whose JSON spans several data: lines, so the client still reads one event", async () => {
    const steps = openaiStreamSteps(["multi", "-line"]);
    // The "multi" chunk pretty-printed: one SSE event in several `data:` lines.
    steps[1] = { data: JSON.stringify(steps[1].data, null, 2).split("\n").join("\ndata: ") };
    upstream.queue({ kind: "sse", steps });
    const res = await post(gw, "/v1/chat/completions", {
      model: "gpt-x",
      stream: true,
      messages: [{ role: "user", content: "Hi" }],
    });
    const text = await res.text();
    const events = text.split("\n\n").filter((e) => e.startsWith("data: {"));
    for (const event of events)
      expect(event.split("\n").every((l) => l.startsWith("data: "))).toBe(true);
    const chunks = (await streamDataInText(text)).filter((data) => data !== "[DONE]");
    expect(chunks.map((c) => c.choices[0]?.delta?.content ?? "").join("")).toBe("multi-line");
    expect(chunks.every((c) => c.model === "gpt-x")).toBe(true);
  });

  describe("an upstream that reports no usage", () => {
    const sentTokens = () => requestTextTokens(upstream.last.body);

    it("bills a JSON answer by an estimate: four characters a token, of the text sent and the text returned", async () => {
      const reply = openaiJson("An answer of forty characters, roughly.", {
        toolCalls: [{ id: "call_1", name: "lookup", arguments: '{"q":"x"}' }],
      });
      delete (reply as { body: { usage?: unknown } }).body.usage;
      upstream.queue(reply);
      await openai.chat.completions.create({
        model: "gpt-x",
        messages: [{ role: "user", content: "Hi" }],
      });
      const output = Math.ceil(
        ("An answer of forty characters, roughly." + "lookup" + '{"q":"x"}').length / 4,
      );
      expect(await lastLogged(gw)).toMatchObject({
        input_tokens: sentTokens(),
        output_tokens: output,
      });
      expect((await lastLogged(gw)).cost_idr).toBeGreaterThan(0);
    });

    it("bills a stream with no usage chunk by what it delivered: a token a delta, at least one for four characters", async () => {
      const steps = openaiStreamSteps(["one", " two", " three"]).filter(
        (step) => !JSON.stringify(step.data).includes('"usage"'),
      );
      upstream.queue({ kind: "sse", steps }); // role, three pieces, finish, [DONE]
      for (const client of ["chat", "messages"] as const) {
        if (client === "messages") upstream.queue({ kind: "sse", steps });
        const text =
          client === "chat"
            ? (
                await openai.chat.completions
                  .stream({ model: "gpt-x", messages: [{ role: "user", content: "Hi" }] })
                  .finalChatCompletion()
              ).choices[0].message.content
            : (
                await anthropic.messages
                  .stream({
                    model: "gpt-x",
                    max_tokens: 20,
                    messages: [{ role: "user", content: "Hi" }],
                  })
                  .finalMessage()
              ).content
                .map((b) => (b.type === "text" ? b.text : ""))
                .join("");
        expect(text).toBe("one two three");
        expect(await lastLogged(gw)).toMatchObject({
          input_tokens: sentTokens(),
          output_tokens: deliveredTokens(["one", " two", " three"]),
        });
      }
    });
  });

  it("passes the usage chunk on when the client asked for it, keeping its own stream_options", async () => {
    upstream.queue({ kind: "sse", steps: openaiStreamSteps(["a", "b"], { usage: [9, 2] }) });
    const stream = await openai.chat.completions.create({
      model: "gpt-x",
      messages: [{ role: "user", content: "Hi" }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) if (chunk.usage) usage = chunk.usage;
    expect(usage).toMatchObject({ prompt_tokens: 9, completion_tokens: 2 });
    expect(upstream.last.body.stream_options).toEqual({ include_usage: true });
  });

  it("never retries a direct dispatch: one upstream hit for a 500 and one for a 429", async () => {
    upstream.queue(openaiError(500, "boom", null, "server_error"));
    await expect(
      openai.chat.completions.create({
        model: "gpt-x",
        messages: [{ role: "user", content: "x" }],
      }),
    ).rejects.toMatchObject({
      status: 503,
      code: "upstream_error",
    });
    expect(upstream.requests).toHaveLength(1);

    upstream.reset();
    upstream.queue(openaiError(429, "slow down", "rate_limit_exceeded", "requests"));
    await expect(
      openai.chat.completions.create({
        model: "gpt-x",
        messages: [{ role: "user", content: "x" }],
      }),
    ).rejects.toMatchObject({
      status: 429,
    });
    expect(upstream.requests).toHaveLength(1);
  });

  it("ends a stream that breaks after it started with an error chunk and no [DONE]", async () => {
    const steps = openaiStreamSteps(["partial ", "answer"]).slice(0, 3);
    upstream.queue({ kind: "sse", steps, end: "destroy" });
    const res = await post(gw, "/v1/chat/completions", {
      model: "gpt-x",
      messages: [{ role: "user", content: "x" }],
      stream: true,
    });
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).toContain("partial ");
    expect((await streamDataInText(text)).at(-1)).toMatchObject({
      error: { code: "upstream_error" },
    });
    expect(text).not.toContain("[DONE]");

    // The SDK turns the error chunk into a thrown error, never a silently truncated answer.
    upstream.queue({ kind: "sse", steps, end: "destroy" });
    const stream = await openai.chat.completions.create({
      model: "gpt-x",
      messages: [{ role: "user", content: "x" }],
      stream: true,
    });
    await expect(
      (async () => {
        for await (const _ of stream) {
          // drain
        }
      })(),
    ).rejects.toThrow();
  });
});

describe("openai wire: failures around the start of a stream", () => {
  const streamBody = (model = "gpt-x") => ({
    model,
    stream: true,
    messages: [{ role: "user", content: "x" }],
  });

  it("answers 503 upstream_error when the first SSE event is an error chunk", async () => {
    upstream.queue({
      kind: "sse",
      steps: [{ data: { error: { message: "overloaded PROVIDER-TEXT", type: "server_error" } } }],
    });
    const res = await post(gw, "/v1/chat/completions", streamBody());
    expect(res.status).toBe(503);
    const text = await res.text();
    expect(text).not.toContain("PROVIDER-TEXT");
    expect(JSON.parse(text)).toMatchObject({ error: { code: "upstream_error" } });
  });

  it("answers 503 upstream_error when the upstream closes right after its headers", async () => {
    upstream.queue({ kind: "sse", steps: [], end: "destroy" });
    const res = await post(gw, "/v1/chat/completions", streamBody());
    expect(res.status).toBe(503);
    expect(await res.json()).toMatchObject({ error: { code: "upstream_error" } });
  });

  it("ends with an error chunk when the first chunk does not come within timeout_ms (keepalives committed the 200)", async () => {
    upstream.queue({ kind: "sse", steps: [{ ...openaiStreamSteps(["late"])[0], delayMs: 1_500 }] });
    // Keepalives well inside the provider's timeout, so the 200 is out before it fails.
    const quick = await testGateway({ keepaliveMs: 50, config });
    const res = await post(quick, "/v1/chat/completions", streamBody("gpt-slow"));
    expect(res.status).toBe(200);
    const text = await res.text();
    await quick.close();
    expect(text.startsWith(": keepalive")).toBe(true);
    expect((await streamDataInText(text)).at(-1)).toMatchObject({
      error: { code: "upstream_error" },
    });
    expect(text).not.toContain("[DONE]");
  });

  it("ends a stream that stalls after it started with an error chunk after timeout_ms, billed for what was seen", async () => {
    const never = deferred();
    const steps = openaiStreamSteps(["Hello", " wor"]);
    // The first chunks, then silence: the rest waits on a gate that never opens.
    upstream.queue({
      kind: "sse",
      steps: [...steps.slice(0, 3), { ...steps[3], gate: never.promise }],
    });
    const res = await post(gw, "/v1/chat/completions", streamBody("gpt-slow"));
    expect(res.status).toBe(200);
    const text = await res.text();
    const chunks = await streamDataInText(text);
    expect(chunks.map((c) => (c === "[DONE]" ? c : c.choices?.[0]?.delta?.content))).toEqual([
      "",
      "Hello",
      " wor",
      undefined,
    ]);
    expect(chunks.at(-1)).toMatchObject({ error: { code: "upstream_error" } });
    expect(text).not.toContain("[DONE]");
    // Ended by the provider's idle timeout, which cuts the connection: a fake that gave up
    // waiting on its gate would have ended the answer itself instead.
    for (let i = 0; i < 100 && upstream.aborted === 0; i++)
      await new Promise((resolve) => setTimeout(resolve, 20));
    expect(upstream.aborted).toBe(1);
    const logged = await lastLogged(gw);
    expect(logged.output_tokens).toBeGreaterThan(0);
    never.resolve();
  });

  it("answers 503 upstream_error when the provider cannot be reached at all", async () => {
    const closed = await fakeUpstream("openai");
    const url = closed.baseUrl;
    await closed.close();
    const unreachable = await testGateway({
      config: baseConfig({
        providers: [{ id: "gone", wire: "openai", base_url: url, api_keys: [POOL_KEY] }],
        models: [{ name: "gone-model", provider: "gone", price_input_per_mtok: 1 }],
        routes: [],
      }),
    });
    try {
      const res = await post(unreachable, "/v1/chat/completions", {
        model: "gone-model",
        messages: [{ role: "user", content: "x" }],
      });
      expect(res.status).toBe(503);
      const text = await res.text();
      expect(text).not.toContain(POOL_KEY);
      expect(text).not.toContain(url);
      expect(JSON.parse(text)).toMatchObject({ error: { code: "upstream_error" } });
    } finally {
      await unreachable.close();
    }
  });

  it("closes the upstream connection when the client goes away mid-stream", async () => {
    const never = deferred();
    const steps = openaiStreamSteps(["first", "never"]);
    steps[2] = { ...steps[2], gate: never.promise };
    upstream.queue({ kind: "sse", steps });
    const abort = new AbortController();
    const stream = await openai.chat.completions.create(
      streamBody() as OpenAI.ChatCompletionCreateParamsStreaming,
      {
        signal: abort.signal,
      },
    );
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta?.content) break;
    }
    abort.abort();
    for (let i = 0; i < 200 && upstream.aborted === 0; i++)
      await new Promise((r) => setTimeout(r, 10));
    expect(upstream.aborted).toBe(1);
    never.resolve();
  });
});

describe("openai wire: a client that leaves after a tool call's name", () => {
  it("is charged for the name it was sent, not nothing", async () => {
    const never = deferred();
    const steps = openaiToolStreamSteps([
      { id: "call_w", name: "get_current_weather_in_city", argumentPieces: ['{"city":"Oslo"}'] },
    ]);
    // The provider sends the call's name, then nothing until the client has gone.
    steps[2] = { ...steps[2], gate: never.promise };
    upstream.queue({ kind: "sse", steps });
    const abort = new AbortController();
    const { data: stream, response } = await openai.chat.completions
      .create(
        {
          model: "gpt-x",
          messages: [{ role: "user", content: "weather in Oslo?" }],
          stream: true,
          tools: [
            {
              type: "function",
              function: {
                name: "get_current_weather_in_city",
                parameters: { type: "object", properties: { city: { type: "string" } } },
              },
            },
          ],
        },
        { signal: abort.signal },
      )
      .withResponse();
    const id = response.headers.get("x-request-id") ?? "";
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta?.tool_calls?.[0]?.function?.name) break;
    }
    abort.abort();
    const row = await loggedAs(gw.services.store, "acct", id, "client_closed");
    never.resolve();
    expect(row).toMatchObject({ error_code: "client_closed" });
    expect(row?.output_tokens).toBeGreaterThanOrEqual(
      deliveredTokens(["get_current_weather_in_city"]),
    );
    expect(row?.cost_micro).toBeGreaterThan(0);
  });
});

describe("openai wire: a client that leaves before a JSON answer", () => {
  it("closes the upstream connection, logs client_closed and charges nothing", async () => {
    const balance = async () => gw.services.store.getAccount("acct")!.balance_micro;
    const before = await balance();
    upstream.queue({ ...openaiJson("too late", { usage: [10, 5] }), delayMs: 2_000 });
    const abort = new AbortController();
    const pending = fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "gpt-x", messages: [{ role: "user", content: "hi" }] }),
      signal: abort.signal,
    }).catch(() => "aborted");
    for (let i = 0; i < 100 && upstream.requests.length === 0; i++)
      await new Promise((r) => setTimeout(r, 10));
    abort.abort();
    expect(await pending).toBe("aborted");
    // Well before the fake's 2 s answer: the gateway hung up on the provider.
    for (let i = 0; i < 100 && upstream.aborted === 0; i++)
      await new Promise((r) => setTimeout(r, 10));
    expect(upstream.aborted).toBe(1);
    const row = () => {
      const [{ state, error_code, cost_micro }] = gw.services.store.requestLog("acct", 1);
      return { state, error_code, cost_micro };
    };
    for (let i = 0; i < 50 && row().error_code !== "client_closed"; i++)
      await new Promise((r) => setTimeout(r, 20));
    expect(row()).toEqual({ state: "failed", error_code: "client_closed", cost_micro: 0 });
    expect(await balance()).toBe(before);
  });
});

describe("upstream errors in the chat style", () => {
  const secretText = "PROVIDER-INTERNAL-DETAIL-xyz";

  async function errorFor(reply: Parameters<FakeUpstream["queue"]>[0], model = "gpt-x") {
    upstream.queue(reply);
    const res = await post(gw, "/v1/chat/completions", {
      model,
      messages: [{ role: "user", content: "x" }],
    });
    const text = await res.text();
    expect(text).not.toContain(secretText);
    expect(text).not.toContain(POOL_KEY);
    return {
      status: res.status,
      retryAfter: res.headers.get("retry-after"),
      body: JSON.parse(text) as { error: Record<string, unknown> },
    };
  }

  it("maps an OpenAI context_length_exceeded 400 to 400 invalid_request_error / context_length_exceeded with service text", async () => {
    const r = await errorFor(
      openaiError(
        400,
        `This model's maximum context length is 8192 tokens. ${secretText}`,
        "context_length_exceeded",
      ),
    );
    expect(r.status).toBe(400);
    expect(r.body.error).toEqual({
      message:
        "The request exceeds the model's maximum context window. Send a shorter conversation (or ask for less output), or choose a model with a larger context window from GET /v1/models.",
      type: "invalid_request_error",
      param: null,
      code: "context_length_exceeded",
    });
    expect(upstream.requests).toHaveLength(1);
  });

  it("maps a 404 model-not-found to 404 model_not_found", async () => {
    const r = await errorFor(
      openaiError(404, `The model gpt-upstream does not exist ${secretText}`, "model_not_found"),
    );
    expect(r.status).toBe(404);
    expect(r.body.error).toMatchObject({ type: "invalid_request_error", code: "model_not_found" });
  });

  it.each([451, 402, 409])(
    "turns an upstream %i (a status outside the kept set) into 400 upstream_rejected",
    async (status) => {
      const r = await errorFor({
        kind: "json",
        status,
        body: { error: { message: secretText, type: "some_error" } },
      });
      expect(r.status).toBe(400);
      expect(r.body.error).toMatchObject({
        type: "invalid_request_error",
        code: "upstream_rejected",
      });
    },
  );

  it.each([
    [413, "upstream_rejected"],
    [422, "invalid_request_error"],
    [403, "upstream_rejected"],
  ])("keeps an upstream %i", async (status, code) => {
    const r = await errorFor({
      kind: "json",
      status,
      body: { error: { message: secretText, type: "some_error" } },
    });
    expect(r.status).toBe(status);
    expect(r.body.error).toMatchObject({ type: "invalid_request_error", code });
  });

  it("maps a content-policy block to content_policy_violation", async () => {
    const r = await errorFor(
      openaiError(
        400,
        `Your request was rejected as a result of our safety system. ${secretText}`,
        "content_policy_violation",
      ),
    );
    expect(r.status).toBe(400);
    expect(r.body.error).toMatchObject({
      type: "invalid_request_error",
      code: "content_policy_violation",
    });
  });

  it("maps an upstream 429 to 429 upstream_error without Retry-After", async () => {
    const r = await errorFor(
      {
        ...openaiError(429, secretText, "rate_limit_exceeded", "requests"),
        headers: { "retry-after": "7" },
      },
      "gpt-rl",
    );
    expect(r.status).toBe(429);
    expect(r.retryAfter).toBeNull();
    expect(r.body.error).toMatchObject({ type: "upstream_error", code: "upstream_error" });
  });

  it.each([
    ["7", "7"],
    ["0.2", "1"],
    ["3600", "60"],
    [new Date(Date.now() + 3_600_000).toUTCString(), "60"],
  ])(
    "carries an upstream 503's Retry-After %s on its 503 upstream_error as %s seconds (at most a minute)",
    async (given, sent) => {
      const r = await errorFor({
        ...openaiError(503, secretText, null, "server_error"),
        headers: { "retry-after": given },
      });
      expect(r.status).toBe(503);
      expect(r.retryAfter).toBe(sent);
      expect(r.body.error).toMatchObject({ type: "upstream_error", code: "upstream_error" });
      expect(r.body.error.message).toMatch(/send the request again after the Retry-After seconds/);
    },
  );

  it("an upstream 503's Retry-After reaches a messages-style client too; without one there is none", async () => {
    upstream.queue({
      ...openaiError(503, secretText, null, "server_error"),
      headers: { "retry-after": "2" },
    });
    const res = await post(
      gw,
      "/v1/messages",
      { model: "gpt-x", max_tokens: 16, messages: [{ role: "user", content: "x" }] },
      { authorization: `Bearer ${KEY}`, "anthropic-version": "2023-06-01" },
    );
    expect(res.status).toBe(503);
    expect(res.headers.get("retry-after")).toBe("2");
    expect(((await res.json()) as { error: { type: string } }).error.type).toBe("api_error");
    // Without it, the familiar text and no header.
    const plain = await errorFor(openaiError(503, secretText, null, "server_error"));
    expect(plain.retryAfter).toBeNull();
    expect(plain.body.error.message).toBe(
      "The provider failed or timed out: send the request again in a few seconds.",
    );
  });

  it.each([500, 502])("maps an upstream %i to 503 upstream_error", async (status) => {
    const r = await errorFor(openaiError(status, secretText, null, "server_error"));
    expect(r.status).toBe(503);
    expect(r.body.error).toMatchObject({ type: "upstream_error", code: "upstream_error" });
  });

  it("maps an upstream that does not answer within timeout_ms to 503 upstream_error", async () => {
    const r = await errorFor({ kind: "hang" }, "gpt-slow");
    expect(r.status).toBe(503);
    expect(r.body.error).toMatchObject({ code: "upstream_error" });
  });

  it("classifies an error body that breaks off by what arrived, never as a provider failure", async () => {
    const r = await errorFor({
      ...openaiError(
        400,
        `This model's maximum context length is 8192 tokens. ${secretText.repeat(20)}`,
        "context_length_exceeded",
      ),
      cutHalfway: true,
    });
    expect(r.status).toBe(400);
    expect(r.body.error).toMatchObject({
      type: "invalid_request_error",
      code: "context_length_exceeded",
    });
  });

  it("maps a success body that breaks off to 503 upstream_error", async () => {
    const r = await errorFor({ ...openaiJson("cut short"), cutHalfway: true });
    expect(r.status).toBe(503);
    expect(r.body.error).toMatchObject({ code: "upstream_error" });
  });

  it("maps a success body that is not JSON to 503 upstream_error", async () => {
    const r = await errorFor({ kind: "json", body: `<html>${secretText}</html>` });
    expect(r.status).toBe(503);
    expect(r.body.error).toMatchObject({ code: "upstream_error" });
  });
});

describe("messages client -> openai wire (translation)", () => {
  const weatherTool: Anthropic.Tool = {
    name: "get_weather",
    description: "Current weather for a city",
    input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  };

  it("asks for structured output whether the schema comes as output_config.format or the beta's output_format", async () => {
    const schema = {
      type: "object",
      properties: { city: { type: "string" } },
      required: ["city"],
      additionalProperties: false,
    };
    for (const format of [
      { output_config: { format: { type: "json_schema", schema } } },
      // Deprecated: the SDKs released with the structured-outputs beta send it as it is (the
      // newest rewrite it into output_config before sending).
      { output_format: { type: "json_schema", schema } },
    ]) {
      upstream.queue(openaiJson('{"city":"Jakarta"}'));
      const res = await post(
        gw,
        "/v1/messages",
        {
          model: "gpt-x",
          max_tokens: 100,
          messages: [{ role: "user", content: "Where is Monas?" }],
          ...format,
        },
        {
          "x-api-key": KEY,
          "anthropic-version": "2023-06-01",
          "anthropic-beta": "structured-outputs-2025-11-13",
        },
      );
      expect(res.status).toBe(200);
      // Anthropic's structured outputs always hold to the schema; this one meets OpenAI's strict rules.
      expect(upstream.last.body.response_format).toEqual({
        type: "json_schema",
        json_schema: { name: "output", schema, strict: true },
      });
    }
  });

  it("sends thinking and output_config.effort as reasoning_effort, by LiteLLM's budget thresholds", async () => {
    const cases: [Partial<Anthropic.MessageCreateParamsNonStreaming>, string | undefined][] = [
      [{ thinking: { type: "enabled", budget_tokens: 1024 } }, "minimal"],
      [{ thinking: { type: "enabled", budget_tokens: 2048 } }, "low"],
      [{ thinking: { type: "enabled", budget_tokens: 6000 } }, "medium"],
      [{ thinking: { type: "enabled", budget_tokens: 12_000 } }, "high"],
      [{ thinking: { type: "adaptive" }, output_config: { effort: "low" } }, "low"],
      [{ output_config: { effort: "max" } }, "high"],
      [{ output_config: { effort: "xhigh" } }, "high"],
      [{ thinking: { type: "disabled" } }, undefined],
    ];
    for (const [params, effort] of cases) {
      upstream.queue(openaiJson("ok"));
      await anthropic.messages.create({
        model: "gpt-x",
        max_tokens: 16_000,
        messages: [{ role: "user", content: "Think about it." }],
        ...params,
      });
      expect(upstream.refused).toEqual([]);
      expect(upstream.last.body.reasoning_effort).toBe(effort);
    }
  });

  it("translates system, multi-turn, images and tools into chat completions, and a tool call back", async () => {
    upstream.queue(
      openaiJson("Let me check.", {
        toolCalls: [{ id: "call_1", name: "get_weather", arguments: '{"city":"Jakarta"}' }],
        usage: [40, 9],
      }),
    );
    const message = await anthropic.messages.create({
      model: "gpt-x",
      max_tokens: 200,
      system: "You are a weather bot.",
      tools: [weatherTool],
      messages: [
        { role: "user", content: "Hi" },
        { role: "assistant", content: "Hello! How can I help?" },
        {
          role: "user",
          content: [
            { type: "image", source: { type: "base64", media_type: "image/png", data: PNG_B64 } },
            { type: "text", text: "Weather where this photo was taken?" },
          ],
        },
      ],
    });

    const sent = upstream.last.body;
    expect(upstream.last.path).toBe("/v1/chat/completions");
    expect(sent.model).toBe("gpt-upstream");
    expect(sent.max_tokens ?? sent.max_completion_tokens).toBe(200);
    expect(sent.messages).toEqual([
      { role: "system", content: "You are a weather bot." },
      { role: "user", content: "Hi" },
      { role: "assistant", content: "Hello! How can I help?" },
      {
        role: "user",
        content: [
          { type: "image_url", image_url: { url: `data:image/png;base64,${PNG_B64}` } },
          { type: "text", text: "Weather where this photo was taken?" },
        ],
      },
    ]);
    expect(sent.tools).toEqual([
      {
        type: "function",
        function: {
          name: "get_weather",
          description: "Current weather for a city",
          parameters: weatherTool.input_schema,
        },
      },
    ]);

    expect(message.model).toBe("gpt-x");
    expect(message.stop_reason).toBe("tool_use");
    expect(message.content).toEqual([
      { type: "text", text: "Let me check.", citations: null },
      {
        type: "tool_use",
        id: "toolu_1",
        name: "get_weather",
        input: { city: "Jakarta" },
        caller: { type: "direct" },
      },
    ]);
    expect(message.usage).toMatchObject({ input_tokens: 40, output_tokens: 9 });
  });

  it("assembles streamed tool-call arguments into one tool_use input (finalMessage)", async () => {
    upstream.queue({
      kind: "sse",
      steps: openaiToolStreamSteps(
        [
          { id: "call_a", name: "get_weather", argumentPieces: ['{"ci', 'ty": "Ban', 'dung"}'] },
          { id: "call_b", name: "get_weather", argumentPieces: ['{"city":', '"Medan"}'] },
        ],
        { usage: [33, 21] },
      ),
    });
    const stream = anthropic.messages.stream({
      model: "gpt-x",
      max_tokens: 100,
      tools: [weatherTool],
      messages: [{ role: "user", content: "Weather in Bandung and Medan?" }],
    });
    const final = await stream.finalMessage();
    expect(upstream.last.body.stream).toBe(true);
    expect(upstream.last.body.stream_options).toEqual({ include_usage: true });
    expect(final.stop_reason).toBe("tool_use");
    expect(final.content.filter((b) => b.type === "tool_use")).toEqual([
      {
        type: "tool_use",
        id: "toolu_a",
        name: "get_weather",
        input: { city: "Bandung" },
        caller: { type: "direct" },
      },
      {
        type: "tool_use",
        id: "toolu_b",
        name: "get_weather",
        input: { city: "Medan" },
        caller: { type: "direct" },
      },
    ]);
    expect(final.usage).toMatchObject({ input_tokens: 33, output_tokens: 21 });
  });

  it("streams text with end_turn and max_tokens stop reasons", async () => {
    upstream.queue({ kind: "sse", steps: openaiStreamSteps(["Sela", "mat"], { usage: [5, 2] }) });
    const done = await anthropic.messages
      .stream({ model: "gpt-x", max_tokens: 100, messages: [{ role: "user", content: "Hi" }] })
      .finalMessage();
    expect(done.content).toEqual([{ type: "text", text: "Selamat", citations: null }]);
    expect(done.stop_reason).toBe("end_turn");
    expect(done.usage).toMatchObject({ input_tokens: 5, output_tokens: 2 });

    upstream.queue({ kind: "sse", steps: openaiStreamSteps(["cut"], { finish: "length" }) });
    const cut = await anthropic.messages
      .stream({ model: "gpt-x", max_tokens: 1, messages: [{ role: "user", content: "Hi" }] })
      .finalMessage();
    expect(cut.stop_reason).toBe("max_tokens");
  });

  it("runs a full coding-agent tool loop: tool call, tool result, final answer", async () => {
    const tools: Anthropic.Tool[] = [
      {
        name: "read_file",
        description: "Read a file",
        input_schema: {
          type: "object",
          properties: { path: { type: "string" } },
          required: ["path"],
        },
      },
    ];
    const history: Anthropic.MessageParam[] = [
      { role: "user", content: "What does src/index.ts export?" },
    ];

    upstream.queue({
      kind: "sse",
      steps: openaiToolStreamSteps(
        [{ id: "call_rf", name: "read_file", argumentPieces: ['{"path":', '"src/index.ts"}'] }],
        {
          text: "Reading it.",
        },
      ),
    });
    const first = await anthropic.messages
      .stream({ model: "gpt-x", max_tokens: 500, tools, messages: history })
      .finalMessage();
    expect(first.stop_reason).toBe("tool_use");
    const call = first.content.find((b): b is Anthropic.ToolUseBlock => b.type === "tool_use");
    // The chat backend's call_rf reaches the messages client as toolu_rf, and goes back so.
    expect(call).toMatchObject({
      id: "toolu_rf",
      name: "read_file",
      input: { path: "src/index.ts" },
    });

    history.push({ role: "assistant", content: first.content });
    history.push({
      role: "user",
      content: [
        { type: "tool_result", tool_use_id: call?.id ?? "", content: "export { startGateway }" },
      ],
    });
    upstream.queue({ kind: "sse", steps: openaiStreamSteps(["It exports ", "startGateway."]) });
    const second = await anthropic.messages
      .stream({ model: "gpt-x", max_tokens: 500, tools, messages: history })
      .finalMessage();

    expect(second.stop_reason).toBe("end_turn");
    expect(second.content).toEqual([
      { type: "text", text: "It exports startGateway.", citations: null },
    ]);
    const sent = upstream.last.body.messages as Record<string, unknown>[];
    expect(sent).toHaveLength(3);
    expect(sent[1]).toMatchObject({
      role: "assistant",
      content: "Reading it.",
      tool_calls: [{ id: "toolu_rf", type: "function", function: { name: "read_file" } }],
    });
    const args = (sent[1].tool_calls as { function: { arguments: string } }[])[0].function
      .arguments;
    expect(JSON.parse(args)).toEqual({ path: "src/index.ts" });
    expect(sent[2]).toMatchObject({ role: "tool", tool_call_id: "toolu_rf" });
    expect(JSON.stringify(sent[2].content)).toContain("export { startGateway }");
  });

  it("ends a broken stream with event: error and no message_stop", async () => {
    upstream.queue({
      kind: "sse",
      steps: openaiStreamSteps(["partial"]).slice(0, 2),
      end: "destroy",
    });
    const res = await post(gw, "/v1/messages", {
      model: "gpt-x",
      max_tokens: 10,
      stream: true,
      messages: [{ role: "user", content: "x" }],
    });
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).toContain("partial");
    expect(text).toMatch(/event: error\ndata: \{"type":"error","error":\{"type":"api_error"/);
    expect(text).not.toContain("message_stop");
  });
});

describe("mid-conversation system messages (beta mid-conversation-system-2026-04-07)", () => {
  it("takes role system inside messages and sends it to a chat-completions model as a system message at its place", async () => {
    upstream.queue(openaiJson("Done."));
    const res = await post(
      gw,
      "/v1/messages",
      {
        model: "gpt-x",
        max_tokens: 100,
        system: "You are terse.",
        messages: [
          { role: "user", content: "Hi." },
          { role: "assistant", content: "Hello." },
          { role: "system", content: [{ type: "text", text: "The user is in a hurry." }] },
          { role: "user", content: "Summarise." },
          { role: "system", content: "Answer in one word." },
        ],
      },
      { authorization: `Bearer ${KEY}`, "anthropic-beta": "mid-conversation-system-2026-04-07" },
    );
    expect(res.status).toBe(200);
    expect(upstream.last.body.messages).toEqual([
      { role: "system", content: "You are terse." },
      { role: "user", content: "Hi." },
      { role: "assistant", content: "Hello." },
      { role: "system", content: "The user is in a hurry." },
      { role: "user", content: "Summarise." },
      { role: "system", content: "Answer in one word." },
    ]);
  });
});

describe("Anthropic-defined client tools toward a chat-completions provider", () => {
  it("sends bash and the text editor as function tools with their schemas, and their calls come back by name", async () => {
    upstream.queue(
      openaiJson(null, {
        toolCalls: [{ id: "call_b1", name: "bash", arguments: '{"command":"ls -la"}' }],
      }),
    );
    const message = await anthropic.messages.create({
      model: "gpt-x",
      max_tokens: 200,
      tools: [
        { type: "bash_20250124", name: "bash" },
        { type: "text_editor_20250728", name: "str_replace_based_edit_tool" },
      ],
      messages: [{ role: "user", content: "List the files." }],
    });
    const tools = upstream.last.body.tools as {
      function: { name: string; parameters: { properties: Record<string, { enum?: string[] }> } };
    }[];
    expect(tools.map((t) => t.function.name)).toEqual(["bash", "str_replace_based_edit_tool"]);
    expect(Object.keys(tools[0].function.parameters.properties)).toContain("command");
    const editor = tools[1].function.parameters;
    expect(editor.properties.command.enum).toEqual(["view", "create", "str_replace", "insert"]);
    expect(Object.keys(editor.properties)).toEqual(
      expect.arrayContaining(["path", "old_str", "new_str", "insert_line", "view_range"]),
    );
    expect(message.stop_reason).toBe("tool_use");
    expect(message.content).toEqual([
      {
        type: "tool_use",
        id: "toolu_b1",
        name: "bash",
        input: { command: "ls -la" },
        caller: { type: "direct" },
      },
    ]);
  });
});

describe("what a chat-completions provider cannot carry", () => {
  it("leaves a messages request's Anthropic server tool out, naming it in a header; a provider set to reject refuses it (400) without calling the upstream", async () => {
    const request = (model: string) =>
      anthropic.messages
        .create({
          model,
          max_tokens: 100,
          tools: [
            { type: "web_search_20250305", name: "web_search", max_uses: 5 },
            { name: "lookup", input_schema: { type: "object" } },
          ],
          messages: [{ role: "user", content: "Search the web for today's news." }],
        })
        .withResponse();
    upstream.queue(openaiJson("Nothing found."));
    const { data, response } = await request("gpt-x");
    expect(response.headers.get("x-gateway-tools-omitted")).toBe("web_search_20250305");
    expect(data.content).toEqual([{ type: "text", text: "Nothing found.", citations: null }]);
    expect(upstream.last.body.tools).toEqual([
      { type: "function", function: { name: "lookup", parameters: { type: "object" } } },
    ]);

    upstream.reset();
    const err = await request("gpt-strict").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.BadRequestError);
    const apiError = err as InstanceType<typeof Anthropic.BadRequestError>;
    expect(apiError.status).toBe(400);
    expect(apiError.message).toContain("web_search_20250305");
    expect(upstream.requests).toHaveLength(0);
  });

  it("names every Anthropic tool it leaves out: tool search (a server tool), memory and the computer and browser toolsets", async () => {
    const tools = [
      { type: "tool_search_tool_regex_20251119", name: "tool_search_tool_regex" },
      { type: "memory_20250818", name: "memory" },
      { type: "computer_toolset_20260801", name: "computer" },
      { type: "browser_toolset_20260801", name: "browser" },
      { name: "lookup", input_schema: { type: "object" } },
    ];
    const request = (model: string) =>
      post(
        gw,
        "/v1/messages",
        { model, max_tokens: 100, tools, messages: [{ role: "user", content: "Find a tool." }] },
        { "x-api-key": KEY, "anthropic-version": "2023-06-01" },
      );
    upstream.queue(openaiJson("Done."));
    const res = await request("gpt-x");
    expect(res.status).toBe(200);
    expect(res.headers.get("x-gateway-tools-omitted")).toBe(
      "tool_search_tool_regex_20251119, memory_20250818, computer_toolset_20260801, browser_toolset_20260801",
    );
    expect(upstream.last.body.tools).toEqual([
      { type: "function", function: { name: "lookup", parameters: { type: "object" } } },
    ]);
    expect(await lastLogged(gw)).toMatchObject({
      tools_omitted: [
        "tool_search_tool_regex_20251119",
        "memory_20250818",
        "computer_toolset_20260801",
        "browser_toolset_20260801",
      ],
    });

    upstream.reset();
    const refused = await request("gpt-strict");
    expect(refused.status).toBe(400);
    expect(await refused.text()).toContain("memory_20250818");
    expect(upstream.requests).toHaveLength(0);
  });

  it("leaves a Responses request's hosted tool out with a header (a provider set to reject refuses it), and takes function tools as they are", async () => {
    const tools = [{ type: "web_search" }, { type: "function", name: "lookup", parameters: {} }];
    const refused = await post(gw, "/v1/responses", {
      model: "gpt-strict",
      input: "What happened today?",
      tools,
    });
    expect(refused.status).toBe(400);
    const body = (await refused.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("bad_request");
    expect(body.error.message).toContain("Hosted tools (web_search)");
    expect(upstream.requests).toHaveLength(0);

    upstream.queue(openaiJson("Nothing today."));
    const omitted = await post(gw, "/v1/responses", {
      model: "gpt-x",
      input: "What happened today?",
      tools,
    });
    expect(omitted.status).toBe(200);
    expect(omitted.headers.get("x-gateway-tools-omitted")).toBe("web_search");
    expect(upstream.last.body.tools).toEqual([
      { type: "function", function: { name: "lookup", parameters: {} } },
    ]);
    // The request log names what was left out, in the usage report and the test kit's list.
    expect(await lastLogged(gw)).toMatchObject({ state: "settled", tools_omitted: ["web_search"] });
    expect((await gw.listRequests({ limit: 1 }))[0].tools_omitted).toEqual(["web_search"]);

    upstream.queue(openaiJson("ok"));
    const served = await post(gw, "/v1/responses", {
      model: "gpt-x",
      input: "Look it up.",
      tools: [{ type: "function", name: "lookup", parameters: { type: "object" } }],
    });
    expect(served.status).toBe(200);
    expect(served.headers.get("x-gateway-tools-omitted")).toBeNull();
    expect(upstream.last.body.tools).toEqual([
      { type: "function", function: { name: "lookup", parameters: { type: "object" } } },
    ]);
    expect(await lastLogged(gw)).not.toHaveProperty("tools_omitted");
    expect((await gw.listRequests({ limit: 1 }))[0]).not.toHaveProperty("tools_omitted");
  });

  it("takes unsupported_tools from the model before its provider: a strict model of a lenient provider refuses, a lenient model of a strict provider leaves the tool out", async () => {
    const tools = [{ type: "web_search" }, { type: "function", name: "lookup", parameters: {} }];
    const refused = await post(gw, "/v1/responses", {
      model: "gpt-x-strict",
      input: "What happened today?",
      tools,
    });
    expect(refused.status).toBe(400);
    const body = (await refused.json()) as { error: { code: string; message: string } };
    expect(body.error.message).toContain("Hosted tools (web_search)");
    expect(upstream.requests).toHaveLength(0);

    upstream.queue(openaiJson("Nothing today."));
    const omitted = await post(gw, "/v1/responses", {
      model: "gpt-strict-lenient",
      input: "What happened today?",
      tools,
    });
    expect(omitted.status).toBe(200);
    expect(omitted.headers.get("x-gateway-tools-omitted")).toBe("web_search");
    expect(upstream.requests).toHaveLength(1);
  });

  it("records a streamed request's left-out hosted tool in the request log and the finished-request trace", async () => {
    upstream.queue({ kind: "sse", steps: openaiStreamSteps(["Nothing", " today."]) });
    finished.length = 0;
    const res = await post(gw, "/v1/responses", {
      model: "gpt-x",
      input: "What happened today?",
      stream: true,
      tools: [{ type: "web_search" }, { type: "code_interpreter", container: { type: "auto" } }],
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-gateway-tools-omitted")).toBe("web_search, code_interpreter");
    expect(await res.text()).toContain("response.completed");
    // The stream settles as it ends, and the trace goes out when the connection closes.
    await vi.waitFor(() => expect(finished.some((r) => r.path === "/v1/responses")).toBe(true));
    expect(await lastLogged(gw)).toMatchObject({
      state: "settled",
      tools_omitted: ["web_search", "code_interpreter"],
    });
    expect((await gw.listRequests({ limit: 1 }))[0].tools_omitted).toEqual([
      "web_search",
      "code_interpreter",
    ]);
    const line = finished.find((r) => r.path === "/v1/responses");
    expect(line?.toolsOmitted).toEqual(["web_search", "code_interpreter"]);
  });

  it("carries text.verbosity, prompt_cache_key and service_tier to chat under chat's names", async () => {
    upstream.queue(openaiJson("ok"));
    await openai.responses.create({
      model: "gpt-x",
      input: "Hi",
      store: false,
      text: { verbosity: "low" },
      prompt_cache_key: "tenant-7",
      prompt_cache_retention: "24h",
      service_tier: "flex",
    });
    expect(upstream.last.body).toMatchObject({
      verbosity: "low",
      prompt_cache_key: "tenant-7",
      prompt_cache_retention: "24h",
      service_tier: "flex",
    });
  });

  it("refuses an input image or file given by file_id, which no chat provider can read, before anything is sent", async () => {
    const before = upstream.requests.length;
    for (const part of [
      { type: "input_image", file_id: "file-abc", detail: "auto" },
      { type: "input_file", file_id: "file-abc" },
      { type: "input_file", file_url: "https://example.com/report.pdf" },
    ]) {
      const err = await openai.responses
        .create({
          model: "gpt-x",
          store: false,
          input: [{ role: "user", content: [{ type: "input_text", text: "Look." }, part] }],
        } as never)
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(OpenAI.BadRequestError);
      expect((err as Error).message).toContain(`\`${part.type}\``);
    }
    expect(upstream.requests.length).toBe(before);
  });

  it("flattens a Responses namespace tool group into function tools, and names the call's namespace again in the answer, streamed and not", async () => {
    const tools = [
      {
        type: "namespace",
        name: "crm",
        description: "Customer records",
        tools: [{ type: "function", name: "find_customer", parameters: { type: "object" } }],
      },
    ];
    upstream.queue(
      openaiJson(null, {
        toolCalls: [{ id: "call_n1", name: "crm__find_customer", arguments: '{"q":"ana"}' }],
      }),
    );
    const first = await openai.responses.create({
      model: "gpt-x",
      input: "Find Ana.",
      tools: tools as never,
    });
    expect(upstream.last.body.tools).toEqual([
      {
        type: "function",
        function: { name: "crm__find_customer", parameters: { type: "object" } },
      },
    ]);
    expect(first.output).toEqual([
      expect.objectContaining({
        type: "function_call",
        call_id: "call_n1",
        name: "find_customer",
        namespace: "crm",
        arguments: '{"q":"ana"}',
      }),
    ]);

    // The call goes back in the history under its namespace; the model sees its flat name.
    upstream.queue({
      kind: "sse",
      steps: openaiToolStreamSteps([
        { id: "call_n2", name: "crm__find_customer", argumentPieces: ['{"q":', '"bo"}'] },
      ]),
    });
    const stream = await openai.responses.create({
      model: "gpt-x",
      stream: true,
      tools: tools as never,
      input: [
        { role: "user", content: "Find Ana." },
        {
          type: "function_call",
          call_id: "call_n1",
          name: "find_customer",
          namespace: "crm",
          arguments: '{"q":"ana"}',
        } as never,
        { type: "function_call_output", call_id: "call_n1", output: "none" },
      ],
    });
    const done: unknown[] = [];
    for await (const ev of stream) if (ev.type === "response.output_item.done") done.push(ev.item);
    const sent = upstream.last.body.messages as { role: string; tool_calls?: unknown }[];
    expect(sent[1].tool_calls).toEqual([
      {
        id: "call_n1",
        type: "function",
        function: { name: "crm__find_customer", arguments: '{"q":"ana"}' },
      },
    ]);
    expect(done).toEqual([
      expect.objectContaining({
        type: "function_call",
        name: "find_customer",
        namespace: "crm",
        arguments: '{"q":"bo"}',
      }),
    ]);
  });
});

describe("tool calls on the messages style", () => {
  let own: TestGateway | undefined;
  let upstream: FakeUpstream | undefined;
  afterEach(async () => {
    await own?.close();
    own = undefined;
    await upstream?.close();
    upstream = undefined;
  });

  it("a chat backend's call_ ids reach a messages client as toolu_ ids, and the result goes back under them", async () => {
    upstream = await fakeUpstream("openai");
    const base = baseConfig();
    own = await testGateway({
      config: {
        ...base,
        providers: [{ id: "oa", wire: "openai", base_url: upstream.baseUrl, api_keys: ["sk-x"] }],
        models: [{ name: "gpt-tools", provider: "oa", price_input_per_mtok: 1000 }],
        routes: [],
      },
    });
    upstream.queue(
      openaiJson(null, {
        toolCalls: [{ id: "call_abc123", name: "read_file", arguments: '{"path":"a.ts"}' }],
        finish: "tool_calls",
      }),
    );
    const anthropic = new Anthropic({ apiKey: KEY, baseURL: own.url, maxRetries: 0 });
    const tools = [
      {
        name: "read_file",
        input_schema: { type: "object" as const, properties: { path: { type: "string" } } },
      },
    ];
    const first = await anthropic.messages.create({
      model: "gpt-tools",
      max_tokens: 100,
      tools,
      messages: [{ role: "user", content: "read a.ts" }],
    });
    const call = first.content.find((b) => b.type === "tool_use");
    expect(call).toMatchObject({ id: "toolu_abc123", name: "read_file", input: { path: "a.ts" } });
    upstream.queue(openaiJson("done"));
    await anthropic.messages.create({
      model: "gpt-tools",
      max_tokens: 100,
      tools,
      messages: [
        { role: "user", content: "read a.ts" },
        { role: "assistant", content: first.content },
        {
          role: "user",
          content: [{ type: "tool_result", tool_use_id: "toolu_abc123", content: "x = 1" }],
        },
      ],
    });
    const sent = upstream.requests[1].body as {
      messages: { role: string; tool_calls?: { id: string }[]; tool_call_id?: string }[];
    };
    const assistant = sent.messages.find((m) => m.role === "assistant");
    const result = sent.messages.find((m) => m.role === "tool");
    expect(assistant?.tool_calls?.[0].id).toBe("toolu_abc123");
    expect(result?.tool_call_id).toBe("toolu_abc123");
  });
});
