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

  it("responses: response.created, an error event, then a whole response.failed echoing the request", async () => {
    const events = await parse(
      streamErrorEvent("responses", "cut off", {
        request: { model: "m", input: "hi", instructions: "Be brief.", temperature: 0.2 },
        model: "m",
        code: "all_providers_failed",
      }),
    );
    expect(events.map((e) => e.event)).toEqual(["response.created", "error", "response.failed"]);
    expect(events[0].data).toMatchObject({
      sequence_number: 0,
      response: { status: "in_progress", model: "m", instructions: "Be brief." },
    });
    expect(events[1].data).toEqual({
      type: "error",
      code: "all_providers_failed",
      message: "cut off",
      param: null,
      sequence_number: 1,
    });
    expect(events[2].data).toMatchObject({
      type: "response.failed",
      sequence_number: 2,
      response: {
        object: "response",
        model: "m",
        status: "failed",
        error: { code: "server_error", message: "cut off" },
        instructions: "Be brief.",
        temperature: 0.2,
        top_p: null,
        tools: [],
        tool_choice: "auto",
        metadata: {},
        output: [],
      },
    });
  });
});
