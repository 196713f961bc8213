import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { idleMoney, money } from "./support/api.js";
import {
  anyStyleHeaders,
  type EveryWireGateway,
  gatewayOnEveryWire,
  modelOn,
  type Wire,
  wires,
} from "./support/every-wire.js";
import type { RecordedRequest, Reply, SseStep } from "./support/fake-upstream.js";
import { backends, post, type TestGateway } from "./support/gateway.js";
import { deliveredTokens, loggedAs } from "./support/metering.js";
import { streamEvents } from "./support/sse.js";

/**
 * A tool call is output the model wrote: a client that leaves a stream once it has a call's name,
 * before the call's arguments are complete, is charged at least for the name, on every client
 * style x every upstream wire, on both backends. The text-only matrix is metering-matrix.test.ts.
 */

type Style = "chat" | "messages" | "responses";

const TOOL = "get_current_weather_in_city";
/** The arguments in pieces, each written well after the one before: the client leaves first. */
const ARGUMENT_PIECES = ['{"city":', ' "Oslo",', ' "unit":', ' "celsius",', ' "days": 3}'];
const PIECE_GAP_MS = 150;
const PRICE_IN = 1_000;
const PRICE_OUT = 2_000;

function openaiReply(req: RecordedRequest): Reply {
  const base = { id: "chatcmpl-tool", created: 1, model: String(req.body.model) };
  const chunk = (delta: object, finish: string | null = null) => ({
    ...base,
    object: "chat.completion.chunk",
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
  });
  const steps: SseStep[] = [
    { data: chunk({ role: "assistant", content: null }) },
    {
      data: chunk({
        tool_calls: [
          { index: 0, id: "call_1", type: "function", function: { name: TOOL, arguments: "" } },
        ],
      }),
    },
    ...ARGUMENT_PIECES.map((piece) => ({
      data: chunk({ tool_calls: [{ index: 0, function: { arguments: piece } }] }),
      delayMs: PIECE_GAP_MS,
    })),
    { data: chunk({}, "tool_calls") },
  ];
  if ((req.body.stream_options as { include_usage?: boolean } | undefined)?.include_usage)
    steps.push({
      data: {
        ...base,
        object: "chat.completion.chunk",
        choices: [],
        usage: { prompt_tokens: 40, completion_tokens: 25, total_tokens: 65 },
      },
    });
  steps.push({ data: "[DONE]" });
  return { kind: "sse", steps };
}

function anthropicReply(req: RecordedRequest): Reply {
  const steps: SseStep[] = [
    {
      event: "message_start",
      data: {
        type: "message_start",
        message: {
          id: "msg_tool",
          type: "message",
          role: "assistant",
          model: String(req.body.model),
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: { input_tokens: 40, output_tokens: 1 },
        },
      },
    },
    {
      event: "content_block_start",
      data: {
        type: "content_block_start",
        index: 0,
        content_block: { type: "tool_use", id: "toolu_1", name: TOOL, input: {} },
      },
    },
    ...ARGUMENT_PIECES.map((piece) => ({
      event: "content_block_delta",
      data: {
        type: "content_block_delta",
        index: 0,
        delta: { type: "input_json_delta", partial_json: piece },
      },
      delayMs: PIECE_GAP_MS,
    })),
    { event: "content_block_stop", data: { type: "content_block_stop", index: 0 } },
    {
      event: "message_delta",
      data: {
        type: "message_delta",
        delta: { stop_reason: "tool_use", stop_sequence: null },
        usage: { output_tokens: 25 },
      },
    },
    { event: "message_stop", data: { type: "message_stop" } },
  ];
  return { kind: "sse", steps };
}

/** Gemini sends a call whole in one part; the turn's finish comes in a later event. */
function geminiReply(): Reply {
  const usage = (output: number) => ({
    promptTokenCount: 40,
    candidatesTokenCount: output,
    totalTokenCount: 40 + output,
  });
  const call = { functionCall: { name: TOOL, args: { city: "Oslo", unit: "celsius", days: 3 } } };
  return {
    kind: "sse",
    steps: [
      {
        data: {
          candidates: [{ content: { role: "model", parts: [call] }, index: 0 }],
          usageMetadata: usage(20),
          modelVersion: "gemini-up",
        },
      },
      {
        data: {
          candidates: [{ content: { role: "model", parts: [] }, finishReason: "STOP", index: 0 }],
          usageMetadata: usage(25),
          modelVersion: "gemini-up",
        },
        delayMs: PIECE_GAP_MS * ARGUMENT_PIECES.length,
      },
    ],
  };
}

function requestBody(style: Style, model: string): { path: string; body: object } {
  const parameters = {
    type: "object",
    properties: { city: { type: "string" }, unit: { type: "string" }, days: { type: "integer" } },
    required: ["city"],
  };
  const prompt = "weather in Oslo?";
  if (style === "chat")
    return {
      path: "/v1/chat/completions",
      body: {
        model,
        stream: true,
        stream_options: { include_usage: true },
        messages: [{ role: "user", content: prompt }],
        tools: [{ type: "function", function: { name: TOOL, parameters } }],
      },
    };
  if (style === "messages")
    return {
      path: "/v1/messages",
      body: {
        model,
        stream: true,
        max_tokens: 500,
        messages: [{ role: "user", content: prompt }],
        tools: [{ name: TOOL, input_schema: parameters }],
      },
    };
  return {
    path: "/v1/responses",
    body: {
      model,
      stream: true,
      input: prompt,
      tools: [{ type: "function", name: TOOL, parameters }],
    },
  };
}

/** The call's name, if this event of the client's style is the one that first carries it. */
function callName(style: Style, event: string | undefined, data: unknown): string | undefined {
  // biome-ignore lint/suspicious/noExplicitAny: each style has its own fields.
  const d = data as any;
  if (style === "chat") return d?.choices?.[0]?.delta?.tool_calls?.[0]?.function?.name;
  if (style === "messages")
    return event === "content_block_start" && d.content_block?.type === "tool_use"
      ? d.content_block.name
      : undefined;
  return event === "response.output_item.added" && d.item?.type === "function_call"
    ? d.item.name
    : undefined;
}

const cases = wires.flatMap((wire: Wire) =>
  (["chat", "messages", "responses"] as const).map((style: Style) => ({ wire, style })),
);

describe.each(backends)("a tool call left after its name, on %s", (backend) => {
  let gw: TestGateway;
  let gateway: EveryWireGateway;

  beforeAll(async () => {
    gateway = await gatewayOnEveryWire({
      backend,
      replies: { openai: openaiReply, anthropic: anthropicReply, gemini: geminiReply },
      mock: { chunk_interval_ms: PIECE_GAP_MS },
      mockScript: [
        {
          match: { tools_offered: TOOL },
          reply: {
            tool_calls: [
              // Long, so that the mock streams it in many pieces (a scripted call's text must be
              // a JSON object's).
              {
                name: TOOL,
                arguments: JSON.stringify({
                  city: "Oslo",
                  notes: ARGUMENT_PIECES.join("").repeat(4),
                }),
              },
            ],
          },
        },
      ],
      prices: { input: PRICE_IN, output: PRICE_OUT },
    });
    gw = gateway.gw;
  });

  afterAll(() => gateway?.close());

  it.each(cases)("$style -> $wire", async ({ wire, style }) => {
    const before = await money(gw);
    const { path, body } = requestBody(style, modelOn(wire));
    const abort = new AbortController();
    const res = await post(gw, path, body, anyStyleHeaders, abort.signal);
    expect(res.status).toBe(200);
    const id = res.headers.get("x-request-id") ?? "";
    let name: string | undefined;
    try {
      for await (const { event, data } of streamEvents(res)) {
        name = callName(style, event, data);
        if (name) break;
      }
    } finally {
      abort.abort();
    }
    expect(name).toBe(TOOL);
    const row = await loggedAs(gw.services.store, "acct", id, "client_closed");
    const context = JSON.stringify(row);
    expect(row?.error_code, context).toBe("client_closed");
    expect(row?.output_tokens, context).toBeGreaterThanOrEqual(deliveredTokens([TOOL]));
    const cost = row!.input_tokens * PRICE_IN + row!.output_tokens * PRICE_OUT;
    expect(row?.cost_micro, context).toBe(cost);
    const after = await idleMoney(gw);
    expect(after.held).toBe(0);
    expect(before.balance - after.balance).toBe(cost);
  });
});
