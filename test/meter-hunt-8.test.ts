import OpenAI from "openai";
import { describe, expect, it, vi } from "vitest";
import { money } from "./support/api.js";
import { deferred, everyChoice, type FakeUpstream, type SseStep } from "./support/fake-upstream.js";
import { backends, KEY, post, rawRequest, type TestGateway } from "./support/gateway.js";
import { useMeterWires } from "./support/meter-wires.js";
import {
  deliveredTokens,
  type Logged,
  ledgerAgrees,
  logged,
  loggedAs,
} from "./support/metering.js";
import { allStreamEvents, type StreamEvent } from "./support/sse.js";

/**
 * The meter's leftovers, from the client's side: a provider that repeats one answer's finish
 * while another of `n` never finishes; a Gemini stream that reports no usage to a chat client that
 * asked for it; an unexpected error while the first piece of a stream is read. Each on SQLite and
 * Postgres, the balance compared with the request log.
 */

/** micro-IDR per input and per output token of the fakes' models. */
const IN = 1_000;
const OUT = 2_000;
const WORD = "zq ";

const priceOf = (row: Logged) => row.usage.input_tokens * IN + row.usage.output_tokens * OUT;

/** One chunk of a chat stream of two answers, each choice as given. */
function chunkOf(choices: object[], usage?: object): SseStep {
  return {
    data: {
      id: "chatcmpl-n",
      object: "chat.completion.chunk",
      created: 1_700_000_000,
      model: "gpt-up",
      choices: choices.map((choice) => ({ logprobs: null, finish_reason: null, ...choice })),
      ...(usage ? { usage } : {}),
    },
  };
}

/** One Gemini stream event of the given candidates, with no usageMetadata unless given. */
function geminiEvent(candidates: object[], usageMetadata?: object): SseStep {
  return {
    data: {
      candidates,
      ...(usageMetadata ? { usageMetadata } : {}),
      modelVersion: "gemini-up",
      responseId: "gemini-fake",
    },
  };
}

const said = (text: string, index = 0, finishReason?: string) => ({
  content: { role: "model", parts: [{ text }] },
  index,
  ...(finishReason ? { finishReason } : {}),
});

describe.each(backends)("the meter's leftovers a client sees, on %s", (backend) => {
  let gw: TestGateway;
  let openai: FakeUpstream;
  let gemini: FakeUpstream;

  useMeterWires(
    backend,
    { openaiKey: "sk-oa", inputPerMtok: IN, outputPerMtok: OUT },
    (started) => {
      ({ gw, openai, gemini } = started);
    },
  );

  async function eventsOf(res: Response): Promise<StreamEvent[]> {
    expect(res.status, res.status === 200 ? "" : await res.clone().text()).toBe(200);
    return allStreamEvents(res);
  }

  it("a provider that finishes one of two answers twice and never the other is cut short: error event, billed as delivered", async () => {
    const rowsBefore = (await logged(gw)).length;
    const was = await money(gw);
    const body = {
      n: 2,
      stream: true,
      max_tokens: 100,
      messages: [{ role: "user", content: "two ways" }],
    };
    // OpenAI: answer 0 finishes in an ordinary chunk, then again in the chunk that reports the
    // usage; answer 1 never does. Then [DONE].
    openai.queue({
      kind: "sse",
      steps: [
        everyChoice(2, { role: "assistant", content: "" }),
        ...Array.from({ length: 3 }, () => everyChoice(2, { content: WORD })),
        chunkOf([{ index: 0, delta: {}, finish_reason: "stop" }]),
        chunkOf([{ index: 1, delta: { content: WORD } }]),
        chunkOf([{ index: 0, delta: {}, finish_reason: "stop" }], {
          prompt_tokens: 5,
          completion_tokens: 2,
          total_tokens: 7,
        }),
        { data: "[DONE]" },
      ],
    });
    // Gemini: candidate 0 says its finish on two events, candidate 1 writes on and never finishes.
    gemini.queue({
      kind: "sse",
      steps: [
        geminiEvent([said(WORD, 0), said(WORD, 1)]),
        geminiEvent([said(WORD, 0, "STOP"), said(WORD, 1)]),
        geminiEvent([said("", 0, "STOP"), said(WORD, 1)], {
          promptTokenCount: 5,
          candidatesTokenCount: 2,
          totalTokenCount: 7,
        }),
      ],
    });
    const delivered: string[][] = [];
    for (const model of ["m-openai", "m-gemini"]) {
      const events = await eventsOf(await post(gw, "/v1/chat/completions", { model, ...body }));
      const deltas: string[] = [];
      for (const { data } of events.slice(0, -1))
        for (const choice of data.choices ?? []) deltas.push(choice.delta?.content ?? "");
      delivered.push(deltas);
      expect(
        events.some(({ data }) => data === "[DONE]"),
        model,
      ).toBe(false);
      expect(events.at(-1)?.data.error?.code, model).toBe("upstream_error");
    }

    // A stream that ends in an error event is not held back for its settlement, as a finished one
    // is: read the money once it is durable.
    await gw.services.ledger.committed();
    const { rows } = await ledgerAgrees(gw, rowsBefore, was);
    expect(rows.reverse().map((row) => [row.error_code, row.usage])).toEqual([
      ["upstream_error", { input_tokens: 5, output_tokens: deliveredTokens(delivered[0]) }],
      ["upstream_error", { input_tokens: 5, output_tokens: deliveredTokens(delivered[1]) }],
    ]);
    for (const row of rows) expect(row.cost_micro).toBe(priceOf(row));
  });

  it("two answers that each finish, one of them twice, end with [DONE] and the provider's usage", async () => {
    const rowsBefore = (await logged(gw)).length;
    const was = await money(gw);
    openai.queue({
      kind: "sse",
      steps: [
        everyChoice(2, { role: "assistant", content: "" }),
        everyChoice(2, { content: WORD }),
        chunkOf([{ index: 1, delta: {}, finish_reason: "stop" }]),
        chunkOf([{ index: 0, delta: {}, finish_reason: "stop" }]),
        chunkOf([{ index: 1, delta: {}, finish_reason: "stop" }]),
        chunkOf([], { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 }),
        { data: "[DONE]" },
      ],
    });
    const events = await eventsOf(
      await post(gw, "/v1/chat/completions", {
        model: "m-openai",
        n: 2,
        stream: true,
        messages: [{ role: "user", content: "two ways" }],
      }),
    );
    expect(events.at(-1)?.data).toBe("[DONE]");
    const { rows } = await ledgerAgrees(gw, rowsBefore, was);
    expect(rows.map((row) => [row.error_code, row.usage])).toEqual([
      [null, { input_tokens: 5, output_tokens: 2 }],
    ]);
  });

  it("a Gemini stream that reports no usage shows a chat client that asked for it the usage it is billed (official SDK)", async () => {
    for (const n of [1, 2]) {
      const candidates = (text: string, finish?: string) =>
        Array.from({ length: n }, (_, index) => said(text, index, finish));
      gemini.queue({
        kind: "sse",
        steps: [
          geminiEvent(candidates(WORD)),
          geminiEvent(candidates(WORD)),
          geminiEvent(candidates(WORD, "STOP")),
        ],
      });
      const rowsBefore = (await logged(gw)).length;
      const was = await money(gw);
      const client = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
      const stream = await client.chat.completions.create({
        model: "m-gemini",
        n,
        stream: true,
        stream_options: { include_usage: true },
        messages: [{ role: "user", content: "count to three" }],
      });
      const usages: OpenAI.CompletionUsage[] = [];
      let text = "";
      for await (const chunk of stream) {
        if (chunk.usage) usages.push(chunk.usage);
        for (const choice of chunk.choices) text += choice.delta?.content ?? "";
      }
      expect(text).toBe(WORD.repeat(3 * n));

      const { rows } = await ledgerAgrees(gw, rowsBefore, was);
      expect(rows).toHaveLength(1);
      const [row] = rows;
      expect(row.error_code).toBeNull();
      // Billed by the estimate, never free; the one usage chunk says so, and the estimate is not
      // taken as the provider's report (the output is what was delivered, not more).
      expect(row.usage.input_tokens).toBeGreaterThan(0);
      expect(row.usage.output_tokens).toBe(deliveredTokens(Array(3 * n).fill(WORD)));
      expect(usages).toEqual([
        expect.objectContaining({
          prompt_tokens: row.usage.input_tokens,
          completion_tokens: row.usage.output_tokens,
          total_tokens: row.usage.input_tokens + row.usage.output_tokens,
        }),
      ]);
      expect(row.cost_micro).toBe(priceOf(row));
    }
  });

  it("an unexpected error while a stream's first piece is read answers 503 upstream_error, settled and logged once", async () => {
    const errors = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      const rowsBefore = (await logged(gw)).length;
      const was = await money(gw);
      // `candidates` must be a list; an object makes the translation of the first event throw.
      const odd = { data: { candidates: { 0: said(WORD) }, modelVersion: "gemini-up" } };
      gemini.queue({ kind: "sse", steps: [odd] });
      const res = await post(gw, "/v1/chat/completions", {
        model: "m-gemini",
        stream: true,
        messages: [{ role: "user", content: "hello" }],
      });
      const answer = await res.text();
      expect(res.status, answer).toBe(503);
      expect(JSON.parse(answer).error).toMatchObject({ code: "upstream_error" });
      expect(answer).not.toMatch(/TypeError|is not a function|at .*\.ts/);

      // Past the keepalive interval the 200 went out already: the style's error event instead.
      gemini.queue({ kind: "sse", steps: [{ ...odd, delayMs: 1_500 }] });
      const kept = await eventsOf(
        await post(gw, "/v1/chat/completions", {
          model: "m-gemini",
          stream: true,
          messages: [{ role: "user", content: "hello again" }],
        }),
      );
      expect(kept.map(({ data }) => data.error?.code)).toEqual(["upstream_error"]);

      const { rows } = await ledgerAgrees(gw, rowsBefore, was);
      expect(rows.map((row) => [row.state, row.error_code, row.cost_micro])).toEqual([
        ["failed", "upstream_error", 0],
        ["failed", "upstream_error", 0],
      ]);
      // One line each on stderr naming what went wrong, never a stack.
      const lines = errors.mock.calls.map((call) => call.join(" "));
      const named = lines.filter((line) => line.includes("TypeError"));
      expect(named, lines.join("\n")).toHaveLength(2);
      for (const line of named) expect(line).not.toMatch(/\n\s+at /);
    } finally {
      errors.mockRestore();
    }
  });
  it("a Gemini event's usage is billed when the client leaves while the event's text waits to be written", async () => {
    // Larger than every buffer between the gateway and a client that stopped reading: the piece
    // cannot leave the gateway before the client reads on, which it never does. Its event also
    // finishes the answer, and reports the usage of the answer so far.
    const large = "x".repeat(6_000_000);
    const three = deferred();
    const usage = (output: number) => ({
      promptTokenCount: 7,
      candidatesTokenCount: output,
      totalTokenCount: 7 + output,
    });
    gemini.queue({
      kind: "sse",
      steps: [
        geminiEvent([said(WORD)], usage(1)),
        geminiEvent([said(WORD)], usage(2)),
        geminiEvent([said(WORD)], usage(3)),
        { ...geminiEvent([said(large, 0, "STOP")], usage(40)), gate: three.promise },
      ],
    });
    const rowsBefore = (await logged(gw)).length;
    const was = await money(gw);
    const socket = rawRequest(gw.url, "/v1/chat/completions", {
      model: "m-gemini",
      stream: true,
      max_tokens: 4_000,
      messages: [{ role: "user", content: "a long one" }],
    });
    let head = "";
    const id = await new Promise<string>((resolve, reject) => {
      socket.on("error", reject);
      socket.on("data", (data: Buffer) => {
        head += data.toString("latin1", 0, Math.min(data.length, 4096));
        if (head.split(WORD).length - 1 >= 3) three.resolve();
        // The large piece has begun to arrive: the gateway read its event and wrote its text.
        if (head.includes("xxxxxxxx")) {
          socket.pause();
          resolve(/x-request-id: (\S+)/i.exec(head)?.[1] ?? "");
        }
      });
    });
    expect(head.startsWith("HTTP/1.1 200")).toBe(true);
    socket.destroy();
    const row = await loggedAs(gw.services.store, "acct", id, "client_closed");
    expect(row?.error_code).toBe("client_closed");
    // The report read with the large piece's event is the provider's bill for the answer so far.
    expect([row?.input_tokens, row?.output_tokens]).toEqual([7, 40]);
    const { rows } = await ledgerAgrees(gw, rowsBefore, was);
    expect(rows).toHaveLength(1);
    expect(rows[0].cost_micro).toBe(priceOf(rows[0]));
  });
});
