/**
 * The translators' output, served over HTTP to the official SDKs: if the SDKs parse it
 * and assemble tool calls correctly, real clients will too.
 */

import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ChatCompletionChunk } from "./openai-types.js";
import { encodeSSE, parseSSE, SSE_DONE } from "./sse.js";
import { MessagesStreamToChat, messagesResponseToChat } from "./translate/chat-to-messages.js";
import { streamErrorEvent } from "./translate/errors.js";
import { ChatStreamToMessages, chatResponseToMessages } from "./translate/messages-to-chat.js";
import { ChatStreamToResponses, chatResponseToResponses } from "./translate/responses.js";

type Reply = { json: unknown } | { sse: string };

let server: Server;
let baseUrl = "";
let nextReply: Reply = { json: {} };
let lastRequest: { path: string; body: unknown } | undefined;

beforeAll(async () => {
  server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const parts: Buffer[] = [];
    req.on("data", (part: Buffer) => parts.push(part));
    req.on("end", () => {
      lastRequest = {
        path: req.url ?? "",
        body: JSON.parse(Buffer.concat(parts).toString() || "null"),
      };
      const reply = nextReply;
      if ("json" in reply) {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify(reply.json));
        return;
      }
      res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
      // Small pieces: the SDK parsers must reassemble events split anywhere.
      const bytes = Buffer.from(reply.sse);
      for (let i = 0; i < bytes.length; i += 7) res.write(bytes.subarray(i, i + 7));
      res.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

const openai = () =>
  new OpenAI({ baseURL: `${baseUrl}/v1`, apiKey: "kn-test", maxRetries: 0, timeout: 5000 });
const anthropic = () =>
  new Anthropic({ baseURL: baseUrl, apiKey: "kn-test", maxRetries: 0, timeout: 5000 });

function chunk(delta: object, finish_reason: string | null = null): ChatCompletionChunk {
  return {
    id: "chatcmpl-up1",
    object: "chat.completion.chunk",
    created: 1,
    model: "gpt-up",
    choices: [{ index: 0, delta, finish_reason, logprobs: null }],
  } as ChatCompletionChunk;
}

/** An upstream OpenAI stream: text, then two tool calls whose arguments split mid-token. */
function upstreamChatChunks(): ChatCompletionChunk[] {
  return [
    chunk({ role: "assistant", content: "" }),
    chunk({ content: "I'll read " }),
    chunk({ content: "both files." }),
    chunk({
      tool_calls: [
        {
          index: 0,
          id: "call_A",
          type: "function",
          function: { name: "read_file", arguments: "" },
        },
      ],
    }),
    chunk({ tool_calls: [{ index: 0, function: { arguments: '{"path":' } }] }),
    chunk({ tool_calls: [{ index: 0, function: { arguments: '"src/a.ts","lines":[1,' } }] }),
    chunk({ tool_calls: [{ index: 0, function: { arguments: "20]}" } }] }),
    chunk({
      tool_calls: [
        {
          index: 1,
          id: "call_B",
          type: "function",
          function: { name: "list_dir", arguments: '{"dir":"src"}' },
        },
      ],
    }),
    chunk({}, "tool_calls"),
    {
      ...chunk({}),
      choices: [],
      usage: { prompt_tokens: 120, completion_tokens: 33, total_tokens: 153 },
    },
  ];
}

/** An upstream Anthropic stream: text, then two tool_use blocks with partial JSON. */
function upstreamAnthropicSSE(): string {
  const events: Array<Record<string, unknown>> = [
    {
      type: "message_start",
      message: {
        id: "msg_up1",
        type: "message",
        role: "assistant",
        model: "claude-up",
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: { input_tokens: 80, output_tokens: 1, cache_read_input_tokens: 20 },
      },
    },
    { type: "ping" },
    { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
    { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Reading " } },
    { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "now." } },
    { type: "content_block_stop", index: 0 },
    {
      type: "content_block_start",
      index: 1,
      content_block: { type: "tool_use", id: "toolu_01A", name: "read_file", input: {} },
    },
    {
      type: "content_block_delta",
      index: 1,
      delta: { type: "input_json_delta", partial_json: '{"path": "src/' },
    },
    {
      type: "content_block_delta",
      index: 1,
      delta: { type: "input_json_delta", partial_json: 'a.ts", "lines": [1, 20]}' },
    },
    { type: "content_block_stop", index: 1 },
    {
      type: "content_block_start",
      index: 2,
      content_block: { type: "tool_use", id: "toolu_01B", name: "list_dir", input: {} },
    },
    {
      type: "content_block_delta",
      index: 2,
      delta: { type: "input_json_delta", partial_json: '{"dir": "src"}' },
    },
    { type: "content_block_stop", index: 2 },
    {
      type: "message_delta",
      delta: { stop_reason: "tool_use", stop_sequence: null },
      usage: { output_tokens: 40 },
    },
    { type: "message_stop" },
  ];
  return events.map((e) => encodeSSE(e, e.type as string)).join("");
}

async function* bytesOf(text: string): AsyncGenerator<Uint8Array> {
  const bytes = new TextEncoder().encode(text);
  for (let i = 0; i < bytes.length; i += 5) yield bytes.subarray(i, i + 5);
}

/** Upstream Anthropic SSE text -> chat chunks, through the real SSE parser. */
async function anthropicToChatChunks(sse: string, includeUsage: boolean): Promise<object[]> {
  const translator = new MessagesStreamToChat("client-model", { includeUsage });
  const chunks: object[] = [];
  for await (const ev of parseSSE(bytesOf(sse))) chunks.push(...translator.push(ev));
  chunks.push(...translator.finish());
  return chunks;
}

const expectedToolCalls = [
  { name: "read_file", input: { path: "src/a.ts", lines: [1, 20] } },
  { name: "list_dir", input: { dir: "src" } },
];

describe("Anthropic SDK reads chat upstreams translated to Messages", () => {
  it("messages.stream().finalMessage() assembles text and tool_use inputs", async () => {
    const translator = new ChatStreamToMessages("client-model");
    const events = [
      ...upstreamChatChunks().flatMap((c) => translator.push(c)),
      ...translator.finish(),
    ];
    nextReply = { sse: events.map((e) => encodeSSE(e.data, e.event)).join("") };

    const stream = anthropic().messages.stream({
      model: "client-model",
      max_tokens: 100,
      messages: [{ role: "user", content: "go" }],
    });
    const seenText: string[] = [];
    stream.on("text", (text) => seenText.push(text));
    const message = await stream.finalMessage();

    expect(lastRequest?.path).toBe("/v1/messages");
    expect(seenText.join("")).toBe("I'll read both files.");
    expect(message.model).toBe("client-model");
    expect(message.stop_reason).toBe("tool_use");
    expect(message.content[0]).toMatchObject({ type: "text", text: "I'll read both files." });
    const tools = message.content.filter((b) => b.type === "tool_use");
    expect(tools.map((b) => ({ name: b.name, input: b.input }))).toEqual(expectedToolCalls);
    // Chat's call_ ids take the messages style's toolu_ shape.
    expect(tools.map((b) => b.id)).toEqual(["toolu_A", "toolu_B"]);
    expect(message.usage).toMatchObject({ input_tokens: 120, output_tokens: 33 });
  });

  it("messages.create() parses a translated chat completion", async () => {
    nextReply = {
      json: chatResponseToMessages(
        {
          id: "chatcmpl-x",
          object: "chat.completion",
          created: 1,
          model: "gpt-up",
          choices: [
            {
              index: 0,
              finish_reason: "tool_calls",
              message: {
                role: "assistant",
                content: null,
                tool_calls: [
                  {
                    id: "call_Z",
                    type: "function",
                    function: { name: "list_dir", arguments: '{"dir":"src"}' },
                  },
                ],
              },
            },
          ],
          usage: { prompt_tokens: 5, completion_tokens: 6, total_tokens: 11 },
        },
        "client-model",
      ),
    };
    const message = await anthropic().messages.create({
      model: "client-model",
      max_tokens: 100,
      messages: [{ role: "user", content: "go" }],
    });
    expect(message.content).toEqual([
      {
        type: "tool_use",
        id: "toolu_Z",
        name: "list_dir",
        input: { dir: "src" },
        caller: { type: "direct" },
      },
    ]);
    expect(message.stop_reason).toBe("tool_use");
    expect(message.usage.output_tokens).toBe(6);
  });

  it("an upstream error mid-stream surfaces as an SDK error", async () => {
    const translator = new ChatStreamToMessages("client-model");
    const events = [
      ...translator.push(chunk({ content: "partial" })),
      ...translator.push({ error: { message: "upstream died" } }),
    ];
    nextReply = { sse: events.map((e) => encodeSSE(e.data, e.event)).join("") };
    const stream = anthropic().messages.stream({
      model: "client-model",
      max_tokens: 100,
      messages: [{ role: "user", content: "go" }],
    });
    await expect(stream.finalMessage()).rejects.toThrow(/upstream died/);

    nextReply = {
      sse:
        encodeSSE(events[0].data, events[0].event) +
        streamErrorEvent("messages", "gateway gave up"),
    };
    const again = anthropic().messages.stream({
      model: "client-model",
      max_tokens: 100,
      messages: [{ role: "user", content: "go" }],
    });
    await expect(again.finalMessage()).rejects.toThrow(/gateway gave up/);
  });
});

describe("OpenAI SDK reads Anthropic upstreams translated to chat", () => {
  it("chat.completions.stream().finalChatCompletion() assembles tool call arguments", async () => {
    const chunks = await anthropicToChatChunks(upstreamAnthropicSSE(), true);
    nextReply = { sse: chunks.map((c) => encodeSSE(c)).join("") + SSE_DONE };

    const completion = await openai()
      .chat.completions.stream({
        model: "client-model",
        messages: [{ role: "user", content: "go" }],
        stream_options: { include_usage: true },
      })
      .finalChatCompletion();

    expect(lastRequest?.path).toBe("/v1/chat/completions");
    const choice = completion.choices[0];
    expect(choice.finish_reason).toBe("tool_calls");
    expect(choice.message.content).toBe("Reading now.");
    const calls = (choice.message.tool_calls ?? []).map((c) =>
      c.type === "function"
        ? { id: c.id, name: c.function.name, input: JSON.parse(c.function.arguments) }
        : c,
    );
    expect(calls).toEqual([
      { id: "toolu_01A", ...expectedToolCalls[0] },
      { id: "toolu_01B", ...expectedToolCalls[1] },
    ]);
    expect(completion.usage).toMatchObject({
      prompt_tokens: 100,
      completion_tokens: 40,
      total_tokens: 140,
    });
    expect(completion.model).toBe("client-model");
  });

  it("chat.completions.create({stream:true}) yields chunks the SDK accepts", async () => {
    const chunks = await anthropicToChatChunks(upstreamAnthropicSSE(), false);
    nextReply = { sse: chunks.map((c) => encodeSSE(c)).join("") + SSE_DONE };
    const stream = await openai().chat.completions.create({
      model: "client-model",
      messages: [{ role: "user", content: "go" }],
      stream: true,
    });
    let text = "";
    let finish: string | null = null;
    for await (const c of stream) {
      text += c.choices[0]?.delta.content ?? "";
      finish = c.choices[0]?.finish_reason ?? finish;
    }
    expect(text).toBe("Reading now.");
    expect(finish).toBe("tool_calls");
  });

  it("chat.completions.create() parses a translated Messages response", async () => {
    nextReply = {
      json: messagesResponseToChat(
        {
          id: "msg_1",
          type: "message",
          role: "assistant",
          model: "claude-up",
          content: [
            { type: "text", text: "Sure." },
            { type: "tool_use", id: "toolu_9", name: "list_dir", input: { dir: "src" } },
          ],
          stop_reason: "tool_use",
          stop_sequence: null,
          usage: { input_tokens: 3, output_tokens: 4 },
        },
        "client-model",
      ),
    };
    const completion = await openai().chat.completions.create({
      model: "client-model",
      messages: [{ role: "user", content: "go" }],
    });
    const call = completion.choices[0].message.tool_calls?.[0];
    expect(call?.type === "function" && JSON.parse(call.function.arguments)).toEqual({
      dir: "src",
    });
    expect(call?.id).toBe("toolu_9");
    expect(completion.choices[0].message.content).toBe("Sure.");
  });

  it("an error chunk mid-stream surfaces as an SDK error", async () => {
    const chunks = await anthropicToChatChunks(upstreamAnthropicSSE(), false);
    nextReply = {
      sse:
        encodeSSE(chunks[0]) + encodeSSE(chunks[1]) + streamErrorEvent("chat", "gateway gave up"),
    };
    const stream = openai().chat.completions.stream({
      model: "client-model",
      messages: [{ role: "user", content: "go" }],
    });
    await expect(stream.finalChatCompletion()).rejects.toThrow(/gateway gave up/);
  });

  it("a double translation (chat -> messages -> chat) still assembles in the SDK", async () => {
    const toMessages = new ChatStreamToMessages("client-model");
    const events = [
      ...upstreamChatChunks().flatMap((c) => toMessages.push(c)),
      ...toMessages.finish(),
    ];
    const sse = events.map((e) => encodeSSE(e.data, e.event)).join("");
    const chunks = await anthropicToChatChunks(sse, true);
    nextReply = { sse: chunks.map((c) => encodeSSE(c)).join("") + SSE_DONE };
    const completion = await openai()
      .chat.completions.stream({
        model: "client-model",
        messages: [{ role: "user", content: "go" }],
      })
      .finalChatCompletion();
    const calls = (completion.choices[0].message.tool_calls ?? []).map((c) =>
      c.type === "function"
        ? { name: c.function.name, input: JSON.parse(c.function.arguments) }
        : c,
    );
    expect(calls).toEqual(expectedToolCalls);
    expect(completion.choices[0].message.content).toBe("I'll read both files.");
    expect(completion.usage).toMatchObject({ prompt_tokens: 120, completion_tokens: 33 });
  });
});

describe("OpenAI SDK reads chat upstreams translated to Responses", () => {
  const request = {
    model: "client-model",
    input: "go",
    tools: [
      {
        type: "function" as const,
        name: "read_file",
        parameters: { type: "object" },
        strict: false,
      },
      {
        type: "function" as const,
        name: "list_dir",
        parameters: { type: "object" },
        strict: false,
      },
    ],
  };

  function responsesSSE(chunks: object[]): string {
    const translator = new ChatStreamToResponses("client-model", request);
    const events = [...chunks.flatMap((c) => translator.push(c)), ...translator.finish()];
    return events.map((e) => encodeSSE(e.data, e.event)).join("");
  }

  it("responses.stream().finalResponse() has output_text and function calls", async () => {
    nextReply = { sse: responsesSSE(upstreamChatChunks()) };
    const stream = openai().responses.stream(request);
    const deltas: string[] = [];
    stream.on("response.output_text.delta", (e) => deltas.push(e.delta));
    const response = await stream.finalResponse();

    expect(lastRequest?.path).toBe("/v1/responses");
    expect(deltas.join("")).toBe("I'll read both files.");
    expect(response.output_text).toBe("I'll read both files.");
    expect(response.status).toBe("completed");
    const calls = response.output.filter((o) => o.type === "function_call");
    expect(calls.map((c) => ({ name: c.name, input: JSON.parse(c.arguments) }))).toEqual(
      expectedToolCalls,
    );
    expect(calls.map((c) => c.call_id)).toEqual(["call_A", "call_B"]);
    expect(response.usage).toMatchObject({
      input_tokens: 120,
      output_tokens: 33,
      total_tokens: 153,
    });
  });

  it("responses.create({stream:true}) yields typed events, and the Anthropic path works too", async () => {
    const chatChunks = await anthropicToChatChunks(upstreamAnthropicSSE(), true);
    nextReply = { sse: responsesSSE(chatChunks) };
    const stream = await openai().responses.create({ ...request, stream: true });
    const types: string[] = [];
    let completed: OpenAI.Responses.Response | undefined;
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === "response.completed") completed = event.response;
    }
    expect(types[0]).toBe("response.created");
    expect(types).toContain("response.function_call_arguments.done");
    expect(
      completed?.output.filter((o) => o.type === "function_call").map((c) => c.call_id),
    ).toEqual(["toolu_01A", "toolu_01B"]);
    expect(completed?.usage?.input_tokens).toBe(100);
  });

  it("responses.create() gets output_text from a translated chat completion", async () => {
    nextReply = {
      json: chatResponseToResponses(
        {
          id: "chatcmpl-1",
          object: "chat.completion",
          created: 1,
          model: "gpt-up",
          choices: [
            {
              index: 0,
              finish_reason: "stop",
              message: { role: "assistant", content: "Hello there." },
            },
          ],
          usage: { prompt_tokens: 2, completion_tokens: 3, total_tokens: 5 },
        },
        "client-model",
        request,
      ),
    };
    const response = await openai().responses.create(request);
    expect(response.output_text).toBe("Hello there.");
    expect(response.usage?.total_tokens).toBe(5);
  });

  it("a failure mid-stream rejects finalResponse()", async () => {
    const translator = new ChatStreamToResponses("client-model", request);
    const events = [
      ...translator.push(chunk({ content: "partial" })),
      ...translator.fail("upstream died"),
    ];
    nextReply = { sse: events.map((e) => encodeSSE(e.data, e.event)).join("") };
    await expect(openai().responses.stream(request).finalResponse()).rejects.toMatchObject({
      message: expect.stringContaining("upstream died"),
    });

    const started = translator.push(chunk({})); // ended: nothing more
    expect(started).toEqual([]);
    // What the gateway sends when every provider failed after the stream's 200 went out.
    nextReply = {
      sse: streamErrorEvent("responses", "gateway gave up", { request, model: "client-model" }),
    };
    await expect(openai().responses.stream(request).finalResponse()).rejects.toMatchObject({
      message: expect.stringContaining("gateway gave up"),
    });
  });
});
