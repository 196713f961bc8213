import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { lastLogged, quota } from "./support/api.js";
import { upstreamModel } from "./support/fake-providers.js";
import {
  anthropicStreamSteps,
  type FakeUpstream,
  fakeUpstream,
  openaiStreamSteps,
} from "./support/fake-upstream.js";
import { baseConfig, KEY, post, type TestGateway, testGateway } from "./support/gateway.js";
import { streamDataInText } from "./support/sse.js";

/**
 * Keepalive comments from admission: a provider that holds its headers, or a route whose first
 * step fails in silence, still gets the client a 200 and comments within the keepalive interval
 * (50 ms in tests); a failure after that is the route's error event, and costs nothing.
 */

let oa: FakeUpstream;
let an: FakeUpstream;
let gw: TestGateway;
let config: ReturnType<typeof baseConfig>;

beforeAll(async () => {
  [oa, an] = await Promise.all([fakeUpstream("openai"), fakeUpstream("anthropic")]);
  const provider = (id: string, wire: "openai" | "anthropic", fake: FakeUpstream, ms: number) => ({
    id,
    wire,
    base_url: fake.baseUrl,
    api_keys: [`sk-${id}-pool`],
    timeout_ms: ms,
    cooldown_ms: 1,
  });
  config = baseConfig({
    providers: [
      provider("oa", "openai", oa, 3_000),
      provider("oa-short", "openai", oa, 300),
      provider("an", "anthropic", an, 3_000),
      provider("an-short", "anthropic", an, 300),
    ],
    models: [
      upstreamModel("held", "oa"),
      upstreamModel("silent", "oa-short"),
      upstreamModel("answers", "an"),
      upstreamModel("silent-an", "an-short"),
    ],
    routes: [
      { name: "slow-first", steps: ["silent", "answers"] },
      { name: "all-silent", steps: ["silent", "silent-an"] },
    ],
  });
  gw = await testGateway({ keepaliveMs: 50, config });
});
afterAll(async () => {
  await gw?.close();
  await Promise.all([oa?.close(), an?.close()]);
});
beforeEach(() => {
  oa.reset();
  an.reset();
});

/** The response read whole, with when the client got its headers and its first bytes. */
async function timed(path: string, body: object) {
  const res = await post(gw, path, { stream: true, ...body });
  const headersAt = Date.now();
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  const decoder = new TextDecoder();
  let text = "";
  let firstBytesAt = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    firstBytesAt ||= Date.now();
    text += decoder.decode(value, { stream: true });
  }
  return { status: res.status, headersAt, firstBytesAt, text };
}

const keepalivesBefore = (text: string, marker: string) =>
  (text.slice(0, text.indexOf(marker)).match(/^: keepalive$/gm) ?? []).length;

describe("keepalives start from admission", () => {
  it("sends the 200 and keepalive comments before a provider that holds its headers sends them", async () => {
    oa.queue({ kind: "sse", holdHeadersMs: 400, steps: openaiStreamSteps(["held ", "answer"]) });
    const got = await timed("/v1/chat/completions", {
      model: "held",
      messages: [{ role: "user", content: "x" }],
    });
    const providerHeadersAt = oa.headersSentAt[0];
    expect(got.status).toBe(200);
    expect(got.headersAt).toBeLessThan(providerHeadersAt);
    expect(got.firstBytesAt).toBeLessThan(providerHeadersAt);
    expect(got.text.startsWith(": keepalive\n\n")).toBe(true);
    expect(keepalivesBefore(got.text, "data:")).toBeGreaterThanOrEqual(2);
    expect(got.text).toContain('"content":"answer"');
    expect(got.text.trim().endsWith("data: [DONE]")).toBe(true);
  });

  it("keeps the client alive through a first step that times out in silence, then streams the second step", async () => {
    oa.queue({ kind: "hang" });
    an.queue({ kind: "sse", steps: anthropicStreamSteps(["second ", "step"]) });
    const got = await timed("/v1/messages", {
      model: "slow-first",
      max_tokens: 20,
      messages: [{ role: "user", content: "x" }],
    });
    expect(got.status).toBe(200);
    // The first step's 300 ms timeout passed under comments every 50 ms.
    expect(keepalivesBefore(got.text, "event:")).toBeGreaterThanOrEqual(3);
    expect(got.text).toContain('"text":"second "');
    expect(got.text).toContain("event: message_stop");
    expect(oa.requests).toHaveLength(1);
    expect(an.requests).toHaveLength(1);
  });

  it("parses with both SDKs when the answer comes after a silent first step", async () => {
    oa.queue({ kind: "hang" });
    an.queue({ kind: "sse", steps: anthropicStreamSteps(["via ", "sdk"]) });
    const openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    const chat = await openai.chat.completions
      .stream({ model: "slow-first", messages: [{ role: "user", content: "x" }] })
      .finalChatCompletion();
    expect(chat.choices[0].message.content).toBe("via sdk");

    oa.queue({ kind: "hang" });
    an.queue({ kind: "sse", steps: anthropicStreamSteps(["again"]) });
    const anthropic = new Anthropic({ apiKey: KEY, baseURL: gw.url, maxRetries: 0 });
    const message = await anthropic.messages
      .stream({ model: "slow-first", max_tokens: 20, messages: [{ role: "user", content: "x" }] })
      .finalMessage();
    expect(message.content).toMatchObject([{ type: "text", text: "again" }]);
  });
});

describe("every step fails after the 200 went out", () => {
  const prompt = [{ role: "user", content: "x" }];

  it("ends a chat stream with a data chunk carrying all_providers_failed, and bills nothing", async () => {
    const before = (await quota(gw)).balance_idr;
    oa.handle(() => ({ kind: "hang" }));
    an.handle(() => ({ kind: "hang" }));
    const got = await timed("/v1/chat/completions", { model: "all-silent", messages: prompt });
    expect(got.status).toBe(200);
    expect(got.text.startsWith(": keepalive")).toBe(true);
    const data = await streamDataInText(got.text);
    expect(data).toHaveLength(1);
    expect(data[0]).toMatchObject({
      error: { code: "all_providers_failed", type: "all_providers_failed" },
    });
    expect(got.text).not.toContain("[DONE]");
    expect(oa.requests).toHaveLength(1);
    expect(an.requests).toHaveLength(1);
    expect((await quota(gw)).balance_idr).toBe(before);
    expect(await lastLogged(gw)).toMatchObject({ cost_idr: 0, output_tokens: 0 });
  });

  it("ends a messages stream with an error event, and a direct dispatch with upstream_error", async () => {
    oa.handle(() => ({ kind: "hang" }));
    an.handle(() => ({ kind: "hang" }));
    const routed = await timed("/v1/messages", {
      model: "all-silent",
      max_tokens: 5,
      messages: prompt,
    });
    expect(routed.status).toBe(200);
    expect(routed.text).toMatch(/^event: error\ndata: /m);
    expect(routed.text).toContain('"type":"api_error"');
    expect(routed.text).not.toContain("message_stop");

    const direct = await timed("/v1/chat/completions", { model: "silent", messages: prompt });
    expect(direct.status).toBe(200);
    expect(direct.text).toContain('"code":"upstream_error"');
  });

  it("ends a responses stream with its error event carrying the code", async () => {
    oa.handle(() => ({ kind: "hang" }));
    an.handle(() => ({ kind: "hang" }));
    const got = await timed("/v1/responses", { model: "all-silent", input: "x" });
    expect(got.status).toBe(200);
    expect(got.text).toMatch(/^event: error\ndata: .*"code":"all_providers_failed"/m);
    expect(got.text).toContain("event: response.failed");
  });

  it("the openai SDK raises the error event as an APIError", async () => {
    oa.handle(() => ({ kind: "hang" }));
    an.handle(() => ({ kind: "hang" }));
    const openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    const stream = await openai.chat.completions.create({
      model: "all-silent",
      stream: true,
      messages: [{ role: "user", content: "x" }],
    });
    await expect(
      (async () => {
        for await (const _ of stream) {
          // drain
        }
      })(),
    ).rejects.toThrow(/Every provider/);
  });

  it("still answers with an HTTP error status when every step fails within the interval", async () => {
    oa.handle(() => ({ kind: "json", status: 500, body: { error: { message: "down" } } }));
    an.handle(() => ({ kind: "json", status: 500, body: { type: "error", error: {} } }));
    // An interval no loaded machine's two failed round trips come near.
    const patient = await testGateway({ keepaliveMs: 5_000, config });
    try {
      const res = await post(patient, "/v1/chat/completions", {
        model: "all-silent",
        stream: true,
        messages: prompt,
      });
      expect(res.status).toBe(503);
      expect(await res.json()).toMatchObject({ error: { code: "all_providers_failed" } });
    } finally {
      await patient.close();
    }
  });
});
