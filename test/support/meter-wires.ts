import { afterAll, beforeAll, beforeEach } from "vitest";
import { fakeGemini } from "./fake-gemini.js";
import { type FakeUpstream, fakeUpstream } from "./fake-upstream.js";
import { type BackendName, baseConfigWith, gatewayOn, type TestGateway } from "./gateway.js";

/** A gateway with a priced model on each provider wire, and the fakes behind them. */
export interface MeterWires {
  gw: TestGateway;
  openai: FakeUpstream;
  anthropic: FakeUpstream;
  gemini: FakeUpstream;
}

/**
 * For a file's meter tests on `backend`: `m-openai` (provider `oa`, upstream model `gpt-up`, key
 * `openaiKey`), `m-native` (provider `rn`, the same fake as a native Responses provider,
 * `up-model`), `m-anthropic` (provider `an`, `claude-up`) and `m-gemini` (provider `gm`,
 * `gemini-up`), each at the given micro-IDR a million input and output tokens, and `routes` over
 * them. `ready` gets them once started; every fake forgets its queue before each test, so a case
 * that failed midway leaves no reply for the next.
 */
export function useMeterWires(
  backend: BackendName,
  options: {
    openaiKey: string;
    inputPerMtok: number;
    outputPerMtok: number;
    /** Routes beside the base config's, over the models above. */
    routes?: { name: string; steps: string[] }[];
    /** "manual" for a file that counts a per-minute limit: its requests stay in one minute. */
    clock?: "manual";
  },
  ready: (started: MeterWires) => void,
): void {
  let started: MeterWires | undefined;
  beforeAll(async () => {
    const openai = await fakeUpstream("openai");
    const anthropic = await fakeUpstream("anthropic");
    const gemini = await fakeGemini({ apiKeys: ["gm-key"] });
    const prices = {
      price_input_per_mtok: options.inputPerMtok,
      price_output_per_mtok: options.outputPerMtok,
      max_output_tokens: 4_000,
    };
    const gw = await gatewayOn(backend, {
      clock: options.clock,
      config: baseConfigWith({
        providers: [
          { id: "oa", wire: "openai", base_url: openai.baseUrl, api_keys: [options.openaiKey] },
          {
            id: "rn",
            wire: "openai",
            base_url: openai.baseUrl,
            api_keys: ["sk-rn"],
            responses_native: true,
          },
          { id: "an", wire: "anthropic", base_url: anthropic.baseUrl, api_keys: ["sk-an"] },
          { id: "gm", wire: "gemini", base_url: gemini.url, api_keys: ["gm-key"] },
        ],
        models: [
          { name: "m-openai", provider: "oa", upstream_model: "gpt-up", ...prices },
          { name: "m-native", provider: "rn", upstream_model: "up-model", ...prices },
          { name: "m-anthropic", provider: "an", upstream_model: "claude-up", ...prices },
          { name: "m-gemini", provider: "gm", upstream_model: "gemini-up", ...prices },
        ],
        routes: options.routes,
      }),
    });
    started = { gw, openai, anthropic, gemini };
    ready(started);
  });
  afterAll(async () => {
    await started?.gw.close();
    await started?.openai.close();
    await started?.anthropic.close();
    await started?.gemini.close();
  });
  beforeEach(() => {
    started?.openai.reset();
    started?.anthropic.reset();
    started?.gemini.reset();
  });
}
