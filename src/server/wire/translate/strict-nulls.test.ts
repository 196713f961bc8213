import { describe, expect, it } from "vitest";
import type { ChatChunkChoice, ChatCompletionChunk } from "../openai-types.js";
import { type AddedNulls, withoutAddedNulls } from "./strict-nulls.js";

const schema = {
  type: "object",
  properties: { q: { type: "string" }, page: { type: "integer" } },
  required: ["q"],
  additionalProperties: false,
};
const added: AddedNulls = { tools: new Map([["find", schema]]), format: schema };

const chunk = (...choices: Partial<ChatChunkChoice>[]): ChatCompletionChunk => ({
  id: "c",
  object: "chat.completion.chunk",
  created: 1,
  model: "m",
  choices: choices.map((choice) => ({ index: 0, delta: {}, finish_reason: null, ...choice })),
});

async function* of(chunks: ChatCompletionChunk[]): AsyncGenerator<ChatCompletionChunk> {
  yield* chunks;
}

async function through(chunks: ChatCompletionChunk[]): Promise<ChatCompletionChunk[]> {
  const out: ChatCompletionChunk[] = [];
  for await (const piece of withoutAddedNulls(of(chunks), added)) out.push(piece);
  return out;
}

describe("withoutAddedNulls", () => {
  it("holds a strict call's arguments until the next call begins, passes another tool's call as it comes, and keeps each answer apart", async () => {
    const call = (index: number, args: string, name?: string) => ({
      index,
      ...(name ? { id: `call_${index}`, type: "function" as const } : {}),
      function: { ...(name ? { name } : {}), arguments: args },
    });
    const out = await through([
      chunk({ delta: { role: "assistant", content: null } }),
      chunk({ delta: { tool_calls: [call(0, '{"q":"a",', "find")] } }),
      chunk(
        { delta: { tool_calls: [call(0, '"page":null}')] } },
        { index: 1, delta: { content: '{"q":' } },
      ),
      chunk({ delta: { tool_calls: [call(1, '{"x":', "other")] } }),
      chunk({ delta: { tool_calls: [call(1, "null}")] } }),
      chunk({ finish_reason: "tool_calls" }, { index: 1, delta: { content: '"b","page":null}' } }),
      chunk({ index: 1, finish_reason: "stop" }),
    ]);
    const seen = out.flatMap((piece) =>
      piece.choices.map((choice) => ({
        index: choice.index,
        ...(choice.delta.content ? { content: choice.delta.content } : {}),
        ...(choice.delta.tool_calls
          ? {
              calls: choice.delta.tool_calls.map((c) => [
                c.index,
                c.function?.name,
                c.function?.arguments,
              ]),
            }
          : {}),
        ...(choice.finish_reason ? { finish: choice.finish_reason } : {}),
      })),
    );
    expect(seen).toEqual([
      { index: 0 },
      { index: 0, calls: [[0, "find", ""]] },
      { index: 0, calls: [[0, undefined, '{"q":"a"}']] },
      { index: 0, calls: [[1, "other", '{"x":']] },
      { index: 0, calls: [[1, undefined, "null}"]] },
      { index: 0, finish: "tool_calls" },
      { index: 1, content: '{"q":"b"}' },
      { index: 1, finish: "stop" },
    ]);
  });

  it("writes nothing of what a stream cut short held: half an output or half a call's arguments is no answer", async () => {
    const out = await through([
      chunk({ delta: { content: '{"q":"a","pa' } }),
      chunk({
        index: 1,
        delta: {
          tool_calls: [
            { index: 0, id: "c", type: "function", function: { name: "find", arguments: '{"q":' } },
          ],
        },
      }),
    ]);
    expect(out.flatMap((piece) => piece.choices.map((choice) => choice.delta))).toEqual([
      {
        tool_calls: [
          { index: 0, id: "c", type: "function", function: { name: "find", arguments: "" } },
        ],
      },
    ]);
  });
});
