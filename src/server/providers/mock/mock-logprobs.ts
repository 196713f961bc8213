import { createHash } from "node:crypto";

/**
 * Log probabilities for the mock's reply, as OpenAI's chat completions give them with
 * `logprobs: true` (and `top_logprobs`): one entry per token, here per word-sized piece of the
 * reply. Deterministic and plausible: the chosen token is always the likeliest of its
 * alternatives, and the probabilities of the listed ones sum to less than one.
 */

export interface TokenLogprob {
  token: string;
  logprob: number;
  bytes: number[];
  top_logprobs: { token: string; logprob: number; bytes: number[] }[];
}

/** OpenAI's bound on `top_logprobs`. */
export const maxTopLogprobs = 20;

const alternatives =
  "a the and of to in is that it for on with as was at by an be this from or are".split(" ");

/** What the request asked for: undefined without `logprobs: true`, else how many alternatives. */
export function mockLogprobsWanted(logprobs: unknown, topLogprobs: unknown): number | undefined {
  if (logprobs !== true) return undefined;
  const top = Number(topLogprobs ?? 0);
  return Number.isInteger(top) ? Math.min(Math.max(top, 0), maxTopLogprobs) : 0;
}

export function mockTokenLogprob(token: string, index: number, top: number): TokenLogprob {
  const seed = createHash("sha256").update(`${index}|${token}`).digest();
  // Between about -2.3 and -0.01: a confident model, never certain.
  const logprob = round(-0.01 - (seed[0] / 255) * 2.3);
  const listed: TokenLogprob["top_logprobs"] = [];
  if (top > 0) listed.push({ token, logprob, bytes: utf8(token) });
  const used = new Set([token]);
  for (let i = 1, k = seed[1]; i < top; i++) {
    let candidate = token;
    while (used.has(candidate)) {
      const other = alternatives[k++ % alternatives.length];
      candidate = token.endsWith(" ") ? `${other} ` : other;
    }
    used.add(candidate);
    listed.push({
      token: candidate,
      logprob: round(logprob - 0.5 * i - seed[(i + 7) % seed.length] / 255),
      bytes: utf8(candidate),
    });
  }
  return { token, logprob, bytes: utf8(token), top_logprobs: listed };
}

/** The `logprobs` of a whole answer's choice, for these pieces of its text. */
export function mockLogprobs(pieces: Iterable<string>, top: number) {
  const content: TokenLogprob[] = [];
  for (const piece of pieces) content.push(mockTokenLogprob(piece, content.length, top));
  return { content, refusal: null };
}

function utf8(text: string): number[] {
  return [...Buffer.from(text, "utf8")];
}

function round(value: number): number {
  return Math.round(value * 1e6) / 1e6;
}
