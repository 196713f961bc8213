import OpenAI from "openai";
import { ContentFilterFinishReasonError, LengthFinishReasonError } from "openai/core/error";
import { ResponsesToolRunner, runnerFunction } from "openai/helpers/responses-tool-runner";
import {
  zodFunction,
  zodResponseFormat,
  zodResponsesFunction,
  zodTextFormat,
} from "openai/helpers/zod";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { geminiJson, geminiStreamSteps } from "./support/fake-gemini.js";
import {
  anthropicJson,
  anthropicStreamSteps,
  anthropicToolStreamSteps,
  type Reply,
  type SseStep,
} from "./support/fake-upstream.js";
import { type ThreeWires, useThreeWires } from "./support/three-wires.js";

/**
 * The official `openai` SDK's own helpers (parse, stream, runTools, responses.parse/stream) on
 * models of the other wires: anything the SDK throws on a translated answer is a fault.
 */

let w: ThreeWires;
useThreeWires({ maxOutputTokens: 4096, ready: (started) => (w = started) });

const Weather = z.object({ city: z.string(), celsius: z.number() });
const answerJson = '{"city":"Jakarta","celsius":31}';

function geminiSse(steps: SseStep[]): Reply {
  return { kind: "sse", steps };
}

describe("chat.completions.parse with zodResponseFormat", () => {
  it("parses the anthropic wire's JSON answer into message.parsed", async () => {
    w.an.queue(anthropicJson(answerJson));
    const c = await w.openai.chat.completions.parse({
      model: "h-anthropic",
      messages: [{ role: "user", content: "weather" }],
      response_format: zodResponseFormat(Weather, "weather"),
    });
    expect(c.choices[0].message.parsed).toEqual({ city: "Jakarta", celsius: 31 });
    expect(w.an.refused).toEqual([]);
  });
  it("parses the gemini wire's JSON answer into message.parsed", async () => {
    w.gm.queue(geminiJson(answerJson));
    const c = await w.openai.chat.completions.parse({
      model: "h-gemini",
      messages: [{ role: "user", content: "weather" }],
      response_format: zodResponseFormat(Weather, "weather"),
    });
    expect(c.choices[0].message.parsed).toEqual({ city: "Jakarta", celsius: 31 });
    expect(w.gm.refused).toEqual([]);
  });
  it("parses tool call arguments with zodFunction on anthropic (parsed_arguments)", async () => {
    w.an.queue(
      anthropicJson(null, {
        toolUses: [
          { id: "toolu_1", name: "weather", input: { city: "A", celsius: 1 } },
          { id: "toolu_2", name: "weather", input: { city: "B", celsius: 2 } },
        ],
      }),
    );
    const c = await w.openai.chat.completions.parse({
      model: "h-anthropic",
      messages: [{ role: "user", content: "weather" }],
      tools: [zodFunction({ name: "weather", parameters: Weather })],
    });
    const calls = c.choices[0].message.tool_calls as OpenAI.ParsedFunctionToolCall[];
    expect(calls.map((t) => t.function.parsed_arguments)).toEqual([
      { city: "A", celsius: 1 },
      { city: "B", celsius: 2 },
    ]);
  });
  it("parses tool call arguments with zodFunction on gemini (parsed_arguments)", async () => {
    w.gm.queue(
      geminiJson(null, {
        calls: [
          { name: "weather", args: { city: "A", celsius: 1 } },
          { name: "weather", args: { city: "B", celsius: 2 } },
        ],
      }),
    );
    const c = await w.openai.chat.completions.parse({
      model: "h-gemini",
      messages: [{ role: "user", content: "weather" }],
      tools: [zodFunction({ name: "weather", parameters: Weather })],
    });
    const calls = c.choices[0].message.tool_calls as OpenAI.ParsedFunctionToolCall[];
    expect(c.choices[0].finish_reason).toBe("tool_calls");
    expect(calls.map((t) => t.function.parsed_arguments)).toEqual([
      { city: "A", celsius: 1 },
      { city: "B", celsius: 2 },
    ]);
    expect(new Set(calls.map((t) => t.id)).size).toBe(2);
  });
});

describe("chat.completions.stream", () => {
  it("streams zodResponseFormat on anthropic: finalChatCompletion has parsed", async () => {
    w.an.queue({
      kind: "sse",
      steps: anthropicStreamSteps(['{"city":"Jak', 'arta","celsius":31}']),
    });
    const s = w.openai.chat.completions.stream({
      model: "h-anthropic",
      messages: [{ role: "user", content: "weather" }],
      response_format: zodResponseFormat(Weather, "weather"),
      stream_options: { include_usage: true },
    });
    const deltas: unknown[] = [];
    s.on("content.delta", (e) => deltas.push(e.parsed));
    const f = await s.finalChatCompletion();
    expect(f.choices[0].message.parsed).toEqual({ city: "Jakarta", celsius: 31 });
    expect(f.usage).toMatchObject({ prompt_tokens: 13, completion_tokens: 5 });
  });
  it("streams zodResponseFormat on gemini: finalChatCompletion has parsed", async () => {
    w.gm.queue(geminiSse(geminiStreamSteps(['{"city":"Jak', 'arta","celsius":31}'])));
    const s = w.openai.chat.completions.stream({
      model: "h-gemini",
      messages: [{ role: "user", content: "weather" }],
      response_format: zodResponseFormat(Weather, "weather"),
      stream_options: { include_usage: true },
    });
    const f = await s.finalChatCompletion();
    expect(f.choices[0].message.parsed).toEqual({ city: "Jakarta", celsius: 31 });
    expect(f.usage).toMatchObject({ prompt_tokens: 11, completion_tokens: 7 });
  });
  it("streams parallel gemini tool calls with events and parsed arguments", async () => {
    w.gm.queue(
      geminiSse(
        geminiStreamSteps(["Checking."], {
          calls: [
            { name: "weather", args: { city: "A", celsius: 1 } },
            { name: "weather", args: { city: "B", celsius: 2 } },
          ],
        }),
      ),
    );
    const s = w.openai.chat.completions.stream({
      model: "h-gemini",
      messages: [{ role: "user", content: "weather" }],
      tools: [zodFunction({ name: "weather", parameters: Weather })],
    });
    const done: unknown[] = [];
    s.on("tool_calls.function.arguments.done", (e) => done.push([e.index, e.parsed_arguments]));
    const f = await s.finalChatCompletion();
    expect(done).toEqual([
      [0, { city: "A", celsius: 1 }],
      [1, { city: "B", celsius: 2 }],
    ]);
    expect(f.choices[0].finish_reason).toBe("tool_calls");
    expect(f.choices[0].message.content).toBe("Checking.");
  });
  it("streams parallel anthropic tool calls with events and parsed arguments", async () => {
    w.an.queue({
      kind: "sse",
      steps: anthropicToolStreamSteps(
        [
          { id: "toolu_a", name: "weather", jsonPieces: ['{"city":"A",', '"celsius":1}'] },
          { id: "toolu_b", name: "weather", jsonPieces: ['{"city":"B","celsius":2}'] },
        ],
        { text: "Checking." },
      ),
    });
    const s = w.openai.chat.completions.stream({
      model: "h-anthropic",
      messages: [{ role: "user", content: "weather" }],
      tools: [zodFunction({ name: "weather", parameters: Weather })],
    });
    const done: unknown[] = [];
    s.on("tool_calls.function.arguments.done", (e) => done.push([e.index, e.parsed_arguments]));
    const f = await s.finalChatCompletion();
    expect(done).toEqual([
      [0, { city: "A", celsius: 1 }],
      [1, { city: "B", celsius: 2 }],
    ]);
    expect(f.choices[0].message.tool_calls?.map((t) => t.id)).toEqual(["toolu_a", "toolu_b"]);
  });
  it("streams n=2 on gemini: two choices, each with its own content", async () => {
    const cand = (index: number, text: string, finish?: string) => ({
      content: { role: "model", parts: [{ text }] },
      index,
      ...(finish ? { finishReason: finish } : {}),
    });
    const usage = { promptTokenCount: 3, candidatesTokenCount: 4, totalTokenCount: 7 };
    w.gm.queue(
      geminiSse([
        { data: { candidates: [cand(0, "one"), cand(1, "two")], usageMetadata: usage } },
        {
          data: { candidates: [cand(0, "!", "STOP"), cand(1, "?", "STOP")], usageMetadata: usage },
        },
      ]),
    );
    const s = w.openai.chat.completions.stream({
      model: "h-gemini",
      n: 2,
      messages: [{ role: "user", content: "x" }],
      stream_options: { include_usage: true },
    });
    const f = await s.finalChatCompletion();
    expect(f.choices.map((c) => [c.index, c.message.content, c.finish_reason])).toEqual([
      [0, "one!", "stop"],
      [1, "two?", "stop"],
    ]);
    expect(f.usage).toMatchObject({ prompt_tokens: 3, completion_tokens: 4 });
  });
});

async function rawChunks(model: string, body: Record<string, unknown>) {
  const stream = await w.openai.chat.completions.create({
    model,
    stream: true,
    messages: [{ role: "user", content: "x" }],
    ...body,
  } as OpenAI.ChatCompletionCreateParamsStreaming);
  const chunks: OpenAI.ChatCompletionChunk[] = [];
  for await (const c of stream) chunks.push(c);
  return chunks;
}

describe("stream_options.include_usage", () => {
  for (const model of ["h-anthropic", "h-gemini"]) {
    const queueStream = () => {
      if (model === "h-anthropic")
        w.an.queue({ kind: "sse", steps: anthropicStreamSteps(["o", "k"]) });
      else w.gm.queue(geminiSse(geminiStreamSteps(["o", "k"])));
    };
    it(`${model}: true gives one final chunk with choices [] and usage; others usage null`, async () => {
      queueStream();
      const chunks = await rawChunks(model, { stream_options: { include_usage: true } });
      const last = chunks.at(-1);
      expect(last?.choices).toEqual([]);
      expect(last?.usage).toMatchObject({ prompt_tokens: expect.any(Number) });
      for (const c of chunks.slice(0, -1)) {
        expect(c.choices.length).toBe(1);
        expect(c.usage ?? null).toBeNull();
      }
    });
    it(`${model}: false (and absent) gives no usage chunk and no usage`, async () => {
      for (const body of [{ stream_options: { include_usage: false } }, {}]) {
        queueStream();
        const chunks = await rawChunks(model, body);
        expect(chunks.every((c) => c.choices.length === 1)).toBe(true);
        expect(chunks.every((c) => c.usage == null)).toBe(true);
      }
    });
  }
});

describe("finish reasons", () => {
  it("anthropic max_tokens -> length: parse() throws the SDK's LengthFinishReasonError, max_tokens from max_completion_tokens", async () => {
    w.an.queue(anthropicJson('{"city":"Ja', { stop: "max_tokens" }));
    await expect(
      w.openai.chat.completions.parse({
        model: "h-anthropic",
        max_completion_tokens: 5,
        messages: [{ role: "user", content: "x" }],
        response_format: zodResponseFormat(Weather, "weather"),
      }),
    ).rejects.toBeInstanceOf(LengthFinishReasonError);
    expect(w.an.last.body.max_tokens).toBe(5);
  });
  it("gemini MAX_TOKENS -> length, maxOutputTokens from max_completion_tokens", async () => {
    w.gm.queue(geminiJson("abc", { finish: "MAX_TOKENS" }));
    const c = await w.openai.chat.completions.create({
      model: "h-gemini",
      max_completion_tokens: 5,
      messages: [{ role: "user", content: "x" }],
    });
    expect(c.choices[0].finish_reason).toBe("length");
    expect((w.gm.last.body.generationConfig as Record<string, unknown>).maxOutputTokens).toBe(5);
  });
  it("gemini SAFETY while streaming -> content_filter in finalChatCompletion", async () => {
    w.gm.queue(geminiSse(geminiStreamSteps(['{"ci'], { finish: "SAFETY" })));
    const f = await w.openai.chat.completions
      .stream({ model: "h-gemini", messages: [{ role: "user", content: "x" }] })
      .finalChatCompletion();
    expect(f.choices[0].finish_reason).toBe("content_filter");
  });
  it("anthropic refusal stop reason on parse(): content_filter or a refusal, not parsed garbage", async () => {
    w.an.queue(anthropicJson("I can't help with that.", { stop: "refusal" }));
    let err: unknown;
    let c: unknown;
    try {
      c = await w.openai.chat.completions.parse({
        model: "h-anthropic",
        messages: [{ role: "user", content: "x" }],
        response_format: zodResponseFormat(Weather, "weather"),
      });
    } catch (e) {
      err = e;
    }
    if (err) expect(err).toBeInstanceOf(ContentFilterFinishReasonError);
    else expect((c as OpenAI.ChatCompletion).choices[0].message.refusal).toBeTruthy();
  });
});

describe("logprobs where the wire has none", () => {
  for (const model of ["h-anthropic", "h-gemini"]) {
    it(`${model}: a 400 naming logprobs, stream or not`, async () => {
      for (const stream of [false, true]) {
        const err = await w.openai.chat.completions
          .create({
            model,
            logprobs: true,
            top_logprobs: 2,
            stream,
            messages: [{ role: "user", content: "x" }],
          } as OpenAI.ChatCompletionCreateParams)
          .then(
            async (r) => {
              if (stream) for await (const _ of r as AsyncIterable<unknown>) void _;
              return undefined;
            },
            (e: unknown) => e,
          );
        expect(err).toBeInstanceOf(OpenAI.BadRequestError);
        expect(String((err as Error).message)).toMatch(/logprobs/);
      }
    });
  }
});

describe("runTools with several rounds and parallel calls", () => {
  for (const model of ["h-anthropic", "h-gemini"]) {
    for (const stream of [false, true]) {
      it(`${model}${stream ? " streamed" : ""}: two rounds, two parallel calls in the first`, async () => {
        if (model === "h-anthropic") {
          const first = [
            { id: "toolu_a", name: "weather", input: { city: "A", celsius: 1 } },
            { id: "toolu_b", name: "weather", input: { city: "B", celsius: 2 } },
          ];
          const second = [{ id: "toolu_c", name: "weather", input: { city: "C", celsius: 3 } }];
          if (stream)
            w.an.queue(
              {
                kind: "sse",
                steps: anthropicToolStreamSteps(
                  first.map((c) => ({ ...c, jsonPieces: [JSON.stringify(c.input)] })),
                ),
              },
              {
                kind: "sse",
                steps: anthropicToolStreamSteps(
                  second.map((c) => ({ ...c, jsonPieces: [JSON.stringify(c.input)] })),
                ),
              },
              { kind: "sse", steps: anthropicStreamSteps(["done"]) },
            );
          else
            w.an.queue(
              anthropicJson(null, { toolUses: first }),
              anthropicJson(null, { toolUses: second }),
              anthropicJson("done"),
            );
        } else {
          const first = [
            { name: "weather", args: { city: "A", celsius: 1 } },
            { name: "weather", args: { city: "B", celsius: 2 } },
          ];
          const second = [{ name: "weather", args: { city: "C", celsius: 3 } }];
          if (stream)
            w.gm.queue(
              geminiSse(geminiStreamSteps([], { calls: first })),
              geminiSse(geminiStreamSteps([], { calls: second })),
              geminiSse(geminiStreamSteps(["done"])),
            );
          else
            w.gm.queue(
              geminiJson(null, { calls: first }),
              geminiJson(null, { calls: second }),
              geminiJson("done"),
            );
        }
        const seen: unknown[] = [];
        const tool = zodFunction({
          name: "weather",
          parameters: Weather,
          function: (args: z.infer<typeof Weather>) => {
            seen.push(args);
            return `${args.city}: sunny`;
          },
        });
        const params = {
          model,
          messages: [{ role: "user" as const, content: "x" }],
          tools: [tool],
        };
        const runner = stream
          ? w.openai.chat.completions.runTools({ ...params, stream: true })
          : w.openai.chat.completions.runTools(params);
        expect(await runner.finalContent()).toBe("done");
        expect(seen).toEqual([
          { city: "A", celsius: 1 },
          { city: "B", celsius: 2 },
          { city: "C", celsius: 3 },
        ]);
        const up = model === "h-anthropic" ? w.an : w.gm;
        expect(up.refused).toEqual([]);
        expect(up.requests).toHaveLength(3);
      });
    }
  }
});

describe("responses helpers", () => {
  for (const model of ["h-anthropic", "h-gemini"]) {
    it(`${model}: responses.parse with zodTextFormat gives output_parsed`, async () => {
      if (model === "h-anthropic") w.an.queue(anthropicJson(answerJson));
      else w.gm.queue(geminiJson(answerJson));
      const r = await w.openai.responses.parse({
        model,
        input: "weather",
        text: { format: zodTextFormat(Weather, "weather") },
      });
      expect(r.output_parsed).toEqual({ city: "Jakarta", celsius: 31 });
    });
    it(`${model}: responses.stream with zodTextFormat, finalResponse output_parsed`, async () => {
      if (model === "h-anthropic")
        w.an.queue({
          kind: "sse",
          steps: anthropicStreamSteps(['{"city":"Jak', 'arta","celsius":31}']),
        });
      else w.gm.queue(geminiSse(geminiStreamSteps(['{"city":"Jak', 'arta","celsius":31}'])));
      const s = w.openai.responses.stream({
        model,
        input: "weather",
        text: { format: zodTextFormat(Weather, "weather") },
      });
      const r = await s.finalResponse();
      expect(r.output_parsed).toEqual({ city: "Jakarta", celsius: 31 });
    });
    it(`${model}: responses.stream with two function calls, events and finalResponse`, async () => {
      if (model === "h-anthropic")
        w.an.queue({
          kind: "sse",
          steps: anthropicToolStreamSteps(
            [
              { id: "toolu_a", name: "weather", jsonPieces: ['{"city":"A",', '"celsius":1}'] },
              { id: "toolu_b", name: "weather", jsonPieces: ['{"city":"B","celsius":2}'] },
            ],
            { text: "Checking." },
          ),
        });
      else
        w.gm.queue(
          geminiSse(
            geminiStreamSteps(["Checking."], {
              calls: [
                { name: "weather", args: { city: "A", celsius: 1 } },
                { name: "weather", args: { city: "B", celsius: 2 } },
              ],
            }),
          ),
        );
      const s = w.openai.responses.stream({
        model,
        input: "weather",
        tools: [
          {
            type: "function",
            name: "weather",
            strict: true,
            parameters: z.toJSONSchema(Weather) as Record<string, unknown>,
          },
        ],
      });
      const argsDone: unknown[] = [];
      s.on("response.function_call_arguments.done", (e) =>
        argsDone.push([e.output_index, JSON.parse(e.arguments)]),
      );
      const r = await s.finalResponse();
      const calls = r.output.filter((o) => o.type === "function_call");
      expect(calls.map((c) => JSON.parse(c.arguments))).toEqual([
        { city: "A", celsius: 1 },
        { city: "B", celsius: 2 },
      ]);
      expect(argsDone.map((a) => (a as unknown[])[1])).toEqual([
        { city: "A", celsius: 1 },
        { city: "B", celsius: 2 },
      ]);
      expect(r.output_text).toBe("Checking.");
    });
  }
});

describe("responses.parse on a cut or filtered answer", () => {
  const cases: [string, string, () => void, string][] = [
    [
      "h-anthropic",
      "max_tokens",
      () => w.an.queue(anthropicJson('{"city":"Ja', { stop: "max_tokens" })),
      "max_output_tokens",
    ],
    [
      "h-anthropic",
      "refusal",
      () => w.an.queue(anthropicJson("I can't help with that.", { stop: "refusal" })),
      "content_filter",
    ],
    [
      "h-gemini",
      "MAX_TOKENS",
      () => w.gm.queue(geminiJson('{"city":"Ja', { finish: "MAX_TOKENS" })),
      "max_output_tokens",
    ],
    [
      "h-gemini",
      "SAFETY",
      () => w.gm.queue(geminiJson("I will not", { finish: "SAFETY" })),
      "content_filter",
    ],
  ];
  for (const [model, finish, queue, reason] of cases) {
    it(`${model} ${finish}: status incomplete (${reason}), output_parsed null, no throw`, async () => {
      queue();
      const r = await w.openai.responses.parse({
        model,
        input: "weather",
        max_output_tokens: 50,
        text: { format: zodTextFormat(Weather, "weather") },
      });
      expect(r.status).toBe("incomplete");
      expect(r.incomplete_details).toEqual({ reason });
      expect(r.output_parsed).toBeNull();
    });
    it(`${model} ${finish} streamed: finalResponse status incomplete (${reason}), no throw`, async () => {
      if (model === "h-anthropic")
        w.an.queue({ kind: "sse", steps: anthropicStreamSteps(['{"city":"Ja'], { stop: finish }) });
      else w.gm.queue(geminiSse(geminiStreamSteps(['{"city":"Ja'], { finish })));
      const s = w.openai.responses.stream({
        model,
        input: "weather",
        max_output_tokens: 50,
        text: { format: zodTextFormat(Weather, "weather") },
      });
      const r = await s.finalResponse();
      expect(r.status).toBe("incomplete");
      expect(r.incomplete_details).toEqual({ reason });
      expect(r.output_parsed).toBeNull();
    });
  }
});

const Rich = z.object({
  id: z.string().uuid(),
  email: z.string().email(),
  name: z
    .string()
    .min(1)
    .max(40)
    .regex(/^[A-Z]/),
  age: z.number().int().min(0).max(150),
  ratio: z.number().gt(0).lt(1),
  kind: z.enum(["a", "b"]),
  fixed: z.literal("x"),
  tags: z.array(z.string()).min(1).max(3),
  note: z.string().nullable(),
  when: z.string().datetime(),
  choice: z.union([z.object({ n: z.number() }), z.object({ s: z.string() })]),
  nested: z.object({ deep: z.array(z.object({ v: z.boolean() })) }),
});
const richValue = {
  id: "123e4567-e89b-12d3-a456-426614174000",
  email: "a@b.co",
  name: "Ann",
  age: 3,
  ratio: 0.5,
  kind: "a",
  fixed: "x",
  tags: ["t"],
  note: null,
  when: "2024-01-01T00:00:00Z",
  choice: { n: 1 },
  nested: { deep: [{ v: true }] },
};

describe("a rich zod schema is accepted by each wire's schema rules", () => {
  for (const model of ["h-anthropic", "h-gemini"]) {
    it(`${model}: chat.completions.parse with a rich schema parses`, async () => {
      if (model === "h-anthropic") w.an.queue(anthropicJson(JSON.stringify(richValue)));
      else w.gm.queue(geminiJson(JSON.stringify(richValue)));
      const c = await w.openai.chat.completions.parse({
        model,
        messages: [{ role: "user", content: "x" }],
        response_format: zodResponseFormat(Rich, "rich"),
      });
      expect(c.choices[0].message.parsed).toEqual(richValue);
    });
    it(`${model}: responses.parse with a rich zod tool and format`, async () => {
      if (model === "h-anthropic")
        w.an.queue(
          anthropicJson(null, { toolUses: [{ id: "toolu_1", name: "rich", input: richValue }] }),
        );
      else w.gm.queue(geminiJson(null, { calls: [{ name: "rich", args: richValue }] }));
      const r = await w.openai.responses.parse({
        model,
        input: "x",
        tools: [zodResponsesFunction({ name: "rich", parameters: Rich })],
        text: { format: zodTextFormat(Weather, "weather") },
      });
      const call = r.output.find((o) => o.type === "function_call");
      expect(call && "parsed_arguments" in call ? call.parsed_arguments : undefined).toEqual(
        richValue,
      );
    });
  }
});

describe("logprobs on /v1/responses where the wire has none", () => {
  for (const model of ["h-anthropic", "h-gemini"]) {
    it(`${model}: include message.output_text.logprobs is a 400 naming logprobs`, async () => {
      const err = await w.openai.responses
        .create({ model, input: "x", include: ["message.output_text.logprobs"], top_logprobs: 2 })
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      expect(err).toBeInstanceOf(OpenAI.BadRequestError);
      expect(String((err as Error).message)).toMatch(/logprobs/);
    });
  }
});

describe("gemini stream: parallel calls in separate events, n=2 parsed", () => {
  it("indexes calls arriving one per event 0, 1 with distinct ids", async () => {
    const usage = { promptTokenCount: 3, candidatesTokenCount: 4, totalTokenCount: 7 };
    const call = (city: string) => ({
      functionCall: { name: "weather", args: { city, celsius: 1 } },
    });
    w.gm.queue(
      geminiSse([
        {
          data: {
            candidates: [{ content: { role: "model", parts: [call("A")] }, index: 0 }],
            usageMetadata: usage,
          },
        },
        {
          data: {
            candidates: [{ content: { role: "model", parts: [call("B")] }, index: 0 }],
            usageMetadata: usage,
          },
        },
        {
          data: {
            candidates: [
              { content: { role: "model", parts: [{ text: "" }] }, finishReason: "STOP", index: 0 },
            ],
            usageMetadata: usage,
          },
        },
      ]),
    );
    const s = w.openai.chat.completions.stream({
      model: "h-gemini",
      messages: [{ role: "user", content: "x" }],
      tools: [zodFunction({ name: "weather", parameters: Weather })],
    });
    const f = await s.finalChatCompletion();
    const calls = f.choices[0].message.tool_calls as OpenAI.ParsedFunctionToolCall[];
    expect(calls.map((c) => c.function.parsed_arguments)).toEqual([
      { city: "A", celsius: 1 },
      { city: "B", celsius: 1 },
    ]);
    expect(new Set(calls.map((c) => c.id)).size).toBe(2);
    expect(f.choices[0].finish_reason).toBe("tool_calls");
  });
  it("n=2 with response_format: both choices parsed (parse and stream)", async () => {
    w.gm.queue(geminiJson([answerJson, '{"city":"Medan","celsius":30}']));
    const c = await w.openai.chat.completions.parse({
      model: "h-gemini",
      n: 2,
      messages: [{ role: "user", content: "x" }],
      response_format: zodResponseFormat(Weather, "weather"),
    });
    expect(c.choices.map((ch) => ch.message.parsed)).toEqual([
      { city: "Jakarta", celsius: 31 },
      { city: "Medan", celsius: 30 },
    ]);
  });
});

describe("reasoning with a small output limit", () => {
  for (const model of ["h-anthropic", "h-gemini"]) {
    it(`${model}: reasoning_effort low with max_completion_tokens 300 is accepted upstream`, async () => {
      if (model === "h-anthropic") w.an.queue(anthropicJson("ok"));
      else w.gm.queue(geminiJson("ok"));
      const c = await w.openai.chat.completions.create({
        model,
        reasoning_effort: "low",
        max_completion_tokens: 300,
        messages: [{ role: "user", content: "x" }],
      });
      expect(c.choices[0].message.content).toBe("ok");
      expect((model === "h-anthropic" ? w.an : w.gm).refused).toEqual([]);
    });
  }
});

describe("a streamed tool call with no arguments", () => {
  const NoArgs = z.object({});
  it("anthropic stream, no input_json_delta: runTools (streamed) gets {} and finishes", async () => {
    w.an.queue(
      {
        kind: "sse",
        steps: anthropicToolStreamSteps([{ id: "toolu_n", name: "now", jsonPieces: [] }]),
      },
      { kind: "sse", steps: anthropicStreamSteps(["noon"]) },
    );
    const seen: unknown[] = [];
    const runner = w.openai.chat.completions.runTools({
      model: "h-anthropic",
      stream: true,
      messages: [{ role: "user", content: "time?" }],
      tools: [
        zodFunction({
          name: "now",
          parameters: NoArgs,
          function: (a: object) => {
            seen.push(a);
            return "12:00";
          },
        }),
      ],
    });
    expect(await runner.finalContent()).toBe("noon");
    expect(seen).toEqual([{}]);
  });
  it("anthropic stream, one empty input_json_delta: responses.stream function_call arguments {}", async () => {
    w.an.queue({
      kind: "sse",
      steps: anthropicToolStreamSteps([{ id: "toolu_n", name: "now", jsonPieces: [""] }]),
    });
    const r = await w.openai.responses
      .stream({
        model: "h-anthropic",
        input: "time?",
        tools: [zodResponsesFunction({ name: "now", parameters: NoArgs })],
      })
      .finalResponse();
    const call = r.output.find((o) => o.type === "function_call");
    expect(call?.type === "function_call" && call.arguments).toBe("{}");
    expect(call && "parsed_arguments" in call ? call.parsed_arguments : undefined).toEqual({});
  });
  it("gemini functionCall without args: chat stream arguments {}", async () => {
    const usage = { promptTokenCount: 3, candidatesTokenCount: 4, totalTokenCount: 7 };
    w.gm.queue(
      geminiSse([
        {
          data: {
            candidates: [
              {
                content: { role: "model", parts: [{ functionCall: { name: "now" } }] },
                finishReason: "STOP",
                index: 0,
              },
            ],
            usageMetadata: usage,
          },
        },
      ]),
    );
    const f = await w.openai.chat.completions
      .stream({
        model: "h-gemini",
        messages: [{ role: "user", content: "x" }],
        tools: [zodFunction({ name: "now", parameters: NoArgs })],
      })
      .finalChatCompletion();
    const calls = f.choices[0].message.tool_calls as OpenAI.ParsedFunctionToolCall[];
    expect(calls[0].function.parsed_arguments).toEqual({});
  });
});

describe("ResponsesToolRunner across wires", () => {
  for (const model of ["h-anthropic", "h-gemini"]) {
    for (const stream of [false, true]) {
      it(`${model}${stream ? " streamed" : ""}: two rounds, two parallel calls, final text`, async () => {
        let n = 0;
        const uniq = <T extends Reply>(r: T): T => {
          n++;
          if (r.kind === "json") {
            const body = r.body as Record<string, unknown>;
            if ("id" in body) body.id = `msg_r${n}`;
            if ("responseId" in body) body.responseId = `resp-r${n}`;
          }
          return r;
        };
        if (model === "h-anthropic") {
          const first = [
            { id: "toolu_a", name: "weather", input: { city: "A", celsius: 1 } },
            { id: "toolu_b", name: "weather", input: { city: "B", celsius: 2 } },
          ];
          const second = [{ id: "toolu_c", name: "weather", input: { city: "C", celsius: 3 } }];
          if (stream)
            w.an.queue(
              {
                kind: "sse",
                steps: anthropicToolStreamSteps(
                  first.map((c) => ({ ...c, jsonPieces: [JSON.stringify(c.input)] })),
                ),
              },
              {
                kind: "sse",
                steps: anthropicToolStreamSteps(
                  second.map((c) => ({ ...c, jsonPieces: [JSON.stringify(c.input)] })),
                ),
              },
              { kind: "sse", steps: anthropicStreamSteps(["done"]) },
            );
          else
            w.an.queue(
              uniq(anthropicJson(null, { toolUses: first })),
              uniq(anthropicJson(null, { toolUses: second })),
              uniq(anthropicJson("done")),
            );
        } else {
          const first = [
            { name: "weather", args: { city: "A", celsius: 1 } },
            { name: "weather", args: { city: "B", celsius: 2 } },
          ];
          const second = [{ name: "weather", args: { city: "C", celsius: 3 } }];
          if (stream)
            w.gm.queue(
              geminiSse(geminiStreamSteps([], { calls: first })),
              geminiSse(geminiStreamSteps([], { calls: second })),
              geminiSse(geminiStreamSteps(["done"])),
            );
          else
            w.gm.queue(
              uniq(geminiJson(null, { calls: first })),
              uniq(geminiJson(null, { calls: second })),
              uniq(geminiJson("done")),
            );
        }
        const seen: unknown[] = [];
        const runner = new ResponsesToolRunner({
          functions: [
            runnerFunction(
              zodResponsesFunction({
                name: "weather",
                parameters: Weather,
                function: (args: z.infer<typeof Weather>) => {
                  seen.push(args);
                  return `${args.city}: sunny`;
                },
              }),
            ),
          ],
        });
        const final = await runner.run(
          w.openai,
          { model, input: "weather in A, B, C" },
          { stream },
        );
        expect(final.output_text).toBe("done");
        expect(seen).toEqual([
          { city: "A", celsius: 1 },
          { city: "B", celsius: 2 },
          { city: "C", celsius: 3 },
        ]);
        expect((model === "h-anthropic" ? w.an : w.gm).refused).toEqual([]);
      });
    }
  }
});
