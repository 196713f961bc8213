import OpenAI from "openai";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { idleMoney, money } from "./support/api.js";
import {
  type FakeUpstream,
  fakeUpstream,
  type Reply,
  type SseStep,
} from "./support/fake-upstream.js";
import { backends, baseConfig, gatewayOn, KEY, post, type TestGateway } from "./support/gateway.js";
import { deliveredTokens, type Logged, logged } from "./support/metering.js";
import { streamEvents } from "./support/sse.js";

/**
 * An adversarial client against the meter: cases where what was delivered (or consumed) and what
 * was charged part ways.
 */

// micro-IDR per token
const PRICE_IN = 1_000;
const PRICE_OUT = 2_000;

/** Waits for the request's row (a client that left is settled after it went); at most 10 s. */
async function nextRow(gw: TestGateway, before: number): Promise<Logged> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const rows = await logged(gw);
    if (rows.length > before) return rows[0];
    if (Date.now() > deadline) throw new Error("no request-log row after 10 s");
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const priceOf = (
  usage: { input_tokens: number; output_tokens: number },
  input = PRICE_IN,
  output = PRICE_OUT,
) => usage.input_tokens * input + usage.output_tokens * output;

const WORDS = 20;
const word = (i: number) => ` w${"bcdefghijklmnopqrstuvwxyz"[i % 25]}${i % 10}`;

/** A gateway on `backend` with one openai-wire model, `m-openai`, in front of a fake upstream. */
function useOpenaiGateway(
  backend: (typeof backends)[number],
  ready: (started: { gw: TestGateway; up: FakeUpstream }) => void,
): void {
  let gw: TestGateway | undefined;
  let up: FakeUpstream | undefined;
  beforeAll(async () => {
    up = await fakeUpstream("openai");
    const base = baseConfig();
    gw = await gatewayOn(backend, {
      config: {
        ...base,
        providers: [{ id: "oa", wire: "openai", base_url: up.baseUrl, api_keys: ["sk-oa"] }],
        models: [
          {
            name: "m-openai",
            provider: "oa",
            upstream_model: "gpt-up",
            price_input_per_mtok: PRICE_IN,
            price_output_per_mtok: PRICE_OUT,
          },
        ],
        routes: [],
      },
    });
    ready({ gw, up });
  });
  afterAll(async () => {
    await gw?.close();
    await up?.close();
  });
  afterEach(() => up?.reset());
}

// ---- Message threads the gateway holds: the hold must cover the conversation it sends ----------

describe.each(backends)("a message thread the gateway holds, on %s", (backend) => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await gatewayOn(backend);
  });
  afterAll(() => gw?.close());

  const threadHeaders = {
    authorization: `Bearer ${KEY}`,
    "anthropic-version": "2023-06-01",
    "anthropic-beta": "message-threads-2026-08-12",
  };

  it("charges a continued turn the full price of the conversation the provider was sent", async () => {
    const long = "lorem ipsum dolor sit amet ".repeat(1_500); // ~40 KB of held conversation
    const created = await post(
      gw,
      "/v1/messages",
      {
        model: "mock-gpt",
        max_tokens: 5,
        thread: { type: "create" },
        messages: [{ role: "user", content: long }],
      },
      threadHeaders,
    );
    expect(created.status).toBe(200);
    const { id } = (await created.json()) as { id: string };
    await idleMoney(gw);

    const rowsBefore = (await logged(gw)).length;
    const before = await money(gw);
    const continued = await post(
      gw,
      "/v1/messages",
      {
        model: "mock-gpt",
        max_tokens: 5,
        thread: { type: "continue", previous_message_id: id },
        messages: [{ role: "user", content: "and then?" }],
      },
      threadHeaders,
    );
    expect(continued.status).toBe(200);
    const answer = (await continued.json()) as {
      usage: { input_tokens: number; output_tokens: number };
    };
    const row = await nextRow(gw, rowsBefore);
    const after = await idleMoney(gw);
    const context = JSON.stringify({ answer: answer.usage, row });
    // The provider read the whole held conversation: the client's usage says so, and so does the log.
    expect(answer.usage.input_tokens, context).toBeGreaterThan(long.length / 4);
    expect(row.usage.input_tokens, context).toBe(answer.usage.input_tokens);
    // mock-gpt: 10,000 micro-IDR an input token, 20,000 an output token.
    const price = priceOf(row.usage, 10_000, 20_000);
    expect(row.cost_micro, context).toBe(price);
    expect(before.balance - after.balance, context).toBe(price);
  });
});

// ---- A provider's usage that leaves a part out --------------------------------------------------

describe.each(backends)("usage a provider reports without its output, on %s", (backend) => {
  let gw: TestGateway;
  let up: FakeUpstream;
  useOpenaiGateway(backend, (ready) => {
    ({ gw, up } = ready);
  });

  const base = { id: "chatcmpl-p", created: 1, model: "gpt-up" };
  const text = Array.from({ length: WORDS }, (_, i) => word(i));

  it("bills the output of a whole answer whose usage names only its input (never less than delivered)", async () => {
    up.queue({
      kind: "json",
      body: {
        ...base,
        object: "chat.completion",
        choices: [
          {
            index: 0,
            message: { role: "assistant", content: text.join("") },
            logprobs: null,
            finish_reason: "stop",
          },
        ],
        // An OpenAI-compatible server that counts the prompt only.
        usage: { prompt_tokens: 12, total_tokens: 12 },
      },
    });
    const client = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    const rowsBefore = (await logged(gw)).length;
    const before = await money(gw);
    const answer = await client.chat.completions.create({
      model: "m-openai",
      messages: [{ role: "user", content: "count" }],
      max_tokens: 100,
    });
    const row = await nextRow(gw, rowsBefore);
    const after = await idleMoney(gw);
    const delivered = deliveredTokens([answer.choices[0].message.content ?? ""]);
    const context = JSON.stringify({ usage: answer.usage, row, delivered });
    expect(row.usage.input_tokens, context).toBe(12);
    expect(row.usage.output_tokens, context).toBeGreaterThanOrEqual(delivered);
    expect(row.cost_micro, context).toBe(priceOf(row.usage));
    expect(before.balance - after.balance, context).toBe(row.cost_micro);
  });

  it("bills the output of a finished stream whose usage chunk names only its input (never less than delivered)", async () => {
    const chunk = (delta: object, finish: string | null = null) => ({
      ...base,
      object: "chat.completion.chunk",
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
    });
    const steps: SseStep[] = [{ data: chunk({ role: "assistant", content: "" }) }];
    for (const piece of text) steps.push({ data: chunk({ content: piece }) });
    steps.push({ data: chunk({}, "stop") });
    steps.push({
      data: {
        ...base,
        object: "chat.completion.chunk",
        choices: [],
        usage: { prompt_tokens: 12, total_tokens: 12 },
      },
    });
    steps.push({ data: "[DONE]" });
    up.queue({ kind: "sse", steps } satisfies Reply);
    const client = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    const rowsBefore = (await logged(gw)).length;
    const before = await money(gw);
    const stream = await client.chat.completions.create({
      model: "m-openai",
      messages: [{ role: "user", content: "count" }],
      max_tokens: 100,
      stream: true,
    });
    const deltas: string[] = [];
    for await (const part of stream) {
      const content = part.choices[0]?.delta?.content;
      if (content) deltas.push(content);
    }
    const row = await nextRow(gw, rowsBefore);
    const after = await idleMoney(gw);
    const delivered = deliveredTokens(deltas);
    const context = JSON.stringify({ row, delivered });
    expect(deltas.join("")).toBe(text.join(""));
    expect(row.usage.input_tokens, context).toBe(12);
    expect(row.usage.output_tokens, context).toBeGreaterThanOrEqual(delivered);
    expect(row.cost_micro, context).toBe(priceOf(row.usage));
    expect(before.balance - after.balance, context).toBe(row.cost_micro);
  });
});

// ---- Input the provider fetches itself: an image by URL ------------------------------------------

describe.each(backends)("an image the provider fetches by URL, on %s", (backend) => {
  let gw: TestGateway;
  let up: FakeUpstream;
  useOpenaiGateway(backend, (ready) => {
    ({ gw, up } = ready);
  });

  it("charges the input tokens the provider reported for images it read by URL", async () => {
    // Twenty high-detail images by URL: a body of about 2 KB, tens of thousands of input tokens.
    const images = Array.from({ length: 20 }, (_, i) => ({
      type: "image_url" as const,
      image_url: { url: `https://images.example/scan-${i}.png`, detail: "high" as const },
    }));
    up.queue({
      kind: "json",
      body: {
        id: "chatcmpl-img",
        object: "chat.completion",
        created: 1,
        model: "gpt-up",
        choices: [
          {
            index: 0,
            message: { role: "assistant", content: "twenty scans" },
            logprobs: null,
            finish_reason: "stop",
          },
        ],
        usage: { prompt_tokens: 20 * 1_105, completion_tokens: 3, total_tokens: 20 * 1_105 + 3 },
      },
    });
    const client = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    const rowsBefore = (await logged(gw)).length;
    const before = await money(gw);
    const answer = await client.chat.completions.create({
      model: "m-openai",
      max_tokens: 10,
      messages: [{ role: "user", content: [{ type: "text", text: "describe" }, ...images] }],
    });
    const row = await nextRow(gw, rowsBefore);
    const after = await idleMoney(gw);
    const context = JSON.stringify({ usage: answer.usage, row });
    expect(row.usage, context).toEqual({ input_tokens: 22_100, output_tokens: 3 });
    expect(row.cost_micro, context).toBe(priceOf(row.usage));
    expect(before.balance - after.balance, context).toBe(row.cost_micro);
  });
});

// ---- Responses item references: the hold must cover the items the gateway puts in their place ----

describe.each(backends)("a Responses item_reference the gateway resolves, on %s", (backend) => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await gatewayOn(backend);
  });
  afterAll(() => gw?.close());

  it("charges the full price of the input sent when item_references expand a small body", async () => {
    const long = "lorem ipsum dolor sit amet ".repeat(1_500); // ~40 KB
    // Three pastes, stored once.
    const pastes = [1, 2, 3].map((n) => ({
      type: "message",
      role: "user",
      id: `msg_big_paste_${n}`,
      content: `${n}: ${long}`,
    }));
    const stored = await post(gw, "/v1/responses", {
      model: "mock-gpt",
      max_output_tokens: 5,
      input: pastes,
    });
    expect(stored.status).toBe(200);
    await idleMoney(gw);

    const rowsBefore = (await logged(gw)).length;
    const before = await money(gw);
    // A body of a few hundred bytes that stands for the stored items.
    const refs = pastes.map(({ id }) => ({ type: "item_reference", id }));
    const res = await post(gw, "/v1/responses", {
      model: "mock-gpt",
      max_output_tokens: 5,
      input: [...refs, { role: "user", content: "summarise that" }],
    });
    expect(res.status).toBe(200);
    const answer = (await res.json()) as {
      usage: { input_tokens: number; output_tokens: number };
    };
    const row = await nextRow(gw, rowsBefore);
    const after = await idleMoney(gw);
    const context = JSON.stringify({ answer: answer.usage, row });
    expect(answer.usage.input_tokens, context).toBeGreaterThan((3 * long.length) / 4);
    expect(row.usage.input_tokens, context).toBe(answer.usage.input_tokens);
    const price = priceOf(row.usage, 10_000, 20_000);
    expect(row.cost_micro, context).toBe(price);
    expect(before.balance - after.balance, context).toBe(price);
  });
});

// ---- One count on every wire: a delta's characters are its text's, not its JSON escapes' --------

describe.each(backends)("delivered text with JSON escapes, on %s", (backend) => {
  let gw: TestGateway;
  let up: FakeUpstream;
  useOpenaiGateway(backend, (ready) => {
    ({ gw, up } = ready);
  });

  /**
   * A stream with no usage report (an OpenAI-compatible server that ignores include_usage),
   * written as a Python server writes JSON (`ensure_ascii`): each delta four CJK characters,
   * 24 characters of escapes.
   */
  function escapedStream(): Reply {
    const head =
      '{"id":"chatcmpl-e","object":"chat.completion.chunk","created":1,"model":"gpt-up",';
    const chunk = (delta: string, finish = "null") =>
      `${head}"choices":[{"index":0,"delta":${delta},"logprobs":null,"finish_reason":${finish}}]}`;
    const steps: SseStep[] = [{ data: chunk('{"role":"assistant","content":""}') }];
    for (let i = 0; i < WORDS; i++)
      steps.push({ data: chunk('{"content":"\\u4e2d\\u6587\\u5b57\\u7b26"}') });
    steps.push({ data: chunk("{}", '"stop"') }, { data: "[DONE]" });
    return { kind: "sse", steps };
  }

  it.each(["chat", "messages"] as const)(
    "a %s client is charged the delivered text's characters, not its escapes'",
    async (style) => {
      up.queue(escapedStream());
      const rowsBefore = (await logged(gw)).length;
      const before = await money(gw);
      const res =
        style === "chat"
          ? await post(gw, "/v1/chat/completions", {
              model: "m-openai",
              max_tokens: 500,
              stream: true,
              messages: [{ role: "user", content: "say it" }],
            })
          : await post(
              gw,
              "/v1/messages",
              {
                model: "m-openai",
                max_tokens: 500,
                stream: true,
                messages: [{ role: "user", content: "say it" }],
              },
              { authorization: `Bearer ${KEY}`, "anthropic-version": "2023-06-01" },
            );
      expect(res.status).toBe(200);
      const deltas: string[] = [];
      for await (const { event, data } of streamEvents(res)) {
        if (data === "[DONE]") continue;
        if (style === "chat" && data.choices?.[0]?.delta?.content)
          deltas.push(data.choices[0].delta.content);
        if (event === "content_block_delta" && data.delta?.text) deltas.push(data.delta.text);
      }
      const row = await nextRow(gw, rowsBefore);
      const after = await idleMoney(gw);
      const context = JSON.stringify({ row, deltas: deltas.length });
      expect(deltas.join("")).toBe("\u4e2d\u6587\u5b57\u7b26".repeat(WORDS));
      // 20 deltas of 4 characters: 20 tokens by the one count every wire uses.
      expect(row.usage.output_tokens, context).toBe(deliveredTokens(deltas));
      expect(row.cost_micro, context).toBe(priceOf(row.usage));
      expect(before.balance - after.balance, context).toBe(row.cost_micro);
    },
  );
});
