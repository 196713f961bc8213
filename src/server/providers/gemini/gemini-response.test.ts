import { describe, expect, it } from "vitest";
import { StreamBroken } from "../../wire/to-client.js";
import { UpstreamFailure } from "../../wire/upstream-failure.js";
import { finishReasonOf, GeminiStreamToChat, geminiToChat } from "./gemini-response.js";
import { signatureOfCallId } from "./tool-call-ids.js";

describe("geminiToChat", () => {
  it("gives the text, the finish and the usage, thinking counted as output", () => {
    const out = geminiToChat(
      {
        candidates: [
          {
            content: {
              role: "model",
              parts: [{ text: "Let me think.", thought: true }, { text: "Hello" }, { text: "!" }],
            },
            finishReason: "STOP",
            index: 0,
          },
        ],
        usageMetadata: {
          promptTokenCount: 12,
          candidatesTokenCount: 3,
          thoughtsTokenCount: 20,
          cachedContentTokenCount: 4,
          totalTokenCount: 35,
        },
        responseId: "abc",
      },
      "gemini-2.5-flash",
    );
    expect(out).toMatchObject({
      id: "chatcmpl-abc",
      object: "chat.completion",
      model: "gemini-2.5-flash",
      choices: [
        {
          index: 0,
          message: { role: "assistant", content: "Hello!", reasoning_content: "Let me think." },
          finish_reason: "stop",
        },
      ],
      usage: {
        prompt_tokens: 12,
        completion_tokens: 23,
        total_tokens: 35,
        prompt_tokens_details: { cached_tokens: 4 },
        completion_tokens_details: { reasoning_tokens: 20 },
      },
    });
  });

  it("turns function calls into tool calls whose ids carry the thought signature", () => {
    const out = geminiToChat(
      {
        candidates: [
          {
            content: {
              role: "model",
              parts: [
                {
                  functionCall: { name: "weather", args: { city: "Paris" } },
                  thoughtSignature: "c2ln",
                },
                { functionCall: { name: "weather", args: { city: "Rome" } } },
              ],
            },
            finishReason: "STOP",
          },
        ],
      },
      "m",
    );
    const [choice] = out.choices;
    expect(choice.finish_reason).toBe("tool_calls");
    expect(choice.message.content).toBeNull();
    const calls = choice.message.tool_calls ?? [];
    expect(calls.map((c) => c.function)).toEqual([
      { name: "weather", arguments: '{"city":"Paris"}' },
      { name: "weather", arguments: '{"city":"Rome"}' },
    ]);
    expect(signatureOfCallId(calls[0].id)).toBe("c2ln");
    expect(signatureOfCallId(calls[1].id)).toBeUndefined();
    expect(new Set(calls.map((c) => c.id)).size).toBe(2);
  });

  it("gives one choice per candidate (n)", () => {
    const out = geminiToChat(
      {
        candidates: [
          { content: { parts: [{ text: "a" }] }, finishReason: "STOP", index: 0 },
          { content: { parts: [{ text: "b" }] }, finishReason: "MAX_TOKENS", index: 1 },
        ],
      },
      "m",
    );
    expect(out.choices.map((c) => [c.index, c.message.content, c.finish_reason])).toEqual([
      [0, "a", "stop"],
      [1, "b", "length"],
    ]);
  });

  it("refuses a prompt Gemini blocked as a content-policy rejection", () => {
    let caught: unknown;
    try {
      geminiToChat({ promptFeedback: { blockReason: "SAFETY" } }, "m");
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(UpstreamFailure);
    expect(caught).toMatchObject({ kind: "rejected", reason: "content_policy_violation" });
  });

  it("takes an answer without candidates or a block reason as the provider failing", () => {
    expect(() => geminiToChat({ candidates: [] }, "m")).toThrow(UpstreamFailure);
    expect(() => geminiToChat({ usageMetadata: { promptTokenCount: 3 } }, "m")).toThrow(
      expect.objectContaining({ kind: "unavailable" }),
    );
  });

  it("maps every finish reason", () => {
    expect(finishReasonOf("STOP", false)).toBe("stop");
    expect(finishReasonOf("STOP", true)).toBe("tool_calls");
    expect(finishReasonOf("MAX_TOKENS", true)).toBe("length");
    for (const reason of ["SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII"])
      expect(finishReasonOf(reason, false)).toBe("content_filter");
    expect(finishReasonOf("OTHER", false)).toBe("stop");
  });

  it("takes an answer Gemini ended as broken (a malformed function call ...) as the provider failing", () => {
    for (const finishReason of [
      "MALFORMED_FUNCTION_CALL",
      "UNEXPECTED_TOOL_CALL",
      "TOO_MANY_TOOL_CALLS",
    ]) {
      expect(() => geminiToChat({ candidates: [{ finishReason, index: 0 }] }, "m")).toThrow(
        expect.objectContaining({ kind: "unavailable" }),
      );
      const stream = new GeminiStreamToChat("m");
      stream.push({ candidates: [{ content: { role: "model", parts: [{ text: "Let me" }] } }] });
      expect(() => stream.push({ candidates: [{ finishReason }] })).toThrow(StreamBroken);
    }
  });
});

describe("GeminiStreamToChat", () => {
  it("turns each event's parts into deltas, then the finish, then one usage chunk", () => {
    const stream = new GeminiStreamToChat("m");
    const chunks = [
      ...stream.push({
        candidates: [{ content: { role: "model", parts: [{ text: "Hel" }] }, index: 0 }],
        usageMetadata: { promptTokenCount: 9, totalTokenCount: 9 },
      }),
      ...stream.push({
        candidates: [{ content: { role: "model", parts: [{ text: "lo" }] }, index: 0 }],
      }),
      ...stream.push({
        candidates: [
          {
            content: {
              role: "model",
              parts: [{ functionCall: { name: "f", args: { a: 1 } }, thoughtSignature: "c2ln" }],
            },
            finishReason: "STOP",
            index: 0,
          },
        ],
        usageMetadata: { promptTokenCount: 9, candidatesTokenCount: 6, thoughtsTokenCount: 2 },
      }),
      ...stream.finish(),
    ];
    expect(chunks.map((c) => c.choices[0]?.delta ?? null)).toEqual([
      { role: "assistant", content: "Hel" },
      { content: "lo" },
      {
        tool_calls: [
          {
            index: 0,
            id: expect.stringMatching(/^call_/),
            type: "function",
            function: { name: "f", arguments: '{"a":1}' },
          },
        ],
      },
      {},
      null,
    ]);
    expect(chunks.map((c) => c.choices[0]?.finish_reason ?? null)).toEqual([
      null,
      null,
      null,
      "tool_calls",
      null,
    ]);
    expect(chunks.at(-1)?.usage).toMatchObject({ prompt_tokens: 9, completion_tokens: 8 });
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
  });

  it("keeps each candidate's deltas on its own choice index", () => {
    const stream = new GeminiStreamToChat("m");
    const chunks = stream.push({
      candidates: [
        { content: { parts: [{ text: "a" }] }, index: 0, finishReason: "STOP" },
        { content: { parts: [{ text: "b" }] }, index: 1, finishReason: "STOP" },
      ],
    });
    expect(chunks.map((c) => [c.choices[0].index, c.choices[0].delta.content ?? null])).toEqual([
      [0, "a"],
      [0, null],
      [1, "b"],
      [1, null],
    ]);
  });

  it("breaks on an error event and refuses a blocked prompt before anything went out", () => {
    const broken = new GeminiStreamToChat("m");
    expect(() => broken.push({ error: { code: 500 } } as never)).toThrow(StreamBroken);
    const blocked = new GeminiStreamToChat("m");
    expect(() => blocked.push({ promptFeedback: { blockReason: "PROHIBITED_CONTENT" } })).toThrow(
      UpstreamFailure,
    );
  });
});
