import type { MessagesRequest } from "../../wire/anthropic-types.js";
import type { CompletionRequest, CompletionResult } from "../../wire/completion-types.js";
import type { ChatCompletionChunk, ChatCompletionRequest } from "../../wire/openai-types.js";
import type { ResponsesRequest } from "../../wire/responses-types.js";
import { parseEventData } from "../../wire/sse.js";
import { fromChatChunks, fromChatJson, withJsonEstimate } from "../../wire/to-client.js";
import {
  type Rewrite,
  refuseStopsOver,
  toChatRequest,
  withRewrite,
} from "../../wire/to-provider.js";
import { failedToolCalls, messagesRequestToChat } from "../../wire/translate/messages-to-chat.js";
import { wantsSummary } from "../../wire/translate/responses.js";
import { UpstreamFailure } from "../../wire/upstream-failure.js";
import { chatOutputText, usageFromChat } from "../../wire/usage.js";
import { type MeteredStream, openMeteredStream } from "../metered-stream.js";
import type { Attempt, CountTokensRequest, ProviderContext } from "../provider.js";
import { geminiHeaders, methodUrl, modelName } from "./endpoints.js";
import { chatToGemini, type GeminiRequestOptions } from "./gemini-request.js";
import { chatUsageOf, GeminiStreamToChat, geminiToChat } from "./gemini-response.js";
import type { GenerateContentResponse } from "./gemini-types.js";

/**
 * Chat, messages and responses requests: `toChatRequest` turns each into a chat body,
 * `chatToGemini` into Gemini's, and the answer comes back the same way (`to-client.ts`).
 */
export async function geminiComplete(
  { http }: ProviderContext,
  attempt: Attempt,
  req: CompletionRequest,
): Promise<CompletionResult> {
  const { provider, model } = attempt;
  const rewrite: Rewrite = { omittedTools: [] };
  const chat = toChatRequest(req, attempt, rewrite, { translated: true, fetchesUrls: true });
  refuseStopsOver(req, chat, geminiMostStops);
  // A messages client's top_k, which Gemini takes and chat has no field for.
  if (req.style === "messages" && typeof req.body.top_k === "number") chat.top_k = req.body.top_k;
  const body = chatToGemini(chat, model.max_output_tokens, clientOptions(req));
  const headers = geminiHeaders(attempt);
  if (!req.stream) {
    const answer = await http.postJson<GenerateContentResponse>(
      methodUrl(attempt, "generateContent"),
      headers,
      JSON.stringify(body),
      req.signal,
      provider,
    );
    const completion = geminiToChat(answer, chat.model, oneCall(chat));
    const result = withJsonEstimate(fromChatJson(req, completion), body, () =>
      chatOutputText(completion),
    );
    return withRewrite(result, rewrite);
  }
  const url = methodUrl(attempt, "streamGenerateContent?alt=sse");
  const upstream = await openMeteredStream(http, attempt, { url, headers, body }, req.signal);
  return withRewrite(
    fromChatChunks(req, geminiChunks(upstream, chat.model, oneCall(chat)), upstream.meter),
    rewrite,
  );
}

/**
 * Whether the client turned parallel tool calls off: chat's `parallel_tool_calls: false`, which a
 * messages client's `disable_parallel_tool_use` and a Responses client's own field become.
 */
const oneCall = (chat: ChatCompletionRequest) => chat.parallel_tool_calls === false;

/** Gemini's `stopSequences` takes at most five. */
const geminiMostStops = 5;

/**
 * What the client's own body says that its chat body cannot: a messages client's thinking budget
 * (the chat body has only its level) and the tool results it marked as errors, a Responses
 * client's wish to read the reasoning.
 */
function clientOptions(req: CompletionRequest): GeminiRequestOptions {
  if (req.style === "messages") {
    const body = req.body as MessagesRequest;
    return { anthropicThinking: body.thinking, failedCalls: failedToolCalls(body) };
  }
  if (req.style === "responses")
    return { showThoughts: wantsSummary(req.body as ResponsesRequest) };
  return {};
}

/**
 * Gemini's `countTokens` of a Messages body (the route's count_tokens), counted as
 * `generateContent` would get it: system instruction and tools too.
 */
export async function geminiCountTokens(
  { http }: ProviderContext,
  attempt: Attempt,
  req: CountTokensRequest,
): Promise<number> {
  const { model, provider } = attempt;
  const body = req.body as MessagesRequest;
  const chat = messagesRequestToChat(body, model.upstream_model);
  const { contents, systemInstruction, tools } = chatToGemini(chat, model.max_output_tokens, {
    failedCalls: failedToolCalls(body),
  });
  const answer = await http.postJson<{ totalTokens?: unknown }>(
    methodUrl(attempt, "countTokens"),
    geminiHeaders(attempt),
    JSON.stringify({
      generateContentRequest: {
        model: modelName(attempt),
        contents,
        ...(systemInstruction ? { systemInstruction } : {}),
        ...(tools ? { tools } : {}),
      },
    }),
    req.signal,
    provider,
  );
  const tokens = answer.totalTokens ?? 0;
  if (typeof tokens !== "number" || !Number.isInteger(tokens) || tokens < 0)
    throw new UpstreamFailure("unavailable", 502);
  return tokens;
}

/**
 * A Gemini stream as chat chunks; its cumulative usage is reported to the meter as it arrives,
 * so a stream cut before its end is billed for the input Gemini counted, not an estimate.
 */
async function* geminiChunks(
  { events, meter }: MeteredStream,
  model: string,
  oneCall: boolean,
): AsyncGenerator<ChatCompletionChunk> {
  const toChat = new GeminiStreamToChat(model, oneCall);
  for await (const ev of events) {
    const data = parseEventData(ev.data);
    if (typeof data !== "object" || data === null) continue;
    const response = data as GenerateContentResponse;
    yield* toChat.push(response);
    if (response.usageMetadata) meter.report(usageFromChat(chatUsageOf(response.usageMetadata)));
  }
  yield* toChat.finish();
}
