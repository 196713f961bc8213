import type Anthropic from "@anthropic-ai/sdk";
import type OpenAI from "openai";
import { describe, expect, it } from "vitest";
import {
  type FakeUpstream,
  openaiJson,
  openaiStreamSteps,
  openaiToolStreamSteps,
} from "./support/fake-upstream.js";
import { outcomeOf, useThreeWires } from "./support/three-wires.js";

/**
 * A strict schema with optional properties toward OpenAI's chat, whose strict mode takes a
 * property only in `required`: each optional property goes required with its type made nullable
 * (OpenAI's documented way), so the call or structured output is held to the schema, and the
 * nulls the model gives for them are taken back out of what the client gets, whole and streamed.
 * From a messages or Responses client, and a chat client on a route; a chat client's own body to
 * its own wire goes as written. The OpenAI fake refuses a strict schema outside OpenAI's rules,
 * as the real API does.
 */

let oa: FakeUpstream;
let openai: OpenAI;
let anthropic: Anthropic;
useThreeWires({
  maxOutputTokens: 4000,
  extra: () => ({ routes: [{ name: "r-openai", steps: ["h-openai"] }] }),
  ready: (wires) => {
    ({ oa, openai, anthropic } = wires);
  },
});

type Json = Record<string, unknown>;

/** Optional: `note`, `unit` (an enum), `filters` (an object with its own optional `kind`), `tag` (already nullable). */
const lookupSchema = {
  type: "object" as const,
  properties: {
    city: { type: "string" },
    note: { type: "string", description: "Anything else to look for." },
    unit: { type: "string", enum: ["metric", "imperial"] },
    filters: {
      type: "object",
      properties: { kind: { type: "string" }, limit: { type: "integer" } },
      required: ["limit"],
      additionalProperties: false,
    },
    tag: { type: ["string", "null"] },
  },
  required: ["city"],
  additionalProperties: false,
};

/** `lookupSchema` as OpenAI's strict mode takes it. */
const lookupSent = {
  type: "object",
  properties: {
    city: { type: "string" },
    note: { type: ["string", "null"], description: "Anything else to look for." },
    unit: { anyOf: [{ type: "string", enum: ["metric", "imperial"] }, { type: "null" }] },
    filters: {
      anyOf: [
        {
          type: "object",
          properties: { kind: { type: ["string", "null"] }, limit: { type: "integer" } },
          required: ["kind", "limit"],
          additionalProperties: false,
        },
        { type: "null" },
      ],
    },
    tag: { type: ["string", "null"] },
  },
  required: ["city", "note", "unit", "filters", "tag"],
  additionalProperties: false,
};

/** What a model in strict mode answers: every property, null for those it leaves out. */
const modelArguments =
  '{"city":"Jakarta","note":null,"unit":null,"filters":{"kind":null,"limit":3},"tag":null}';
const argumentPieces = [
  '{"city":"Jak',
  'arta","note":null,"unit":',
  'null,"filters":{"kind":null,"li',
  'mit":3},"tag":null}',
];
/** What the client gets: the nulls the schema does not take gone; `tag`'s, which it takes, kept. */
const clientInput = { city: "Jakarta", filters: { limit: 3 }, tag: null };

const placeSchema = {
  type: "object" as const,
  properties: { city: { type: "string" }, population: { type: "integer" } },
  required: ["city"],
  additionalProperties: false,
};
const placeSent = {
  type: "object",
  properties: { city: { type: "string" }, population: { type: ["integer", "null"] } },
  required: ["city", "population"],
  additionalProperties: false,
};

const sentTool = () => (oa.last.body.tools as { function: Json }[])[0].function;
const sentFormat = () => (oa.last.body.response_format as { json_schema: Json }).json_schema;

describe("a messages client's strict tool with optional properties toward an openai-wire model", () => {
  const ask = { max_tokens: 200, messages: [{ role: "user" as const, content: "Look it up." }] };
  const tools = [{ name: "lookup", strict: true, input_schema: lookupSchema }];

  it("is sent strict with the optional properties required and nullable, nested ones too, and the call comes back without the nulls", async () => {
    oa.queue(
      openaiJson(null, {
        toolCalls: [{ id: "call_1", name: "lookup", arguments: modelArguments }],
      }),
    );
    const message = await anthropic.messages.create({ model: "h-openai", tools, ...ask });
    expect(oa.refused).toEqual([]);
    expect(sentTool()).toEqual({ name: "lookup", parameters: lookupSent, strict: true });
    const call = message.content.find((block) => block.type === "tool_use");
    expect(call?.input).toEqual(clientInput);
  });

  it("streamed: the call's input goes out whole, once complete, without the nulls", async () => {
    oa.queue({
      kind: "sse",
      steps: openaiToolStreamSteps([{ id: "call_1", name: "lookup", argumentPieces }], {
        text: "Looking.",
      }),
    });
    const stream = anthropic.messages.stream({ model: "h-openai", tools, ...ask });
    const pieces: string[] = [];
    for await (const event of stream)
      if (event.type === "content_block_delta" && event.delta.type === "input_json_delta")
        pieces.push(event.delta.partial_json);
    const message = await stream.finalMessage();
    expect(oa.refused).toEqual([]);
    expect(pieces).toEqual([JSON.stringify(clientInput)]);
    expect(message.content.map((block) => block.type)).toEqual(["text", "tool_use"]);
    expect(message.content.find((block) => block.type === "tool_use")?.input).toEqual(clientInput);
  });

  it("an optional object the model leaves out (null) is taken out whole", async () => {
    oa.queue(
      openaiJson(null, {
        toolCalls: [
          {
            id: "call_1",
            name: "lookup",
            arguments: '{"city":"Bandung","note":"rain","unit":"metric","filters":null,"tag":"x"}',
          },
        ],
      }),
    );
    const message = await anthropic.messages.create({ model: "h-openai", tools, ...ask });
    expect(message.content.find((block) => block.type === "tool_use")?.input).toEqual({
      city: "Bandung",
      note: "rain",
      unit: "metric",
      tag: "x",
    });
  });

  it("a schema strict mode cannot carry even so (an object open to other properties) is sent without strict, as before", async () => {
    const open = { ...lookupSchema, additionalProperties: true };
    oa.queue(openaiJson("ok"));
    await anthropic.messages.create({
      model: "h-openai",
      tools: [{ name: "lookup", strict: true, input_schema: open }],
      ...ask,
    });
    expect(oa.refused).toEqual([]);
    expect(sentTool()).toEqual({ name: "lookup", parameters: open });
  });

  it("a tool that is not strict goes as the client wrote it, and its call's nulls stay", async () => {
    oa.queue(
      openaiJson(null, {
        toolCalls: [{ id: "call_1", name: "lookup", arguments: modelArguments }],
      }),
    );
    const message = await anthropic.messages.create({
      model: "h-openai",
      tools: [{ name: "lookup", input_schema: lookupSchema }],
      ...ask,
    });
    expect(sentTool()).toEqual({ name: "lookup", parameters: lookupSchema });
    expect(message.content.find((block) => block.type === "tool_use")?.input).toEqual(
      JSON.parse(modelArguments),
    );
  });
});

describe("a messages client's output_config.format with an optional property toward an openai-wire model", () => {
  const ask = {
    max_tokens: 200,
    output_config: { format: { type: "json_schema" as const, schema: placeSchema } },
    messages: [{ role: "user" as const, content: "Describe Jakarta." }],
  };

  it("is sent strict, the property required and nullable, and the text comes back without the null", async () => {
    oa.queue(openaiJson('{"city":"Jakarta","population":null}'));
    const message = await anthropic.messages.create({ model: "h-openai", ...ask });
    expect(oa.refused).toEqual([]);
    expect(sentFormat()).toEqual({ name: "output", schema: placeSent, strict: true });
    expect(message.content).toEqual([
      { type: "text", text: '{"city":"Jakarta"}', citations: null },
    ]);
  });

  it("streamed: the text goes out whole once the answer finished, without the null", async () => {
    oa.queue({
      kind: "sse",
      steps: openaiStreamSteps(['{"city":"Ja', 'karta","popu', 'lation":null}']),
    });
    const stream = anthropic.messages.stream({ model: "h-openai", ...ask });
    const pieces: string[] = [];
    for await (const event of stream)
      if (event.type === "content_block_delta" && event.delta.type === "text_delta")
        pieces.push(event.delta.text);
    await stream.finalMessage();
    expect(pieces).toEqual(['{"city":"Jakarta"}']);
  });

  it("an answer the model gave in full is the model's text, unchanged", async () => {
    const text = '{ "city": "Jakarta", "population": 10000000 }';
    oa.queue(openaiJson(text));
    const message = await anthropic.messages.create({ model: "h-openai", ...ask });
    expect(message.content).toEqual([{ type: "text", text, citations: null }]);
  });
});

describe("a Responses client's strict function and text.format with optional properties toward an openai-wire model", () => {
  const tool = {
    type: "function" as const,
    name: "lookup",
    parameters: lookupSchema,
    strict: true,
  };

  it("is sent strict with the optional properties required and nullable; function_call arguments come back without the nulls", async () => {
    oa.queue(
      openaiJson(null, {
        toolCalls: [{ id: "call_1", name: "lookup", arguments: modelArguments }],
      }),
    );
    const response = await openai.responses.create({
      model: "h-openai",
      tools: [tool],
      input: "Look it up.",
    });
    expect(oa.refused).toEqual([]);
    expect(sentTool()).toEqual({ name: "lookup", parameters: lookupSent, strict: true });
    const call = response.output.find((item) => item.type === "function_call");
    expect(call && JSON.parse(call.arguments)).toEqual(clientInput);
  });

  it("streamed: the arguments go out whole once the call is complete, in one delta and the done event", async () => {
    oa.queue({
      kind: "sse",
      steps: openaiToolStreamSteps([{ id: "call_1", name: "lookup", argumentPieces }]),
    });
    const events = await openai.responses.create({
      model: "h-openai",
      tools: [tool],
      input: "Look it up.",
      stream: true,
    });
    const deltas: string[] = [];
    let done: string | undefined;
    let completed: OpenAI.Responses.Response | undefined;
    for await (const event of events) {
      if (event.type === "response.function_call_arguments.delta") deltas.push(event.delta);
      if (event.type === "response.function_call_arguments.done") done = event.arguments;
      if (event.type === "response.completed") completed = event.response;
    }
    expect(oa.refused).toEqual([]);
    expect(deltas).toEqual([JSON.stringify(clientInput)]);
    expect(done).toBe(JSON.stringify(clientInput));
    const call = completed?.output.find((item) => item.type === "function_call");
    expect(call && JSON.parse(call.arguments)).toEqual(clientInput);
  });

  it("text.format json_schema strict: the output text comes back without the null", async () => {
    oa.queue(openaiJson('{"city":"Jakarta","population":null}'));
    const response = await openai.responses.create({
      model: "h-openai",
      text: { format: { type: "json_schema", name: "place", schema: placeSchema, strict: true } },
      input: "Describe Jakarta.",
    });
    expect(oa.refused).toEqual([]);
    expect(sentFormat()).toEqual({ name: "place", schema: placeSent, strict: true });
    expect(response.output_text).toBe('{"city":"Jakarta"}');
  });

  it("a strict schema strict mode cannot carry even so goes as the client wrote it, and OpenAI's refusal is the client's 400", async () => {
    const open = { ...lookupSchema, additionalProperties: true };
    const err = await outcomeOf(
      openai.responses.create({
        model: "h-openai",
        tools: [{ ...tool, parameters: open }],
        input: "Look it up.",
      }),
    );
    expect(err.status).toBe(400);
    expect(sentTool()).toEqual({ name: "lookup", parameters: open, strict: true });
  });
});

describe("a chat client's strict function with optional properties", () => {
  const tools = [
    {
      type: "function" as const,
      function: { name: "lookup", parameters: lookupSchema, strict: true },
    },
  ];
  const messages = [{ role: "user" as const, content: "Look it up." }];

  it("on a route to an openai-wire model: sent required and nullable, the call's arguments back without the nulls", async () => {
    oa.queue(
      openaiJson(null, {
        toolCalls: [{ id: "call_1", name: "lookup", arguments: modelArguments }],
      }),
    );
    const answer = await openai.chat.completions.create({ model: "r-openai", tools, messages });
    expect(oa.refused).toEqual([]);
    expect(sentTool()).toEqual({ name: "lookup", parameters: lookupSent, strict: true });
    const call = answer.choices[0].message.tool_calls?.[0];
    expect(call?.type === "function" && JSON.parse(call.function.arguments)).toEqual(clientInput);
  });

  it("on a route, streamed: the arguments go out whole once the call is complete", async () => {
    oa.queue({
      kind: "sse",
      steps: openaiToolStreamSteps([{ id: "call_1", name: "lookup", argumentPieces }]),
    });
    const stream = await openai.chat.completions.create({
      model: "r-openai",
      tools,
      messages,
      stream: true,
    });
    const pieces: string[] = [];
    let finish: string | null = null;
    for await (const chunk of stream) {
      for (const call of chunk.choices[0]?.delta.tool_calls ?? [])
        if (call.function?.arguments) pieces.push(call.function.arguments);
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    expect(oa.refused).toEqual([]);
    expect(pieces).toEqual([JSON.stringify(clientInput)]);
    expect(finish).toBe("tool_calls");
  });

  it("direct to an openai-wire model: the body goes as the client wrote it (OpenAI refuses it, as it would)", async () => {
    const err = await outcomeOf(
      openai.chat.completions.create({ model: "h-openai", tools, messages }),
    );
    expect(err.status).toBe(400);
    expect(oa.last.body.tools).toEqual(tools);
  });
});
