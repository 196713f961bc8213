import { describe, expect, it } from "vitest";
import type { CompletionRequest } from "./completion-types.js";
import { SSEStream } from "./relay.js";
import { passThroughChat } from "./to-client.js";
import { StreamMeter } from "./usage.js";

describe("passThroughChat", () => {
  const chunk = (fields: Record<string, unknown>, model = "up") =>
    JSON.stringify({ id: "c", object: "chat.completion.chunk", model, ...fields });
  const delta = (d: Record<string, unknown>, finish: string | null = null) => ({
    choices: [{ index: 0, delta: d, finish_reason: finish }],
  });
  const upstream = [
    chunk(delta({ role: "assistant", content: 'He said "model": "up"' })),
    chunk(delta({ content: "model" })),
    chunk(delta({ content: "error" })),
    chunk(
      delta({ tool_calls: [{ index: 0, function: { name: "lookup", arguments: '{"q":"x"}' } }] }),
    ),
    chunk({ ...delta({ content: "!" }), usage: null }),
    chunk(delta({}, "stop")),
    chunk({ choices: [], usage: { prompt_tokens: 3, completion_tokens: 9, total_tokens: 12 } }),
  ];

  async function relayed(parts: string[]) {
    const meter = new StreamMeter(() => 0);
    const req = {
      style: "chat",
      body: {},
      stream: true,
      clientModel: "mine",
    } as unknown as CompletionRequest;
    const bytes = new TextEncoder().encode(parts.map((data) => `data: ${data}\n\n`).join(""));
    const body = (async function* () {
      yield bytes;
    })();
    const result = passThroughChat(req, new SSEStream(body), meter);
    let text = "";
    // As the route's writer does: each piece taken, then written, then out of the gateway.
    for (let next = await result.pieces.next(); !next.done; next = await result.pieces.next()) {
      meter.taken();
      text += next.value;
      meter.written();
      meter.reached(true);
    }
    return { text, meter };
  }

  it("passes each ordinary chunk on as written, renaming its model, and counts its delta text", async () => {
    const { text, meter } = await relayed([...upstream, "[DONE]"]);
    const sent = text.split("\n\n").filter(Boolean);
    // The usage chunk the client did not ask for is left out; [DONE] is the gateway's own.
    expect(sent).toEqual([
      ...upstream.slice(0, 6).map((c) => `data: ${c.replace('"model":"up"', '"model":"mine"')}`),
      "data: [DONE]",
    ]);
    // Five deltas: the quoted text as the client reads it (each escape one character), "model",
    // "error", the call's name and arguments, "!".
    const chars = 'He said "model": "up"'.length + 5 + 5 + 6 + '{"q":"x"}'.length + 1;
    expect(meter.deliveredTokens()).toBe(Math.ceil(chars / 4));
    expect(meter.billed()).toMatchObject({ input_tokens: 3, output_tokens: 9 });
  });

  it("ends broken without a finish reason, and on a chunk that carries an error", async () => {
    await expect(relayed([upstream[0]])).rejects.toThrow(/ended before it was complete/);
    const failed = chunk({ ...delta({ content: "x" }), error: { message: "overloaded" } });
    await expect(relayed([upstream[0], failed])).rejects.toThrow(/error chunk/);
  });
});
