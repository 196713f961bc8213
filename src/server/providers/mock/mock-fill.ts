/*
 * The mock's answers to what a legacy completion (POST /v1/completions) asks beyond chat:
 * fill-in-the-middle and `echo`, so that an editor's autocomplete works offline. The insertion
 * point is the end of the prompt when the request has a `suffix`, or the hole of a FIM template
 * that the editor wrote into the prompt itself (Continue does, by the model's name, for any
 * OpenAI-compatible provider).
 */

/** The text on either side of the insertion point. */
export interface MockFill {
  before: string;
  after: string;
  /** `after` came as `suffix`, apart from the prompt: input of its own. */
  apart: boolean;
}

/**
 * FIM templates as editors write them, prefix first: the marker before the prefix, the hole
 * (where the suffix starts) and the marker after the suffix. Qwen2.5-Coder, CodeGemma and Granite;
 * StarCoder and stable-code; DeepSeek Coder; Code Llama; and Continue's hole filler for chat
 * models (the last `<QUERY>` of its prompt, after its examples).
 */
const prefixFirst: readonly [string, string, string][] = [
  ["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"],
  ["<fim_prefix>", "<fim_suffix>", "<fim_middle>"],
  ["<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"],
  ["<PRE>", "<SUF>", "<MID>"],
  ["<QUERY>\n", "{{FILL_HERE}}", "\n</QUERY>"],
];

/** Where a completion's text goes in, or undefined for a plain prompt. */
export function mockFillOf(body: Record<string, unknown>): MockFill | undefined {
  const prompt = Array.isArray(body.prompt) ? body.prompt[0] : body.prompt;
  if (typeof prompt !== "string") return undefined;
  if (typeof body.suffix === "string" && body.suffix !== "")
    return { before: prompt, after: body.suffix, apart: true };
  for (const [open, hole, close] of prefixFirst) {
    const start = prompt.lastIndexOf(open);
    if (start === -1) continue;
    const at = prompt.indexOf(hole, start + open.length);
    const end = at === -1 ? -1 : prompt.indexOf(close, at + hole.length);
    if (end !== -1)
      return {
        before: prompt.slice(start + open.length, at),
        after: prompt.slice(at + hole.length, end),
        apart: false,
      };
  }
  // Codestral's is suffix first: `[SUFFIX]after[PREFIX]before`.
  const prefix = prompt.lastIndexOf("[PREFIX]");
  const suffix = prefix === -1 ? -1 : prompt.lastIndexOf("[SUFFIX]", prefix);
  if (suffix === -1) return undefined;
  return {
    before: prompt.slice(prefix + "[PREFIX]".length),
    after: prompt.slice(suffix + "[SUFFIX]".length, prefix),
    apart: false,
  };
}

/** How much of a line a fill's lead quotes. */
const quoted = 60;

/**
 * The first sentence of a fill: the last line before the insertion point and the first after it,
 * so whoever reads the editor sees where the answer went in.
 */
export function mockFillLead(fill: MockFill): string {
  const lines = (text: string) =>
    text
      .split("\n")
      .map((line) => line.trim())
      .filter((line) => line !== "");
  const before = lines(fill.before).at(-1)?.slice(-quoted);
  const after = lines(fill.after)[0]?.slice(0, quoted);
  if (before !== undefined && after !== undefined)
    return `Mock fill between "${before}" and "${after}".`;
  if (before !== undefined) return `Mock fill after "${before}".`;
  if (after !== undefined) return `Mock fill before "${after}".`;
  return "Mock fill.";
}
