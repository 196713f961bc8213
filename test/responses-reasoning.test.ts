import OpenAI from "openai";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { lastLogged } from "./support/api.js";
import { fakeGemini, geminiJson } from "./support/fake-gemini.js";
import {
  anthropicJson,
  anthropicToolStreamSteps,
  type FakeUpstream,
  fakeUpstream,
  type SseStep,
} from "./support/fake-upstream.js";
import { baseConfig, KEY, type TestGateway, testGateway } from "./support/gateway.js";

/**
 * A Responses client that asks for a reasoning summary (`reasoning.summary`) from a model served
 * through the chat bridge gets the model's thinking (Gemini's thought parts, Anthropic's thinking
 * blocks) as a reasoning item before the message or the calls, JSON and streamed, as OpenAI's
 * Responses API and the official SDK define it. Without a summary asked, nothing changes.
 */

const THINKING = { text: "The user wants the weather; call the tool.", signature: "sig-abc" };

let gemini: FakeUpstream;
let claude: FakeUpstream;
let gw: TestGateway;
let openai: OpenAI;

beforeAll(async () => {
  gemini = await fakeGemini({ apiKeys: ["AIza-reasoning-key"], maxOutputTokens: 2000 });
  claude = await fakeUpstream("anthropic");
  gw = await testGateway({
    config: baseConfig({
      providers: [
        ...(baseConfig().providers ?? []),
        {
          id: "gem",
          wire: "gemini",
          base_url: gemini.url,
          api_keys: ["AIza-reasoning-key"],
          timeout_ms: 3_000,
        },
        {
          id: "an",
          wire: "anthropic",
          base_url: claude.baseUrl,
          api_keys: ["sk-ant-reasoning"],
          timeout_ms: 3_000,
        },
      ],
      models: [
        ...(baseConfig().models ?? []),
        {
          name: "gemini-think",
          provider: "gem",
          upstream_model: "gemini-2.5-flash",
          price_input_per_mtok: 1_000_000,
          price_output_per_mtok: 2_000_000,
          max_output_tokens: 2000,
        },
        {
          name: "claude-think",
          provider: "an",
          upstream_model: "claude-upstream",
          price_input_per_mtok: 1_000_000,
          price_output_per_mtok: 2_000_000,
          max_output_tokens: 64_000,
        },
      ],
    }),
  });
  openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 10_000 });
});
afterAll(async () => {
  await gw?.close();
  await gemini?.close();
  await claude?.close();
});
beforeEach(() => {
  gemini.reset();
  claude.reset();
});

const weather: OpenAI.Responses.FunctionTool = {
  type: "function",
  name: "get_weather",
  description: "Weather in a city",
  parameters: {
    type: "object",
    properties: { city: { type: "string" } },
    required: ["city"],
    additionalProperties: false,
  },
  strict: true,
};

/** Gemini stream events: thought parts first, then the text, the finish and usage on the last. */
function geminiThinkingStream(thoughts: string[], texts: string[]): SseStep[] {
  const step = (parts: object[], last = false): SseStep => ({
    data: {
      candidates: [
        { content: { role: "model", parts }, index: 0, ...(last ? { finishReason: "STOP" } : {}) },
      ],
      usageMetadata: {
        promptTokenCount: 10,
        candidatesTokenCount: 5,
        totalTokenCount: last ? 35 : 15,
        ...(last ? { thoughtsTokenCount: 20 } : {}),
      },
      modelVersion: "gemini-fake",
    },
  });
  return [
    ...thoughts.map((text) => step([{ text, thought: true }])),
    ...texts.map((text, i) => step([{ text }], i === texts.length - 1)),
  ];
}

/**
 * A response's output with the generated ids taken out (and the `parsed` field the SDK's stream
 * helper adds to text parts), to compare a stream's with JSON's.
 */
function shape(output: OpenAI.Responses.ResponseOutputItem[]): unknown[] {
  return output.map((item) => {
    const { id: _id, ...rest } = item as { id?: string; content?: unknown };
    if (Array.isArray(rest.content)) {
      rest.content = rest.content.map((part: Record<string, unknown>) => {
        const { parsed: _parsed, ...text } = part;
        return text;
      });
    }
    return rest;
  });
}

describe("responses client -> gemini wire: thought parts as a reasoning summary", () => {
  it("returns the thinking as a reasoning item before the message (JSON) only when a summary is asked, billed as before", async () => {
    gemini.queue(geminiJson("42", { usage: [10, 5, 20], thought: "Six sevens make 42." }));
    const response = await openai.responses.create({
      model: "gemini-think",
      input: "6 x 7?",
      reasoning: { effort: "low", summary: "auto" },
    });
    expect(response.output.map((item) => item.type)).toEqual(["reasoning", "message"]);
    expect(response.output[0]).toEqual({
      type: "reasoning",
      id: expect.stringMatching(/^rs_/),
      summary: [{ type: "summary_text", text: "Six sevens make 42." }],
    });
    expect(response.output_text).toBe("42");
    expect(response.reasoning).toEqual({ effort: "low", summary: "auto" });
    expect(response.usage).toMatchObject({
      output_tokens: 25,
      output_tokens_details: { reasoning_tokens: 20 },
    });
    expect(await lastLogged(gw)).toMatchObject({ input_tokens: 10, output_tokens: 25 });

    // Without a summary asked, the thinking is left out as before.
    gemini.queue(geminiJson("42", { usage: [10, 5, 20], thought: "Six sevens make 42." }));
    const plain = await openai.responses.create({
      model: "gemini-think",
      input: "6 x 7?",
      reasoning: { effort: "low" },
    });
    expect(plain.output.map((item) => item.type)).toEqual(["message"]);
  });

  it("streams the reasoning item's events (none without a summary asked); the SDK's final response has the JSON one's shape", async () => {
    gemini.queue(geminiJson("42", { usage: [10, 5, 20], thought: "Six sevens make 42." }));
    const json = await openai.responses.create({
      model: "gemini-think",
      input: "6 x 7?",
      reasoning: { effort: "low", summary: "detailed" },
    });

    gemini.queue({
      kind: "sse",
      steps: geminiThinkingStream(["Six sevens ", "make 42."], ["4", "2"]),
    });
    const stream = openai.responses.stream({
      model: "gemini-think",
      input: "6 x 7?",
      reasoning: { effort: "low", summary: "detailed" },
    });
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const event of stream) events.push(event);
    const final = await stream.finalResponse();

    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    const types = events.map((e) => e.type);
    expect(types).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.reasoning_summary_part.added",
      "response.reasoning_summary_text.delta",
      "response.reasoning_summary_text.delta",
      "response.reasoning_summary_text.done",
      "response.reasoning_summary_part.done",
      "response.output_item.done",
      "response.output_item.added",
      "response.content_part.added",
      "response.output_text.delta",
      "response.output_text.delta",
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.completed",
    ]);
    const added = events[2];
    if (added.type !== "response.output_item.added") throw new Error("expected an added item");
    expect(added.output_index).toBe(0);
    expect(added.item).toMatchObject({ type: "reasoning", summary: [] });
    for (const e of events.slice(3, 8)) {
      expect(e).toMatchObject({ item_id: added.item.id, output_index: 0, summary_index: 0 });
    }
    expect(events[6]).toMatchObject({ text: "Six sevens make 42." });
    expect(events[9]).toMatchObject({ output_index: 1, item: { type: "message" } });

    expect(final.output.map((item) => item.type)).toEqual(["reasoning", "message"]);
    expect(final.output[0]).toEqual({
      type: "reasoning",
      id: added.item.id,
      summary: [{ type: "summary_text", text: "Six sevens make 42." }],
    });
    expect(final.output_text).toBe("42");
    expect(shape(final.output)).toEqual(shape(json.output));
    expect(final.usage).toMatchObject({
      output_tokens: 25,
      output_tokens_details: { reasoning_tokens: 20 },
    });

    // Without a summary asked: no reasoning events, no reasoning item.
    gemini.queue({ kind: "sse", steps: geminiThinkingStream(["Six sevens."], ["42"]) });
    const plain = await openai.responses.create({
      model: "gemini-think",
      input: "6 x 7?",
      reasoning: { effort: "low" },
      stream: true,
    });
    const plainTypes: string[] = [];
    let plainFinal: OpenAI.Responses.Response | undefined;
    for await (const event of plain) {
      plainTypes.push(event.type);
      if (event.type === "response.completed") plainFinal = event.response;
    }
    expect(plainTypes.filter((t) => t.includes("reasoning"))).toEqual([]);
    expect(plainFinal?.output.map((item) => item.type)).toEqual(["message"]);
  });

  it("puts a function call after the reasoning item, and a chained turn replays it without the thinking", async () => {
    gemini.queue(
      geminiJson(null, {
        thought: "Need the weather tool.",
        calls: [{ name: "get_weather", args: { city: "Jakarta" } }],
      }),
    );
    const first = await openai.responses.create({
      model: "gemini-think",
      input: "Weather in Jakarta?",
      tools: [weather],
      reasoning: { effort: "low", summary: "auto" },
    });
    expect(first.output.map((item) => item.type)).toEqual(["reasoning", "function_call"]);
    expect(first.output[0]).toMatchObject({
      summary: [{ type: "summary_text", text: "Need the weather tool." }],
    });
    const call = first.output[1];
    if (call.type !== "function_call") throw new Error("expected a function call");

    gemini.queue(geminiJson("31 C in Jakarta.", { thought: "Report it." }));
    const second = await openai.responses.create({
      model: "gemini-think",
      previous_response_id: first.id,
      input: [{ type: "function_call_output", call_id: call.call_id, output: "31 C" }],
      tools: [weather],
      reasoning: { effort: "low", summary: "auto" },
    });
    expect(gemini.refused).toEqual([]);
    expect(second.output.map((item) => item.type)).toEqual(["reasoning", "message"]);
    expect(second.output_text).toBe("31 C in Jakarta.");
    // The stored reasoning item is not sent: Gemini gets the call and its result only.
    const contents = gemini.last.body.contents as {
      role: string;
      parts: Record<string, unknown>[];
    }[];
    expect(contents.map((c) => c.role)).toEqual(["user", "model", "user"]);
    expect(contents[1].parts).toEqual([
      expect.objectContaining({ functionCall: { name: "get_weather", args: { city: "Jakarta" } } }),
    ]);
    expect(JSON.stringify(contents)).not.toContain("Need the weather tool.");
  });
});

describe("responses client -> anthropic wire: thinking blocks as a reasoning summary", () => {
  it("returns the thinking block as a reasoning item (JSON)", async () => {
    claude.queue(anthropicJson("Sunny.", { thinking: THINKING, usage: [12, 30] }));
    const response = await openai.responses.create({
      model: "claude-think",
      input: "Weather?",
      reasoning: { effort: "medium", summary: "concise" },
    });
    expect(claude.last.body.thinking).toMatchObject({ type: "enabled" });
    expect(response.output.map((item) => item.type)).toEqual(["reasoning", "message"]);
    expect(response.output[0]).toMatchObject({
      summary: [{ type: "summary_text", text: THINKING.text }],
    });
    expect(response.output_text).toBe("Sunny.");
    expect(response.usage).toMatchObject({ input_tokens: 12, output_tokens: 30 });
  });

  it("streams thinking then a tool call: reasoning at 0, the call at 1, the SDK accumulates both", async () => {
    claude.queue({
      kind: "sse",
      steps: anthropicToolStreamSteps(
        [{ id: "toolu_1", name: "get_weather", jsonPieces: ['{"city":', '"Jakarta"}'] }],
        { thinking: THINKING },
      ),
    });
    const stream = openai.responses.stream({
      model: "claude-think",
      input: "Weather in Jakarta?",
      tools: [weather],
      reasoning: { effort: "medium", summary: "auto" },
    });
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const event of stream) events.push(event);
    const final = await stream.finalResponse();

    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    const added = events.filter((e) => e.type === "response.output_item.added");
    expect(added.map((e) => [e.output_index, e.item.type])).toEqual([
      [0, "reasoning"],
      [1, "function_call"],
    ]);
    const reasoningDone = events.findIndex(
      (e) => e.type === "response.output_item.done" && e.output_index === 0,
    );
    const callAdded = events.findIndex(
      (e) => e.type === "response.output_item.added" && e.output_index === 1,
    );
    expect(reasoningDone).toBeGreaterThan(0);
    expect(reasoningDone).toBeLessThan(callAdded);
    const deltas = events.filter((e) => e.type === "response.reasoning_summary_text.delta");
    expect(deltas.map((e) => e.delta).join("")).toBe(THINKING.text);

    expect(final.output.map((item) => item.type)).toEqual(["reasoning", "function_call"]);
    expect(final.output[0]).toMatchObject({
      summary: [{ type: "summary_text", text: THINKING.text }],
    });
    expect(final.output[1]).toMatchObject({
      name: "get_weather",
      arguments: '{"city":"Jakarta"}',
      call_id: "toolu_1",
    });

    // The next turn, chained: the summary stays with the gateway; Anthropic gets the signed
    // thinking the response kept (the client did not include it), the call and its result.
    claude.queue(anthropicJson("31 C in Jakarta.", { usage: [40, 8] }));
    const second = await openai.responses.create({
      model: "claude-think",
      previous_response_id: final.id,
      input: [{ type: "function_call_output", call_id: "toolu_1", output: "31 C" }],
      tools: [weather],
      reasoning: { effort: "medium", summary: "auto" },
    });
    expect(claude.refused).toEqual([]);
    expect(second.output.map((item) => item.type)).toEqual(["message"]);
    expect(second.output_text).toBe("31 C in Jakarta.");
    const messages = claude.last.body.messages as { role: string; content: unknown }[];
    expect(messages.map((m) => m.role)).toEqual(["user", "assistant", "user"]);
    expect(claude.last.body.thinking).toMatchObject({ type: "enabled" });
    expect(messages[1].content).toEqual([
      { type: "thinking", thinking: THINKING.text, signature: THINKING.signature },
      expect.objectContaining({ type: "tool_use", id: "toolu_1", name: "get_weather" }),
    ]);
    expect(messages[2].content).toEqual([
      expect.objectContaining({ type: "tool_result", tool_use_id: "toolu_1" }),
    ]);
  });
});

/**
 * What Codex sends: `store: false`, `include: ["reasoning.encrypted_content"]`, a stream, and on
 * the next turn every item it got back (reasoning items included) in `input`.
 */
const codex = {
  model: "claude-think",
  store: false,
  include: ["reasoning.encrypted_content" as const],
  reasoning: { effort: "medium" as const, summary: "auto" as const },
  tools: [weather],
  parallel_tool_calls: false,
};

/** A streamed turn as Codex reads it: the items of `response.output_item.done`, and the final response. */
async function codexTurn(input: OpenAI.Responses.ResponseInputItem[]) {
  const events = await openai.responses.create({ ...codex, input, stream: true });
  const items: OpenAI.Responses.ResponseOutputItem[] = [];
  let final: OpenAI.Responses.Response | undefined;
  for await (const event of events) {
    if (event.type === "response.output_item.done") items.push(event.item);
    if (event.type === "response.completed") final = event.response;
  }
  if (!final) throw new Error("the stream did not complete");
  return { items, final };
}

type AnthropicBody = { thinking?: unknown; messages: { role: string; content: unknown[] }[] };

describe("Codex on Claude: signed thinking through encrypted_content", () => {
  it("returns the signed thinking in the reasoning item's encrypted_content and sends it back before the tool_use on the next turn", async () => {
    claude.queue({
      kind: "sse",
      steps: anthropicToolStreamSteps(
        [{ id: "toolu_cx1", name: "get_weather", jsonPieces: ['{"city":', '"Jakarta"}'] }],
        { thinking: THINKING },
      ),
    });
    const user: OpenAI.Responses.ResponseInputItem = {
      role: "user",
      content: "Weather in Jakarta?",
    };
    const first = await codexTurn([user]);
    expect(first.items.map((item) => item.type)).toEqual(["reasoning", "function_call"]);
    const reasoning = first.items[0];
    if (reasoning.type !== "reasoning") throw new Error("expected a reasoning item");
    expect(reasoning.summary).toEqual([{ type: "summary_text", text: THINKING.text }]);
    // Opaque to the client: neither the thinking nor its signature can be read off it.
    expect(reasoning.encrypted_content).toEqual(expect.any(String));
    expect(reasoning.encrypted_content).not.toContain(THINKING.signature);
    expect(reasoning.encrypted_content).not.toContain("weather");
    expect(first.final.output[0]).toMatchObject({ encrypted_content: reasoning.encrypted_content });

    claude.queue({
      kind: "sse",
      steps: anthropicToolStreamSteps([], {
        thinking: { text: "Report it.", signature: "sig-2" },
        text: "31 C in Jakarta.",
      }),
    });
    const second = await codexTurn([
      user,
      ...(first.items as OpenAI.Responses.ResponseInputItem[]),
      { type: "function_call_output", call_id: "toolu_cx1", output: "31 C" },
    ]);
    expect(claude.refused).toEqual([]);
    expect(second.final.output.at(-1)).toMatchObject({
      type: "message",
      content: [{ type: "output_text", text: "31 C in Jakarta." }],
    });
    const sent = claude.last.body as AnthropicBody;
    // Thinking stays on through the loop: the signed block leads the assistant turn again.
    expect(sent.thinking).toMatchObject({ type: "enabled" });
    expect(sent.messages.map((m) => m.role)).toEqual(["user", "assistant", "user"]);
    expect(sent.messages[1].content).toEqual([
      { type: "thinking", thinking: THINKING.text, signature: THINKING.signature },
      expect.objectContaining({ type: "tool_use", id: "toolu_cx1" }),
    ]);
    expect(second.items.map((item) => item.type)).toEqual(["reasoning", "message"]);
  });

  it("carries redacted thinking too (JSON, no summary asked: a reasoning item with an empty summary)", async () => {
    claude.queue(
      anthropicJson(null, {
        thinking: THINKING,
        redacted: "EmwKAhgBEgy3va3pzix",
        toolUses: [{ id: "toolu_cx2", name: "get_weather", input: { city: "Jakarta" } }],
      }),
    );
    const ask = { ...codex, reasoning: { effort: "high" as const } };
    const user: OpenAI.Responses.ResponseInputItem = {
      role: "user",
      content: "Weather in Jakarta?",
    };
    const first = await openai.responses.create({ ...ask, input: [user] });
    expect(first.output.map((item) => item.type)).toEqual(["reasoning", "function_call"]);
    expect(first.output[0]).toEqual({
      type: "reasoning",
      id: expect.stringMatching(/^rs_/),
      summary: [],
      encrypted_content: expect.any(String),
    });

    claude.queue(anthropicJson("Sunny."));
    await openai.responses.create({
      ...ask,
      input: [
        user,
        ...(first.output as OpenAI.Responses.ResponseInputItem[]),
        { type: "function_call_output", call_id: "toolu_cx2", output: "sunny" },
      ],
    });
    expect(claude.refused).toEqual([]);
    const sent = claude.last.body as AnthropicBody;
    expect(sent.thinking).toMatchObject({ type: "enabled" });
    expect(sent.messages[1].content).toEqual([
      { type: "thinking", thinking: THINKING.text, signature: THINKING.signature },
      { type: "redacted_thinking", data: "EmwKAhgBEgy3va3pzix" },
      expect.objectContaining({ type: "tool_use", id: "toolu_cx2" }),
    ]);
  });

  it("a stored chain (previous_response_id) carries it too, from the reasoning item the response kept", async () => {
    claude.queue(
      anthropicJson(null, {
        thinking: THINKING,
        toolUses: [{ id: "toolu_cx4", name: "get_weather", input: { city: "Jakarta" } }],
      }),
    );
    const first = await openai.responses.create({
      ...codex,
      store: true,
      input: "Weather in Jakarta?",
    });
    claude.queue(anthropicJson("Sunny."));
    await openai.responses.create({
      ...codex,
      store: true,
      previous_response_id: first.id,
      input: [{ type: "function_call_output", call_id: "toolu_cx4", output: "sunny" }],
    });
    expect(claude.refused).toEqual([]);
    const sent = claude.last.body as AnthropicBody;
    expect(sent.thinking).toMatchObject({ type: "enabled" });
    expect(sent.messages[1].content[0]).toEqual({
      type: "thinking",
      thinking: THINKING.text,
      signature: THINKING.signature,
    });
  });

  it("gives no encrypted_content unless include asks for it, and sends on no reasoning it did not make", async () => {
    claude.queue(anthropicJson("Sunny.", { thinking: THINKING }));
    const plain = await openai.responses.create({
      ...codex,
      include: [],
      input: "Weather?",
    });
    expect(plain.output[0]).toEqual({
      type: "reasoning",
      id: expect.stringMatching(/^rs_/),
      summary: [{ type: "summary_text", text: THINKING.text }],
    });

    // Another API's encrypted reasoning (OpenAI's), and one altered: neither reaches Anthropic,
    // and the loop goes on without thinking, as Anthropic allows.
    for (const encrypted of ["gAAAAABo3Xq1-opaque-openai-token", "mgw1.bm90LWpzb24"]) {
      claude.queue(anthropicJson("Sunny."));
      const answer = await openai.responses.create({
        ...codex,
        input: [
          { role: "user", content: "Weather in Jakarta?" },
          { type: "reasoning", id: "rs_1", summary: [], encrypted_content: encrypted },
          {
            type: "function_call",
            call_id: "toolu_cx3",
            name: "get_weather",
            arguments: '{"city":"Jakarta"}',
          },
          { type: "function_call_output", call_id: "toolu_cx3", output: "sunny" },
        ],
      });
      expect(answer.output_text, encrypted).toBe("Sunny.");
      const sent = claude.last.body as AnthropicBody;
      expect(sent.thinking, encrypted).toBeUndefined();
      expect(sent.messages[1].content, encrypted).toEqual([
        expect.objectContaining({ type: "tool_use", id: "toolu_cx3" }),
      ]);
    }
    expect(claude.refused).toEqual([]);
  });

  it("the fake refuses what Anthropic refuses: a continued tool loop with thinking on whose turn lacks its signed thinking, or thinking altered", async () => {
    const send = (assistant: unknown[]) =>
      fetch(`${claude.baseUrl}/messages`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-api-key": "sk-ant-reasoning" },
        body: JSON.stringify({
          model: "claude-upstream",
          max_tokens: 4000,
          thinking: { type: "enabled", budget_tokens: 2000 },
          messages: [
            { role: "user", content: "Weather?" },
            { role: "assistant", content: assistant },
            { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_f" }] },
          ],
        }),
      });
    const call = { type: "tool_use", id: "toolu_f", name: "get_weather", input: {} };
    // The fake signed THINKING when it answered with it.
    claude.queue(anthropicJson("ok", { thinking: THINKING }));
    await openai.responses.create({ model: "claude-think", input: "Hi" });
    const refusedMessage = async (assistant: unknown[]) => {
      const answer = await send(assistant);
      expect(answer.status).toBe(400);
      return ((await answer.json()) as { error: { message: string } }).error.message;
    };
    expect(await refusedMessage([call])).toMatch(/must start with a thinking block/);
    expect(
      await refusedMessage([
        { type: "thinking", thinking: "Altered.", signature: THINKING.signature },
        call,
      ]),
    ).toMatch(/Invalid `signature`/);
    expect(await refusedMessage([{ type: "thinking", thinking: "x" }, call])).toMatch(
      /signature: Field required/,
    );
    claude.queue(anthropicJson("ok"));
    const kept = await send([
      { type: "thinking", thinking: THINKING.text, signature: THINKING.signature },
      call,
    ]);
    expect(kept.status).toBe(200);
  });
});
