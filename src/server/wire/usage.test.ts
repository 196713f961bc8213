import { describe, expect, it } from "vitest";
import {
  deltaChars,
  messagesDeltaFields,
  toAnthropicUsage,
  toChatUsage,
  usageFromChat,
  usageFromMessages,
} from "./usage.js";

describe("usage", () => {
  it("reads chat usage from a response, a chunk or a bare object, zeros when absent", () => {
    const usage = { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 };
    expect(usageFromChat({ usage })).toEqual({ input_tokens: 10, output_tokens: 5 });
    expect(usageFromChat(usage)).toEqual({ input_tokens: 10, output_tokens: 5 });
    expect(usageFromChat({ choices: [] })).toEqual({ input_tokens: 0, output_tokens: 0 });
    expect(usageFromChat(null)).toEqual({ input_tokens: 0, output_tokens: 0 });
    expect(
      usageFromChat({ usage: { ...usage, prompt_tokens_details: { cached_tokens: 4 } } }),
    ).toEqual({ input_tokens: 10, output_tokens: 5, cache_read_input_tokens: 4 });
  });

  it("counts Anthropic cache reads and writes into input_tokens and keeps the breakdown", () => {
    const usage = {
      input_tokens: 3,
      output_tokens: 7,
      cache_read_input_tokens: 100,
      cache_creation_input_tokens: 20,
    };
    const expected = {
      input_tokens: 123,
      output_tokens: 7,
      cache_read_input_tokens: 100,
      cache_creation_input_tokens: 20,
    };
    expect(usageFromMessages({ usage })).toEqual(expected);
    expect(usageFromMessages({ type: "message_start", message: { usage } })).toEqual(expected);
    expect(usageFromMessages(usage)).toEqual(expected);
    expect(usageFromMessages({ type: "ping" })).toEqual({ input_tokens: 0, output_tokens: 0 });
  });

  it("converts to both wire shapes and back without losing counts", () => {
    const usage = {
      input_tokens: 123,
      output_tokens: 7,
      cache_read_input_tokens: 100,
      cache_creation_input_tokens: 20,
    };
    expect(toChatUsage(usage)).toEqual({
      prompt_tokens: 123,
      completion_tokens: 7,
      total_tokens: 130,
      prompt_tokens_details: { cached_tokens: 100, cache_write_tokens: 20 },
    });
    expect(usageFromChat(toChatUsage(usage))).toEqual(usage);
    const anthropic = toAnthropicUsage(usage);
    expect(anthropic).toEqual({
      input_tokens: 3,
      output_tokens: 7,
      cache_read_input_tokens: 100,
      cache_creation_input_tokens: 20,
      output_tokens_details: null,
      server_tool_use: null,
    });
    expect(usageFromMessages(anthropic)).toEqual(usage);
  });

  it("counts the delta text of a value of millions of characters, each escape one character", () => {
    const event = (text: string) =>
      JSON.stringify({
        type: "content_block_delta",
        index: 0,
        delta: { type: "text_delta", text },
      });
    const long = "x".repeat(9_000_000);
    expect(deltaChars(event(long), messagesDeltaFields)).toBe(long.length);
    // Escapes only, and quotes behind runs of backslashes: each is the one character it stands for.
    const escaped = '\\"\n'.repeat(2_000_000);
    expect(deltaChars(event(escaped), messagesDeltaFields)).toBe(escaped.length);
    expect(deltaChars(`${event("ab")}${event('c"d')}`, messagesDeltaFields)).toBe(5);
  });
});
