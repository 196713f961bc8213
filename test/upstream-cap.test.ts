import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
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
/** Declares an answer past the cap, sends a few bytes of it and then nothing. */
let declaring: Server;
let declaringClosed = 0;

beforeAll(async () => {
  upstream = await fakeUpstream("openai");
  declaring = createServer((req, res) => {
    req.resume();
    res.on("close", () => declaringClosed++);
    res.writeHead(200, { "content-type": "application/json", "content-length": 3 * limit });
    res.write('{"id":"');
  });
  await new Promise<void>((resolve) => declaring.listen(0, "127.0.0.1", resolve));
  const declaringUrl = `http://127.0.0.1:${(declaring.address() as AddressInfo).port}`;
  gw = await testGateway({
    upstreamAnswerLimitBytes: limit,
    config: baseConfig({
      providers: [
        { id: "oa", wire: "openai", base_url: upstream.baseUrl, api_keys: ["sk-oa-cap"] },
        {
          id: "big",
          wire: "openai",
          base_url: declaringUrl,
          api_keys: ["sk-big-cap"],
          timeout_ms: 30_000,
        },
      ],
      models: [
        {
          name: "gpt-x",
          provider: "oa",
          price_input_per_mtok: 10_000,
          price_output_per_mtok: 20_000,
        },
        {
          name: "gpt-big",
          provider: "big",
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
  declaring?.closeAllConnections();
  await new Promise((resolve) => declaring?.close(resolve));
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

  it("an answer whose headers declare more than the cap is refused at its headers, not waited for", async () => {
    const before = balance();
    // The rest never comes and the provider's bound is 30 s: only the declared length can
    // answer inside the test's own bound.
    const res = await post(gw, "/v1/chat/completions", chat("hi", "gpt-big"));
    expect(await errorOf(res)).toMatchObject({ status: 503, code: "upstream_error" });
    for (let i = 0; i < 50 && declaringClosed === 0; i++)
      await new Promise((r) => setTimeout(r, 20));
    expect(declaringClosed).toBe(1);
    expect(balance()).toBe(before);
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
