import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { afterAll, beforeAll, beforeEach } from "vitest";
import type { ConfigInput } from "../../src/server/config/schema.js";
import { type FakeUpstream, fakeUpstream } from "./fake-upstream.js";
import { type BackendName, gatewayOn, KEY, type TestGateway } from "./gateway.js";

type ProviderInput = NonNullable<ConfigInput["providers"]>[number];

/**
 * A model of `providerId` whose upstream model is `<name>-upstream`, at 1,000 and 2,000 micro-IDR a
 * million input and output tokens.
 */
export const upstreamModel = (name: string, providerId: string) => ({
  name,
  provider: providerId,
  upstream_model: `${name}-upstream`,
  price_input_per_mtok: 1_000,
  price_output_per_mtok: 2_000,
});

/** A gateway over providers that are fakes, and the two official SDKs pointed at it. */
export interface FakeProviders {
  gw: TestGateway;
  /** The fake behind each provider, in the order of `wires`. */
  fakes: FakeUpstream[];
  openai: OpenAI;
  anthropic: Anthropic;
}

/**
 * For a file's tests of routes and chains on `backend`: one fake for each of `wires`, behind the
 * providers `p1`, `p2`, ... (pool key `sk-<id>-pool`, `timeoutMs` each, a cooldown short enough
 * that a failed step is tried again by the next test). `config` makes the gateway's config from
 * those providers. Every fake forgets its queue before each test.
 */
export function useFakeProviders(options: {
  backend: BackendName;
  wires: readonly ("openai" | "anthropic")[];
  timeoutMs: number;
  config: (providers: ProviderInput[]) => ConfigInput;
  ready: (started: FakeProviders) => void;
}): void {
  let started: FakeProviders | undefined;
  beforeAll(async () => {
    const fakes = await Promise.all(options.wires.map((wire) => fakeUpstream(wire)));
    const providers = fakes.map((fake, i) => ({
      id: `p${i + 1}`,
      wire: options.wires[i],
      base_url: fake.baseUrl,
      api_keys: [`sk-p${i + 1}-pool`],
      timeout_ms: options.timeoutMs,
      cooldown_ms: 1,
    }));
    const gw = await gatewayOn(options.backend, { config: options.config(providers) });
    const sdk = { apiKey: KEY, maxRetries: 0, timeout: 10_000 };
    started = {
      gw,
      fakes,
      openai: new OpenAI({ ...sdk, baseURL: `${gw.url}/v1` }),
      anthropic: new Anthropic({ ...sdk, baseURL: gw.url }),
    };
    options.ready(started);
  });
  afterAll(async () => {
    await started?.gw.close();
    await Promise.all((started?.fakes ?? []).map((fake) => fake.close()));
  });
  beforeEach(() => {
    for (const fake of started?.fakes ?? []) fake.reset();
  });
}
