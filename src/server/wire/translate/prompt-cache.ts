/**
 * Prompt caching's markers between the styles: Anthropic's `cache_control` (on a block, a tool, the
 * system prompt, or the request's top level for its last block) and OpenAI's
 * `prompt_cache_breakpoint` (on a content part) with the request's `prompt_cache_options`.
 *
 * Both mark the end of a prefix to cache. Lifetimes differ: Anthropic keeps an entry 5 minutes
 * (its default) or 1 hour, OpenAI at least 30 minutes or 12 hours. A lifetime the client wrote
 * goes as the other API's shortest one that lasts as long; one it did not write is each API's own
 * default. Anthropic takes at most four markers, a `1h` one never after a `5m` one; OpenAI writes
 * only the latest four of any number.
 */

import type { MessagesRequest } from "../anthropic-types.js";
import type { ChatCompletionRequest, ChatContentPart, ChatMessage } from "../openai-types.js";
import { asArray, isRecord, type JsonObject } from "./shared.js";

// ---- Anthropic -> OpenAI ----------------------------------------------------------------------

/** An Anthropic `cache_control` as chat's breakpoint: `1h` outlasts OpenAI's 30 minutes only as 12h. */
export function breakpointOf(cacheControl: unknown): JsonObject | undefined {
  if (!isRecord(cacheControl)) return undefined;
  return cacheControl.ttl === "1h" ? { mode: "explicit", ttl: "12h" } : { mode: "explicit" };
}

/** How a translation reads a marker: `breakpointOf`, or `noBreakpoints` for a server without them. */
export type BreakpointOf = (cacheControl: unknown) => JsonObject | undefined;
export const noBreakpoints: BreakpointOf = () => undefined;

/** The part with `breakpoint` on it (a new object), or the part itself when there is none. */
export function withBreakpoint(
  part: ChatContentPart,
  breakpoint: JsonObject | undefined,
): ChatContentPart {
  return breakpoint ? { ...part, prompt_cache_breakpoint: breakpoint } : part;
}

/**
 * A messages request's top-level `cache_control` (Anthropic marks the request's last block), as
 * its `breakpoint`, on the last part of the chat conversation: a text content becomes one text
 * part to carry it.
 */
export function markLastPart(messages: ChatMessage[], breakpoint: JsonObject | undefined): void {
  if (!breakpoint) return;
  for (let i = messages.length - 1; i >= 0; i--) {
    const message = messages[i] as { content?: unknown };
    if (typeof message.content === "string" && message.content !== "") {
      message.content = [
        { type: "text", text: message.content, prompt_cache_breakpoint: breakpoint },
      ];
      return;
    }
    const parts = asArray(message.content) as ChatContentPart[];
    const last = parts.findLastIndex((part) => isRecord(part) && part.type !== "refusal");
    if (last !== -1) {
      parts[last] = withBreakpoint(parts[last], breakpoint);
      return;
    }
  }
}

// ---- OpenAI -> Anthropic ----------------------------------------------------------------------

const longestAnthropicTtl = "1h";

/**
 * A lifetime Anthropic cannot keep (12 hours: it keeps an entry 1 hour at most), as a sentence for
 * the client, or undefined. The request's own options are read from `options` (a Responses
 * client's, whose 12 hours chat cannot carry) or from the chat body's.
 */
export function longCacheSentence(
  chat: ChatCompletionRequest,
  options: unknown = chat.prompt_cache_options,
): string | undefined {
  const long = (value: unknown) => isRecord(value) && value.ttl === "12h";
  const parts = asArray(chat.messages).flatMap((m) => (isRecord(m) ? asArray(m.content) : []));
  if (long(options) || parts.some((part) => isRecord(part) && long(part.prompt_cache_breakpoint)))
    return `A prompt cache lifetime of \`12h\` (\`prompt_cache_options.ttl\` or a \`prompt_cache_breakpoint\`'s \`ttl\`) is not available for this model: its provider keeps a prompt cache at most ${longestAnthropicTtl}; use \`30m\` or leave \`ttl\` out.`;
  return undefined;
}

/**
 * A chat part's marker as Anthropic's `cache_control`: its breakpoint (a lifetime of its own, else
 * the request's `inherited` one, at least 30 minutes: Anthropic's 1h), or an Anthropic
 * `cache_control` a client that knows Anthropic put on the part.
 */
export function cacheControlOf(part: JsonObject, inherited: unknown): JsonObject | undefined {
  if (isRecord(part.cache_control)) return part.cache_control;
  const breakpoint = part.prompt_cache_breakpoint;
  if (!isRecord(breakpoint)) return undefined;
  const ttl = breakpoint.ttl ?? inherited;
  return ttl === undefined
    ? { type: "ephemeral" }
    : { type: "ephemeral", ttl: longestAnthropicTtl };
}

/**
 * The request's `prompt_cache_options` as Anthropic's top-level `cache_control`: the implicit mode
 * (OpenAI's default, where OpenAI picks a breakpoint itself) is Anthropic's automatic marker on the
 * last block. Without options the request sends none, as before: a marker makes Anthropic write
 * the cache, which costs more than reading the prompt once.
 */
export function automaticCacheControl(options: unknown): JsonObject | undefined {
  if (!isRecord(options) || options.mode === "explicit") return undefined;
  return options.ttl === undefined
    ? { type: "ephemeral" }
    : { type: "ephemeral", ttl: longestAnthropicTtl };
}

const anthropicMostMarkers = 4;

/**
 * The markers of a Messages body as Anthropic takes them: the latest four (OpenAI, too, writes
 * only its latest four; the top-level marker is the latest), each before a `1h` one lengthened to
 * `1h`, since Anthropic refuses a `1h` marker after a shorter one.
 */
export function fitCacheMarkers(body: MessagesRequest): void {
  const holders: JsonObject[] = [];
  for (const tool of asArray(body.tools)) if (isRecord(tool)) holders.push(tool);
  for (const block of asArray(body.system)) if (isRecord(block)) holders.push(block);
  for (const message of asArray(body.messages)) {
    if (!isRecord(message)) continue;
    for (const block of asArray(message.content)) if (isRecord(block)) holders.push(block);
  }
  holders.push(body);
  const marked = holders.filter((holder) => isRecord(holder.cache_control));
  for (const holder of marked.splice(0, Math.max(0, marked.length - anthropicMostMarkers)))
    delete holder.cache_control;
  const lastLong = marked.findLastIndex(
    (holder) => (holder.cache_control as JsonObject).ttl === longestAnthropicTtl,
  );
  for (const holder of marked.slice(0, Math.max(0, lastLong)))
    holder.cache_control = { type: "ephemeral", ttl: longestAnthropicTtl };
}
