import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import {
  type FakeUpstream,
  fakeUpstream,
  openaiJson,
  openaiStreamSteps,
  openaiToolStreamSteps,
  type SseStep,
} from "./support/fake-upstream.js";
import { baseConfigWith, KEY, post, type TestGateway, testGateway } from "./support/gateway.js";
import { requestTextTokens } from "./support/metering.js";

/**
 * The built-in mock answers as the hosted APIs do, so an app tested against it meets no surprise
 * in production: usage where each API reports it, stop sequences, tool choice, JSON mode's rule,
 * output limits, and the kit's clock in the answers' times. Each client uses its official SDK.
 */

const START = Date.parse("2030-01-01T00:00:00Z");
let upstream: FakeUpstream;
let gw: TestGateway;
let openai: OpenAI;
let anthropic: Anthropic;

beforeAll(async () => {
  upstream = await fakeUpstream("openai");
  gw = await testGateway({
    config: baseConfigWith({
      providers: [
        { id: "oa", wire: "openai", base_url: upstream.baseUrl, api_keys: ["sk-fake-0000"] },
      ],
      models: [{ name: "gpt-x", provider: "oa", upstream_model: "gpt-upstream" }],
    }),
    clock: "manual",
    now: () => START,
  });
  openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 10_000 });
  anthropic = new Anthropic({ apiKey: KEY, baseURL: gw.url, maxRetries: 0, timeout: 10_000 });
});
afterAll(async () => {
  await gw?.close();
  await upstream?.close();
});
afterEach(() => {
  gw.mock.reset();
  upstream.reset();
});

const user = (content: string) => [{ role: "user" as const, content }];

/** The usage the gateway logged for its newest request: what it charged. */
async function billed(): Promise<{ input_tokens: number; output_tokens: number }> {
  const [row] = await gw.listRequests({ limit: 1 });
  return row.usage;
}

/**
 * A messages stream's `message_start` and `message_delta` as they arrived, and the SDK's final
 * message.
 */
async function messagesStream(params: Anthropic.MessageStreamParams) {
  const stream = anthropic.messages.stream(params);
  const events: Anthropic.RawMessageStreamEvent[] = [];
  // Copied as they arrive: the SDK goes on updating the message of `message_start` in place.
  for await (const event of stream) events.push(structuredClone(event));
  const start = events.find((e) => e.type === "message_start");
  const delta = events.find((e) => e.type === "message_delta");
  if (start?.type !== "message_start" || delta?.type !== "message_delta")
    throw new Error("the stream lacked message_start or message_delta");
  return { start: start.message, delta, final: await stream.finalMessage() };
}

describe("a messages stream's usage", () => {
  it("message_start carries the mock's real input count and message_delta the whole output, as a whole answer reports them", async () => {
    const params = { model: "mock-gpt", max_tokens: 200, messages: user("count my words please") };
    const whole = await anthropic.messages.create(params);
    expect(whole.usage.input_tokens).toBeGreaterThan(0);
    const { start, delta, final } = await messagesStream(params);
    expect(start.usage.input_tokens).toBe(whole.usage.input_tokens);
    expect(delta.usage.output_tokens).toBe(whole.usage.output_tokens);
    expect(final.usage).toMatchObject({
      input_tokens: whole.usage.input_tokens,
      output_tokens: whole.usage.output_tokens,
    });
    expect(await billed()).toEqual({
      input_tokens: whole.usage.input_tokens,
      output_tokens: whole.usage.output_tokens,
    });
  });

  it("translated from a chat upstream, message_start carries the input the gateway holds for and message_delta the upstream's count", async () => {
    upstream.queue({ kind: "sse", steps: openaiStreamSteps(["Sela", "mat"], { usage: [40, 2] }) });
    const { start, delta, final } = await messagesStream({
      model: "gpt-x",
      max_tokens: 100,
      messages: user("Say hello in Indonesian"),
    });
    // Before the upstream's count arrives, the count of what was sent, as the meter estimates it.
    expect(start.usage.input_tokens).toBe(requestTextTokens(upstream.last.body));
    expect(delta.usage).toMatchObject({ input_tokens: 40, output_tokens: 2 });
    expect(final.usage).toMatchObject({ input_tokens: 40, output_tokens: 2 });
  });

  it("from a chat upstream that reports no usage, the client is told what it is charged, not zero", async () => {
    const steps: SseStep[] = openaiStreamSteps(["Sela", "mat"]).filter(
      (step) => typeof step.data !== "object" || !("usage" in (step.data as object)),
    );
    upstream.queue({ kind: "sse", steps });
    const { final } = await messagesStream({
      model: "gpt-x",
      max_tokens: 100,
      messages: user("Say hello in Indonesian"),
    });
    const charged = await billed();
    expect(charged.input_tokens).toBeGreaterThan(0);
    expect(final.usage).toMatchObject(charged);
  });
});

describe("stop sequences", () => {
  /** The mock's plain answer to `prompt`, and the words after its lead sentence to stop at. */
  async function answerAndStop(prompt: string) {
    const plain = await openai.chat.completions.create({
      model: "mock-gpt",
      messages: user(prompt),
    });
    const text = plain.choices[0].message.content ?? "";
    const words = text.slice(text.indexOf(". ") + 2).split(" ");
    return { text, plain, words };
  }

  it("chat, whole: the answer ends before the first sequence it writes, finish_reason stop, and only the words delivered are metered", async () => {
    const prompt = "tell me about gateways";
    const { text, plain, words } = await answerAndStop(prompt);
    const stop = words[3];
    const cut = await openai.chat.completions.create({
      model: "mock-gpt",
      messages: user(prompt),
      stop: ["never-in-the-answer", stop],
    });
    const expected = text.slice(0, text.indexOf(stop));
    expect(cut.choices[0].message.content).toBe(expected);
    expect(cut.choices[0].finish_reason).toBe("stop");
    expect(cut.usage?.completion_tokens).toBe(Math.ceil(expected.length / 4));
    expect(cut.usage?.completion_tokens).toBeLessThan(plain.usage?.completion_tokens ?? 0);
    expect(await billed()).toEqual({
      input_tokens: cut.usage?.prompt_tokens,
      output_tokens: cut.usage?.completion_tokens,
    });
  });

  it("chat, streamed: a sequence split across two pieces stops the stream before it", async () => {
    const prompt = "tell me about streams";
    const { text, words } = await answerAndStop(prompt);
    // The end of one word, its space and the start of the next: two streamed pieces.
    const stop = `${words[4].slice(-2)} ${words[5].slice(0, 2)}`;
    const stream = await openai.chat.completions.create({
      model: "mock-gpt",
      messages: user(prompt),
      stop,
      stream: true,
      stream_options: { include_usage: true },
    });
    let content = "";
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | undefined | null;
    for await (const chunk of stream) {
      content += chunk.choices[0]?.delta.content ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
      usage = chunk.usage ?? usage;
    }
    const expected = text.slice(0, text.indexOf(stop));
    expect(content).toBe(expected);
    expect(finish).toBe("stop");
    expect(usage?.completion_tokens).toBe(Math.ceil(expected.length / 4));
    expect((await billed()).output_tokens).toBe(usage?.completion_tokens);
  });

  it("messages, whole and streamed: stop_reason stop_sequence names the sequence", async () => {
    const params = { model: "mock-gpt", max_tokens: 200, messages: user("tell me about messages") };
    const plain = await anthropic.messages.create(params);
    const text = plain.content[0].type === "text" ? plain.content[0].text : "";
    const stop = text.slice(text.indexOf(". ") + 2).split(" ")[2];
    const expected = text.slice(0, text.indexOf(stop));
    const whole = await anthropic.messages.create({ ...params, stop_sequences: [stop] });
    expect(whole.content).toEqual([{ type: "text", text: expected, citations: null }]);
    expect(whole).toMatchObject({ stop_reason: "stop_sequence", stop_sequence: stop });
    expect(whole.usage.output_tokens).toBe(Math.ceil(expected.length / 4));

    const { delta, final } = await messagesStream({ ...params, stop_sequences: [stop] });
    expect(delta.delta).toMatchObject({ stop_reason: "stop_sequence", stop_sequence: stop });
    expect(final.content).toEqual([{ type: "text", text: expected, citations: null }]);
    expect(final).toMatchObject({ stop_reason: "stop_sequence", stop_sequence: stop });
    expect(final.usage.output_tokens).toBe(whole.usage.output_tokens);
    expect((await billed()).output_tokens).toBe(whole.usage.output_tokens);
  });

  it("a sequence the answer never writes changes nothing, and one past the output limit leaves the limit's cut", async () => {
    const params = { model: "mock-gpt", max_tokens: 200, messages: user("tell me nothing new") };
    const plain = await anthropic.messages.create(params);
    const absent = await anthropic.messages.create({ ...params, stop_sequences: ["zebra"] });
    expect(absent.content).toEqual(plain.content);
    expect(absent).toMatchObject({ stop_reason: "end_turn", stop_sequence: null });
    const text = plain.content[0].type === "text" ? plain.content[0].text : "";
    const late = text.slice(-8);
    const limited = await anthropic.messages.create({
      ...params,
      max_tokens: 3,
      stop_sequences: [late],
    });
    expect(limited).toMatchObject({ stop_reason: "max_tokens", stop_sequence: null });
  });

  it("a scripted answer stops at the sequence too", async () => {
    gw.mock.reply({ user_text: "script" }, { text: "First part. END Second part." });
    const whole = await openai.chat.completions.create({
      model: "mock-gpt",
      messages: user("script please"),
      stop: "END",
    });
    expect(whole.choices[0].message.content).toBe("First part. ");
    expect(whole.choices[0].finish_reason).toBe("stop");
    const msg = await anthropic.messages.create({
      model: "mock-gpt",
      max_tokens: 100,
      messages: user("script please"),
      stop_sequences: ["END"],
    });
    expect(msg.content).toEqual([{ type: "text", text: "First part. ", citations: null }]);
    expect(msg).toMatchObject({ stop_reason: "stop_sequence", stop_sequence: "END" });
  });
});

describe("stop sequences from a chat upstream that names them", () => {
  /** vLLM's chat answers name the stop string a choice ended at (`stop_reason`). */
  const namingStop = (choice: Record<string, unknown>) =>
    choice.finish_reason === "stop" ? { ...choice, stop_reason: "END" } : choice;

  it("a messages client gets stop_reason stop_sequence and the sequence, whole and streamed", async () => {
    const json = openaiJson("First part. ");
    const body = json.body as { choices: Record<string, unknown>[] };
    upstream.queue({ ...json, body: { ...body, choices: body.choices.map(namingStop) } });
    const params = {
      model: "gpt-x",
      max_tokens: 100,
      messages: user("two parts please"),
      stop_sequences: ["END"],
    };
    const whole = await anthropic.messages.create(params);
    expect(whole).toMatchObject({ stop_reason: "stop_sequence", stop_sequence: "END" });

    const steps = openaiStreamSteps(["First ", "part. "]).map((step) => {
      const data = step.data as { choices?: Record<string, unknown>[] };
      return data.choices
        ? { ...step, data: { ...data, choices: data.choices.map(namingStop) } }
        : step;
    });
    upstream.queue({ kind: "sse", steps });
    const { delta, final } = await messagesStream(params);
    expect(delta.delta).toMatchObject({ stop_reason: "stop_sequence", stop_sequence: "END" });
    expect(final).toMatchObject({ stop_reason: "stop_sequence", stop_sequence: "END" });
  });
});

describe("what OpenAI refuses", () => {
  it("chat's stop with more than four sequences is refused as OpenAI refuses it; a messages client's five are Anthropic's to take", async () => {
    const five = ["q1", "q2", "q3", "q4", "q5"];
    const refused = await post(gw, "/v1/chat/completions", {
      model: "mock-gpt",
      messages: user("hello"),
      stop: five,
    });
    expect(refused.status).toBe(400);
    const { error } = (await refused.json()) as { error: { type: string; message: string } };
    expect(error.type).toBe("invalid_request_error");
    expect(error.message).toContain("at most 4");
    const taken = await anthropic.messages.create({
      model: "mock-gpt",
      max_tokens: 100,
      messages: user("hello"),
      stop_sequences: five,
    });
    expect(taken.stop_reason).toBe("end_turn");
  });
});

describe("tool_choice none", () => {
  const chatTools: OpenAI.ChatCompletionTool[] = [
    {
      type: "function",
      function: { name: "lookup", parameters: { type: "object", properties: {} } },
    },
  ];

  it("chat: [[mock:tool]] answers in text, whole and streamed", async () => {
    const params = {
      model: "mock-gpt",
      messages: user("look it up [[mock:tool]]"),
      tools: chatTools,
      tool_choice: "none" as const,
    };
    const whole = await openai.chat.completions.create(params);
    expect(whole.choices[0].message.tool_calls ?? []).toEqual([]);
    expect(whole.choices[0].finish_reason).toBe("stop");
    expect(whole.choices[0].message.content).toContain("Mock reply to: look it up");
    const streamed = await openai.chat.completions.stream(params).finalChatCompletion();
    expect(streamed.choices[0].message.tool_calls ?? []).toEqual([]);
    expect(streamed.choices[0].finish_reason).toBe("stop");
  });

  it("messages: {type: none} answers in text", async () => {
    const msg = await anthropic.messages.create({
      model: "mock-gpt",
      max_tokens: 200,
      messages: user("look it up [[mock:tool]]"),
      tools: [{ name: "lookup", input_schema: { type: "object", properties: {} } }],
      tool_choice: { type: "none" },
    });
    expect(msg.content.map((b) => b.type)).toEqual(["text"]);
    expect(msg.stop_reason).toBe("end_turn");
  });

  it("responses: tool_choice none answers in text", async () => {
    const r = await openai.responses.create({
      model: "mock-gpt",
      input: "look it up [[mock:tool]]",
      tools: [{ type: "function", name: "lookup", parameters: {}, strict: false }],
      tool_choice: "none",
    });
    expect(r.output.map((item) => item.type)).toEqual(["message"]);
    expect(r.output_text).toContain("Mock reply to: look it up");
  });

  it("a scripted tool call is not made: the rule's text answers, or the mock's own words", async () => {
    gw.mock.reply(
      { tools_offered: "lookup" },
      { text: "No tools now.", tool_calls: [{ name: "lookup" }] },
    );
    const withText = await openai.chat.completions.create({
      model: "mock-gpt",
      messages: user("look it up"),
      tools: chatTools,
      tool_choice: "none",
    });
    expect(withText.choices[0].message).toMatchObject({ content: "No tools now." });
    expect(withText.choices[0].message.tool_calls ?? []).toEqual([]);
    expect(withText.choices[0].finish_reason).toBe("stop");

    gw.mock.reset();
    gw.mock.reply({ tools_offered: "lookup" }, { tool_calls: [{ name: "lookup" }] });
    const without = await anthropic.messages.create({
      model: "mock-gpt",
      max_tokens: 200,
      messages: user("look it up"),
      tools: [{ name: "lookup", input_schema: { type: "object", properties: {} } }],
      tool_choice: { type: "none" },
    });
    expect(without.content.map((b) => b.type)).toEqual(["text"]);
    expect(without.stop_reason).toBe("end_turn");
  });

  it("parallel_tool_calls false: a scripted answer of two calls makes only the first", async () => {
    gw.mock.reply(
      { tools_offered: "lookup" },
      {
        tool_calls: [
          { name: "lookup", arguments: { q: "a" } },
          { name: "lookup", arguments: { q: "b" } },
        ],
      },
    );
    const both = await openai.chat.completions.create({
      model: "mock-gpt",
      messages: user("look both up"),
      tools: chatTools,
    });
    expect(both.choices[0].message.tool_calls).toHaveLength(2);
    const one = await openai.chat.completions.create({
      model: "mock-gpt",
      messages: user("look both up"),
      tools: chatTools,
      parallel_tool_calls: false,
    });
    const calls = one.choices[0].message.tool_calls ?? [];
    expect(calls).toHaveLength(1);
    expect(calls[0].type === "function" && JSON.parse(calls[0].function.arguments)).toEqual({
      q: "a",
    });
  });
});

describe("JSON mode", () => {
  it("json_object without the word JSON in the messages is refused as OpenAI refuses it; with it, a JSON object", async () => {
    const refused = await post(gw, "/v1/chat/completions", {
      model: "mock-gpt",
      messages: user("give me the weather"),
      response_format: { type: "json_object" },
    });
    expect(refused.status).toBe(400);
    const { error } = (await refused.json()) as { error: { type: string; message: string } };
    expect(error.type).toBe("invalid_request_error");
    expect(error.message).toContain("json");

    const answered = await openai.chat.completions.create({
      model: "mock-gpt",
      messages: [
        { role: "system", content: "Answer in JSON." },
        { role: "user", content: "give me the weather" },
      ],
      response_format: { type: "json_object" },
    });
    expect(typeof JSON.parse(answered.choices[0].message.content ?? "")).toBe("object");
  });

  it("responses: text.format json_object without the word JSON is refused", async () => {
    const refused = await post(gw, "/v1/responses", {
      model: "mock-gpt",
      input: "give me the weather",
      text: { format: { type: "json_object" } },
    });
    expect(refused.status).toBe(400);
    const answered = await openai.responses.create({
      model: "mock-gpt",
      input: "give me the weather as json",
      text: { format: { type: "json_object" } },
    });
    expect(typeof JSON.parse(answered.output_text)).toBe("object");
  });
});

describe("output limits", () => {
  it("a scripted text longer than max_tokens is cut, finish_reason length / stop_reason max_tokens", async () => {
    const text = "one two three four five six seven eight nine ten eleven twelve thirteen";
    gw.mock.reply({ user_text: "count" }, { text });
    const chat = await openai.chat.completions.create({
      model: "mock-gpt",
      messages: user("count for me"),
      max_tokens: 3,
    });
    expect(chat.choices[0].finish_reason).toBe("length");
    expect(chat.choices[0].message.content).toBe(text.slice(0, 12));
    expect(chat.usage?.completion_tokens).toBe(3);
    const msg = await anthropic.messages.create({
      model: "mock-gpt",
      max_tokens: 3,
      messages: user("count for me"),
    });
    expect(msg.stop_reason).toBe("max_tokens");
    expect(msg.content).toEqual([{ type: "text", text: text.slice(0, 12), citations: null }]);
  });
});

describe("answer times on the kit's clock", () => {
  it("created (chat, whole and streamed) and created_at (responses) are the manual clock's time", async () => {
    gw.clock.set(new Date(START + 90_000));
    const seconds = (START + 90_000) / 1000;
    const whole = await openai.chat.completions.create({ model: "mock-gpt", messages: user("hi") });
    expect(whole.created).toBe(seconds);
    const stream = await openai.chat.completions.create({
      model: "mock-gpt",
      messages: user("hi"),
      stream: true,
    });
    for await (const chunk of stream) expect(chunk.created).toBe(seconds);
    const response = await openai.responses.create({ model: "mock-gpt", input: "hi" });
    expect(response.created_at).toBe(seconds);
    const streamed = await openai.responses
      .stream({ model: "mock-gpt", input: "hi" })
      .finalResponse();
    expect(streamed.created_at).toBe(seconds);
  });
});

describe("usage details and system_fingerprint, as OpenAI writes them", () => {
  /** OpenAI's breakdowns of a chat answer's usage, for a mock that caches and hears nothing. */
  const details = (reasoning: number) => ({
    prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
    completion_tokens_details: {
      reasoning_tokens: reasoning,
      audio_tokens: 0,
      accepted_prediction_tokens: 0,
      rejected_prediction_tokens: 0,
    },
  });

  it("chat, whole and streamed with include_usage: a system_fingerprint on the answer and every chunk, and both usage breakdowns; the charge is the usage", async () => {
    const params = { model: "mock-gpt", messages: user("describe the weather") };
    const whole = await openai.chat.completions.create(params);
    expect(whole.system_fingerprint).toMatch(/^fp_[0-9a-f]{10}$/);
    expect(whole.usage).toMatchObject(details(0));
    expect(await billed()).toEqual({
      input_tokens: whole.usage?.prompt_tokens,
      output_tokens: whole.usage?.completion_tokens,
    });

    const stream = await openai.chat.completions.create({
      ...params,
      stream: true,
      stream_options: { include_usage: true },
    });
    const fingerprints = new Set<string | undefined>();
    let usage: OpenAI.CompletionUsage | undefined | null;
    for await (const chunk of stream) {
      fingerprints.add(chunk.system_fingerprint);
      usage = chunk.usage ?? usage;
    }
    expect([...fingerprints]).toEqual([whole.system_fingerprint]);
    expect(usage).toMatchObject({
      ...details(0),
      completion_tokens: whole.usage?.completion_tokens,
    });
    expect((await billed()).output_tokens).toBe(whole.usage?.completion_tokens);
  });

  it("the model's thinking is counted in reasoning_tokens: chat and Responses, whole and streamed", async () => {
    const reasoning = "First I weigh the clouds, then the wind.";
    gw.mock.reply({ user_text: "weigh" }, { reasoning, text: "Rain by noon." });
    const thought = Math.ceil(reasoning.length / 4);
    const params = { model: "mock-gpt", messages: user("weigh the sky") };
    const whole = await openai.chat.completions.create(params);
    expect(whole.usage).toMatchObject(details(thought));
    expect(whole.usage?.completion_tokens).toBeGreaterThan(thought);
    const streamed = await openai.chat.completions
      .stream({ ...params, stream_options: { include_usage: true } })
      .finalChatCompletion();
    expect(streamed.usage).toMatchObject(details(thought));

    const asked = { model: "mock-gpt", input: "weigh the sky" };
    const response = await openai.responses.create(asked);
    const fromStream = await openai.responses.stream(asked).finalResponse();
    for (const r of [response, fromStream]) {
      expect(r.usage).toMatchObject({
        input_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 },
        output_tokens: whole.usage?.completion_tokens,
        output_tokens_details: { reasoning_tokens: thought },
      });
    }
  });
});

describe("what OpenAI and Anthropic refuse, refused the same way and charged nothing", () => {
  const balance = () => gw.services.store.getAccount("acct")?.balance_micro;

  /** The error an SDK call was refused with. */
  async function refusedWith<E>(call: Promise<unknown>, type: new (...args: never[]) => E) {
    const err = await call.then(
      () => new Error("the request was answered"),
      (e: unknown) => e,
    );
    if (!(err instanceof type)) throw err;
    return err;
  }

  /** An OpenAI SDK call refused with a 400 invalid_request_error naming `param`, logged free. */
  async function expectOpenAIRefusal(call: Promise<unknown>, param: string) {
    const before = balance();
    const err = await refusedWith(call, OpenAI.BadRequestError);
    expect(err.status).toBe(400);
    expect(err.type).toBe("invalid_request_error");
    expect(err.message).toContain(`\`${param}\``);
    const [row] = await gw.listRequests({ limit: 1 });
    expect(row).toMatchObject({ status: 400, cost_micro: 0 });
    expect(balance()).toBe(before);
    return err;
  }

  const lookup: OpenAI.ChatCompletionTool[] = [
    { type: "function", function: { name: "lookup", parameters: { type: "object" } } },
  ];

  it("top_logprobs above 20: chat (whole and streamed) and Responses; 20 is answered with 20", async () => {
    const params = {
      model: "mock-gpt",
      messages: user("hello"),
      logprobs: true,
      top_logprobs: 21,
    };
    await expectOpenAIRefusal(openai.chat.completions.create(params), "top_logprobs");
    await expectOpenAIRefusal(
      openai.chat.completions.create({ ...params, stream: true }),
      "top_logprobs",
    );
    await expectOpenAIRefusal(
      openai.responses.create({
        model: "mock-gpt",
        input: "hello",
        include: ["message.output_text.logprobs"],
        top_logprobs: 21,
      }),
      "top_logprobs",
    );
    const most = await openai.chat.completions.create({ ...params, top_logprobs: 20 });
    expect(most.choices[0].logprobs?.content?.[0].top_logprobs).toHaveLength(20);
  });

  it("stream_options without stream: true; with a stream it is taken", async () => {
    const params = {
      model: "mock-gpt",
      messages: user("hello"),
      stream_options: { include_usage: true },
    };
    await expectOpenAIRefusal(openai.chat.completions.create(params), "stream_options");
    await expectOpenAIRefusal(
      openai.chat.completions.create({ ...params, stream: false }),
      "stream_options",
    );
    const streamed = await openai.chat.completions.stream(params).finalChatCompletion();
    expect(streamed.choices[0].finish_reason).toBe("stop");
  });

  it("chat: a named tool_choice naming no declared tool, and a tool_choice without tools", async () => {
    const params = { model: "mock-gpt", messages: user("look it up") };
    const missing = { type: "function" as const, function: { name: "weather" } };
    const err = await expectOpenAIRefusal(
      openai.chat.completions.create({ ...params, tools: lookup, tool_choice: missing }),
      "tool_choice",
    );
    expect(err.message).toContain("weather");
    await expectOpenAIRefusal(
      openai.chat.completions.create({
        ...params,
        tools: lookup,
        tool_choice: missing,
        stream: true,
      }),
      "tool_choice",
    );
    await expectOpenAIRefusal(
      openai.chat.completions.create({ ...params, tool_choice: missing }),
      "tool_choice",
    );
    await expectOpenAIRefusal(
      openai.chat.completions.create({ ...params, tool_choice: "required" }),
      "tool_choice",
    );
    const named = await openai.chat.completions.create({
      ...params,
      tools: lookup,
      tool_choice: { type: "function", function: { name: "lookup" } },
    });
    expect(named.choices[0].message.tool_calls?.[0]).toMatchObject({
      function: { name: "lookup" },
    });
  });

  it("Responses: a named tool_choice naming no declared function, and required without tools", async () => {
    const tools: OpenAI.Responses.Tool[] = [
      { type: "function", name: "lookup", parameters: { type: "object" }, strict: false },
    ];
    const missing = { type: "function" as const, name: "weather" };
    await expectOpenAIRefusal(
      openai.responses.create({ model: "mock-gpt", input: "look", tools, tool_choice: missing }),
      "tool_choice",
    );
    await expectOpenAIRefusal(
      openai.responses.create({ model: "mock-gpt", input: "look", tool_choice: "required" }),
      "tool_choice",
    );
    const named = await openai.responses.create({
      model: "mock-gpt",
      input: "look",
      tools,
      tool_choice: { type: "function", name: "lookup" },
    });
    expect(named.output[0]).toMatchObject({ type: "function_call", name: "lookup" });
    // A tool an input item makes available is declared too.
    const fromItem = await openai.responses.create({
      model: "mock-gpt",
      input: [
        { type: "additional_tools", role: "developer", tools },
        { role: "user", content: "look" },
      ],
      tool_choice: { type: "function", name: "lookup" },
    });
    expect(fromItem.output[0]).toMatchObject({ type: "function_call", name: "lookup" });
  });

  it("messages (mock-claude's clients too): tool_choice {type: tool} naming no declared tool", async () => {
    const tools: Anthropic.Tool[] = [{ name: "lookup", input_schema: { type: "object" } }];
    const params = { model: "mock-gpt", max_tokens: 100, messages: user("look it up") };
    for (const stream of [false, true]) {
      const before = balance();
      const err = await refusedWith(
        anthropic.messages.create({
          ...params,
          tools,
          tool_choice: { type: "tool", name: "weather" },
          stream,
        }),
        Anthropic.BadRequestError,
      );
      expect(err.status).toBe(400);
      expect(err.error).toMatchObject({
        type: "error",
        error: { type: "invalid_request_error", message: expect.stringContaining("`tool_choice`") },
      });
      expect(err.message).toContain("weather");
      const [row] = await gw.listRequests({ limit: 1 });
      expect(row).toMatchObject({ status: 400, cost_micro: 0 });
      expect(balance()).toBe(before);
    }
    const named = await anthropic.messages.create({
      ...params,
      tools,
      tool_choice: { type: "tool", name: "lookup" },
    });
    expect(named.content[0]).toMatchObject({ type: "tool_use", name: "lookup" });
  });
});

describe("a Responses answer cut at max_output_tokens", () => {
  const asked = { model: "mock-gpt", input: "tell me everything [[mock:words=200]]" };

  it("whole and streamed: the message item is incomplete, as the response is; an answer not cut is completed", async () => {
    const whole = await openai.responses.create({ ...asked, max_output_tokens: 16 });
    expect(whole).toMatchObject({
      status: "incomplete",
      incomplete_details: { reason: "max_output_tokens" },
    });
    expect(whole.output).toMatchObject([{ type: "message", status: "incomplete" }]);

    const stream = await openai.responses.create({ ...asked, max_output_tokens: 16, stream: true });
    const done: OpenAI.Responses.ResponseOutputItem[] = [];
    let last: OpenAI.Responses.ResponseStreamEvent | undefined;
    for await (const event of stream) {
      if (event.type === "response.output_item.done") done.push(event.item);
      last = event;
    }
    expect(done).toMatchObject([{ type: "message", status: "incomplete" }]);
    expect(last?.type).toBe("response.incomplete");
    if (last?.type !== "response.incomplete") return;
    expect(last.response.output).toMatchObject([{ type: "message", status: "incomplete" }]);

    const finished = await openai.responses.stream({ ...asked, max_output_tokens: 4000 });
    const full = await finished.finalResponse();
    expect(full.status).toBe("completed");
    expect(full.output).toMatchObject([{ type: "message", status: "completed" }]);
  });

  it("from a chat upstream, text then a call cut by the limit: the message completed, the call incomplete", async () => {
    const call = { id: "call_1", name: "lookup", arguments: '{"q":' };
    upstream.queue(openaiJson("Looking.", { toolCalls: [call], finish: "length" }));
    const whole = await openai.responses.create({ model: "gpt-x", input: "look it up" });
    expect(whole.status).toBe("incomplete");
    expect(whole.output).toMatchObject([
      { type: "message", status: "completed" },
      { type: "function_call", status: "incomplete" },
    ]);

    const steps = openaiToolStreamSteps(
      [{ id: "call_1", name: "lookup", argumentPieces: ['{"q":'] }],
      { text: "Looking." },
    ).map((step) => {
      const data = step.data as { choices?: { finish_reason?: string | null }[] };
      return data.choices?.[0]?.finish_reason === "tool_calls"
        ? { ...step, data: { ...data, choices: [{ ...data.choices[0], finish_reason: "length" }] } }
        : step;
    });
    upstream.queue({ kind: "sse", steps });
    const stream = await openai.responses.create({
      model: "gpt-x",
      input: "look it up",
      stream: true,
    });
    const done: OpenAI.Responses.ResponseOutputItem[] = [];
    for await (const event of stream) {
      if (event.type === "response.output_item.done") done.push(event.item);
    }
    expect(done).toMatchObject([
      { type: "message", status: "completed" },
      { type: "function_call", status: "incomplete" },
    ]);
  });
});
