import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import type Anthropic from "@anthropic-ai/sdk";
import type OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { geminiJson, geminiStreamSteps } from "./support/fake-gemini.js";
import {
  anthropicJson,
  anthropicStreamSteps,
  type FakeUpstream,
  openaiJson,
  openaiStreamSteps,
  openaiToolStreamSteps,
  type SseStep,
} from "./support/fake-upstream.js";
import { logged } from "./support/metering.js";
import { assertConforms, assertResponseEvent } from "./support/openai-schemas.js";
import { outcomeOf, useThreeWires } from "./support/three-wires.js";

/**
 * What the SDK field sweep left: fields a target wire has that were dropped (a messages client's
 * `service_tier`, a Responses client's `custom` tools toward OpenAI's chat), keys the official
 * SDKs' types require on a translated answer, a forced `tool_choice` whose tool is left out,
 * hosted tools' history items, and `include` given as something other than a list. The fakes
 * refuse what the real APIs refuse.
 */

let oa: FakeUpstream;
let an: FakeUpstream;
let gm: FakeUpstream;
let openai: OpenAI;
let anthropic: Anthropic;
let gw: { url: string };
useThreeWires({
  maxOutputTokens: 32_000,
  ready: (wires) => {
    ({ oa, an, gm, gw, openai, anthropic } = wires);
  },
});

type Json = Record<string, unknown>;
const user = (content: string) => [{ role: "user" as const, content }];
const sentNothing = () => [oa, an, gm].every((fake) => fake.requests.length === 0);
const noneRefused = () => [oa, an, gm].every((fake) => fake.refused.length === 0);

/**
 * The keys an interface of an installed SDK's types requires (declared without `?`), read from
 * its declaration file: what a client compiled against that SDK may read without a check.
 */
const sdkRequire = createRequire(import.meta.url);
function requiredKeys(pkg: string, file: string, name: string): string[] {
  const root = dirname(sdkRequire.resolve(pkg));
  const text = readFileSync(join(root, file), "utf8");
  const start = text.indexOf(`\nexport interface ${name} {\n`);
  if (start === -1) throw new Error(`${name} not found in ${pkg}/${file}`);
  const body = text.slice(start, text.indexOf("\n}\n", start));
  const keys = [...body.matchAll(/^ {4}(\w+):/gm)].map((match) => match[1]);
  if (keys.length === 0) throw new Error(`${name}'s keys not read from ${pkg}/${file}`);
  return keys;
}
const anthropicTypes = "resources/messages/messages.d.ts";
const anthropicKeys = (name: string) => requiredKeys("@anthropic-ai/sdk", anthropicTypes, name);

/** Each key the SDK's type requires, present (null where the gateway has nothing to say). */
function expectKeys(value: unknown, keys: string[], what: string): void {
  const missing = keys.filter(
    (key) => !(key in (value as Json)) || (value as Json)[key] === undefined,
  );
  expect(missing, what).toEqual([]);
}

/**
 * A messages answer (whole or a stream's final message) against @anthropic-ai/sdk's types; the
 * types of its blocks, each checked too.
 */
function expectAnthropicMessage(message: Anthropic.Message, what: string): string[] {
  expectKeys(message, anthropicKeys("Message"), `${what}: Message`);
  expectKeys(message.usage, anthropicKeys("Usage"), `${what}: Usage`);
  for (const block of message.content) {
    if (block.type === "text") expectKeys(block, anthropicKeys("TextBlock"), `${what}: TextBlock`);
    if (block.type === "tool_use")
      expectKeys(block, anthropicKeys("ToolUseBlock"), `${what}: ToolUseBlock`);
  }
  expect(message, what).toMatchObject({ container: null, stop_details: null, diagnostics: null });
  return message.content.map((block) => block.type);
}

const lookupTool = {
  name: "lookup",
  input_schema: { type: "object" as const, properties: { q: { type: "string" } } },
};
const chatChunk = (delta: Json, finish: string | null = null, extra: Json = {}) => ({
  id: "chatcmpl-x",
  object: "chat.completion.chunk",
  created: 1_700_000_000,
  model: "gpt-up",
  choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
  ...extra,
});
const usageChunk = {
  ...chatChunk({}),
  choices: [],
  usage: { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 },
};

describe("a messages client's service_tier toward an openai-wire model", () => {
  it("reaches chat as its own tier (standard_only as default, auto as auto), and the served tier comes back", async () => {
    for (const [tier, sent] of [
      ["standard_only", "default"],
      ["auto", "auto"],
    ] as const) {
      const reply = openaiJson("ok");
      (reply.body as Json).service_tier = "default";
      oa.queue(reply);
      const message = await anthropic.messages.create({
        model: "h-openai",
        max_tokens: 100,
        service_tier: tier,
        messages: user("Hi"),
      });
      expect(oa.last.body.service_tier, tier).toBe(sent);
      expect(message.usage.service_tier, tier).toBe("standard");
    }
    expect(oa.refused).toEqual([]);
  });
});

describe("a translated messages answer, against @anthropic-ai/sdk's Message type", () => {
  const ask = (prompt = "Say hi and look it up.") => ({
    max_tokens: 200,
    tools: [lookupTool],
    messages: user(prompt),
  });
  const chatWithCall = () =>
    openaiJson("Looking.", {
      toolCalls: [{ id: "call_1", name: "lookup", arguments: '{"q":"a"}' }],
    });

  it("has every key the SDK requires, whole and streamed, from chat, Gemini and mock models", async () => {
    oa.queue(chatWithCall(), {
      kind: "sse",
      steps: openaiToolStreamSteps(
        [{ id: "call_1", name: "lookup", argumentPieces: ['{"q":', '"a"}'] }],
        {
          text: "Looking.",
        },
      ),
    });
    gm.queue(geminiJson("Looking.", { calls: [{ name: "lookup", args: { q: "a" } }] }), {
      kind: "sse",
      steps: geminiStreamSteps(["Looking."], { calls: [{ name: "lookup", args: { q: "a" } }] }),
    });
    // The mock answers a call alone when asked for one, and text otherwise.
    const prompts = (model: string) =>
      model === "mock-gpt" ? ["Say hi.", "Look it up. [[mock:tool]]"] : [undefined];
    for (const model of ["h-openai", "h-gemini", "mock-gpt"]) {
      for (const stream of [false, true]) {
        const what = `${model} ${stream ? "streamed" : "whole"}`;
        const blocks: string[] = [];
        for (const prompt of prompts(model)) {
          const params = { model, ...ask(prompt) };
          const message = stream
            ? await anthropic.messages.stream(params).finalMessage()
            : await anthropic.messages.create(params);
          blocks.push(...expectAnthropicMessage(message, what));
        }
        expect(blocks.sort(), what).toEqual(["text", "tool_use"]);
      }
    }
    expect(noneRefused()).toBe(true);
  });

  it("keeps the answer's other fields as they were", async () => {
    oa.queue(chatWithCall());
    const message = await anthropic.messages.create({ model: "h-openai", ...ask() });
    expect(message.content).toEqual([
      { type: "text", text: "Looking.", citations: null },
      {
        type: "tool_use",
        id: "toolu_1",
        name: "lookup",
        input: { q: "a" },
        caller: { type: "direct" },
      },
    ]);
    expect(message).toMatchObject({
      stop_reason: "tool_use",
      stop_sequence: null,
      model: "h-openai",
    });
    expect(message.usage).toEqual({
      input_tokens: 11,
      output_tokens: 7,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 0,
      cache_creation: null,
      inference_geo: null,
      output_tokens_details: null,
      server_tool_use: null,
      service_tier: null,
      speed: null,
    });
  });
});

describe("a Responses answer from the bridge, against the openai SDK's Response type", () => {
  // `output_text` is the SDK's own: it adds it to what the API answers.
  const responseKeys = requiredKeys(
    "openai",
    "resources/responses/responses.d.ts",
    "Response",
  ).filter((key) => key !== "output_text");

  it("has every key the SDK requires (access_programs: null), whole and streamed, on every wire", async () => {
    oa.queue(openaiJson("ok"), { kind: "sse", steps: openaiStreamSteps(["o", "k"]) });
    an.queue(anthropicJson("ok"), { kind: "sse", steps: anthropicStreamSteps(["o", "k"]) });
    gm.queue(geminiJson("ok"), { kind: "sse", steps: geminiStreamSteps(["o", "k"]) });
    for (const model of ["h-openai", "h-anthropic", "h-gemini", "mock-gpt"]) {
      const whole = await openai.responses.create({ model, input: "Hi" });
      expectKeys(whole, responseKeys, `${model} whole`);
      expect(whole.access_programs, model).toBeNull();
      const streamed = await openai.responses.stream({ model, input: "Hi" }).finalResponse();
      expectKeys(streamed, responseKeys, `${model} streamed`);
    }
    expect(noneRefused()).toBe(true);
  });
});

describe("a Responses client's custom tools toward an openai-wire model (chat takes custom tools)", () => {
  const patchTool = {
    type: "custom" as const,
    name: "apply_patch",
    description: "Apply a patch.",
    format: {
      type: "grammar" as const,
      syntax: "lark" as const,
      definition: 'start: "*** Begin Patch"',
    },
  };
  const patch = "*** Begin Patch";
  const customCall = (pieces: string[]): SseStep[] => [
    { data: chatChunk({ role: "assistant", content: null }) },
    {
      data: chatChunk({
        tool_calls: [
          { index: 0, id: "call_c1", type: "custom", custom: { name: "apply_patch", input: "" } },
        ],
      }),
    },
    ...pieces.map((input) => ({
      data: chatChunk({ tool_calls: [{ index: 0, custom: { input } }] }),
    })),
    { data: chatChunk({}, "tool_calls") },
    { data: usageChunk },
    { data: "[DONE]" },
  ];

  it("sends the tool and a choice forcing it as chat's, and answers the call as a custom_tool_call", async () => {
    const reply = openaiJson(null, { finish: "tool_calls" });
    const body = reply.body as { choices: { message: Json }[] };
    body.choices[0].message.tool_calls = [
      { id: "call_c1", type: "custom", custom: { name: "apply_patch", input: patch } },
    ];
    oa.queue(reply);
    const { data: response, response: raw } = await openai.responses
      .create({
        model: "h-openai",
        tools: [patchTool],
        tool_choice: { type: "custom", name: "apply_patch" },
        input: "Fix the bug.",
      })
      .withResponse();
    expect(raw.headers.get("x-gateway-tools-omitted")).toBeNull();
    expect(oa.last.body.tools).toEqual([
      {
        type: "custom",
        custom: {
          name: "apply_patch",
          description: "Apply a patch.",
          format: {
            type: "grammar",
            grammar: { syntax: "lark", definition: 'start: "*** Begin Patch"' },
          },
        },
      },
    ]);
    expect(oa.last.body.tool_choice).toEqual({ type: "custom", custom: { name: "apply_patch" } });
    expect(response.output).toEqual([
      {
        type: "custom_tool_call",
        id: expect.stringMatching(/^ctc_/),
        call_id: "call_c1",
        name: "apply_patch",
        input: patch,
      },
    ]);
    assertConforms("Response", response, "a custom tool call's answer");
    expect(oa.refused).toEqual([]);
  });

  it("streams the call's input as the Responses API does", async () => {
    oa.queue({ kind: "sse", steps: customCall(["*** Begin", " Patch"]) });
    const stream = openai.responses.stream({
      model: "h-openai",
      tools: [patchTool],
      input: "Fix it.",
    });
    const events: { type: string }[] = [];
    for await (const event of stream) events.push(event);
    for (const event of events) assertResponseEvent(event, event.type);
    const call = events.filter((e) => e.type.includes("custom_tool_call_input"));
    expect(call.map((e) => [e.type, (e as Json).delta ?? (e as Json).input])).toEqual([
      ["response.custom_tool_call_input.delta", "*** Begin"],
      ["response.custom_tool_call_input.delta", " Patch"],
      ["response.custom_tool_call_input.done", patch],
    ]);
    const final = await stream.finalResponse();
    expect(final.output).toEqual([
      {
        type: "custom_tool_call",
        id: expect.stringMatching(/^ctc_/),
        call_id: "call_c1",
        name: "apply_patch",
        input: patch,
      },
    ]);
  });

  it("sends a custom call and its output in the input as chat's tool call and tool message", async () => {
    oa.queue(openaiJson("Patched."));
    await openai.responses.create({
      model: "h-openai",
      tools: [patchTool],
      input: [
        { role: "user", content: "Fix it." },
        { type: "custom_tool_call", call_id: "call_c1", name: "apply_patch", input: patch },
        { type: "custom_tool_call_output", call_id: "call_c1", output: "Done." },
      ],
    });
    expect((oa.last.body.messages as Json[]).slice(1)).toEqual([
      {
        role: "assistant",
        content: null,
        tool_calls: [
          { id: "call_c1", type: "custom", custom: { name: "apply_patch", input: patch } },
        ],
      },
      { role: "tool", tool_call_id: "call_c1", content: "Done." },
    ]);
    expect(oa.refused).toEqual([]);
    // Counted as /v1/responses sends it, not refused.
    const count = await openai.responses.inputTokens.count({
      model: "h-openai",
      tools: [patchTool],
      input: [
        { role: "user", content: "Fix it." },
        { type: "custom_tool_call", call_id: "call_c1", name: "apply_patch", input: patch },
        { type: "custom_tool_call_output", call_id: "call_c1", output: "Done." },
      ],
    });
    expect(count.input_tokens).toBeGreaterThan(0);
  });

  it("bills the call's input as output where the provider reports no usage, whole and streamed", async () => {
    const input = `${patch}\n${"+ a changed line\n".repeat(25)}`;
    const reply = openaiJson(null, { finish: "tool_calls" });
    const body = reply.body as { choices: { message: Json }[]; usage?: unknown };
    body.choices[0].message.tool_calls = [
      { id: "call_c1", type: "custom", custom: { name: "apply_patch", input } },
    ];
    delete body.usage;
    const pieces = input.match(/[^\n]*\n/g) ?? [];
    oa.queue(reply, {
      kind: "sse",
      steps: customCall(pieces).filter((s) => s.data !== usageChunk),
    });
    const whole = await openai.responses.create({
      model: "h-openai",
      tools: [patchTool],
      input: "Fix it.",
    });
    const streamed = await openai.responses
      .stream({ model: "h-openai", tools: [patchTool], input: "Fix it." })
      .finalResponse();
    // Newest first: the stream, then the whole answer.
    const rows = (await logged(gw)).slice(0, 2);
    expect(rows.map((row) => row.state)).toEqual(["settled", "settled"]);
    for (const row of rows)
      expect(row.usage.output_tokens).toBeGreaterThanOrEqual(Math.ceil(input.length / 4));
    expect(whole.output[0]).toMatchObject({ type: "custom_tool_call", input });
    expect(streamed.output[0]).toMatchObject({ type: "custom_tool_call", input });
  });

  it("bills a chat client's streamed custom call on an openai-wire model the same way", async () => {
    const input = `${patch}\n${"+ a changed line\n".repeat(25)}`;
    const pieces = input.match(/[^\n]*\n/g) ?? [];
    oa.queue({ kind: "sse", steps: customCall(pieces).filter((s) => s.data !== usageChunk) });
    const stream = openai.chat.completions.stream({
      model: "h-openai",
      tools: [{ type: "custom", custom: { name: "apply_patch" } }],
      messages: user("Fix it."),
    });
    const final = await stream.finalChatCompletion();
    expect(final.choices[0].message.tool_calls?.[0]).toMatchObject({ custom: { input } });
    const [row] = await logged(gw);
    expect(row.usage.output_tokens).toBeGreaterThanOrEqual(Math.ceil(input.length / 4));
  });

  it("is still left out, named, toward Anthropic, Gemini and the mock", async () => {
    an.queue(anthropicJson("ok"));
    gm.queue(geminiJson("ok"));
    for (const model of ["h-anthropic", "h-gemini", "mock-gpt"]) {
      const { response } = await openai.responses
        .create({ model, tools: [patchTool], input: "Hi" })
        .withResponse();
      expect(response.headers.get("x-gateway-tools-omitted"), model).toBe("custom");
    }
  });
});

describe("a forced tool_choice whose tool is left out", () => {
  const refused = async (call: Promise<unknown>, what: string) => {
    const outcome = await outcomeOf(call);
    expect(outcome.status, what).toBe(400);
    expect(outcome.message, what).toContain("tool_choice");
  };

  it("is a 400 naming tool_choice for a Responses custom choice toward Anthropic, Gemini and the mock", async () => {
    for (const model of ["h-anthropic", "h-gemini", "mock-gpt"])
      await refused(
        openai.responses.create({
          model,
          tools: [{ type: "custom", name: "apply_patch" }],
          tool_choice: { type: "custom", name: "apply_patch" },
          input: "Fix it.",
        }),
        model,
      );
    expect(sentNothing()).toBe(true);
  });

  it("is a 400 for a Responses hosted, shell or apply_patch choice on the bridge", async () => {
    const forced: [OpenAI.Responses.Tool, OpenAI.Responses.ResponseCreateParams["tool_choice"]][] =
      [
        [{ type: "file_search", vector_store_ids: ["vs_1"] }, { type: "file_search" }],
        [{ type: "web_search" }, { type: "web_search_preview" }],
        [{ type: "shell" }, { type: "shell" }],
        [{ type: "apply_patch" }, { type: "apply_patch" }],
        [
          { type: "mcp", server_label: "docs", server_url: "https://mcp.example.com" },
          { type: "mcp", server_label: "docs" },
        ],
      ];
    for (const [tool, choice] of forced)
      for (const model of ["h-openai", "h-gemini"])
        await refused(
          openai.responses.create({ model, tools: [tool], tool_choice: choice, input: "Go." }),
          `${JSON.stringify(choice)} ${model}`,
        );
    expect(sentNothing()).toBe(true);
  });

  it("is a 400 for a chat client's custom choice toward Anthropic and Gemini", async () => {
    for (const model of ["h-anthropic", "h-gemini"])
      await refused(
        openai.chat.completions.create({
          model,
          tools: [
            { type: "custom", custom: { name: "apply_patch" } },
            { type: "function", function: { name: "lookup", parameters: { type: "object" } } },
          ],
          tool_choice: { type: "custom", custom: { name: "apply_patch" } },
          messages: user("Fix it."),
        }),
        model,
      );
    expect(sentNothing()).toBe(true);
  });

  it("is a 400 for a messages client's choice of an Anthropic server tool toward chat and Gemini", async () => {
    for (const model of ["h-openai", "h-gemini"])
      await refused(
        anthropic.messages.create({
          model,
          max_tokens: 100,
          tools: [{ type: "web_search_20250305", name: "web_search" }, lookupTool],
          tool_choice: { type: "tool", name: "web_search" },
          messages: user("Search."),
        }),
        model,
      );
    expect(sentNothing()).toBe(true);
  });

  it("goes on where the tool is carried: a web search choice toward Anthropic, a function choice anywhere", async () => {
    an.queue(anthropicJson("Found."));
    await openai.responses.create({
      model: "h-anthropic",
      tools: [{ type: "web_search" }],
      tool_choice: { type: "web_search_preview" },
      input: "Search.",
    });
    expect(an.last.body.tool_choice).toEqual({ type: "tool", name: "web_search" });
    oa.queue(openaiJson(null, { toolCalls: [{ id: "call_1", name: "lookup", arguments: "{}" }] }));
    await anthropic.messages.create({
      model: "h-openai",
      max_tokens: 100,
      tools: [{ type: "web_search_20250305", name: "web_search" }, lookupTool],
      tool_choice: { type: "tool", name: "lookup" },
      messages: user("Look it up."),
    });
    expect(oa.last.body.tool_choice).toEqual({ type: "function", function: { name: "lookup" } });
    expect(noneRefused()).toBe(true);
  });
});

describe("hosted tools' items in the history toward a model of another wire", () => {
  const answered = async (model: string, input: OpenAI.Responses.ResponseInput) => {
    const fake = model === "h-openai" ? oa : model === "h-anthropic" ? an : gm;
    fake.queue(
      model === "h-openai"
        ? openaiJson("ok")
        : model === "h-anthropic"
          ? anthropicJson("ok")
          : geminiJson("ok"),
    );
    await openai.responses.create({ model, input });
    return JSON.stringify(fake.last.body);
  };

  it("carries a web search, a file search, code run by the code interpreter and MCP calls as the assistant's text", async () => {
    const input: OpenAI.Responses.ResponseInput = [
      { role: "user", content: "What is the weather in Paris, and what did the report say?" },
      {
        type: "web_search_call",
        id: "ws_1",
        status: "completed",
        action: {
          type: "search",
          query: "weather Paris today",
          sources: [{ type: "url", url: "https://weather.example/paris" }],
        },
      },
      {
        type: "file_search_call",
        id: "fs_1",
        status: "completed",
        queries: ["quarterly report"],
        results: [{ file_id: "file_1", filename: "q3.pdf", text: "Revenue rose 12%." }],
      },
      {
        type: "code_interpreter_call",
        id: "ci_1",
        status: "completed",
        container_id: "cntr_1",
        code: "print(12 * 3)",
        outputs: [{ type: "logs", logs: "36" }],
      },
      {
        type: "mcp_call",
        id: "mcp_1",
        server_label: "crm",
        name: "find_customer",
        arguments: '{"q":"ana"}',
        output: "Ana, Jakarta",
      },
      {
        type: "message",
        id: "msg_1",
        role: "assistant",
        status: "completed",
        content: [{ type: "output_text", text: "Sunny, 24°C.", annotations: [] }],
      },
      { role: "user", content: "And tomorrow?" },
    ];
    for (const model of ["h-openai", "h-anthropic", "h-gemini"]) {
      const sent = await answered(model, input);
      for (const readable of [
        "weather Paris today",
        "https://weather.example/paris",
        "quarterly report",
        "Revenue rose 12%.",
        "print(12 * 3)",
        "36",
        "find_customer",
        "Ana, Jakarta",
        "Sunny, 24°C.",
      ])
        expect(sent, `${model}: ${readable}`).toContain(readable);
    }
    expect(noneRefused()).toBe(true);
    const assistant = (oa.last.body.messages as Json[]).find((m) => m.role === "assistant");
    expect(String(assistant?.content)).toMatch(
      /^\[web_search_call\]\naction\.query: weather Paris today\n/,
    );
    expect(String(assistant?.content)).toMatch(/\n\nSunny, 24°C\.$/);
  });

  it("refuses an image_generation_call and an mcp_approval_response, naming them, nothing sent", async () => {
    const items: [string, OpenAI.Responses.ResponseInputItem][] = [
      [
        "image_generation_call",
        { type: "image_generation_call", id: "ig_1", status: "completed", result: "iVBORw0KGgo=" },
      ],
      [
        "mcp_approval_response",
        { type: "mcp_approval_response", approval_request_id: "mcpr_1", approve: true },
      ],
    ];
    for (const [name, item] of items)
      for (const model of ["h-openai", "h-anthropic", "h-gemini"]) {
        const outcome = await outcomeOf(
          openai.responses.create({ model, input: [{ role: "user", content: "Go." }, item] }),
        );
        expect(outcome.status, `${name} ${model}`).toBe(400);
        expect(outcome.message, `${name} ${model}`).toContain(name);
      }
    expect(sentNothing()).toBe(true);
  });

  it("carries a messages client's Anthropic server tool blocks as the assistant's text toward chat and Gemini", async () => {
    const messages: Anthropic.MessageParam[] = [
      { role: "user", content: "Weather in Paris?" },
      {
        role: "assistant",
        content: [
          { type: "text", text: "Let me search." },
          {
            type: "server_tool_use",
            id: "srvtoolu_1",
            name: "web_search",
            input: { query: "weather Paris" },
          },
          {
            type: "web_search_tool_result",
            tool_use_id: "srvtoolu_1",
            content: [
              {
                type: "web_search_result",
                title: "Paris forecast",
                url: "https://weather.example/paris",
                encrypted_content: "EqQBCioIAhgBIiQ-opaque",
              },
            ],
          },
          { type: "text", text: "Sunny." },
        ],
      },
      { role: "user", content: "And tomorrow?" },
    ];
    oa.queue(openaiJson("ok"));
    gm.queue(geminiJson("ok"));
    for (const model of ["h-openai", "h-gemini"])
      await anthropic.messages.create({ model, max_tokens: 100, messages });
    const assistant = String((oa.last.body.messages as Json[])[1].content);
    expect(assistant).toBe(
      "Let me search.\n\n[server_tool_use]\nname: web_search\ninput.query: weather Paris\n\n" +
        "[web_search_tool_result]\ncontent.title: Paris forecast\ncontent.url: https://weather.example/paris\n\nSunny.",
    );
    const modelTurn = JSON.stringify((gm.last.body.contents as Json[])[1]);
    expect(modelTurn).toContain("Paris forecast");
    expect(modelTurn).not.toContain("opaque");
    expect(noneRefused()).toBe(true);
  });
});

describe("a Responses include that is not a list", () => {
  it("is a 400 naming include, as OpenAI's API answers, nothing sent", async () => {
    for (const model of ["h-openai", "h-anthropic", "mock-gpt"]) {
      const outcome = await outcomeOf(
        openai.responses.create({
          model,
          input: "Hi",
          include:
            "reasoning.encrypted_content" as unknown as OpenAI.Responses.ResponseIncludable[],
        }),
      );
      expect(outcome.status, model).toBe(400);
      expect(outcome.message, model).toContain("include");
    }
    expect(sentNothing()).toBe(true);
  });
});
