import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { lastLogged, quota } from "./support/api.js";
import {
  anthropicError,
  anthropicJson,
  anthropicStreamSteps,
  anthropicToolStreamSteps,
  deferred,
  type FakeUpstream,
  fakeUpstream,
  type Reply,
} from "./support/fake-upstream.js";
import { baseConfig, KEY, post, type TestGateway, testGateway } from "./support/gateway.js";
import { deliveredTokens, loggedAs, requestTextTokens } from "./support/metering.js";

/** An Anthropic-compatible provider behind the gateway: passthrough, errors, and chat -> messages translation. */

const POOL_KEY = "sk-ant-pool-secret-9191";
const THIN_KEY = "kn-test-thin-account-key-0000000";
const PNG_B64 =
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

let upstream: FakeUpstream;
let gw: TestGateway;
let openai: OpenAI;
let anthropic: Anthropic;

beforeAll(async () => {
  upstream = await fakeUpstream("anthropic");
  gw = await testGateway({
    config: baseConfig({
      providers: [
        {
          id: "an",
          wire: "anthropic",
          base_url: upstream.baseUrl,
          api_keys: [POOL_KEY],
          timeout_ms: 3_000,
          cooldown_ms: 1,
        },
        {
          id: "an-slow",
          wire: "anthropic",
          base_url: upstream.baseUrl,
          api_keys: [POOL_KEY],
          timeout_ms: 300,
        },
        { id: "an-rl", wire: "anthropic", base_url: upstream.baseUrl, api_keys: [POOL_KEY] },
      ],
      models: [
        {
          name: "claude-x",
          provider: "an",
          upstream_model: "claude-upstream",
          price_input_per_mtok: 10_000,
          price_output_per_mtok: 20_000,
          max_output_tokens: 64_000,
        },
        {
          name: "claude-slow",
          provider: "an-slow",
          upstream_model: "claude-upstream",
          price_input_per_mtok: 1,
        },
        {
          name: "claude-rl",
          provider: "an-rl",
          upstream_model: "claude-upstream",
          price_input_per_mtok: 1,
        },
      ],
      routes: [],
      accounts: [
        ...(baseConfig().accounts ?? []),
        // Enough for an answer of the model's maximum output, not for twice that.
        { id: "thin", balance_idr: 2_000, keys: [{ id: "kt", value: THIN_KEY }] },
      ],
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

describe("anthropic wire: messages pass through", () => {
  it("forwards the client's anthropic-beta header", async () => {
    upstream.queue(anthropicJson("ok"));
    await anthropic.messages.create(
      { model: "claude-x", max_tokens: 8, messages: [{ role: "user", content: "hi" }] },
      {
        headers: { "anthropic-beta": "prompt-caching-2024-07-31,interleaved-thinking-2025-05-14" },
      },
    );
    expect(upstream.last.headers["anthropic-beta"]).toBe(
      "prompt-caching-2024-07-31,interleaved-thinking-2025-05-14",
    );
  });

  it("forwards the body with only model mapped, with x-api-key and anthropic-version", async () => {
    upstream.queue(anthropicJson("Halo", { usage: [21, 4] }));
    const params = {
      model: "claude-x",
      max_tokens: 64,
      system: [{ type: "text", text: "Be kind.", cache_control: { type: "ephemeral" } }],
      messages: [{ role: "user" as const, content: "Hi" }],
      temperature: 0.2,
      stop_sequences: ["END"],
      metadata: { user_id: "u-1" },
    };
    const message = await anthropic.messages.create(
      params as Anthropic.MessageCreateParamsNonStreaming,
    );

    expect(upstream.requests).toHaveLength(1);
    expect(upstream.last.path).toBe("/v1/messages");
    expect(upstream.last.headers["x-api-key"]).toBe(POOL_KEY);
    expect(upstream.last.headers["anthropic-version"]).toBe("2023-06-01");
    expect(upstream.last.headers.authorization).toBeUndefined();
    expect(upstream.last.body).toEqual({ ...params, model: "claude-upstream" });
    expect(message.model).toBe("claude-x");
    expect(message.content).toEqual([{ type: "text", text: "Halo" }]);
    expect(message.usage).toMatchObject({ input_tokens: 21, output_tokens: 4 });
  });

  it("forwards the client's body text as written, with only its model renamed, streamed or not", async () => {
    for (const stream of [false, true]) {
      upstream.queue(
        stream ? { kind: "sse", steps: anthropicStreamSteps(["Halo"]) } : anthropicJson("Halo"),
      );
      const sent = JSON.stringify(
        { model: "claude-x", max_tokens: 64, stream, messages: [{ role: "user", content: "Hi" }] },
        null,
        2,
      );
      const res = await post(gw, "/v1/messages", sent);
      await res.text();
      expect(upstream.last.raw).toBe(
        sent.replace('"model": "claude-x"', '"model": "claude-upstream"'),
      );
    }
  });

  it("passes a JSON answer on as the upstream wrote it, with only its model renamed", async () => {
    const written = JSON.stringify((anthropicJson("Halo") as { body: unknown }).body, null, 2);
    upstream.queue({ kind: "json", body: written });
    const res = await post(gw, "/v1/messages", {
      model: "claude-x",
      max_tokens: 64,
      messages: [{ role: "user", content: "Hi" }],
    });
    expect(res.status).toBe(200);
    expect(await res.text()).toBe(
      written.replace('"model": "upstream-model"', '"model": "claude-x"'),
    );
  });

  it("streams events through as they arrive, and the SDK assembles the message", async () => {
    const clientSawFirst = deferred();
    const steps = anthropicStreamSteps(["Sela", "mat ", "pagi"], { usage: [8, 3] });
    const secondText = steps.findIndex((s) => JSON.stringify(s.data).includes('"mat "'));
    steps[secondText] = { ...steps[secondText], gate: clientSawFirst.promise };
    upstream.queue({ kind: "sse", steps });

    const stream = anthropic.messages.stream({
      model: "claude-x",
      max_tokens: 50,
      messages: [{ role: "user", content: "Hi" }],
    });
    let stepsSentWhenFirstSeen = -1;
    stream.on("text", () => {
      if (stepsSentWhenFirstSeen !== -1) return;
      stepsSentWhenFirstSeen = upstream.sent.length;
      clientSawFirst.resolve();
    });
    const final = await stream.finalMessage();
    expect(stepsSentWhenFirstSeen).toBe(secondText);
    expect(final.content).toEqual([{ type: "text", text: "Selamat pagi" }]);
    expect(final.stop_reason).toBe("end_turn");
    expect(final.usage).toMatchObject({ input_tokens: 8, output_tokens: 3 });
    // message_start names the model the client asked for, never the upstream's.
    expect(final.model).toBe("claude-x");
    expect(upstream.last.body).toMatchObject({ model: "claude-upstream", stream: true });
  });

  describe("an upstream that reports no usage", () => {
    const sentTokens = () => requestTextTokens(upstream.last.body);
    // Usage objects kept (the SDK needs them in a stream) but every count zero.
    const zeroedUsage = (value: unknown, inUsage = false): unknown => {
      if (Array.isArray(value)) return value.map((v) => zeroedUsage(v, inUsage));
      if (typeof value === "number" && inUsage) return 0;
      if (typeof value !== "object" || value === null) return value;
      return Object.fromEntries(
        Object.entries(value).map(([key, v]) => [key, zeroedUsage(v, inUsage || key === "usage")]),
      );
    };

    it("bills a JSON answer by an estimate from the request sent and the blocks returned", async () => {
      const reply = anthropicJson("Twenty characters!!!", {
        toolUses: [{ id: "toolu_1", name: "lookup", input: { q: "x" } }],
      });
      upstream.queue(zeroedUsage(reply) as typeof reply);
      await anthropic.messages.create({
        model: "claude-x",
        max_tokens: 50,
        messages: [{ role: "user", content: "Hi" }],
      });
      const output = Math.ceil(
        `Twenty characters!!!lookup${JSON.stringify({ q: "x" })}`.length / 4,
      );
      expect(await lastLogged(gw)).toMatchObject({
        input_tokens: sentTokens(),
        output_tokens: output,
      });
      expect((await lastLogged(gw)).cost_idr).toBeGreaterThan(0);
    });

    it("bills a stream by what it delivered, for both client styles", async () => {
      const steps = zeroedUsage(anthropicStreamSteps(["one", " two", " three"])) as ReturnType<
        typeof anthropicStreamSteps
      >;
      upstream.queue({ kind: "sse", steps });
      const message = await anthropic.messages
        .stream({ model: "claude-x", max_tokens: 50, messages: [{ role: "user", content: "Hi" }] })
        .finalMessage();
      expect(message.content).toMatchObject([{ type: "text", text: "one two three" }]);
      expect(await lastLogged(gw)).toMatchObject({
        input_tokens: sentTokens(),
        output_tokens: deliveredTokens(["one", " two", " three"]),
      });

      upstream.queue({ kind: "sse", steps });
      const chat = await openai.chat.completions
        .stream({ model: "claude-x", messages: [{ role: "user", content: "Hi" }] })
        .finalChatCompletion();
      expect(chat.choices[0].message.content).toBe("one two three");
      expect(await lastLogged(gw)).toMatchObject({
        input_tokens: sentTokens(),
        output_tokens: deliveredTokens(["one", " two", " three"]),
      });
    });
  });

  it("ends a stream that breaks after it started with event: error and no message_stop", async () => {
    const steps = anthropicStreamSteps(["partial"]).slice(0, 4);
    upstream.queue({ kind: "sse", steps, end: "destroy" });
    const res = await post(gw, "/v1/messages", {
      model: "claude-x",
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

describe("anthropic wire: a client that leaves after a tool_use block's name", () => {
  it("is charged for the name it was sent, not only the 1 output token message_start reports", async () => {
    const name = "look_up_the_current_weather_in_a_city_by_name";
    const never = deferred();
    const steps = anthropicToolStreamSteps([
      { id: "toolu_w", name, jsonPieces: ['{"city":"Oslo"}'] },
    ]);
    // message_start and the tool_use block's start, then nothing until the client has gone.
    steps[2] = { ...steps[2], gate: never.promise };
    upstream.queue({ kind: "sse", steps });
    const abort = new AbortController();
    const { data: stream, response } = await anthropic.messages
      .create(
        {
          model: "claude-x",
          max_tokens: 100,
          stream: true,
          messages: [{ role: "user", content: "weather in Oslo?" }],
          tools: [
            { name, input_schema: { type: "object", properties: { city: { type: "string" } } } },
          ],
        },
        { signal: abort.signal },
      )
      .withResponse();
    const id = response.headers.get("x-request-id") ?? "";
    for await (const event of stream) {
      if (event.type === "content_block_start" && event.content_block.type === "tool_use") break;
    }
    abort.abort();
    const row = await loggedAs(gw.services.store, "acct", id, "client_closed");
    never.resolve();
    expect(row).toMatchObject({ error_code: "client_closed" });
    expect(row?.output_tokens).toBeGreaterThanOrEqual(deliveredTokens([name]));
  });
});

describe("anthropic wire: failures before the first event", () => {
  it("answers 503 api_error when the first SSE event is an overloaded error", async () => {
    upstream.queue({
      kind: "sse",
      steps: [
        {
          event: "error",
          data: {
            type: "error",
            error: { type: "overloaded_error", message: "Overloaded PROVIDER-TEXT" },
          },
        },
      ],
    });
    const res = await post(gw, "/v1/messages", {
      model: "claude-x",
      max_tokens: 10,
      stream: true,
      messages: [{ role: "user", content: "x" }],
    });
    expect(res.status).toBe(503);
    const text = await res.text();
    expect(text).not.toContain("PROVIDER-TEXT");
    expect(JSON.parse(text)).toMatchObject({ type: "error", error: { type: "api_error" } });
  });

  it("answers 503 upstream_error to a chat client when the upstream closes right after its headers", async () => {
    upstream.queue({ kind: "sse", steps: [], end: "destroy" });
    const res = await post(gw, "/v1/chat/completions", {
      model: "claude-x",
      stream: true,
      messages: [{ role: "user", content: "x" }],
    });
    expect(res.status).toBe(503);
    expect(await res.json()).toMatchObject({ error: { code: "upstream_error" } });
  });
});

describe("upstream errors in the messages style", () => {
  const secretText = "PROVIDER-INTERNAL-DETAIL-abc";

  async function errorFor(reply: Reply, model = "claude-x") {
    upstream.queue(reply);
    const res = await post(gw, "/v1/messages", {
      model,
      max_tokens: 10,
      messages: [{ role: "user", content: "x" }],
    });
    const text = await res.text();
    expect(text).not.toContain(secretText);
    expect(text).not.toContain(POOL_KEY);
    const body = JSON.parse(text) as { type: string; error: Record<string, unknown> };
    expect(body.type).toBe("error");
    expect(body.error).not.toHaveProperty("code");
    return { status: res.status, retryAfter: res.headers.get("retry-after"), error: body.error };
  }

  it("maps a prompt-too-long 400 to 400 invalid_request_error with service text", async () => {
    const r = await errorFor(
      anthropicError(
        400,
        "invalid_request_error",
        `prompt is too long: 210000 tokens > 200000 maximum ${secretText}`,
      ),
    );
    expect(r.status).toBe(400);
    expect(r.error).toEqual({
      type: "invalid_request_error",
      message:
        "The request exceeds the model's maximum context window. Send a shorter conversation (or ask for less output), or choose a model with a larger context window from GET /v1/models.",
    });
  });

  it("maps a 404 not_found_error to 404 not_found_error", async () => {
    const r = await errorFor(
      anthropicError(404, "not_found_error", `model: claude-upstream ${secretText}`),
    );
    expect(r.status).toBe(404);
    expect(r.error.type).toBe("not_found_error");
  });

  it.each([451, 402, 409])(
    "turns an upstream %i into 400 invalid_request_error",
    async (status) => {
      const r = await errorFor(anthropicError(status, "some_error", secretText));
      expect(r.status).toBe(400);
      expect(r.error.type).toBe("invalid_request_error");
    },
  );

  it.each([
    [413, "invalid_request_error"],
    [403, "permission_error"],
    [422, "invalid_request_error"],
  ])("keeps an upstream %i (%s)", async (status, type) => {
    const r = await errorFor(anthropicError(status, "request_too_large", secretText));
    expect(r.status).toBe(status);
    expect(r.error.type).toBe(type);
  });

  it("maps an upstream 429 to 429 rate_limit_error without Retry-After", async () => {
    const r = await errorFor(
      { ...anthropicError(429, "rate_limit_error", secretText), headers: { "retry-after": "9" } },
      "claude-rl",
    );
    expect(r.status).toBe(429);
    expect(r.error.type).toBe("rate_limit_error");
    expect(r.retryAfter).toBeNull();
  });

  it.each([500, 502, 529])("maps an upstream %i to 503 api_error", async (status) => {
    const r = await errorFor(anthropicError(status, "overloaded_error", secretText));
    expect(r.status).toBe(503);
    expect(r.error.type).toBe("api_error");
  });

  it("maps a hanging upstream to 503 api_error after timeout_ms", async () => {
    const r = await errorFor({ kind: "hang" }, "claude-slow");
    expect(r.status).toBe(503);
    expect(r.error.type).toBe("api_error");
  });

  it("gives the chat style the same status and its own codes for an anthropic-wire rejection", async () => {
    upstream.queue(
      anthropicError(400, "invalid_request_error", `prompt is too long ${secretText}`),
    );
    const res = await post(gw, "/v1/chat/completions", {
      model: "claude-x",
      messages: [{ role: "user", content: "x" }],
    });
    expect(res.status).toBe(400);
    const text = await res.text();
    expect(text).not.toContain(secretText);
    expect(JSON.parse(text)).toMatchObject({
      error: { type: "invalid_request_error", code: "context_length_exceeded" },
    });
  });
});

describe("chat client -> anthropic wire (translation)", () => {
  const weatherTool: OpenAI.ChatCompletionTool = {
    type: "function",
    function: {
      name: "get_weather",
      description: "Current weather for a city",
      parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    },
  };

  it("sends only the tools an allowed_tools choice allows, its mode as auto or any (chat and Responses)", async () => {
    const named = (name: string): OpenAI.ChatCompletionTool => ({
      type: "function",
      function: { name, parameters: { type: "object", properties: {} } },
    });
    for (const mode of ["auto", "required"] as const) {
      upstream.queue(anthropicJson("ok"));
      await openai.chat.completions.create({
        model: "claude-x",
        max_tokens: 100,
        messages: [{ role: "user", content: "Which tool?" }],
        tools: [weatherTool, named("book_flight"), named("delete_account")],
        tool_choice: {
          type: "allowed_tools",
          allowed_tools: {
            mode,
            tools: [
              { type: "function", function: { name: "get_weather" } },
              { type: "function", function: { name: "book_flight" } },
            ],
          },
        },
      });
      expect(upstream.refused).toEqual([]);
      expect((upstream.last.body.tools as { name: string }[]).map((t) => t.name)).toEqual([
        "get_weather",
        "book_flight",
      ]);
      expect(upstream.last.body.tool_choice).toEqual({ type: mode === "auto" ? "auto" : "any" });
    }
    upstream.queue(anthropicJson("ok"));
    await openai.responses.create({
      model: "claude-x",
      input: "Which tool?",
      store: false,
      tools: ["get_weather", "book_flight"].map((name) => ({
        type: "function" as const,
        name,
        parameters: { type: "object", properties: {} },
        strict: false,
      })),
      tool_choice: {
        type: "allowed_tools",
        mode: "required",
        tools: [{ type: "function", name: "book_flight" }],
      },
    });
    expect(upstream.refused).toEqual([]);
    expect((upstream.last.body.tools as { name: string }[]).map((t) => t.name)).toEqual([
      "book_flight",
    ]);
    expect(upstream.last.body.tool_choice).toEqual({ type: "any" });
  });

  it("translates system, multi-turn, data-URL images and tools into messages, and tool_use back", async () => {
    upstream.queue(
      anthropicJson("Checking.", {
        toolUses: [{ id: "toolu_1", name: "get_weather", input: { city: "Jakarta" } }],
        usage: [50, 10],
      }),
    );
    const completion = await openai.chat.completions.create({
      model: "claude-x",
      max_tokens: 300,
      tools: [weatherTool],
      messages: [
        { role: "system", content: "You are a weather bot." },
        { role: "user", content: "Hi" },
        { role: "assistant", content: "Hello!" },
        {
          role: "user",
          content: [
            { type: "text", text: "Weather where this was taken?" },
            { type: "image_url", image_url: { url: `data:image/png;base64,${PNG_B64}` } },
          ],
        },
      ],
    });

    const sent = upstream.last.body;
    expect(upstream.last.path).toBe("/v1/messages");
    expect(upstream.last.headers["x-api-key"]).toBe(POOL_KEY);
    expect(sent.model).toBe("claude-upstream");
    expect(sent.max_tokens).toBe(300);
    expect(sent.system).toBe("You are a weather bot.");
    expect(sent.messages).toEqual([
      { role: "user", content: [{ type: "text", text: "Hi" }] },
      { role: "assistant", content: [{ type: "text", text: "Hello!" }] },
      {
        role: "user",
        content: [
          { type: "text", text: "Weather where this was taken?" },
          { type: "image", source: { type: "base64", media_type: "image/png", data: PNG_B64 } },
        ],
      },
    ]);
    expect(sent.tools).toEqual([
      {
        name: "get_weather",
        description: "Current weather for a city",
        input_schema: weatherTool.function.parameters,
      },
    ]);

    const choice = completion.choices[0];
    expect(completion.model).toBe("claude-x");
    expect(choice.finish_reason).toBe("tool_calls");
    expect(choice.message.content).toBe("Checking.");
    expect(choice.message.tool_calls).toHaveLength(1);
    const call = choice.message.tool_calls?.[0] as OpenAI.ChatCompletionMessageFunctionToolCall;
    expect(call).toMatchObject({
      id: "toolu_1",
      type: "function",
      function: { name: "get_weather" },
    });
    expect(JSON.parse(call.function.arguments)).toEqual({ city: "Jakarta" });
    expect(completion.usage).toMatchObject({
      prompt_tokens: 50,
      completion_tokens: 10,
      total_tokens: 60,
    });
  });

  it("assembles streamed input_json_delta pieces into tool-call arguments (finalChatCompletion)", async () => {
    upstream.queue({
      kind: "sse",
      steps: anthropicToolStreamSteps(
        [
          { id: "toolu_a", name: "get_weather", jsonPieces: ['{"ci', 'ty": "Bandu', 'ng"}'] },
          { id: "toolu_b", name: "get_weather", jsonPieces: ['{"city":"Medan"}'] },
        ],
        { text: "Two lookups.", usage: [44, 17] },
      ),
    });
    const stream = openai.chat.completions.stream({
      model: "claude-x",
      tools: [weatherTool],
      messages: [{ role: "user", content: "Weather in Bandung and Medan?" }],
      stream_options: { include_usage: true },
    });
    const final = await stream.finalChatCompletion();
    expect(upstream.last.body.stream).toBe(true);
    const choice = final.choices[0];
    expect(choice.finish_reason).toBe("tool_calls");
    expect(choice.message.content).toBe("Two lookups.");
    const calls = (choice.message.tool_calls ??
      []) as OpenAI.ChatCompletionMessageFunctionToolCall[];
    expect(calls.map((c) => [c.id, c.function.name, JSON.parse(c.function.arguments)])).toEqual([
      ["toolu_a", "get_weather", { city: "Bandung" }],
      ["toolu_b", "get_weather", { city: "Medan" }],
    ]);
    expect(final.usage).toMatchObject({ prompt_tokens: 44, completion_tokens: 17 });
  });

  it("maps stop reasons: end_turn -> stop, max_tokens -> length, stop_sequence -> stop", async () => {
    for (const [stop, finish] of [
      ["end_turn", "stop"],
      ["max_tokens", "length"],
      ["stop_sequence", "stop"],
    ]) {
      upstream.queue({ kind: "sse", steps: anthropicStreamSteps(["x"], { stop }) });
      const final = await openai.chat.completions
        .stream({ model: "claude-x", messages: [{ role: "user", content: "x" }] })
        .finalChatCompletion();
      expect(final.choices[0].finish_reason).toBe(finish);
      upstream.queue(anthropicJson("x", { stop }));
      const json = await openai.chat.completions.create({
        model: "claude-x",
        messages: [{ role: "user", content: "x" }],
      });
      expect(json.choices[0].finish_reason).toBe(finish);
    }
  });

  it("runs a full coding-agent tool loop: tool call, tool result, final answer", async () => {
    const tools: OpenAI.ChatCompletionTool[] = [
      {
        type: "function",
        function: {
          name: "run_tests",
          description: "Run the test suite",
          parameters: { type: "object", properties: { filter: { type: "string" } } },
        },
      },
    ];
    const history: OpenAI.ChatCompletionMessageParam[] = [
      { role: "system", content: "You are a coding agent." },
      { role: "user", content: "Are the tests green?" },
    ];
    upstream.queue({
      kind: "sse",
      steps: anthropicToolStreamSteps([
        { id: "toolu_rt", name: "run_tests", jsonPieces: ['{"filter":', '"core"}'] },
      ]),
    });
    const first = await openai.chat.completions
      .stream({ model: "claude-x", tools, messages: history })
      .finalChatCompletion();
    const assistant = first.choices[0].message;
    expect(first.choices[0].finish_reason).toBe("tool_calls");
    const call = assistant.tool_calls?.[0] as OpenAI.ChatCompletionMessageFunctionToolCall;
    expect(call.id).toBe("toolu_rt");

    history.push({
      role: "assistant",
      content: assistant.content,
      tool_calls: assistant.tool_calls,
    });
    history.push({ role: "tool", tool_call_id: call.id, content: "37 passed" });
    upstream.queue({ kind: "sse", steps: anthropicStreamSteps(["All ", "37 pass."]) });
    const second = await openai.chat.completions
      .stream({ model: "claude-x", tools, messages: history })
      .finalChatCompletion();

    expect(second.choices[0].message.content).toBe("All 37 pass.");
    expect(second.choices[0].finish_reason).toBe("stop");
    const sent = upstream.last.body;
    expect(sent.system).toBe("You are a coding agent.");
    expect(sent.messages).toEqual([
      { role: "user", content: [{ type: "text", text: "Are the tests green?" }] },
      {
        role: "assistant",
        content: [
          { type: "tool_use", id: "toolu_rt", name: "run_tests", input: { filter: "core" } },
        ],
      },
      {
        role: "user",
        content: [expect.objectContaining({ type: "tool_result", tool_use_id: "toolu_rt" })],
      },
    ]);
    const result = (sent.messages as { content: { content: unknown }[] }[])[2].content[0].content;
    expect(JSON.stringify(result)).toContain("37 passed");
  });

  it("ends a broken stream with a data: error chunk and no [DONE]", async () => {
    upstream.queue({
      kind: "sse",
      steps: anthropicStreamSteps(["partial"]).slice(0, 4),
      end: "destroy",
    });
    const res = await post(gw, "/v1/chat/completions", {
      model: "claude-x",
      stream: true,
      messages: [{ role: "user", content: "x" }],
    });
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).toContain("partial");
    const last =
      text
        .trim()
        .split("\n")
        .filter((l) => l.startsWith("data: "))
        .at(-1) ?? "";
    expect(JSON.parse(last.slice(6))).toMatchObject({ error: { code: "upstream_error" } });
    expect(text).not.toContain("[DONE]");
  });

  it("turns an upstream error event mid-stream into a client error, not a clean end", async () => {
    const steps = anthropicStreamSteps(["partial"]).slice(0, 4);
    steps.push({
      event: "error",
      data: { type: "error", error: { type: "overloaded_error", message: "Overloaded" } },
    });
    upstream.queue({ kind: "sse", steps });
    const res = await post(gw, "/v1/messages", {
      model: "claude-x",
      max_tokens: 10,
      stream: true,
      messages: [{ role: "user", content: "x" }],
    });
    const text = await res.text();
    expect(text).toContain("event: error");
    expect(text).not.toContain("message_stop");
  });
});

describe("chat client -> anthropic wire: what the Messages API cannot carry", () => {
  it("refuses n > 1 with 400 bad_request naming n, sends nothing and charges nothing", async () => {
    const before = (await quota(gw)).balance_idr;
    const err = await openai.chat.completions
      .create({ model: "claude-x", n: 2, messages: [{ role: "user", content: "hi" }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    const apiError = err as InstanceType<typeof OpenAI.BadRequestError>;
    expect(apiError.status).toBe(400);
    expect(apiError.code).toBe("bad_request");
    expect(apiError.message).toContain("`n` greater than 1");
    expect(upstream.requests).toHaveLength(0);
    expect((await quota(gw)).balance_idr).toBe(before);
    expect(await lastLogged(gw)).toMatchObject({ state: "failed", cost_idr: 0 });
  });

  it("refuses audio input and audio output instead of dropping them silently", async () => {
    const audio = await post(gw, "/v1/chat/completions", {
      model: "claude-x",
      messages: [
        {
          role: "user",
          content: [
            { type: "text", text: "What is said here?" },
            { type: "input_audio", input_audio: { data: "UklGRg==", format: "wav" } },
          ],
        },
      ],
    });
    expect(audio.status).toBe(400);
    const body = (await audio.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("bad_request");
    expect(body.error.message).toContain("Audio input");

    const spoken = await post(gw, "/v1/chat/completions", {
      model: "claude-x",
      modalities: ["text", "audio"],
      audio: { voice: "alloy", format: "wav" },
      messages: [{ role: "user", content: "Say hi" }],
    });
    expect(spoken.status).toBe(400);
    expect(((await spoken.json()) as { error: { message: string } }).error.message).toContain(
      "Audio output",
    );
    expect(upstream.requests).toHaveLength(0);
  });

  it("refuses a json_object response format, which has no JSON schema to send, on chat and responses", async () => {
    const before = (await quota(gw)).balance_idr;
    const err = await openai.chat.completions
      .create({
        model: "claude-x",
        response_format: { type: "json_object" },
        messages: [{ role: "user", content: "Answer in JSON." }],
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    const apiError = err as InstanceType<typeof OpenAI.BadRequestError>;
    expect(apiError.code).toBe("bad_request");
    expect(apiError.message).toContain("`json_object` is not available");
    expect(apiError.message).toContain("json_schema");

    const responses = await openai.responses
      .create({
        model: "claude-x",
        input: "Answer in JSON.",
        text: { format: { type: "json_object" } },
      })
      .catch((e: unknown) => e);
    expect(responses).toBeInstanceOf(OpenAI.BadRequestError);
    expect((responses as Error).message).toContain("`json_object` is not available");
    expect(upstream.requests).toHaveLength(0);
    expect((await quota(gw)).balance_idr).toBe(before);
  });

  it("still sends a json_schema response format as output_config", async () => {
    upstream.queue(anthropicJson('{"ok":true}'));
    await openai.chat.completions.create({
      model: "claude-x",
      response_format: {
        type: "json_schema",
        json_schema: {
          name: "answer",
          schema: { type: "object", properties: { ok: { type: "boolean" } } },
        },
      },
      messages: [{ role: "user", content: "Answer in JSON." }],
    });
    expect(upstream.last.body.output_config).toMatchObject({ format: { type: "json_schema" } });
  });
});

describe("output limits above the model's maximum output", () => {
  it("clamps a translated request's limit to max_output_tokens, and holds only that much", async () => {
    upstream.queue(anthropicJson("short"));
    const thin = new OpenAI({ apiKey: THIN_KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    const completion = await thin.chat.completions.create({
      model: "claude-x",
      max_completion_tokens: 128_000,
      messages: [{ role: "user", content: "Hi." }],
    });
    expect(completion.choices[0].message.content).toBe("short");
    expect(upstream.last.body.max_tokens).toBe(64_000);
  });

  it("gives a chat request with no limit the model's max_output_tokens", async () => {
    upstream.queue(anthropicJson("ok"));
    await openai.chat.completions.create({
      model: "claude-x",
      messages: [{ role: "user", content: "Hi." }],
    });
    expect(upstream.last.body.max_tokens).toBe(64_000);
  });

  it("forwards a same-wire body as written, and says why when the provider refuses its limit", async () => {
    const err = await anthropic.messages
      .create({
        model: "claude-x",
        max_tokens: 128_000,
        messages: [{ role: "user", content: "Hi." }],
      })
      .catch((e: unknown) => e);
    expect(upstream.last.body.max_tokens).toBe(128_000);
    expect(err).toBeInstanceOf(Anthropic.BadRequestError);
    const apiError = err as InstanceType<typeof Anthropic.BadRequestError>;
    expect(apiError.status).toBe(400);
    expect(apiError.error).toEqual({
      type: "error",
      error: {
        type: "invalid_request_error",
        message: "max_tokens 128000 exceeds this model's maximum output of 64000 tokens",
      },
    });

    // A refusal with the limit within the maximum keeps the fixed text.
    upstream.queue(anthropicError(400, "invalid_request_error", "something else"));
    const other = await anthropic.messages
      .create({ model: "claude-x", max_tokens: 100, messages: [{ role: "user", content: "Hi." }] })
      .catch((e: unknown) => e);
    expect((other as InstanceType<typeof Anthropic.BadRequestError>).message).toContain(
      "The provider rejected the request as invalid.",
    );
  });
});

describe("system items inside messages refused by an older Claude model, same wire", () => {
  // Claude Code's test for "the platform refuses system messages" on a 400, as read in the bundle
  // of @anthropic-ai/claude-code 2.1.332 (and 2.1.197): it then resends without them.
  const claudeCodeFallsBack = (message: string) =>
    message.includes("not supported") && /role .{0,2}system/i.test(message);

  it("says in Claude Code's words that role system is not supported, keeping 400 invalid_request_error", async () => {
    const messages = [
      { role: "user", content: "Hi." },
      { role: "assistant", content: "Hello." },
      { role: "system", content: "The user is in a hurry." },
      { role: "user", content: "Summarise." },
    ] as unknown as Anthropic.MessageParam[];
    const err = await anthropic.messages
      .create({ model: "claude-x", max_tokens: 100, messages })
      .catch((e: unknown) => e);
    // The provider refused it, with its own words.
    expect(upstream.refused.at(-1)?.status).toBe(400);
    expect(err).toBeInstanceOf(Anthropic.BadRequestError);
    const apiError = err as InstanceType<typeof Anthropic.BadRequestError>;
    expect(apiError.status).toBe(400);
    const body = apiError.error as { error: { type: string; message: string } };
    expect(body.error.type).toBe("invalid_request_error");
    expect(body.error.message).not.toContain("Input should be");
    expect(claudeCodeFallsBack(apiError.message)).toBe(true);

    // Claude Code's fallback: the same turn without the system items goes through.
    upstream.queue(anthropicJson("Done."));
    const retried = await anthropic.messages.create({
      model: "claude-x",
      max_tokens: 100,
      messages: messages.filter((m) => (m.role as string) !== "system"),
    });
    expect(retried.content).toEqual([{ type: "text", text: "Done." }]);
  });

  it("names both likely reasons when the refused body also asked for more than the model's maximum output", async () => {
    const messages = [
      { role: "user", content: "Hi." },
      { role: "system", content: "Be brief." },
    ] as unknown as Anthropic.MessageParam[];
    const err = await anthropic.messages
      .create({ model: "claude-x", max_tokens: 128_000, messages })
      .catch((e: unknown) => e);
    const apiError = err as InstanceType<typeof Anthropic.BadRequestError>;
    expect(apiError.status).toBe(400);
    expect(claudeCodeFallsBack(apiError.message)).toBe(true);
    expect(apiError.message).toContain(
      "max_tokens 128000 exceeds this model's maximum output of 64000 tokens",
    );
  });

  it("keeps the plain fixed text for a refusal of a body with no system items", async () => {
    upstream.queue(anthropicError(400, "invalid_request_error", "something else"));
    const err = await anthropic.messages
      .create({ model: "claude-x", max_tokens: 100, messages: [{ role: "user", content: "Hi." }] })
      .catch((e: unknown) => e);
    const apiError = err as InstanceType<typeof Anthropic.BadRequestError>;
    expect(apiError.status).toBe(400);
    expect(claudeCodeFallsBack(apiError.message)).toBe(false);
  });
});

describe("structured outputs toward an anthropic-wire model", () => {
  // What the OpenAI Agents SDK sends for an output type with a bounded integer
  // (zod `z.object({ city: z.string(), score: z.number().int().min(1).max(10) })`).
  const rating = {
    $schema: "https://json-schema.org/draft/2020-12/schema",
    type: "object",
    properties: {
      city: { type: "string" },
      score: { type: "integer", minimum: 1, maximum: 10 },
    },
    required: ["city", "score"],
    additionalProperties: false,
  };
  type SentSchema = { properties: Record<string, unknown>; additionalProperties: unknown };
  const sentSchema = () =>
    (upstream.last.body.output_config as { format: { schema: SentSchema } }).format.schema;

  it("sends a Responses text.format schema as the Anthropic SDK would: bounds moved into the description", async () => {
    upstream.queue(anthropicJson('{"city":"Oslo","score":7}'));
    const response = await openai.responses.create({
      model: "claude-x",
      input: "Rate Oslo.",
      text: { format: { type: "json_schema", name: "rating", schema: rating, strict: true } },
    });
    expect(upstream.refused).toEqual([]);
    expect(JSON.parse(response.output_text)).toEqual({ city: "Oslo", score: 7 });
    expect(sentSchema().properties.score).toEqual({
      type: "integer",
      description: "{minimum: 1, maximum: 10}",
    });
  });

  it("does the same for a chat response_format, closing every object", async () => {
    upstream.queue(anthropicJson('{"city":"Oslo","score":7}'));
    const completion = await openai.chat.completions.create({
      model: "claude-x",
      messages: [{ role: "user", content: "Rate Oslo." }],
      response_format: {
        type: "json_schema",
        json_schema: {
          name: "rating",
          strict: true,
          schema: { ...rating, additionalProperties: undefined },
        },
      },
    });
    expect(upstream.refused).toEqual([]);
    expect(JSON.parse(completion.choices[0].message.content ?? "")).toEqual({
      city: "Oslo",
      score: 7,
    });
    expect(sentSchema().additionalProperties).toBe(false);
  });
});

describe("hosted web search toward an anthropic-wire model", () => {
  it("runs a Responses web_search as Anthropic's own web search tool, and answers with its text", async () => {
    upstream.queue({
      kind: "json",
      body: {
        id: "msg_ws",
        type: "message",
        role: "assistant",
        model: "claude-upstream",
        content: [
          {
            type: "server_tool_use",
            id: "srvtoolu_1",
            name: "web_search",
            input: { query: "news" },
          },
          {
            type: "web_search_tool_result",
            tool_use_id: "srvtoolu_1",
            content: [{ type: "web_search_result", url: "https://example.com/a", title: "A" }],
          },
          {
            type: "text",
            text: "Rain is expected.",
            citations: [
              {
                type: "web_search_result_location",
                url: "https://example.com/a",
                title: "A",
                cited_text: "Rain tomorrow",
                encrypted_index: "x",
              },
            ],
          },
        ],
        stop_reason: "end_turn",
        stop_sequence: null,
        usage: { input_tokens: 40, output_tokens: 9, server_tool_use: { web_search_requests: 1 } },
      },
    });
    const res = await post(gw, "/v1/responses", {
      model: "claude-x",
      input: "Weather news?",
      tools: [{ type: "web_search" }, { type: "function", name: "lookup", parameters: {} }],
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-gateway-tools-omitted")).toBeNull();
    expect(upstream.last.body.tools).toEqual([
      { name: "lookup", input_schema: { type: "object", properties: {} } },
      { type: "web_search_20250305", name: "web_search" },
    ]);
    const body = (await res.json()) as {
      output: { type: string; content?: { text: string; annotations: unknown[] }[] }[];
    };
    const message = body.output.find((item) => item.type === "message");
    expect(message?.content?.[0].text).toBe("Rain is expected.");
    // The sources the text cites, as the Responses API lists a web search's.
    expect(message?.content?.[0].annotations).toEqual([
      {
        type: "url_citation",
        url: "https://example.com/a",
        title: "A",
        start_index: 0,
        end_index: "Rain is expected.".length,
      },
    ]);
  });

  /** A streamed web search answer: the search, its results, plain text, then cited text. */
  const searchStream = () => {
    const [start, , , , , ...end] = anthropicStreamSteps(["x"], { usage: [40, 9] });
    const block = (index: number, content_block: object) => ({
      event: "content_block_start",
      data: { type: "content_block_start", index, content_block },
    });
    const delta = (index: number, d: object) => ({
      event: "content_block_delta",
      data: { type: "content_block_delta", index, delta: d },
    });
    const stop = (index: number) => ({
      event: "content_block_stop",
      data: { type: "content_block_stop", index },
    });
    const citation = {
      type: "web_search_result_location",
      url: "https://example.com/a",
      title: "A",
      cited_text: "Rain tomorrow",
      encrypted_index: "x",
    };
    return [
      start,
      block(0, { type: "server_tool_use", id: "srvtoolu_1", name: "web_search", input: {} }),
      delta(0, { type: "input_json_delta", partial_json: '{"query":"news"}' }),
      stop(0),
      block(1, {
        type: "web_search_tool_result",
        tool_use_id: "srvtoolu_1",
        content: [{ type: "web_search_result", url: "https://example.com/a", title: "A" }],
      }),
      stop(1),
      block(2, { type: "text", text: "" }),
      delta(2, { type: "text_delta", text: "Today: " }),
      stop(2),
      block(3, { type: "text", text: "", citations: [] }),
      delta(3, { type: "citations_delta", citation }),
      delta(3, { type: "text_delta", text: "Rain is " }),
      delta(3, { type: "text_delta", text: "expected." }),
      stop(3),
      ...end,
    ];
  };
  const cited = { url: "https://example.com/a", title: "A", start_index: 7, end_index: 24 };

  it("streams a Responses web search's sources: an annotation.added event, and annotations on the completed text", async () => {
    upstream.queue({ kind: "sse", steps: searchStream() });
    const stream = openai.responses.stream({
      model: "claude-x",
      input: "Weather news?",
      tools: [{ type: "web_search" }],
    });
    const added: unknown[] = [];
    for await (const event of stream) {
      if (event.type === "response.output_text.annotation.added") added.push(event);
    }
    expect(upstream.last.body.stream).toBe(true);
    expect(added).toEqual([
      expect.objectContaining({
        annotation_index: 0,
        content_index: 0,
        annotation: { type: "url_citation", ...cited },
      }),
    ]);
    const response = await stream.finalResponse();
    expect(response.output_text).toBe("Today: Rain is expected.");
    const message = response.output.find((item) => item.type === "message");
    expect(message?.type === "message" && message.content[0]).toMatchObject({
      type: "output_text",
      annotations: [{ type: "url_citation", ...cited }],
    });
  });

  it("streams a chat web search's sources as the message's url_citation annotations", async () => {
    upstream.queue({ kind: "sse", steps: searchStream() });
    const stream = openai.chat.completions.stream({
      model: "claude-x",
      messages: [{ role: "user", content: "Weather news?" }],
      web_search_options: {},
    });
    const completion = await stream.finalChatCompletion();
    expect(completion.choices[0].message.content).toBe("Today: Rain is expected.");
    expect(completion.choices[0].message.annotations).toEqual([
      { type: "url_citation", url_citation: cited },
    ]);
  });

  it("leaves out a hosted tool Anthropic has no equivalent for, naming it", async () => {
    upstream.queue(anthropicJson("ok"));
    const res = await post(gw, "/v1/responses", {
      model: "claude-x",
      input: "Find it in my files.",
      tools: [{ type: "file_search", vector_store_ids: ["vs_1"] }, { type: "web_search" }],
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-gateway-tools-omitted")).toBe("file_search");
    expect(upstream.last.body.tools).toEqual([{ type: "web_search_20250305", name: "web_search" }]);
  });

  it("leaves out a chat request's custom (free-form) tool, naming it in the header and the log", async () => {
    upstream.queue(anthropicJson("ok"));
    const res = await post(gw, "/v1/chat/completions", {
      model: "claude-x",
      messages: [{ role: "user", content: "Patch the file." }],
      tools: [
        { type: "custom", custom: { name: "apply_patch", description: "A unified diff." } },
        { type: "function", function: { name: "read_file", parameters: { type: "object" } } },
      ],
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-gateway-tools-omitted")).toBe("custom");
    expect(upstream.last.body.tools).toEqual([
      { name: "read_file", input_schema: { type: "object" } },
    ]);
    expect(await lastLogged(gw)).toMatchObject({ tools_omitted: ["custom"] });
  });
});

describe("chat client -> anthropic wire: reasoning_effort becomes extended thinking", () => {
  const ask = (extra: Record<string, unknown>) =>
    openai.chat.completions.create({
      model: "claude-x",
      messages: [{ role: "user", content: "Think about it." }],
      ...extra,
    } as OpenAI.ChatCompletionCreateParamsNonStreaming);

  it("gives thinking a share of the client's own output limit and drops sampling settings", async () => {
    upstream.queue(anthropicJson("42"));
    await ask({ reasoning_effort: "high", max_completion_tokens: 10_000, temperature: 0.2 });
    expect(upstream.last.body).toMatchObject({
      max_tokens: 10_000,
      thinking: { type: "enabled", budget_tokens: 8_000 },
    });
    expect(upstream.last.body).not.toHaveProperty("temperature");

    upstream.queue(anthropicJson("42"));
    await ask({ reasoning_effort: "medium" });
    // No limit given: the model's max_output_tokens, half of it to thinking.
    expect(upstream.last.body).toMatchObject({
      max_tokens: 64_000,
      thinking: { type: "enabled", budget_tokens: 32_000 },
    });
  });

  it("leaves thinking off where Anthropic would refuse it", async () => {
    // Under Anthropic's minimum budget of 1024 tokens.
    upstream.queue(anthropicJson("42"));
    await ask({ reasoning_effort: "low", max_tokens: 2_000, temperature: 0.5 });
    expect(upstream.last.body).not.toHaveProperty("thinking");
    expect(upstream.last.body.temperature).toBe(0.5);

    // A forced tool.
    const tool: OpenAI.ChatCompletionTool = {
      type: "function",
      function: { name: "finish", parameters: { type: "object", properties: {} } },
    };
    upstream.queue(
      anthropicJson(null, { toolUses: [{ id: "toolu_f", name: "finish", input: {} }] }),
    );
    await ask({ reasoning_effort: "high", tools: [tool], tool_choice: "required" });
    expect(upstream.last.body).not.toHaveProperty("thinking");
    expect(upstream.last.body.tool_choice).toEqual({ type: "any" });

    // The middle of a tool loop: the earlier tool call has no signed thinking block to send back.
    upstream.queue(anthropicJson("done"));
    await openai.chat.completions.create({
      model: "claude-x",
      reasoning_effort: "high",
      tools: [tool],
      messages: [
        { role: "user", content: "Go." },
        {
          role: "assistant",
          content: null,
          tool_calls: [
            { id: "toolu_f", type: "function", function: { name: "finish", arguments: "{}" } },
          ],
        },
        { role: "tool", tool_call_id: "toolu_f", content: "ok" },
      ],
    });
    expect(upstream.last.body).not.toHaveProperty("thinking");
  });

  it("maps a responses-style reasoning effort the same way", async () => {
    upstream.queue(anthropicJson("42"));
    const res = await post(gw, "/v1/responses", {
      model: "claude-x",
      input: "Think.",
      reasoning: { effort: "high" },
      max_output_tokens: 5_000,
    });
    expect(res.status).toBe(200);
    expect(upstream.last.body).toMatchObject({
      max_tokens: 5_000,
      thinking: { type: "enabled", budget_tokens: 4_000 },
    });
  });
});

describe("chat client -> anthropic wire: thinking through a tool loop", () => {
  const tools: OpenAI.ChatCompletionTool[] = [
    {
      type: "function",
      function: {
        name: "get_weather",
        parameters: { type: "object", properties: { city: { type: "string" } } },
      },
    },
  ];
  const thinking = {
    text: "The user wants weather; call the tool.",
    signature: "sig-Eq0KCkYIBxgC",
  };
  const signedBlock = { type: "thinking", thinking: thinking.text, signature: thinking.signature };
  const detail = {
    type: "reasoning.text",
    text: thinking.text,
    signature: thinking.signature,
    format: "anthropic-claude-v1",
    index: 0,
  };

  /** The client sends the assistant turn back as it got it (the usual agent loop). */
  async function secondTurn(assistant: OpenAI.ChatCompletionMessage, callId: string) {
    upstream.queue(anthropicJson("Sunny, 31°C."));
    const messages: OpenAI.ChatCompletionMessageParam[] = [
      { role: "user", content: "Weather in Jakarta?" },
      assistant as OpenAI.ChatCompletionAssistantMessageParam,
      { role: "tool", tool_call_id: callId, content: "sunny, 31" },
    ];
    const done = await openai.chat.completions.create({
      model: "claude-x",
      reasoning_effort: "medium",
      max_completion_tokens: 8_000,
      tools,
      messages,
    });
    expect(done.choices[0].message.content).toBe("Sunny, 31°C.");
    const sent = upstream.last.body as { thinking: unknown; messages: { content: unknown[] }[] };
    // The signed block leads the assistant turn again, so thinking stays on mid-loop.
    expect(sent.thinking).toEqual({ type: "enabled", budget_tokens: 4_000 });
    expect(sent.messages[1].content[0]).toEqual(signedBlock);
    expect(sent.messages[1].content[1]).toMatchObject({ type: "tool_use", id: callId });
  }

  it("returns signed thinking as reasoning_details and takes it back on the next turn (JSON)", async () => {
    upstream.queue(
      anthropicJson(null, {
        thinking,
        toolUses: [{ id: "toolu_w1", name: "get_weather", input: { city: "Jakarta" } }],
      }),
    );
    const first = await openai.chat.completions.create({
      model: "claude-x",
      reasoning_effort: "medium",
      max_completion_tokens: 8_000,
      tools,
      messages: [{ role: "user", content: "Weather in Jakarta?" }],
    });
    const message = first.choices[0].message as OpenAI.ChatCompletionMessage & {
      reasoning_content?: string;
      reasoning_details?: unknown[];
    };
    expect(message.reasoning_content).toBe(thinking.text);
    expect(message.reasoning_details).toEqual([detail]);
    await secondTurn(message, "toolu_w1");
  });

  it("streams the signed block whole once its signature is complete (finalChatCompletion keeps it)", async () => {
    upstream.queue({
      kind: "sse",
      steps: anthropicToolStreamSteps(
        [{ id: "toolu_w2", name: "get_weather", jsonPieces: ['{"city":', '"Jakarta"}'] }],
        { thinking },
      ),
    });
    const first = await openai.chat.completions
      .stream({
        model: "claude-x",
        reasoning_effort: "medium",
        max_completion_tokens: 8_000,
        tools,
        messages: [{ role: "user", content: "Weather in Jakarta?" }],
      })
      .finalChatCompletion();
    const message = first.choices[0].message as OpenAI.ChatCompletionMessage & {
      reasoning_details?: unknown[];
    };
    expect(message.reasoning_details).toEqual([detail]);
    expect(message.tool_calls?.[0]).toMatchObject({ id: "toolu_w2" });
    await secondTurn(message, "toolu_w2");
  });

  it("drops reasoning it cannot vouch for: unsigned, or signed by another provider", async () => {
    upstream.queue(anthropicJson("ok"));
    await openai.chat.completions.create({
      model: "claude-x",
      messages: [
        { role: "user", content: "Hi" },
        {
          role: "assistant",
          content: "Hello",
          reasoning_details: [
            { type: "reasoning.text", text: "unsigned", format: "anthropic-claude-v1" },
            { type: "reasoning.text", text: "x", signature: "s", format: "openai-responses-v1" },
          ],
        } as OpenAI.ChatCompletionAssistantMessageParam,
        { role: "user", content: "Again" },
      ],
    });
    const sent = upstream.last.body as { messages: { content: unknown[] }[] };
    expect(sent.messages[1].content).toEqual([{ type: "text", text: "Hello" }]);
  });
});
