import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { afterAll, beforeAll, beforeEach } from "vitest";
import type { ConfigInput } from "../../src/server/config/schema.js";
import { fakeGemini } from "./fake-gemini.js";
import { type FakeUpstream, fakeUpstream } from "./fake-upstream.js";
import { baseConfig, KEY, type TestGateway, testGateway } from "./gateway.js";

/** A gateway with a model on each HTTP wire, its fakes, and the two official SDKs pointed at it. */
export interface ThreeWires {
  oa: FakeUpstream;
  an: FakeUpstream;
  gm: FakeUpstream;
  gw: TestGateway;
  openai: OpenAI;
  anthropic: Anthropic;
}

/**
 * One model on each HTTP wire, for a file's tests of translation across them: `h-openai`,
 * `h-anthropic` and `h-gemini` (upstream models `gpt-up`, `claude-up`, `gemini-up`), priced, each
 * with `maxOutputTokens` as its output limit (the Gemini fake refuses more when `geminiMax` is
 * set), plus `extra` providers, models and routes. Every fake forgets its queue before each test.
 */
export function useThreeWires(options: {
  maxOutputTokens: number;
  geminiMax?: number;
  /** More providers, models and routes, which may use the fakes' addresses. */
  extra?: (fakes: {
    oa: FakeUpstream;
    an: FakeUpstream;
    gm: FakeUpstream;
  }) => Pick<ConfigInput, "providers" | "models" | "routes">;
  ready: (wires: ThreeWires) => void;
}): void {
  let started: ThreeWires | undefined;
  beforeAll(async () => {
    const oa = await fakeUpstream("openai");
    const an = await fakeUpstream("anthropic");
    const gm = await fakeGemini({
      apiKeys: ["gm-key"],
      ...(options.geminiMax === undefined ? {} : { maxOutputTokens: options.geminiMax }),
    });
    const extra = options.extra?.({ oa, an, gm });
    const priced = {
      price_input_per_mtok: 1,
      price_output_per_mtok: 1,
      max_output_tokens: options.maxOutputTokens,
    };
    const gw = await testGateway({
      config: baseConfig({
        providers: [
          ...(baseConfig().providers ?? []),
          { id: "oa", wire: "openai", base_url: oa.baseUrl, api_keys: ["sk-oa"] },
          { id: "an", wire: "anthropic", base_url: an.baseUrl, api_keys: ["sk-an"] },
          { id: "gm", wire: "gemini", base_url: gm.url, api_keys: ["gm-key"] },
          ...(extra?.providers ?? []),
        ],
        models: [
          ...(baseConfig().models ?? []),
          { name: "h-openai", provider: "oa", upstream_model: "gpt-up", ...priced },
          { name: "h-anthropic", provider: "an", upstream_model: "claude-up", ...priced },
          { name: "h-gemini", provider: "gm", upstream_model: "gemini-up", ...priced },
          ...(extra?.models ?? []).map((m) => ({ ...priced, ...m })),
        ],
        routes: [...(baseConfig().routes ?? []), ...(extra?.routes ?? [])],
      }),
    });
    const sdk = { apiKey: KEY, maxRetries: 0, timeout: 10_000 };
    started = {
      oa,
      an,
      gm,
      gw,
      openai: new OpenAI({ ...sdk, baseURL: `${gw.url}/v1` }),
      anthropic: new Anthropic({ ...sdk, baseURL: gw.url }),
    };
    options.ready(started);
  });
  afterAll(async () => {
    await started?.gw.close();
    for (const upstream of [started?.oa, started?.an, started?.gm]) await upstream?.close();
  });
  beforeEach(() => {
    for (const upstream of [started?.oa, started?.an, started?.gm]) upstream?.reset();
  });
}

/** How an SDK call ended: the error it threw, or status 200 when it was answered. */
export async function outcomeOf(
  call: Promise<unknown>,
): Promise<{ status?: number; message: string }> {
  try {
    await call;
  } catch (err) {
    return err as { status?: number; message: string };
  }
  return { status: 200, message: "answered" };
}
