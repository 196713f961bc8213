/**
 * Token usage, normalised across wire styles, plus the conversions between the
 * OpenAI and Anthropic usage shapes.
 *
 * Convention: `input_tokens` counts every prompt token, cached ones included
 * (the OpenAI `prompt_tokens` meaning). Anthropic reports cache reads and cache
 * writes outside `input_tokens`, so they are added in here and also kept apart
 * in the optional breakdown fields for pricing that distinguishes them.
 */

import type { AnthropicUsage } from "./anthropic-types.js";
import { closingQuote } from "./json-depth.js";
import type { ChatUsage } from "./openai-types.js";

export type Usage = {
  input_tokens: number;
  output_tokens: number;
  cache_read_input_tokens?: number;
  cache_creation_input_tokens?: number;
  /**
   * The part of `output_tokens` the model spent thinking, where the provider says (chat's
   * `completion_tokens_details.reasoning_tokens`, Anthropic's `output_tokens_details.thinking_tokens`).
   */
  reasoning_tokens?: number;
};

export function emptyUsage(): Usage {
  return { input_tokens: 0, output_tokens: 0 };
}

/**
 * Two calls' usage as one request's (a Responses turn compacted before it was answered): each
 * part summed, an optional part only where either call had it.
 */
export function sumUsage(a: Usage, b: Usage): Usage {
  const sum: Usage = {
    input_tokens: a.input_tokens + b.input_tokens,
    output_tokens: a.output_tokens + b.output_tokens,
  };
  for (const part of [
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "reasoning_tokens",
  ] as const)
    if (a[part] !== undefined || b[part] !== undefined) sum[part] = (a[part] ?? 0) + (b[part] ?? 0);
  return sum;
}

/** Roughly four characters per token, as English text averages with common tokenizers. */
export function estimateTokens(text: string): number {
  return estimateTokensOfLength(text.length);
}

/** The estimate for a text of `chars` characters, for a text not built yet. */
export function estimateTokensOfLength(chars: number): number {
  return chars === 0 ? 0 : Math.max(1, Math.ceil(chars / 4));
}

/**
 * What an answer is billed when its upstream reported no usage at all (an OpenAI-compatible
 * server may leave it out, or ignore `stream_options.include_usage`): the estimate instead of
 * zero, so a provider that omits usage does not make a paid model free.
 */
export function usageOrEstimate(reported: Usage, estimate: () => Usage): Usage {
  if (reported.input_tokens > 0 && reported.output_tokens > 0) return reported;
  // Part by part: a report that leaves a part out (an OpenAI-compatible server that counts only
  // the prompt) has that part estimated, never taken as zero.
  const estimated = estimate();
  return {
    ...reported,
    input_tokens: reported.input_tokens || estimated.input_tokens,
    output_tokens: reported.output_tokens || estimated.output_tokens,
  };
}

/** The text of a chat completion's answers and tool calls, for an estimate of its output. */
export function chatOutputText(resp: {
  choices?: { message?: { content?: unknown; tool_calls?: unknown } }[];
}): string {
  let text = "";
  for (const choice of resp.choices ?? []) {
    const message = choice.message;
    if (typeof message?.content === "string") text += message.content;
    if (!Array.isArray(message?.tool_calls)) continue;
    for (const call of message.tool_calls as {
      function?: { name?: unknown; arguments?: unknown };
      custom?: { name?: unknown; input?: unknown };
    }[]) {
      if (typeof call.function?.name === "string") text += call.function.name;
      if (typeof call.function?.arguments === "string") text += call.function.arguments;
      if (typeof call.custom?.name === "string") text += call.custom.name;
      if (typeof call.custom?.input === "string") text += call.custom.input;
    }
  }
  return text;
}

/** The text of a Messages answer's blocks (text, thinking, tool calls), for an estimate of its output. */
export function messagesOutputText(resp: { content?: unknown }): string {
  let text = "";
  if (!Array.isArray(resp.content)) return text;
  for (const block of resp.content as Record<string, unknown>[]) {
    if (typeof block.text === "string") text += block.text;
    if (typeof block.thinking === "string") text += block.thinking;
    if (block.type === "tool_use")
      text += `${block.name ?? ""}${JSON.stringify(block.input ?? {})}`;
  }
  return text;
}

/** The text of a Responses answer's messages and function calls, for an estimate of its output. */
export function responsesOutputText(resp: { output?: unknown }): string {
  let text = "";
  if (!Array.isArray(resp.output)) return text;
  for (const item of resp.output as Record<string, unknown>[]) {
    if (item.type === "function_call") text += `${item.name ?? ""}${item.arguments ?? ""}`;
    if (!Array.isArray(item.content)) continue;
    for (const part of item.content as Record<string, unknown>[]) {
      if (typeof part.text === "string") text += part.text;
    }
  }
  return text;
}

function asRecord(value: unknown): Record<string, unknown> | undefined {
  return typeof value === "object" && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : undefined;
}

function count(value: unknown): number {
  return typeof value === "number" && Number.isFinite(value) && value > 0 ? value : 0;
}

/**
 * Usage of a chat completion or chunk (reads `.usage`), or of a bare `usage` object.
 * Zeros when there is none, so callers can always add it up.
 */
export function usageFromChat(respOrChunk: unknown): Usage {
  const outer = asRecord(respOrChunk);
  const usage = asRecord(outer?.usage) ?? (outer && "prompt_tokens" in outer ? outer : undefined);
  if (!usage) return emptyUsage();
  const details = asRecord(usage.prompt_tokens_details);
  const result: Usage = {
    input_tokens: count(usage.prompt_tokens),
    output_tokens: count(usage.completion_tokens),
  };
  const cached = count(details?.cached_tokens);
  if (cached > 0) result.cache_read_input_tokens = cached;
  const written = count(details?.cache_write_tokens);
  if (written > 0) result.cache_creation_input_tokens = written;
  const reasoning = count(asRecord(usage.completion_tokens_details)?.reasoning_tokens);
  if (reasoning > 0) result.reasoning_tokens = reasoning;
  return result;
}

/**
 * Usage of a Messages response, a `message_start` event (reads `.message.usage`),
 * a `message_delta` event, or a bare usage object. Fields absent from the input
 * are absent from the result's breakdown and count as zero in the totals.
 */
export function usageFromMessages(value: unknown): Usage {
  const outer = asRecord(value);
  const usage =
    asRecord(asRecord(outer?.message)?.usage) ??
    asRecord(outer?.usage) ??
    (outer && ("input_tokens" in outer || "output_tokens" in outer) ? outer : undefined);
  if (!usage) return emptyUsage();
  const cacheRead = count(usage.cache_read_input_tokens);
  const cacheWrite = count(usage.cache_creation_input_tokens);
  const result: Usage = {
    input_tokens: count(usage.input_tokens) + cacheRead + cacheWrite,
    output_tokens: count(usage.output_tokens),
  };
  if (cacheRead > 0) result.cache_read_input_tokens = cacheRead;
  if (cacheWrite > 0) result.cache_creation_input_tokens = cacheWrite;
  const thinking = count(asRecord(usage.output_tokens_details)?.thinking_tokens);
  if (thinking > 0) result.reasoning_tokens = thinking;
  return result;
}

/**
 * Normalised usage -> OpenAI chat usage object. Tokens written to the cache are reported where
 * there were any (`cache_write_tokens`, which OpenAI's API too reports only for some models).
 */
export function toChatUsage(usage: Usage): ChatUsage {
  const details: NonNullable<ChatUsage["prompt_tokens_details"]> = {
    cached_tokens: usage.cache_read_input_tokens ?? 0,
  };
  if (usage.cache_creation_input_tokens)
    details.cache_write_tokens = usage.cache_creation_input_tokens;
  const out: ChatUsage = {
    prompt_tokens: usage.input_tokens,
    completion_tokens: usage.output_tokens,
    total_tokens: usage.input_tokens + usage.output_tokens,
    prompt_tokens_details: details,
  };
  if (usage.reasoning_tokens)
    out.completion_tokens_details = { reasoning_tokens: usage.reasoning_tokens };
  return out;
}

/**
 * A stream's Anthropic usage after one more report (`message_start`'s, or a `message_delta`'s):
 * the counts are cumulative, so a field present later replaces the earlier one, and a field a
 * report leaves out or sends as null keeps its value (a `message_delta` that restates only the
 * uncached input still leaves the cache reads counted).
 */
export function mergeMessagesUsage(previous: Usage, raw: unknown): Usage {
  const usage = asRecord(raw);
  if (!usage) return previous;
  const known = (value: unknown, before: number | undefined) =>
    typeof value === "number" && Number.isFinite(value) ? count(value) : (before ?? 0);
  const cacheRead = known(usage.cache_read_input_tokens, previous.cache_read_input_tokens);
  const cacheWrite = known(usage.cache_creation_input_tokens, previous.cache_creation_input_tokens);
  const previousUncached =
    previous.input_tokens -
    (previous.cache_read_input_tokens ?? 0) -
    (previous.cache_creation_input_tokens ?? 0);
  const next: Usage = {
    input_tokens: known(usage.input_tokens, previousUncached) + cacheRead + cacheWrite,
    output_tokens: known(usage.output_tokens, previous.output_tokens),
  };
  if (cacheRead > 0) next.cache_read_input_tokens = cacheRead;
  if (cacheWrite > 0) next.cache_creation_input_tokens = cacheWrite;
  const thinking = known(
    asRecord(usage.output_tokens_details)?.thinking_tokens,
    previous.reasoning_tokens,
  );
  if (thinking > 0) next.reasoning_tokens = thinking;
  return next;
}

/**
 * Normalised usage -> Anthropic usage object (uncached input kept apart, as Anthropic does), with
 * every key of a `message_delta`'s usage the @anthropic-ai/sdk types require: the thinking part
 * where the provider said, and no server tool requests (a translated answer runs none).
 */
export function toAnthropicUsage(usage: Usage): AnthropicUsage {
  const cacheRead = usage.cache_read_input_tokens ?? 0;
  const cacheWrite = usage.cache_creation_input_tokens ?? 0;
  return {
    input_tokens: Math.max(0, usage.input_tokens - cacheRead - cacheWrite),
    output_tokens: usage.output_tokens,
    cache_creation_input_tokens: cacheWrite,
    cache_read_input_tokens: cacheRead,
    output_tokens_details: usage.reasoning_tokens
      ? { thinking_tokens: usage.reasoning_tokens }
      : null,
    server_tool_use: null,
  };
}

/**
 * A whole message's usage (an answer's, `message_start`'s): `toAnthropicUsage` with the keys only
 * a message's usage has, null where the gateway has nothing to say (the cache writes' split by
 * lifetime, where and how fast the provider ran the model). `tier` is the capacity that served
 * the answer, as Anthropic names it, where the provider said.
 */
export function toAnthropicMessageUsage(
  usage: Usage,
  tier: "standard" | "priority" | null = null,
): AnthropicUsage {
  return {
    ...toAnthropicUsage(usage),
    cache_creation: null,
    inference_geo: null,
    service_tier: tier,
    speed: null,
  };
}

/**
 * The estimate of a request's input where its provider reported none: the characters of the
 * body's string values (its text, tool definitions and roles, not its JSON syntax or keys), four
 * to a token. A whole-body estimate would make a stream left before the provider's usage arrived
 * cost more than the finished stream.
 */
export function estimateRequestTokens(body: unknown): number {
  return estimateTokensOfLength(stringChars(body, 0));
}

function stringChars(value: unknown, depth: number): number {
  if (typeof value === "string") return value.length;
  if (typeof value !== "object" || value === null || depth > 64) return 0;
  let total = 0;
  if (Array.isArray(value)) {
    for (const item of value) total += stringChars(item, depth + 1);
    return total;
  }
  for (const [key, item] of Object.entries(value)) {
    if (key !== "model") total += stringChars(item, depth + 1);
  }
  return total;
}

/**
 * What a stream's provider reported and what reached its client, from which it is billed: the
 * provider's usage when it reported the whole answer; otherwise, part by part, what it reported
 * (an anthropic-wire stream reports its input at the start), the input estimated where it did
 * not, and never less output than was delivered. Delivered output is counted the same way on
 * every wire and style: each delta of text, tool arguments or reasoning handed to the client is at
 * least one token, and at least one token for every four characters.
 *
 * A delta is counted as the piece that carries it is made, and delivered once its writer says the
 * piece left the gateway (`taken`, `written`, then `reached`): the writer asks for the next piece
 * before it writes the one it holds, so a client that leaves is not billed the output read ahead
 * of it, and a piece still in the gateway's buffer when a client that read slowly left never
 * reached it. A report counts as it is read, written or not: it is the provider's bill for the
 * answer so far.
 */
export class StreamMeter {
  private reported: Usage = emptyUsage();
  private complete = false;
  private finishSeen = false;
  /** Deltas and their characters in the pieces made so far. */
  private deltas = 0;
  private chars = 0;
  /** The same up to the piece the writer holds. */
  private takenDeltas = 0;
  private takenChars = 0;
  /**
   * The same at each piece handed to the client's connection and not yet out of the gateway, oldest
   * first, two numbers a piece from `onWay`.
   */
  private readonly onWayCounts: number[] = [];
  private onWay = 0;
  /** The same up to the last piece that left the gateway for the client. */
  private writtenDeltas = 0;
  private writtenChars = 0;
  private inputEstimate: number | undefined;
  /**
   * The indexes of the answers the provider said finished, of the `answers` asked for (chat's
   * `n`): a provider that says one answer's finish twice has not finished another.
   */
  private readonly finishes = new Set<number>();

  constructor(
    private readonly estimate: () => number,
    private readonly answers = 1,
  ) {}

  /** The input's estimate, made once: a stream's delivery marks read the bill again and again. */
  estimateInput(): number {
    this.inputEstimate ??= this.estimate();
    return this.inputEstimate;
  }

  /**
   * Output of `chars` characters put in a piece for the client, in `deltas` deltas (a chunk of `n`
   * answers carries one for each choice with text).
   */
  delivered(chars: number, deltas = 1): void {
    if (chars <= 0) return;
    this.deltas += Math.max(1, deltas);
    this.chars += chars;
  }

  /** Some output (a delta of text, a tool call or reasoning) is in the pieces made so far. */
  madeOutput(): boolean {
    return this.deltas > 0;
  }

  /** The writer holds a piece: every delta counted so far is in it or in a piece before it. */
  taken(): void {
    this.takenDeltas = this.deltas;
    this.takenChars = this.chars;
  }

  /** The piece the writer holds was handed to the client's connection (`reached` says when it left). */
  written(): void {
    this.onWayCounts.push(this.takenDeltas, this.takenChars);
  }

  /**
   * The oldest piece handed to the connection left the gateway whole (`left`), or never will (the
   * connection closed first). Pieces leave in the order they were written.
   */
  reached(left: boolean): void {
    const counts = this.onWayCounts;
    const at = this.onWay;
    if (at >= counts.length) return;
    if (left) {
      this.writtenDeltas = counts[at];
      this.writtenChars = counts[at + 1];
    }
    this.onWay = at + 2;
    if (this.onWay === counts.length) {
      counts.length = 0;
      this.onWay = 0;
    }
  }

  /**
   * The provider said the answer at `index` (a choice's, a candidate's) finished. The answer is
   * whole once each of those asked for did: a report read while one of `n` answers is still being
   * written is of the answer so far. An index outside those asked for finishes none of them.
   */
  finished(index = 0): void {
    if (!Number.isInteger(index) || index < 0 || index >= this.answers) return;
    this.finishes.add(index);
    if (this.finishes.size === this.answers) this.finishSeen = true;
  }

  /**
   * Every answer asked for finished. A stream whose provider ends it before then (even with its
   * `[DONE]`) was cut short: one of `n` answers finished is not the whole answer.
   */
  answered(): boolean {
    return this.finishSeen;
  }

  /**
   * Usage the provider reported. Reports are cumulative, so a number in a later one replaces the
   * earlier; `final` marks the report of the whole answer (a usage report after a finish counts
   * as final too).
   */
  report(usage: Usage, final = false): void {
    if (usage.input_tokens === 0 && usage.output_tokens === 0) return;
    this.reported = {
      ...this.reported,
      ...usage,
      input_tokens: usage.input_tokens || this.reported.input_tokens,
      output_tokens: usage.output_tokens || this.reported.output_tokens,
    };
    if (final || this.finishSeen) this.complete = true;
  }

  /** Output tokens that left the gateway for the client, by the one count every wire uses. */
  deliveredTokens(): number {
    return Math.max(this.writtenDeltas, estimateTokensOfLength(this.writtenChars));
  }

  /** The usage the stream is billed: output as far as it left the gateway for the client. */
  billed(): Usage {
    return this.bill(this.deliveredTokens());
  }

  /**
   * The usage the stream is billed once every piece made so far is written: what a delivery mark
   * covers before the piece goes out, and what a translated stream's closing events report.
   */
  billedAhead(): Usage {
    return this.bill(Math.max(this.deltas, estimateTokensOfLength(this.chars)));
  }

  private bill(delivered: number): Usage {
    // The whole answer's report wins part by part: a part it leaves out is estimated (the input)
    // or what was delivered (the output), never zero.
    if (this.complete)
      return {
        ...this.reported,
        input_tokens: this.reported.input_tokens || this.estimateInput(),
        output_tokens: this.reported.output_tokens || delivered,
      };
    return {
      ...this.reported,
      input_tokens: this.reported.input_tokens || this.estimateInput(),
      output_tokens: Math.max(this.reported.output_tokens, delivered),
    };
  }
}

/**
 * The characters of text in a JSON event's string fields named in `fields` (a delta's content,
 * arguments, reasoning), read from its text so that an event passed through is never parsed.
 * `fields` finds a key and its value's opening quote; the value's end is found with indexOf
 * (`closingQuote`): a pattern that matched the value itself, a character at a time, overflowed
 * the stack on a string of some millions of characters, which an event may carry.
 */
export function deltaChars(data: string, fields: RegExp): number {
  let total = 0;
  fields.lastIndex = 0;
  for (let match = fields.exec(data); match !== null; match = fields.exec(data)) {
    const open = fields.lastIndex - 1;
    const close = closingQuote(data, open);
    if (close === -1) break;
    total += jsonTextLength(data.slice(open + 1, close));
    fields.lastIndex = close + 1;
  }
  return total;
}

/**
 * The length of a JSON string's text from its escaped form as written (without its quotes): each
 * escape (`\n`, `\"`, `\u4e2d`) is the one character it stands for, as a parsed string's length
 * counts it, so a delta is counted the same passed through or translated.
 */
export function jsonTextLength(escaped: string): number {
  let at = escaped.indexOf("\\");
  if (at === -1) return escaped.length;
  let length = escaped.length;
  while (at !== -1) {
    // `\uXXXX` is six characters for one, any other escape two for one.
    const width = escaped.charCodeAt(at + 1) === 117 /* u */ ? 6 : 2;
    length -= width - 1;
    at = escaped.indexOf("\\", at + width);
  }
  return length;
}

/**
 * Chat chunks' generated text: content, a tool call's name and arguments, reasoning, refusals. A
 * name is output the model wrote, and the only output of a call cut before its arguments.
 */
export const chatDeltaFields =
  /"(?:content|name|arguments|input|reasoning_content|reasoning|refusal)"\s*:\s*"/g;
/**
 * The tool name in an event that opens a call (a messages `content_block_start`, a Responses
 * `response.output_item.added`): output the model wrote, sent before any of the call's input.
 */
export const callNameField = /"name"\s*:\s*"/g;
/** Messages `content_block_delta` fields: text, tool input JSON, thinking. */
export const messagesDeltaFields = /"(?:text|partial_json|thinking)"\s*:\s*"/g;
/** Responses `*.delta` events' text. */
export const responsesDeltaFields = /"delta"\s*:\s*"/g;
