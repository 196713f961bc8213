import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { errorOf, idleMoney, money } from "./support/api.js";
import {
  anthropicStreamSteps,
  deferred,
  type FakeUpstream,
  fakeUpstream,
} from "./support/fake-upstream.js";
import { backends, baseConfigWith, gatewayOn, post, type TestGateway } from "./support/gateway.js";
import { deliveredTokens, type Logged, logged } from "./support/metering.js";
import { streamEvents } from "./support/sse.js";

/**
 * POST /v1/completions answered through chat, metered as chat: `n: 2` with
 * `stream_options.include_usage` on the mock (whose answers' chunks alternate), a client that
 * leaves between the two answers' chunks, and the same on a translated anthropic wire (whose API
 * has no `n`: `n: 2` is a 400, charged nothing; one answer is billed as delivered). Each time one
 * request-log row, the request's, its charge the price of its usage, that usage what was written
 * (docs/metering.md), the balance moved by it once, nothing held. On SQLite and Postgres.
 */

const PRICE_IN = 1_000;
const PRICE_OUT = 2_000;
const price = (usage: Logged["usage"]) =>
  usage.input_tokens * PRICE_IN + usage.output_tokens * PRICE_OUT;

interface TextChunk {
  object: string;
  choices: { text: string; index: number; finish_reason: string | null }[];
  usage?: { prompt_tokens: number; completion_tokens: number } | null;
}

interface Read {
  requestId: string | null;
  /** Each answer's texts, in order. */
  texts: [string[], string[]];
  /** Every text read, in order. */
  read: string[];
  chunks: TextChunk[];
  done: boolean;
}

/**
 * Sends a streamed completion and reads it until `leaves` says so (then hangs up) or it ends;
 * at most 5 s.
 */
async function complete(
  gw: TestGateway,
  body: object,
  leaves?: (read: Read) => boolean,
): Promise<Read> {
  const abort = new AbortController();
  const res = await post(gw, "/v1/completions", { stream: true, ...body }, undefined, abort.signal);
  if (res.status !== 200) throw new Error(`${res.status}: ${await res.text()}`);
  const out: Read = {
    requestId: res.headers.get("x-request-id"),
    texts: [[], []],
    read: [],
    chunks: [],
    done: false,
  };
  const bound = setTimeout(() => abort.abort(), 5_000);
  try {
    for await (const { data } of streamEvents<TextChunk>(res)) {
      if (data === "[DONE]") {
        out.done = true;
        continue;
      }
      out.chunks.push(data);
      for (const choice of data.choices)
        if (choice.text !== "") {
          out.texts[choice.index].push(choice.text);
          out.read.push(choice.text);
        }
      if (leaves?.(out)) break;
    }
  } catch (err) {
    if (!abort.signal.aborted) throw err;
  } finally {
    clearTimeout(bound);
    abort.abort();
  }
  return out;
}

describe.each(backends)(
  "POST /v1/completions with n and include_usage, metered on %s",
  (backend) => {
    let gw: TestGateway;
    let anthropic: FakeUpstream;
    beforeAll(async () => {
      anthropic = await fakeUpstream("anthropic");
      const prices = { price_input_per_mtok: PRICE_IN, price_output_per_mtok: PRICE_OUT };
      gw = await gatewayOn(backend, {
        config: baseConfigWith({
          providers: [
            { id: "paced", wire: "mock", mock: { chunk_interval_ms: 150 } },
            { id: "an", wire: "anthropic", base_url: anthropic.baseUrl, api_keys: ["sk-an"] },
          ],
          models: [
            { name: "m-paced", provider: "paced", ...prices },
            { name: "m-anthropic", provider: "an", upstream_model: "claude-up", ...prices },
          ],
        }),
      });
    });
    afterAll(async () => {
      await gw?.close();
      await anthropic?.close();
    });
    beforeEach(() => anthropic.reset());

    /** The request's one row, settled as `code`; the balance down by its charge once; nothing held. */
    async function billedOnce(out: Read, was: { balance: number }, code: string | null) {
      const deadline = Date.now() + 10_000;
      let rows: Logged[] = [];
      for (;;) {
        rows = (await logged(gw)).filter((row) => row.id === out.requestId);
        if ((rows.length > 0 && rows[0].error_code === code) || Date.now() > deadline) break;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      const context = JSON.stringify({ out, rows });
      expect(rows, context).toHaveLength(1);
      const [row] = rows;
      expect(row.error_code, context).toBe(code);
      expect(row.cost_micro, context).toBe(price(row.usage));
      const after = await idleMoney(gw);
      expect(after.held, context).toBe(0);
      expect(was.balance - after.balance, context).toBe(row.cost_micro);
      return row;
    }

    const ask = {
      model: "m-paced",
      prompt: "Say something.",
      max_tokens: 8,
      n: 2,
      stream_options: { include_usage: true },
    };

    it("mock, n: 2: the whole stream's usage chunk is what the one row is billed, both answers' text counted", async () => {
      const was = await money(gw);
      const out = await complete(gw, ask);
      expect(out.done).toBe(true);
      expect(out.texts[0].length).toBeGreaterThan(1);
      expect(out.texts[1].length).toBeGreaterThan(1);
      const usage = out.chunks.at(-1)?.usage;
      expect(out.chunks.at(-1)?.choices).toEqual([]);
      const row = await billedOnce(out, was, null);
      expect(row.usage).toEqual({
        input_tokens: usage?.prompt_tokens,
        output_tokens: usage?.completion_tokens,
      });
      expect(row.usage.output_tokens).toBeGreaterThanOrEqual(deliveredTokens(out.read));
    });

    for (const [when, leavesAt] of [
      ["after the first answer's first text, before the second answer's", 1],
      ["after both answers' first texts, before the first answer's second", 2],
      ["after the first answer's second text, before the second answer's", 3],
    ] as const)
      it(`mock, n: 2: a client that leaves ${when} is billed what was written, once`, async () => {
        const was = await money(gw);
        const out = await complete(gw, ask, ({ read }) => read.length === leavesAt);
        expect(out.read).toHaveLength(leavesAt);
        expect(out.texts[0].length - out.texts[1].length).toBe(leavesAt % 2);
        const row = await billedOnce(out, was, "client_closed");
        // The mock knows its input; its output is what left for the client: what it read, and at
        // most the next answer's piece, already on its way when the client left.
        expect(row.usage.input_tokens).toBeGreaterThan(0);
        expect(row.usage.output_tokens).toBeGreaterThanOrEqual(deliveredTokens(out.read));
        const next = out.texts[leavesAt % 2 === 1 ? 0 : 1].at(-1) ?? "";
        expect(row.usage.output_tokens).toBeLessThanOrEqual(deliveredTokens([...out.read, next]));
      });

    it("anthropic wire, n: 2: refused 400 naming n, the provider never asked, charged nothing", async () => {
      const was = await money(gw);
      const res = await post(gw, "/v1/completions", { ...ask, model: "m-anthropic", stream: true });
      const refused = await errorOf(res);
      expect(refused).toMatchObject({ status: 400, code: "bad_request" });
      expect(refused.message).toContain("n");
      expect(anthropic.requests).toEqual([]);
      const after = await idleMoney(gw);
      expect(after).toEqual({ balance: was.balance, held: 0 });
    });

    it("anthropic wire, include_usage: the usage chunk is what the one row is billed", async () => {
      anthropic.queue({
        kind: "sse",
        steps: anthropicStreamSteps(["Once upon a time, ", "there was a gateway."], {
          usage: [13, 9],
        }),
      });
      const was = await money(gw);
      const out = await complete(gw, { ...ask, model: "m-anthropic", n: 1 });
      expect(out.done).toBe(true);
      expect(out.texts[0]).toEqual(["Once upon a time, ", "there was a gateway."]);
      const row = await billedOnce(out, was, null);
      expect(row.usage).toEqual({ input_tokens: 13, output_tokens: 9 });
      expect(out.chunks.at(-1)?.usage).toMatchObject({ prompt_tokens: 13, completion_tokens: 9 });
    });

    it("anthropic wire, include_usage: a client that leaves between two chunks is billed Anthropic's input and the text written, once", async () => {
      const gone = deferred();
      const steps = anthropicStreamSteps(["Once upon a time, ", "there was a gateway."], {
        usage: [13, 9],
      });
      // The second text waits until the client has gone.
      const second = steps.findIndex((step) => JSON.stringify(step.data).includes("there was"));
      steps[second] = { ...steps[second], gate: gone.promise };
      anthropic.queue({ kind: "sse", steps });
      const was = await money(gw);
      const out = await complete(
        gw,
        { ...ask, model: "m-anthropic", n: 1 },
        ({ read }) => read.length === 1,
      );
      try {
        expect(out.read).toEqual(["Once upon a time, "]);
        const row = await billedOnce(out, was, "client_closed");
        expect(row.usage).toEqual({ input_tokens: 13, output_tokens: deliveredTokens(out.read) });
      } finally {
        gone.resolve();
      }
    });
  },
);
