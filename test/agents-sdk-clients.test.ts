import { createAnthropic } from "@ai-sdk/anthropic";
import { createOpenAI } from "@ai-sdk/openai";
import Anthropic from "@anthropic-ai/sdk";
import { zodOutputFormat } from "@anthropic-ai/sdk/helpers/zod";
import {
  Agent,
  type Model,
  OpenAIChatCompletionsModel,
  OpenAIResponsesModel,
  RunState,
  type RunStreamEvent,
  run,
  StreamedRunResult,
  setTracingDisabled,
  tool,
} from "@openai/agents";
import { generateText, type LanguageModel, Output } from "ai";
import OpenAI from "openai";
import { zodResponseFormat, zodTextFormat } from "openai/helpers/zod";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { z } from "zod";
import {
  anthropicJson,
  anthropicStreamSteps,
  type JsonReply,
  openaiJson,
  openaiStreamSteps,
  type Reply,
} from "./support/fake-upstream.js";
import { KEY, type TestGateway, testGateway } from "./support/gateway.js";
import { type ThreeWires, useThreeWires } from "./support/three-wires.js";

/**
 * Client libraries whose own code checks what a model promised. On the built-in mock: the OpenAI
 * Agents SDK (function tools whose arguments it parses with the tool's zod schema, an `outputType`
 * it parses the final answer with, a streamed run with a handoff and an approval), and the AI
 * SDK's and the official SDKs' structured outputs; a real model in strict mode answers what the
 * schema declares, so must the mock. Behind fake providers: the usage each client counts, cache
 * writes included, is the provider's, and the run's count is what the gateway charged.
 */

// Traces would go to OpenAI's API: tests talk to 127.0.0.1 only.
setTracingDisabled(true);

/** mock-gpt's prices in baseConfig, IDR per million tokens: as many micro-IDR per token. */
const INPUT_PRICE = 10_000;
const OUTPUT_PRICE = 20_000;

let gw: TestGateway;
let openai: OpenAI;
/** The bodies the OpenAI client posted, in order. */
const sent: Record<string, unknown>[] = [];

beforeAll(async () => {
  gw = await testGateway();
  openai = new OpenAI({
    apiKey: KEY,
    baseURL: `${gw.url}/v1`,
    maxRetries: 0,
    timeout: 10_000,
    fetch: async (url, init) => {
      if (typeof init?.body === "string") sent.push(JSON.parse(init.body));
      return fetch(url, init);
    },
  });
});
afterAll(async () => {
  await gw?.close();
});
beforeEach(() => {
  gw.mock.reset();
  sent.length = 0;
});

const models: [string, () => Model][] = [
  ["the Responses model", () => new OpenAIResponsesModel(openai, "mock-gpt")],
  ["the Chat Completions model", () => new OpenAIChatCompletionsModel(openai, "mock-gpt")],
];

/** What zod schemas of everyday tools and outputs become: nesting, nullables, bounds, formats. */
const trip = z.object({
  destination: z.object({ city: z.string(), country: z.string().min(2).max(3) }),
  nights: z.number().int().min(1).max(30),
  budget: z.number().gt(100).lt(101),
  party: z.number().multipleOf(5),
  contact: z.email(),
  departs: z.iso.datetime(),
  stops: z.array(z.string()).min(2),
  seat: z.enum(["aisle", "window"]).nullable(),
  kind: z.literal("trip"),
  payment: z.discriminatedUnion("method", [
    z.object({ method: z.literal("card"), last4: z.string().length(4) }),
    z.object({ method: z.literal("cash") }),
  ]),
});
type Trip = z.infer<typeof trip>;

/** The run, ended: a streamed one has had every event consumed (into `events`). */
async function finished<R extends object>(result: R, events: RunStreamEvent[] = []): Promise<R> {
  if (result instanceof StreamedRunResult) {
    for await (const event of result) events.push(event);
    await result.completed;
  }
  return result;
}

/** The gateway's log rows of the requests made since `before` rows were logged. */
async function rowsSince(before: number) {
  const rows = await gw.listRequests();
  return rows.slice(0, rows.length - before);
}

/** The SDK's own count of a run's usage equals what the gateway logged and charged for it. */
async function expectMetered(usage: Usage, before: number) {
  const rows = await rowsSince(before);
  expect(rows).toHaveLength(usage.requests);
  const logged = rows.reduce(
    (sum, row) => ({
      input: sum.input + (row.usage?.input_tokens ?? 0),
      output: sum.output + (row.usage?.output_tokens ?? 0),
      cost: sum.cost + row.cost_micro,
    }),
    { input: 0, output: 0, cost: 0 },
  );
  expect(logged.input).toBe(usage.inputTokens);
  expect(logged.output).toBe(usage.outputTokens);
  expect(logged.cost).toBe(usage.inputTokens * INPUT_PRICE + usage.outputTokens * OUTPUT_PRICE);
}
type Usage = { requests: number; inputTokens: number; outputTokens: number };

describe.each(models)("the Agents SDK on the mock, %s", (_, model) => {
  it("runs a function tool with the mock's arguments, which pass the tool's own zod schema", async () => {
    const called: Trip[] = [];
    const planTrip = tool({
      name: "plan_trip",
      description: "Plan a trip",
      parameters: trip,
      execute: async (args) => {
        called.push(args);
        return "booked";
      },
    });
    const agent = new Agent({ name: "planner", model: model(), tools: [planTrip] });
    const result = await run(agent, "Plan it. [[mock:tool=plan_trip]]");

    // The SDK runs a tool only with arguments its schema accepts; else it tells the model so.
    expect(called).toHaveLength(1);
    expect(trip.parse(called[0])).toEqual(called[0]);
    expect(called[0]).toMatchObject({
      destination: { city: "example city" },
      contact: "user@example.com",
      kind: "trip",
      payment: { method: "card" },
    });
    expect(result.finalOutput).toMatch(/^Tool result received: booked\./);
  });

  for (const stream of [false, true]) {
    it(`answers an outputType with JSON its schema accepts${stream ? ", streamed" : ""}, charged as the run counted`, async () => {
      const agent = new Agent({ name: "planner", model: model(), outputType: trip });
      const before = (await gw.listRequests()).length;
      const result = await finished(
        stream ? await run(agent, "Plan a trip.", { stream }) : await run(agent, "Plan a trip."),
      );

      expect(trip.parse(result.finalOutput)).toEqual(result.finalOutput);
      await expectMetered(result.state.usage, before);
    });
  }
});

describe("structured outputs of other clients on the mock", () => {
  const report = z.object({ city: z.string(), temperature: z.number().int().min(-50).max(60) });

  it("openai: chat.completions.parse and responses.parse give the parsed object", async () => {
    const chat = await openai.chat.completions.parse({
      model: "mock-gpt",
      messages: [{ role: "user", content: "Weather in Jakarta?" }],
      response_format: zodResponseFormat(report, "report"),
    });
    expect(report.parse(chat.choices[0].message.parsed)).toEqual({
      city: "example city",
      temperature: 42,
    });
    const responses = await openai.responses.parse({
      model: "mock-gpt",
      input: "Weather in Jakarta?",
      text: { format: zodTextFormat(report, "report") },
    });
    expect(responses.output_parsed).toEqual({ city: "example city", temperature: 42 });
  });

  it("the AI SDK: generateText with Output.object, over each of its providers", async () => {
    const viaOpenai = createOpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1` });
    const viaAnthropic = createAnthropic({ apiKey: KEY, baseURL: `${gw.url}/v1` });
    const providers: Record<string, LanguageModel> = {
      chat: viaOpenai.chat("mock-gpt"),
      responses: viaOpenai.responses("mock-gpt"),
      anthropic: viaAnthropic("mock-gpt"),
    };
    for (const [provider, languageModel] of Object.entries(providers)) {
      const { output } = await generateText({
        model: languageModel,
        prompt: "Weather in Jakarta?",
        maxOutputTokens: 1000,
        maxRetries: 0,
        output: Output.object({ schema: report }),
      });
      expect({ provider, output }).toEqual({
        provider,
        output: { city: "example city", temperature: 42 },
      });
    }
  });

  it("anthropic: messages.parse with an output format gives parsed_output", async () => {
    const anthropic = new Anthropic({ apiKey: KEY, baseURL: gw.url, maxRetries: 0 });
    const message = await anthropic.messages.parse({
      model: "mock-gpt",
      max_tokens: 1000,
      messages: [{ role: "user", content: "Weather in Jakarta?" }],
      output_config: { format: zodOutputFormat(report) },
    });
    expect(message.parsed_output).toEqual({ city: "example city", temperature: 42 });
  });
});

describe("a streamed Agents SDK run with a handoff and an approval, on the mock", () => {
  it("hands off, stops for approval, resumes from its serialized state chained by previousResponseId", async () => {
    gw.mock.reply(
      { tools_offered: "transfer_to_weather", tool_result: false },
      { tool_calls: [{ name: "transfer_to_weather", arguments: {} }] },
    );
    // The weather agent's first turn follows the handoff's output: it calls its tool once.
    gw.mock.reply(
      { tools_offered: "get_weather" },
      { tool_calls: [{ name: "get_weather", arguments: { city: "Jakarta" } }] },
      { times: 1 },
    );
    const getWeather = tool({
      name: "get_weather",
      description: "The weather in a city",
      parameters: z.object({ city: z.string() }),
      needsApproval: true,
      execute: async ({ city }) => `31 C in ${city}`,
    });
    const model = new OpenAIResponsesModel(openai, "mock-gpt");
    const weather = new Agent({
      name: "weather",
      instructions: "Report.",
      model,
      tools: [getWeather],
    });
    const triage = new Agent({
      name: "triage",
      instructions: "Route.",
      model,
      handoffs: [weather],
    });
    const before = (await gw.listRequests()).length;

    const greeter = new Agent({ name: "greeter", model });
    const opening = await finished(await run(greeter, "My name is Ada. [[mock:words=2]]"));
    const events: RunStreamEvent[] = [];
    const stopped = await finished(
      await run(triage, "Weather in Jakarta?", {
        stream: true,
        previousResponseId: opening.lastResponseId,
      }),
      events,
    );
    const itemEvents = events.flatMap((e) => (e.type === "run_item_stream_event" ? [e.name] : []));
    expect(itemEvents).toEqual(
      expect.arrayContaining(["handoff_requested", "handoff_occurred", "tool_approval_requested"]),
    );
    expect(stopped.lastAgent?.name).toBe("weather");
    expect(stopped.interruptions).toHaveLength(1);

    stopped.state.approve(stopped.interruptions[0]);
    const state = await RunState.fromString(triage, stopped.state.toString());
    const resumed = await finished(
      await run(triage, state, { stream: true, previousResponseId: stopped.lastResponseId }),
    );
    expect(resumed.finalOutput).toMatch(/^Tool result received: 31 C in Jakarta\./);
    // The resumed turn sent only the approved tool's output, chained to the call it answers.
    const last = sent.at(-1);
    expect(last?.previous_response_id).toBe(stopped.lastResponseId);
    expect(last?.input).toEqual([
      expect.objectContaining({ type: "function_call_output", output: "31 C in Jakarta" }),
    ]);
    const rows = await rowsSince(before);
    expect(rows.map((row) => row.status)).toEqual([200, 200, 200, 200]);
    // The resumed state carries the usage of the run it stopped.
    const [first, rest] = [opening.state.usage, resumed.state.usage];
    await expectMetered(
      {
        requests: first.requests + rest.requests,
        inputTokens: first.inputTokens + rest.inputTokens,
        outputTokens: first.outputTokens + rest.outputTokens,
      },
      before,
    );
  });
});

describe("tokens written to a provider's prompt cache, in every client style", () => {
  let wires: ThreeWires;
  useThreeWires({
    maxOutputTokens: 1000,
    ready: (started) => {
      wires = started;
    },
  });
  /** 130 input tokens: 10 new, 100 read from the cache, 20 written to it. */
  const anthropicUsage = {
    input_tokens: 10,
    cache_read_input_tokens: 100,
    cache_creation_input_tokens: 20,
  };
  const openaiUsage = {
    prompt_tokens: 130,
    completion_tokens: 5,
    total_tokens: 135,
    prompt_tokens_details: { cached_tokens: 100, cache_write_tokens: 20 },
  };
  function anthropicReply(stream: boolean): Reply {
    if (!stream) {
      const reply = anthropicJson("Hi.") as JsonReply;
      const body = reply.body as { usage: object };
      body.usage = { ...anthropicUsage, output_tokens: 5 };
      return reply;
    }
    const steps = anthropicStreamSteps(["Hi."], { usage: [10, 5] });
    const start = steps[0].data as { message: { usage: object } };
    start.message.usage = { ...anthropicUsage, output_tokens: 1 };
    return { kind: "sse", steps };
  }
  function openaiReply(stream: boolean): Reply {
    if (!stream) {
      const reply = openaiJson("Hi.") as JsonReply;
      (reply.body as { usage: object }).usage = openaiUsage;
      return reply;
    }
    const steps = openaiStreamSteps(["Hi."]);
    const last = steps.findLast((step) => typeof step.data === "object" && step.data !== null);
    (last?.data as { usage: object }).usage = openaiUsage;
    return { kind: "sse", steps };
  }

  for (const stream of [false, true]) {
    it(`reach an Agents SDK run and a chat client from Anthropic's wire${stream ? ", streamed" : ""}`, async () => {
      wires.an.queue(anthropicReply(stream));
      const agent = new Agent({
        name: "assistant",
        model: new OpenAIResponsesModel(wires.openai, "h-anthropic"),
      });
      const result = await finished(
        stream ? await run(agent, "Hi", { stream }) : await run(agent, "Hi"),
      );
      expect(result.state.usage).toMatchObject({ inputTokens: 130, outputTokens: 5 });
      expect(result.state.usage.inputTokensDetails).toEqual([
        { cached_tokens: 100, cache_write_tokens: 20 },
      ]);
      expect((await wires.gw.listRequests())[0].usage).toEqual({
        input_tokens: 130,
        output_tokens: 5,
      });

      wires.an.queue(anthropicReply(stream));
      const messages = [{ role: "user" as const, content: "Hi" }];
      const usage = stream
        ? (
            await wires.openai.chat.completions
              .stream({ model: "h-anthropic", messages, stream_options: { include_usage: true } })
              .finalChatCompletion()
          ).usage
        : (await wires.openai.chat.completions.create({ model: "h-anthropic", messages })).usage;
      expect(usage).toMatchObject({
        prompt_tokens: 130,
        prompt_tokens_details: { cached_tokens: 100, cache_write_tokens: 20 },
      });
    });

    it(`reach an Anthropic SDK client from an OpenAI-wire provider${stream ? ", streamed" : ""}`, async () => {
      wires.oa.queue(openaiReply(stream));
      const params = {
        model: "h-openai",
        max_tokens: 100,
        messages: [{ role: "user" as const, content: "Hi" }],
      };
      const message = stream
        ? await wires.anthropic.messages.stream(params).finalMessage()
        : await wires.anthropic.messages.create(params);
      expect(message.usage).toMatchObject({ ...anthropicUsage, output_tokens: 5 });
    });
  }
});
