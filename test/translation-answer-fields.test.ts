import type Anthropic from "@anthropic-ai/sdk";
import type OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { geminiJson } from "./support/fake-gemini.js";
import {
  anthropicContentJson,
  anthropicContentStreamSteps,
  anthropicJson,
  type FakeUpstream,
  openaiJson,
} from "./support/fake-upstream.js";
import { outcomeOf, useThreeWires } from "./support/three-wires.js";

/**
 * Request fields that change the answer, across the wires: each carried where the other API has a
 * form for it (a strict tool as Gemini's VALIDATED calling mode), or the tool it governs left out
 * and named (one only a program may call). And a stored response's signed thinking, retrieved with
 * `include`, shows where its create would have shown it: thinking between calls after its call.
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

describe("a messages client's strict tool toward a Gemini model", () => {
  const closed = {
    type: "object" as const,
    properties: { city: { type: "string" } },
    required: ["city"],
    additionalProperties: false,
  };
  // Anthropic's strict mode takes optional properties; OpenAI's strict rules do not.
  const optional = {
    type: "object" as const,
    properties: { city: { type: "string" }, unit: { type: "string", enum: ["C", "F"] } },
    required: ["city"],
    additionalProperties: false,
  };

  it("calls in Gemini's VALIDATED mode, which holds every call to its schema, whatever the schema", async () => {
    for (const schema of [closed, optional]) {
      gm.queue(geminiJson("ok"));
      await anthropic.messages.create({
        model: "h-gemini",
        max_tokens: 100,
        tools: [{ name: "get_weather", strict: true, input_schema: schema }],
        messages: [{ role: "user", content: "Weather in Jakarta?" }],
      });
      expect(gm.refused).toEqual([]);
      expect((gm.last.body.toolConfig as Json).functionCallingConfig).toEqual({
        mode: "VALIDATED",
      });
    }
    // A forced call (ANY) holds to the schema already; a tool not strict keeps Gemini's default.
    gm.queue(geminiJson("ok"));
    await anthropic.messages.create({
      model: "h-gemini",
      max_tokens: 100,
      tools: [{ name: "get_weather", strict: true, input_schema: closed }],
      tool_choice: { type: "any" },
      messages: [{ role: "user", content: "Weather in Jakarta?" }],
    });
    expect((gm.last.body.toolConfig as Json).functionCallingConfig).toEqual({ mode: "ANY" });
    gm.queue(geminiJson("ok"));
    await anthropic.messages.create({
      model: "h-gemini",
      max_tokens: 100,
      tools: [{ name: "get_weather", input_schema: closed }],
      messages: [{ role: "user", content: "Weather in Jakarta?" }],
    });
    expect(gm.last.body.toolConfig).toBeUndefined();
  });
});

describe("a tool only a program may call (allowed_callers without direct)", () => {
  const lookup = {
    type: "function" as const,
    name: "lookup",
    parameters: { type: "object", properties: { q: { type: "string" } } },
    strict: false,
    allowed_callers: ["programmatic" as const],
  };
  const weather = {
    type: "function" as const,
    name: "get_weather",
    parameters: { type: "object", properties: { city: { type: "string" } } },
    strict: false,
    allowed_callers: ["direct" as const, "programmatic" as const],
  };

  it("a Responses one is left out on the bridge and named; a choice forcing it is refused", async () => {
    an.queue(anthropicJson("ok"));
    const { response } = await openai.responses
      .create({ model: "h-anthropic", tools: [lookup, weather], input: "Weather?" })
      .withResponse();
    expect(response.headers.get("x-gateway-tools-omitted")).toBe("lookup");
    expect((an.last.body.tools as Json[]).map((t) => t.name)).toEqual(["get_weather"]);
    expect(an.refused).toEqual([]);
    const forced = (await outcomeOf(
      openai.responses.create({
        model: "h-anthropic",
        tools: [lookup, weather],
        tool_choice: { type: "function", name: "lookup" },
        input: "Look it up.",
      }),
    )) as { status?: number; message: string };
    expect(forced.status).toBe(400);
    expect(forced.message).toContain("`tool_choice` forces the tool `lookup`");
    expect(an.requests).toHaveLength(1);
  });

  it("a messages one that only code execution may call is left out toward a chat model and named", async () => {
    oa.queue(openaiJson("ok"));
    const { response } = await anthropic.messages
      .create({
        model: "h-openai",
        max_tokens: 100,
        tools: [
          {
            name: "lookup",
            input_schema: { type: "object", properties: { q: { type: "string" } } },
            allowed_callers: ["code_execution_20250825"],
          },
          { name: "get_weather", input_schema: { type: "object", properties: {} } },
        ],
        messages: [{ role: "user", content: "Weather?" }],
      })
      .withResponse();
    expect(response.headers.get("x-gateway-tools-omitted")).toBe("lookup");
    const sent = oa.last.body.tools as { function: { name: string } }[];
    expect(sent.map((t) => t.function.name)).toEqual(["get_weather"]);
  });
});

describe("a stored response retrieved with its signed thinking (include reasoning.encrypted_content)", () => {
  const thinking = (text: string, signature: string) => ({
    type: "thinking",
    thinking: text,
    signature,
  });
  const call = (id: string, city: string) => ({
    type: "tool_use",
    id,
    name: "get_weather",
    input: { city },
  });
  const answer = [
    thinking("Two cities: Jakarta first.", "sig-a"),
    call("toolu_s1", "Jakarta"),
    thinking("Now Bandung.", "sig-b"),
    call("toolu_s2", "Bandung"),
  ];
  const weather: OpenAI.Responses.FunctionTool = {
    type: "function",
    name: "get_weather",
    parameters: { type: "object", properties: { city: { type: "string" } } },
    strict: false,
  };
  const include = ["reasoning.encrypted_content" as const];

  async function create(ask: Json, stream: boolean): Promise<OpenAI.Responses.Response> {
    an.queue(
      stream
        ? { kind: "sse", steps: anthropicContentStreamSteps(answer) }
        : anthropicContentJson(answer),
    );
    const body = { model: "h-anthropic", tools: [weather], input: "Weather?", ...ask };
    if (!stream) return openai.responses.create({ ...body, stream: false });
    const events = await openai.responses.create({ ...body, stream: true });
    let done: OpenAI.Responses.Response | undefined;
    for await (const event of events)
      if (event.type === "response.completed") done = event.response;
    if (!done) throw new Error("the stream did not complete");
    return done;
  }

  const shape = (output: OpenAI.Responses.ResponseOutputItem[]) =>
    output.map((item) =>
      item.type === "function_call"
        ? `call ${item.call_id}`
        : `${item.type} ${"encrypted_content" in item ? item.encrypted_content : ""}`,
    );

  it("shows each piece of thinking where the create that included it did, summary asked or not", async () => {
    for (const stream of [false, true]) {
      for (const reasoning of [{ effort: "medium" }, { effort: "medium", summary: "auto" }]) {
        const asIncluded = await create({ reasoning, include, store: false }, stream);
        const kept = await create({ reasoning }, stream);
        const retrieved = await openai.responses.retrieve(kept.id, { include });
        const label = `stream ${stream}, ${JSON.stringify(reasoning)}`;
        expect(shape(retrieved.output), label).toEqual(shape(asIncluded.output));
        expect(shape(retrieved.output)[2], label).toMatch(/^reasoning mgw1\./);
        // The summaries the create gave stay on their items.
        if ("summary" in reasoning)
          expect(
            retrieved.output.map((item) => (item.type === "reasoning" ? item.summary : null)),
            label,
          ).toEqual(kept.output.map((item) => (item.type === "reasoning" ? item.summary : null)));
      }
    }
    expect(an.refused).toEqual([]);
  });
});
