import OpenAI from "openai";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import {
  anthropicContentJson,
  anthropicContentStreamSteps,
  anthropicJson,
  type FakeUpstream,
  fakeUpstream,
  type SseStep,
} from "./support/fake-upstream.js";
import { baseConfig, KEY, type TestGateway, testGateway } from "./support/gateway.js";

/**
 * Interleaved thinking (Claude thinking between its tool calls: thinking, a call, thinking, a call)
 * reaches a chat or Responses client in the order the model wrote it, whole and streamed, and goes
 * back to Anthropic in that order on the next turn: Anthropic refuses the latest assistant turn's
 * thinking moved (the fake too). And signed reasoning an OpenAI-compatible server (OpenRouter)
 * streams in pieces is put together per detail before it becomes a reasoning item's
 * `encrypted_content`.
 */

let claude: FakeUpstream;
let router: FakeUpstream;
let gw: TestGateway;
let openai: OpenAI;

beforeAll(async () => {
  claude = await fakeUpstream("anthropic");
  router = await fakeUpstream("openai");
  gw = await testGateway({
    config: baseConfig({
      providers: [
        ...(baseConfig().providers ?? []),
        { id: "an", wire: "anthropic", base_url: claude.baseUrl, api_keys: ["sk-ant-il"] },
        { id: "or", wire: "openai", base_url: router.baseUrl, api_keys: ["sk-or-il"] },
      ],
      models: [
        ...(baseConfig().models ?? []),
        {
          name: "claude-think",
          provider: "an",
          upstream_model: "claude-upstream",
          price_input_per_mtok: 1,
          price_output_per_mtok: 1,
          max_output_tokens: 64_000,
        },
        {
          name: "or-claude",
          provider: "or",
          upstream_model: "anthropic/claude-upstream",
          price_input_per_mtok: 1,
          price_output_per_mtok: 1,
          max_output_tokens: 64_000,
        },
      ],
    }),
  });
  openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 10_000 });
});
afterAll(async () => {
  await gw?.close();
  await claude?.close();
  await router?.close();
});
beforeEach(() => {
  claude.reset();
  router.reset();
});

type Json = Record<string, unknown>;

const FIRST = { text: "Two cities: look up Jakarta first.", signature: "sig-il-first" };
const SECOND = { text: "Jakarta done; now Bandung.", signature: "sig-il-second" };
const thinking = (t: { text: string; signature: string }) => ({
  type: "thinking",
  thinking: t.text,
  signature: t.signature,
});
const call = (id: string, city: string) => ({
  type: "tool_use",
  id,
  name: "get_weather",
  input: { city },
});

/** Claude's interleaved answer: thinking, a call, thinking, a call (the ids given). */
const interleaved = (ids: [string, string]) => [
  thinking(FIRST),
  call(ids[0], "Jakarta"),
  thinking(SECOND),
  call(ids[1], "Bandung"),
];

/** What Anthropic must get back as the assistant turn: the answer's blocks, in its order. */
const inOrder = (ids: [string, string]) => [
  thinking(FIRST),
  expect.objectContaining({ type: "tool_use", id: ids[0] }),
  thinking(SECOND),
  expect.objectContaining({ type: "tool_use", id: ids[1] }),
];

const chatTools: OpenAI.ChatCompletionTool[] = [
  {
    type: "function",
    function: {
      name: "get_weather",
      parameters: { type: "object", properties: { city: { type: "string" } } },
    },
  },
];
const weather: OpenAI.Responses.FunctionTool = {
  type: "function",
  name: "get_weather",
  parameters: { type: "object", properties: { city: { type: "string" } } },
  strict: false,
};

/** The assistant turn the fake Anthropic got last (the conversation's second message). */
const sentTurn = () => (claude.last.body.messages as { content: unknown[] }[])[1].content;

describe("the Anthropic fake, as Anthropic checks interleaved thinking sent back", () => {
  it("refuses the latest assistant turn's thinking moved among its calls, and takes it in order", async () => {
    claude.queue(anthropicContentJson(interleaved(["toolu_f1", "toolu_f2"])));
    await openai.chat.completions.create({
      model: "claude-think",
      messages: [{ role: "user", content: "Weather?" }],
    });
    const send = (assistant: unknown[]) =>
      fetch(`${claude.baseUrl}/messages`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-api-key": "sk-ant-il" },
        body: JSON.stringify({
          model: "claude-upstream",
          max_tokens: 4000,
          thinking: { type: "enabled", budget_tokens: 2000 },
          messages: [
            { role: "user", content: "Weather?" },
            { role: "assistant", content: assistant },
            {
              role: "user",
              content: [
                { type: "tool_result", tool_use_id: "toolu_f1", content: "31" },
                { type: "tool_result", tool_use_id: "toolu_f2", content: "24" },
              ],
            },
          ],
        }),
      });
    const grouped = await send([
      thinking(FIRST),
      thinking(SECOND),
      call("toolu_f1", "Jakarta"),
      call("toolu_f2", "Bandung"),
    ]);
    expect(grouped.status).toBe(400);
    expect(((await grouped.json()) as { error: { message: string } }).error.message).toBe(
      "messages.1.content.1: `thinking` or `redacted_thinking` blocks in the latest assistant message cannot be modified. These blocks must remain as they were in the original response.",
    );
    claude.queue(anthropicJson("ok"));
    const kept = await send(interleaved(["toolu_f1", "toolu_f2"]));
    expect(kept.status).toBe(200);
  });
});

describe("chat client -> anthropic wire: interleaved thinking", () => {
  /** The client's next turn: its assistant message as it got it, and both results. */
  async function nextTurn(assistant: Json, ids: [string, string]) {
    claude.queue(anthropicJson("Jakarta 31 C, Bandung 24 C."));
    const done = await openai.chat.completions.create({
      model: "claude-think",
      reasoning_effort: "medium",
      max_completion_tokens: 8_000,
      tools: chatTools,
      messages: [
        { role: "user", content: "Weather in Jakarta and Bandung?" },
        assistant as unknown as OpenAI.ChatCompletionAssistantMessageParam,
        { role: "tool", tool_call_id: ids[0], content: "31 C" },
        { role: "tool", tool_call_id: ids[1], content: "24 C" },
      ],
    });
    expect(claude.refused).toEqual([]);
    expect(done.choices[0].message.content).toBe("Jakarta 31 C, Bandung 24 C.");
    expect(claude.last.body.thinking).toMatchObject({ type: "enabled" });
    expect(sentTurn()).toEqual(inOrder(ids));
  }

  it("places each signed detail after the call it followed (JSON), and sends the turn back in the model's order", async () => {
    const ids: [string, string] = ["toolu_c1", "toolu_c2"];
    claude.queue(anthropicContentJson(interleaved(ids)));
    const first = await openai.chat.completions.create({
      model: "claude-think",
      reasoning_effort: "medium",
      max_completion_tokens: 8_000,
      tools: chatTools,
      messages: [{ role: "user", content: "Weather in Jakarta and Bandung?" }],
    });
    const message = first.choices[0].message as unknown as Json;
    expect(message.reasoning_content).toBe(FIRST.text + SECOND.text);
    expect(message.reasoning_details).toEqual([
      {
        type: "reasoning.text",
        text: FIRST.text,
        signature: FIRST.signature,
        format: "anthropic-claude-v1",
        index: 0,
      },
      {
        type: "reasoning.text",
        text: SECOND.text,
        signature: SECOND.signature,
        format: "anthropic-claude-v1",
        index: 1,
        after_tool_call_id: ids[0],
      },
    ]);
    expect((message.tool_calls as Json[]).map((c) => c.id)).toEqual(ids);
    await nextTurn(message, ids);
  });

  it("streams each detail between the calls where the model thought it; the collected turn goes back in order", async () => {
    const ids: [string, string] = ["toolu_c3", "toolu_c4"];
    claude.queue({ kind: "sse", steps: anthropicContentStreamSteps(interleaved(ids)) });
    const stream = await openai.chat.completions.create({
      model: "claude-think",
      reasoning_effort: "medium",
      max_completion_tokens: 8_000,
      tools: chatTools,
      messages: [{ role: "user", content: "Weather in Jakarta and Bandung?" }],
      stream: true,
    });
    // What the stream said, in order: a detail, or the first piece of a call.
    const order: string[] = [];
    const details: Json[] = [];
    const calls: { id: string; type: "function"; function: { name: string; arguments: string } }[] =
      [];
    for await (const chunk of stream) {
      const delta = (chunk.choices[0]?.delta ?? {}) as Json &
        OpenAI.ChatCompletionChunk.Choice.Delta;
      for (const detail of (delta.reasoning_details as Json[] | undefined) ?? []) {
        order.push(`detail ${String(detail.signature)}`);
        details.push(detail);
      }
      for (const piece of delta.tool_calls ?? []) {
        if (piece.id) {
          order.push(`call ${piece.id}`);
          calls[piece.index] = {
            id: piece.id,
            type: "function",
            function: { name: piece.function?.name ?? "", arguments: "" },
          };
        }
        if (piece.function?.arguments)
          calls[piece.index].function.arguments += piece.function.arguments;
      }
    }
    expect(order).toEqual([
      `detail ${FIRST.signature}`,
      `call ${ids[0]}`,
      `detail ${SECOND.signature}`,
      `call ${ids[1]}`,
    ]);
    expect(details[1]).toMatchObject({ after_tool_call_id: ids[0] });
    // The turn as a client that keeps every detail (as OpenRouter's clients do) sends it back.
    await nextTurn(
      { role: "assistant", content: null, reasoning_details: details, tool_calls: calls },
      ids,
    );
  });
});

/** What Codex sends: `store: false`, the signed reasoning included, a summary asked. */
const codex = {
  model: "claude-think",
  store: false,
  include: ["reasoning.encrypted_content" as const],
  reasoning: { effort: "medium" as const, summary: "auto" as const },
  tools: [weather],
};
const user: OpenAI.Responses.ResponseInputItem = {
  role: "user",
  content: "Weather in Jakarta and Bandung?",
};
const results = (ids: [string, string]): OpenAI.Responses.ResponseInputItem[] => [
  { type: "function_call_output", call_id: ids[0], output: "31 C" },
  { type: "function_call_output", call_id: ids[1], output: "24 C" },
];

/** An output's items by type, with a reasoning item's summary text and a call's id. */
function outline(output: OpenAI.Responses.ResponseOutputItem[]): string[] {
  return output.map((item) => {
    if (item.type === "reasoning") return `reasoning ${item.summary.map((s) => s.text).join("")}`;
    if (item.type === "function_call") return `call ${item.call_id}`;
    return item.type;
  });
}

describe("Responses client -> anthropic wire: interleaved thinking", () => {
  async function nextTurn(items: OpenAI.Responses.ResponseOutputItem[], ids: [string, string]) {
    claude.queue(anthropicJson("Jakarta 31 C, Bandung 24 C."));
    const done = await openai.responses.create({
      ...codex,
      input: [user, ...(items as OpenAI.Responses.ResponseInputItem[]), ...results(ids)],
    });
    expect(claude.refused).toEqual([]);
    expect(done.output_text).toBe("Jakarta 31 C, Bandung 24 C.");
    expect(claude.last.body.thinking).toMatchObject({ type: "enabled" });
    expect(sentTurn()).toEqual(inOrder(ids));
  }

  it("lists a reasoning item before each call it came before (JSON), and sends the items back in that order", async () => {
    const ids: [string, string] = ["toolu_r1", "toolu_r2"];
    claude.queue(anthropicContentJson(interleaved(ids)));
    const first = await openai.responses.create({ ...codex, input: [user] });
    expect(outline(first.output)).toEqual([
      `reasoning ${FIRST.text}`,
      `call ${ids[0]}`,
      `reasoning ${SECOND.text}`,
      `call ${ids[1]}`,
    ]);
    for (const at of [0, 2])
      expect(first.output[at]).toMatchObject({ encrypted_content: expect.any(String) });
    await nextTurn(first.output, ids);
  });

  it("streams them in the same order, and Codex's next turn goes back in it", async () => {
    const ids: [string, string] = ["toolu_r3", "toolu_r4"];
    claude.queue({ kind: "sse", steps: anthropicContentStreamSteps(interleaved(ids)) });
    const events = await openai.responses.create({ ...codex, input: [user], stream: true });
    const items: OpenAI.Responses.ResponseOutputItem[] = [];
    let final: OpenAI.Responses.Response | undefined;
    for await (const event of events) {
      if (event.type === "response.output_item.done") items.push(event.item);
      if (event.type === "response.completed") final = event.response;
    }
    const expected = [
      `reasoning ${FIRST.text}`,
      `call ${ids[0]}`,
      `reasoning ${SECOND.text}`,
      `call ${ids[1]}`,
    ];
    expect(outline(items)).toEqual(expected);
    expect(outline(final?.output ?? [])).toEqual(expected);
    await nextTurn(items, ids);
  });

  it("a stored chain (previous_response_id) sends the kept thinking back in the model's order", async () => {
    const ids: [string, string] = ["toolu_r5", "toolu_r6"];
    for (const stream of [false, true]) {
      claude.queue(
        stream
          ? { kind: "sse", steps: anthropicContentStreamSteps(interleaved(ids)) }
          : anthropicContentJson(interleaved(ids)),
      );
      // Neither the signed thinking included nor a summary asked: the response keeps it.
      const ask = {
        model: "claude-think",
        reasoning: { effort: "medium" as const },
        tools: [weather],
      };
      const first = await openai.responses.create({ ...ask, input: [user], stream });
      let id = "id" in first ? first.id : "";
      if (!("id" in first))
        for await (const event of first)
          if (event.type === "response.completed") id = event.response.id;
      claude.queue(anthropicJson("Jakarta 31 C, Bandung 24 C."));
      await openai.responses.create({ ...ask, previous_response_id: id, input: results(ids) });
      expect(claude.refused, `stream ${stream}`).toEqual([]);
      expect(sentTurn(), `stream ${stream}`).toEqual(inOrder(ids));
    }
  });
});

describe("signed reasoning an OpenAI-compatible server streams in pieces (OpenRouter)", () => {
  const chunk = (delta: Json, finish: string | null = null): SseStep => ({
    data: {
      id: "gen-1",
      object: "chat.completion.chunk",
      created: 1_700_000_000,
      model: "anthropic/claude-upstream",
      choices: [{ index: 0, delta, finish_reason: finish }],
    },
  });
  const format = "anthropic-claude-v1";
  /** OpenRouter's way: the thinking's text in pieces, its signature in a last piece, redacted thinking whole. */
  const pieces = (text: string, at: number): SseStep[] => [
    chunk({
      reasoning: text.slice(0, 9),
      reasoning_details: [{ type: "reasoning.text", text: text.slice(0, 9), format, index: at }],
    }),
    chunk({
      reasoning: text.slice(9),
      reasoning_details: [{ type: "reasoning.text", text: text.slice(9), format, index: at }],
    }),
    chunk({
      reasoning_details: [
        { type: "reasoning.text", text: "", signature: `sig-or-${at}`, format, index: at },
      ],
    }),
  ];
  const callChunk = (index: number, id: string, city: string): SseStep =>
    chunk({
      tool_calls: [
        {
          index,
          id,
          type: "function",
          function: { name: "get_weather", arguments: JSON.stringify({ city }) },
        },
      ],
    });

  it("becomes one encrypted_content per reasoning item, whole, which Anthropic takes back", async () => {
    router.queue({
      kind: "sse",
      steps: [
        chunk({ role: "assistant", content: "" }),
        ...pieces(FIRST.text, 0),
        chunk({
          reasoning_details: [
            { type: "reasoning.encrypted", data: "EmwKAhgB-redacted", format, index: 1 },
          ],
        }),
        callChunk(0, "toolu_o1", "Jakarta"),
        ...pieces(SECOND.text, 2),
        callChunk(1, "toolu_o2", "Bandung"),
        chunk({}, "tool_calls"),
        {
          data: {
            id: "gen-1",
            object: "chat.completion.chunk",
            created: 1_700_000_000,
            model: "anthropic/claude-upstream",
            choices: [],
            usage: { prompt_tokens: 20, completion_tokens: 30, total_tokens: 50 },
          },
        },
        { data: "[DONE]" },
      ],
    });
    const events = await openai.responses.create({
      ...codex,
      model: "or-claude",
      input: [user],
      stream: true,
    });
    const items: OpenAI.Responses.ResponseOutputItem[] = [];
    for await (const event of events)
      if (event.type === "response.output_item.done") items.push(event.item);
    expect(outline(items)).toEqual([
      `reasoning ${FIRST.text}`,
      "call toolu_o1",
      `reasoning ${SECOND.text}`,
      "call toolu_o2",
    ]);

    // The conversation goes on with Claude on Anthropic's own API: each thinking block whole,
    // with its signature, and the redacted one, where the model wrote them.
    claude.queue(anthropicJson("Jakarta 31 C, Bandung 24 C."));
    await openai.responses.create({
      ...codex,
      input: [
        user,
        ...(items as OpenAI.Responses.ResponseInputItem[]),
        ...results(["toolu_o1", "toolu_o2"]),
      ],
    });
    expect(claude.refused).toEqual([]);
    expect(sentTurn()).toEqual([
      { type: "thinking", thinking: FIRST.text, signature: "sig-or-0" },
      { type: "redacted_thinking", data: "EmwKAhgB-redacted" },
      expect.objectContaining({ type: "tool_use", id: "toolu_o1" }),
      { type: "thinking", thinking: SECOND.text, signature: "sig-or-2" },
      expect.objectContaining({ type: "tool_use", id: "toolu_o2" }),
    ]);
  });
});
