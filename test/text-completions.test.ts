import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import type { Completion } from "openai/resources/completions";
import { describe, expect, it } from "vitest";
import { startGateway } from "../src/server/gateway.js";
import { admin, errorOf, idleMoney, money } from "./support/api.js";
import {
  anthropicJson,
  anthropicStreamSteps,
  deferred,
  everyChoice,
  openaiJson,
  openaiStreamSteps,
  type RecordedRequest,
  type Reply,
  type SseStep,
} from "./support/fake-upstream.js";
import { backends, baseConfigWith, KEY, post } from "./support/gateway.js";
import { geminiJson, geminiStreamSteps } from "./support/gemini-wire.js";
import { type MeterWires, useMeterWires } from "./support/meter-wires.js";
import { type Logged, logged, requestTextTokens } from "./support/metering.js";
import { streamDataInText, textPastKeepalive } from "./support/sse.js";
import { type ThreeWires, useThreeWires } from "./support/three-wires.js";

/**
 * POST /v1/completions, OpenAI's legacy Completions API (the openai SDK's `completions.create`),
 * which editor autocomplete still calls: answered through chat on every wire (the prompt as one
 * user message, the answer as `text_completion` objects, whole and streamed), admitted, limited,
 * held, metered and logged as chat is, and a 400 naming what chat cannot carry.
 */

const sdk = (gw: { url: string }, apiKey = KEY) =>
  new OpenAI({ apiKey, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 10_000 });

async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of items) out.push(item);
  return out;
}

/** Each answer's text of a completion stream, by its index. */
function textsOf(chunks: Completion[]): string[] {
  const texts: string[] = [];
  for (const chunk of chunks)
    for (const choice of chunk.choices)
      texts[choice.index] = (texts[choice.index] ?? "") + choice.text;
  return texts;
}

/** A chat answer of the OpenAI fake: `n` choices (`answer 0`, `answer 1`...), whole or streamed. */
function chatAnswers(req: RecordedRequest): Reply {
  const n = typeof req.body.n === "number" ? req.body.n : 1;
  if (req.body.stream === true) {
    if (n === 1)
      return { kind: "sse", steps: openaiStreamSteps(["return ", "a + b"], { usage: [30, 6] }) };
    return {
      kind: "sse",
      steps: [
        everyChoice(n, { role: "assistant", content: "" }),
        everyChoice(n, { content: "return a" }),
        everyChoice(n, { content: " + b" }),
        everyChoice(n, {}, "length"),
        {
          data: {
            id: "chatcmpl-n",
            object: "chat.completion.chunk",
            created: 1_700_000_000,
            model: "gpt-up",
            choices: [],
            usage: { prompt_tokens: 30, completion_tokens: 8 * n, total_tokens: 30 + 8 * n },
          },
        },
        { data: "[DONE]" },
      ],
    };
  }
  const reply = openaiJson("answer 0", { usage: [30, 5 * n] });
  const body = reply.body as { choices: Record<string, unknown>[] };
  body.choices = Array.from({ length: n }, (_, index) => ({
    index,
    message: { role: "assistant", content: `answer ${index}` },
    logprobs: null,
    finish_reason: index === 0 ? "stop" : "length",
  }));
  return reply;
}

describe("POST /v1/completions on each wire", () => {
  let wires: ThreeWires;
  useThreeWires({ maxOutputTokens: 4_000, ready: (started) => (wires = started) });

  it("the mock answers as it answers chat: a text_completion with the chat answer's text, finish and usage, logged as `completions`", async () => {
    const asked = {
      model: "mock-gpt",
      max_tokens: 12,
      temperature: 0.2,
      top_p: 0.9,
      seed: 7,
      user: "editor",
    };
    const prompt = "def add(a, b):";
    const { data: done, response } = await wires.openai.completions
      .create({ ...asked, prompt })
      .withResponse();
    const chat = await wires.openai.chat.completions.create({
      ...asked,
      messages: [{ role: "user", content: prompt }],
    });
    expect(done).toEqual({
      id: expect.stringMatching(/^cmpl-/),
      object: "text_completion",
      created: expect.any(Number),
      model: "mock-gpt",
      system_fingerprint: chat.system_fingerprint,
      choices: [
        {
          text: chat.choices[0].message.content,
          index: 0,
          logprobs: null,
          finish_reason: chat.choices[0].finish_reason,
        },
      ],
      usage: chat.usage,
    });
    expect(done.choices[0].text).toContain(prompt);

    const [, row] = await wires.gw.listRequests({ limit: 2 });
    expect(row).toMatchObject({
      id: response.headers.get("x-request-id"),
      endpoint: "completions",
      model: "mock-gpt",
      status: 200,
      state: "settled",
      stream: false,
      usage: {
        input_tokens: done.usage?.prompt_tokens,
        output_tokens: done.usage?.completion_tokens,
      },
    });
  });

  it("the mock streams text_completion chunks, the usage last when asked for, then data: [DONE]", async () => {
    const asked = { model: "mock-gpt", prompt: "def add(a, b):", max_tokens: 12 };
    const whole = await wires.openai.completions.create(asked);
    const chunks = await collect(
      await wires.openai.completions.create({
        ...asked,
        stream: true,
        stream_options: { include_usage: true },
      }),
    );
    expect(textsOf(chunks)).toEqual([whole.choices[0].text]);
    for (const chunk of chunks) {
      expect(chunk).toMatchObject({ object: "text_completion", model: "mock-gpt" });
      expect(chunk.id).toMatch(/^cmpl-/);
      for (const choice of chunk.choices) expect(choice.logprobs).toBeNull();
    }
    expect(chunks.at(-2)?.choices[0]?.finish_reason).toBe(whole.choices[0].finish_reason);
    const last = chunks.at(-1);
    expect(last?.choices).toEqual([]);
    const [row] = await wires.gw.listRequests({ limit: 1 });
    expect(row).toMatchObject({ endpoint: "completions", stream: true, state: "settled" });
    expect(last?.usage).toMatchObject({
      prompt_tokens: row.usage.input_tokens,
      completion_tokens: row.usage.output_tokens,
    });

    // Without include_usage no chunk carries usage; the stream ends with [DONE].
    const res = await post(wires.gw, "/v1/completions", { ...asked, stream: true });
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text.endsWith("data: [DONE]\n\n")).toBe(true);
    const events = await streamDataInText<Completion>(text);
    expect(events.at(-1)).toBe("[DONE]");
    const data = events.filter((event): event is Completion => event !== "[DONE]");
    expect(data.every((event) => event.object === "text_completion" && !event.usage)).toBe(true);
    expect(textsOf(data)).toEqual([whole.choices[0].text]);
  });

  it("n: 2 on the mock: two answers, each the chat answer of its index, whole and streamed", async () => {
    const asked = { model: "mock-gpt", max_tokens: 10, n: 2 };
    const prompt = "function greet(name) {";
    const chat = await wires.openai.chat.completions.create({
      ...asked,
      messages: [{ role: "user", content: prompt }],
    });
    const whole = await wires.openai.completions.create({ ...asked, prompt });
    const expected = chat.choices.map((choice) => choice.message.content);
    expect(whole.choices.map((choice) => [choice.index, choice.text])).toEqual([
      [0, expected[0]],
      [1, expected[1]],
    ]);
    const chunks = await collect(
      await wires.openai.completions.create({ ...asked, prompt, stream: true }),
    );
    expect(textsOf(chunks)).toEqual(expected);
  });

  it("through the OpenAI fake: sent as a chat body of one user message with the sampling fields carried, answered as text_completion", async () => {
    wires.oa.handle(chatAnswers);
    const asked = {
      model: "h-openai",
      prompt: "def add(a, b):",
      max_tokens: 20,
      stop: ["\n\n", "def "],
      n: 2,
      temperature: 0.1,
      top_p: 0.5,
      seed: 42,
      user: "editor-7",
      presence_penalty: 0.5,
      frequency_penalty: 0.25,
    };
    const done = await wires.openai.completions.create(asked);
    const { prompt, ...carried } = asked;
    expect(wires.oa.refused).toEqual([]);
    expect(wires.oa.last.path).toMatch(/\/chat\/completions$/);
    expect(wires.oa.last.body).toEqual({
      ...carried,
      model: "gpt-up",
      messages: [{ role: "user", content: prompt }],
    });
    expect(done).toMatchObject({
      id: "cmpl-fake",
      object: "text_completion",
      model: "h-openai",
      choices: [
        { text: "answer 0", index: 0, logprobs: null, finish_reason: "stop" },
        { text: "answer 1", index: 1, logprobs: null, finish_reason: "length" },
      ],
      usage: { prompt_tokens: 30, completion_tokens: 10, total_tokens: 40 },
    });

    const chunks = await collect(
      await wires.openai.completions.create({
        ...asked,
        stream: true,
        stream_options: { include_usage: true },
      }),
    );
    expect(wires.oa.refused).toEqual([]);
    expect(wires.oa.last.body).toEqual({
      ...carried,
      model: "gpt-up",
      messages: [{ role: "user", content: prompt }],
      stream: true,
      stream_options: { include_usage: true },
    });
    expect(textsOf(chunks)).toEqual(["return a + b", "return a + b"]);
    expect(chunks.every((chunk) => chunk.object === "text_completion")).toBe(true);
    expect(chunks.at(-1)?.usage).toMatchObject({ prompt_tokens: 30, completion_tokens: 16 });
  });

  it("through the Anthropic fake and the Gemini fake: the chat translation carries the prompt, max_tokens and stop", async () => {
    wires.an.handle((req) =>
      req.body.stream === true
        ? { kind: "sse", steps: anthropicStreamSteps(["Hello", " from Claude"]) }
        : anthropicJson("Hello from Claude"),
    );
    wires.gm.handle((req) =>
      req.path.includes("streamGenerateContent")
        ? { kind: "sse", steps: geminiStreamSteps(["Hello", " from Gemini"]) }
        : geminiJson("Hello from Gemini"),
    );
    const asked = { prompt: "Say hello", max_tokens: 30, stop: ["END"] };
    for (const [model, fake, said] of [
      ["h-anthropic", wires.an, "Hello from Claude"],
      ["h-gemini", wires.gm, "Hello from Gemini"],
    ] as const) {
      const done = await wires.openai.completions.create({ ...asked, model });
      expect(fake.refused, model).toEqual([]);
      expect(done, model).toMatchObject({
        object: "text_completion",
        model,
        choices: [{ text: said, index: 0, logprobs: null, finish_reason: "stop" }],
      });
      const sent = JSON.stringify(fake.last.body);
      expect(sent, model).toContain('"Say hello"');
      expect(sent, model).toContain('"END"');
      expect(sent, model).toContain("30");
      expect(sent, model).not.toMatch(/"prompt"/);

      const chunks = await collect(
        await wires.openai.completions.create({ ...asked, model, stream: true }),
      );
      expect(fake.refused, model).toEqual([]);
      expect(textsOf(chunks), model).toEqual([said]);
      expect(chunks.every((chunk) => chunk.object === "text_completion")).toBe(true);
    }
  });

  it("a stream whose provider is slow gets keepalive comments, then its text_completion chunks", async () => {
    const release = deferred();
    wires.oa.handle(() => {
      const [first, ...rest] = openaiStreamSteps(["slow ", "answer"]);
      return { kind: "sse", steps: [{ ...first, gate: release.promise }, ...rest] };
    });
    const res = await post(wires.gw, "/v1/completions", {
      model: "h-openai",
      prompt: "wait for it",
      stream: true,
    });
    expect(res.status).toBe(200);
    const text = await textPastKeepalive(res, release.resolve);
    const events = await streamDataInText<Completion>(text);
    expect(events.at(-1)).toBe("[DONE]");
    const data = events.filter((event): event is Completion => event !== "[DONE]");
    expect(textsOf(data)).toEqual(["slow answer"]);
  });

  it("what chat can carry as nothing is taken: an empty suffix, echo false, best_of 1, logprobs null, one prompt in a list", async () => {
    wires.oa.handle(chatAnswers);
    const done = await wires.openai.completions.create({
      model: "h-openai",
      prompt: ["only one"],
      suffix: "",
      echo: false,
      best_of: 1,
      logprobs: null,
    });
    expect(done.choices[0].text).toBe("answer 0");
    expect(wires.oa.refused).toEqual([]);
    expect(wires.oa.last.body).toEqual({
      model: "gpt-up",
      messages: [{ role: "user", content: "only one" }],
    });
  });

  // The mock fills in the middle and echoes (test/text-completions-native.test.ts); a model
  // answered through chat refuses both, naming the provider option that would serve them.
  const chatOnly = ["h-openai"];
  const refusals: [string, Record<string, unknown>, RegExp, string[]?][] = [
    [
      "suffix",
      { suffix: "\n  return total\n" },
      /`suffix` \(fill-in-the-middle\) is not supported by "h-openai".*Leave out `suffix`.*set `completions_native: true` on its provider/,
      chatOnly,
    ],
    [
      "echo: true",
      { echo: true },
      /`echo: true` is not supported.*Leave out `echo`.*`completions_native: true`/,
      chatOnly,
    ],
    ["logprobs: 0", { logprobs: 0 }, /`logprobs` is not supported.*Leave out `logprobs`/],
    ["logprobs: 5", { logprobs: 5 }, /`logprobs` is not supported.*top_logprobs/],
    ["best_of: 3", { best_of: 3 }, /`best_of` above 1 is not supported.*`n`/],
    ["token ids", { prompt: [1734, 318, 257] }, /`prompt` as token ids.*Send `prompt` as a string/],
    ["token id lists", { prompt: [[1734, 318]] }, /`prompt` as token ids.*as a string/],
    ["two prompts", { prompt: ["one", "two"] }, /`prompt` has 2 strings.*a request of its own/],
    ["no prompt", { prompt: [] }, /`prompt` has 0 strings/],
    [
      "chat's messages",
      { messages: [{ role: "user", content: "hi" }] },
      /`messages` is a \/v1\/chat\/completions field/,
    ],
    [
      "chat's tools",
      { tools: [{ type: "function", function: { name: "f" } }] },
      /`tools` is a \/v1\/chat\/completions field/,
    ],
  ];

  it.each(refusals)(
    "refuses %s: a 400 bad_request naming it, nothing sent or logged",
    async (_, extra, said, models = ["mock-gpt", "h-openai"]) => {
      const before = (await wires.gw.listRequests({ limit: 1000 })).length;
      const held = await money(wires.gw);
      for (const model of models) {
        const err = await wires.openai.completions
          .create({ model, prompt: "def add(a, b):", ...extra } as never)
          .then(
            () => undefined,
            (error: unknown) => error,
          );
        expect(err, model).toBeInstanceOf(OpenAI.BadRequestError);
        const { status, code, error } = err as InstanceType<typeof OpenAI.BadRequestError>;
        expect({ status, code }).toEqual({ status: 400, code: "bad_request" });
        expect((error as { type?: string }).type).toBe("bad_request");
        expect((err as Error).message).toMatch(said);
      }
      expect(wires.oa.requests).toEqual([]);
      expect(await wires.gw.listRequests({ limit: 1000 })).toHaveLength(before);
      expect(await money(wires.gw)).toEqual(held);
    },
  );

  it("refuses a body chat's schema would: no prompt, a prompt of another type, max_tokens 0, n 0", async () => {
    for (const [body, field] of [
      [{ model: "mock-gpt" }, "prompt"],
      [{ model: "mock-gpt", prompt: 7 }, "prompt"],
      [{ model: "mock-gpt", prompt: "hi", max_tokens: 0 }, "max_tokens"],
      [{ model: "mock-gpt", prompt: "hi", n: 0 }, "n"],
    ] as const) {
      const res = await post(wires.gw, "/v1/completions", body);
      const refused = await errorOf(res);
      expect(refused, JSON.stringify(body)).toMatchObject({ status: 400, code: "bad_request" });
      expect(refused.message).toContain(`${field}:`);
    }
  });
});

describe.each(backends)("billing POST /v1/completions on %s", (backend) => {
  const PRICE_IN = 1_000;
  const PRICE_OUT = 2_000;
  let started: MeterWires;
  useMeterWires(
    backend,
    { openaiKey: "sk-oa", inputPerMtok: PRICE_IN, outputPerMtok: PRICE_OUT, clock: "manual" },
    (ready) => (started = ready),
  );
  const price = (usage: Logged["usage"]) =>
    usage.input_tokens * PRICE_IN + usage.output_tokens * PRICE_OUT;
  /** The logged row of request `id` once it is settled as `code` (null: answered); at most 5 s. */
  const rowOf = async (id: string | null, code: string | null = null) => {
    const deadline = Date.now() + 5_000;
    for (;;) {
      const row = (await logged(started.gw)).find((each) => each.id === id);
      if ((row && row.error_code === code) || Date.now() > deadline) return row;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  };

  it("a whole and a streamed completion are each one request-log row charged their usage's price, and the balance moved by that", async () => {
    started.openai.handle(chatAnswers);
    const openai = sdk(started.gw);
    const was = await money(started.gw);

    const whole = await openai.completions
      .create({ model: "m-openai", prompt: "1 + 1 =" })
      .withResponse();
    const wholeRow = await rowOf(whole.response.headers.get("x-request-id"));
    expect(wholeRow).toMatchObject({
      state: "settled",
      error_code: null,
      usage: { input_tokens: 30, output_tokens: 5 },
      cost_micro: 30 * PRICE_IN + 5 * PRICE_OUT,
    });

    const streamed = await openai.completions
      .create({ model: "m-openai", prompt: "1 + 1 =", stream: true })
      .withResponse();
    expect(textsOf(await collect(streamed.data))).toEqual(["return a + b"]);
    const streamRow = await rowOf(streamed.response.headers.get("x-request-id"));
    expect(streamRow).toMatchObject({
      state: "settled",
      usage: { input_tokens: 30, output_tokens: 6 },
      cost_micro: 30 * PRICE_IN + 6 * PRICE_OUT,
    });

    const mocked = await openai.completions
      .create({ model: "mock-gpt", prompt: "1 + 1 =", max_tokens: 8 })
      .withResponse();
    const mockRow = await rowOf(mocked.response.headers.get("x-request-id"));
    expect(mockRow?.usage).toEqual({
      input_tokens: mocked.data.usage?.prompt_tokens,
      output_tokens: mocked.data.usage?.completion_tokens,
    });

    const usage = (await (
      await fetch(`${started.gw.url}/v1/usage/requests?limit=3`, {
        headers: { authorization: `Bearer ${KEY}` },
      })
    ).json()) as { data: { id: string; endpoint: string; stream: boolean }[] };
    expect(usage.data.map((row) => [row.id, row.endpoint, row.stream])).toEqual([
      [mockRow?.id, "completions", false],
      [streamRow?.id, "completions", true],
      [wholeRow?.id, "completions", false],
    ]);
    const after = await idleMoney(started.gw);
    expect(after.held).toBe(0);
    const charged = [wholeRow, streamRow, mockRow].reduce(
      (sum, row) => sum + (row?.cost_micro ?? 0),
      0,
    );
    expect(was.balance - after.balance).toBe(charged);
    // mock-gpt's prices are the base config's, 10,000 and 20,000 micro-IDR a token.
    expect(mockRow?.cost_micro).toBe(
      mockRow!.usage.input_tokens * 10_000 + mockRow!.usage.output_tokens * 20_000,
    );
  });

  /**
   * A client reads a completion stream of `steps` (through the OpenAI fake, which waits at step
   * `gate` until the client has gone) to its first text, and leaves: what it read, and its row.
   */
  const leftAfterFirstText = async (steps: SseStep[], gate: number) => {
    const gone = deferred();
    steps[gate] = { ...steps[gate]!, gate: gone.promise };
    started.openai.handle(() => ({ kind: "sse", steps }));
    const { data: stream, response } = await sdk(started.gw)
      .completions.create({ model: "m-openai", prompt: "sum the items", stream: true })
      .withResponse();
    let read = "";
    for await (const chunk of stream) {
      read += chunk.choices.map((choice) => choice.text).join("");
      if (read !== "") break;
    }
    const row = await rowOf(response.headers.get("x-request-id"), "client_closed");
    gone.resolve();
    return { read, row };
  };
  const FIRST = "const total = ";

  it("a client that leaves mid-stream is billed for the text it was written", async () => {
    const was = await money(started.gw);
    const steps = openaiStreamSteps([FIRST, "items.reduce(add, 0);"], { usage: [30, 9] });
    const { read, row } = await leftAfterFirstText(steps, 2);
    expect(read).toBe(FIRST);
    expect(row).toMatchObject({
      error_code: "client_closed",
      usage: {
        input_tokens: requestTextTokens(started.openai.last.body),
        output_tokens: Math.ceil(FIRST.length / 4),
      },
    });
    expect(row?.cost_micro).toBe(price(row!.usage));
    const after = await idleMoney(started.gw);
    expect(after.held).toBe(0);
    expect(was.balance - after.balance).toBe(row?.cost_micro);
  });

  it("a client that leaves mid-stream is not billed the reasoning it was never shown", async () => {
    const THOUGHT = "The user wants a sum; reduce over the items with add, starting at zero.";
    for (const field of ["reasoning_content", "reasoning"]) {
      const steps = openaiStreamSteps([FIRST, "items.reduce(add, 0);"], { usage: [30, 40] });
      const thinking = structuredClone(steps[1]?.data) as {
        choices: { delta: Record<string, unknown> }[];
      };
      thinking.choices[0]!.delta = { [field]: THOUGHT };
      steps.splice(1, 0, { data: thinking });
      const { read, row } = await leftAfterFirstText(steps, 3);
      expect(read).toBe(FIRST);
      expect(row, field).toMatchObject({
        error_code: "client_closed",
        usage: { output_tokens: Math.ceil(FIRST.length / 4) },
      });
    }
  });

  it("counts against the account's per-minute request limit with chat", async () => {
    const made = await admin(started.gw, "POST", "/accounts", { balance_idr: 1_000, rpm_limit: 2 });
    expect(made.status).toBe(201);
    const { key } = (await made.json()) as { key: { value: string } };
    const headers = { authorization: `Bearer ${key.value}` };
    const legacy = { model: "mock-gpt", prompt: "hi", max_tokens: 4 };
    expect((await post(started.gw, "/v1/completions", legacy, headers)).status).toBe(200);
    const chat = { model: "mock-gpt", messages: [{ role: "user", content: "hi" }] };
    expect((await post(started.gw, "/v1/chat/completions", chat, headers)).status).toBe(200);
    for (const [path, body] of [
      ["/v1/completions", legacy],
      ["/v1/chat/completions", chat],
    ] as const) {
      const refused = await post(started.gw, path, body, headers);
      expect(await errorOf(refused), path).toMatchObject({
        status: 429,
        code: "rate_limit_exceeded",
        retryAfter: null,
      });
    }
  });
});

describe("the per-minute count of /v1/completions on SQLite across a restart", () => {
  it("rpm_limit 2: two completions, then a restart in the same minute still refuses the third", async () => {
    const dir = mkdtempSync(join(tmpdir(), "gateway-completions-rpm-"));
    const config = baseConfigWith({ accounts: (accounts) => [{ ...accounts[0], rpm_limit: 2 }] });
    const start = async (at: string) => {
      const gw = await startGateway({
        config,
        db: join(dir, "gateway.db"),
        port: 0,
        clock: "manual",
      });
      gw.clock.set(new Date(at));
      return gw;
    };
    const complete = async (gw: { url: string }) => {
      const res = await post(gw, "/v1/completions", { model: "mock-gpt", prompt: "hi" });
      return res.status === 200 ? 200 : `${res.status} ${(await errorOf(res)).code}`;
    };
    let gw: Awaited<ReturnType<typeof start>> | undefined;
    try {
      gw = await start("2031-01-01T00:00:10Z");
      expect([await complete(gw), await complete(gw)]).toEqual([200, 200]);
      await gw.close();
      gw = await start("2031-01-01T00:00:30Z");
      expect(await complete(gw)).toBe("429 rate_limit_exceeded");
      gw.clock.set(new Date("2031-01-01T00:01:00Z"));
      expect(await complete(gw)).toBe(200);
    } finally {
      await gw?.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
