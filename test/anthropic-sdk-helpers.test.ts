import Anthropic, { type APIError } from "@anthropic-ai/sdk";
import { describe, expect, it } from "vitest";
import type { FakeUpstream, SseStep } from "./support/fake-upstream.js";
import { useThreeWires } from "./support/three-wires.js";

/**
 * The official Anthropic SDK's helpers (messages.stream()'s events, beta.files) against models of
 * other wires: what its helpers hand the app must match what the model said.
 */

let oa: FakeUpstream;
let anthropic: Anthropic;
useThreeWires({
  maxOutputTokens: 1000,
  ready: (w) => {
    ({ oa, anthropic } = w);
  },
});

const chunk = (delta: Record<string, unknown>, finish: string | null = null) => ({
  id: "chatcmpl-x",
  object: "chat.completion.chunk",
  created: 1,
  model: "gpt-up",
  choices: [{ index: 0, delta, finish_reason: finish }],
});
const usageChunk = {
  id: "chatcmpl-x",
  object: "chat.completion.chunk",
  created: 1,
  model: "gpt-up",
  choices: [],
  usage: { prompt_tokens: 20, completion_tokens: 30, total_tokens: 50 },
};
const call = (index: number, fn: Record<string, unknown>, id?: string) =>
  chunk({ tool_calls: [{ index, ...(id ? { id, type: "function" } : {}), function: fn }] });

const tools: Anthropic.Tool[] = [
  { name: "weather", input_schema: { type: "object", properties: { city: { type: "string" } } } },
  { name: "time", input_schema: { type: "object", properties: { tz: { type: "string" } } } },
];

describe("messages.stream() over an openai-wire model's parallel tool calls", () => {
  it("hands each tool_use block to contentBlock with its whole input when the calls' arguments arrive interleaved", async () => {
    // Chat-completions streams key each argument piece by the call's index, so a server may
    // interleave two calls' pieces (vLLM, LiteLLM proxies and others do).
    const steps: SseStep[] = [
      { data: chunk({ role: "assistant", content: "" }) },
      { data: chunk({ content: "Checking." }) },
      { data: call(0, { name: "weather", arguments: "" }, "call_a") },
      { data: call(0, { arguments: '{"city":' }) },
      { data: call(1, { name: "time", arguments: '{"tz"' }, "call_b") },
      { data: call(0, { arguments: '"Paris"}' }) },
      { data: call(1, { arguments: ':"UTC"}' }) },
      { data: chunk({}, "tool_calls") },
      { data: usageChunk },
      { data: "[DONE]" },
    ];
    oa.queue({ kind: "sse", steps });
    const stream = anthropic.messages.stream({
      model: "h-openai",
      max_tokens: 500,
      messages: [{ role: "user", content: "Weather and time in Paris?" }],
      tools,
    });
    const blocks: Anthropic.ContentBlock[] = [];
    const inputs: unknown[] = [];
    const late: Anthropic.RawMessageStreamEvent[] = [];
    const stopped = new Set<number>();
    stream.on("contentBlock", (block) => blocks.push(structuredClone(block)));
    stream.on("inputJson", (_delta, snapshot) => inputs.push(structuredClone(snapshot)));
    stream.on("streamEvent", (event) => {
      if (event.type === "content_block_stop") stopped.add(event.index);
      if (event.type === "content_block_delta" && stopped.has(event.index)) late.push(event);
    });
    const final = await stream.finalMessage();
    expect(final.content.filter((b) => b.type === "tool_use").map((b) => b.input)).toEqual([
      { city: "Paris" },
      { tz: "UTC" },
    ]);
    // Anthropic's stream never writes a block's delta after its content_block_stop: the SDK reads
    // a delta against the last block it opened.
    expect(late).toEqual([]);
    expect(blocks.filter((b) => b.type === "tool_use").map((b) => b.input)).toEqual([
      { city: "Paris" },
      { tz: "UTC" },
    ]);
    expect(inputs.at(-1)).toEqual({ tz: "UTC" });
  });

  it("still streams calls that come one after another as soon as each starts", async () => {
    const steps: SseStep[] = [
      { data: chunk({ role: "assistant", content: "" }) },
      { data: call(0, { name: "weather", arguments: "" }, "call_a") },
      { data: call(0, { arguments: '{"city":"Paris"}' }) },
      { data: call(1, { name: "time", arguments: '{"tz":"UTC"}' }, "call_b") },
      { data: chunk({}, "tool_calls") },
      { data: usageChunk },
      { data: "[DONE]" },
    ];
    oa.queue({ kind: "sse", steps });
    const stream = anthropic.messages.stream({
      model: "h-openai",
      max_tokens: 500,
      messages: [{ role: "user", content: "Weather and time in Paris?" }],
      tools,
    });
    const blocks: Anthropic.ContentBlock[] = [];
    stream.on("contentBlock", (block) => blocks.push(structuredClone(block)));
    const final = await stream.finalMessage();
    expect(final.stop_reason).toBe("tool_use");
    expect(blocks.map((b) => (b.type === "tool_use" ? [b.name, b.input] : b.type))).toEqual([
      ["weather", { city: "Paris" }],
      ["time", { tz: "UTC" }],
    ]);
  });
});

describe("beta.files toward the gateway", () => {
  it("refuses retrieveMetadata of an unknown file with a not_found_error in the messages style", async () => {
    const err = await anthropic.beta.files.retrieveMetadata("file_unknown").then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(Anthropic.NotFoundError);
    expect((err as APIError).error).toMatchObject({
      type: "error",
      error: { type: "not_found_error" },
    });
  });

  it("refuses list and upload in the messages style", async () => {
    for (const call of [
      () => anthropic.beta.files.list(),
      () =>
        anthropic.beta.files.upload({ file: new File(["hi"], "a.txt", { type: "text/plain" }) }),
      () =>
        anthropic.messages.batches.create({
          requests: [
            {
              custom_id: "a",
              params: {
                model: "h-openai",
                max_tokens: 10,
                messages: [{ role: "user", content: "x" }],
              },
            },
          ],
        }),
    ]) {
      const err = (await call().then(
        () => undefined,
        (e: unknown) => e,
      )) as APIError;
      // An API the gateway does not serve is named as such, not a path it does not know.
      expect(err).toBeInstanceOf(Anthropic.BadRequestError);
      expect(err.status).toBe(400);
      expect(err.error).toMatchObject({ type: "error", error: { type: "invalid_request_error" } });
      expect(err.message).toContain("not served by this gateway");
    }
  });
});
