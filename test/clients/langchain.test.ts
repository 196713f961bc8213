import { ChatAnthropic } from "@langchain/anthropic";
import type { BaseChatModel } from "@langchain/core/language_models/chat_models";
import {
  AIMessage,
  type AIMessageChunk,
  type BaseMessage,
  HumanMessage,
  ToolMessage,
} from "@langchain/core/messages";
import { tool } from "@langchain/core/tools";
import { ChatOpenAI } from "@langchain/openai";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { KEY } from "../support/gateway.js";
import {
  answerFor,
  type LoopSetup,
  noRefusals,
  useLoopGateway,
  WEATHER_ARGS,
  WEATHER_RESULT,
  WEATHER_TOOL,
} from "../support/tool-loop.js";

/** LangChain's chat models running a tool loop through the gateway, same wire and across. */

let setup: LoopSetup;

useLoopGateway((started) => {
  setup = started;
});

function chatModel(kind: string, model: string, streaming: boolean): BaseChatModel {
  if (kind === "ChatOpenAI") {
    return new ChatOpenAI({
      model,
      apiKey: KEY,
      configuration: { baseURL: `${setup.gw.url}/v1` },
      maxRetries: 0,
      streaming,
    });
  }
  return new ChatAnthropic({
    model,
    apiKey: KEY,
    anthropicApiUrl: setup.gw.url,
    maxRetries: 0,
    maxTokens: 1024,
    streaming,
  });
}

const cases = [
  ["ChatOpenAI", "gpt-x"],
  ["ChatOpenAI", "claude-x"],
  ["ChatAnthropic", "claude-x"],
  ["ChatAnthropic", "gpt-x"],
  ["ChatOpenAI", "gemini-x"],
  ["ChatAnthropic", "gemini-x"],
] as const;

describe("LangChain bindTools loop", () => {
  for (const [kind, model] of cases) {
    for (const streaming of [false, true]) {
      it(`${kind} on ${model}${streaming ? ", streamed" : ""}: tool call, tool result, answer`, async () => {
        const seen: unknown[] = [];
        const weather = tool(
          async (args: { city: string }) => {
            seen.push(args);
            return WEATHER_RESULT;
          },
          {
            name: WEATHER_TOOL,
            description: "The weather in a city",
            schema: z.object({ city: z.string() }),
          },
        );
        const llm = chatModel(kind, model, streaming);
        if (!llm.bindTools) throw new Error(`${kind} cannot bind tools`);
        const withTools = llm.bindTools([weather]);
        const messages: BaseMessage[] = [new HumanMessage("Weather in Jakarta?")];
        let reply = await ask(withTools, messages, streaming);
        for (let step = 0; step < 3 && (reply.tool_calls?.length ?? 0) > 0; step++) {
          messages.push(reply);
          for (const call of reply.tool_calls ?? []) {
            const result: unknown = await weather.invoke(call.args as { city: string });
            messages.push(
              new ToolMessage({ content: String(result), tool_call_id: call.id ?? "" }),
            );
          }
          reply = await ask(withTools, messages, streaming);
        }
        expect(noRefusals(setup)).toEqual([]);
        expect(seen).toEqual([WEATHER_ARGS]);
        expect(reply.text).toBe(answerFor(WEATHER_RESULT));
      });
    }
  }
});

type Runnable = ReturnType<NonNullable<BaseChatModel["bindTools"]>>;

/** One turn: `invoke`, or `stream` with its chunks joined. */
async function ask(llm: Runnable, messages: BaseMessage[], streaming: boolean): Promise<AIMessage> {
  if (!streaming) return (await llm.invoke(messages)) as AIMessage;
  let joined: AIMessageChunk | undefined;
  for await (const chunk of await llm.stream(messages)) {
    const piece = chunk as AIMessageChunk;
    joined = joined ? joined.concat(piece) : piece;
  }
  if (!joined) throw new Error("the stream sent nothing");
  return new AIMessage({
    content: joined.content,
    tool_calls: joined.tool_calls,
    id: joined.id,
    response_metadata: joined.response_metadata,
  });
}
