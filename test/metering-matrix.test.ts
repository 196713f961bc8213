import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { idleMoney, money } from "./support/api.js";
import {
  anyStyleHeaders,
  type EveryWireGateway,
  gatewayOnEveryWire,
  modelOn,
  type Wire,
  wires,
} from "./support/every-wire.js";
import {
  type FakeUpstream,
  fakeUpstream,
  type RecordedRequest,
  type Reply,
  type SseStep,
} from "./support/fake-upstream.js";
import {
  backends,
  baseConfigWith,
  POOR_KEY,
  post,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";
import { deliveredTokens, type Logged, logged } from "./support/metering.js";
import { streamData, streamEvents } from "./support/sse.js";

/**
 * The meter from the client's side: every client style x every upstream wire x stream or not x
 * `n` (chat) x where the client hangs up, on both backends. Each case checks the charge against
 * what the provider reported (a finished answer) or what reached the client (one left midway),
 * the balance drop against the charge, that nothing stays held, and one log row per request.
 */

type Style = "chat" | "messages" | "responses";
type HangUp = "never" | "before-headers" | "after-pieces";

const PIECES_BEFORE_HANGUP = 5;
const WORDS = 20;
/** Three-letter words after a space: four characters, one token each by every count. */
const word = (choice: number, i: number) =>
  ` ${String.fromCharCode(97 + choice)}${"bcdefghijklmnopqrstuvwxyz"[i % 25]}${i % 10}`;
const PROMPT_TOKENS = { openai: 17, anthropic: 13, gemini: 19 } as const;
// micro-IDR per token
const PRICE_IN = 1_000;
const PRICE_OUT = 2_000;

interface Case {
  name: string;
  style: Style;
  wire: Wire;
  stream: boolean;
  n: number;
  hangUp: HangUp;
}

function cases(): Case[] {
  const out: Case[] = [];
  for (const wire of wires) {
    for (const style of ["chat", "messages", "responses"] as const) {
      for (const n of style === "chat" ? [1, 3] : [1]) {
        for (const stream of [false, true]) {
          const hangUps: HangUp[] = stream
            ? ["never", "after-pieces", "before-headers"]
            : ["never", "before-headers"];
          for (const hangUp of hangUps) {
            const name = `${style} -> ${wire}${stream ? " stream" : ""}${n > 1 ? ` n=${n}` : ""}, hang-up ${hangUp}`;
            out.push({ name, style, wire, stream, n, hangUp });
          }
        }
      }
    }
  }
  return out;
}

// ---- fake providers that report usage as the real APIs do ------------------------------------

const slowStart = (req: RecordedRequest) =>
  JSON.stringify(req.body).includes("hold on") ? 1_500 : 0;

function openaiReply(req: RecordedRequest): Reply {
  const n = typeof req.body.n === "number" ? req.body.n : 1;
  const usage = { prompt_tokens: PROMPT_TOKENS.openai, completion_tokens: n * WORDS };
  const base = { id: "chatcmpl-fake", created: 1, model: String(req.body.model) };
  if (req.body.stream !== true) {
    const choices = Array.from({ length: n }, (_, c) => ({
      index: c,
      message: {
        role: "assistant",
        content: Array.from({ length: WORDS }, (_, i) => word(c, i)).join(""),
      },
      logprobs: null,
      finish_reason: "stop",
    }));
    return {
      kind: "json",
      delayMs: slowStart(req),
      body: {
        ...base,
        object: "chat.completion",
        choices,
        usage: { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens },
      },
    };
  }
  const chunk = (index: number, delta: object, finish: string | null = null) => ({
    ...base,
    object: "chat.completion.chunk",
    choices: [{ index, delta, logprobs: null, finish_reason: finish }],
  });
  const steps: SseStep[] = [];
  for (let c = 0; c < n; c++) steps.push({ data: chunk(c, { role: "assistant", content: "" }) });
  for (let i = 0; i < WORDS; i++)
    for (let c = 0; c < n; c++) steps.push({ data: chunk(c, { content: word(c, i) }), delayMs: 4 });
  for (let c = 0; c < n; c++) steps.push({ data: chunk(c, {}, "stop") });
  const options = req.body.stream_options as { include_usage?: boolean } | undefined;
  if (options?.include_usage)
    steps.push({
      data: {
        ...base,
        object: "chat.completion.chunk",
        choices: [],
        usage: { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens },
      },
    });
  steps.push({ data: "[DONE]" });
  return { kind: "sse", steps, holdHeadersMs: slowStart(req) };
}

/** Anthropic: two words a delta; input and one output token in message_start, the output in message_delta. */
function anthropicReply(req: RecordedRequest): Reply {
  const text = Array.from({ length: WORDS }, (_, i) => word(0, i));
  const message = {
    id: "msg_fake",
    type: "message",
    role: "assistant",
    model: String(req.body.model),
    stop_sequence: null,
  };
  if (req.body.stream !== true) {
    return {
      kind: "json",
      delayMs: slowStart(req),
      body: {
        ...message,
        content: [{ type: "text", text: text.join("") }],
        stop_reason: "end_turn",
        usage: { input_tokens: PROMPT_TOKENS.anthropic, output_tokens: WORDS },
      },
    };
  }
  const steps: SseStep[] = [
    {
      event: "message_start",
      data: {
        type: "message_start",
        message: {
          ...message,
          content: [],
          stop_reason: null,
          usage: { input_tokens: PROMPT_TOKENS.anthropic, output_tokens: 1 },
        },
      },
    },
    {
      event: "content_block_start",
      data: { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
    },
  ];
  for (let i = 0; i < WORDS; i += 2)
    steps.push({
      event: "content_block_delta",
      data: {
        type: "content_block_delta",
        index: 0,
        delta: { type: "text_delta", text: text[i] + text[i + 1] },
      },
      delayMs: 4,
    });
  steps.push(
    { event: "content_block_stop", data: { type: "content_block_stop", index: 0 } },
    {
      event: "message_delta",
      data: {
        type: "message_delta",
        delta: { stop_reason: "end_turn", stop_sequence: null },
        usage: { output_tokens: WORDS },
      },
    },
    { event: "message_stop", data: { type: "message_stop" } },
  );
  return { kind: "sse", steps, holdHeadersMs: slowStart(req) };
}

/**
 * Gemini: one word a candidate an event; each event's usage is the output so far (cumulative, as
 * Google reports it), the finish on the last.
 */
function geminiReply(req: RecordedRequest): Reply {
  const config = (req.body.generationConfig ?? {}) as { candidateCount?: number };
  const n = config.candidateCount ?? 1;
  const usage = (output: number) => ({
    promptTokenCount: PROMPT_TOKENS.gemini,
    candidatesTokenCount: output,
    totalTokenCount: PROMPT_TOKENS.gemini + output,
  });
  const candidate = (index: number, text: string, finish?: string) => ({
    content: { role: "model", parts: [{ text }] },
    index,
    ...(finish ? { finishReason: finish } : {}),
  });
  const base = { modelVersion: "gemini-up", responseId: "gemini-fake" };
  if (!/:streamGenerateContent/.test(req.path)) {
    const candidates = Array.from({ length: n }, (_, c) =>
      candidate(c, Array.from({ length: WORDS }, (_, i) => word(c, i)).join(""), "STOP"),
    );
    return {
      kind: "json",
      delayMs: slowStart(req),
      body: { ...base, candidates, usageMetadata: usage(n * WORDS) },
    };
  }
  const steps: SseStep[] = [];
  for (let i = 0; i < WORDS; i++)
    steps.push({
      data: {
        ...base,
        candidates: Array.from({ length: n }, (_, c) =>
          candidate(c, word(c, i), i === WORDS - 1 ? "STOP" : undefined),
        ),
        usageMetadata: usage(n * (i + 1)),
      },
      delayMs: 4,
    });
  return { kind: "sse", steps, holdHeadersMs: slowStart(req) };
}

// ---- the client ----------------------------------------------------------------------------

function requestBody(c: Case): { path: string; body: Record<string, unknown> } {
  // The mock waits before its first token on [[mock:delay]], the fakes on "hold on".
  const prompt =
    c.hangUp === "before-headers"
      ? c.wire === "mock"
        ? "count on [[mock:delay=1500]]"
        : "hold on, count"
      : "count to twenty";
  const model = modelOn(c.wire);
  if (c.style === "chat")
    return {
      path: "/v1/chat/completions",
      body: {
        model,
        messages: [{ role: "user", content: prompt }],
        max_tokens: 500,
        ...(c.n > 1 ? { n: c.n } : {}),
        ...(c.stream ? { stream: true, stream_options: { include_usage: true } } : {}),
      },
    };
  if (c.style === "messages")
    return {
      path: "/v1/messages",
      body: {
        model,
        max_tokens: 500,
        messages: [{ role: "user", content: prompt }],
        ...(c.stream ? { stream: true } : {}),
      },
    };
  return {
    path: "/v1/responses",
    body: { model, input: prompt, max_output_tokens: 500, ...(c.stream ? { stream: true } : {}) },
  };
}

interface ClientSaw {
  status: number | "aborted";
  /** Output text deltas the client read. */
  deltas: string[];
  /** The usage the answer reported to the client, when it finished. */
  usage?: { input: number; output: number };
}

/** The text deltas and the usage in one SSE event or JSON answer of the client's style. */
function readEvent(style: Style, event: string | undefined, data: unknown, saw: ClientSaw) {
  // biome-ignore lint/suspicious/noExplicitAny: answers of three styles, read loosely as a client reads them
  const d = data as Record<string, any>;
  if (style === "chat") {
    for (const choice of d.choices ?? []) {
      if (typeof choice.delta?.content === "string" && choice.delta.content)
        saw.deltas.push(choice.delta.content);
    }
    if (d.usage) saw.usage = { input: d.usage.prompt_tokens, output: d.usage.completion_tokens };
  } else if (style === "messages") {
    if (event === "content_block_delta" && d.delta?.text) saw.deltas.push(d.delta.text);
    if (event === "message_start")
      saw.usage = { input: d.message.usage.input_tokens, output: d.message.usage.output_tokens };
    if (event === "message_delta" && saw.usage) {
      saw.usage.output = d.usage.output_tokens;
      // Cumulative: a translated stream knows its input only at the end.
      if (d.usage.input_tokens) saw.usage.input = d.usage.input_tokens;
    }
  } else {
    if (event === "response.output_text.delta") saw.deltas.push(d.delta);
    if (event === "response.completed")
      saw.usage = {
        input: d.response.usage.input_tokens,
        output: d.response.usage.output_tokens,
      };
  }
}

async function send(gw: TestGateway, c: Case): Promise<ClientSaw> {
  const { path, body } = requestBody(c);
  const abort = new AbortController();
  const saw: ClientSaw = { status: "aborted", deltas: [] };
  const timer = c.hangUp === "before-headers" ? setTimeout(() => abort.abort(), 300) : undefined;
  try {
    const res = await post(gw, path, body, anyStyleHeaders, abort.signal);
    saw.status = res.status;
    if (!c.stream || res.status !== 200) {
      // biome-ignore lint/suspicious/noExplicitAny: answers of three styles, read loosely as a client reads them
      const json = (await res.json()) as Record<string, any>;
      if (c.style === "chat") {
        for (const choice of json.choices ?? []) saw.deltas.push(choice.message.content);
        if (json.usage)
          saw.usage = { input: json.usage.prompt_tokens, output: json.usage.completion_tokens };
      } else if (json.usage) {
        const blocks =
          c.style === "messages"
            ? (json.content ?? [])
            : (json.output ?? []).flatMap((item: { content?: unknown[] }) => item.content ?? []);
        for (const block of blocks) if (block.text) saw.deltas.push(block.text);
        saw.usage = { input: json.usage.input_tokens, output: json.usage.output_tokens };
      }
      return saw;
    }
    for await (const { event, data } of streamEvents(res)) {
      if (data === "[DONE]") continue;
      readEvent(c.style, event, data, saw);
      if (c.hangUp === "after-pieces" && saw.deltas.length >= PIECES_BEFORE_HANGUP) {
        abort.abort();
        return saw;
      }
    }
    return saw;
  } catch (err) {
    if (!abort.signal.aborted) throw err;
    return saw;
  } finally {
    clearTimeout(timer);
  }
}

// ---- what the gateway recorded -------------------------------------------------------------

/** Waits for the request's row (a client that left is settled after it went). */
async function nextRow(gw: TestGateway, before: number): Promise<Logged[]> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const rows = await logged(gw);
    if (rows.length > before) return rows;
    if (Date.now() > deadline) throw new Error("no request-log row after 10 s");
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const price = (usage: { input_tokens: number; output_tokens: number }) =>
  usage.input_tokens * PRICE_IN + usage.output_tokens * PRICE_OUT;

// ---- the matrix ----------------------------------------------------------------------------

describe.each(backends)("the meter on %s", (backend) => {
  let gw: TestGateway;
  let gateway: EveryWireGateway;
  /** Each finished case's logged usage, for the cases that leave the same request midway. */
  const finished = new Map<string, { input_tokens: number; output_tokens: number }>();

  beforeAll(async () => {
    gateway = await gatewayOnEveryWire({
      backend,
      replies: { openai: openaiReply, anthropic: anthropicReply, gemini: geminiReply },
      mock: { chunk_interval_ms: 4 },
      prices: { input: PRICE_IN, output: PRICE_OUT },
    });
    gw = gateway.gw;
  });

  afterAll(() => gateway?.close());

  /** The usage of `c` answered whole: its own case's, or, when that has not run yet, measured now. */
  async function wholeUsage(c: Case, key: string) {
    if (!finished.has(key)) {
      const rowsBefore = (await logged(gw)).length;
      await send(gw, { ...c, hangUp: "never" });
      finished.set(key, (await nextRow(gw, rowsBefore))[0].usage);
      await idleMoney(gw);
    }
    return finished.get(key);
  }

  it.each(cases())("$name", async (c) => {
    const key = `${c.style}|${c.wire}|${c.stream}|${c.n}`;
    const whole = c.hangUp === "after-pieces" ? await wholeUsage(c, key) : undefined;
    const rowsBefore = (await logged(gw)).length;
    const before = await money(gw);
    const saw = await send(gw, c);
    const rows = await nextRow(gw, rowsBefore);
    const after = await idleMoney(gw);
    const row = rows[0];
    const context = JSON.stringify({ saw, row });

    // One row per request, its charge the price of its usage, the balance down by that, nothing held.
    expect(rows.length, context).toBe(rowsBefore + 1);
    expect(after.held, context).toBe(0);
    expect(before.balance - after.balance, context).toBe(row.cost_micro);

    if (c.wire === "anthropic" && c.n > 1) {
      // Anthropic's API has no `n`: refused before anything is sent, nothing charged.
      expect(saw.status, context).toBe(400);
      expect(row.cost_micro, context).toBe(0);
      return;
    }
    if (c.hangUp === "before-headers") {
      expect(saw.status, context).toBe("aborted");
      expect(row.cost_micro, context).toBe(0);
      expect(row.error_code, context).toBe("client_closed");
      return;
    }
    expect(row.cost_micro, context).toBe(price(row.usage));
    if (c.hangUp === "never") {
      expect(saw.status, context).toBe(200);
      expect(row.state, context).toBe("settled");
      // The provider's report, as the client read it too.
      expect(saw.usage, context).toBeDefined();
      expect(row.usage, context).toEqual({
        input_tokens: saw.usage!.input,
        output_tokens: saw.usage!.output,
      });
      if (c.wire !== "mock") {
        expect(row.usage.input_tokens, context).toBe(PROMPT_TOKENS[c.wire]);
        expect(row.usage.output_tokens, context).toBe(c.n * WORDS);
      }
      expect(saw.deltas.join("").length, context).toBeGreaterThan(0);
      finished.set(key, row.usage);
      return;
    }
    // Left after a few pieces: at least what reached the client, never more than the whole answer.
    expect(whole, `the finished ${key}`).toBeDefined();
    expect(saw.deltas.length, context).toBe(PIECES_BEFORE_HANGUP);
    expect(row.usage.output_tokens, context).toBeGreaterThanOrEqual(deliveredTokens(saw.deltas));
    expect(row.usage.output_tokens, context).toBeLessThan(whole!.output_tokens);
    expect(row.usage.input_tokens, context).toBeGreaterThan(0);
    expect(row.usage.input_tokens, context).toBeLessThanOrEqual(whole!.input_tokens);
    // Reported usage wins over an estimate: anthropic reports its input at the start, the mock knows it.
    if (c.wire !== "openai") expect(row.usage.input_tokens, context).toBe(whole!.input_tokens);
    expect(row.cost_micro, context).toBeLessThan(price(whole!));
  });
});

describe("answers asked for with n", () => {
  let gw: TestGateway;
  let openaiUp: FakeUpstream;
  const prices = { price_input_per_mtok: PRICE_IN, price_output_per_mtok: PRICE_OUT };

  beforeAll(async () => {
    openaiUp = await fakeUpstream("openai", openaiReply);
    gw = await testGateway({
      config: baseConfigWith({
        providers: () => [
          { id: "oa", wire: "openai", base_url: openaiUp.baseUrl, api_keys: ["sk-oa"] },
          { id: "mk", wire: "mock" },
        ],
        models: () => [
          { name: "m-openai", provider: "oa", upstream_model: "gpt-up", ...prices },
          { name: "m-mock", provider: "mk", ...prices },
        ],
        routes: () => [],
        accounts: (accounts) => [
          { ...accounts[0], balance_idr: 100 },
          // Enough for one answer of 100 tokens, not for fifty.
          { id: "poor", balance_idr: 1, keys: [{ id: "kp", value: POOR_KEY }] },
        ],
      }),
    });
  });
  afterAll(async () => {
    await gw?.close();
    await openaiUp?.close();
  });

  it("holds and charges every answer: n=50 x 100 tokens is 5,000 output tokens", async () => {
    openaiUp.queue({
      kind: "json",
      body: {
        id: "chatcmpl-n",
        object: "chat.completion",
        created: 1,
        model: "gpt-up",
        choices: Array.from({ length: 50 }, (_, index) => ({
          index,
          message: { role: "assistant", content: "word ".repeat(100) },
          logprobs: null,
          finish_reason: "length",
        })),
        usage: { prompt_tokens: 10, completion_tokens: 5_000, total_tokens: 5_010 },
      },
    });
    const before = await money(gw);
    const res = await post(gw, "/v1/chat/completions", {
      model: "m-openai",
      n: 50,
      max_tokens: 100,
      messages: [{ role: "user", content: "fifty answers" }],
    });
    expect(res.status).toBe(200);
    expect(openaiUp.last.body.n).toBe(50);
    const after = await idleMoney(gw);
    const [row] = await logged(gw);
    expect(row.usage).toEqual({ input_tokens: 10, output_tokens: 5_000 });
    expect(row.cost_micro).toBe(10 * PRICE_IN + 5_000 * PRICE_OUT);
    expect(before.balance - after.balance).toBe(row.cost_micro);
  });

  it("refuses with 402 a request whose n answers the account cannot hold, before anything is sent", async () => {
    const sent = openaiUp.requests.length;
    const body = {
      model: "m-openai",
      max_tokens: 100,
      messages: [{ role: "user", content: "hi" }],
    };
    const poor = { authorization: `Bearer ${POOR_KEY}` };
    expect((await post(gw, "/v1/chat/completions", body, poor)).status).toBe(200);
    const refused = await post(gw, "/v1/chat/completions", { ...body, n: 50 }, poor);
    expect(refused.status).toBe(402);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe(
      "insufficient_balance",
    );
    expect(openaiUp.requests.length).toBe(sent + 1);
  });

  it("refuses n past OpenAI's bound of 128 as a bad request", async () => {
    const res = await post(gw, "/v1/chat/completions", {
      model: "m-mock",
      n: 129,
      messages: [{ role: "user", content: "hi" }],
    });
    expect(res.status).toBe(400);
    expect(
      ((await res.json()) as { error: { code: string; message: string } }).error,
    ).toMatchObject({ code: "bad_request", message: expect.stringContaining("n") });
  });

  it("the mock answers n choices, each its own words, with the usage of all of them, JSON and stream", async () => {
    const res = await post(gw, "/v1/chat/completions", {
      model: "m-mock",
      n: 3,
      messages: [{ role: "user", content: "three ways" }],
    });
    const json = (await res.json()) as {
      choices: { index: number; message: { content: string }; finish_reason: string }[];
      usage: { completion_tokens: number };
    };
    expect(json.choices.map((c) => c.index)).toEqual([0, 1, 2]);
    expect(new Set(json.choices.map((c) => c.message.content)).size).toBe(3);
    const perChoice = json.choices.map((c) => Math.ceil(c.message.content.length / 4));
    expect(json.usage.completion_tokens).toBe(perChoice.reduce((a, b) => a + b, 0));

    const stream = await post(gw, "/v1/chat/completions", {
      model: "m-mock",
      n: 3,
      stream: true,
      messages: [{ role: "user", content: "three ways" }],
    });
    const texts = ["", "", ""];
    const finishes: number[] = [];
    type Chunk = {
      choices: { index: number; delta: { content?: string }; finish_reason: string | null }[];
    };
    for (const chunk of await streamData<Chunk>(stream)) {
      for (const choice of chunk.choices) {
        texts[choice.index] += choice.delta.content ?? "";
        if (choice.finish_reason) finishes.push(choice.index);
      }
    }
    expect(texts).toEqual(json.choices.map((c) => c.message.content));
    expect(finishes.sort()).toEqual([0, 1, 2]);
  });
});
