import type Anthropic from "@anthropic-ai/sdk";
import type OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { geminiJson } from "./support/fake-gemini.js";
import { anthropicJson, type FakeUpstream } from "./support/fake-upstream.js";
import { outcomeOf, useThreeWires } from "./support/three-wires.js";

/**
 * What the official SDKs send, toward a model of another wire: a `tool_choice` naming a tool the
 * request does not declare is refused as OpenAI's and Anthropic's APIs refuse it (never answered
 * without the call it forces), and what a tool returned besides text (an image, a PDF) reaches
 * the model with the tool's result.
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
const sentNothing = () => [oa, an, gm].every((fake) => fake.requests.length === 0);
const PNG =
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
const PDF = Buffer.from("%PDF-1.4 a weather report").toString("base64");

describe("a tool_choice naming a tool the request does not declare, toward another wire", () => {
  const declared = "get_weather";
  const chatTool: OpenAI.ChatCompletionTool = {
    type: "function",
    function: { name: declared, parameters: { type: "object", properties: {} } },
  };
  const responsesTool: OpenAI.Responses.FunctionTool = {
    type: "function",
    name: declared,
    parameters: { type: "object", properties: {} },
    strict: false,
  };
  const messagesTool: Anthropic.Tool = { name: declared, input_schema: { type: "object" } };

  it("is a 400 naming tool_choice and the tool in the client's style, nothing sent", async () => {
    const calls: [string, () => Promise<unknown>][] = [];
    for (const tools of [true, false]) {
      for (const model of ["h-anthropic", "h-gemini"])
        calls.push([
          `chat ${model} tools ${tools}`,
          () =>
            openai.chat.completions.create({
              model,
              messages: [{ role: "user", content: "Weather?" }],
              ...(tools ? { tools: [chatTool] } : {}),
              tool_choice: { type: "function", function: { name: "get_forecast" } },
            }),
        ]);
      for (const model of ["h-openai", "h-anthropic", "h-gemini"])
        calls.push([
          `responses ${model} tools ${tools}`,
          () =>
            openai.responses.create({
              model,
              input: "Weather?",
              tools: tools ? [responsesTool] : [],
              tool_choice: { type: "function", name: "get_forecast" },
            }),
        ]);
      for (const model of ["h-openai", "h-gemini"])
        calls.push([
          `messages ${model} tools ${tools}`,
          () =>
            anthropic.messages.create({
              model,
              max_tokens: 100,
              messages: [{ role: "user", content: "Weather?" }],
              ...(tools ? { tools: [messagesTool] } : {}),
              tool_choice: { type: "tool", name: "get_forecast" },
            }),
        ]);
    }
    for (const [what, call] of calls) {
      const outcome = await outcomeOf(call());
      expect(outcome.status, what).toBe(400);
      // As OpenAI's and Anthropic's APIs type the refusal.
      const type = what.startsWith("messages")
        ? (outcome as { error?: { error?: { type?: string } } }).error?.error?.type
        : (outcome as { type?: string }).type;
      expect(type, what).toBe("invalid_request_error");
      expect(outcome.message, what).toContain(
        "`tool_choice` names the tool `get_forecast`, which is not among the request's `tools`",
      );
    }
    expect(sentNothing()).toBe(true);
  });

  it("goes on where the tool is declared", async () => {
    an.queue(anthropicJson(null, { toolUses: [{ id: "toolu_1", name: declared, input: {} }] }));
    const answer = await openai.chat.completions.create({
      model: "h-anthropic",
      messages: [{ role: "user", content: "Weather?" }],
      tools: [chatTool],
      tool_choice: { type: "function", function: { name: declared } },
    });
    expect(answer.choices[0].message.tool_calls?.[0]).toMatchObject({ id: "toolu_1" });
    expect(an.last.body.tool_choice).toEqual({ type: "tool", name: declared });
  });
});

describe("a chat client's tool result with an image or a PDF, toward another wire", () => {
  const messages = (result: OpenAI.ChatCompletionContentPart[]) =>
    [
      { role: "user", content: "What does the screenshot show?" },
      {
        role: "assistant",
        content: null,
        tool_calls: [
          { id: "call_shot", type: "function", function: { name: "screenshot", arguments: "{}" } },
        ],
      },
      // A tool message with an image or a file part, as agents send what a tool returned.
      { role: "tool", tool_call_id: "call_shot", content: result },
    ] as OpenAI.ChatCompletionMessageParam[];
  const tools: OpenAI.ChatCompletionTool[] = [
    { type: "function", function: { name: "screenshot", parameters: { type: "object" } } },
  ];
  const image: OpenAI.ChatCompletionContentPart = {
    type: "image_url",
    image_url: { url: `data:image/png;base64,${PNG}` },
  };
  const pdf: OpenAI.ChatCompletionContentPart = {
    type: "file",
    file: { file_data: `data:application/pdf;base64,${PDF}`, filename: "report.pdf" },
  };
  const text: OpenAI.ChatCompletionContentPart = { type: "text", text: "captured" };

  it("reaches Gemini as the function's response and the image after it, in the same turn", async () => {
    gm.queue(geminiJson("A chart."));
    await openai.chat.completions.create({
      model: "h-gemini",
      tools,
      messages: messages([text, image]),
    });
    const turns = gm.last.body.contents as { role: string; parts: Json[] }[];
    expect(turns.at(-1)).toEqual({
      role: "user",
      parts: [
        { functionResponse: { name: "screenshot", response: { output: "captured" } } },
        { inlineData: { mimeType: "image/png", data: PNG } },
      ],
    });
    expect(gm.refused).toEqual([]);
  });

  it("reaches Anthropic inside the tool_result, a PDF as a document", async () => {
    an.queue(anthropicJson("A report."));
    await openai.chat.completions.create({
      model: "h-anthropic",
      tools,
      messages: messages([text, image, pdf]),
    });
    const turns = an.last.body.messages as { role: string; content: Json[] }[];
    expect(turns.at(-1)?.content).toEqual([
      {
        type: "tool_result",
        tool_use_id: "call_shot",
        content: [
          { type: "text", text: "captured" },
          { type: "image", source: { type: "base64", media_type: "image/png", data: PNG } },
          {
            type: "document",
            source: { type: "base64", media_type: "application/pdf", data: PDF },
            title: "report.pdf",
          },
        ],
      },
    ]);
    expect(an.refused).toEqual([]);
  });
});
