import { describe, expect, it } from "vitest";
import type { MessagesRequest } from "../anthropic-types.js";
import type {
  ChatCompletionChunk,
  ChatCompletionRequest,
  ChatCompletionResponse,
} from "../openai-types.js";
import { chatRequestToMessages, messagesResponseToChat } from "./chat-to-messages.js";
import {
  ChatStreamToMessages,
  chatFinishToAnthropicStop,
  chatResponseToMessages,
  messagesRequestToChat,
} from "./messages-to-chat.js";

const PNG = "iVBORw0KGgo=";

const toolLoopMessagesRequest: MessagesRequest = {
  model: "client-model",
  max_tokens: 1000,
  system: [
    { type: "text", text: "You are Claude Code." },
    { type: "text", text: "Be brief.", cache_control: { type: "ephemeral" } },
  ],
  messages: [
    {
      role: "user",
      content: [
        { type: "text", text: "Fix the bug." },
        { type: "image", source: { type: "base64", media_type: "image/png", data: PNG } },
      ],
    },
    {
      role: "assistant",
      content: [
        { type: "thinking", thinking: "secret", signature: "sig" },
        { type: "text", text: "Reading two files." },
        { type: "tool_use", id: "toolu_01A", name: "Read", input: { file_path: "/a.ts" } },
        { type: "tool_use", id: "toolu_01B", name: "Read", input: { file_path: "/b.png" } },
      ],
    },
    {
      role: "user",
      content: [
        { type: "tool_result", tool_use_id: "toolu_01A", content: "const a = 1;" },
        {
          type: "tool_result",
          tool_use_id: "toolu_01B",
          content: [
            { type: "text", text: "image file" },
            { type: "image", source: { type: "url", url: "https://example.com/b.png" } },
          ],
        },
        { type: "text", text: "Also check c.ts" },
      ],
    },
    {
      role: "assistant",
      content: [{ type: "tool_use", id: "toolu_01C", name: "Bash", input: { command: "false" } }],
    },
    {
      role: "user",
      content: [{ type: "tool_result", tool_use_id: "toolu_01C", is_error: true, content: "" }],
    },
  ],
  tools: [
    {
      name: "Read",
      description: "Read a file",
      input_schema: { type: "object", properties: { file_path: { type: "string" } } },
    },
    { name: "Bash", input_schema: { type: "object", properties: { command: { type: "string" } } } },
    { type: "web_search_20250305", name: "web_search", max_uses: 3 },
  ],
  tool_choice: { type: "auto", disable_parallel_tool_use: true },
  temperature: 0.5,
  top_p: 0.8,
  top_k: 40,
  stop_sequences: ["\n\nHuman:"],
  metadata: { user_id: "u-1" },
  stream: true,
};

describe("messagesRequestToChat", () => {
  it("translates a Claude Code style tool loop, splitting tool results into tool messages", () => {
    const out = messagesRequestToChat(toolLoopMessagesRequest, "gpt-up");
    expect(out).toEqual({
      model: "gpt-up",
      max_tokens: 1000,
      temperature: 0.5,
      top_p: 0.8,
      stop: ["\n\nHuman:"],
      stream: true,
      stream_options: { include_usage: true },
      user: "u-1",
      tool_choice: "auto",
      parallel_tool_calls: false,
      tools: [
        {
          type: "function",
          function: {
            name: "Read",
            description: "Read a file",
            parameters: { type: "object", properties: { file_path: { type: "string" } } },
          },
        },
        {
          type: "function",
          function: {
            name: "Bash",
            parameters: { type: "object", properties: { command: { type: "string" } } },
          },
        },
      ],
      messages: [
        {
          role: "system",
          content: [
            { type: "text", text: "You are Claude Code." },
            { type: "text", text: "Be brief.", prompt_cache_breakpoint: { mode: "explicit" } },
          ],
        },
        {
          role: "user",
          content: [
            { type: "text", text: "Fix the bug." },
            { type: "image_url", image_url: { url: `data:image/png;base64,${PNG}` } },
          ],
        },
        {
          role: "assistant",
          content: "Reading two files.",
          tool_calls: [
            {
              id: "toolu_01A",
              type: "function",
              function: { name: "Read", arguments: '{"file_path":"/a.ts"}' },
            },
            {
              id: "toolu_01B",
              type: "function",
              function: { name: "Read", arguments: '{"file_path":"/b.png"}' },
            },
          ],
        },
        { role: "tool", tool_call_id: "toolu_01A", content: "const a = 1;" },
        { role: "tool", tool_call_id: "toolu_01B", content: "image file" },
        {
          role: "user",
          content: [
            { type: "image_url", image_url: { url: "https://example.com/b.png" } },
            { type: "text", text: "Also check c.ts" },
          ],
        },
        {
          role: "assistant",
          content: null,
          tool_calls: [
            {
              id: "toolu_01C",
              type: "function",
              function: { name: "Bash", arguments: '{"command":"false"}' },
            },
          ],
        },
        { role: "tool", tool_call_id: "toolu_01C", content: "Error" },
      ],
    });
  });

  it("maps tool_choice forms, max_completion_tokens and structured output", () => {
    const base: MessagesRequest = {
      model: "m",
      max_tokens: 10,
      messages: [{ role: "user", content: "hi" }],
      tools: toolLoopMessagesRequest.tools,
    };
    const choice = (tool_choice: MessagesRequest["tool_choice"]) =>
      messagesRequestToChat({ ...base, tool_choice }, "up").tool_choice;
    expect(choice({ type: "any" })).toBe("required");
    expect(choice({ type: "none" })).toBe("none");
    expect(choice({ type: "tool", name: "Bash" })).toEqual({
      type: "function",
      function: { name: "Bash" },
    });
    const out = messagesRequestToChat(
      { ...base, output_config: { format: { type: "json_schema", schema: { type: "object" } } } },
      "up",
      { maxTokensField: "max_completion_tokens" },
    );
    expect(out.max_completion_tokens).toBe(10);
    expect(out).not.toHaveProperty("max_tokens");
    expect(out).not.toHaveProperty("stream_options");
    expect(out.messages).toEqual([{ role: "user", content: "hi" }]);
    // Anthropic's structured outputs always hold; `fitStrictSchemas` fits them to a chat API's rules.
    expect(out.response_format).toEqual({
      type: "json_schema",
      json_schema: { name: "output", schema: { type: "object" }, strict: true },
    });
  });

  it("carries PDFs and plain-text documents", () => {
    const out = messagesRequestToChat(
      {
        model: "m",
        max_tokens: 10,
        messages: [
          {
            role: "user",
            content: [
              {
                type: "document",
                source: { type: "base64", media_type: "application/pdf", data: "JVBE" },
              },
              {
                type: "document",
                title: "notes",
                source: { type: "text", media_type: "text/plain", data: "abc" },
              },
            ],
          },
        ],
      },
      "up",
    );
    expect(out.messages[0].content).toEqual([
      {
        type: "file",
        file: { file_data: "data:application/pdf;base64,JVBE", filename: "document.pdf" },
      },
      { type: "text", text: "notes\n\nabc" },
    ]);
  });
});

const chatResponse: ChatCompletionResponse = {
  id: "chatcmpl-abc",
  object: "chat.completion",
  created: 1,
  model: "gpt-up",
  choices: [
    {
      index: 0,
      finish_reason: "tool_calls",
      message: {
        role: "assistant",
        content: "Running it.",
        tool_calls: [
          {
            id: "call_1",
            type: "function",
            function: { name: "Bash", arguments: '{"command":"ls"}' },
          },
        ],
      },
    },
  ],
  usage: {
    prompt_tokens: 100,
    completion_tokens: 9,
    total_tokens: 109,
    prompt_tokens_details: { cached_tokens: 60 },
  },
};

describe("chatResponseToMessages", () => {
  it("maps content, tool calls (input objects), stop reason and usage", () => {
    expect(chatResponseToMessages(chatResponse, "client-model")).toEqual({
      id: expect.stringMatching(/^msg_/),
      type: "message",
      role: "assistant",
      model: "client-model",
      container: null,
      content: [
        { type: "text", text: "Running it.", citations: null },
        {
          type: "tool_use",
          id: "toolu_1",
          name: "Bash",
          input: { command: "ls" },
          caller: { type: "direct" },
        },
      ],
      diagnostics: null,
      stop_details: null,
      stop_reason: "tool_use",
      stop_sequence: null,
      usage: {
        input_tokens: 40,
        output_tokens: 9,
        cache_read_input_tokens: 60,
        cache_creation_input_tokens: 0,
        cache_creation: null,
        inference_geo: null,
        output_tokens_details: null,
        server_tool_use: null,
        service_tier: null,
        speed: null,
      },
    });
  });

  it("maps finish reasons, including servers that say stop for a tool call", () => {
    expect(chatFinishToAnthropicStop("stop")).toBe("end_turn");
    expect(chatFinishToAnthropicStop("length")).toBe("max_tokens");
    expect(chatFinishToAnthropicStop("tool_calls")).toBe("tool_use");
    expect(chatFinishToAnthropicStop("function_call")).toBe("tool_use");
    expect(chatFinishToAnthropicStop("content_filter")).toBe("refusal");
    expect(chatFinishToAnthropicStop(null)).toBe("end_turn");
    expect(chatFinishToAnthropicStop("stop", true)).toBe("tool_use");
    const ollamaStyle = {
      ...chatResponse,
      choices: [{ ...chatResponse.choices[0], finish_reason: "stop" as const }],
    };
    expect(chatResponseToMessages(ollamaStyle, "m").stop_reason).toBe("tool_use");
  });

  it("survives an empty response and maps reasoning to a thinking block", () => {
    const empty = chatResponseToMessages({} as ChatCompletionResponse, "m");
    expect(empty.content).toEqual([]);
    expect(empty.stop_reason).toBe("end_turn");
    expect(empty.id).toMatch(/^msg_/);
    const reasoning = chatResponseToMessages(
      {
        ...chatResponse,
        choices: [
          {
            index: 0,
            finish_reason: "stop",
            message: { role: "assistant", content: "4", reasoning_content: "2+2" },
          },
        ],
      },
      "m",
    );
    expect(reasoning.content).toEqual([
      { type: "thinking", thinking: "2+2", signature: "" },
      { type: "text", text: "4", citations: null },
    ]);
  });
});

describe("round trips", () => {
  it("chat -> messages -> chat keeps the meaning of a multi-turn tool loop with images", () => {
    const original: ChatCompletionRequest = {
      model: "client",
      messages: [
        { role: "system", content: "sys" },
        {
          role: "user",
          content: [
            { type: "text", text: "look" },
            { type: "image_url", image_url: { url: `data:image/png;base64,${PNG}` } },
            { type: "image_url", image_url: { url: "https://example.com/x.jpg" } },
          ],
        },
        {
          role: "assistant",
          content: "calling",
          tool_calls: [
            { id: "toolu_1", type: "function", function: { name: "a", arguments: '{"x":1}' } },
            {
              id: "toolu_2",
              type: "function",
              function: { name: "b", arguments: '{"y":[true,null]}' },
            },
          ],
        },
        { role: "tool", tool_call_id: "toolu_1", content: "one" },
        { role: "tool", tool_call_id: "toolu_2", content: "two" },
        { role: "user", content: "and?" },
        { role: "assistant", content: "done" },
      ],
      tools: [
        {
          type: "function",
          function: { name: "a", description: "A", parameters: { type: "object", properties: {} } },
        },
      ],
      tool_choice: "required",
      max_tokens: 50,
      stop: ["X"],
      temperature: 0.3,
      user: "u",
    };
    const back = messagesRequestToChat(chatRequestToMessages(original, "claude"), "client");
    expect(back).toEqual({ ...original, parallel_tool_calls: undefined });
  });

  it("messages -> chat -> messages keeps the tool loop (minus thinking and server tools)", () => {
    const there = messagesRequestToChat(toolLoopMessagesRequest, "gpt");
    const back = chatRequestToMessages(there, "client-model");
    expect(back.messages[1].content).toEqual([
      { type: "text", text: "Reading two files." },
      { type: "tool_use", id: "toolu_01A", name: "Read", input: { file_path: "/a.ts" } },
      { type: "tool_use", id: "toolu_01B", name: "Read", input: { file_path: "/b.png" } },
    ]);
    expect(back.messages[2].content).toEqual([
      { type: "tool_result", tool_use_id: "toolu_01A", content: "const a = 1;" },
      { type: "tool_result", tool_use_id: "toolu_01B", content: "image file" },
      { type: "image", source: { type: "url", url: "https://example.com/b.png" } },
      { type: "text", text: "Also check c.ts" },
    ]);
    expect(back.tool_choice).toEqual({ type: "auto", disable_parallel_tool_use: true });
    expect(back.stream).toBe(true);
    expect(back.metadata).toEqual({ user_id: "u-1" });
  });

  it("responses: chat -> messages -> chat keeps tool calls, ids (in the toolu_ shape) and usage", () => {
    const back = messagesResponseToChat(chatResponseToMessages(chatResponse, "c"), "c");
    expect(back.choices[0].message.tool_calls).toEqual(
      chatResponse.choices[0].message.tool_calls?.map((call) => ({
        ...call,
        id: call.id.replace(/^call_/, "toolu_"),
      })),
    );
    expect(back.choices[0].message.content).toBe("Running it.");
    expect(back.choices[0].finish_reason).toBe("tool_calls");
    expect(back.usage).toEqual(chatResponse.usage);
  });
});

function chunk(
  delta: object,
  finish_reason: string | null = null,
  extra: object = {},
): ChatCompletionChunk {
  return {
    id: "chatcmpl-s1",
    object: "chat.completion.chunk",
    created: 1,
    model: "gpt-up",
    choices: [{ index: 0, delta, finish_reason, logprobs: null }],
    ...extra,
  } as ChatCompletionChunk;
}

/** An OpenAI stream: text, then two parallel tool calls with arguments split mid-token. */
const chatToolStream: ChatCompletionChunk[] = [
  chunk({ role: "assistant", content: "" }),
  chunk({ content: "Checking" }),
  chunk({ content: " files." }),
  chunk({
    tool_calls: [
      { index: 0, id: "call_A", type: "function", function: { name: "Read", arguments: "" } },
    ],
  }),
  chunk({ tool_calls: [{ index: 0, function: { arguments: '{"file_' } }] }),
  chunk({ tool_calls: [{ index: 0, function: { arguments: 'path":"/a.ts"}' } }] }),
  chunk({
    tool_calls: [
      {
        index: 1,
        id: "call_B",
        type: "function",
        function: { name: "Bash", arguments: '{"command":' },
      },
    ],
  }),
  chunk({ tool_calls: [{ index: 1, function: { arguments: '"ls -la"}' } }] }),
  chunk({}, "tool_calls"),
  {
    id: "chatcmpl-s1",
    object: "chat.completion.chunk",
    created: 1,
    model: "gpt-up",
    choices: [],
    usage: { prompt_tokens: 30, completion_tokens: 12, total_tokens: 42 },
  },
];

type AnyEvent = { event: string; data: Record<string, unknown> & { type: string } };

describe("ChatStreamToMessages", () => {
  it("produces a well-ordered Anthropic event stream with assembled tool input", () => {
    const translator = new ChatStreamToMessages("client-model");
    const events = [
      ...chatToolStream.flatMap((c) => translator.push(c)),
      ...translator.finish(),
    ] as AnyEvent[];
    expect(events.every((e) => e.event === e.data.type)).toBe(true);
    expect(events.map((e) => e.event)).toEqual([
      "message_start",
      "content_block_start",
      "content_block_delta",
      "content_block_delta",
      "content_block_stop",
      "content_block_start",
      "content_block_delta",
      "content_block_delta",
      "content_block_stop",
      "content_block_start",
      "content_block_delta",
      "content_block_delta",
      "content_block_stop",
      "message_delta",
      "message_stop",
    ]);
    expect(events[0].data.message).toMatchObject({
      id: expect.stringMatching(/^msg_/),
      model: "client-model",
      role: "assistant",
    });
    expect(events[5].data).toEqual({
      type: "content_block_start",
      index: 1,
      content_block: {
        type: "tool_use",
        id: "toolu_A",
        name: "Read",
        input: {},
        caller: { type: "direct" },
      },
    });
    const json = (index: number) =>
      events
        .filter((e) => e.event === "content_block_delta" && e.data.index === index)
        .map((e) => (e.data.delta as { partial_json: string }).partial_json)
        .join("");
    expect(JSON.parse(json(1))).toEqual({ file_path: "/a.ts" });
    expect(JSON.parse(json(2))).toEqual({ command: "ls -la" });
    expect(events[13].data).toEqual({
      type: "message_delta",
      delta: { stop_reason: "tool_use", stop_sequence: null, stop_details: null, container: null },
      usage: {
        input_tokens: 30,
        output_tokens: 12,
        cache_read_input_tokens: 0,
        cache_creation_input_tokens: 0,
        output_tokens_details: null,
        server_tool_use: null,
      },
    });
    expect(translator.usage()).toEqual({ input_tokens: 30, output_tokens: 12 });
    expect(translator.finish()).toEqual([]);
  });

  it("handles a name that arrives after the id, and calls reusing index 0 with new ids", () => {
    const translator = new ChatStreamToMessages("m");
    const events = [
      chunk({ tool_calls: [{ index: 0, id: "call_1", function: { arguments: '{"a"' } }] }),
      chunk({ tool_calls: [{ index: 0, function: { name: "f", arguments: ":1}" } }] }),
      chunk({ tool_calls: [{ index: 0, id: "call_2", function: { name: "g", arguments: "{}" } }] }),
      chunk({}, "stop"),
    ].flatMap((c) => translator.push(c));
    const all = [...events, ...translator.finish()] as AnyEvent[];
    const starts = all
      .filter((e) => e.event === "content_block_start")
      .map((e) => e.data.content_block);
    expect(starts).toEqual([
      { type: "tool_use", id: "toolu_1", name: "f", input: {}, caller: { type: "direct" } },
      { type: "tool_use", id: "toolu_2", name: "g", input: {}, caller: { type: "direct" } },
    ]);
    const args = all
      .filter((e) => e.event === "content_block_delta" && e.data.index === 0)
      .map((e) => (e.data.delta as { partial_json: string }).partial_json)
      .join("");
    expect(JSON.parse(args)).toEqual({ a: 1 });
    expect(all.find((e) => e.event === "message_delta")?.data.delta).toEqual({
      stop_reason: "tool_use",
      stop_sequence: null,
      stop_details: null,
      container: null,
    });
  });

  it("closes a stream cut short, ignores junk and maps errors", () => {
    const translator = new ChatStreamToMessages("m");
    expect(translator.push("junk")).toEqual([]);
    expect(
      translator
        .push({ choices: [{ index: 1, delta: { content: "other choice" } }] })
        .map((e) => e.event),
    ).toEqual(["message_start"]);
    const partial = translator.push(chunk({ content: "half" }));
    expect(partial.map((e) => e.event)).toEqual(["content_block_start", "content_block_delta"]);
    expect(translator.finish().map((e) => e.event)).toEqual([
      "content_block_stop",
      "message_delta",
      "message_stop",
    ]);

    const failing = new ChatStreamToMessages("m");
    expect(failing.push({ error: { message: "boom" } })).toEqual([
      { event: "error", data: { type: "error", error: { type: "api_error", message: "boom" } } },
    ]);
    expect(failing.finish()).toEqual([]);
  });

  it("streams reasoning_content as a thinking block before the text", () => {
    const translator = new ChatStreamToMessages("m");
    const events = [
      chunk({ reasoning_content: "think" }),
      chunk({ content: "answer" }),
      chunk({}, "stop"),
    ].flatMap((c) => translator.push(c)) as AnyEvent[];
    expect(
      events.filter((e) => e.event === "content_block_start").map((e) => e.data.content_block),
    ).toEqual([
      { type: "thinking", thinking: "", signature: "" },
      { type: "text", text: "", citations: null },
    ]);
  });
});

describe("Anthropic-defined client tools", () => {
  const toolsFor = (type: string, name: string) =>
    messagesRequestToChat(
      { model: "m", max_tokens: 10, messages: [], tools: [{ type, name }] },
      "up",
    ).tools as unknown as
      | { function: { name: string; parameters: { properties: { command: unknown } } } }[]
      | undefined;

  it("gives the editors before 2025-04 their undo_edit command, and later ones none", () => {
    const old = toolsFor("text_editor_20250124", "str_replace_editor")?.[0].function;
    expect(old?.name).toBe("str_replace_editor");
    expect(old?.parameters.properties.command).toMatchObject({
      enum: ["view", "create", "str_replace", "insert", "undo_edit"],
    });
    const current = toolsFor("text_editor_20250429", "str_replace_based_edit_tool")?.[0].function;
    expect(current?.parameters.properties.command).toMatchObject({
      enum: ["view", "create", "str_replace", "insert"],
    });
  });

  it("still leaves out tools it has no schema for (computer use, memory)", () => {
    expect(toolsFor("computer_20250124", "computer")).toBeUndefined();
    expect(toolsFor("memory_20250818", "memory")).toBeUndefined();
  });
});
