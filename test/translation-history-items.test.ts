import type Anthropic from "@anthropic-ai/sdk";
import type OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { geminiJson } from "./support/fake-gemini.js";
import { anthropicJson, type FakeUpstream, openaiJson } from "./support/fake-upstream.js";
import { outcomeOf, useThreeWires } from "./support/three-wires.js";

/**
 * History items of OpenAI's newest hosted tools (tool search, programmatic tool calling) and
 * Anthropic's `container_upload` block, toward a model of another wire: carried where the model
 * can read them, refused by name where it cannot, never dropped without a word.
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
const fakes = () => [oa, an, gm];
const sentNothing = () => fakes().every((fake) => fake.requests.length === 0);
const noneRefused = () => fakes().every((fake) => fake.refused.length === 0);
const models = ["h-openai", "h-anthropic", "h-gemini"] as const;
const fakeOf = (model: string) => (model === "h-openai" ? oa : model === "h-anthropic" ? an : gm);
const okReply = (model: string) =>
  model === "h-openai"
    ? openaiJson("ok")
    : model === "h-anthropic"
      ? anthropicJson("ok")
      : geminiJson("ok");

/** The names of the functions a request sent to a fake declares, on its wire. */
function declaredFunctions(model: string, body: Json): string[] {
  if (model === "h-openai")
    return (body.tools as { function: { name: string } }[]).map((tool) => tool.function.name);
  if (model === "h-anthropic") return (body.tools as { name: string }[]).map((tool) => tool.name);
  return (body.tools as { functionDeclarations: { name: string }[] }[]).flatMap((group) =>
    group.functionDeclarations.map((fn) => fn.name),
  );
}

const weather: OpenAI.Responses.FunctionTool = {
  type: "function",
  name: "get_weather",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  strict: false,
  defer_loading: true,
};
const forecast: OpenAI.Responses.FunctionTool = {
  type: "function",
  name: "get_forecast",
  description: "Forecast for the next days",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  strict: false,
};

describe("a tool search's items in a Responses history toward a model of another wire", () => {
  const input: OpenAI.Responses.ResponseInput = [
    { role: "user", content: "Forecast for Paris?" },
    {
      type: "tool_search_call",
      id: "tsc_1",
      call_id: "call_ts1",
      execution: "server",
      status: "completed",
      arguments: { query: "weather forecast tools" },
    },
    {
      type: "tool_search_output",
      id: "tso_1",
      call_id: "call_ts1",
      execution: "server",
      status: "completed",
      tools: [forecast, weather],
    },
    {
      type: "function_call",
      call_id: "call_fc1",
      name: "get_forecast",
      arguments: '{"city":"Paris"}',
    },
    { type: "function_call_output", call_id: "call_fc1", output: "Rain tomorrow." },
  ];

  it("carries what was searched and which tools it loaded as the assistant's text, and declares those tools", async () => {
    for (const model of models) {
      fakeOf(model).queue(okReply(model));
      // The request declares one of the tools already (deferred, as tool search loads it).
      await openai.responses.create({ model, input, tools: [weather] });
      const body = fakeOf(model).last.body;
      const sent = JSON.stringify(body);
      for (const readable of ["weather forecast tools", "get_forecast", "Rain tomorrow."])
        expect(sent, `${model}: ${readable}`).toContain(readable);
      // Each loaded tool is declared once, so the model may call it.
      expect(declaredFunctions(model, body).sort(), model).toEqual(["get_forecast", "get_weather"]);
    }
    expect(noneRefused()).toBe(true);
    const assistant = (oa.last.body.messages as Json[]).find((m) => m.role === "assistant");
    expect(assistant?.content).toBe(
      "[tool_search_call]\nexecution: server\narguments.query: weather forecast tools\n\n" +
        "[tool_search_output]\nexecution: server\ntools.name: get_forecast\n" +
        "tools.description: Forecast for the next days\ntools.name: get_weather",
    );
  });
});

describe("programmatic tool calling's items in a Responses history toward a model of another wire", () => {
  it("carries the program's code and its result as the assistant's text, without its replay fingerprint", async () => {
    const input: OpenAI.Responses.ResponseInput = [
      { role: "user", content: "Sum the forecasts of Paris and Rome." },
      {
        type: "program",
        id: "prog_1",
        call_id: "call_prog1",
        code: "const a = await tools.get_forecast({city: 'Paris'}); return a;",
        fingerprint: "fp-opaque-9f8e7d",
      },
      {
        type: "function_call",
        call_id: "call_fc2",
        name: "get_forecast",
        arguments: '{"city":"Paris"}',
        caller: { type: "program", caller_id: "call_prog1" },
      } as OpenAI.Responses.ResponseInputItem,
      { type: "function_call_output", call_id: "call_fc2", output: "Rain tomorrow." },
      {
        type: "program_output",
        id: "progo_1",
        call_id: "call_prog1",
        result: "Paris: rain",
        status: "completed",
      },
      { role: "user", content: "And Rome?" },
    ];
    for (const model of models) {
      fakeOf(model).queue(okReply(model));
      await openai.responses.create({ model, input, tools: [forecast] });
      const sent = JSON.stringify(fakeOf(model).last.body);
      for (const readable of [
        "tools.get_forecast({city: 'Paris'})",
        "Paris: rain",
        "Rain tomorrow.",
      ])
        expect(sent, `${model}: ${readable}`).toContain(readable);
      expect(sent, model).not.toContain("fp-opaque");
    }
    expect(noneRefused()).toBe(true);
    const assistants = (oa.last.body.messages as Json[]).filter((m) => m.role === "assistant");
    expect(assistants.map((m) => m.content)).toEqual([
      "[program]\ncode: const a = await tools.get_forecast({city: 'Paris'}); return a;",
      "[program_output]\nresult: Paris: rain",
    ]);
  });
});

describe("a messages client's container_upload block toward a chat or Gemini model", () => {
  it("is a 400 naming it, nothing sent: the file lives in Anthropic's Files API", async () => {
    for (const model of ["h-openai", "h-gemini"]) {
      const outcome = await outcomeOf(
        anthropic.messages.create({
          model,
          max_tokens: 100,
          messages: [
            {
              role: "user",
              content: [
                { type: "text", text: "Plot this CSV." },
                { type: "container_upload", file_id: "file_011CNha8iCJcU1wXNR6q4V8w" },
              ],
            },
          ],
        }),
      );
      expect(outcome.status, model).toBe(400);
      expect(outcome.message, model).toContain("container_upload");
    }
    expect(sentNothing()).toBe(true);
  });
});
