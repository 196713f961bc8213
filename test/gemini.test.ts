import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { lastLogged, quota } from "./support/api.js";
import {
  fakeGemini,
  fakeVector,
  geminiError,
  geminiJson,
  geminiStreamSteps,
} from "./support/fake-gemini.js";
import type { FakeUpstream, JsonReply, RecordedRequest } from "./support/fake-upstream.js";
import {
  ADMIN_KEY,
  baseConfig,
  KEY,
  post,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";
import { deliveredTokens } from "./support/metering.js";

/**
 * Google Gemini (`wire: "gemini"`) behind the gateway: every client style translated to
 * generateContent and back, streams, count_tokens, embeddings, billing from usageMetadata, and
 * Google's errors mapped as the spec says, against a fake that refuses what Google refuses.
 */

const POOL_A = "AIza-pool-key-A-000000000000000000";
const POOL_B = "AIza-pool-key-B-000000000000000000";
const BYOK_POOL = "AIza-byok-provider-pool-0000000000";
const USER_BAD = "AIza-user-revoked-key-000000000000";
const USER_GOOD = "AIza-user-own-key-0000000000000000";
const PAIRS = { rl: ["AIza-rl-A", "AIza-rl-B"], auth: ["AIza-auth-A", "AIza-auth-B"] };
const SIGNATURE = Buffer.from("gemini-thought-signature-bytes").toString("base64");

let upstream: FakeUpstream;
let gw: TestGateway;
let openai: OpenAI;
let anthropic: Anthropic;

beforeAll(async () => {
  upstream = await fakeGemini({
    apiKeys: [POOL_A, POOL_B, BYOK_POOL, USER_GOOD, ...PAIRS.rl, ...PAIRS.auth],
    maxOutputTokens: 1000,
  });
  const gemini = (id: string, keys: string[]) => ({
    id,
    wire: "gemini" as const,
    base_url: upstream.url,
    api_keys: keys,
    timeout_ms: 3_000,
  });
  gw = await testGateway({
    config: baseConfig({
      providers: [
        ...(baseConfig().providers ?? []),
        gemini("gem", [POOL_A, POOL_B]),
        gemini("gem-byok", [BYOK_POOL]),
        gemini("gem-rl", PAIRS.rl),
        gemini("gem-auth", PAIRS.auth),
      ],
      models: [
        ...(baseConfig().models ?? []),
        {
          name: "gemini-flash",
          provider: "gem",
          upstream_model: "gemini-2.5-flash",
          // 1 IDR an input token, 2 an output token.
          price_input_per_mtok: 1_000_000,
          price_output_per_mtok: 2_000_000,
          max_output_tokens: 1000,
        },
        {
          name: "gemini-embed",
          provider: "gem",
          upstream_model: "gemini-embedding-001",
          modality: "embedding",
          price_input_per_mtok: 1_000_000,
        },
        {
          name: "gemini-byok",
          provider: "gem-byok",
          upstream_model: "gemini-2.5-flash",
          price_input_per_mtok: 1_000_000,
          price_output_per_mtok: 2_000_000,
          max_output_tokens: 1000,
        },
        ...["rl", "auth"].map((pair) => ({
          name: `gemini-${pair}`,
          provider: `gem-${pair}`,
          upstream_model: "gemini-2.5-flash",
          price_input_per_mtok: 1,
          max_output_tokens: 1000,
        })),
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

const keySeen = (req: RecordedRequest) => req.headers["x-goog-api-key"];
const balance = async () => (await quota(gw)).balance_idr;

/** No request reached the fake with a body Google would refuse. */
function noRefusals() {
  expect(upstream.refused).toEqual([]);
}

describe("gemini wire: chat completions (openai SDK)", () => {
  it("sends generateContent with the key only in x-goog-api-key, and bills the reported usage", async () => {
    upstream.queue(geminiJson("Halo!", { usage: [11, 7] }));
    const before = await balance();
    const completion = await openai.chat.completions.create({
      model: "gemini-flash",
      messages: [
        { role: "system", content: "Be brief." },
        { role: "user", content: "Hi" },
      ],
      temperature: 0.3,
      max_tokens: 50,
      stop: ["END"],
    });
    noRefusals();
    expect(completion.choices[0]).toMatchObject({
      message: { role: "assistant", content: "Halo!" },
      finish_reason: "stop",
    });
    expect(completion.model).toBe("gemini-flash");
    expect(completion.usage).toMatchObject({ prompt_tokens: 11, completion_tokens: 7 });

    const sent = upstream.last;
    expect(sent.path).toBe("/v1beta/models/gemini-2.5-flash:generateContent");
    expect(keySeen(sent)).toMatch(/^AIza-pool-key-[AB]-/);
    expect(sent.headers.authorization).toBeUndefined();
    expect(sent.body).toEqual({
      contents: [{ role: "user", parts: [{ text: "Hi" }] }],
      systemInstruction: { parts: [{ text: "Be brief." }] },
      generationConfig: { maxOutputTokens: 50, temperature: 0.3, stopSequences: ["END"] },
    });
    // 11 input tokens at 1 IDR, 7 output at 2.
    expect(before - (await balance())).toBe(25);
    expect(await lastLogged(gw)).toMatchObject({
      input_tokens: 11,
      output_tokens: 7,
      cost_idr: 25,
    });
  });

  it("counts thinking as output, as Google bills it", async () => {
    upstream.queue(geminiJson("42", { usage: [10, 5, 20], thought: "Let me add." }));
    const before = await balance();
    const completion = await openai.chat.completions.create({
      model: "gemini-flash",
      messages: [{ role: "user", content: "6 x 7?" }],
    });
    expect(completion.choices[0].message.content).toBe("42");
    expect(completion.usage).toMatchObject({ prompt_tokens: 10, completion_tokens: 25 });
    expect(before - (await balance())).toBe(10 + 25 * 2);
  });

  it("asks for the model's maximum output when the client names none, and no more than it", async () => {
    await openai.chat.completions.create({
      model: "gemini-flash",
      messages: [{ role: "user", content: "x" }],
    });
    expect(upstream.last.body.generationConfig).toEqual({ maxOutputTokens: 1000 });
    await openai.chat.completions.create({
      model: "gemini-flash",
      max_completion_tokens: 5000,
      messages: [{ role: "user", content: "x" }],
    });
    noRefusals();
    expect(upstream.last.body.generationConfig).toEqual({ maxOutputTokens: 1000 });
  });

  it("runs a tool round trip: the call's thought signature goes back with it", async () => {
    const tools: OpenAI.ChatCompletionTool[] = [
      {
        type: "function",
        function: {
          name: "get_weather",
          description: "Weather in a city",
          parameters: {
            type: "object",
            properties: { city: { type: "string", minLength: 1 } },
            required: ["city"],
            additionalProperties: false,
          },
          strict: true,
        },
      },
    ];
    upstream.queue(
      geminiJson(null, {
        calls: [{ name: "get_weather", args: { city: "Jakarta" }, signature: SIGNATURE }],
      }),
    );
    const messages: OpenAI.ChatCompletionMessageParam[] = [
      { role: "user", content: "Weather in Jakarta?" },
    ];
    const first = await openai.chat.completions.create({
      model: "gemini-flash",
      messages,
      tools,
      tool_choice: "required",
    });
    noRefusals();
    expect(upstream.last.body.toolConfig).toEqual({ functionCallingConfig: { mode: "ANY" } });
    expect(upstream.last.body.tools).toEqual([
      {
        functionDeclarations: [
          {
            name: "get_weather",
            description: "Weather in a city",
            parametersJsonSchema: {
              type: "object",
              properties: { city: { type: "string", description: "{minLength: 1}" } },
              required: ["city"],
              additionalProperties: false,
            },
          },
        ],
      },
    ]);
    const choice = first.choices[0];
    expect(choice.finish_reason).toBe("tool_calls");
    const call = choice.message.tool_calls?.[0];
    if (call?.type !== "function") throw new Error("expected a function call");
    expect(call.function).toEqual({ name: "get_weather", arguments: '{"city":"Jakarta"}' });

    upstream.queue(geminiJson("31 C and humid in Jakarta."));
    const second = await openai.chat.completions.create({
      model: "gemini-flash",
      messages: [
        ...messages,
        choice.message,
        { role: "tool", tool_call_id: call.id, content: "31 C and humid" },
      ],
      tools,
    });
    noRefusals();
    expect(second.choices[0].message.content).toBe("31 C and humid in Jakarta.");
    expect(upstream.last.body.contents).toEqual([
      { role: "user", parts: [{ text: "Weather in Jakarta?" }] },
      {
        role: "model",
        parts: [
          {
            functionCall: { name: "get_weather", args: { city: "Jakarta" } },
            thoughtSignature: SIGNATURE,
          },
        ],
      },
      {
        role: "user",
        parts: [
          { functionResponse: { name: "get_weather", response: { output: "31 C and humid" } } },
        ],
      },
    ]);
  });

  it("asks for JSON matching the client's schema", async () => {
    upstream.queue(geminiJson('{"name":"Ada","age":36}'));
    const completion = await openai.chat.completions.create({
      model: "gemini-flash",
      messages: [{ role: "user", content: "Who wrote the first program?" }],
      response_format: {
        type: "json_schema",
        json_schema: {
          name: "person",
          strict: true,
          schema: {
            $schema: "http://json-schema.org/draft-07/schema#",
            type: "object",
            properties: { name: { type: "string" }, age: { type: "integer", exclusiveMinimum: 0 } },
            required: ["name", "age"],
            additionalProperties: false,
          },
        },
      },
    });
    noRefusals();
    expect(JSON.parse(completion.choices[0].message.content ?? "")).toEqual({
      name: "Ada",
      age: 36,
    });
    expect(upstream.last.body.generationConfig).toMatchObject({
      responseMimeType: "application/json",
      responseJsonSchema: {
        type: "object",
        properties: {
          name: { type: "string" },
          age: { type: "integer", description: "{exclusiveMinimum: 0}" },
        },
        required: ["name", "age"],
        additionalProperties: false,
      },
    });
  });

  it("leaves out a custom (free-form) tool, naming it, as other wires do", async () => {
    upstream.queue(geminiJson("ok"));
    const res = await post(gw, "/v1/chat/completions", {
      model: "gemini-flash",
      messages: [{ role: "user", content: "Patch the file." }],
      tools: [{ type: "custom", custom: { name: "apply_patch" } }],
      tool_choice: "required",
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-gateway-tools-omitted")).toBe("custom");
    expect(upstream.last.body).not.toHaveProperty("tools");
    expect(upstream.last.body).not.toHaveProperty("toolConfig");
  });

  it("gives n choices from n candidates, billed as one answer", async () => {
    upstream.queue(geminiJson(["first", "second"], { usage: [5, 6] }));
    const completion = await openai.chat.completions.create({
      model: "gemini-flash",
      n: 2,
      messages: [{ role: "user", content: "Two words" }],
    });
    expect(upstream.last.body.generationConfig).toMatchObject({ candidateCount: 2 });
    expect(completion.choices.map((c) => c.message.content)).toEqual(["first", "second"]);
    expect(await lastLogged(gw)).toMatchObject({ input_tokens: 5, output_tokens: 6, cost_idr: 17 });
  });

  it("streams, with usage when asked, billed by the reported usage", async () => {
    upstream.queue({
      kind: "sse",
      steps: geminiStreamSteps(["Hel", "lo ", "world"], { usage: [9, 3] }),
    });
    const before = await balance();
    const stream = await openai.chat.completions.create({
      model: "gemini-flash",
      messages: [{ role: "user", content: "Say hello" }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = "";
    let usage: OpenAI.CompletionUsage | undefined | null;
    let finish: string | null = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
      if (chunk.usage) usage = chunk.usage;
      expect(chunk.model).toBe("gemini-flash");
    }
    noRefusals();
    expect(upstream.last.path).toBe(
      "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
    );
    expect(text).toBe("Hello world");
    expect(finish).toBe("stop");
    expect(usage).toMatchObject({ prompt_tokens: 9, completion_tokens: 3 });
    expect(before - (await balance())).toBe(9 + 3 * 2);
  });

  it("bills a stream left midway for Gemini's input count and the output delivered", async () => {
    const steps = geminiStreamSteps(["partial ", "answer ", "never sent"], { usage: [40, 30] });
    upstream.queue({ kind: "sse", steps: steps.slice(0, 2), end: "destroy" });
    const res = await post(gw, "/v1/chat/completions", {
      model: "gemini-flash",
      messages: [{ role: "user", content: "x" }],
      stream: true,
    });
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).toContain("partial ");
    expect(text).not.toContain("[DONE]");
    expect(text).toContain("upstream_error");
    // The input is what Gemini counted (on every event), the output what reached the client.
    expect(await lastLogged(gw)).toMatchObject({
      input_tokens: 40,
      output_tokens: Math.max(2, deliveredTokens(["partial ", "answer "])),
    });
  });

  it("sends data-URL images inline", async () => {
    const png =
      "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
    await openai.chat.completions.create({
      model: "gemini-flash",
      messages: [
        {
          role: "user",
          content: [
            { type: "text", text: "What colour?" },
            { type: "image_url", image_url: { url: `data:image/png;base64,${png}` } },
          ],
        },
      ],
    });
    noRefusals();
    expect(upstream.last.body.contents).toEqual([
      {
        role: "user",
        parts: [{ text: "What colour?" }, { inlineData: { mimeType: "image/png", data: png } }],
      },
    ]);
  });
});

describe("gemini wire: messages (Anthropic SDK) and responses", () => {
  it("answers a messages request in Anthropic's shape, billed by usageMetadata", async () => {
    upstream.queue(geminiJson("Halo dari Gemini", { usage: [13, 4] }));
    const message = await anthropic.messages.create({
      model: "gemini-flash",
      max_tokens: 100,
      system: "Reply in Indonesian.",
      messages: [{ role: "user", content: "Hello" }],
    });
    noRefusals();
    expect(message).toMatchObject({
      type: "message",
      role: "assistant",
      model: "gemini-flash",
      content: [{ type: "text", text: "Halo dari Gemini" }],
      stop_reason: "end_turn",
      usage: { input_tokens: 13, output_tokens: 4 },
    });
    expect(upstream.last.body).toMatchObject({
      systemInstruction: { parts: [{ text: "Reply in Indonesian." }] },
      generationConfig: { maxOutputTokens: 100 },
    });
    expect(await lastLogged(gw)).toMatchObject({
      input_tokens: 13,
      output_tokens: 4,
      cost_idr: 21,
    });
  });

  it("runs a tool_use round trip", async () => {
    upstream.queue(
      geminiJson(null, {
        calls: [{ name: "lookup", args: { q: "gemini" }, signature: SIGNATURE }],
      }),
    );
    const tools: Anthropic.Tool[] = [
      {
        name: "lookup",
        description: "Search",
        input_schema: { type: "object", properties: { q: { type: "string" } }, required: ["q"] },
      },
    ];
    const first = await anthropic.messages.create({
      model: "gemini-flash",
      max_tokens: 100,
      tools,
      messages: [{ role: "user", content: "Look it up" }],
    });
    expect(first.stop_reason).toBe("tool_use");
    const use = first.content.find((b) => b.type === "tool_use");
    if (use?.type !== "tool_use") throw new Error("expected tool_use");
    expect(use).toMatchObject({ name: "lookup", input: { q: "gemini" } });

    upstream.queue(geminiJson("Found it."));
    const second = await anthropic.messages.create({
      model: "gemini-flash",
      max_tokens: 100,
      tools,
      messages: [
        { role: "user", content: "Look it up" },
        { role: "assistant", content: first.content },
        {
          role: "user",
          content: [{ type: "tool_result", tool_use_id: use.id, content: "a model" }],
        },
      ],
    });
    noRefusals();
    expect(second.content).toMatchObject([{ type: "text", text: "Found it." }]);
    const parts = (upstream.last.body.contents as { parts: unknown[] }[]).flatMap((c) => c.parts);
    expect(parts).toContainEqual({
      functionCall: { name: "lookup", args: { q: "gemini" } },
      thoughtSignature: SIGNATURE,
    });
    expect(parts).toContainEqual({
      functionResponse: { name: "lookup", response: { output: "a model" } },
    });
  });

  it("streams a messages answer", async () => {
    upstream.queue({ kind: "sse", steps: geminiStreamSteps(["Satu ", "dua"], { usage: [8, 2] }) });
    const message = await anthropic.messages
      .stream({
        model: "gemini-flash",
        max_tokens: 50,
        messages: [{ role: "user", content: "Count" }],
      })
      .finalMessage();
    noRefusals();
    expect(message.content).toMatchObject([{ type: "text", text: "Satu dua" }]);
    expect(message.usage).toMatchObject({ input_tokens: 8, output_tokens: 2 });
    expect(await lastLogged(gw)).toMatchObject({ input_tokens: 8, output_tokens: 2 });
  });

  it("answers the responses style", async () => {
    upstream.queue(geminiJson("Responses via Gemini", { usage: [6, 3] }));
    const response = await openai.responses.create({
      model: "gemini-flash",
      instructions: "Be short.",
      input: "Hi",
      store: false,
    });
    noRefusals();
    expect(response.output_text).toBe("Responses via Gemini");
    expect(response.usage).toMatchObject({ input_tokens: 6, output_tokens: 3 });
    expect(upstream.last.body.systemInstruction).toEqual({ parts: [{ text: "Be short." }] });
  });
});

describe("gemini wire: allowed_tools", () => {
  it("declares only the allowed functions, its mode as AUTO or ANY", async () => {
    const tool = (name: string): OpenAI.ChatCompletionTool => ({
      type: "function",
      function: { name, parameters: { type: "object", properties: {} } },
    });
    for (const [mode, expected] of [
      ["auto", "AUTO"],
      ["required", "ANY"],
    ] as const) {
      upstream.queue(geminiJson("ok"));
      await openai.chat.completions.create({
        model: "gemini-flash",
        messages: [{ role: "user", content: "Which tool?" }],
        tools: [tool("a"), tool("b"), tool("c")],
        tool_choice: {
          type: "allowed_tools",
          allowed_tools: { mode, tools: [{ type: "function", function: { name: "b" } }] },
        },
      });
      noRefusals();
      const body = upstream.last.body as {
        tools: { functionDeclarations: { name: string }[] }[];
        toolConfig: { functionCallingConfig: { mode: string } };
      };
      expect(body.tools[0].functionDeclarations.map((d) => d.name)).toEqual(["b"]);
      expect(body.toolConfig.functionCallingConfig.mode).toBe(expected);
    }
  });
});

describe("gemini wire: a messages client's top_k", () => {
  // The newest Anthropic SDK has no sampling fields; older ones and plain HTTP clients send them.
  it("is Gemini's topK (chat has no field for it)", async () => {
    upstream.queue(geminiJson("ok"));
    const res = await post(
      gw,
      "/v1/messages",
      {
        model: "gemini-flash",
        max_tokens: 100,
        top_k: 40,
        messages: [{ role: "user", content: "Hi" }],
      },
      { "x-api-key": KEY, "anthropic-version": "2023-06-01" },
    );
    expect(res.status).toBe(200);
    noRefusals();
    expect(upstream.last.body.generationConfig).toMatchObject({ topK: 40 });
  });
});

describe("gemini wire: thinking asked in each style", () => {
  const thinkingSent = () =>
    (upstream.last.body.generationConfig as { thinkingConfig?: unknown }).thinkingConfig;

  it("takes a messages client's thinking budget as it is, off as 0, adaptive as dynamic", async () => {
    const cases: [Partial<Anthropic.MessageCreateParamsNonStreaming>, unknown][] = [
      [
        { thinking: { type: "enabled", budget_tokens: 600 } },
        { thinkingBudget: 600, includeThoughts: true },
      ],
      [{ thinking: { type: "disabled" } }, { thinkingBudget: 0 }],
      [{ thinking: { type: "adaptive" } }, { thinkingBudget: -1, includeThoughts: true }],
      [
        { thinking: { type: "adaptive", display: "omitted" } },
        { thinkingBudget: -1, includeThoughts: false },
      ],
      [
        { thinking: { type: "adaptive" }, output_config: { effort: "low" } },
        { thinkingBudget: 1000, includeThoughts: true },
      ],
      [{}, undefined],
    ];
    for (const [params, expected] of cases) {
      upstream.queue(geminiJson("ok", { thought: "Hmm." }));
      const message = await anthropic.messages.create({
        model: "gemini-flash",
        max_tokens: 1000,
        messages: [{ role: "user", content: "Think." }],
        ...params,
      });
      noRefusals();
      expect(thinkingSent()).toEqual(expected);
      expect(message.content.at(-1)).toMatchObject({ type: "text", text: "ok" });
    }
  });

  it("takes chat's reasoning_effort and the Responses reasoning.effort by LiteLLM's budgets", async () => {
    upstream.queue(geminiJson("ok"));
    await openai.chat.completions.create({
      model: "gemini-flash",
      reasoning_effort: "medium",
      messages: [{ role: "user", content: "Think." }],
    });
    noRefusals();
    expect(thinkingSent()).toEqual({ thinkingBudget: 1000, includeThoughts: true });
    upstream.queue(geminiJson("ok"));
    await openai.chat.completions.create({
      model: "gemini-flash",
      reasoning_effort: "none",
      messages: [{ role: "user", content: "Think." }],
    });
    expect(thinkingSent()).toEqual({ thinkingBudget: 0 });
    upstream.queue(geminiJson("ok"));
    await openai.responses.create({
      model: "gemini-flash",
      input: "Think.",
      reasoning: { effort: "minimal" },
      store: false,
    });
    noRefusals();
    expect(thinkingSent()).toEqual({ thinkingBudget: 128, includeThoughts: true });
  });
});

describe("gemini wire: count_tokens and embeddings", () => {
  it("counts tokens with Gemini's countTokens, system and tools included", async () => {
    upstream.queue({ kind: "json", body: { totalTokens: 1234 } });
    const count = await anthropic.messages.countTokens({
      model: "gemini-flash",
      system: "Be brief.",
      messages: [{ role: "user", content: "How many tokens is this?" }],
    });
    noRefusals();
    expect(count.input_tokens).toBe(1234);
    expect(upstream.last.path).toBe("/v1beta/models/gemini-2.5-flash:countTokens");
    expect(upstream.last.body).toEqual({
      generateContentRequest: {
        model: "models/gemini-2.5-flash",
        contents: [{ role: "user", parts: [{ text: "How many tokens is this?" }] }],
        systemInstruction: { parts: [{ text: "Be brief." }] },
      },
    });
  });

  it("counts a Responses input with countTokens (responses.inputTokens.count)", async () => {
    upstream.queue({ kind: "json", body: { totalTokens: 321 } });
    const count = await openai.responses.inputTokens.count({
      model: "gemini-flash",
      instructions: "Be brief.",
      input: "How many tokens is this?",
    });
    noRefusals();
    expect(count).toEqual({ object: "response.input_tokens", input_tokens: 321 });
    expect(upstream.last.path).toBe("/v1beta/models/gemini-2.5-flash:countTokens");
    expect(upstream.last.body).toEqual({
      generateContentRequest: {
        model: "models/gemini-2.5-flash",
        contents: [{ role: "user", parts: [{ text: "How many tokens is this?" }] }],
        systemInstruction: { parts: [{ text: "Be brief." }] },
      },
    });
  });

  it("embeds with batchEmbedContents, floats or base64, billed by the estimate", async () => {
    const before = await balance();
    const result = await openai.embeddings.create({
      model: "gemini-embed",
      input: ["first text", "second text"],
      dimensions: 4,
      encoding_format: "float",
    });
    noRefusals();
    expect(upstream.last.path).toBe("/v1beta/models/gemini-embedding-001:batchEmbedContents");
    expect(upstream.last.body).toEqual({
      requests: ["first text", "second text"].map((text) => ({
        model: "models/gemini-embedding-001",
        content: { parts: [{ text }] },
        outputDimensionality: 4,
      })),
    });
    const expected = ["first text", "second text"].map((text) =>
      fakeVector(JSON.stringify({ parts: [{ text }] }), 4),
    );
    expect(result.data.map((d) => d.embedding)).toEqual(expected);
    expect(result.model).toBe("gemini-embed");
    // "first text" and "second text": 3 tokens each by the gateway's estimate, at 1 IDR.
    expect(before - (await balance())).toBe(6);

    const res = await post(gw, "/v1/embeddings", {
      model: "gemini-embed",
      input: "first text",
      dimensions: 4,
      encoding_format: "base64",
    });
    const body = (await res.json()) as { data: { embedding: string }[] };
    const bytes = Buffer.from(body.data[0].embedding, "base64");
    const floats = Array.from({ length: bytes.length / 4 }, (_, i) => bytes.readFloatLE(i * 4));
    expect(floats.map((x) => Math.round(x * 1000) / 1000)).toEqual(expected[0]);
  });
});

describe("gemini wire: embeddings past one batch, and inputs Gemini cannot take", () => {
  it("sends more than a hundred inputs in batches of at most a hundred, answered in order", async () => {
    const input = Array.from({ length: 150 }, (_, i) => `text number ${i}`);
    const result = await openai.embeddings.create({
      model: "gemini-embed",
      input,
      dimensions: 2,
      encoding_format: "float",
    });
    noRefusals();
    expect(upstream.requests.map((r) => (r.body.requests as unknown[]).length).sort()).toEqual(
      [100, 50].sort(),
    );
    expect(result.data.map((d) => d.index)).toEqual(input.map((_, i) => i));
    expect(result.data.map((d) => d.embedding)).toEqual(
      input.map((text) => fakeVector(JSON.stringify({ parts: [{ text }] }), 2)),
    );
  });

  it("refuses token arrays: Gemini embeds text", async () => {
    const res = await post(gw, "/v1/embeddings", { model: "gemini-embed", input: [1, 2, 3] });
    expect(res.status).toBe(400);
    expect(upstream.requests).toHaveLength(0);
  });
});

describe("gemini wire: Google's errors as the spec maps them", () => {
  const ask = (model = "gemini-flash") =>
    openai.chat.completions.create({ model, messages: [{ role: "user", content: "x" }] });

  /**
   * The first request gets `refusal`; every later one must then go to the pool's other key while
   * the refused one cools. Returns what the client saw for the first.
   */
  async function refuseFirstKey(model: string, keys: string[], refusal: JsonReply) {
    let refusedKey: unknown;
    upstream.handle((req) => {
      if (refusedKey !== undefined) return geminiJson("ok");
      refusedKey = keySeen(req);
      return refusal;
    });
    const err = await ask(model).catch((e: unknown) => e);
    for (let i = 0; i < 3; i++) await ask(model);
    const other = keys.find((k) => k !== refusedKey);
    expect(upstream.requests.slice(1).map(keySeen)).toEqual([other, other, other]);
    return err;
  }

  it("429 RESOURCE_EXHAUSTED is 429 upstream_error, and that pool key cools", async () => {
    const err = await refuseFirstKey(
      "gemini-rl",
      PAIRS.rl,
      geminiError(
        429,
        "RESOURCE_EXHAUSTED",
        "Resource has been exhausted (e.g. check quota). GOOGLE-TEXT",
      ),
    );
    expect(err).toMatchObject({ status: 429, error: { code: "upstream_error" } });
    expect(JSON.stringify((err as { error: unknown }).error)).not.toContain("GOOGLE-TEXT");
  });

  it("400 INVALID_ARGUMENT with the context window exceeded is 400 context_length_exceeded", async () => {
    upstream.queue(
      geminiError(
        400,
        "INVALID_ARGUMENT",
        "The input token count (1200293) exceeds the maximum number of tokens allowed (1048576).",
      ),
    );
    const err = await ask().catch((e: unknown) => e);
    expect(err).toMatchObject({
      status: 400,
      error: { code: "context_length_exceeded", type: "invalid_request_error" },
    });
    expect(JSON.stringify((err as { error: unknown }).error)).not.toContain("1048576");
  });

  it("a key Google refuses (400 API_KEY_INVALID) is a provider failure: 503, the key cools", async () => {
    const err = await refuseFirstKey(
      "gemini-auth",
      PAIRS.auth,
      geminiError(
        400,
        "INVALID_ARGUMENT",
        "API key not valid. Please pass a valid API key.",
        "API_KEY_INVALID",
      ),
    );
    expect(err).toMatchObject({ status: 503, error: { code: "upstream_error" } });
  });

  it("5xx is 503 upstream_error; in a route the next step answers", async () => {
    upstream.queue(geminiError(500, "INTERNAL", "An internal error has occurred."));
    await expect(ask()).rejects.toMatchObject({ status: 503, error: { code: "upstream_error" } });

    upstream.queue(geminiError(503, "UNAVAILABLE", "The model is overloaded."));
    const routed = await ask("gemini-then-mock");
    expect(upstream.requests).toHaveLength(2);
    expect(routed.choices[0].message.content).toBeTruthy();
    expect(routed.model).toBe("gemini-then-mock");
  });

  it("a prompt Gemini blocks is 400 content_policy_violation", async () => {
    upstream.queue({
      kind: "json",
      body: {
        promptFeedback: { blockReason: "PROHIBITED_CONTENT" },
        usageMetadata: { promptTokenCount: 5 },
      },
    });
    await expect(ask()).rejects.toMatchObject({
      status: 400,
      error: { code: "content_policy_violation" },
    });
  });

  it("a BYOK chain moves past the account's refused key to its next one, and costs nothing", async () => {
    const admin = { authorization: `Bearer ${ADMIN_KEY}` };
    for (const key of [USER_BAD, USER_GOOD]) {
      const res = await post(
        gw,
        "/api/admin/accounts/acct/byok",
        { provider: "gem-byok", key },
        admin,
      );
      expect(res.status).toBe(201);
    }
    const before = await balance();
    const completion = await ask("gemini-byok");
    expect(completion.choices[0].message.content).toBe("ok");
    expect(upstream.requests.map(keySeen)).toEqual([USER_BAD, USER_GOOD]);
    expect(upstream.refused).toHaveLength(1);
    expect(await balance()).toBe(before);
  });
});
