import { createAnthropic } from "@ai-sdk/anthropic";
import { createOpenAI } from "@ai-sdk/openai";
import {
  generateObject,
  generateText,
  type LanguageModel,
  stepCountIs,
  streamObject,
  streamText,
  tool,
} from "ai";
import { zodFunction, zodResponseFormat } from "openai/helpers/zod";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { idleMoney, money } from "./support/api.js";
import {
  anthropicJson,
  anthropicStreamSteps,
  completionJson,
  completionStreamSteps,
  deferred,
  openaiJson,
  openaiStreamSteps,
  openaiToolStreamSteps,
  type RecordedRequest,
  type Reply,
  type SseStep,
} from "./support/fake-upstream.js";
import { KEY } from "./support/gateway.js";
import { deliveredTokens, type Logged, logged, requestTextTokens } from "./support/metering.js";
import { type ThreeWires, useThreeWires } from "./support/three-wires.js";

/**
 * The Vercel AI SDK and the openai SDK's newest helpers on this session's features: the AI SDK's
 * completion model (`openai.completion`, POST /v1/completions) on every kind of provider, and
 * structured outputs and strict tools whose zod schemas have optional fields toward OpenAI chat,
 * as each library builds them (the AI SDK and `zodResponseFormat` name the schema's dialect with
 * `$schema`, which OpenAI's strict mode takes).
 */

let wires: ThreeWires;
useThreeWires({
  maxOutputTokens: 4_000,
  extra: ({ oa }) => ({
    providers: [
      {
        id: "tn",
        wire: "openai",
        base_url: oa.baseUrl,
        api_keys: ["sk-tn"],
        completions_native: true,
      },
    ],
    models: [
      { name: "h-text-native", provider: "tn", upstream_model: "text-up" },
      // A catalog name the Anthropic provider of the AI SDK knows as a Claude model, so it sends
      // its tools' `strict`, served by the OpenAI fake.
      { name: "claude-sonnet-4-5", provider: "oa", upstream_model: "gpt-up" },
    ],
    routes: [{ name: "r-openai", steps: ["h-openai"] }],
  }),
  ready: (started) => (wires = started),
});

const aiOpenAI = () => createOpenAI({ apiKey: KEY, baseURL: `${wires.gw.url}/v1` });
const aiAnthropic = () => createAnthropic({ apiKey: KEY, baseURL: `${wires.gw.url}/v1` });

/** The request's log row once it is settled (a stream's a moment after its last byte); at most 5 s. */
async function settledRow(
  find: (rows: Logged[]) => Logged | undefined,
  code: string | null = null,
): Promise<Logged | undefined> {
  const deadline = Date.now() + 5_000;
  for (;;) {
    const row = find(await logged(wires.gw));
    if ((row?.state === "settled" && row.error_code === code) || Date.now() > deadline) return row;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe("AI SDK generateText / streamText with openai.completion", () => {
  /** Each provider's fake answers `Hello` cut at its output limit, chat's or the Completions API's. */
  const answerLength = () => {
    wires.oa.handle((req) => {
      const native = !req.path.endsWith("/chat/completions");
      if (req.body.stream === true)
        return {
          kind: "sse",
          steps: (native ? completionStreamSteps : openaiStreamSteps)(["Hel", "lo"], {
            usage: [30, 6],
            finish: "length",
          }),
        };
      return native
        ? completionJson(["Hello"], { usage: [30, 6], finish: "length" })
        : openaiJson("Hello", { usage: [30, 6], finish: "length" });
    });
    wires.an.handle((req) =>
      req.body.stream === true
        ? { kind: "sse", steps: anthropicStreamSteps(["Hel", "lo"], { stop: "max_tokens" }) }
        : anthropicJson("Hello", { stop: "max_tokens" }),
    );
  };

  const fakeOf = (model: string) => (model === "h-anthropic" ? wires.an : wires.oa);

  for (const model of ["mock-gpt", "h-openai", "h-anthropic", "h-text-native"]) {
    for (const stream of [false, true]) {
      it(`${model}${stream ? ", streamed" : ""}: text, finish reason and usage as the request-log row has them`, async () => {
        answerLength();
        const options = {
          model: aiOpenAI().completion(model),
          system: "Answer briefly.",
          prompt: "Say hello",
          maxOutputTokens: model === "mock-gpt" ? 2 : 50,
          temperature: 0.2,
          stopSequences: ["END"],
          seed: 7,
          maxRetries: 0,
          providerOptions: { openai: { user: "editor-1" } },
        };
        let text: string;
        let finishReason: string;
        let usage: { inputTokens?: number; outputTokens?: number };
        let id: string | undefined;
        if (stream) {
          const result = streamText(options);
          text = await result.text;
          finishReason = await result.finishReason;
          usage = await result.usage;
          id = (await result.response).headers?.["x-request-id"];
        } else {
          const result = await generateText(options);
          ({ text, finishReason, usage } = result);
          id = result.response.headers?.["x-request-id"];
        }
        expect(wires.oa.refused).toEqual([]);
        expect(wires.an.refused).toEqual([]);
        if (model !== "mock-gpt") expect(text).toBe("Hello");
        else expect(text).not.toBe("");
        expect(finishReason).toBe("length");
        const row = await settledRow((rows) => rows.find((each) => each.id === id));
        expect(row?.error_code).toBeNull();
        expect({ inputTokens: usage.inputTokens, outputTokens: usage.outputTokens }).toEqual({
          inputTokens: row?.usage.input_tokens,
          outputTokens: row?.usage.output_tokens,
        });
        if (model === "mock-gpt") return;
        // What the completion model sends reaches the provider, in its own API's words.
        const sent = fakeOf(model).last.body;
        if (model === "h-text-native")
          expect(sent).toMatchObject({
            model: "text-up",
            prompt: "Answer briefly.\n\nuser:\nSay hello\n\nassistant:\n",
            stop: ["\nuser:", "END"],
            max_tokens: 50,
            temperature: 0.2,
            seed: 7,
            user: "editor-1",
          });
        else if (model === "h-openai")
          expect(sent).toMatchObject({
            model: "gpt-up",
            messages: [
              { role: "user", content: "Answer briefly.\n\nuser:\nSay hello\n\nassistant:\n" },
            ],
            stop: ["\nuser:", "END"],
            max_tokens: 50,
            temperature: 0.2,
            seed: 7,
            user: "editor-1",
          });
        else
          expect(sent).toMatchObject({
            model: "claude-up",
            stop_sequences: ["\nuser:", "END"],
            max_tokens: 50,
            temperature: 0.2,
            metadata: { user_id: "editor-1" },
          });
      });
    }
  }

  it("what a model cannot carry is a 400 naming it: logprobs through chat, token biases and penalties toward Anthropic", async () => {
    answerLength();
    const refused = async (model: string, extra: object) => {
      const err = await generateText({
        model: aiOpenAI().completion(model),
        prompt: "Say hello",
        maxRetries: 0,
        ...extra,
      }).then(
        () => undefined,
        (error: unknown) => error as { statusCode?: number; message: string },
      );
      return err && { status: err.statusCode, message: err.message };
    };
    const logprobs = { providerOptions: { openai: { logprobs: 2 } } };
    expect(await refused("h-openai", logprobs)).toMatchObject({
      status: 400,
      message: expect.stringMatching(/^`logprobs` is not supported by "h-openai"/),
    });
    expect(
      await refused("h-anthropic", { providerOptions: { openai: { logitBias: { 1: 5 } } } }),
    ).toMatchObject({ status: 400, message: expect.stringMatching(/^`logit_bias`/) });
    expect(await refused("h-anthropic", { presencePenalty: 0.5 })).toMatchObject({
      status: 400,
      message: expect.stringMatching(/^`presence_penalty`/),
    });
    // The server of its own Completions API takes them as written.
    expect(await refused("h-text-native", logprobs)).toBeUndefined();
    expect(wires.oa.last.body.logprobs).toBe(2);
  });

  const FIRST = "const total = ";
  for (const model of ["h-openai", "h-anthropic", "h-text-native"]) {
    it(`${model}: a streamText aborted after its first text is billed the text it was written`, async () => {
      const gone = deferred();
      const rest = [FIRST, "items.reduce(add, 0);"];
      const steps: SseStep[] =
        model === "h-anthropic"
          ? anthropicStreamSteps(rest)
          : model === "h-openai"
            ? openaiStreamSteps(rest, { usage: [30, 9] })
            : completionStreamSteps(rest, { usage: [30, 9] });
      // The fake waits before the second piece of text until the client has gone.
      const second = steps.findIndex((step) => JSON.stringify(step.data).includes("items.reduce"));
      steps[second] = { ...steps[second]!, gate: gone.promise };
      fakeOf(model).handle(() => ({ kind: "sse", steps }));
      const was = await money(wires.gw);
      const before = (await logged(wires.gw)).length;

      const abort = new AbortController();
      const result = streamText({
        model: aiOpenAI().completion(model),
        prompt: "Sum the items",
        abortSignal: abort.signal,
        maxRetries: 0,
        onError: () => {},
      });
      let read = "";
      for await (const delta of result.textStream) {
        read += delta;
        if (read !== "") abort.abort();
      }
      const row = await settledRow(
        (rows) => (rows.length > before ? rows[0] : undefined),
        "client_closed",
      );
      gone.resolve();
      expect(read).toBe(FIRST);
      const sent = fakeOf(model).last.body;
      expect(row?.usage).toEqual({
        // Anthropic reports the input at the stream's start; the others are estimated.
        input_tokens: model === "h-anthropic" ? 13 : requestTextTokens(sent),
        output_tokens: deliveredTokens([FIRST]),
      });
      // One micro-IDR a token each way (useThreeWires' prices).
      expect(row?.cost_micro).toBe(row!.usage.input_tokens + row!.usage.output_tokens);
      const after = await idleMoney(wires.gw);
      expect(after.held).toBe(0);
      expect(was.balance - after.balance).toBe(row?.cost_micro);
    });
  }
});

/** Optional: `age`, `tags`, `address` (whose `zip` is optional too); `nickname` takes null. */
const person = z.object({
  name: z.string(),
  age: z.number().optional(),
  nickname: z.string().nullable(),
  tags: z.array(z.string()).optional(),
  address: z.object({ city: z.string(), zip: z.string().optional() }).optional(),
});
/** What a model in strict mode answers: every property, null for those it leaves out. */
const STRICT_ANSWER =
  '{"name":"Ann","age":null,"nickname":null,"tags":null,"address":{"city":"Bogor","zip":null}}';
/** What the client's own schema describes: the added nulls gone, `nickname`'s kept. */
const CLIENT_OBJECT = { name: "Ann", nickname: null, address: { city: "Bogor" } };

const weatherInput = z.object({ city: z.string(), unit: z.enum(["c", "f"]).optional() });
const WEATHER_ARGS = '{"city":"Jakarta","unit":null}';

/**
 * The OpenAI fake as a strict model answers: a tool call with a null for the optional `unit`
 * (then, given the result, text), or the structured output with its nulls; whole or streamed.
 * A strict schema outside OpenAI's rules never gets here: the fake refuses it as OpenAI does.
 */
function strictModel(req: RecordedRequest): Reply {
  const stream = req.body.stream === true;
  const toolAnswered = JSON.stringify(req.body.messages).includes('"role":"tool"');
  if (Array.isArray(req.body.tools) && !toolAnswered) {
    const call = { id: "call_1", name: "get_weather" };
    return stream
      ? {
          kind: "sse",
          steps: openaiToolStreamSteps([
            { ...call, argumentPieces: [WEATHER_ARGS.slice(0, 12), WEATHER_ARGS.slice(12)] },
          ]),
        }
      : openaiJson(null, { toolCalls: [{ ...call, arguments: WEATHER_ARGS }] });
  }
  const text = toolAnswered ? "31 C in Jakarta." : STRICT_ANSWER;
  const pieces = [text.slice(0, 17), text.slice(17, 40), text.slice(40)];
  return stream ? { kind: "sse", steps: openaiStreamSteps(pieces) } : openaiJson(text);
}

/** `z.toJSONSchema(person)` as OpenAI's strict mode takes it, the AI SDK's `$schema` kept. */
const personSent = {
  $schema: "http://json-schema.org/draft-07/schema#",
  type: "object",
  properties: {
    name: { type: "string" },
    age: { type: ["number", "null"] },
    nickname: { type: ["string", "null"] },
    tags: { anyOf: [{ type: "array", items: { type: "string" } }, { type: "null" }] },
    address: {
      anyOf: [
        {
          type: "object",
          properties: { city: { type: "string" }, zip: { type: ["string", "null"] } },
          required: ["city", "zip"],
          additionalProperties: false,
        },
        { type: "null" },
      ],
    },
  },
  required: ["name", "age", "nickname", "tags", "address"],
  additionalProperties: false,
};

describe("AI SDK structured output and strict tools with optional fields toward an openai-wire chat model", () => {
  const objectModels: [string, () => LanguageModel, object][] = [
    [
      "@ai-sdk/anthropic (messages to OpenAI chat)",
      () => aiAnthropic()("h-openai"),
      { anthropic: { structuredOutputMode: "outputFormat" } },
    ],
    ["@ai-sdk/openai responses (the Responses bridge)", () => aiOpenAI().responses("h-openai"), {}],
  ];

  for (const [client, model, providerOptions] of objectModels) {
    it(`${client}: generateObject is sent strict, required and nullable, and parses without the added nulls`, async () => {
      wires.oa.handle(strictModel);
      const { object } = await generateObject({
        model: model(),
        schema: person,
        prompt: "Who lives in Bogor?",
        maxRetries: 0,
        providerOptions: providerOptions as never,
      });
      expect(wires.oa.refused).toEqual([]);
      const format = wires.oa.last.body.response_format as { json_schema: { strict?: boolean } };
      expect(format.json_schema).toMatchObject({ strict: true, schema: personSent });
      expect(object).toEqual(CLIENT_OBJECT);
    });

    it(`${client}: streamObject's partial objects never carry an added null, and the last is the object`, async () => {
      wires.oa.handle(strictModel);
      const result = streamObject({
        model: model(),
        schema: person,
        prompt: "Who lives in Bogor?",
        maxRetries: 0,
        providerOptions: providerOptions as never,
        onError: () => {},
      });
      const partials: unknown[] = [];
      for await (const partial of result.partialObjectStream) partials.push(partial);
      expect(wires.oa.refused).toEqual([]);
      expect(await result.object).toEqual(CLIENT_OBJECT);
      expect(partials.at(-1)).toEqual(CLIENT_OBJECT);
      for (const partial of partials) {
        const shown = JSON.stringify(partial);
        for (const optional of ["age", "tags", "zip"]) expect(shown).not.toContain(`"${optional}"`);
      }
    });
  }

  const toolModels: [string, () => LanguageModel][] = [
    // The AI SDK sends a tool's `strict` to a model it knows as a Claude model.
    ["@ai-sdk/anthropic (messages to OpenAI chat)", () => aiAnthropic()("claude-sonnet-4-5")],
    ["@ai-sdk/openai responses (the Responses bridge)", () => aiOpenAI().responses("h-openai")],
  ];
  for (const [client, model] of toolModels) {
    for (const stream of [false, true]) {
      it(`${client}${stream ? ", streamed" : ""}: a strict tool with an optional parameter is called without the null`, async () => {
        wires.oa.handle(strictModel);
        const seen: unknown[] = [];
        const options = {
          model: model(),
          prompt: "Weather in Jakarta?",
          maxRetries: 0,
          stopWhen: stepCountIs(3),
          tools: {
            get_weather: tool({
              description: "The weather in a city",
              strict: true,
              inputSchema: weatherInput,
              execute: async (input) => {
                seen.push(input);
                return "31 C";
              },
            }),
          },
        };
        const text = stream ? await streamText(options).text : (await generateText(options)).text;
        expect(wires.oa.refused).toEqual([]);
        const [first] = wires.oa.requests;
        const sent = (first?.body.tools as { function: object }[] | undefined)?.[0]?.function;
        expect(sent).toMatchObject({
          name: "get_weather",
          strict: true,
          parameters: {
            properties: {
              city: { type: "string" },
              unit: { anyOf: [{ type: "string", enum: ["c", "f"] }, { type: "null" }] },
            },
            required: ["city", "unit"],
          },
        });
        expect(seen).toEqual([{ city: "Jakarta" }]);
        expect(text).toBe("31 C in Jakarta.");
      });
    }
  }
});

describe("openai SDK chat.completions.parse with zodResponseFormat's optional and nullable fields", () => {
  /** `.optional()` goes with `.nullable()`: the openai SDK refuses an optional field that takes no null. */
  const profile = z.object({
    name: z.string(),
    nickname: z.string().nullable(),
    age: z.number().nullable().optional(),
  });
  const answer = '{"name":"Ann","nickname":null,"age":null}';
  const ask = { messages: [{ role: "user" as const, content: "Who?" }], max_tokens: 200 };

  it("on a route to OpenAI chat and toward an anthropic-wire model (via messages): parsed as the SDK's types say, whole and streamed", async () => {
    wires.oa.handle((req) =>
      req.body.stream === true
        ? { kind: "sse", steps: openaiStreamSteps([answer.slice(0, 15), answer.slice(15)]) }
        : openaiJson(answer),
    );
    wires.an.handle((req) =>
      req.body.stream === true
        ? { kind: "sse", steps: anthropicStreamSteps([answer.slice(0, 15), answer.slice(15)]) }
        : anthropicJson(answer),
    );
    const response_format = zodResponseFormat(profile, "profile");
    for (const model of ["r-openai", "h-anthropic"]) {
      const whole = await wires.openai.chat.completions.parse({ model, response_format, ...ask });
      const parsed: z.infer<typeof profile> | null = whole.choices[0].message.parsed;
      expect(parsed, model).toEqual({ name: "Ann", nickname: null, age: null });
      const streamed = await wires.openai.chat.completions
        .stream({ model, response_format, ...ask })
        .finalChatCompletion();
      expect(streamed.choices[0].message.parsed, model).toEqual(parsed);
    }
    expect(wires.oa.refused).toEqual([]);
    expect(wires.an.refused).toEqual([]);
    // Toward OpenAI the SDK's schema already meets strict mode, and goes as it wrote it.
    expect(wires.oa.last.body.response_format).toEqual(JSON.parse(JSON.stringify(response_format)));
  });

  it("a zodFunction tool on a route to OpenAI chat: parsed_arguments as the model gave them", async () => {
    wires.oa.handle(strictModel);
    const done = await wires.openai.chat.completions.parse({
      model: "r-openai",
      tools: [
        zodFunction({
          name: "get_weather",
          parameters: z.object({
            city: z.string(),
            unit: z.enum(["c", "f"]).nullable().optional(),
          }),
        }),
      ],
      ...ask,
    });
    expect(wires.oa.refused).toEqual([]);
    const call = done.choices[0].message.tool_calls?.[0];
    expect(call?.type === "function" && call.function.parsed_arguments).toEqual({
      city: "Jakarta",
      unit: null,
    });
  });
});
