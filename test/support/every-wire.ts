import { randomBytes } from "node:crypto";
import type { ConfigInput } from "../../src/server/config/schema.js";
import type { MockRule } from "../../src/server/providers/mock-script.js";
import { secretKeyEnv } from "../../src/store/secret-box.js";
import { fakeGemini } from "./fake-gemini.js";
import { type FakeUpstream, fakeUpstream, type Handler } from "./fake-upstream.js";
import { baseConfig, KEY, type TestGateway, testGateway } from "./gateway.js";
import { createTestDatabase } from "./postgres.js";

export type Wire = "openai" | "anthropic" | "gemini" | "mock";
export const wires: readonly Wire[] = ["openai", "anthropic", "gemini", "mock"];

/** What each fake provider answers, and how the mock is set up. */
export interface EveryWireOptions {
  backend: "sqlite" | "postgres";
  replies: Record<Exclude<Wire, "mock">, Handler>;
  mock: { chunk_interval_ms: number };
  /** The mock's scripted answers (`config.mock.script`). */
  mockScript?: MockRule[];
  /** micro-IDR per million tokens. */
  prices: { input: number; output: number };
  /**
   * Also `m-native`: a model of the OpenAI fake as a native Responses API (`responses_native`),
   * to which a Responses client's stream passes through.
   */
  native?: boolean;
  /**
   * Also `m-text-native`: a model of the OpenAI fake as a server of the legacy Completions API
   * (`completions_native`), to which a `/v1/completions` client's body and stream pass through.
   */
  textNative?: boolean;
  /** More accounts beside `baseConfig`'s (a suite whose cases run at once gives each its own). */
  accounts?: NonNullable<ConfigInput["accounts"]>;
}

/** What a client of any style sends: the key, and the API version a messages client names. */
export const anyStyleHeaders = {
  authorization: `Bearer ${KEY}`,
  "anthropic-version": "2023-06-01",
};

/** The catalog's model served over `wire`. */
export const modelOn = (wire: Wire): string => `m-${wire}`;

export interface EveryWireGateway {
  gw: TestGateway;
  close(): Promise<void>;
}

/**
 * A gateway with one priced model on every provider wire (`modelOn(wire)`), each fake answering as
 * `replies` says, on a fresh database of `backend`.
 */
export async function gatewayOnEveryWire(options: EveryWireOptions): Promise<EveryWireGateway> {
  const savedSecret = process.env[secretKeyEnv];
  process.env[secretKeyEnv] ??= randomBytes(32).toString("base64");
  const upstreams: FakeUpstream[] = [];
  const close = async () => {
    for (const upstream of upstreams) await upstream.close();
    if (savedSecret === undefined) delete process.env[secretKeyEnv];
  };
  try {
    const openai = await fakeUpstream("openai", options.replies.openai);
    upstreams.push(openai);
    const anthropic = await fakeUpstream("anthropic", options.replies.anthropic);
    upstreams.push(anthropic);
    const gemini = await fakeGemini({ apiKeys: ["gm-key"] }, options.replies.gemini);
    upstreams.push(gemini);
    const prices = {
      price_input_per_mtok: options.prices.input,
      price_output_per_mtok: options.prices.output,
    };
    const gw = await testGateway({
      db: options.backend === "postgres" ? await createTestDatabase() : undefined,
      config: {
        ...baseConfig(),
        providers: [
          { id: "oa", wire: "openai", base_url: openai.baseUrl, api_keys: ["sk-oa"] },
          { id: "an", wire: "anthropic", base_url: anthropic.baseUrl, api_keys: ["sk-an"] },
          { id: "gm", wire: "gemini", base_url: gemini.url, api_keys: ["gm-key"] },
          { id: "mk", wire: "mock", mock: options.mock },
          ...(options.native
            ? [
                {
                  id: "rn",
                  wire: "openai" as const,
                  base_url: openai.baseUrl,
                  api_keys: ["sk-rn"],
                  responses_native: true,
                },
              ]
            : []),
          ...(options.textNative
            ? [
                {
                  id: "tn",
                  wire: "openai" as const,
                  base_url: openai.baseUrl,
                  api_keys: ["sk-tn"],
                  completions_native: true,
                },
              ]
            : []),
        ],
        models: [
          { name: modelOn("openai"), provider: "oa", upstream_model: "gpt-up", ...prices },
          { name: modelOn("anthropic"), provider: "an", upstream_model: "claude-up", ...prices },
          { name: modelOn("gemini"), provider: "gm", upstream_model: "gemini-up", ...prices },
          { name: modelOn("mock"), provider: "mk", upstream_model: "mock-up", ...prices },
          ...(options.native
            ? [{ name: "m-native", provider: "rn", upstream_model: "up-model", ...prices }]
            : []),
          ...(options.textNative
            ? [{ name: "m-text-native", provider: "tn", upstream_model: "text-up", ...prices }]
            : []),
        ],
        routes: [],
        ...(options.accounts
          ? { accounts: [...(baseConfig().accounts ?? []), ...options.accounts] }
          : {}),
        ...(options.mockScript ? { mock: { script: options.mockScript } } : {}),
      },
    });
    return {
      gw,
      close: async () => {
        await gw.close();
        await close();
      },
    };
  } catch (err) {
    await close();
    throw err;
  }
}
