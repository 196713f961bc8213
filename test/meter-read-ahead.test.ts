import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { idleMoney, money } from "./support/api.js";
import { fakeGemini } from "./support/fake-gemini.js";
import {
  deferred,
  type FakeUpstream,
  fakeUpstream,
  openaiStreamSteps,
  type SseStep,
  sleep,
} from "./support/fake-upstream.js";
import { baseConfigWith, gatewayOn, KEY, post, type TestGateway } from "./support/gateway.js";
import { deliveredTokens, loggedAs } from "./support/metering.js";
import { streamEvents } from "./support/sse.js";

/**
 * A stream its client leaves is billed the output written to it, not what the gateway read ahead
 * of it. The gateway asks the provider for the next piece before it writes the one it holds, and a
 * piece whose delivery mark is on its way to Postgres waits for it: a client that leaves then was
 * never sent that piece, nor the one read behind it. A report the provider made of the answer so
 * far is its bill for it, read ahead or not (docs/metering.md).
 */

/** micro-IDR per input and per output token. */
const IN = 1_000;
const OUT = 2_000;
/** The first delivery mark covers 16 tokens: the piece with the 17th delta waits for the second. */
const BEFORE_SECOND_MARK = 16;
const WORD = "zq ";
const headers = { authorization: `Bearer ${KEY}`, "anthropic-version": "2023-06-01" };

type Style = "chat" | "messages" | "responses";

function request(style: Style, model: string): { path: string; body: object } {
  const prompt = "count slowly";
  if (style === "chat")
    return {
      path: "/v1/chat/completions",
      body: { model, stream: true, messages: [{ role: "user", content: prompt }] },
    };
  if (style === "messages")
    return {
      path: "/v1/messages",
      body: { model, stream: true, max_tokens: 500, messages: [{ role: "user", content: prompt }] },
    };
  return { path: "/v1/responses", body: { model, stream: true, input: prompt } };
}

/** The text a client of `style` reads in one event, if the event carries answer text. */
function textOf(style: Style, event: string | undefined, data: unknown): string | undefined {
  if (data === "[DONE]") return undefined;
  // biome-ignore lint/suspicious/noExplicitAny: events of three styles, read loosely as a client reads them
  const d = data as Record<string, any>;
  if (style === "chat") return d.choices?.[0]?.delta?.content || undefined;
  if (style === "messages") return event === "content_block_delta" ? d.delta?.text : undefined;
  return event === "response.output_text.delta" ? d.delta : undefined;
}

/**
 * Holds the next delivery mark sent to Postgres until `release`: `held` resolves once the gateway
 * has sent it.
 */
function holdNextMark(): { held: Promise<void>; release(): void; undo(): void } {
  const held = deferred();
  const gate = deferred();
  let marks = 0;
  const query = pg.Pool.prototype.query;
  pg.Pool.prototype.query = function (this: pg.Pool, ...args: unknown[]) {
    const statement = args[0] as { name?: string } | string;
    const run = () => (query as (...values: unknown[]) => unknown).apply(this, args);
    if (
      typeof statement === "object" &&
      statement.name === "gateway_mark_delivery" &&
      ++marks === 1
    ) {
      held.resolve();
      return gate.promise.then(run);
    }
    return run();
  } as typeof query;
  return {
    held: held.promise,
    release: () => gate.resolve(),
    undo: () => {
      pg.Pool.prototype.query = query;
    },
  };
}

/** Waits (at most 5 s) until `upstream` saw the gateway drop a request: the client's leaving reached it. */
async function upstreamDropped(upstream: FakeUpstream, before: number): Promise<void> {
  for (let i = 0; i < 250 && upstream.aborted === before; i++) await sleep(20);
  expect(upstream.aborted, "the gateway dropped the provider's answer").toBeGreaterThan(before);
}

describe("a stream its client leaves while a piece waits for its delivery mark (postgres)", () => {
  let gw: TestGateway;
  let openai: FakeUpstream;
  let gemini: FakeUpstream;

  beforeAll(async () => {
    openai = await fakeUpstream("openai");
    gemini = await fakeGemini({ apiKeys: ["gm-key"] });
    const prices = { price_input_per_mtok: IN, price_output_per_mtok: OUT };
    gw = await gatewayOn("postgres", {
      config: baseConfigWith({
        providers: [
          { id: "oa", wire: "openai", base_url: openai.baseUrl, api_keys: ["sk-oa"] },
          { id: "gm", wire: "gemini", base_url: gemini.url, api_keys: ["gm-key"] },
        ],
        models: [
          { name: "m-openai", provider: "oa", upstream_model: "gpt-up", ...prices },
          { name: "m-gemini", provider: "gm", upstream_model: "gemini-up", ...prices },
        ],
      }),
    });
  });
  afterAll(async () => {
    await gw?.close();
    await openai?.close();
    await gemini?.close();
  });

  /**
   * Sends the request, reads `BEFORE_SECOND_MARK` deltas, lets the provider send `ahead` (the
   * piece whose mark is then held), and leaves while that mark is on its way. Returns what the
   * client read and the request's log row.
   */
  async function leaveAtSecondMark(
    style: Style,
    model: string,
    upstream: FakeUpstream,
    ahead: { resolve(): void },
  ) {
    let hold: ReturnType<typeof holdNextMark> | undefined;
    const abort = new AbortController();
    const read: string[] = [];
    const dropped = upstream.aborted;
    try {
      const { path, body } = request(style, model);
      const res = await post(gw, path, body, headers, abort.signal);
      expect(res.status).toBe(200);
      const id = res.headers.get("x-request-id");
      const events = streamEvents(res);
      while (read.length < BEFORE_SECOND_MARK) {
        const next = await events.next();
        if (next.done) break;
        const text = textOf(style, next.value.event, next.value.data);
        if (text) read.push(text);
      }
      expect(read).toHaveLength(BEFORE_SECOND_MARK);
      // The next delta comes; its piece waits for the second mark, and the client leaves.
      hold = holdNextMark();
      ahead.resolve();
      await hold.held;
      abort.abort();
      await events.return(undefined).catch(() => {});
      await upstreamDropped(upstream, dropped);
      hold.release();
      const row = await loggedAs(gw.services.store, "acct", id!, "client_closed");
      return { read, row };
    } finally {
      hold?.release();
      hold?.undo();
    }
  }

  it.each(["chat", "messages", "responses"] as const)(
    "a %s client that leaves is billed the deltas written to it, not the piece read ahead of it",
    async (style) => {
      const before = await money(gw);
      const next = deferred();
      const never = deferred();
      const steps = openaiStreamSteps(
        Array.from({ length: 40 }, () => WORD),
        { usage: [11, 40] },
      );
      // Step 0 is the role chunk: the 17th delta waits for the test, the 18th for the end.
      steps[BEFORE_SECOND_MARK + 1] = { ...steps[BEFORE_SECOND_MARK + 1], gate: next.promise };
      steps[BEFORE_SECOND_MARK + 2] = { ...steps[BEFORE_SECOND_MARK + 2], gate: never.promise };
      openai.queue({ kind: "sse", steps });
      try {
        const { read, row } = await leaveAtSecondMark(style, "m-openai", openai, next);
        const context = JSON.stringify(row);
        expect(row, context).toMatchObject({ state: "settled", error_code: "client_closed" });
        // Nothing reported (the provider's usage comes last): the output is what reached the client.
        expect(row!.output_tokens, context).toBe(deliveredTokens(read));
        expect(row!.cost_micro, context).toBe(row!.input_tokens * IN + row!.output_tokens * OUT);
        const after = await idleMoney(gw);
        expect(after).toEqual({ balance: before.balance - row!.cost_micro, held: 0 });
      } finally {
        never.resolve();
      }
    },
  );

  it("a provider's running report read ahead is still its bill for the answer so far", async () => {
    const next = deferred();
    const never = deferred();
    // Gemini reports the output so far with every event: the one read ahead says 17. (An input
    // reported above the gateway's estimate would move the mark early; one token is below it.)
    const steps: SseStep[] = Array.from({ length: 40 }, (_, i) => ({
      data: {
        candidates: [
          {
            content: { role: "model", parts: [{ text: WORD }] },
            index: 0,
            ...(i === 39 ? { finishReason: "STOP" } : {}),
          },
        ],
        usageMetadata: { promptTokenCount: 1, candidatesTokenCount: i + 1, totalTokenCount: i + 2 },
        modelVersion: "gemini-up",
        responseId: "gemini-fake",
      },
      ...(i === BEFORE_SECOND_MARK ? { gate: next.promise } : {}),
      ...(i === BEFORE_SECOND_MARK + 1 ? { gate: never.promise } : {}),
    }));
    gemini.queue({ kind: "sse", steps });
    try {
      const { read, row } = await leaveAtSecondMark("chat", "m-gemini", gemini, next);
      expect(read).toHaveLength(BEFORE_SECOND_MARK);
      expect(row).toMatchObject({
        error_code: "client_closed",
        input_tokens: 1,
        output_tokens: BEFORE_SECOND_MARK + 1,
      });
    } finally {
      never.resolve();
    }
  });
});
