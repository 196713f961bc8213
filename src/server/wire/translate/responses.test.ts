import { describe, expect, it } from "vitest";
import type { ChatCompletionChunk, ChatCompletionResponse } from "../openai-types.js";
import type { ResponsesRequest } from "../responses-types.js";
import {
  ChatStreamToResponses,
  chatResponseToResponses,
  responsesRequestToChat,
} from "./responses.js";

const codexLikeRequest: ResponsesRequest = {
  model: "client-model",
  instructions: "You are Codex.",
  input: [
    { type: "message", role: "developer", content: [{ type: "input_text", text: "Sandbox: on" }] },
    {
      type: "message",
      role: "user",
      content: [
        { type: "input_text", text: "List files" },
        { type: "input_image", image_url: "data:image/png;base64,AAAA", detail: "low" },
        { type: "input_image", file_id: "file-123" },
      ],
    },
    { type: "reasoning", id: "rs_1", summary: [] },
    {
      type: "message",
      role: "assistant",
      content: [{ type: "output_text", text: "Running ls.", annotations: [] }],
    },
    { type: "function_call", call_id: "call_1", name: "shell", arguments: '{"cmd":["ls"]}' },
    { type: "function_call", call_id: "call_2", name: "shell", arguments: '{"cmd":["pwd"]}' },
    { type: "function_call_output", call_id: "call_1", output: "a.ts\nb.ts" },
    {
      type: "function_call_output",
      call_id: "call_2",
      output: [
        { type: "input_text", text: "/work" },
        { type: "input_image", image_url: "https://example.com/s.png" },
      ],
    },
    { role: "user", content: "thanks" },
  ],
  tools: [
    {
      type: "function",
      name: "shell",
      description: "Run a command",
      parameters: { type: "object", properties: { cmd: { type: "array" } } },
      strict: false,
    },
    { type: "web_search" },
  ],
  tool_choice: "auto",
  parallel_tool_calls: true,
  max_output_tokens: 300,
  temperature: 0.1,
  reasoning: { effort: "low" },
  text: { format: { type: "json_schema", name: "out", schema: { type: "object" }, strict: true } },
  stream: true,
};

describe("responsesRequestToChat", () => {
  it("translates instructions, items, function calls and outputs", () => {
    expect(responsesRequestToChat(codexLikeRequest, "up")).toEqual({
      model: "up",
      max_tokens: 300,
      temperature: 0.1,
      stream: true,
      stream_options: { include_usage: true },
      reasoning_effort: "low",
      tool_choice: "auto",
      parallel_tool_calls: true,
      response_format: {
        type: "json_schema",
        json_schema: { name: "out", schema: { type: "object" }, strict: true },
      },
      tools: [
        {
          type: "function",
          function: {
            name: "shell",
            description: "Run a command",
            parameters: { type: "object", properties: { cmd: { type: "array" } } },
            strict: false,
          },
        },
      ],
      messages: [
        { role: "system", content: "You are Codex." },
        { role: "system", content: "Sandbox: on" },
        {
          role: "user",
          content: [
            { type: "text", text: "List files" },
            { type: "image_url", image_url: { url: "data:image/png;base64,AAAA", detail: "low" } },
          ],
        },
        {
          role: "assistant",
          content: "Running ls.",
          tool_calls: [
            {
              id: "call_1",
              type: "function",
              function: { name: "shell", arguments: '{"cmd":["ls"]}' },
            },
            {
              id: "call_2",
              type: "function",
              function: { name: "shell", arguments: '{"cmd":["pwd"]}' },
            },
          ],
        },
        { role: "tool", tool_call_id: "call_1", content: "a.ts\nb.ts" },
        { role: "tool", tool_call_id: "call_2", content: "/work" },
        {
          role: "user",
          content: [{ type: "image_url", image_url: { url: "https://example.com/s.png" } }],
        },
        { role: "user", content: "thanks" },
      ],
    });
  });

  it("accepts a plain string input and a specific function tool_choice", () => {
    const out = responsesRequestToChat(
      {
        model: "m",
        input: "hello",
        tools: codexLikeRequest.tools,
        tool_choice: { type: "function", name: "shell" },
      },
      "up",
      { maxTokensField: "max_completion_tokens" },
    );
    expect(out.messages).toEqual([{ role: "user", content: "hello" }]);
    expect(out.tool_choice).toEqual({ type: "function", function: { name: "shell" } });
    expect(out).not.toHaveProperty("stream");
  });
});

const chatResponse: ChatCompletionResponse = {
  id: "chatcmpl-1",
  object: "chat.completion",
  created: 1,
  model: "up",
  choices: [
    {
      index: 0,
      finish_reason: "tool_calls",
      message: {
        role: "assistant",
        content: "Let me look.",
        tool_calls: [
          {
            id: "call_9",
            type: "function",
            function: { name: "shell", arguments: '{"cmd":["ls"]}' },
          },
        ],
      },
    },
  ],
  usage: {
    prompt_tokens: 20,
    completion_tokens: 5,
    total_tokens: 25,
    prompt_tokens_details: { cached_tokens: 4 },
    completion_tokens_details: { reasoning_tokens: 2 },
  },
};

describe("chatResponseToResponses", () => {
  it("builds a Response with message and function_call items and usage", () => {
    const out = chatResponseToResponses(chatResponse, "client-model", codexLikeRequest);
    expect(out.id).toMatch(/^resp_/);
    expect(out).toMatchObject({
      object: "response",
      status: "completed",
      model: "client-model",
      instructions: "You are Codex.",
      max_output_tokens: 300,
      temperature: 0.1,
      error: null,
      incomplete_details: null,
      usage: {
        input_tokens: 20,
        input_tokens_details: { cached_tokens: 4, cache_write_tokens: 0 },
        output_tokens: 5,
        output_tokens_details: { reasoning_tokens: 2 },
        total_tokens: 25,
      },
    });
    expect(out.output).toEqual([
      {
        type: "message",
        id: expect.stringMatching(/^msg_/),
        status: "completed",
        role: "assistant",
        content: [{ type: "output_text", text: "Let me look.", annotations: [], logprobs: [] }],
      },
      {
        type: "function_call",
        id: expect.stringMatching(/^fc_/),
        call_id: "call_9",
        name: "shell",
        arguments: '{"cmd":["ls"]}',
        status: "completed",
      },
    ]);
  });

  it("reports truncation as incomplete and survives an empty response", () => {
    const truncated = chatResponseToResponses(
      { ...chatResponse, choices: [{ ...chatResponse.choices[0], finish_reason: "length" }] },
      "m",
    );
    expect(truncated.status).toBe("incomplete");
    expect(truncated.incomplete_details).toEqual({ reason: "max_output_tokens" });
    const empty = chatResponseToResponses({} as ChatCompletionResponse, "m");
    expect(empty.output).toEqual([]);
    expect(empty.status).toBe("completed");
    expect(empty.tool_choice).toBe("auto");
  });
});

function chunk(delta: object, finish_reason: string | null = null): ChatCompletionChunk {
  return {
    id: "chatcmpl-s",
    object: "chat.completion.chunk",
    created: 1,
    model: "up",
    choices: [{ index: 0, delta, finish_reason, logprobs: null }],
  } as ChatCompletionChunk;
}

type AnyEvent = {
  event: string;
  data: Record<string, unknown> & { type: string; sequence_number: number };
};

describe("ChatStreamToResponses", () => {
  it("emits the Responses event sequence with numbered events", () => {
    const translator = new ChatStreamToResponses("client-model", codexLikeRequest);
    const chunks = [
      chunk({ role: "assistant", content: "" }),
      chunk({ content: "Hel" }),
      chunk({ content: "lo" }),
      chunk({
        tool_calls: [
          {
            index: 0,
            id: "call_1",
            type: "function",
            function: { name: "shell", arguments: '{"cmd"' },
          },
        ],
      }),
      chunk({ tool_calls: [{ index: 0, function: { arguments: ':["ls"]}' } }] }),
      chunk({
        tool_calls: [
          {
            index: 1,
            id: "call_2",
            type: "function",
            function: { name: "shell", arguments: "{}" },
          },
        ],
      }),
      chunk({}, "tool_calls"),
      {
        ...chunk({}),
        choices: [],
        usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 },
      },
    ];
    const events = [
      ...chunks.flatMap((c) => translator.push(c)),
      ...translator.finish(),
    ] as AnyEvent[];
    expect(events.map((e) => e.event)).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.content_part.added",
      "response.output_text.delta",
      "response.output_text.delta",
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.output_item.added",
      "response.function_call_arguments.delta",
      "response.function_call_arguments.delta",
      "response.function_call_arguments.done",
      "response.output_item.done",
      "response.output_item.added",
      "response.function_call_arguments.delta",
      "response.function_call_arguments.done",
      "response.output_item.done",
      "response.completed",
    ]);
    expect(events.map((e) => e.data.sequence_number)).toEqual(events.map((_, i) => i));
    expect(events.every((e) => e.event === e.data.type)).toBe(true);
    expect(events[6].data).toMatchObject({ output_index: 0, content_index: 0, text: "Hello" });
    expect(events[12].data).toMatchObject({
      output_index: 1,
      name: "shell",
      arguments: '{"cmd":["ls"]}',
    });
    const completed = events[events.length - 1].data.response as Record<string, unknown>;
    expect(completed).toMatchObject({
      status: "completed",
      model: "client-model",
      usage: { input_tokens: 7, output_tokens: 3, total_tokens: 10 },
    });
    expect(completed.output).toMatchObject([
      { type: "message", status: "completed", content: [{ type: "output_text", text: "Hello" }] },
      {
        type: "function_call",
        call_id: "call_1",
        arguments: '{"cmd":["ls"]}',
        status: "completed",
      },
      { type: "function_call", call_id: "call_2", arguments: "{}", status: "completed" },
    ]);
    // The created event is a snapshot: later changes must not leak into it.
    expect((events[0].data.response as { output: unknown[] }).output).toEqual([]);
    expect(translator.usage()).toEqual({ input_tokens: 7, output_tokens: 3 });
    expect(translator.finish()).toEqual([]);
  });

  it("ends as incomplete on length, and as failed on an error chunk", () => {
    const truncated = new ChatStreamToResponses("m");
    truncated.push(chunk({ content: "abc" }, "length"));
    const end = truncated.finish() as AnyEvent[];
    expect(end[end.length - 1].event).toBe("response.incomplete");

    const failing = new ChatStreamToResponses("m");
    failing.push(chunk({ content: "abc" }));
    const failed = failing.push({ error: { message: "boom" } }) as AnyEvent[];
    expect(failed.map((e) => e.event)).toEqual(["error", "response.failed"]);
    expect(failed[0].data).toMatchObject({ code: "upstream_error", message: "boom", param: null });
    expect(failed[1].data.response).toMatchObject({
      status: "failed",
      error: { code: "server_error", message: "boom" },
    });
    expect(failing.finish()).toEqual([]);
  });

  it("numbers a failure on from the last event sent, with the whole Response the client asked for", () => {
    const asked = {
      model: "client-model",
      input: "hi",
      instructions: "Be brief.",
      temperature: 0.3,
      top_p: 0.8,
      metadata: { run: "7" },
      tool_choice: "auto" as const,
      tools: [{ type: "function", name: "f", parameters: { type: "object" } }],
    };
    const translator = new ChatStreamToResponses("client-model", asked);
    const sent = translator.push(chunk({ content: "abc" })) as AnyEvent[];
    const failed = translator.fail("cut off") as AnyEvent[];
    expect([...sent, ...failed].map((e) => e.data.sequence_number)).toEqual(
      [...sent, ...failed].map((_, i) => i),
    );
    expect(failed[1].data.response).toMatchObject({
      status: "failed",
      model: "client-model",
      instructions: "Be brief.",
      temperature: 0.3,
      top_p: 0.8,
      metadata: { run: "7" },
      tool_choice: "auto",
      tools: asked.tools,
      usage: { input_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 } },
    });
    expect(translator.fail("again")).toEqual([]);
  });

  it("never throws on junk", () => {
    const translator = new ChatStreamToResponses("m");
    expect(translator.push(42)).toEqual([]);
    expect(translator.push({ choices: "nope" }).map((e) => e.event)).toEqual([
      "response.created",
      "response.in_progress",
    ]);
    expect(translator.finish().map((e) => e.event)).toEqual(["response.completed"]);
  });
});

describe("reasoning summaries: the thinking of a chat answer as a reasoning item", () => {
  const summaryAsked: ResponsesRequest = {
    model: "m",
    input: "6 x 7?",
    reasoning: { effort: "low", summary: "auto" },
  };
  const thinkingAnswer = (message: object): ChatCompletionResponse =>
    ({
      id: "chatcmpl-r",
      object: "chat.completion",
      created: 1,
      model: "up",
      choices: [{ index: 0, message: { role: "assistant", ...message }, finish_reason: "stop" }],
      usage: { prompt_tokens: 3, completion_tokens: 9, total_tokens: 12 },
    }) as ChatCompletionResponse;

  it("puts reasoning_content (or `reasoning`) first in a JSON answer only when a summary was asked", () => {
    const out = chatResponseToResponses(
      thinkingAnswer({ content: "42", reasoning_content: "Six sevens." }),
      "m",
      summaryAsked,
    );
    expect(out.output.map((item) => item.type)).toEqual(["reasoning", "message"]);
    expect(out.output[0]).toEqual({
      type: "reasoning",
      id: expect.stringMatching(/^rs_/),
      summary: [{ type: "summary_text", text: "Six sevens." }],
    });
    const named = chatResponseToResponses(
      thinkingAnswer({ content: null, reasoning: "Call it.", tool_calls: [] }),
      "m",
      summaryAsked,
    );
    expect(named.output).toEqual([
      expect.objectContaining({ summary: [{ type: "summary_text", text: "Call it." }] }),
    ]);

    // Without a summary asked the thinking is left out, JSON and streamed, as before.
    const answer = thinkingAnswer({ content: "42", reasoning_content: "Six sevens." });
    for (const req of [undefined, { model: "m", reasoning: { effort: "low" } }]) {
      const out = chatResponseToResponses(answer, "m", req);
      expect(out.output.map((item) => item.type)).toEqual(["message"]);
    }
    const translator = new ChatStreamToResponses("m", { model: "m", reasoning: { effort: "low" } });
    const events = [
      ...translator.push(chunk({ reasoning_content: "Six sevens." })),
      ...translator.push(chunk({ content: "42" }, "stop")),
      ...translator.finish(),
    ];
    expect(events.some((e) => e.event.includes("reasoning"))).toBe(false);
    expect(events.at(-1)?.data.response).toMatchObject({ output: [{ type: "message" }] });
  });

  it("streams the thinking as a reasoning item before the message, numbered and indexed", () => {
    const translator = new ChatStreamToResponses("m", summaryAsked);
    const events = [
      ...translator.push(chunk({ role: "assistant", reasoning_content: "Six " })),
      ...translator.push(chunk({ reasoning_content: "sevens." })),
      ...translator.push(chunk({ content: "42" })),
      ...translator.push(chunk({}, "stop")),
      ...translator.finish(),
    ] as AnyEvent[];
    expect(events.map((e) => e.event)).toEqual([
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
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.completed",
    ]);
    expect(events.map((e) => e.data.sequence_number)).toEqual(events.map((_, i) => i));
    const rs = events[2].data.item as { id: string };
    expect(events[2].data).toMatchObject({
      output_index: 0,
      item: { type: "reasoning", id: expect.stringMatching(/^rs_/), summary: [] },
    });
    for (const e of events.slice(3, 8)) {
      expect(e.data).toMatchObject({ item_id: rs.id, output_index: 0, summary_index: 0 });
    }
    expect(events[3].data.part).toEqual({ type: "summary_text", text: "" });
    expect(events[4].data.delta).toBe("Six ");
    expect(events[6].data.text).toBe("Six sevens.");
    expect(events[7].data.part).toEqual({ type: "summary_text", text: "Six sevens." });
    expect(events[8].data.item).toEqual({
      type: "reasoning",
      id: rs.id,
      summary: [{ type: "summary_text", text: "Six sevens." }],
    });
    expect(events[9].data).toMatchObject({ output_index: 1, item: { type: "message" } });
    const done = events.at(-1)?.data.response as { output: unknown[] };
    expect(done.output).toEqual([
      events[8].data.item,
      expect.objectContaining({
        type: "message",
        content: [expect.objectContaining({ text: "42" })],
      }),
    ]);
  });

  it("closes the reasoning item before a tool call, which takes the next output index", () => {
    const translator = new ChatStreamToResponses("m", summaryAsked);
    const events = [
      ...translator.push(chunk({ reasoning_content: "Need weather." })),
      ...translator.push(
        chunk({
          tool_calls: [
            { index: 0, id: "call_w", type: "function", function: { name: "w", arguments: "{}" } },
          ],
        }),
      ),
      ...translator.push(chunk({}, "tool_calls")),
      ...translator.finish(),
    ] as AnyEvent[];
    const added = events.filter((e) => e.event === "response.output_item.added");
    expect(added.map((e) => [e.data.output_index, (e.data.item as { type: string }).type])).toEqual(
      [
        [0, "reasoning"],
        [1, "function_call"],
      ],
    );
    const firstCall = events.findIndex(
      (e) => e.event === "response.output_item.added" && e.data.output_index === 1,
    );
    expect(events[firstCall - 1]).toMatchObject({
      event: "response.output_item.done",
      data: { output_index: 0 },
    });
    const done = events.at(-1)?.data.response as { output: { type: string }[] };
    expect(done.output.map((item) => item.type)).toEqual(["reasoning", "function_call"]);
  });
});
