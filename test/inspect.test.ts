import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { InspectedRequest } from "../src/server/kit/inspect.js";
import { admin, quota } from "./support/api.js";
import {
  type FakeUpstream,
  fakeUpstream,
  openaiError,
  openaiJson,
  openaiStreamSteps,
} from "./support/fake-upstream.js";
import { baseConfig, KEY, post, type TestGateway, testGateway } from "./support/gateway.js";

/** Inspection: recent requests with what the gateway received, sent upstream and answered. */

const OA_KEY = "sk-oa-inspect-secret-5151";

let upstream: FakeUpstream;
let gw: TestGateway;

function config(baseUrl: string) {
  return baseConfig({
    providers: [
      { id: "mock", wire: "mock" },
      { id: "oa", wire: "openai", base_url: baseUrl, api_keys: [OA_KEY], timeout_ms: 3_000 },
    ],
    models: [
      {
        name: "gpt-x",
        provider: "oa",
        upstream_model: "gpt-upstream",
        price_input_per_mtok: 10_000,
        price_output_per_mtok: 20_000,
      },
      { name: "mock-gpt", provider: "mock", price_input_per_mtok: 10_000 },
    ],
    routes: [],
  });
}

async function listed(
  target: { url: string },
  query = "",
): Promise<{ capture_bodies: boolean; data: InspectedRequest[] }> {
  const res = await admin(target, "GET", `/requests${query}`);
  expect(res.status).toBe(200);
  return (await res.json()) as { capture_bodies: boolean; data: InspectedRequest[] };
}

beforeAll(async () => {
  upstream = await fakeUpstream("openai");
  gw = await testGateway({
    config: config(upstream.baseUrl),
    keepaliveMs: 5_000,
    captureBodies: true,
    captureLimit: 3,
  });
});
afterAll(async () => {
  await gw?.close();
  await upstream?.close();
});
beforeEach(() => upstream.reset());

describe("GET /api/admin/requests with captureBodies", () => {
  it("shows a cross-wire request as received, translated upstream and answered, billed as the balance moved", async () => {
    upstream.queue(openaiJson("Bonjour", { usage: [12, 3] }));
    const before = (await quota(gw)).balance_idr;
    const sent = {
      model: "gpt-x",
      max_tokens: 50,
      system: "Be brief.",
      messages: [{ role: "user", content: "greet me" }],
    };
    const res = await post(gw, "/v1/messages", sent);
    expect(res.status).toBe(200);
    const answered = await res.json();
    const after = (await quota(gw)).balance_idr;

    const { capture_bodies, data } = await listed(gw, "?limit=1");
    expect(capture_bodies).toBe(true);
    const entry = data[0];
    expect(entry).toMatchObject({
      endpoint: "messages",
      model: "gpt-x",
      provider: "oa",
      status: 200,
      state: "settled",
      stream: false,
      account: "acct",
      key: { id: "k1", label: "main" },
      usage: { input_tokens: 12, output_tokens: 3 },
    });
    expect(entry.cost_micro).toBeGreaterThan(0);
    expect(entry.cost_micro).toBe(Math.round((before - after) * 1_000_000));
    expect(entry.cost_idr).toBe(entry.cost_micro / 1_000_000);

    expect(entry.received).toEqual(sent);
    expect(entry.upstream).toHaveLength(1);
    const call = entry.upstream?.[0];
    expect(call?.provider).toBe("oa");
    expect(call?.path).toBe("/chat/completions");
    // The translated body is exactly what the provider got: the chat form of the messages request.
    expect(call?.body).toEqual(upstream.last.body);
    expect(call?.body).toMatchObject({
      model: "gpt-upstream",
      messages: [
        { role: "system", content: "Be brief." },
        { role: "user", content: "greet me" },
      ],
    });
    expect(call?.status).toBe(200);
    expect(call?.answer).toMatchObject({ choices: [{ message: { content: "Bonjour" } }] });
    expect(entry.answer).toEqual({ status: 200, body: answered });

    // The programmatic API lists the same.
    expect(await gw.listRequests({ limit: 1 })).toEqual(data);
  });

  it("keeps a stream as the text the client got and the upstream's own stream text", async () => {
    upstream.queue({ kind: "sse", steps: openaiStreamSteps(["Sa", "lut"], { usage: [7, 2] }) });
    const res = await post(gw, "/v1/messages", {
      model: "gpt-x",
      max_tokens: 50,
      stream: true,
      messages: [{ role: "user", content: "stream a greeting" }],
    });
    const text = await res.text();
    expect(text).toContain("event: message_stop");
    const [entry] = await gw.listRequests({ limit: 1 });
    expect(entry.stream).toBe(true);
    expect(entry.usage).toEqual({ input_tokens: 7, output_tokens: 2 });
    expect(entry.answer).toEqual({ status: 200, body: text });
    expect(entry.upstream?.[0].body).toMatchObject({ stream: true, model: "gpt-upstream" });
    expect(entry.upstream?.[0].answer).toEqual(expect.stringContaining("data: [DONE]"));
    expect(entry.upstream?.[0].answer).toEqual(expect.stringContaining('"content":"lut"'));
  });

  it("records an upstream rejection with the provider's status and the client's error answer", async () => {
    upstream.queue(openaiError(400, "bad things", "invalid_value"));
    const res = await post(gw, "/v1/chat/completions", {
      model: "gpt-x",
      messages: [{ role: "user", content: "reject me" }],
    });
    expect(res.status).toBe(400);
    const { data } = await listed(gw, "?limit=5&status=400");
    expect(data[0]).toMatchObject({
      status: 400,
      cost_micro: 0,
      error_code: "invalid_request_error",
    });
    expect(data[0].upstream?.[0]).toMatchObject({ status: 400 });
    expect(data[0].answer?.status).toBe(400);
  });

  it("never shows a provider key or the caller's key", async () => {
    const text = JSON.stringify(await listed(gw, "?limit=50"));
    expect(text).not.toContain(OA_KEY);
    expect(text).not.toContain(KEY);
  });

  it("filters by model and keeps bodies only for the last captureLimit requests", async () => {
    for (const word of ["one", "two", "three", "four"]) {
      const res = await post(gw, "/v1/chat/completions", {
        model: "mock-gpt",
        messages: [{ role: "user", content: word }],
      });
      expect(res.status).toBe(200);
    }
    const { data } = await listed(gw, "?model=mock-gpt&limit=10");
    expect(data.map((r) => r.model)).toEqual(["mock-gpt", "mock-gpt", "mock-gpt", "mock-gpt"]);
    expect(
      data
        .slice(0, 3)
        .map((r) => (r.received as { messages: { content: string }[] }).messages[0].content),
    ).toEqual(["four", "three", "two"]);
    expect(data[3].received).toBeUndefined();
    expect(data[3].usage.input_tokens).toBeGreaterThan(0);
  });

  it("refuses a bad query with a 400 and a caller without the admin key with a 401", async () => {
    expect((await admin(gw, "GET", "/requests?limit=zero")).status).toBe(400);
    const res = await fetch(`${gw.url}/api/admin/requests`, {
      headers: { authorization: `Bearer ${KEY}` },
    });
    expect(res.status).toBe(401);
  });
});

describe("without captureBodies", () => {
  it("lists the request log's fields and no body", async () => {
    const plain = await testGateway();
    try {
      const res = await post(plain, "/v1/chat/completions", {
        model: "mock-gpt",
        messages: [{ role: "user", content: "hi" }],
      });
      expect(res.status).toBe(200);
      const { capture_bodies, data } = await listed(plain);
      expect(capture_bodies).toBe(false);
      expect(data).toHaveLength(1);
      expect(data[0]).toMatchObject({ model: "mock-gpt", status: 200, key: { id: "k1" } });
      expect(data[0].received).toBeUndefined();
      expect(data[0].upstream).toBeUndefined();
      expect(await plain.listRequests()).toEqual(data);
    } finally {
      await plain.close();
    }
  });
});
