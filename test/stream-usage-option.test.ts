import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import type { Completion } from "openai/resources/completions";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { errorOf } from "./support/api.js";
import {
  completionStreamSteps,
  type FakeUpstream,
  fakeUpstream,
  openaiStreamSteps,
  type SseStep,
} from "./support/fake-upstream.js";
import { baseConfig, KEY, post, type TestGateway, testGateway } from "./support/gateway.js";
import { streamDataInText } from "./support/sse.js";

/**
 * A stream's usage is billed from the provider's last chunk, which the gateway asks for with
 * `stream_options.include_usage`, on chat and on a legacy completion sent to the provider's own
 * Completions API alike. A server that refuses the field as unknown (vLLM before 0.4.3, whose
 * request models forbade any field they did not declare) refuses every stream; the provider's
 * `stream_usage: false` sends it none, on both paths, and the stream is billed the estimate.
 */

const PRICE_IN = 1_000;
const PRICE_OUT = 2_000;

/** A stream as such a server sends it: no usage chunk, since nobody could ask for one. */
const withoutUsage = (steps: SseStep[]) =>
  steps.filter((step) => !(typeof step.data === "object" && "usage" in (step.data as object)));

let strict: FakeUpstream;
let asked: FakeUpstream;
let gw: TestGateway;

beforeAll(async () => {
  const rules = {
    maxOutputTokens: 8_192,
    completions: "vllm" as const,
    unknownFields: ["stream_options"],
  };
  [strict, asked] = await Promise.all([
    fakeUpstream("openai", undefined, rules),
    fakeUpstream("openai", undefined, rules),
  ]);
  const base = baseConfig();
  const priced = { price_input_per_mtok: PRICE_IN, price_output_per_mtok: PRICE_OUT };
  gw = await testGateway({
    config: {
      ...base,
      providers: [
        ...base.providers!,
        {
          id: "old-vllm",
          wire: "openai",
          base_url: strict.baseUrl,
          api_keys: ["sk-old"],
          completions_native: true,
          stream_usage: false,
        },
        {
          id: "asked",
          wire: "openai",
          base_url: asked.baseUrl,
          api_keys: ["sk-asked"],
          completions_native: true,
        },
      ],
      models: [
        ...base.models!,
        { name: "coder", provider: "old-vllm", upstream_model: "Qwen/Coder-7B", ...priced },
        { name: "coder-asked", provider: "asked", upstream_model: "Qwen/Coder-7B", ...priced },
      ],
    },
  });
});
afterAll(async () => {
  await gw?.close();
  await strict?.close();
  await asked?.close();
});
beforeEach(() => {
  strict.reset();
  asked.reset();
});

/** Continue's autocomplete request (its `suffix` providers'), as text. */
const continueFim = (model: string) =>
  JSON.stringify({
    model,
    prompt: "def add(a, b):\n    ",
    suffix: "\n\nprint(add(1, 2))\n",
    max_tokens: 256,
    temperature: 0.01,
    stop: ["/src/", "#- coding: utf-8", "```"],
    stream: true,
  });

describe("a provider that refuses `stream_options` as an unknown field", () => {
  it("without `stream_usage: false` every stream is refused (the gateway asked for the usage), and free", async () => {
    const res = await post(gw, "/v1/completions", continueFim("coder-asked"));
    expect(asked.refused).toHaveLength(1);
    expect(asked.last.body.stream_options).toEqual({ include_usage: true });
    expect(await errorOf(res)).toMatchObject({ status: 400, type: "invalid_request_error" });
    const [row] = await gw.listRequests({ limit: 1 });
    expect(row).toMatchObject({ model: "coder-asked", cost_micro: 0 });
  });

  it("with it, a legacy completion's stream goes to its Completions API as the client wrote it, only the model renamed, and is billed the estimate of its text", async () => {
    strict.handle(() => ({
      kind: "sse",
      steps: completionStreamSteps(["return a", " + b"], { usage: null }),
    }));
    const written = continueFim("coder");
    const res = await post(gw, "/v1/completions", written);
    expect(res.status).toBe(200);
    const events = await streamDataInText<Completion>(await res.text());
    expect(strict.refused).toEqual([]);
    expect(strict.last.path).toBe("/v1/completions");
    expect(strict.last.raw).toBe(written.replace('"coder"', '"Qwen/Coder-7B"'));
    const text = events.map((e) => (e === "[DONE]" ? "" : (e.choices[0]?.text ?? ""))).join("");
    expect(text).toBe("return a + b");
    expect(events.at(-1)).toBe("[DONE]");
    const [row] = await gw.listRequests({ limit: 1 });
    expect(row).toMatchObject({ endpoint: "completions", state: "settled", stream: true });
    expect(row.usage.output_tokens).toBeGreaterThan(0);
    expect(row.cost_micro).toBe(
      row.usage.input_tokens * PRICE_IN + row.usage.output_tokens * PRICE_OUT,
    );
  });

  it("with it, a legacy completion's own `stream_options` are left out too, as the server would refuse them", async () => {
    strict.handle(() => ({ kind: "sse", steps: completionStreamSteps(["ok"], { usage: null }) }));
    const openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    const stream = await openai.completions.create({
      model: "coder",
      prompt: "x",
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.text ?? "";
    expect(text).toBe("ok");
    expect(strict.refused).toEqual([]);
    expect(strict.last.body).not.toHaveProperty("stream_options");
  });

  it("with it, chat streams go without it too: a chat client's own (the AI SDK always sends them) and a translated messages client's", async () => {
    strict.handle(() => ({ kind: "sse", steps: withoutUsage(openaiStreamSteps(["fine"])) }));
    const openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    for (const stream_options of [undefined, { include_usage: true }]) {
      const stream = await openai.chat.completions.create({
        model: "coder",
        messages: [{ role: "user", content: "hello" }],
        stream: true,
        ...(stream_options ? { stream_options } : {}),
      });
      let text = "";
      for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? "";
      expect(text).toBe("fine");
      expect(strict.last.path).toBe("/v1/chat/completions");
      expect(strict.last.body).not.toHaveProperty("stream_options");
    }
    const anthropic = new Anthropic({ apiKey: KEY, baseURL: gw.url, maxRetries: 0 });
    const message = await anthropic.messages
      .stream({ model: "coder", max_tokens: 64, messages: [{ role: "user", content: "hi" }] })
      .finalMessage();
    expect(message.content).toEqual([{ type: "text", text: "fine", citations: null }]);
    expect(strict.last.body).not.toHaveProperty("stream_options");
    expect(strict.refused).toEqual([]);
    const rows = await gw.listRequests({ limit: 3 });
    for (const row of rows) {
      expect(row).toMatchObject({ state: "settled", stream: true });
      expect(row.usage.output_tokens).toBeGreaterThan(0);
    }
  });

  it("is a boolean, named when it is not", async () => {
    const { parseConfig } = await import("../src/server/config/load.js");
    const config = (value: unknown) =>
      baseConfig({
        providers: [
          { id: "p", wire: "openai", base_url: "http://127.0.0.1:9/v1", stream_usage: value },
        ] as never,
        models: [],
        routes: [],
      });
    expect(() => parseConfig(config("no"), {}, "gateway.json")).toThrow(
      /providers\[0\]\.stream_usage/,
    );
    expect(() => parseConfig(config(false), {}, "gateway.json")).not.toThrow();
  });
});
