import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeUpstream, fakeUpstream, type SseStep } from "./support/fake-upstream.js";
import { baseConfigWith, post, type TestGateway, testGateway } from "./support/gateway.js";
import { deliveredTokens, logged } from "./support/metering.js";
import { allStreamEvents } from "./support/sse.js";

/**
 * `n` answers in one stream: an OpenAI-compatible server sends each chunk with a delta for every
 * choice. Where it reports no usage, the stream is billed what reached the client, and each
 * choice's delta is at least a token, as it is in a chunk of one choice: two choices' deltas in
 * one chunk are two deltas, not one.
 */

const WORD = "zq ";
const CHUNKS = 12;

let upstream: FakeUpstream;
let gw: TestGateway;

/** A chunk with `delta` (or a finish) for each of `n` choices; `extra` adds a field the fast path does not read. */
function chunk(n: number, delta: object, finish: string | null, extra: object = {}): object {
  return {
    id: "chatcmpl-n",
    object: "chat.completion.chunk",
    created: 1_700_000_000,
    model: "upstream-model",
    choices: Array.from({ length: n }, (_, index) => ({
      index,
      delta,
      logprobs: null,
      finish_reason: finish,
    })),
    ...extra,
  };
}

beforeAll(async () => {
  upstream = await fakeUpstream("openai", (req) => {
    const n = typeof req.body.n === "number" ? req.body.n : 1;
    // A field the gateway cannot pass through by its text alone sends every chunk the parsed way.
    const extra = JSON.stringify(req.body).includes("parsed") ? { usage: {} } : {};
    const steps: SseStep[] = [
      { data: chunk(n, { role: "assistant", content: "" }, null, extra) },
      ...Array.from({ length: CHUNKS }, () => ({ data: chunk(n, { content: WORD }, null, extra) })),
      { data: chunk(n, {}, "stop", extra) },
      { data: "[DONE]" },
    ];
    return { kind: "sse", steps };
  });
  gw = await testGateway({
    config: baseConfigWith({
      providers: [
        { id: "up", wire: "openai", base_url: upstream.baseUrl, api_keys: ["sk-fake-n"] },
      ],
      models: [
        {
          name: "n-gpt",
          provider: "up",
          upstream_model: "upstream-model",
          price_input_per_mtok: 1_000,
          price_output_per_mtok: 2_000,
        },
      ],
    }),
  });
});

afterAll(async () => {
  await gw?.close();
  await upstream?.close();
});

describe("a stream of n answers from a server that reports no usage", () => {
  for (const path of ["passed through", "parsed"]) {
    it(`bills each choice's delta as at least a token (${path})`, async () => {
      const res = await post(gw, "/v1/chat/completions", {
        model: "n-gpt",
        n: 2,
        stream: true,
        messages: [{ role: "user", content: `count (${path})` }],
      });
      expect(res.status).toBe(200);
      const requestId = res.headers.get("x-request-id");
      const deltas: string[] = [];
      for (const { data } of await allStreamEvents(res)) {
        if (data === "[DONE]") continue;
        const choices = (data as { choices?: { delta?: { content?: string } }[] }).choices ?? [];
        for (const choice of choices) deltas.push(choice.delta?.content ?? "");
      }
      expect(deltas.filter((d) => d === WORD)).toHaveLength(2 * CHUNKS);
      const row = (await logged(gw)).find((r) => r.id === requestId);
      expect(row?.state).toBe("settled");
      expect(row?.usage.output_tokens).toBe(deliveredTokens(deltas));
      expect(row?.usage.output_tokens).toBe(2 * CHUNKS);
    });
  }
});
