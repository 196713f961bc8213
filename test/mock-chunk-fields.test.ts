import OpenAI from "openai";
import type { ChatCompletionChunk } from "openai/resources/chat/completions";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { anthropicStreamSteps, type FakeUpstream, fakeUpstream } from "./support/fake-upstream.js";
import { baseConfigWith, KEY, type TestGateway, testGateway } from "./support/gateway.js";

/**
 * The fields of a chat answer a client reads beside its text, as OpenAI sends them: the
 * `service_tier` that served it on the completion and on every chunk, and with
 * `stream_options.include_usage` a `usage` of null on every chunk but the last, which carries the
 * usage and no choices. An app that waits for the first chunk whose usage is not null must find
 * it at the end, from the mock as from a provider. Read through the openai SDK.
 */

let gw: TestGateway;
let anthropicUpstream: FakeUpstream;
let openaiUpstream: FakeUpstream;
let openai: OpenAI;

beforeAll(async () => {
  anthropicUpstream = await fakeUpstream("anthropic");
  openaiUpstream = await fakeUpstream("openai");
  gw = await testGateway({
    config: baseConfigWith({
      providers: [
        { id: "an", wire: "anthropic", base_url: anthropicUpstream.baseUrl, api_keys: ["sk-an"] },
        { id: "oa", wire: "openai", base_url: openaiUpstream.baseUrl, api_keys: ["sk-oa"] },
      ],
      models: [
        { name: "claude-x", provider: "an", upstream_model: "claude-up" },
        { name: "gpt-x", provider: "oa", upstream_model: "gpt-up" },
      ],
    }),
  });
  openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 10_000 });
});
afterAll(async () => {
  await gw?.close();
  await anthropicUpstream?.close();
  await openaiUpstream?.close();
});
afterEach(() => {
  anthropicUpstream.reset();
  openaiUpstream.reset();
});

const user = (content: string) => [{ role: "user" as const, content }];

async function chunksOf(
  params: Omit<OpenAI.ChatCompletionCreateParamsStreaming, "stream">,
): Promise<ChatCompletionChunk[]> {
  const stream = await openai.chat.completions.create({ ...params, stream: true });
  const chunks: ChatCompletionChunk[] = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

/** What an app that reads usage as OpenAI documents it does: null until the last chunk. */
function usageAsDocumented(chunks: ChatCompletionChunk[]) {
  const last = chunks[chunks.length - 1]!;
  const before = chunks.slice(0, -1);
  return {
    nullBefore: before.every((chunk) => chunk.usage === null),
    firstWithUsage: chunks.findIndex((chunk) => chunk.usage !== null),
    last,
  };
}

describe("the mock's chat answers", () => {
  it("name the service tier that served them, as OpenAI's do: default unless the request asks for another", async () => {
    const one = await openai.chat.completions.create({ model: "mock-gpt", messages: user("hi") });
    expect(one.service_tier).toBe("default");
    const several = await openai.chat.completions.create({
      model: "mock-gpt",
      messages: user("hi"),
      n: 2,
      service_tier: "auto",
    });
    expect(several.choices).toHaveLength(2);
    expect(several.service_tier).toBe("default");
    const flex = await openai.chat.completions.create({
      model: "mock-gpt",
      messages: user("hi"),
      service_tier: "flex",
    });
    expect(flex.service_tier).toBe("flex");
    // OpenAI answers fast mode as the priority tier it runs on.
    const fast = await chunksOf({ model: "mock-gpt", messages: user("hi"), service_tier: "fast" });
    expect(fast.map((chunk) => chunk.service_tier)).toEqual(fast.map(() => "priority"));
  });

  it.each([1, 3])(
    "stream with include_usage and n=%i: every chunk has usage null but the last, which has the usage and no choices",
    async (n) => {
      const chunks = await chunksOf({
        model: "mock-gpt",
        messages: user("hello [[mock:words=6]]"),
        n,
        stream_options: { include_usage: true },
      });
      const { nullBefore, firstWithUsage, last } = usageAsDocumented(chunks);
      expect(nullBefore).toBe(true);
      expect(firstWithUsage).toBe(chunks.length - 1);
      expect(last.choices).toEqual([]);
      expect(last.usage!.completion_tokens).toBeGreaterThan(0);
      expect(last.usage!.total_tokens).toBe(
        last.usage!.prompt_tokens + last.usage!.completion_tokens,
      );
      // Each choice was finished before the usage came.
      const finished = chunks.flatMap((chunk) =>
        chunk.choices.filter((c) => c.finish_reason !== null).map((c) => c.index),
      );
      expect(finished.sort()).toEqual(Array.from({ length: n }, (_, i) => i));
      expect(chunks.map((chunk) => chunk.service_tier)).toEqual(chunks.map(() => "default"));
    },
  );

  it("stream without include_usage: no chunk carries a usage field, and every one names its tier", async () => {
    const chunks = await chunksOf({ model: "mock-gpt", messages: user("hello"), n: 2 });
    expect(chunks.length).toBeGreaterThan(2);
    expect(chunks.filter((chunk) => "usage" in chunk)).toEqual([]);
    expect(chunks.every((chunk) => chunk.choices.length > 0)).toBe(true);
    expect(chunks.map((chunk) => chunk.service_tier)).toEqual(chunks.map(() => "default"));
  });
});

describe("a provider's chat stream", () => {
  it("translated from the messages wire: usage null on every chunk but the last, as OpenAI's", async () => {
    anthropicUpstream.queue({
      kind: "sse",
      steps: anthropicStreamSteps(["Hel", "lo"], { usage: [9, 4], serviceTier: "standard" }),
    });
    const chunks = await chunksOf({
      model: "claude-x",
      messages: user("hi"),
      stream_options: { include_usage: true },
    });
    const { nullBefore, firstWithUsage, last } = usageAsDocumented(chunks);
    expect(nullBefore).toBe(true);
    expect(firstWithUsage).toBe(chunks.length - 1);
    expect(last).toMatchObject({ choices: [], usage: { prompt_tokens: 9, completion_tokens: 4 } });
    expect(chunks.map((chunk) => chunk.service_tier)).toEqual(chunks.map(() => "default"));
  });

  it("from an OpenAI-compatible provider: its usage and service_tier fields go on as it sent them", async () => {
    const base = {
      id: "chatcmpl-up",
      object: "chat.completion.chunk",
      created: 1,
      model: "gpt-up",
    };
    const piece = (delta: object, finish: string | null = null) => ({
      ...base,
      service_tier: "flex",
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
      usage: null,
    });
    openaiUpstream.queue({
      kind: "sse",
      steps: [
        { data: piece({ role: "assistant", content: "" }) },
        { data: piece({ content: "Hi" }) },
        { data: piece({}, "stop") },
        {
          data: {
            ...base,
            service_tier: "flex",
            choices: [],
            usage: { prompt_tokens: 5, completion_tokens: 1, total_tokens: 6 },
          },
        },
        { data: "[DONE]" },
      ],
    });
    const chunks = await chunksOf({
      model: "gpt-x",
      messages: user("hi"),
      service_tier: "flex",
      stream_options: { include_usage: true },
    });
    expect(chunks.map((chunk) => [chunk.model, chunk.service_tier, chunk.usage])).toEqual([
      ["gpt-x", "flex", null],
      ["gpt-x", "flex", null],
      ["gpt-x", "flex", null],
      ["gpt-x", "flex", { prompt_tokens: 5, completion_tokens: 1, total_tokens: 6 }],
    ]);
  });
});
