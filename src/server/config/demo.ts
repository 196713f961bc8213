import type { ConfigInput } from "./schema.js";

/**
 * What `gateway serve` creates on an empty database with no --config: one account with money,
 * mock models for every modality (paid, :free, subscribers-only) and a route with fallback.
 * The account's key is minted fresh and printed once (see startGateway).
 */
export const demoAccountId = "demo";

export const demoConfig: ConfigInput = {
  providers: [
    { id: "mock", wire: "mock", mock: { first_token_ms: 30, chunk_interval_ms: 5 } },
    { id: "mock-down", wire: "mock", mock: { fail_status: 503 } },
  ],
  models: [
    {
      name: "mock-gpt",
      provider: "mock",
      price_input_per_mtok: 15_000,
      price_output_per_mtok: 60_000,
    },
    {
      name: "mock-claude",
      provider: "mock",
      price_input_per_mtok: 45_000,
      price_output_per_mtok: 225_000,
    },
    { name: "mock-gpt:free", provider: "mock", upstream_model: "mock-gpt" },
    {
      name: "mock-pro",
      provider: "mock",
      subscribers_only: true,
      price_input_per_mtok: 50_000,
      price_output_per_mtok: 150_000,
    },
    {
      name: "mock-flaky",
      provider: "mock-down",
      price_input_per_mtok: 15_000,
      price_output_per_mtok: 60_000,
    },
    { name: "mock-image", provider: "mock", modality: "image", price_per_unit: 600 },
    { name: "mock-tts", provider: "mock", modality: "speech", price_per_unit: 0.25 },
    { name: "mock-whisper", provider: "mock", modality: "transcription", price_per_unit: 100 },
    { name: "mock-music", provider: "mock", modality: "music", price_per_unit: 200 },
    { name: "mock-video", provider: "mock", modality: "video", price_per_unit: 1500 },
    { name: "mock-embed", provider: "mock", modality: "embedding", price_input_per_mtok: 300 },
  ],
  routes: [{ name: "mock-auto", steps: ["mock-flaky", "mock-gpt"] }],
  accounts: [
    {
      id: demoAccountId,
      name: "Demo account",
      balance_idr: 100_000,
      rpm_limit: 120,
      tier: "free",
      keys: [],
    },
  ],
};
