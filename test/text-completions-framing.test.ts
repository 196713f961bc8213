import type { Completion } from "openai/resources/completions";
import { describe, expect, it, vi } from "vitest";
import { defaultMaxEventBytes } from "../src/server/wire/sse.js";
import {
  anthropicStreamSteps,
  type FakeUpstream,
  openaiStreamSteps,
  type SseStep,
} from "./support/fake-upstream.js";
import { post } from "./support/gateway.js";
import { geminiStreamSteps } from "./support/gemini-wire.js";
import { streamDataInText } from "./support/sse.js";
import { type ThreeWires, useThreeWires } from "./support/three-wires.js";

/**
 * A streamed POST /v1/completions answered through chat: each chat chunk becomes a
 * `text_completion` chunk where the chat relay makes it, so an event is read once and encoded
 * once, and only the provider's bound on an event's size applies to it.
 */

/** The OpenAI fake's wider provider: events up to four times the default bound. */
const wideEvents = 4 * defaultMaxEventBytes;

/** Each answer's text of a completion stream, by its index. */
function textsOf(chunks: Completion[]): string[] {
  const texts: string[] = [];
  for (const chunk of chunks)
    for (const choice of chunk.choices)
      texts[choice.index] = (texts[choice.index] ?? "") + choice.text;
  return texts;
}

/** Steps with their data encoded already, so the fake encodes nothing while JSON is watched. */
const encoded = (steps: SseStep[]): SseStep[] =>
  steps.map((step) => ({
    ...step,
    data: typeof step.data === "string" ? step.data : JSON.stringify(step.data),
  }));

const chatChunk = '"object":"chat.completion.chunk"';
const textChunk = '"object":"text_completion"';

/**
 * What JSON encoded and parsed in this process (gateway and fakes) while `run` ran: the texts
 * `JSON.stringify` made and those `JSON.parse` was given.
 */
async function watchJson<T>(
  run: () => Promise<T>,
): Promise<{ result: T; encodedTexts: string[]; parsedTexts: string[] }> {
  const stringify = vi.spyOn(JSON, "stringify");
  const parse = vi.spyOn(JSON, "parse");
  try {
    const result = await run();
    const encodedTexts = stringify.mock.results
      .map((made) => made.value)
      .filter((made): made is string => typeof made === "string");
    const parsedTexts = parse.mock.calls
      .map(([text]) => text)
      .filter((text): text is string => typeof text === "string");
    return { result, encodedTexts, parsedTexts };
  } finally {
    stringify.mockRestore();
    parse.mockRestore();
  }
}

describe("a streamed /v1/completions through chat", () => {
  let wires: ThreeWires;
  useThreeWires({
    maxOutputTokens: 4_000,
    extra: ({ oa }) => ({
      providers: [
        {
          id: "oa-wide",
          wire: "openai",
          base_url: oa.baseUrl,
          api_keys: ["sk-oa"],
          max_event_bytes: wideEvents,
        },
      ],
      models: [{ name: "h-openai-wide", provider: "oa-wide", upstream_model: "gpt-up" }],
    }),
    ready: (started) => (wires = started),
  });

  it("on every wire each text_completion chunk is encoded once, no chunk is encoded as chat first, and an upstream's chunk is parsed once", async () => {
    const openaiSteps = encoded(openaiStreamSteps(["return ", "a + b"]));
    wires.oa.handle(() => ({ kind: "sse", steps: openaiSteps }));
    wires.an.handle(() => ({
      kind: "sse",
      steps: encoded(anthropicStreamSteps(["Hello", " from Claude"])),
    }));
    wires.gm.handle(() => ({
      kind: "sse",
      steps: encoded(geminiStreamSteps(["Hello", " from Gemini"])),
    }));
    const upstreamChunks = openaiSteps
      .map((step) => step.data)
      .filter((data): data is string => typeof data === "string" && data.includes(chatChunk));
    const asked = { prompt: "def add(a, b):", max_tokens: 12 };
    const mockWhole = await wires.openai.completions.create({ ...asked, model: "mock-gpt" });
    const fakes: Record<string, { fake?: FakeUpstream; said: string; chunks: string[] }> = {
      "mock-gpt": { said: mockWhole.choices[0].text, chunks: [] },
      "h-openai": { fake: wires.oa, said: "return a + b", chunks: upstreamChunks },
      "h-anthropic": { fake: wires.an, said: "Hello from Claude", chunks: [] },
      "h-gemini": { fake: wires.gm, said: "Hello from Gemini", chunks: [] },
    };
    for (const [model, { fake, said, chunks }] of Object.entries(fakes)) {
      const watched = await watchJson(async () => {
        const res = await post(wires.gw, "/v1/completions", {
          ...asked,
          model,
          stream: true,
          stream_options: { include_usage: true },
        });
        expect(res.status, model).toBe(200);
        return res.text();
      });
      expect(fake?.refused ?? [], model).toEqual([]);
      const { encodedTexts, parsedTexts } = watched;
      const events = await streamDataInText<Completion>(watched.result);
      expect(events.at(-1), model).toBe("[DONE]");
      const data = events.filter((event): event is Completion => event !== "[DONE]");
      expect(data.length, model).toBeGreaterThan(2);
      expect(
        data.every((event) => event.object === "text_completion"),
        model,
      ).toBe(true);
      expect(textsOf(data), model).toEqual([said]);
      // Each chunk the client got was encoded once, as a text_completion, and never as chat.
      expect(encodedTexts.filter((made) => made.includes(textChunk)).length, model).toBe(
        data.length,
      );
      expect(
        encodedTexts.filter((made) => made.includes(chatChunk)),
        model,
      ).toEqual([]);
      // The only chat chunks parsed are the upstream's own, each once.
      expect(
        parsedTexts.filter((parsed) => parsed.includes(chatChunk)),
        model,
      ).toEqual(chunks);
    }
  });

  it("an event larger than the default bound, within its provider's max_event_bytes, reaches the client whole", async () => {
    const large = "x".repeat(defaultMaxEventBytes + 1_024);
    wires.oa.handle(() => ({
      kind: "sse",
      steps: openaiStreamSteps(["lead ", large, " tail"]),
    }));
    const res = await post(wires.gw, "/v1/completions", {
      model: "h-openai-wide",
      prompt: "a long answer",
      stream: true,
    });
    expect(res.status).toBe(200);
    // Read here, not with the gateway's parser, which holds to the default bound.
    const events = (await res.text())
      .split("\n\n")
      .filter((event) => event !== "" && !event.startsWith(":"))
      .map((event) => event.replace(/^data: /, ""))
      .map((data) => (data === "[DONE]" ? data : (JSON.parse(data) as Completion)));
    expect(wires.oa.refused).toEqual([]);
    expect(events.at(-1)).toBe("[DONE]");
    const chunks = events.filter((event): event is Completion => event !== "[DONE]");
    const [text] = textsOf(chunks);
    expect(text.length).toBe(`lead ${large} tail`.length);
    expect(text === `lead ${large} tail`).toBe(true);
    expect(chunks.at(-1)?.choices[0]?.finish_reason).toBe("stop");
    const [row] = await wires.gw.listRequests({ limit: 1 });
    expect(row).toMatchObject({ endpoint: "completions", stream: true, state: "settled" });
    // The fake, the gateway and this test each encode or parse the large event whole.
  }, 60_000);
});
