import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import type { RunnableToolFunctionWithParse } from "openai/lib/RunnableFunction";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { admin, errorOf, lastLogged, quota } from "./support/api.js";
import { type FakeUpstream, fakeUpstream } from "./support/fake-upstream.js";
import {
  baseConfig,
  baseConfigWith,
  chat,
  KEY,
  post,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";
import { streamData } from "./support/sse.js";

let gw: TestGateway;
let openai: OpenAI;
let anthropic: Anthropic;

beforeAll(async () => {
  gw = await testGateway({
    config: baseConfig({
      mock: {
        script: [{ match: { user_text: "from the config" }, reply: { text: "configured" } }],
      },
    }),
    // Short, so a scripted delay shows keepalive comments without a long wait.
    keepaliveMs: 50,
  });
  openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 10_000 });
  anthropic = new Anthropic({ apiKey: KEY, baseURL: gw.url, maxRetries: 0, timeout: 10_000 });
});
afterAll(() => gw.close());
afterEach(() => gw.mock.reset());

/** A weather tool the model calls once, then answers from its result. */
function scriptWeather(): void {
  gw.mock.reply({ tool_result: true }, { text: "It is 12C in Oslo." });
  gw.mock.reply(
    { tools_offered: "get_weather" },
    { tool_calls: [{ name: "get_weather", arguments: { city: "Oslo" } }] },
  );
}

const weatherParameters = {
  type: "object",
  properties: { city: { type: "string" } },
  required: ["city"],
};

describe("scripted tool calls drive an SDK tool loop to its end", () => {
  for (const stream of [false, true]) {
    it(`openai runTools on chat completions (stream: ${stream})`, async () => {
      scriptWeather();
      const calls: unknown[] = [];
      const tool: RunnableToolFunctionWithParse<{ city: string }> = {
        type: "function",
        function: {
          name: "get_weather",
          description: "The weather in a city",
          parameters: weatherParameters,
          parse: JSON.parse,
          function: (args) => {
            calls.push(args);
            return "12C";
          },
        },
      };
      const params = {
        model: "mock-gpt",
        messages: [{ role: "user" as const, content: "Weather in Oslo?" }],
        tools: [tool],
      };
      const runner = stream
        ? openai.chat.completions.runTools({ ...params, stream: true })
        : openai.chat.completions.runTools(params);
      expect(await runner.finalContent()).toBe("It is 12C in Oslo.");
      expect(calls).toEqual([{ city: "Oslo" }]);
    });

    it(`anthropic messages, a manual loop (stream: ${stream})`, async () => {
      scriptWeather();
      const tools = [
        { name: "get_weather", input_schema: weatherParameters as Anthropic.Tool.InputSchema },
      ];
      const messages: Anthropic.MessageParam[] = [{ role: "user", content: "Weather in Oslo?" }];
      const send = (): Promise<Anthropic.Message> =>
        stream
          ? anthropic.messages
              .stream({ model: "mock-gpt", max_tokens: 200, messages, tools })
              .finalMessage()
          : anthropic.messages.create({ model: "mock-gpt", max_tokens: 200, messages, tools });
      let reply = await send();
      let rounds = 0;
      while (reply.stop_reason === "tool_use" && rounds++ < 3) {
        const use = reply.content.find((b) => b.type === "tool_use");
        expect(use).toMatchObject({ name: "get_weather", input: { city: "Oslo" } });
        messages.push({ role: "assistant", content: reply.content });
        messages.push({
          role: "user",
          content: [{ type: "tool_result", tool_use_id: use!.id, content: "12C" }],
        });
        reply = await send();
      }
      expect(rounds).toBe(1);
      expect(reply.content).toEqual([
        expect.objectContaining({ type: "text", text: "It is 12C in Oslo." }),
      ]);
    });
  }

  it("the responses API gets the call and the final text", async () => {
    scriptWeather();
    const tools: OpenAI.Responses.Tool[] = [
      { type: "function", name: "get_weather", parameters: weatherParameters, strict: false },
    ];
    const first = await openai.responses.create({ model: "mock-gpt", input: "Weather?", tools });
    const call = first.output.find((o) => o.type === "function_call");
    expect(call).toMatchObject({ name: "get_weather", arguments: '{"city":"Oslo"}' });
    const stream = await openai.responses.create({
      model: "mock-gpt",
      stream: true,
      tools,
      input: [
        { role: "user", content: "Weather?" },
        call as OpenAI.Responses.ResponseFunctionToolCall,
        {
          type: "function_call_output",
          call_id: (call as { call_id: string }).call_id,
          output: "12C",
        },
      ],
    });
    let text = "";
    for await (const event of stream)
      if (event.type === "response.output_text.delta") text += event.delta;
    expect(text).toBe("It is 12C in Oslo.");
  });
});

describe("rules", () => {
  it("times: 1 answers once, then the default mock answers", async () => {
    gw.mock.reply({ reply: { text: "just once" }, times: 1 });
    const first = await openai.chat.completions.create(
      chat("hi") as OpenAI.ChatCompletionCreateParamsNonStreaming,
    );
    const second = await openai.chat.completions.create(
      chat("hi") as OpenAI.ChatCompletionCreateParamsNonStreaming,
    );
    expect(first.choices[0].message.content).toBe("just once");
    expect(second.choices[0].message.content).toMatch(/^Mock reply to: hi\./);
  });

  it("the config's rules answer, and reset keeps them", async () => {
    const ask = () =>
      openai.chat.completions.create(
        chat("from the config") as OpenAI.ChatCompletionCreateParamsNonStreaming,
      );
    expect((await ask()).choices[0].message.content).toBe("configured");
    gw.mock.reply({ user_text: "from the config" }, { text: "overridden" });
    expect((await ask()).choices[0].message.content).toBe("configured");
  });

  it("admin API: POST appends (or replaces) rules with a regex match, DELETE resets", async () => {
    const added = await admin(gw, "POST", "/mock/script", {
      rules: [
        {
          match: { user_text: { regex: "^ticket-\\d+$" }, model: "mock-gpt" },
          reply: { text: "ticket found" },
        },
      ],
      replace: true,
    });
    expect(added.status).toBe(200);
    expect(((await added.json()) as { rules: unknown[] }).rules).toHaveLength(1);
    const ask = async (text: string) =>
      (
        await openai.chat.completions.create(
          chat(text) as OpenAI.ChatCompletionCreateParamsNonStreaming,
        )
      ).choices[0].message.content;
    expect(await ask("ticket-42")).toBe("ticket found");
    expect(await ask("from the config")).toMatch(/^Mock reply to/);
    expect(await ask("my ticket-42")).toMatch(/^Mock reply to/);
    expect((await admin(gw, "DELETE", "/mock/script")).status).toBe(200);
    expect(await ask("ticket-42")).toMatch(/^Mock reply to/);
    expect(await ask("from the config")).toBe("configured");
  });

  it("admin API refuses a bad rule with a 400 naming the field, and needs the admin key", async () => {
    const bad = await admin(gw, "POST", "/mock/script", {
      rules: [{ match: { user_text: { regex: "(" } }, reply: { text: "x" } }],
    });
    expect(bad.status).toBe(400);
    expect((await errorOf(bad)).message).toContain("rules.0.match.user_text.regex");
    const noAdmin = await fetch(`${gw.url}/api/admin/mock/script`, {
      method: "DELETE",
      headers: { authorization: `Bearer ${KEY}` },
    });
    expect(noAdmin.status).toBe(401);
  });
});

describe("scripted failures and usage", () => {
  it("an upstream rejection with a reason keeps its status and maps to the spec's error, both styles", async () => {
    gw.mock.reply({
      reply: { error: { status: 413, reason: "context_length_exceeded" } },
      times: 2,
    });
    const chatErr = await errorOf(await post(gw, "/v1/chat/completions", chat()));
    expect(chatErr).toMatchObject({
      status: 413,
      code: "context_length_exceeded",
      type: "invalid_request_error",
    });
    const res = await post(gw, "/v1/messages", { ...chat(), max_tokens: 50 });
    expect(res.status).toBe(413);
    expect(await res.json()).toMatchObject({
      type: "error",
      error: { type: "invalid_request_error" },
    });
  });

  it("429 and 503 from the script are the spec's upstream_error", async () => {
    gw.mock.reply({ reply: { error: { status: 429 } }, times: 1 });
    gw.mock.reply({ reply: { error: { status: 503 } }, times: 1 });
    expect(await errorOf(await post(gw, "/v1/chat/completions", chat()))).toMatchObject({
      status: 429,
      code: "upstream_error",
      retryAfter: null,
    });
    expect(await errorOf(await post(gw, "/v1/chat/completions", chat()))).toMatchObject({
      status: 503,
      code: "upstream_error",
    });
  });

  it("break_after ends the stream with an error event after that many chunks", async () => {
    gw.mock.reply({ reply: { text: "one two three four five", break_after: 2 } });
    const events = await streamData<{ choices?: { delta?: { content?: string } }[] }>(
      await post(gw, "/v1/chat/completions", chat("x", "mock-gpt", { stream: true })),
    );
    const contents = events.map((e) => e.choices?.[0]?.delta?.content).filter((c) => c);
    expect(contents).toEqual(["one ", "two "]);
    expect(events.at(-1)).toMatchObject({
      error: { code: "upstream_error" },
    });
    const messages = await (
      await post(gw, "/v1/messages", { ...chat(), max_tokens: 50, stream: true })
    ).text();
    expect(messages).toContain("event: error");
  });

  it("scripted usage is what the client sees and what is billed", async () => {
    // Within what the requests could cost (their size and max_tokens): a hold caps every charge.
    gw.mock.reply({ reply: { text: "billed", usage: { input_tokens: 10, output_tokens: 500 } } });
    const before = (await quota(gw)).balance_idr;
    const done = await openai.chat.completions.create({
      ...chat(),
      max_tokens: 1000,
    } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    expect(done.usage).toMatchObject({ prompt_tokens: 10, completion_tokens: 500 });
    const stream = anthropic.messages.stream({
      model: "mock-gpt",
      max_tokens: 1000,
      messages: [{ role: "user", content: "hi" }],
    });
    expect((await stream.finalMessage()).usage).toMatchObject({
      input_tokens: 10,
      output_tokens: 500,
    });
    // 10 x 10 000 + 500 x 20 000 micro-IDR per request, twice.
    expect(await lastLogged(gw)).toMatchObject({
      input_tokens: 10,
      output_tokens: 500,
      cost_idr: 10.1,
    });
    expect((await quota(gw)).balance_idr).toBe(before - 20.2);
  });

  it("reasoning reaches the chat client and becomes thinking on messages", async () => {
    gw.mock.reply({ reply: { reasoning: "think first", text: "answer" } });
    const res = (await (await post(gw, "/v1/chat/completions", chat())).json()) as {
      choices: { message: { content: string; reasoning_content?: string } }[];
    };
    expect(res.choices[0].message).toMatchObject({
      content: "answer",
      reasoning_content: "think first",
    });
    const msg = await anthropic.messages.create({
      model: "mock-gpt",
      max_tokens: 50,
      messages: [{ role: "user", content: "hi" }],
    });
    expect(msg.content).toEqual([
      expect.objectContaining({ type: "thinking", thinking: "think first" }),
      expect.objectContaining({ type: "text", text: "answer" }),
    ]);
  });

  it("delay_ms holds the first token; keepalives flow meanwhile", async () => {
    gw.mock.reply({ reply: { text: "late", delay_ms: 200 } });
    const started = Date.now();
    const text = await (
      await post(gw, "/v1/chat/completions", chat("x", "mock-gpt", { stream: true }))
    ).text();
    expect(Date.now() - started).toBeGreaterThanOrEqual(190);
    expect(text).toMatch(/^: /m);
    expect(text).toContain('"content":"late"');
  });
});

describe("LiteLLM's mock_response", () => {
  let own: TestGateway | undefined;
  let upstream: FakeUpstream | undefined;
  afterEach(async () => {
    await own?.close();
    own = undefined;
    await upstream?.close();
    upstream = undefined;
  });

  it("answers with its text on a mock model, in every style and streamed", async () => {
    own = await testGateway();
    const openai = new OpenAI({ apiKey: KEY, baseURL: `${own.url}/v1`, maxRetries: 0 });
    const body = {
      model: "mock-gpt",
      messages: [{ role: "user" as const, content: "hi" }],
      mock_response: "It's simple to use",
    };
    const completion = await openai.chat.completions.create(body);
    expect(completion.choices[0].message.content).toBe("It's simple to use");
    const stream = await openai.chat.completions.create({ ...body, stream: true });
    let streamed = "";
    for await (const chunk of stream) streamed += chunk.choices[0]?.delta?.content ?? "";
    expect(streamed).toBe("It's simple to use");
    // Chat's `n` (main's meter): every answer is the mocked text, and the usage counts them all.
    const several = await openai.chat.completions.create({ ...body, n: 3 });
    expect(several.choices.map((c) => c.message.content)).toEqual(
      Array(3).fill(body.mock_response),
    );
    expect(several.usage?.completion_tokens).toBe(3 * (completion.usage?.completion_tokens ?? 0));
    const anthropic = new Anthropic({ apiKey: KEY, baseURL: own.url, maxRetries: 0 });
    const message = await anthropic.messages.create({
      model: "mock-gpt",
      max_tokens: 50,
      messages: [{ role: "user", content: "hi" }],
      // @ts-expect-error: LiteLLM's field, not Anthropic's
      mock_response: "from messages",
    });
    expect(message.content).toEqual([{ type: "text", text: "from messages", citations: null }]);
  });

  it("is refused plainly on a real provider and when it is not a string", async () => {
    upstream = await fakeUpstream("openai");
    own = await testGateway({
      config: baseConfigWith({
        providers: [{ id: "oa", wire: "openai", base_url: upstream.baseUrl, api_keys: ["sk-x"] }],
        models: [{ name: "real", provider: "oa", price_input_per_mtok: 1 }],
      }),
    });
    expect(
      await errorOf(
        await post(own, "/v1/chat/completions", chat("hi", "real", { mock_response: "x" })),
      ),
    ).toMatchObject({
      status: 400,
      code: "bad_request",
      message:
        'mock_response is answered by mock models only; "real" is served by a real provider.',
    });
    expect(
      await errorOf(
        await post(
          own,
          "/v1/chat/completions",
          chat("hi", "mock-gpt", { mock_response: { a: 1 } }),
        ),
      ),
    ).toMatchObject({ status: 400, code: "bad_request" });
    expect(upstream.requests).toHaveLength(0);
  });
});
