import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { errorOf } from "./support/api.js";
import { type FakeUpstream, fakeUpstream, openaiJson } from "./support/fake-upstream.js";
import { baseConfig, chat, post, type TestGateway, testGateway } from "./support/gateway.js";

/**
 * A provider's whole answer past the configured cap fails the attempt (503 upstream_error) as the
 * bytes arrive, instead of being read and relayed whole. Before, a 60 MB answer was relayed.
 */

const limit = 1024 * 1024;
let upstream: FakeUpstream;
let gw: TestGateway;

beforeAll(async () => {
  upstream = await fakeUpstream("openai");
  gw = await testGateway({
    upstreamAnswerLimitBytes: limit,
    config: baseConfig({
      providers: [
        { id: "oa", wire: "openai", base_url: upstream.baseUrl, api_keys: ["sk-oa-cap"] },
      ],
      models: [
        {
          name: "gpt-x",
          provider: "oa",
          price_input_per_mtok: 10_000,
          price_output_per_mtok: 20_000,
        },
      ],
      routes: [],
    }),
  });
});
afterAll(async () => {
  await gw?.close();
  await upstream?.close();
});
beforeEach(() => upstream.reset());

const balance = () => gw.services.store.getAccount("acct")!.balance_micro;

describe("upstream answer cap", () => {
  it("an answer declared larger than the cap is a 503 upstream_error; nothing is charged", async () => {
    upstream.queue(openaiJson("x".repeat(3 * limit)));
    const before = balance();
    const res = await post(gw, "/v1/chat/completions", chat("hi", "gpt-x"));
    expect(await errorOf(res)).toMatchObject({ status: 503, code: "upstream_error" });
    expect(balance()).toBe(before);
    expect(gw.services.ledger.heldMicro("acct")).toBe(0);
  });

  it("an answer with no declared length is cut off once it passes the cap, not read to its end", async () => {
    const piece = "y".repeat(64 * 1024);
    // Chunked, as it arrives: far more than the cap, with a pause between pieces.
    upstream.queue({
      kind: "sse",
      steps: Array.from({ length: 200 }, () => ({ data: piece, delayMs: 2 })),
    });
    const res = await post(gw, "/v1/chat/completions", chat("hi", "gpt-x"));
    expect(await errorOf(res)).toMatchObject({ status: 503, code: "upstream_error" });
    expect(upstream.sent.length).toBeLessThan(200);
    for (let i = 0; i < 50 && upstream.aborted === 0; i++)
      await new Promise((r) => setTimeout(r, 20));
    expect(upstream.aborted).toBe(1);
  });

  it("an answer under the cap is served", async () => {
    upstream.queue(openaiJson("z".repeat(limit / 2)));
    const res = await post(gw, "/v1/chat/completions", chat("hi", "gpt-x"));
    expect(res.status).toBe(200);
    const body = (await res.json()) as { choices: { message: { content: string } }[] };
    expect(body.choices[0].message.content).toHaveLength(limit / 2);
  });
});
