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
 * stream's chunks that many ms apart (scripts/bench-upstream.mjs). BENCH_BODY_KB=100: a coding
 * agent's turn instead of one short message, a conversation of about that many KB.
 */
export const benchBody = (stream, paceMs) =>
  JSON.stringify({
    model: "bench-model",
    max_tokens: 16,
    stream,
    messages: conversation(Number(process.env.BENCH_BODY_KB ?? 0)),
    ...(paceMs === undefined ? {} : { metadata: { bench_pace_ms: String(paceMs) } }),
  });

/**
 * A streamed legacy completion (POST /v1/completions), as editor autocomplete sends one: a prompt
 * the gateway sends on as one user message, its pacing as `benchBody`'s.
 */
export const benchCompletionBody = (paceMs) =>
  JSON.stringify({
    model: "bench-model",
    max_tokens: 16,
    stream: true,
    prompt: "def add(a, b):",
    ...(paceMs === undefined ? {} : { metadata: { bench_pace_ms: String(paceMs) } }),
  });

/**
 * An agent's conversation of about `kb` KB: a system prompt, then turns that read files through a
 * tool (code with quotes and braces in its strings, tool calls with JSON arguments); with 0, one
 * short message.
 */
function conversation(kb) {
  if (!kb) return [{ role: "user", content: "Say hi" }];
  const messages = [{ role: "system", content: "You are a coding agent.\n".repeat(40) }];
  for (let i = 0, size = 0; size < kb * 1024; i++) {
    const file =
      `File src/x${i}.ts:\n\`\`\`ts\nexport function f${i}(a: number) {\n  return "q\\"uote" + a * ${i};\n}\n\`\`\`\n`.repeat(
        8,
      );
    const call = { path: `src/x${i}.ts`, lines: [1, 40] };
    messages.push(
      { role: "user", content: `Read the next file. ${file}` },
      {
        role: "assistant",
        content: null,
        tool_calls: [
          {
            id: `call_${i}`,
            type: "function",
            function: { name: "read_file", arguments: JSON.stringify(call) },
          },
        ],
      },
      { role: "tool", tool_call_id: `call_${i}`, content: file },
    );
    size += file.length * 2 + 250;
  }
  return messages;
}

export const benchHeaders = {
  "content-type": "application/json",
  authorization: `Bearer ${benchKey}`,
};
