import { describe, expect, it } from "vitest";
import type { MessagesResponse } from "../anthropic-types.js";
import type { ChatCompletionChunk, ChatCompletionRequest } from "../openai-types.js";
import {
  chatRequestToMessages,
  DEFAULT_ANTHROPIC_MAX_TOKENS,
  MessagesStreamToChat,
  messagesResponseToChat,
} from "./chat-to-messages.js";

const PNG = "iVBORw0KGgo=";

/** A coding agent's tool loop: images, two parallel calls, their results, a follow-up. */
const toolLoopChatRequest: ChatCompletionRequest = {
  model: "client-model",
  messages: [
    { role: "system", content: "You are a coding agent." },
    {
      role: "user",
      content: [
        { type: "text", text: "What is in these files? See the screenshot." },
        { type: "image_url", image_url: { url: `data:image/png;base64,${PNG}` } },
        { type: "image_url", image_url: { url: "https://example.com/a.jpg", detail: "high" } },
      ],
    },
    {
      role: "assistant",
      content: "Let me read both.",
      tool_calls: [
        {
          id: "toolu_01A",
          type: "function",
          function: { name: "read_file", arguments: '{"path":"a.ts"}' },
        },
        {
          id: "call_B",
          type: "function",
          function: { name: "read_file", arguments: '{"path":"b.ts","lines":[1,2]}' },
        },
      ],
    },
    { role: "tool", tool_call_id: "toolu_01A", content: "export const a = 1;" },
    { role: "tool", tool_call_id: "call_B", content: [{ type: "text", text: "export {}" }] },
    { role: "user", content: "Now summarise." },
    {
      role: "assistant",
      content: null,
      tool_calls: [
        { id: "toolu_01C", type: "function", function: { name: "finish", arguments: "" } },
      ],
    },
    { role: "tool", tool_call_id: "toolu_01C", content: "done" },
  ],
  tools: [
    {
      type: "function",
      function: {
        name: "read_file",
        description: "Read a file",
        parameters: {
          type: "object",
          properties: { path: { type: "string" }, lines: { type: "array" } },
          required: ["path"],
        },
      },
    },
    { type: "function", function: { name: "finish" } },
  ],
  tool_choice: "auto",
  temperature: 0.2,
  top_p: 0.9,
  stop: ["END"],
  user: "user-42",
};

describe("chatRequestToMessages", () => {
  it("translates a multi-turn tool loop with images", () => {
    const out = chatRequestToMessages(toolLoopChatRequest, "claude-up");
    expect(out.model).toBe("claude-up");
    expect(out.system).toBe("You are a coding agent.");
    expect(out.max_tokens).toBe(DEFAULT_ANTHROPIC_MAX_TOKENS);
    expect(out.temperature).toBe(0.2);
    expect(out.top_p).toBe(0.9);
    expect(out.stop_sequences).toEqual(["END"]);
    expect(out.metadata).toEqual({ user_id: "user-42" });
    expect(out.tool_choice).toEqual({ type: "auto" });
    expect(out.tools).toEqual([
      {
        name: "read_file",
        description: "Read a file",
        input_schema: {
          type: "object",
          properties: { path: { type: "string" }, lines: { type: "array" } },
          required: ["path"],
        },
      },
      { name: "finish", input_schema: { type: "object", properties: {} } },
    ]);
    expect(out.messages).toEqual([
      {
        role: "user",
        content: [
          { type: "text", text: "What is in these files? See the screenshot." },
          { type: "image", source: { type: "base64", media_type: "image/png", data: PNG } },
          { type: "image", source: { type: "url", url: "https://example.com/a.jpg" } },
        ],
      },
      {
        role: "assistant",
        content: [
          { type: "text", text: "Let me read both." },
          { type: "tool_use", id: "toolu_01A", name: "read_file", input: { path: "a.ts" } },
          {
            type: "tool_use",
            id: "call_B",
            name: "read_file",
            input: { path: "b.ts", lines: [1, 2] },
          },
        ],
      },
      {
        // Both tool results and the user's follow-up share one turn, results first.
        role: "user",
        content: [
          { type: "tool_result", tool_use_id: "toolu_01A", content: "export const a = 1;" },
          {
            type: "tool_result",
            tool_use_id: "call_B",
            content: [{ type: "text", text: "export {}" }],
          },
          { type: "text", text: "Now summarise." },
        ],
      },
      {
        role: "assistant",
        content: [{ type: "tool_use", id: "toolu_01C", name: "finish", input: {} }],
      },
      {
        role: "user",
        content: [{ type: "tool_result", tool_use_id: "toolu_01C", content: "done" }],
      },
    ]);
    expect(out.stream).toBeUndefined();
  });

  it("maps every tool_choice form and parallel_tool_calls", () => {
    const base = { model: "m", messages: [{ role: "user" as const, content: "hi" }] };
    const tools = toolLoopChatRequest.tools;
    const choice = (extra: Partial<ChatCompletionRequest>) =>
      chatRequestToMessages({ ...base, tools, ...extra }, "up").tool_choice;
    expect(choice({ tool_choice: "none" })).toEqual({ type: "none" });
    expect(choice({ tool_choice: "required" })).toEqual({ type: "any" });
    expect(choice({ tool_choice: { type: "function", function: { name: "finish" } } })).toEqual({
      type: "tool",
      name: "finish",
    });
    expect(choice({ tool_choice: "required", parallel_tool_calls: false })).toEqual({
      type: "any",
      disable_parallel_tool_use: true,
    });
    expect(choice({ parallel_tool_calls: false })).toEqual({
      type: "auto",
      disable_parallel_tool_use: true,
    });
    expect(choice({})).toBeUndefined();
    // No tools: no tool_choice either (Anthropic rejects a choice without tools).
    expect(
      chatRequestToMessages({ ...base, tool_choice: "required" }, "up").tool_choice,
    ).toBeUndefined();
  });

  it("maps limits, stop strings, streaming, developer prompts and clamps temperature", () => {
    const out = chatRequestToMessages(
      {
        model: "m",
        messages: [
          { role: "developer", content: "dev rules" },
          { role: "system", content: [{ type: "text", text: "sys rules" }] },
          { role: "user", content: "hi" },
        ],
        max_tokens: 100,
        max_completion_tokens: 200,
        temperature: 1.7,
        stop: "STOP",
        stream: true,
        stream_options: { include_usage: true },
        response_format: {
          type: "json_schema",
          json_schema: { name: "x", schema: { type: "object" } },
        },
      },
      "up",
    );
    expect(out.max_tokens).toBe(200);
    expect(out.temperature).toBe(1);
    expect(out.stop_sequences).toEqual(["STOP"]);
    expect(out.stream).toBe(true);
    expect(out.system).toEqual([
      { type: "text", text: "dev rules" },
      { type: "text", text: "sys rules" },
    ]);
    // The schema as the Anthropic SDK would send it (anthropic-schema.ts): objects closed.
    expect(out.output_config).toEqual({
      format: {
        type: "json_schema",
        schema: { type: "object", properties: {}, additionalProperties: false },
      },
    });
    expect(out).not.toHaveProperty("stream_options");
  });

  it("keeps PDFs, cache_control, and images inside tool results; skips what it cannot carry", () => {
    const out = chatRequestToMessages(
      {
        model: "m",
        messages: [
          {
            role: "user",
            content: [
              { type: "text", text: "cached", cache_control: { type: "ephemeral" } },
              {
                type: "file",
                file: { file_data: "data:application/pdf;base64,JVBE", filename: "a.pdf" },
              },
              { type: "input_audio", input_audio: { data: "x", format: "wav" } },
              { type: "text", text: "" },
            ],
          },
          {
            role: "assistant",
            content: "",
            tool_calls: [
              { id: "t1", type: "function", function: { name: "shot", arguments: "{bad" } },
            ],
          },
          {
            role: "tool",
            tool_call_id: "t1",
            content: [
              { type: "text", text: "screenshot:" },
              { type: "image_url", image_url: { url: `data:image/jpeg;base64,${PNG}` } },
            ],
          },
        ],
      },
      "up",
    );
    expect(out.messages).toEqual([
      {
        role: "user",
        content: [
          { type: "text", text: "cached", cache_control: { type: "ephemeral" } },
          {
            type: "document",
            source: { type: "base64", media_type: "application/pdf", data: "JVBE" },
            title: "a.pdf",
          },
        ],
      },
      { role: "assistant", content: [{ type: "tool_use", id: "t1", name: "shot", input: {} }] },
      {
        role: "user",
        content: [
          {
            type: "tool_result",
            tool_use_id: "t1",
            content: [
              { type: "text", text: "screenshot:" },
              { type: "image", source: { type: "base64", media_type: "image/jpeg", data: PNG } },
            ],
          },
        ],
      },
    ]);
  });

  it("keeps a function's strict schema guarantee (Anthropic's strict tool use)", () => {
    const parameters = {
      type: "object",
      properties: { city: { type: "string" } },
      required: ["city"],
      additionalProperties: false,
    };
    const out = chatRequestToMessages(
      {
        model: "m",
        messages: [{ role: "user", content: "weather?" }],
        tools: [
          { type: "function", function: { name: "strict_one", parameters, strict: true } },
          { type: "function", function: { name: "loose_one", parameters } },
        ],
      },
      "up",
    );
    expect(out.tools?.map((t) => [t.name, t.strict])).toEqual([
      ["strict_one", true],
      ["loose_one", undefined],
    ]);
  });

  it("translates legacy function_call / function messages", () => {
    const out = chatRequestToMessages(
      {
        model: "m",
        messages: [
          { role: "user", content: "weather?" },
          {
            role: "assistant",
            content: null,
            function_call: { name: "weather", arguments: '{"c":"Oslo"}' },
          },
          { role: "function", name: "weather", content: "rain" },
        ],
      },
      "up",
    );
    const call = out.messages[1].content[0] as { type: string; id: string; input: unknown };
    expect(call).toMatchObject({ type: "tool_use", name: "weather", input: { c: "Oslo" } });
    expect(out.messages[2].content[0]).toEqual({
      type: "tool_result",
      tool_use_id: call.id,
      content: "rain",
    });
  });
});

describe("messagesResponseToChat", () => {
  const response: MessagesResponse = {
    id: "msg_01XYZ",
    type: "message",
    role: "assistant",
    model: "claude-up",
    content: [
      { type: "thinking", thinking: "hmm", signature: "sig" },
      { type: "text", text: "Reading." },
      { type: "tool_use", id: "toolu_01A", name: "read_file", input: { path: "a.ts" } },
      { type: "server_tool_use", id: "srvtoolu_1", name: "web_search", input: {} },
      { type: "tool_use", id: "toolu_01B", name: "list", input: {} },
    ],
    stop_reason: "tool_use",
    stop_sequence: null,
    usage: { input_tokens: 10, output_tokens: 20, cache_read_input_tokens: 5 },
  };

  it("maps text, tool calls (ids preserved), stop reason and usage", () => {
    const out = messagesResponseToChat(response, "client-model");
    expect(out.id).toBe("chatcmpl-01XYZ");
    expect(out.object).toBe("chat.completion");
    expect(out.model).toBe("client-model");
    expect(out.choices[0]).toEqual({
      index: 0,
      logprobs: null,
      finish_reason: "tool_calls",
      message: {
        role: "assistant",
        content: "Reading.",
        refusal: null,
        reasoning_content: "hmm",
        reasoning_details: [
          {
            type: "reasoning.text",
            text: "hmm",
            signature: "sig",
            format: "anthropic-claude-v1",
            index: 0,
          },
        ],
        tool_calls: [
          {
            id: "toolu_01A",
            type: "function",
            function: { name: "read_file", arguments: '{"path":"a.ts"}' },
          },
          { id: "toolu_01B", type: "function", function: { name: "list", arguments: "{}" } },
        ],
      },
    });
    expect(out.usage).toEqual({
      prompt_tokens: 15,
      completion_tokens: 20,
      total_tokens: 35,
      prompt_tokens_details: { cached_tokens: 5 },
    });
  });

  it("maps every stop reason", () => {
    const finish = (stop_reason: string | null) =>
      messagesResponseToChat({ ...response, stop_reason } as MessagesResponse, "m").choices[0]
        .finish_reason;
    expect(finish("end_turn")).toBe("stop");
    expect(finish("stop_sequence")).toBe("stop");
    expect(finish("max_tokens")).toBe("length");
    expect(finish("tool_use")).toBe("tool_calls");
    expect(finish("refusal")).toBe("content_filter");
    expect(finish("pause_turn")).toBe("stop");
    expect(finish(null)).toBe("stop");
  });

  it("gives null content for a pure tool call and survives a bare response", () => {
    const toolOnly = messagesResponseToChat(
      { ...response, content: [{ type: "tool_use", id: "toolu_1", name: "x", input: {} }] },
      "m",
    );
    expect(toolOnly.choices[0].message.content).toBeNull();
    const bare = messagesResponseToChat({} as MessagesResponse, "m");
    expect(bare.choices[0].message).toEqual({ role: "assistant", content: "", refusal: null });
    expect(bare.id).toMatch(/^chatcmpl-/);
    expect(bare.usage?.total_tokens).toBe(0);
  });
});

/** Anthropic SSE events as the real API sends them for text + two tool calls. */
function anthropicToolStream(): Array<{ event: string; data: string }> {
  const events: object[] = [
    {
      type: "message_start",
      message: {
        id: "msg_01S",
        type: "message",
        role: "assistant",
        model: "claude-up",
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: { input_tokens: 50, output_tokens: 1, cache_read_input_tokens: 10 },
      },
    },
    { type: "ping" },
    { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
    { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Let me " } },
    { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "check." } },
    { type: "content_block_stop", index: 0 },
    {
      type: "content_block_start",
      index: 1,
      content_block: { type: "tool_use", id: "toolu_01A", name: "read_file", input: {} },
    },
    {
      type: "content_block_delta",
      index: 1,
      delta: { type: "input_json_delta", partial_json: "" },
    },
    {
      type: "content_block_delta",
      index: 1,
      delta: { type: "input_json_delta", partial_json: '{"pa' },
    },
    {
      type: "content_block_delta",
      index: 1,
      delta: { type: "input_json_delta", partial_json: 'th": "a.ts"}' },
    },
    { type: "content_block_stop", index: 1 },
    {
      type: "content_block_start",
      index: 2,
      content_block: { type: "tool_use", id: "toolu_01B", name: "list_dir", input: {} },
    },
    { type: "content_block_stop", index: 2 },
    {
      type: "message_delta",
      delta: { stop_reason: "tool_use", stop_sequence: null },
      usage: { output_tokens: 42 },
    },
    { type: "message_stop" },
  ];
  return events.map((data) => ({
    event: (data as { type: string }).type,
    data: JSON.stringify(data),
  }));
}

describe("MessagesStreamToChat", () => {
  it("turns text and tool_use blocks into chat chunks with assembled arguments", () => {
    const translator = new MessagesStreamToChat("client-model", { includeUsage: true });
    const chunks: ChatCompletionChunk[] = [];
    for (const ev of anthropicToolStream())
      chunks.push(...(translator.push(ev) as ChatCompletionChunk[]));
    chunks.push(...(translator.finish() as ChatCompletionChunk[]));

    expect(
      chunks.every((c) => c.object === "chat.completion.chunk" && c.id === "chatcmpl-01S"),
    ).toBe(true);
    expect(chunks.every((c) => c.model === "client-model")).toBe(true);
    expect(chunks[0].choices[0].delta).toEqual({ role: "assistant", content: "" });
    const content = chunks.map((c) => c.choices[0]?.delta.content ?? "").join("");
    expect(content).toBe("Let me check.");

    const calls: Record<number, { id?: string; name?: string; args: string }> = {};
    for (const chunk of chunks) {
      for (const call of chunk.choices[0]?.delta.tool_calls ?? []) {
        calls[call.index] ??= { args: "" };
        if (call.id) calls[call.index].id = call.id;
        if (call.function?.name) calls[call.index].name = call.function.name;
        calls[call.index].args += call.function?.arguments ?? "";
      }
    }
    expect(calls).toEqual({
      0: { id: "toolu_01A", name: "read_file", args: '{"path": "a.ts"}' },
      1: { id: "toolu_01B", name: "list_dir", args: "{}" },
    });

    const finishes = chunks.filter((c) => c.choices[0]?.finish_reason);
    expect(finishes).toHaveLength(1);
    expect(finishes[0].choices[0].finish_reason).toBe("tool_calls");
    const last = chunks[chunks.length - 1];
    expect(last.choices).toEqual([]);
    expect(last.usage).toEqual({
      prompt_tokens: 60,
      completion_tokens: 42,
      total_tokens: 102,
      prompt_tokens_details: { cached_tokens: 10 },
    });
    expect(translator.usage()).toEqual({
      input_tokens: 60,
      output_tokens: 42,
      cache_read_input_tokens: 10,
    });
    // finish() after message_stop adds nothing.
    expect(translator.finish()).toEqual([]);
  });

  it("omits the usage chunk unless asked, and still knows the usage", () => {
    const translator = new MessagesStreamToChat("m", { includeUsage: false });
    const chunks = anthropicToolStream().flatMap((ev) => translator.push(ev));
    expect(chunks.some((c) => "choices" in c && c.choices.length === 0)).toBe(false);
    expect(translator.usage().output_tokens).toBe(42);
  });

  it("never throws on junk, unknown events or a stream cut short", () => {
    const translator = new MessagesStreamToChat("m", { includeUsage: true });
    expect(translator.push({ data: "not json" })).toEqual([]);
    expect(translator.push({ event: "mystery", data: '{"type":"mystery"}' })).toEqual([]);
    expect(translator.push({ data: "[1,2]" })).toEqual([]);
    const delta = translator.push({
      data: JSON.stringify({
        type: "content_block_delta",
        index: 5,
        delta: { type: "text_delta", text: "hi" },
      }),
    }) as ChatCompletionChunk[];
    // Role first (message_start never came), then the text.
    expect(delta.map((c) => c.choices[0].delta)).toEqual([
      { role: "assistant", content: "" },
      { content: "hi" },
    ]);
    translator.push({
      data: JSON.stringify({
        type: "content_block_start",
        index: 6,
        content_block: { type: "web_search_tool_result" },
      }),
    });
    const end = translator.finish() as ChatCompletionChunk[];
    expect(end[0].choices[0].finish_reason).toBe("stop");
    expect(end[1].choices).toEqual([]);
  });

  it("uses an input given whole in content_block_start when no deltas follow", () => {
    const translator = new MessagesStreamToChat("m", { includeUsage: false });
    const push = (data: object) =>
      translator.push({ data: JSON.stringify(data) }) as ChatCompletionChunk[];
    push({
      type: "content_block_start",
      index: 0,
      content_block: { type: "tool_use", id: "toolu_X", name: "f", input: { a: 1 } },
    });
    const stop = push({ type: "content_block_stop", index: 0 });
    expect(stop[0].choices[0].delta.tool_calls).toEqual([
      { index: 0, function: { arguments: '{"a":1}' } },
    ]);
  });

  it("turns an upstream error event into an OpenAI error chunk", () => {
    const translator = new MessagesStreamToChat("m", { includeUsage: true });
    const out = translator.push({
      event: "error",
      data: '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
    });
    expect(out).toEqual([
      {
        error: {
          message: "Overloaded",
          type: "upstream_error",
          code: "upstream_error",
          param: null,
        },
      },
    ]);
  });
});

describe("redacted thinking round trip", () => {
  const redacted = { type: "redacted_thinking", data: "EmwKAhgBEgy3va3pzix" };

  it("returns redacted thinking as an encrypted reasoning detail, in JSON and in streams", () => {
    const json = messagesResponseToChat(
      {
        id: "msg_r",
        type: "message",
        role: "assistant",
        model: "up",
        content: [redacted, { type: "text", text: "ok" }],
        stop_reason: "end_turn",
        stop_sequence: null,
        usage: { input_tokens: 1, output_tokens: 1 },
      },
      "client",
    );
    const encrypted = {
      type: "reasoning.encrypted",
      data: redacted.data,
      format: "anthropic-claude-v1",
      index: 0,
    };
    expect(json.choices[0].message.reasoning_details).toEqual([encrypted]);

    const stream = new MessagesStreamToChat("client", { includeUsage: false });
    const event = (data: object) => stream.push({ data: JSON.stringify(data) });
    event({ type: "message_start", message: { id: "msg_r", usage: { input_tokens: 1 } } });
    event({ type: "content_block_start", index: 0, content_block: redacted });
    const atStop = event({ type: "content_block_stop", index: 0 }) as ChatCompletionChunk[];
    expect(atStop.map((c) => c.choices[0].delta.reasoning_details)).toEqual([[encrypted]]);
  });

  it("sends an encrypted detail back as redacted_thinking ahead of the turn's text", () => {
    const out = chatRequestToMessages(
      {
        model: "m",
        messages: [
          { role: "user", content: "hi" },
          {
            role: "assistant",
            content: "hello",
            reasoning_details: [
              { type: "reasoning.encrypted", data: redacted.data, format: "anthropic-claude-v1" },
            ],
          },
          { role: "user", content: "more" },
        ],
      },
      "up",
    );
    expect(out.messages[1].content).toEqual([redacted, { type: "text", text: "hello" }]);
  });
});
