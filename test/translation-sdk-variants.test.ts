import type Anthropic from "@anthropic-ai/sdk";
import type OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { geminiJson, geminiStreamSteps } from "./support/fake-gemini.js";
import { anthropicJson, type FakeUpstream, openaiJson } from "./support/fake-upstream.js";
import { assertConforms } from "./support/openai-schemas.js";
import { outcomeOf, useThreeWires } from "./support/three-wires.js";

/**
 * Request variants the newest openai and @anthropic-ai/sdk releases let a client send (content
 * parts, history items, tool settings), through a model of each HTTP wire: carried where the wire
 * has them, refused with a 400 naming the client's field before anything is sent where leaving
 * them out would change the answer, and answered in the shape the SDK's types give it. The fakes
 * refuse what the real APIs refuse.
 */

let oa: FakeUpstream;
let an: FakeUpstream;
let gm: FakeUpstream;
let openai: OpenAI;
let anthropic: Anthropic;
useThreeWires({
  maxOutputTokens: 32_000,
  ready: (wires) => {
    ({ oa, an, gm, openai, anthropic } = wires);
  },
});

type Json = Record<string, unknown>;
const user = (content: string) => [{ role: "user" as const, content }];
const sentNothing = () => [oa, an, gm].every((fake) => fake.requests.length === 0);
const functionTool = (name: string) => ({
  type: "function" as const,
  function: { name, parameters: { type: "object", properties: {} } },
});
const twoCalls = [
  { name: "lookup", args: { q: "a" } },
  { name: "fetch", args: { url: "b" } },
];

describe("a chat answer from a Gemini model", () => {
  it("has the message fields OpenAI's schema and SDK require (refusal: null)", async () => {
    gm.queue(geminiJson("ok"));
    const answer = await openai.chat.completions.create({
      model: "h-gemini",
      messages: user("Hi"),
    });
    expect(answer.choices[0].message.refusal).toBeNull();
    assertConforms("CreateChatCompletionResponse", answer, "a Gemini model's chat answer");
  });
});

describe("parallel tool calls turned off, toward a Gemini model (which has no such switch)", () => {
  it("answers at most one call: chat's parallel_tool_calls false, whole and streamed", async () => {
    gm.queue(geminiJson(null, { calls: twoCalls }));
    const whole = await openai.chat.completions.create({
      model: "h-gemini",
      tools: [functionTool("lookup"), functionTool("fetch")],
      parallel_tool_calls: false,
      messages: user("Look it up and fetch it."),
    });
    expect(
      whole.choices[0].message.tool_calls?.map((c) => c.type === "function" && c.function.name),
    ).toEqual(["lookup"]);
    expect(whole.choices[0].finish_reason).toBe("tool_calls");

    gm.queue({ kind: "sse", steps: geminiStreamSteps([], { calls: twoCalls }) });
    const stream = openai.chat.completions.stream({
      model: "h-gemini",
      tools: [functionTool("lookup"), functionTool("fetch")],
      parallel_tool_calls: false,
      messages: user("Look it up and fetch it."),
    });
    const streamed = await stream.finalChatCompletion();
    expect(
      streamed.choices[0].message.tool_calls?.map((c) => c.type === "function" && c.function.name),
    ).toEqual(["lookup"]);
    expect(gm.refused).toEqual([]);
  });

  it("answers at most one call: a messages client's disable_parallel_tool_use, and Responses' parallel_tool_calls false", async () => {
    gm.queue(geminiJson(null, { calls: twoCalls }));
    const message = await anthropic.messages.create({
      model: "h-gemini",
      max_tokens: 200,
      tools: [
        { name: "lookup", input_schema: { type: "object", properties: {} } },
        { name: "fetch", input_schema: { type: "object", properties: {} } },
      ],
      tool_choice: { type: "auto", disable_parallel_tool_use: true },
      messages: user("Look it up and fetch it."),
    });
    expect(message.content.filter((b) => b.type === "tool_use").map((b) => b.name)).toEqual([
      "lookup",
    ]);

    gm.queue(geminiJson(null, { calls: twoCalls }));
    const response = await openai.responses.create({
      model: "h-gemini",
      tools: ["lookup", "fetch"].map((name) => ({
        type: "function" as const,
        name,
        parameters: { type: "object", properties: {} },
        strict: false,
      })),
      parallel_tool_calls: false,
      input: "Look it up and fetch it.",
    });
    expect(response.output.filter((i) => i.type === "function_call").map((i) => i.name)).toEqual([
      "lookup",
    ]);
  });

  it("passes every call on when the client allows parallel calls", async () => {
    gm.queue(geminiJson(null, { calls: twoCalls }));
    const answer = await openai.chat.completions.create({
      model: "h-gemini",
      tools: [functionTool("lookup"), functionTool("fetch")],
      messages: user("Look it up and fetch it."),
    });
    expect(answer.choices[0].message.tool_calls).toHaveLength(2);
  });
});

describe("an assistant turn that only refused (chat's refusal with no content)", () => {
  it("reaches a Gemini model as the model's turn, as it reaches Anthropic", async () => {
    const messages: OpenAI.ChatCompletionMessageParam[] = [
      { role: "user", content: "Tell me a secret." },
      { role: "assistant", content: null, refusal: "I can't share that." },
      { role: "user", content: "Then a joke." },
    ];
    gm.queue(geminiJson("ok"));
    await openai.chat.completions.create({ model: "h-gemini", messages });
    expect(gm.last.body.contents).toEqual([
      { role: "user", parts: [{ text: "Tell me a secret." }] },
      { role: "model", parts: [{ text: "I can't share that." }] },
      { role: "user", parts: [{ text: "Then a joke." }] },
    ]);
    an.queue(anthropicJson("ok"));
    await openai.chat.completions.create({ model: "h-anthropic", messages });
    expect((an.last.body.messages as Json[])[1]).toEqual({
      role: "assistant",
      content: [{ type: "text", text: "I can't share that." }],
    });
  });
});

describe("a messages client's document context (DocumentBlockParam.context)", () => {
  const text = (parts: unknown) => JSON.stringify(parts);

  it("reaches chat and Gemini models with the document, for text and PDF sources", async () => {
    const context = "Figures are in thousands of euros.";
    for (const model of ["h-openai", "h-gemini"]) {
      oa.queue(openaiJson("ok"));
      gm.queue(geminiJson("ok"));
      await anthropic.messages.create({
        model,
        max_tokens: 100,
        messages: [
          {
            role: "user",
            content: [
              {
                type: "document",
                title: "Report",
                context,
                source: { type: "text", media_type: "text/plain", data: "Revenue: 12" },
              },
              {
                type: "document",
                context: "The signed contract.",
                source: { type: "base64", media_type: "application/pdf", data: "JVBERi0x" },
              },
              { type: "text", text: "Summarize." },
            ],
          },
        ],
      });
      const sent = model === "h-openai" ? text(oa.last.body.messages) : text(gm.last.body.contents);
      expect(sent, model).toContain(context);
      expect(sent, model).toContain("Revenue: 12");
      expect(sent, model).toContain("The signed contract.");
    }
    expect(oa.refused).toEqual([]);
    expect(gm.refused).toEqual([]);
  });
});

describe("citations asked for on a document or search result, toward a model without them", () => {
  const withCitations: Anthropic.MessageCreateParams["messages"] = [
    {
      role: "user",
      content: [
        {
          type: "document",
          source: { type: "text", media_type: "text/plain", data: "The sky is blue." },
          citations: { enabled: true },
        },
        { type: "text", text: "What colour is the sky?" },
      ],
    },
  ];

  it("is a 400 naming citations toward chat and Gemini models, nothing sent", async () => {
    for (const model of ["h-openai", "h-gemini", "mock-gpt"]) {
      const outcome = await outcomeOf(
        anthropic.messages.create({ model, max_tokens: 100, messages: withCitations }),
      );
      expect(outcome.status, model).toBe(400);
      expect(outcome.message, model).toContain("citations");
    }
    expect(sentNothing()).toBe(true);
  });

  it("names citations on a search result a tool returned too", async () => {
    const outcome = await outcomeOf(
      anthropic.messages.create({
        model: "h-openai",
        max_tokens: 100,
        tools: [{ name: "search", input_schema: { type: "object", properties: {} } }],
        messages: [
          { role: "user", content: "Search." },
          {
            role: "assistant",
            content: [{ type: "tool_use", id: "toolu_1", name: "search", input: {} }],
          },
          {
            role: "user",
            content: [
              {
                type: "tool_result",
                tool_use_id: "toolu_1",
                content: [
                  {
                    type: "search_result",
                    source: "https://example.com/sky",
                    title: "Sky",
                    content: [{ type: "text", text: "The sky is blue." }],
                    citations: { enabled: true },
                  },
                ],
              },
            ],
          },
        ],
      }),
    );
    expect(outcome.status).toBe(400);
    expect(outcome.message).toContain("citations");
    expect(sentNothing()).toBe(true);
  });

  it("is carried to an anthropic-wire model, and citations turned off reach the others as text", async () => {
    an.queue(anthropicJson("Blue."));
    await anthropic.messages.create({
      model: "h-anthropic",
      max_tokens: 100,
      messages: withCitations,
    });
    expect(JSON.stringify(an.last.body.messages)).toContain('"citations":{"enabled":true}');
    oa.queue(openaiJson("Blue."));
    const answer = await anthropic.messages.create({
      model: "h-openai",
      max_tokens: 100,
      messages: [
        {
          role: "user",
          content: [
            {
              type: "document",
              source: { type: "text", media_type: "text/plain", data: "The sky is blue." },
              citations: { enabled: false },
            },
            { type: "text", text: "What colour is the sky?" },
          ],
        },
      ],
    });
    expect(answer.content).toEqual([{ type: "text", text: "Blue.", citations: null }]);
  });
});

describe("history an Anthropic or Gemini model cannot be given", () => {
  it("a chat custom tool call is a 400 naming it, nothing sent (an openai-wire model takes it)", async () => {
    const messages: OpenAI.ChatCompletionMessageParam[] = [
      { role: "user", content: "Find foo." },
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "call_1", type: "custom", custom: { name: "grep", input: "foo" } }],
      },
      { role: "tool", tool_call_id: "call_1", content: "found in a.ts" },
    ];
    for (const model of ["h-anthropic", "h-gemini"]) {
      const outcome = await outcomeOf(
        openai.chat.completions.create({ model, tools: [functionTool("lookup")], messages }),
      );
      expect(outcome.status, model).toBe(400);
      expect(outcome.message, model).toContain("custom");
    }
    expect(sentNothing()).toBe(true);
    oa.queue(openaiJson("ok"));
    await openai.chat.completions.create({ model: "h-openai", messages });
    expect(oa.refused).toEqual([]);
  });

  it("an assistant's earlier audio answer (audio.id, kept by OpenAI) is a 400 naming it", async () => {
    for (const model of ["h-anthropic", "h-gemini"]) {
      const outcome = await outcomeOf(
        openai.chat.completions.create({
          model,
          messages: [
            { role: "user", content: "Say hi." },
            { role: "assistant", audio: { id: "audio_abc" } },
            { role: "user", content: "Again." },
          ],
        }),
      );
      expect(outcome.status, model).toBe(400);
      expect(outcome.message, model).toContain("audio");
    }
    expect(sentNothing()).toBe(true);
  });
});

describe("a compaction item (OpenAI's encrypted summary of a conversation) on the Responses bridge", () => {
  it("is a 400 naming it, nothing sent: the model would answer without the conversation", async () => {
    for (const model of ["h-openai", "h-anthropic", "h-gemini", "mock-gpt"]) {
      const outcome = await outcomeOf(
        openai.responses.create({
          model,
          input: [
            { type: "compaction", encrypted_content: "gAAAA-opaque" },
            { role: "user", content: "Go on." },
          ],
        }),
      );
      expect(outcome.status, model).toBe(400);
      expect(outcome.message, model).toContain("compaction");
    }
    expect(sentNothing()).toBe(true);
  });
});

describe("calls of tools the client runs that chat has no form for, in a Responses input", () => {
  it("are a 400 naming the item, nothing sent: the model would not see the call or its output", async () => {
    // Custom tools have a form on an openai-wire model's chat (test/translation-leftovers.test.ts).
    const histories: [string, string[], OpenAI.Responses.ResponseInputItem[]][] = [
      [
        "custom_tool_call",
        ["h-anthropic", "h-gemini", "mock-gpt"],
        [
          {
            type: "custom_tool_call",
            call_id: "c1",
            name: "apply_patch",
            input: "*** Begin Patch",
          },
          { type: "custom_tool_call_output", call_id: "c1", output: "Done." },
        ],
      ],
      [
        "shell_call",
        ["h-openai", "h-anthropic", "h-gemini"],
        [
          { type: "shell_call", call_id: "s1", action: { commands: ["ls"] }, status: "completed" },
          {
            type: "shell_call_output",
            call_id: "s1",
            output: [{ stdout: "a.ts", stderr: "", outcome: { type: "exit", exit_code: 0 } }],
          },
        ],
      ],
    ];
    for (const [item, models, history] of histories) {
      for (const model of models) {
        const outcome = await outcomeOf(
          openai.responses.create({
            model,
            input: [
              { role: "user", content: "Fix it." },
              ...history,
              { role: "user", content: "And?" },
            ],
          }),
        );
        expect(outcome.status, `${item} ${model}`).toBe(400);
        expect(outcome.message, `${item} ${model}`).toContain(item);
      }
    }
    expect(sentNothing()).toBe(true);
  });
});

describe("a messages client's thinking.display omitted, toward a chat model that sends its reasoning", () => {
  const reasoned = () => {
    const reply = openaiJson("42.");
    const body = reply.body as { choices: { message: Json }[] };
    body.choices[0].message.reasoning_content = "Six times seven.";
    return reply;
  };
  const chunk = (delta: Json, finish: string | null = null) => ({
    id: "chatcmpl-r",
    object: "chat.completion.chunk",
    created: 1_700_000_000,
    model: "gpt-up",
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
  });
  const reasonedStream = () => ({
    kind: "sse" as const,
    steps: [
      { data: chunk({ role: "assistant", content: "" }) },
      { data: chunk({ reasoning_content: "Six times seven." }) },
      { data: chunk({ content: "42." }) },
      { data: chunk({}, "stop") },
      {
        data: {
          ...chunk({}),
          choices: [],
          usage: { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 },
        },
      },
      { data: "[DONE]" },
    ],
  });
  const ask = (display?: "omitted" | "summarized") => ({
    model: "h-openai",
    max_tokens: 2000,
    thinking: { type: "adaptive" as const, ...(display ? { display } : {}) },
    messages: user("What is six times seven?"),
  });

  it("leaves the reasoning text out of the answer, whole and streamed, as Anthropic's API does", async () => {
    oa.queue(reasoned());
    const whole = await anthropic.messages.create(ask("omitted"));
    expect(whole.content).toEqual([{ type: "text", text: "42.", citations: null }]);
    oa.queue(reasonedStream());
    const streamed = await anthropic.messages.stream(ask("omitted")).finalMessage();
    expect(streamed.content).toEqual([{ type: "text", text: "42.", citations: null }]);
  });

  it("shows it as a thinking block when the client did not ask it omitted", async () => {
    oa.queue(reasoned());
    const whole = await anthropic.messages.create(ask("summarized"));
    expect(whole.content.map((b) => b.type)).toEqual(["thinking", "text"]);
    oa.queue(reasonedStream());
    const streamed = await anthropic.messages.stream(ask()).finalMessage();
    expect(streamed.content.map((b) => b.type)).toEqual(["thinking", "text"]);
  });
});

describe("a chat client's reasoning_effort max toward an openai-wire model", () => {
  it("passes as written, a value of the SDK's ReasoningEffort that OpenAI's API takes", async () => {
    oa.queue(openaiJson("ok"));
    const answer = await openai.chat.completions.create({
      model: "h-openai",
      reasoning_effort: "max",
      messages: user("Hi"),
    });
    expect(oa.last.body.reasoning_effort).toBe("max");
    expect(answer.choices[0].message.content).toBe("ok");
    expect(oa.refused).toEqual([]);
  });
});

describe("Anthropic's between_tools thinking toward an anthropic-wire model", () => {
  it("passes as written, as the Messages API takes it", async () => {
    an.queue(anthropicJson("ok"));
    const answer = await anthropic.messages.create({
      model: "h-anthropic",
      max_tokens: 2000,
      thinking: { type: "between_tools" },
      messages: user("Hi"),
    });
    expect(an.last.body.thinking).toEqual({ type: "between_tools" });
    expect(answer.content).toEqual([{ type: "text", text: "ok" }]);
    expect(an.refused).toEqual([]);
  });
});
