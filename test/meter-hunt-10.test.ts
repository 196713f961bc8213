import OpenAI from "openai";
import { describe, expect, it, vi } from "vitest";
import { money } from "./support/api.js";
import type { FakeUpstream, SseStep } from "./support/fake-upstream.js";
import { backends, KEY, post, type TestGateway } from "./support/gateway.js";
import { useMeterWires } from "./support/meter-wires.js";
import { deliveredTokens, type Logged, ledgerAgrees, logged } from "./support/metering.js";
import { allStreamEvents, type StreamEvent } from "./support/sse.js";

/**
 * The meter's last leftovers, from the client's side: an unexpected error after a stream's first
 * piece is named on stderr as one on its first piece is; and the `reasoning` an OpenAI-compatible
 * server (OpenRouter, vLLM) sends in a chunk that also carries a finish or a usage report is
 * metered once. Each on SQLite and Postgres, the balance compared with the request log.
 */

/** micro-IDR per input and per output token of the fakes' models. */
const IN = 1_000;
const OUT = 2_000;
const WORD = "zq ";

const priceOf = (row: Logged) => row.usage.input_tokens * IN + row.usage.output_tokens * OUT;

/** One Gemini stream event of one candidate's text, with no usageMetadata. */
function geminiEvent(text: string): SseStep {
  return {
    data: {
      candidates: [{ content: { role: "model", parts: [{ text }] }, index: 0 }],
      modelVersion: "gemini-up",
      responseId: "gemini-fake",
    },
  };
}

/** One chunk of an OpenAI-compatible chat stream: one choice's delta, its finish, and a usage. */
function chunkOf(delta: object, extra: { finish?: string; usage?: object } = {}): SseStep {
  return {
    data: {
      id: "chatcmpl-r",
      object: "chat.completion.chunk",
      created: 1_700_000_000,
      model: "gpt-up",
      choices: [{ index: 0, delta, logprobs: null, finish_reason: extra.finish ?? null }],
      ...(extra.usage ? { usage: extra.usage } : {}),
    },
  };
}

describe.each(backends)("the meter's last leftovers a client sees, on %s", (backend) => {
  let gw: TestGateway;
  let openai: FakeUpstream;
  let gemini: FakeUpstream;

  useMeterWires(
    backend,
    { openaiKey: "sk-oa-secret-key", inputPerMtok: IN, outputPerMtok: OUT },
    (started) => {
      ({ gw, openai, gemini } = started);
    },
  );

  async function eventsOf(res: Response): Promise<StreamEvent[]> {
    expect(res.status, res.status === 200 ? "" : await res.clone().text()).toBe(200);
    return allStreamEvents(res);
  }

  it("an unexpected error after a stream's first piece ends it with upstream_error, billed as delivered, and is one line on stderr", async () => {
    const errors = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      const rowsBefore = (await logged(gw)).length;
      const was = await money(gw);
      // `candidates` must be a list; an object makes the translation of the second event throw.
      const odd = {
        data: {
          candidates: { 0: { content: { parts: [{ text: "provider-words" }] } } },
          modelVersion: "gemini-up",
        },
      };
      const ends: unknown[] = [];
      for (const [path, body] of [
        ["/v1/chat/completions", { messages: [{ role: "user", content: "hello" }] }],
        ["/v1/responses", { input: "hello" }],
      ] as const) {
        gemini.queue({ kind: "sse", steps: [geminiEvent(WORD), geminiEvent(WORD), odd] });
        const events = await eventsOf(
          await post(gw, path, { model: "m-gemini", stream: true, ...body }),
        );
        const text = JSON.stringify(events);
        expect(text).toContain(WORD);
        expect(text).not.toMatch(/TypeError|is not a function|provider-words/);
        const last = events.at(-1);
        ends.push(
          path === "/v1/responses"
            ? [last?.event, last?.data.response?.error?.code]
            : last?.data.error?.code,
        );
      }
      // The client's error event as before: the style's own (a Responses client's code is one of
      // the Responses API's).
      expect(ends).toEqual(["upstream_error", ["response.failed", "server_error"]]);

      // Billed as delivered: the two words that reached each client, at the model's prices. A
      // stream that ends in an error event is not held back for its settlement, as a finished
      // one is: read the money once it is durable.
      await gw.services.ledger.committed();
      const { rows } = await ledgerAgrees(gw, rowsBefore, was);
      expect(rows.map((row) => [row.error_code, row.usage.output_tokens])).toEqual([
        ["upstream_error", deliveredTokens([WORD, WORD])],
        ["upstream_error", deliveredTokens([WORD, WORD])],
      ]);
      for (const row of rows) {
        expect(row.usage.input_tokens).toBeGreaterThan(0);
        expect(row.cost_micro).toBe(priceOf(row));
      }

      // One line each on stderr naming the error and the attempt, never a stack nor the
      // provider's words.
      const lines = errors.mock.calls.map((call) => call.join(" "));
      const named = lines.filter((line) => line.includes("TypeError"));
      expect(named, lines.join("\n")).toHaveLength(2);
      for (const line of named) {
        expect(line).toMatch(/provider gm \(model m-gemini\)/);
        expect(line).not.toMatch(/\n|provider-words|gm-key/);
      }
    } finally {
      errors.mockRestore();
    }
  });

  it("an OpenAI-compatible server's `reasoning` beside a finish or a usage report is metered once (official SDK)", async () => {
    // Long enough that a count of its characters twice would bill more tokens than once.
    const thought = (word: string) => `${word} `.repeat(12);
    const [first, second] = [thought("hmm"), thought("so")];
    const answer = "it is forty-two";
    const role = chunkOf({ role: "assistant", content: "" });
    const cases: { name: string; steps: SseStep[]; shown: string[] }[] = [
      {
        name: "reasoning in the chunk that finishes",
        steps: [
          role,
          chunkOf({ reasoning: first }),
          chunkOf({ content: answer }),
          chunkOf({ reasoning: second }, { finish: "stop" }),
        ],
        shown: [first, answer, second],
      },
      {
        // vLLM's continuous usage stats: the report of the answer so far rides on each chunk.
        name: "reasoning beside the usage of the answer so far",
        steps: [
          role,
          chunkOf(
            { reasoning: first },
            { usage: { prompt_tokens: 5, completion_tokens: 1, total_tokens: 6 } },
          ),
          chunkOf({ content: answer }),
          chunkOf({}, { finish: "stop" }),
        ],
        shown: [first, answer],
      },
      {
        name: "reasoning beside the finish and a usage that names the input only",
        steps: [
          role,
          chunkOf({ content: answer }),
          chunkOf({ reasoning: second }, { finish: "stop", usage: { prompt_tokens: 5 } }),
        ],
        shown: [answer, second],
      },
    ];
    const client = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    for (const { name, steps, shown } of cases) {
      for (const includeUsage of [false, true]) {
        const rowsBefore = (await logged(gw)).length;
        const was = await money(gw);
        openai.queue({ kind: "sse", steps: [...steps, { data: "[DONE]" }] });
        const stream = await client.chat.completions.create({
          model: "m-openai",
          stream: true,
          ...(includeUsage ? { stream_options: { include_usage: true } } : {}),
          messages: [{ role: "user", content: "think, then answer" }],
        });
        const seen: string[] = [];
        for await (const chunk of stream) {
          for (const choice of chunk.choices) {
            const delta = choice.delta as { content?: string | null; reasoning?: string };
            for (const text of [delta.reasoning, delta.content]) if (text) seen.push(text);
          }
        }
        expect(seen, name).toEqual(shown);

        const { rows } = await ledgerAgrees(gw, rowsBefore, was);
        expect(rows, name).toHaveLength(1);
        const [row] = rows;
        expect(row.error_code, name).toBeNull();
        expect(row.usage.output_tokens, `${name}, include_usage ${includeUsage}`).toBe(
          deliveredTokens(shown),
        );
        expect(row.cost_micro, name).toBe(priceOf(row));
      }
    }
  });
});
