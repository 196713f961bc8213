import {
  Agent,
  type ModelSettings,
  OpenAIConversationsSession,
  OpenAIResponsesModel,
  run,
  setTracingDisabled,
  tool,
} from "@openai/agents";
import OpenAI from "openai";
import { beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { anthropicJson } from "../support/fake-upstream.js";
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

  it("a run continued by previousResponseId from a run on a conversation remembers the conversation", async () => {
    const conversation = await openai.conversations.create({
      items: [{ type: "message", role: "user", content: "My name is Ada." }],
    });
    const onIt = await run(agent(), "Hello.", { conversationId: conversation.id });
    expect(onIt.finalOutput).toBe("You said: Hello.");
    const next = await run(agent(), "What is my name?", {
      previousResponseId: onIt.lastResponseId,
    });
    expect(next.finalOutput).toBe("Your name is Ada.");
    expect(setup.refused()).toEqual([]);
  });

  it("popItem takes back the newest item; the session goes on without it, and clearSession starts afresh", async () => {
    const session = new OpenAIConversationsSession({ client: openai });
    await run(agent(), "My name is Ada.", { session });
    const looped = await run(agent(true), "What is the weather in Jakarta?", {
      session,
      stream: true,
    });
    await looped.completed;
    expect(looped.finalOutput).toBe(answerFor(WEATHER_RESULT));
    const items = await session.getItems();
    const popped = await session.popItem();
    expect(popped).toMatchObject({ type: "message", role: "assistant" });
    expect(await session.getItems()).toEqual(items.slice(0, -1));
    expect((await session.getItems(2)).map((item) => item.type)).toEqual([
      "function_call",
      "function_call_result",
    ]);
    const again = await run(agent(), "What is my name?", { session });
    expect(again.finalOutput).toBe("Your name is Ada.");
    await session.clearSession();
    expect(await session.getItems()).toEqual([]);
    const fresh = await run(agent(), "What is my name?", { session });
    expect(fresh.finalOutput).toBe("I do not know your name.");
    expect(setup.refused()).toEqual([]);
  });
});

describe("the Agents SDK's tool loop on a Claude model with reasoning", () => {
  const thinking = { text: "The user wants the weather; call the tool.", signature: "sig-agents" };
  const agent = (reasoning: ModelSettings["reasoning"]) =>
    new Agent({
      name: "assistant",
      instructions: "Answer briefly.",
      model: new OpenAIResponsesModel(openai, "claude-x"),
      tools: [weather],
      modelSettings: { reasoning },
    });
  type AnthropicBody = { thinking?: unknown; messages: { role: string; content: unknown[] }[] };

  it.each([
    ["a run", { effort: "medium" }, false],
    ["a run whose summary it was shown", { effort: "medium", summary: "auto" }, false],
    ["a session's run", { effort: "medium", summary: "auto" }, true],
  ] as const)(
    "%s sends the call back by its id, and Claude gets the thinking the SDK was not shown back ahead of it, thinking still on",
    async (_, reasoning, withSession) => {
      setup.anthropicUp.queue(
        anthropicJson(null, {
          thinking,
          toolUses: [{ id: "toolu_agents", name: WEATHER_TOOL, input: { city: "Jakarta" } }],
        }),
        anthropicJson(answerFor(WEATHER_RESULT)),
      );
      const session = withSession ? new OpenAIConversationsSession({ client: openai }) : undefined;
      const looped = await run(agent(reasoning), "What is the weather in Jakarta?", { session });
      expect(looped.finalOutput).toBe(answerFor(WEATHER_RESULT));
      // The SDK kept no state on the server: it sent the whole loop, its answer by its ids.
      const last = sent.at(-1);
      expect(last?.previous_response_id).toBeUndefined();
      expect(JSON.stringify(last?.input)).not.toContain("encrypted_content");
      const body = setup.anthropicUp.last.body as AnthropicBody;
      expect(body.thinking).toMatchObject({ type: "enabled" });
      expect(body.messages[1].content).toEqual([
        { type: "thinking", thinking: thinking.text, signature: thinking.signature },
        expect.objectContaining({ type: "tool_use", id: "toolu_agents" }),
      ]);
      expect(setup.refused()).toEqual([]);
      // What the client stored says what it was sent, no more.
      const items = await openai.responses.inputItems.list(String(looped.lastResponseId), {
        order: "asc",
      });
      expect(JSON.stringify(items.data)).not.toContain("encrypted_content");
    },
  );
});
