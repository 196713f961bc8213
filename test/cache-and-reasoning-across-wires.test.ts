import type Anthropic from "@anthropic-ai/sdk";
import type OpenAI from "openai";
import { describe, expect, it } from "vitest";
import type { FakeUpstream, SseStep } from "./support/fake-upstream.js";
import type { TestGateway } from "./support/gateway.js";
import { logged } from "./support/metering.js";
import { outcomeOf, useThreeWires } from "./support/three-wires.js";

/**
 * Prompt caching and reasoning across the wires, with the newest SDKs (openai 7.57,
 * @anthropic-ai/sdk 1.14): Anthropic's `cache_control` and OpenAI's `prompt_cache_breakpoint` and
 * `prompt_cache_options` reach the other API's markers (or are refused with a 400 naming them),
 * cached input comes back in the client's own usage fields and is charged as input, and reasoning
 * settings turn thinking on or off as the client asked. The fakes refuse what the real APIs refuse:
 * Anthropic's five markers, a `1h` marker after a `5m` one, a budget under 1024 or not under
 * `max_tokens`, and each API's refusal of the other's fields.
 */

let oa: FakeUpstream;
let an: FakeUpstream;
let gm: FakeUpstream;
let gw: TestGateway;
let openai: OpenAI;
let anthropic: Anthropic;
useThreeWires({
  maxOutputTokens: 4000,
  extra: ({ oa }) => ({
    // The fake's address is not OpenAI's host: breakpoints are asked for, as OpenAI's API takes.
    providers: [
      {
        id: "oa-cache",
        wire: "openai",
        base_url: oa.baseUrl,
        api_keys: ["sk-oa"],
        prompt_cache_breakpoints: true,
      },
    ],
    models: [
      { name: "c-openai", provider: "oa-cache", upstream_model: "gpt-up" },
      // Priced apart, so a charge tells input from output.
      ...[
        { name: "p-openai", provider: "oa", upstream_model: "gpt-up" },
        { name: "p-anthropic", provider: "an", upstream_model: "claude-up" },
        { name: "p-gemini", provider: "gm", upstream_model: "gemini-up" },
      ].map((m) => ({ ...m, price_input_per_mtok: 3, price_output_per_mtok: 7 })),
    ],
  }),
  ready: (wires) => {
    ({ oa, an, gm, gw, openai, anthropic } = wires);
  },
});

type Json = Record<string, unknown>;

const sent = (upstream: FakeUpstream) => upstream.last.body;
const sentMessages = (upstream: FakeUpstream) => sent(upstream).messages as Json[];

// ---- answers the fakes give, with cached input ----------------------------------------------

/** An Anthropic answer whose input was 10 new tokens, 100 read from the cache, 50 written to it. */
const anthropicCached = {
  kind: "json" as const,
  body: {
    id: "msg_cached",
    type: "message",
    role: "assistant",
    model: "claude-up",
    content: [{ type: "text", text: "Cached." }],
    stop_reason: "end_turn",
    stop_sequence: null,
    usage: {
      input_tokens: 10,
      cache_read_input_tokens: 100,
      cache_creation_input_tokens: 50,
      output_tokens: 5,
    },
  },
};

/** The same answer streamed; `delta` is what message_delta's usage says at the end. */
function anthropicCachedStream(delta: Json = { output_tokens: 5 }): SseStep[] {
  const event = (data: Json): SseStep => ({ event: String(data.type), data });
  return [
    event({
      type: "message_start",
      message: {
        id: "msg_cached",
        type: "message",
        role: "assistant",
        model: "claude-up",
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: {
          input_tokens: 10,
          cache_read_input_tokens: 100,
          cache_creation_input_tokens: 50,
          output_tokens: 1,
        },
      },
    }),
    event({ type: "content_block_start", index: 0, content_block: { type: "text", text: "" } }),
    event({
      type: "content_block_delta",
      index: 0,
      delta: { type: "text_delta", text: "Cached." },
    }),
    event({ type: "content_block_stop", index: 0 }),
    event({
      type: "message_delta",
      delta: { stop_reason: "end_turn", stop_sequence: null },
      usage: delta,
    }),
    event({ type: "message_stop" }),
  ];
}

/** OpenAI's usage for 160 prompt tokens, 100 of them read from the cache and 50 written. */
const openaiCachedUsage = {
  prompt_tokens: 160,
  completion_tokens: 5,
  total_tokens: 165,
  prompt_tokens_details: { cached_tokens: 100, cache_write_tokens: 50 },
};

const openaiCached = {
  kind: "json" as const,
  body: {
    id: "chatcmpl-cached",
    object: "chat.completion",
    created: 1_700_000_000,
    model: "gpt-up",
    choices: [
      {
        index: 0,
        message: { role: "assistant", content: "Cached." },
        logprobs: null,
        finish_reason: "stop",
      },
    ],
    usage: openaiCachedUsage,
  },
};

function openaiCachedStream(): SseStep[] {
  const chunk = (choices: Json[], usage?: Json): SseStep => ({
    data: {
      id: "chatcmpl-cached",
      object: "chat.completion.chunk",
      created: 1_700_000_000,
      model: "gpt-up",
      choices,
      ...(usage ? { usage } : {}),
    },
  });
  return [
    chunk([{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }]),
    chunk([{ index: 0, delta: { content: "Cached." }, finish_reason: null }]),
    chunk([{ index: 0, delta: {}, finish_reason: "stop" }]),
    chunk([], openaiCachedUsage),
    { data: "[DONE]" },
  ];
}

/** Gemini's usage for 160 prompt tokens, 100 of them from its (implicit) cache. */
const geminiCachedUsage = {
  promptTokenCount: 160,
  cachedContentTokenCount: 100,
  candidatesTokenCount: 5,
  totalTokenCount: 165,
};

const geminiCached = {
  kind: "json" as const,
  body: {
    candidates: [
      { content: { role: "model", parts: [{ text: "Cached." }] }, finishReason: "STOP", index: 0 },
    ],
    usageMetadata: geminiCachedUsage,
    modelVersion: "gemini-up",
  },
};

function geminiCachedStream(): SseStep[] {
  return [
    {
      data: {
        candidates: [
          {
            content: { role: "model", parts: [{ text: "Cached." }] },
            finishReason: "STOP",
            index: 0,
          },
        ],
        usageMetadata: geminiCachedUsage,
        modelVersion: "gemini-up",
      },
    },
  ];
}

// ---- Anthropic's cache_control toward the other wires ----------------------------------------

const explicit = { mode: "explicit" };

describe("Anthropic cache_control toward an openai-wire model that takes breakpoints (OpenAI's API)", () => {
  it("a marked system block, user text, image and tool_result reach chat as prompt_cache_breakpoint on the same parts; 1h becomes 12h", async () => {
    oa.queue(openaiCached);
    await anthropic.messages.create({
      model: "c-openai",
      max_tokens: 100,
      system: [
        { type: "text", text: "You are a code assistant." },
        {
          type: "text",
          text: "Project rules: ...",
          cache_control: { type: "ephemeral", ttl: "1h" },
        },
      ],
      tools: [
        {
          name: "read_file",
          input_schema: { type: "object", properties: { path: { type: "string" } } },
          cache_control: { type: "ephemeral" },
        },
      ],
      messages: [
        {
          role: "user",
          content: [
            {
              type: "image",
              source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" },
              cache_control: { type: "ephemeral" },
            },
            { type: "text", text: "Read a.ts.", cache_control: { type: "ephemeral" } },
          ],
        },
        {
          role: "assistant",
          content: [
            { type: "tool_use", id: "toolu_a", name: "read_file", input: { path: "a.ts" } },
          ],
        },
        {
          role: "user",
          content: [
            {
              type: "tool_result",
              tool_use_id: "toolu_a",
              content: "const a = 1;",
              cache_control: { type: "ephemeral" },
            },
          ],
        },
      ],
    });
    expect(oa.refused).toEqual([]);
    const messages = sentMessages(oa);
    expect(messages[0]).toEqual({
      role: "system",
      content: [
        { type: "text", text: "You are a code assistant." },
        {
          type: "text",
          text: "Project rules: ...",
          prompt_cache_breakpoint: { mode: "explicit", ttl: "12h" },
        },
      ],
    });
    expect(messages[1]).toEqual({
      role: "user",
      content: [
        {
          type: "image_url",
          image_url: { url: "data:image/png;base64,iVBORw0KGgo=" },
          prompt_cache_breakpoint: explicit,
        },
        { type: "text", text: "Read a.ts.", prompt_cache_breakpoint: explicit },
      ],
    });
    expect(messages[3]).toEqual({
      role: "tool",
      tool_call_id: "toolu_a",
      content: [{ type: "text", text: "const a = 1;", prompt_cache_breakpoint: explicit }],
    });
  });

  it("the top-level cache_control marks the last part of the conversation, streamed too", async () => {
    for (const stream of [false, true]) {
      oa.queue(stream ? { kind: "sse", steps: openaiCachedStream() } : openaiCached);
      const params = {
        model: "c-openai",
        max_tokens: 100,
        cache_control: { type: "ephemeral" as const },
        system: "Be brief.",
        messages: [
          { role: "user" as const, content: "Hi" },
          { role: "assistant" as const, content: "Hello." },
          { role: "user" as const, content: "How are you?" },
        ],
      };
      if (stream) await anthropic.messages.stream(params).finalMessage();
      else await anthropic.messages.create(params);
      expect(oa.refused).toEqual([]);
      const messages = sentMessages(oa);
      expect(messages.slice(0, 3), `stream ${stream}`).toEqual([
        { role: "system", content: "Be brief." },
        { role: "user", content: "Hi" },
        { role: "assistant", content: "Hello." },
      ]);
      expect(messages[3], `stream ${stream}`).toEqual({
        role: "user",
        content: [{ type: "text", text: "How are you?", prompt_cache_breakpoint: explicit }],
      });
      expect(sent(oa).cache_control).toBeUndefined();
    }
  });
});

describe("cache markers toward an OpenAI-compatible server that is not OpenAI's API", () => {
  it("go as no breakpoint (such a server may refuse the field), the body as it was without them", async () => {
    oa.queue(openaiCached);
    await anthropic.messages.create({
      model: "h-openai",
      max_tokens: 100,
      cache_control: { type: "ephemeral" },
      system: [
        { type: "text", text: "You are a code assistant." },
        { type: "text", text: "Rules.", cache_control: { type: "ephemeral" } },
      ],
      messages: [
        {
          role: "user",
          content: [{ type: "text", text: "Hi", cache_control: { type: "ephemeral" } }],
        },
      ],
    });
    expect(sentMessages(oa)).toEqual([
      { role: "system", content: "You are a code assistant.\n\nRules." },
      { role: "user", content: "Hi" },
    ]);
    oa.queue(openaiCached);
    await openai.responses.create({
      model: "h-openai",
      input: [
        {
          role: "user",
          content: [
            { type: "input_text", text: "Hi", prompt_cache_breakpoint: { mode: "explicit" } },
          ],
        },
      ],
    });
    expect(sentMessages(oa)).toEqual([{ role: "user", content: "Hi" }]);
  });
});

describe("Anthropic cache_control toward a gemini-wire model", () => {
  it("is served by Gemini's implicit caching: nothing foreign reaches Gemini, and its cached count comes back", async () => {
    gm.queue(geminiCached);
    const message = await anthropic.messages.create({
      model: "h-gemini",
      max_tokens: 100,
      cache_control: { type: "ephemeral" },
      system: [{ type: "text", text: "Project rules.", cache_control: { type: "ephemeral" } }],
      messages: [
        {
          role: "user",
          content: [{ type: "text", text: "Hi", cache_control: { type: "ephemeral", ttl: "1h" } }],
        },
      ],
    });
    expect(gm.refused).toEqual([]);
    expect(sent(gm).systemInstruction).toEqual({ parts: [{ text: "Project rules." }] });
    expect(sent(gm).contents).toEqual([{ role: "user", parts: [{ text: "Hi" }] }]);
    expect(message.usage).toMatchObject({
      input_tokens: 60,
      cache_read_input_tokens: 100,
      cache_creation_input_tokens: 0,
    });
  });
});

// ---- OpenAI's prompt caching toward the anthropic wire ----------------------------------------

/** The markers of a Messages body in Anthropic's order: tools, system, messages, the top level. */
function markers(body: Json): Json[] {
  const found: Json[] = [];
  const blocks = (content: unknown) => (Array.isArray(content) ? (content as Json[]) : []);
  for (const tool of blocks(body.tools))
    if (tool.cache_control) found.push(tool.cache_control as Json);
  for (const block of blocks(body.system))
    if (block.cache_control) found.push(block.cache_control as Json);
  for (const message of blocks(body.messages))
    for (const block of blocks(message.content)) {
      if (block.cache_control) found.push(block.cache_control as Json);
      for (const inner of blocks(block.content))
        if (inner.cache_control) found.push(inner.cache_control as Json);
    }
  if (body.cache_control) found.push(body.cache_control as Json);
  return found;
}

describe("OpenAI prompt_cache_breakpoint toward an anthropic-wire model", () => {
  it("breakpoints on system, user, assistant and tool parts reach Anthropic as cache_control on the matching blocks (a tool result's on the tool_result)", async () => {
    an.queue(anthropicCached);
    await openai.chat.completions.create({
      model: "h-anthropic",
      messages: [
        {
          role: "system",
          content: [
            { type: "text", text: "Project rules.", prompt_cache_breakpoint: { mode: "explicit" } },
          ],
        },
        {
          role: "user",
          content: [
            { type: "text", text: "Read a.ts.", prompt_cache_breakpoint: { mode: "explicit" } },
          ],
        },
        {
          role: "assistant",
          content: null,
          tool_calls: [
            {
              id: "call_a",
              type: "function",
              function: { name: "read_file", arguments: '{"path":"a.ts"}' },
            },
          ],
        },
        {
          role: "tool",
          tool_call_id: "call_a",
          content: [
            { type: "text", text: "const a = 1;", prompt_cache_breakpoint: { mode: "explicit" } },
          ],
        },
      ],
      tools: [
        {
          type: "function",
          function: { name: "read_file", parameters: { type: "object", properties: {} } },
        },
      ],
    });
    expect(an.refused).toEqual([]);
    const body = sent(an);
    expect(body.system).toEqual([
      { type: "text", text: "Project rules.", cache_control: { type: "ephemeral" } },
    ]);
    const messages = body.messages as Json[];
    expect(messages[0].content).toEqual([
      { type: "text", text: "Read a.ts.", cache_control: { type: "ephemeral" } },
    ]);
    expect(messages[2].content).toEqual([
      {
        type: "tool_result",
        tool_use_id: "call_a",
        content: [{ type: "text", text: "const a = 1;" }],
        cache_control: { type: "ephemeral" },
      },
    ]);
  });

  it("a 30m lifetime (the breakpoint's, or prompt_cache_options') is Anthropic's 1h; none is its default 5m", async () => {
    an.queue(anthropicCached);
    await openai.chat.completions.create({
      model: "h-anthropic",
      prompt_cache_options: { mode: "explicit", ttl: "30m" },
      messages: [
        {
          role: "system",
          content: [
            { type: "text", text: "Rules.", prompt_cache_breakpoint: { mode: "explicit" } },
          ],
        },
        {
          role: "user",
          content: [
            {
              type: "text",
              text: "Question.",
              prompt_cache_breakpoint: { mode: "explicit", ttl: "30m" },
            },
          ],
        },
      ],
    });
    expect(an.refused).toEqual([]);
    expect(markers(sent(an))).toEqual([
      { type: "ephemeral", ttl: "1h" },
      { type: "ephemeral", ttl: "1h" },
    ]);
    an.queue(anthropicCached);
    await openai.chat.completions.create({
      model: "h-anthropic",
      messages: [
        {
          role: "user",
          content: [{ type: "text", text: "Q", prompt_cache_breakpoint: { mode: "explicit" } }],
        },
      ],
    });
    expect(markers(sent(an))).toEqual([{ type: "ephemeral" }]);
  });

  it("a 1h marker after a 5m one lengthens the earlier to 1h, which Anthropic requires", async () => {
    an.queue(anthropicCached);
    await openai.chat.completions.create({
      model: "h-anthropic",
      messages: [
        {
          role: "system",
          content: [
            { type: "text", text: "Rules.", prompt_cache_breakpoint: { mode: "explicit" } },
          ],
        },
        {
          role: "user",
          content: [
            {
              type: "text",
              text: "Question.",
              prompt_cache_breakpoint: { mode: "explicit", ttl: "30m" },
            },
          ],
        },
      ],
    });
    expect(an.refused).toEqual([]);
    expect(markers(sent(an))).toEqual([
      { type: "ephemeral", ttl: "1h" },
      { type: "ephemeral", ttl: "1h" },
    ]);
  });

  it("more than Anthropic's four: the latest four are written, as OpenAI writes only its latest four", async () => {
    an.queue(anthropicCached);
    const turns = ["one", "two", "three", "four", "five", "six"];
    await openai.chat.completions.create({
      model: "h-anthropic",
      messages: turns.map((text, i) => ({
        role: i % 2 === 0 ? ("user" as const) : ("assistant" as const),
        content: [
          { type: "text" as const, text, prompt_cache_breakpoint: { mode: "explicit" as const } },
        ],
      })),
    });
    expect(an.refused).toEqual([]);
    const messages = sent(an).messages as { content: Json[] }[];
    expect(messages.map((m) => m.content[0].cache_control ?? null)).toEqual([
      null,
      null,
      { type: "ephemeral" },
      { type: "ephemeral" },
      { type: "ephemeral" },
      { type: "ephemeral" },
    ]);
  });

  it("prompt_cache_options with the implicit mode is Anthropic's top-level cache_control, in one of the four slots", async () => {
    an.queue(anthropicCached);
    await openai.chat.completions.create({
      model: "h-anthropic",
      prompt_cache_options: { mode: "implicit", ttl: "30m" },
      messages: ["one", "two", "three", "four", "five"].map((text, i) => ({
        role: i % 2 === 0 ? ("user" as const) : ("assistant" as const),
        content: [
          { type: "text" as const, text, prompt_cache_breakpoint: { mode: "explicit" as const } },
        ],
      })),
    });
    expect(an.refused).toEqual([]);
    const body = sent(an);
    expect(body.cache_control).toEqual({ type: "ephemeral", ttl: "1h" });
    expect(markers(body)).toHaveLength(4);
  });

  it("a 12h lifetime, longer than any Anthropic keeps, is a 400 naming it; nothing is sent", async () => {
    for (const params of [
      {
        messages: [
          {
            role: "user" as const,
            content: [
              {
                type: "text" as const,
                text: "Q",
                prompt_cache_breakpoint: { mode: "explicit" as const, ttl: "12h" as const },
              },
            ],
          },
        ],
      },
      {
        prompt_cache_options: { ttl: "12h" },
        messages: [{ role: "user" as const, content: "Q" }],
      },
    ]) {
      const err = await outcomeOf(
        openai.chat.completions.create({ model: "h-anthropic", ...params } as never),
      );
      expect(err.status).toBe(400);
      expect(err.message).toMatch(/12h/);
      expect(err.message).toMatch(/ttl/);
    }
    // A Responses client's request-wide 12 hours, which chat's options have no room for.
    const err = await outcomeOf(
      openai.responses.create({
        model: "h-anthropic",
        prompt_cache_options: { ttl: "12h" },
        input: "Q",
      }),
    );
    expect(err.status).toBe(400);
    expect(err.message).toMatch(/prompt_cache_options\.ttl/);
    expect(an.requests).toHaveLength(0);
  });

  it("prompt_cache_key (OpenAI's routing hint, which Anthropic's exact prefix match does not need) is not sent", async () => {
    an.queue(anthropicCached);
    await openai.chat.completions.create({
      model: "h-anthropic",
      prompt_cache_key: "tenant-42",
      messages: [{ role: "user", content: "Hi" }],
    });
    expect(an.refused).toEqual([]);
  });

  it("a Responses client's input breakpoints reach Anthropic's blocks, and the bridge to chat keeps them", async () => {
    const input = [
      {
        role: "developer" as const,
        content: [
          {
            type: "input_text" as const,
            text: "Project rules.",
            prompt_cache_breakpoint: { mode: "explicit" as const },
          },
        ],
      },
      {
        role: "user" as const,
        content: [
          {
            type: "input_text" as const,
            text: "Read a.ts.",
            prompt_cache_breakpoint: { mode: "explicit" as const, ttl: "30m" as const },
          },
        ],
      },
    ];
    an.queue(anthropicCached);
    await openai.responses.create({ model: "h-anthropic", input });
    expect(an.refused).toEqual([]);
    expect(markers(sent(an))).toEqual([
      { type: "ephemeral", ttl: "1h" },
      { type: "ephemeral", ttl: "1h" },
    ]);
    oa.queue(openaiCached);
    await openai.responses.create({ model: "c-openai", input });
    expect(oa.refused).toEqual([]);
    expect(sentMessages(oa)).toEqual([
      {
        role: "system",
        content: [{ type: "text", text: "Project rules.", prompt_cache_breakpoint: explicit }],
      },
      {
        role: "user",
        content: [
          {
            type: "text",
            text: "Read a.ts.",
            prompt_cache_breakpoint: { mode: "explicit", ttl: "30m" },
          },
        ],
      },
    ]);
  });
});

// ---- cached usage in the client's own fields, and its charge ---------------------------------

/** The newest request's charge and usage, as the admin log lists it. */
async function lastCharge(): Promise<{ cost: number; input: number; output: number }> {
  const [row] = await logged(gw);
  return { cost: row.cost_micro, input: row.usage.input_tokens, output: row.usage.output_tokens };
}

/** 160 input tokens (cached ones included, at the input price) and 5 output, at 3 and 7 micro-IDR. */
const cachedCharge = { cost: 160 * 3 + 5 * 7, input: 160, output: 5 };

async function chatUsage(model: string, stream: boolean): Promise<unknown> {
  if (!stream)
    return (
      await openai.chat.completions.create({ model, messages: [{ role: "user", content: "Hi" }] })
    ).usage;
  const chunks = await openai.chat.completions.create({
    model,
    stream: true,
    stream_options: { include_usage: true },
    messages: [{ role: "user", content: "Hi" }],
  });
  let usage: unknown;
  for await (const chunk of chunks) if (chunk.usage) usage = chunk.usage;
  return usage;
}

async function messagesUsage(model: string, stream: boolean): Promise<unknown> {
  const params = { model, max_tokens: 100, messages: [{ role: "user" as const, content: "Hi" }] };
  if (stream) return (await anthropic.messages.stream(params).finalMessage()).usage;
  return (await anthropic.messages.create(params)).usage;
}

async function responsesUsage(model: string, stream: boolean): Promise<unknown> {
  if (stream) return (await openai.responses.stream({ model, input: "Hi" }).finalResponse()).usage;
  return (await openai.responses.create({ model, input: "Hi" })).usage;
}

describe("cached input comes back in the client's own usage fields, whole and streamed, and is charged as input", () => {
  for (const stream of [false, true]) {
    const how = stream ? "streamed" : "whole";

    it(`from the anthropic wire (${how}): chat's cached_tokens and cache_write_tokens, Responses' input_tokens_details`, async () => {
      const reply = () =>
        an.queue(stream ? { kind: "sse", steps: anthropicCachedStream() } : anthropicCached);
      reply();
      expect(await chatUsage("p-anthropic", stream)).toMatchObject({
        prompt_tokens: 160,
        completion_tokens: 5,
        prompt_tokens_details: { cached_tokens: 100, cache_write_tokens: 50 },
      });
      expect(await lastCharge()).toEqual(cachedCharge);
      reply();
      expect(await responsesUsage("p-anthropic", stream)).toMatchObject({
        input_tokens: 160,
        input_tokens_details: { cached_tokens: 100, cache_write_tokens: 50 },
        output_tokens: 5,
      });
      expect(await lastCharge()).toEqual(cachedCharge);
      reply();
      expect(await messagesUsage("p-anthropic", stream)).toMatchObject({
        input_tokens: 10,
        cache_read_input_tokens: 100,
        cache_creation_input_tokens: 50,
      });
      expect(await lastCharge()).toEqual(cachedCharge);
    });

    it(`from the openai wire (${how}): Anthropic's cache_read and cache_creation, Responses' details`, async () => {
      const reply = () =>
        oa.queue(stream ? { kind: "sse", steps: openaiCachedStream() } : openaiCached);
      reply();
      expect(await messagesUsage("p-openai", stream)).toMatchObject({
        input_tokens: 10,
        cache_read_input_tokens: 100,
        cache_creation_input_tokens: 50,
        output_tokens: 5,
      });
      expect(await lastCharge()).toEqual(cachedCharge);
      reply();
      expect(await responsesUsage("p-openai", stream)).toMatchObject({
        input_tokens: 160,
        input_tokens_details: { cached_tokens: 100, cache_write_tokens: 50 },
      });
      expect(await lastCharge()).toEqual(cachedCharge);
      reply();
      expect(await chatUsage("p-openai", stream)).toMatchObject({
        prompt_tokens_details: { cached_tokens: 100, cache_write_tokens: 50 },
      });
      expect(await lastCharge()).toEqual(cachedCharge);
    });

    it(`from the gemini wire (${how}): cachedContentTokenCount in every style`, async () => {
      const reply = () =>
        gm.queue(stream ? { kind: "sse", steps: geminiCachedStream() } : geminiCached);
      reply();
      expect(await chatUsage("p-gemini", stream)).toMatchObject({
        prompt_tokens: 160,
        prompt_tokens_details: { cached_tokens: 100 },
      });
      expect(await lastCharge()).toEqual(cachedCharge);
      reply();
      expect(await messagesUsage("p-gemini", stream)).toMatchObject({
        input_tokens: 60,
        cache_read_input_tokens: 100,
      });
      expect(await lastCharge()).toEqual(cachedCharge);
      reply();
      expect(await responsesUsage("p-gemini", stream)).toMatchObject({
        input_tokens: 160,
        input_tokens_details: { cached_tokens: 100 },
      });
      expect(await lastCharge()).toEqual(cachedCharge);
    });
  }

  it("an anthropic stream whose message_delta restates only the uncached input is still charged the cached input", async () => {
    const steps = anthropicCachedStream({ input_tokens: 10, output_tokens: 5 });
    an.queue({ kind: "sse", steps });
    expect(await messagesUsage("p-anthropic", true)).toMatchObject({
      input_tokens: 10,
      cache_read_input_tokens: 100,
      cache_creation_input_tokens: 50,
    });
    expect(await lastCharge()).toEqual(cachedCharge);
    an.queue({ kind: "sse", steps });
    expect(await chatUsage("p-anthropic", true)).toMatchObject({ prompt_tokens: 160 });
    expect(await lastCharge()).toEqual(cachedCharge);
  });
});

// ---- reasoning settings toward Anthropic and Gemini ---------------------------------------------

/** Anthropic answers, as its API does, with thinking only when thinking was asked for. */
function thinkingWhenAsked(stream: boolean) {
  return (req: { body: Json }) => {
    const thinks = (req.body.thinking as Json | undefined)?.type === "enabled";
    if (!stream)
      return {
        kind: "json" as const,
        body: {
          id: "msg_t",
          type: "message",
          role: "assistant",
          model: "claude-up",
          content: [
            ...(thinks
              ? [{ type: "thinking", thinking: "Paris is France's capital.", signature: "sig" }]
              : []),
            { type: "text", text: "Paris." },
          ],
          stop_reason: "end_turn",
          stop_sequence: null,
          usage: { input_tokens: 10, output_tokens: 20 },
        },
      };
    const event = (data: Json): SseStep => ({ event: String(data.type), data });
    const blocks: SseStep[] = [];
    let index = 0;
    if (thinks) {
      blocks.push(
        event({
          type: "content_block_start",
          index,
          content_block: { type: "thinking", thinking: "", signature: "" },
        }),
        event({
          type: "content_block_delta",
          index,
          delta: { type: "thinking_delta", thinking: "Paris is France's capital." },
        }),
        event({
          type: "content_block_delta",
          index,
          delta: { type: "signature_delta", signature: "sig" },
        }),
        event({ type: "content_block_stop", index }),
      );
      index++;
    }
    blocks.push(
      event({ type: "content_block_start", index, content_block: { type: "text", text: "" } }),
      event({ type: "content_block_delta", index, delta: { type: "text_delta", text: "Paris." } }),
      event({ type: "content_block_stop", index }),
    );
    return {
      kind: "sse" as const,
      steps: [
        event({
          type: "message_start",
          message: {
            id: "msg_t",
            type: "message",
            role: "assistant",
            model: "claude-up",
            content: [],
            stop_reason: null,
            stop_sequence: null,
            usage: { input_tokens: 10, output_tokens: 1 },
          },
        }),
        ...blocks,
        event({
          type: "message_delta",
          delta: { stop_reason: "end_turn", stop_sequence: null },
          usage: { output_tokens: 20 },
        }),
        event({ type: "message_stop" }),
      ],
    };
  };
}

describe("a Responses client's reasoning.summary without an effort, toward an anthropic-wire model", () => {
  for (const stream of [false, true]) {
    it(`thinks at the default effort (medium: half the output limit) and returns the summary (${stream ? "streamed" : "whole"})`, async () => {
      an.handle(thinkingWhenAsked(stream));
      const params = {
        model: "h-anthropic",
        max_output_tokens: 3000,
        reasoning: { summary: "auto" as const },
        input: "Capital of France?",
      };
      const response = stream
        ? await openai.responses.stream(params).finalResponse()
        : await openai.responses.create(params);
      expect(an.refused).toEqual([]);
      expect(sent(an).thinking).toEqual({ type: "enabled", budget_tokens: 1500 });
      const output: OpenAI.Responses.ResponseOutputItem[] = response.output;
      const reasoning = output.find(
        (item): item is OpenAI.Responses.ResponseReasoningItem => item.type === "reasoning",
      );
      expect(reasoning?.summary).toEqual([
        { type: "summary_text", text: "Paris is France's capital." },
      ]);
      expect(response.output_text).toBe("Paris.");
    });
  }

  it("with effort none it does not think, as asked", async () => {
    an.handle(thinkingWhenAsked(false));
    await openai.responses.create({
      model: "h-anthropic",
      reasoning: { summary: "auto", effort: "none" },
      input: "Capital of France?",
    });
    expect(sent(an).thinking).toBeUndefined();
  });
});

describe("reasoning effort none and minimal toward Anthropic and Gemini, whole and streamed", () => {
  async function chatWith(model: string, effort: "none" | "minimal", stream: boolean) {
    const params = {
      model,
      max_completion_tokens: 3000,
      temperature: 0.5,
      reasoning_effort: effort,
      messages: [{ role: "user" as const, content: "Capital of France?" }],
    };
    if (!stream) return openai.chat.completions.create(params);
    const chunks = await openai.chat.completions.create({ ...params, stream: true });
    for await (const _ of chunks);
  }

  async function responsesWith(model: string, effort: "none" | "minimal", stream: boolean) {
    const params = {
      model,
      max_output_tokens: 3000,
      temperature: 0.5,
      reasoning: { effort },
      input: "Capital of France?",
    };
    if (stream) await openai.responses.stream(params).finalResponse();
    else await openai.responses.create(params);
  }

  for (const stream of [false, true]) {
    const how = stream ? "streamed" : "whole";

    it(`Anthropic (${how}): none sends no thinking (temperature kept); minimal thinks on the lowest budget, 1024`, async () => {
      an.handle(thinkingWhenAsked(stream));
      for (const ask of [chatWith, responsesWith]) {
        await ask("h-anthropic", "none", stream);
        expect(sent(an).thinking, `${ask.name} none`).toBeUndefined();
        expect(sent(an).temperature).toBe(0.5);
        await ask("h-anthropic", "minimal", stream);
        expect(sent(an).thinking, `${ask.name} minimal`).toEqual({
          type: "enabled",
          budget_tokens: 1024,
        });
        // Anthropic refuses sampling settings beside thinking.
        expect(sent(an).temperature).toBeUndefined();
      }
      expect(an.refused).toEqual([]);
    });

    it(`Gemini (${how}): none is a thinking budget of 0, minimal its lowest, 128`, async () => {
      gm.handle(() => (stream ? { kind: "sse", steps: geminiCachedStream() } : geminiCached));
      for (const ask of [chatWith, responsesWith]) {
        await ask("h-gemini", "none", stream);
        const config = () => (sent(gm).generationConfig as Json).thinkingConfig;
        expect(config(), `${ask.name} none`).toEqual({ thinkingBudget: 0 });
        await ask("h-gemini", "minimal", stream);
        expect(config(), `${ask.name} minimal`).toEqual({
          thinkingBudget: 128,
          includeThoughts: true,
        });
      }
      expect(gm.refused).toEqual([]);
    });
  }

  it("a minimal effort whose output limit leaves no room for Anthropic's lowest budget sends no thinking, and is answered", async () => {
    an.handle(thinkingWhenAsked(false));
    await openai.chat.completions.create({
      model: "h-anthropic",
      max_completion_tokens: 1000,
      reasoning_effort: "minimal",
      messages: [{ role: "user", content: "Capital of France?" }],
    });
    expect(an.refused).toEqual([]);
    expect(sent(an).thinking).toBeUndefined();
  });
});
