import Anthropic from "@anthropic-ai/sdk";
import { betaTool } from "@anthropic-ai/sdk/helpers/beta/json-schema";
import OpenAI from "openai";
import type { RunnableToolFunctionWithParse } from "openai/lib/RunnableFunction";
import { describe, expect, it } from "vitest";
import { KEY, KEY2, POOR_KEY } from "../support/gateway.js";
import {
  answerFor,
  type LoopSetup,
  noRefusals,
  useLoopGateway,
  WEATHER_ARGS,
  WEATHER_RESULT,
  WEATHER_TOOL,
} from "../support/tool-loop.js";

/** The official SDKs' own tool-loop helpers through the gateway, same wire and across. */

let setup: LoopSetup;
let openai: OpenAI;
let anthropic: Anthropic;

useLoopGateway((started) => {
  setup = started;
  openai = new OpenAI({ apiKey: KEY, baseURL: `${setup.gw.url}/v1`, maxRetries: 0 });
  anthropic = new Anthropic({ apiKey: KEY, baseURL: setup.gw.url, maxRetries: 0 });
});

const weatherSchema = {
  type: "object",
  properties: { city: { type: "string" } },
  required: ["city"],
} as const;
const weatherParameters: { type: "object"; [key: string]: unknown } = {
  ...weatherSchema,
  required: ["city"],
};

describe("openai runTools", () => {
  for (const model of ["gpt-x", "claude-x", "gemini-x"]) {
    for (const stream of [false, true]) {
      it(`runs the loop on ${model}${stream ? ", streamed" : ""}`, async () => {
        const seen: unknown[] = [];
        const tool: RunnableToolFunctionWithParse<{ city: string }> = {
          type: "function",
          function: {
            name: WEATHER_TOOL,
            description: "The weather in a city",
            parameters: weatherParameters,
            parse: (text: string) => JSON.parse(text) as { city: string },
            function: (args: { city: string }) => {
              seen.push(args);
              return WEATHER_RESULT;
            },
          },
        };
        const tools = [tool];
        const runner = stream
          ? openai.chat.completions.runTools({
              model,
              stream: true,
              messages: [{ role: "user", content: "Weather in Jakarta?" }],
              tools,
            })
          : openai.chat.completions.runTools({
              model,
              messages: [{ role: "user", content: "Weather in Jakarta?" }],
              tools,
            });
        expect(await runner.finalContent()).toBe(answerFor(WEATHER_RESULT));
        expect(seen).toEqual([WEATHER_ARGS]);
        expect(noRefusals(setup)).toEqual([]);
      });
    }
  }
});

describe("anthropic tool runner (message threads) and finalMessage()", () => {
  for (const model of ["claude-x", "gpt-x", "gemini-x"]) {
    for (const stream of [false, true]) {
      it(`runs the tool runner's loop on ${model}${stream ? ", streamed" : ""}, each turn sending only the new messages`, async () => {
        const seen: unknown[] = [];
        const tool = betaTool({
          name: WEATHER_TOOL,
          description: "The weather in a city",
          inputSchema: weatherSchema,
          run: (args) => {
            seen.push(args);
            return WEATHER_RESULT;
          },
        });
        const runner = anthropic.beta.messages.toolRunner({
          model,
          max_tokens: 1024,
          system: "Answer briefly.",
          messages: [{ role: "user", content: "Weather in Jakarta?" }],
          tools: [tool],
          stream,
        });
        const final = await runner.runUntilDone();
        expect(final.content).toEqual([
          expect.objectContaining({ type: "text", text: answerFor(WEATHER_RESULT) }),
        ]);
        expect(seen).toEqual([WEATHER_ARGS]);
        expect(noRefusals(setup)).toEqual([]);
        if (model === "claude-x") {
          // Same wire: the provider holds the thread; the second turn continues it.
          const [first, second] = setup.anthropicUp.requests.map((r) => r.body);
          expect(first.thread).toEqual({ type: "create" });
          expect(second.thread).toMatchObject({ type: "continue" });
          expect(second.messages).toHaveLength(1);
        } else if (model === "gemini-x") {
          // Gemini holds no thread: the gateway sent the second turn whole, system and tools too.
          const second = setup.geminiUp.requests[1].body;
          expect((second.contents as { role: string }[]).map((c) => c.role)).toEqual([
            "user",
            "model",
            "user",
          ]);
          expect(second.systemInstruction).toEqual({ parts: [{ text: "Answer briefly." }] });
          expect(second.tools).toHaveLength(1);
        } else {
          // Across: the gateway sent the second turn whole, with the system prompt and tools.
          const second = setup.openaiUp.requests[1].body;
          expect((second.messages as { role: string }[]).map((m) => m.role)).toEqual([
            "system",
            "user",
            "assistant",
            "tool",
          ]);
          expect(second.tools).toHaveLength(1);
        }
      });
    }
  }

  for (const model of ["claude-x", "gpt-x", "gemini-x"]) {
    it(`runs a hand-written loop with stream().finalMessage() on ${model}`, async () => {
      const tools: Anthropic.Tool[] = [
        { name: WEATHER_TOOL, description: "Weather", input_schema: weatherParameters },
      ];
      const messages: Anthropic.MessageParam[] = [{ role: "user", content: "Weather in Jakarta?" }];
      const first = await anthropic.messages
        .stream({ model, max_tokens: 1024, messages, tools })
        .finalMessage();
      const call = first.content.find((b) => b.type === "tool_use");
      expect(call).toMatchObject({ name: WEATHER_TOOL, input: WEATHER_ARGS });
      messages.push(
        { role: "assistant", content: first.content },
        {
          role: "user",
          content: [{ type: "tool_result", tool_use_id: call?.id ?? "", content: WEATHER_RESULT }],
        },
      );
      const final = await anthropic.messages
        .stream({ model, max_tokens: 1024, messages, tools })
        .finalMessage();
      expect(final.content).toEqual([
        expect.objectContaining({ type: "text", text: answerFor(WEATHER_RESULT) }),
      ]);
      expect(noRefusals(setup)).toEqual([]);
    });
  }
});

describe("message threads the gateway holds", () => {
  const continueFrom = (client: Anthropic, id: string) =>
    client.beta.messages.create({
      model: "gpt-x",
      max_tokens: 100,
      betas: ["message-threads-2026-08-12"],
      thread: { type: "continue", previous_message_id: id },
      messages: [{ role: "user", content: "And tomorrow?" }],
    } as Anthropic.Beta.MessageCreateParamsNonStreaming);

  it("answers an unknown id, or another account's, with thread_not_found as the SDK knows it", async () => {
    const created = await anthropic.beta.messages.create({
      model: "gpt-x",
      max_tokens: 100,
      betas: ["message-threads-2026-08-12"],
      thread: { type: "create" },
      messages: [{ role: "user", content: "Weather in Jakarta?" }],
      tools: [{ name: WEATHER_TOOL, input_schema: weatherParameters }],
    } as Anthropic.Beta.MessageCreateParamsNonStreaming);
    expect(created.content[0]).toMatchObject({ type: "tool_use", name: WEATHER_TOOL });

    const unknown = await continueFrom(anthropic, "msg_nobody_knows").catch((e: unknown) => e);
    expect(unknown).toBeInstanceOf(Anthropic.ThreadNotFoundError);
    expect((unknown as InstanceType<typeof Anthropic.ThreadNotFoundError>).status).toBe(404);

    // Another key of the same account may continue it; another account may not.
    const other = new Anthropic({ apiKey: POOR_KEY, baseURL: setup.gw.url, maxRetries: 0 });
    const foreign = await continueFrom(other, created.id).catch((e: unknown) => e);
    expect(foreign).toBeInstanceOf(Anthropic.ThreadNotFoundError);

    const sibling = new Anthropic({ apiKey: KEY2, baseURL: setup.gw.url, maxRetries: 0 });
    const served = await sibling.beta.messages.create({
      model: "gpt-x",
      max_tokens: 100,
      betas: ["message-threads-2026-08-12"],
      thread: { type: "continue", previous_message_id: created.id },
      messages: [
        {
          role: "user",
          content: [
            {
              type: "tool_result",
              tool_use_id: (created.content[0] as { id: string }).id,
              content: WEATHER_RESULT,
            },
          ],
        },
      ],
    } as Anthropic.Beta.MessageCreateParamsNonStreaming);
    expect(served.content[0]).toMatchObject({ text: answerFor(WEATHER_RESULT) });
    expect(setup.openaiUp.last.body.tools).toHaveLength(1);
  });
});
