import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { idleMoney, money } from "./support/api.js";
import {
  anyStyleHeaders,
  type EveryWireGateway,
  gatewayOnEveryWire,
  modelOn,
} from "./support/every-wire.js";
import { deferred, type RecordedRequest, type Reply } from "./support/fake-upstream.js";
import { backends, post } from "./support/gateway.js";
import { logged, requestTextTokens } from "./support/metering.js";
import { streamEvents } from "./support/sse.js";

/**
 * A chat stream that starts a second tool call while the first one's arguments are not whole: a
 * messages client gets one block at a time, so the second call waits in the gateway. A client
 * that leaves then is billed what it was written, never the call it did not get.
 */

const PRICE_IN = 1_000;
const PRICE_OUT = 2_000;
const TEXT = "Let me look up both cities. ";
const FIRST = { name: "get_weather", args: ['{"city": "Par', "is, France mkargs"] };
const SECOND = { name: "get_forecast_for_days", args: '{"city": "Berlin and more", "days": 3}' };

describe.each(backends)("a tool call held back, on %s", (backend) => {
  let gateway: EveryWireGateway;
  const gate = deferred();
  let body: Record<string, unknown> = {};

  beforeAll(async () => {
    const chunk = (delta: object, finish: string | null = null) => ({
      id: "chatcmpl-up",
      object: "chat.completion.chunk",
      created: 1_700_000_000,
      model: "gpt-up",
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
    });
    const call = (index: number, fn: object, id?: string) => ({
      tool_calls: [{ index, ...(id ? { id, type: "function" } : {}), function: fn }],
    });
    const reply = (req: RecordedRequest): Reply => {
      body = req.body;
      return {
        kind: "sse",
        steps: [
          { data: chunk({ role: "assistant", content: "" }) },
          { data: chunk({ content: TEXT }) },
          { data: chunk(call(0, { name: FIRST.name, arguments: "" }, "call_1")) },
          { data: chunk(call(0, { arguments: FIRST.args[0] })) },
          // The second call begins while the first's JSON is open: held by the translation, while
          // the first's next piece is written.
          { data: chunk(call(1, { name: SECOND.name, arguments: SECOND.args }, "call_2")) },
          { data: chunk(call(0, { arguments: FIRST.args[1] })) },
          { data: chunk(call(0, { arguments: '"}' })), gate: gate.promise },
          { data: chunk({}, "tool_calls") },
          { data: "[DONE]" },
        ],
      };
    };
    gateway = await gatewayOnEveryWire({
      backend,
      replies: { openai: reply, anthropic: reply, gemini: reply },
      mock: { chunk_interval_ms: 10 },
      prices: { input: PRICE_IN, output: PRICE_OUT },
    });
  });
  afterAll(async () => {
    gate.resolve();
    await gateway?.close();
  });

  it("a messages client that leaves before the second call's block opens is not billed that call", async () => {
    const { gw } = gateway;
    const before = await money(gw);
    const abort = new AbortController();
    const res = await post(
      gw,
      "/v1/messages",
      {
        model: modelOn("openai"),
        stream: true,
        max_tokens: 500,
        messages: [{ role: "user", content: "the weather in Paris and Berlin" }],
      },
      anyStyleHeaders,
      abort.signal,
    );
    expect(res.status).toBe(200);
    const read: string[] = [];
    try {
      for await (const { event, data } of streamEvents<Record<string, never>>(res)) {
        const d = data as unknown as {
          content_block?: { type: string; name: string };
          delta?: { text?: string; partial_json?: string };
        };
        if (event === "content_block_start" && d.content_block?.type === "tool_use")
          read.push(d.content_block.name);
        for (const text of [d.delta?.text, d.delta?.partial_json])
          if (typeof text === "string" && text !== "") read.push(text);
        if (JSON.stringify(data).includes("mkargs")) break;
      }
    } finally {
      abort.abort();
    }
    expect(read).toEqual([TEXT, FIRST.name, ...FIRST.args]);
    let rows = await logged(gw);
    for (let i = 0; i < 500 && rows.length === 0; i++) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      rows = await logged(gw);
    }
    gate.resolve();
    const after = await idleMoney(gw);
    expect(rows).toHaveLength(1);
    const [row] = rows;
    expect(row.error_code).toBe("client_closed");
    const written = [TEXT, FIRST.name, ...FIRST.args].join("").length;
    expect(row.usage).toEqual({
      input_tokens: requestTextTokens(body),
      output_tokens: Math.ceil(written / 4),
    });
    expect(row.cost_micro).toBe(
      row.usage.input_tokens * PRICE_IN + row.usage.output_tokens * PRICE_OUT,
    );
    expect(before.balance - after.balance).toBe(row.cost_micro);
    expect(after.held).toBe(0);
  });
});
