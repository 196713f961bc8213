import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { lastLogged } from "./support/api.js";
import {
  fakeGemini,
  type GeminiCall,
  geminiJson,
  geminiStreamSteps,
} from "./support/fake-gemini.js";
import type { FakeUpstream, RecordedRequest, Reply } from "./support/fake-upstream.js";
import { baseConfig, KEY, type TestGateway, testGateway } from "./support/gateway.js";

/**
 * What Gemini refuses that the other providers take, through the gateway with the official SDKs:
 * each is refused before anything is sent, with a 400 naming the client's own field, or made
 * valid where the gateway can do so without changing what the client asked: an empty message,
 * function names Google does not take, more choices than Google gives, a JSON answer beside
 * function calling on Gemini 2.x, and one tool call at a time.
 */

const POOL = ["AIza-refusals-pool-0000000000000000"];

let upstream: FakeUpstream;
let gw: TestGateway;
let openai: OpenAI;
let anthropic: Anthropic;

beforeAll(async () => {
  upstream = await fakeGemini({ apiKeys: POOL, maxOutputTokens: 1000 });
  const model = (name: string, upstreamModel: string) => ({
    name,
    provider: "gem",
    upstream_model: upstreamModel,
    price_input_per_mtok: 1_000_000,
    price_output_per_mtok: 2_000_000,
    max_output_tokens: 1000,
  });
  gw = await testGateway({
    config: baseConfig({
      providers: [
        ...(baseConfig().providers ?? []),
        { id: "gem", wire: "gemini", base_url: upstream.url, api_keys: POOL, timeout_ms: 3_000 },
      ],
      models: [
        ...(baseConfig().models ?? []),
        model("gemini-flash", "gemini-2.5-flash"),
        model("gemini-three", "gemini-3-flash-preview"),
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

/** No request reached the fake with a body Google would refuse. */
function noRefusals() {
  expect(upstream.refused).toEqual([]);
}

const streams = (req: RecordedRequest) => req.path.includes(":streamGenerateContent");

/** Gemini answering `calls`, whole or streamed as the request asked. */
function answerCalls(req: RecordedRequest, calls: GeminiCall[]): Reply {
  return streams(req)
    ? { kind: "sse", steps: geminiStreamSteps([], { calls }) }
    : geminiJson(null, { calls });
}

type Declaration = { name: string; description?: string };
const declared = (req: RecordedRequest): Declaration[] =>
  ((req.body.tools as { functionDeclarations?: Declaration[] }[] | undefined) ?? []).flatMap(
    (tool) => tool.functionDeclarations ?? [],
  );

/** As a model would: one call to each function the request declares, its description as args. */
function callEachDeclared(req: RecordedRequest): Reply {
  return answerCalls(
    req,
    declared(req).map(({ name, description }) => ({ name, args: { about: description ?? "" } })),
  );
}

describe("gemini wire: a request with nothing to answer", () => {
  it("a lone empty user message is a 400 saying so, in each style, nothing sent", async () => {
    const chatErr = await openai.chat.completions
      .create({ model: "gemini-flash", messages: [{ role: "user", content: "" }] })
      .catch((e: unknown) => e);
    expect(chatErr).toBeInstanceOf(OpenAI.BadRequestError);
    expect(chatErr).toMatchObject({ status: 400, error: { code: "bad_request" } });
    expect(chatErr).toHaveProperty("message", expect.stringMatching(/empty/));

    const partsErr = await openai.chat.completions
      .create({
        model: "gemini-flash",
        messages: [{ role: "user", content: [{ type: "text", text: "" }] }],
      })
      .catch((e: unknown) => e);
    expect(partsErr).toMatchObject({ status: 400, error: { code: "bad_request" } });

    const messagesErr = await anthropic.messages
      .create({
        model: "gemini-flash",
        max_tokens: 50,
        messages: [{ role: "user", content: [{ type: "text", text: "" }] }],
      })
      .catch((e: unknown) => e);
    expect(messagesErr).toBeInstanceOf(Anthropic.BadRequestError);
    expect(messagesErr).toMatchObject({
      status: 400,
      error: { error: { type: "invalid_request_error" } },
    });
    expect(messagesErr).toHaveProperty("message", expect.stringMatching(/empty/));

    expect(upstream.requests).toHaveLength(0);
  });

  it("in a route the next step answers it", async () => {
    const completion = await openai.chat.completions.create({
      model: "gemini-then-mock",
      messages: [{ role: "user", content: "" }],
    });
    expect(completion.choices[0].message.role).toBe("assistant");
    expect(upstream.requests).toHaveLength(0);
  });
});

describe("gemini wire: function names Google does not take", () => {
  const tool = (name: string, description: string): OpenAI.ChatCompletionTool => ({
    type: "function",
    function: {
      name,
      description,
      parameters: { type: "object", properties: { about: { type: "string" } } },
    },
  });
  const tools = [tool("2fa-check", "the 2fa tool"), tool("_2fa-check", "the underscore tool")];
  const question: OpenAI.ChatCompletionMessageParam = { role: "user", content: "Check it." };

  it("are sent as names Google takes, and each call comes back under the client's own name", async () => {
    upstream.handle(callEachDeclared);
    const first = await openai.chat.completions.create({
      model: "gemini-flash",
      messages: [question],
      tools,
      tool_choice: { type: "function", function: { name: "2fa-check" } },
    });
    noRefusals();
    const names = declared(upstream.last).map((d) => d.name);
    expect(names).toHaveLength(2);
    expect(names).toContain("_2fa-check");
    for (const name of names) expect(name).toMatch(/^[A-Za-z_][A-Za-z0-9_.:-]{0,63}$/);
    const mapped = names.find((name) => name !== "_2fa-check");
    expect(upstream.last.body.toolConfig).toEqual({
      functionCallingConfig: { mode: "ANY", allowedFunctionNames: [mapped] },
    });

    const message = first.choices[0].message;
    const calls = (message.tool_calls ?? []).flatMap((call) =>
      call.type === "function" ? [call] : [],
    );
    expect(calls.map((call) => [call.function.name, JSON.parse(call.function.arguments)])).toEqual([
      ["2fa-check", { about: "the 2fa tool" }],
      ["_2fa-check", { about: "the underscore tool" }],
    ]);

    // The next turn's history names the calls as the client knows them; Gemini sees its own.
    upstream.handle(() => geminiJson("Both checked."));
    const second = await openai.chat.completions.create({
      model: "gemini-flash",
      messages: [
        question,
        message,
        ...calls.map((call) => ({
          role: "tool" as const,
          tool_call_id: call.id,
          content: `${call.function.name} ok`,
        })),
      ],
      tools,
    });
    noRefusals();
    expect(second.choices[0].message.content).toBe("Both checked.");
    const contents = upstream.last.body.contents as { parts: Record<string, { name: string }>[] }[];
    expect(contents[1].parts.map((part) => part.functionCall.name)).toEqual([mapped, "_2fa-check"]);
    expect(contents[2].parts.map((part) => part.functionResponse.name)).toEqual([
      mapped,
      "_2fa-check",
    ]);
  });

  it("come back under the client's name in a stream, and to a messages client", async () => {
    upstream.handle(callEachDeclared);
    const stream = await openai.chat.completions.create({
      model: "gemini-flash",
      messages: [question],
      tools: [tool("2fa-check", "the 2fa tool")],
      stream: true,
    });
    const streamed: string[] = [];
    for await (const chunk of stream)
      for (const call of chunk.choices[0]?.delta.tool_calls ?? [])
        if (call.function?.name) streamed.push(call.function.name);
    noRefusals();
    expect(streamed).toEqual(["2fa-check"]);

    const answer = await anthropic.messages.create({
      model: "gemini-flash",
      max_tokens: 100,
      messages: [{ role: "user", content: "Check it." }],
      tools: [
        {
          name: "9-lives",
          description: "the cat tool",
          input_schema: { type: "object", properties: { about: { type: "string" } } },
        },
      ],
    });
    noRefusals();
    expect(answer.content).toMatchObject([
      { type: "tool_use", name: "9-lives", input: { about: "the cat tool" } },
    ]);
  });
});

describe("gemini wire: more choices than Gemini gives", () => {
  it("n above 8 is a 400 naming n and the limit, nothing sent; 8 is asked for", async () => {
    const err = await openai.chat.completions
      .create({ model: "gemini-flash", n: 9, messages: [{ role: "user", content: "Hi" }] })
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ status: 400, error: { code: "bad_request" } });
    expect(err).toHaveProperty("message", expect.stringMatching(/`n`.*\b8\b/));
    expect(upstream.requests).toHaveLength(0);

    upstream.queue(geminiJson(Array.from({ length: 8 }, (_, i) => `answer ${i}`)));
    const eight = await openai.chat.completions.create({
      model: "gemini-flash",
      n: 8,
      messages: [{ role: "user", content: "Hi" }],
    });
    noRefusals();
    expect(eight.choices).toHaveLength(8);
    expect(upstream.last.body.generationConfig).toMatchObject({ candidateCount: 8 });
  });
});

describe("gemini wire: a JSON answer beside function calling", () => {
  const tools: OpenAI.ChatCompletionTool[] = [
    { type: "function", function: { name: "lookup", description: "Look a word up" } },
  ];
  // OpenAI (and the mock) answer `json_object` only where the conversation asks for JSON.
  const messages: OpenAI.ChatCompletionMessageParam[] = [
    { role: "user", content: "Define it, as JSON." },
  ];

  it("on Gemini 2.x is a 400 naming the client's field, nothing sent, in each style", async () => {
    const chatErr = await openai.chat.completions
      .create({
        model: "gemini-flash",
        messages,
        tools,
        response_format: { type: "json_object" },
      })
      .catch((e: unknown) => e);
    expect(chatErr).toMatchObject({ status: 400, error: { code: "bad_request" } });
    expect(chatErr).toHaveProperty("message", expect.stringMatching(/`response_format`.*`tools`/));

    const responsesErr = await openai.responses
      .create({
        model: "gemini-flash",
        input: "Define it.",
        tools: [{ type: "function", name: "lookup", parameters: null, strict: false }],
        text: {
          format: {
            type: "json_schema",
            name: "definition",
            schema: { type: "object", properties: { text: { type: "string" } } },
          },
        },
        store: false,
      })
      .catch((e: unknown) => e);
    expect(responsesErr).toMatchObject({ status: 400, error: { code: "bad_request" } });
    expect(responsesErr).toHaveProperty(
      "message",
      expect.stringMatching(/`text\.format`.*`tools`/),
    );

    const messagesErr = await anthropic.messages
      .create({
        model: "gemini-flash",
        max_tokens: 100,
        messages: [{ role: "user", content: "Define it." }],
        tools: [{ name: "lookup", input_schema: { type: "object" } }],
        output_config: {
          format: {
            type: "json_schema",
            schema: { type: "object", properties: { text: { type: "string" } } },
          },
        },
      })
      .catch((e: unknown) => e);
    expect(messagesErr).toMatchObject({ status: 400 });
    expect(messagesErr).toHaveProperty(
      "message",
      expect.stringMatching(/`output_config\.format`.*`tools`/),
    );

    expect(upstream.requests).toHaveLength(0);
  });

  it("on Gemini 2.x with calling off (tool_choice none) is sent, as Google takes it", async () => {
    upstream.queue(geminiJson('{"text":"a word"}'));
    const completion = await openai.chat.completions.create({
      model: "gemini-flash",
      messages,
      tools,
      tool_choice: "none",
      response_format: { type: "json_object" },
    });
    noRefusals();
    expect(completion.choices[0].message.content).toBe('{"text":"a word"}');
  });

  it("on Gemini 3 is sent as asked", async () => {
    upstream.queue(geminiJson('{"text":"a word"}'));
    const completion = await openai.chat.completions.create({
      model: "gemini-three",
      messages,
      tools,
      response_format: { type: "json_object" },
    });
    noRefusals();
    expect(completion.choices[0].message.content).toBe('{"text":"a word"}');
    expect(upstream.last.body).toMatchObject({
      tools: [{ functionDeclarations: [{ name: "lookup" }] }],
      generationConfig: { responseMimeType: "application/json" },
    });
  });

  it("in a route skips the Gemini 2.x step for the next", async () => {
    const completion = await openai.chat.completions.create({
      model: "gemini-then-mock",
      messages,
      tools,
      response_format: { type: "json_object" },
    });
    expect(completion.choices[0].message.role).toBe("assistant");
    expect(upstream.requests).toHaveLength(0);
  });
});

describe("gemini wire: parallel_tool_calls false", () => {
  const tools: OpenAI.ChatCompletionTool[] = [
    {
      type: "function",
      function: {
        name: "weather",
        parameters: { type: "object", properties: { city: { type: "string" } } },
      },
    },
  ];
  const threeCalls = (req: RecordedRequest) =>
    answerCalls(
      req,
      ["Jakarta", "Bandung", "Medan"].map((city) => ({ name: "weather", args: { city } })),
    );
  const cities = (calls: OpenAI.ChatCompletionMessageToolCall[] | undefined) =>
    (calls ?? []).map((call) =>
      call.type === "function" ? JSON.parse(call.function.arguments).city : undefined,
    );
  const messages: OpenAI.ChatCompletionMessageParam[] = [
    { role: "user", content: "Weather in Jakarta, Bandung and Medan?" },
  ];

  it("gives one call a turn, whole and streamed; without it every call comes back", async () => {
    upstream.handle(threeCalls);
    const all = await openai.chat.completions.create({ model: "gemini-flash", messages, tools });
    expect(cities(all.choices[0].message.tool_calls)).toEqual(["Jakarta", "Bandung", "Medan"]);

    const one = await openai.chat.completions.create({
      model: "gemini-flash",
      messages,
      tools,
      parallel_tool_calls: false,
    });
    expect(cities(one.choices[0].message.tool_calls)).toEqual(["Jakarta"]);
    expect(one.choices[0].finish_reason).toBe("tool_calls");

    const stream = openai.chat.completions.stream({
      model: "gemini-flash",
      messages,
      tools,
      parallel_tool_calls: false,
    });
    const streamed = await stream.finalChatCompletion();
    expect(cities(streamed.choices[0].message.tool_calls)).toEqual(["Jakarta"]);
    noRefusals();
    expect(await lastLogged(gw)).toMatchObject({ state: "settled" });
  });

  it("one call to a Responses client (Codex sends parallel_tool_calls false) and a messages client's disable_parallel_tool_use", async () => {
    upstream.handle(threeCalls);
    const response = await openai.responses.create({
      model: "gemini-flash",
      input: "Weather in Jakarta, Bandung and Medan?",
      tools: [
        {
          type: "function",
          name: "weather",
          parameters: { type: "object", properties: { city: { type: "string" } } },
          strict: false,
        },
      ],
      parallel_tool_calls: false,
      store: false,
    });
    expect(response.output.filter((item) => item.type === "function_call")).toMatchObject([
      { name: "weather", arguments: '{"city":"Jakarta"}' },
    ]);

    const answer = await anthropic.messages.create({
      model: "gemini-flash",
      max_tokens: 100,
      messages: [{ role: "user", content: "Weather in Jakarta, Bandung and Medan?" }],
      tools: [
        {
          name: "weather",
          input_schema: { type: "object", properties: { city: { type: "string" } } },
        },
      ],
      tool_choice: { type: "auto", disable_parallel_tool_use: true },
    });
    expect(answer.content).toMatchObject([
      { type: "tool_use", name: "weather", input: { city: "Jakarta" } },
    ]);
    expect(answer.stop_reason).toBe("tool_use");
    noRefusals();
  });
});
