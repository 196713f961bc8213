// The benchmark's gateway set-up, shared by bench.mjs (the gateway in the bench process) and
// bench-rss.mjs (`gateway serve` in its own): one OpenAI-wire provider on the fake upstream, one
// priced model, one account whose balance and rate limit the load never reaches.
export const benchKey = "kn-bench-0123456789abcdefghijklmnopqrstuv";

export function benchConfig(upstreamUrl) {
  return {
    providers: [
      { id: "up", wire: "openai", base_url: `${upstreamUrl}/v1`, api_keys: ["sk-bench-upstream"] },
    ],
    models: [
      {
        name: "bench-model",
        provider: "up",
        upstream_model: "bench-upstream",
        price_input_per_mtok: 1_000,
        price_output_per_mtok: 2_000,
      },
    ],
    accounts: [
      {
        id: "bench",
        // The Postgres store refuses an amount a double cannot hold exactly: in micro-IDR this
        // balance is well under that, and still more than the bench spends.
        balance_idr: 1_000_000_000,
        rpm_limit: 1_000_000_000,
        keys: [{ id: "bench-key", value: benchKey }],
      },
    ],
  };
}

/**
 * The chat completion every benchmark request sends. `paceMs`: the fake upstream paces the
 * stream's chunks that many ms apart (scripts/bench-upstream.mjs).
 */
export const benchBody = (stream, paceMs) =>
  JSON.stringify({
    model: "bench-model",
    max_tokens: 16,
    stream,
    messages: [{ role: "user", content: "Say hi" }],
    ...(paceMs === undefined ? {} : { metadata: { bench_pace_ms: String(paceMs) } }),
  });

export const benchHeaders = {
  "content-type": "application/json",
  authorization: `Bearer ${benchKey}`,
};
