import { createAnthropic } from "@ai-sdk/anthropic";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, type LanguageModel, stepCountIs, streamText, tool } from "ai";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { KEY } from "../support/gateway.js";
import {
  answerFor,
  CLAUDE_MAX_OUTPUT,
  type LoopSetup,
  noRefusals,
  useLoopGateway,
  WEATHER_ARGS,
  WEATHER_RESULT,
  WEATHER_TOOL,
} from "../support/tool-loop.js";

/** The Vercel AI SDK's multi-step tool loop through the gateway, with each of its providers. */

let setup: LoopSetup;

useLoopGateway((started) => {
  setup = started;
});

function models(): Record<string, (name: string) => LanguageModel> {
  const openai = createOpenAI({ apiKey: KEY, baseURL: `${setup.gw.url}/v1` });
  const anthropic = createAnthropic({ apiKey: KEY, baseURL: `${setup.gw.url}/v1` });
  return {
    "@ai-sdk/openai chat": (name) => openai.chat(name),
    "@ai-sdk/openai responses": (name) => openai.responses(name),
    "@ai-sdk/anthropic": (name) => anthropic(name),
  };
}

const cases = [
  ["@ai-sdk/openai chat", "gpt-x"],
  ["@ai-sdk/openai chat", "claude-x"],
  ["@ai-sdk/openai responses", "gpt-x"],
  ["@ai-sdk/openai responses", "claude-x"],
  ["@ai-sdk/anthropic", "claude-x"],
  ["@ai-sdk/anthropic", "gpt-x"],
  ["@ai-sdk/openai chat", "gemini-x"],
  ["@ai-sdk/openai responses", "gemini-x"],
  ["@ai-sdk/anthropic", "gemini-x"],
] as const;

describe("AI SDK generateText / streamText with tools", () => {
  for (const [provider, name] of cases) {
    for (const stream of [false, true]) {
      it(`${provider} on ${name}${stream ? ", streamed" : ""}: tool call, tool result, answer`, async () => {
        const seen: unknown[] = [];
        // Toward a model of its own wire the body goes as written, and @ai-sdk/anthropic asks a
        // name it does not know for more than this model's maximum (see the test below).
        const sameWireAnthropic = provider === "@ai-sdk/anthropic" && name === "claude-x";
        const options = {
          model: models()[provider](name),
          prompt: "Weather in Jakarta?",
          ...(sameWireAnthropic ? { maxOutputTokens: CLAUDE_MAX_OUTPUT } : {}),
          stopWhen: stepCountIs(4),
          maxRetries: 0,
          tools: {
            [WEATHER_TOOL]: tool({
              description: "The weather in a city",
              inputSchema: z.object({ city: z.string() }),
              execute: async (args) => {
                seen.push(args);
                return WEATHER_RESULT;
              },
            }),
          },
        };
        let text: string;
        if (stream) {
          const result = streamText(options);
          text = await result.text;
        } else {
          text = (await generateText(options)).text;
        }
        expect(noRefusals(setup)).toEqual([]);
        expect(seen).toEqual([WEATHER_ARGS]);
        // The AI SDK sends tool results as JSON: the answer quotes the result as the model got it.
        expect(text).toContain(WEATHER_RESULT);
        expect(text.startsWith(answerFor("").slice(0, -1))).toBe(true);
      });
    }
  }
});

describe("@ai-sdk/anthropic's default output limit", () => {
  it("goes as written to a model of its own wire, whose refusal says why", async () => {
    const anthropic = createAnthropic({ apiKey: KEY, baseURL: `${setup.gw.url}/v1` });
    const same = await generateText({
      model: anthropic("claude-x"),
      prompt: "Hi",
      maxRetries: 0,
    }).catch((e: unknown) => e);
    expect(setup.anthropicUp.last.body.max_tokens).toBeGreaterThan(CLAUDE_MAX_OUTPUT);
    const asked = setup.anthropicUp.last.body.max_tokens;
    expect((same as { statusCode?: number }).statusCode).toBe(400);
    expect((same as Error).message).toBe(
      `max_tokens ${asked} exceeds this model's maximum output of ${CLAUDE_MAX_OUTPUT} tokens`,
    );
  });
});
