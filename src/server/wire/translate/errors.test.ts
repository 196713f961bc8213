import { describe, expect, it } from "vitest";
import { parseSSE } from "../sse.js";
import { streamErrorEvent } from "./errors.js";

async function parse(text: string) {
  async function* body() {
    yield new TextEncoder().encode(text);
  }
  const out: Array<{ event?: string; data: unknown }> = [];
  for await (const m of parseSSE(body())) out.push({ event: m.event, data: JSON.parse(m.data) });
  return out;
}

describe("streamErrorEvent", () => {
  it("chat: a data chunk carrying an OpenAI error", async () => {
    expect(await parse(streamErrorEvent("chat", "cut off"))).toEqual([
      {
        event: undefined,
        data: {
          error: {
            message: "cut off",
            type: "upstream_error",
            code: "upstream_error",
            param: null,
          },
        },
      },
    ]);
  });

  it("messages: an Anthropic error event", async () => {
    expect(await parse(streamErrorEvent("messages", "cut off"))).toEqual([
      { event: "error", data: { type: "error", error: { type: "api_error", message: "cut off" } } },
    ]);
  });

  it("responses: an error event then response.failed, numbered from the given sequence", async () => {
    const events = await parse(
      streamErrorEvent("responses", "cut off", {
        sequenceNumber: 9,
        responseId: "resp_1",
        model: "m",
      }),
    );
    expect(events.map((e) => e.event)).toEqual(["error", "response.failed"]);
    expect(events[0].data).toEqual({
      type: "error",
      code: "upstream_error",
      message: "cut off",
      param: null,
      sequence_number: 9,
    });
    expect(events[1].data).toMatchObject({
      type: "response.failed",
      sequence_number: 10,
      response: {
        id: "resp_1",
        model: "m",
        status: "failed",
        error: { code: "server_error", message: "cut off" },
      },
    });
  });
});
