import {
  Agent,
  OpenAIConversationsSession,
  OpenAIResponsesModel,
  run,
  setTracingDisabled,
  tool,
} from "@openai/agents";
import OpenAI from "openai";
import { beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { KEY } from "../support/gateway.js";
import { type StateSetup, useStateGateway, wireModels } from "../support/responses-loop.js";
import { answerFor, WEATHER_RESULT, WEATHER_TOOL } from "../support/tool-loop.js";

/**
 * The OpenAI Agents SDK (`@openai/agents`) on its defaults, through the gateway, on a model of
 * each wire: a run continued by `previousResponseId`, a tool loop inside such a run (the SDK then
 * sends only the tool's output with the id of the response that called it), and an
 * `OpenAIConversationsSession` (the Conversations API), also continued by `conversationId`.
 */

// Traces would go to OpenAI's API: tests talk to 127.0.0.1 only.
setTracingDisabled(true);

let setup: StateSetup;
let openai: OpenAI;
/** The bodies the SDK posted to /v1/responses, in order. */
const sent: Record<string, unknown>[] = [];
useStateGateway((ready) => {
  setup = ready;
});
beforeAll(() => {
  openai = new OpenAI({
    apiKey: KEY,
    baseURL: `${setup.gw.url}/v1`,
    maxRetries: 0,
    timeout: 10_000,
    fetch: async (url, init) => {
      if (String(url).endsWith("/v1/responses") && typeof init?.body === "string")
        sent.push(JSON.parse(init.body) as Record<string, unknown>);
      return fetch(url, init);
    },
  });
});

const weather = tool({
  name: WEATHER_TOOL,
  description: "The weather in a city",
  parameters: z.object({ city: z.string() }),
  execute: async () => WEATHER_RESULT,
});

describe.each(wireModels)("the Agents SDK on %s", (model) => {
  const agent = (tools = false) =>
    new Agent({
      name: "assistant",
      instructions: "Answer briefly.",
      model: new OpenAIResponsesModel(openai, model),
      tools: tools ? [weather] : [],
    });

  it("a run continued by previousResponseId remembers the run before it", async () => {
    const first = await run(agent(), "My name is Ada.");
    expect(first.finalOutput).toBe("Nice to meet you, Ada.");
    expect(first.lastResponseId).toBeTruthy();
    const second = await run(agent(), "What is my name?", {
      previousResponseId: first.lastResponseId,
    });
    expect(second.finalOutput).toBe("Your name is Ada.");
    expect(setup.refused()).toEqual([]);
  });

  it("a tool loop in a continued run sends the tool's output after its call", async () => {
    const first = await run(agent(), "My name is Ada.");
    const looped = await run(agent(true), "What is the weather in Jakarta?", {
      previousResponseId: first.lastResponseId,
    });
    expect(looped.finalOutput).toBe(answerFor(WEATHER_RESULT));
    // The SDK chained the loop's second call on the first: only the tool's output was sent.
    const last = sent.at(-1);
    expect(last?.previous_response_id).toBe(looped.rawResponses[0].responseId);
    expect(last?.input).toEqual([
      expect.objectContaining({ type: "function_call_output", output: WEATHER_RESULT }),
    ]);
    expect(setup.refused()).toEqual([]);
  });

  it("an OpenAIConversationsSession keeps the conversation, and conversationId continues it", async () => {
    const session = new OpenAIConversationsSession({ client: openai });
    const first = await run(agent(), "My name is Ada.", { session });
    expect(first.finalOutput).toBe("Nice to meet you, Ada.");
    const second = await run(agent(), "What is my name?", { session });
    expect(second.finalOutput).toBe("Your name is Ada.");
    const items = await session.getItems();
    expect(items.length).toBeGreaterThanOrEqual(4);

    const conversationId = await session.getSessionId();
    const third = await run(agent(), "What is my name?", { conversationId });
    expect(third.finalOutput).toBe("Your name is Ada.");
    const looped = await run(agent(true), "What is the weather in Jakarta?", { conversationId });
    expect(looped.finalOutput).toBe(answerFor(WEATHER_RESULT));
    expect(setup.refused()).toEqual([]);

    await session.clearSession();
    await expect(openai.conversations.retrieve(conversationId)).rejects.toMatchObject({
      status: 404,
    });
  });
});
