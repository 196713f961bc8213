import type { MessagesRequest } from "../../wire/anthropic-types.js";
import type { CompletionRequest, CompletionResult } from "../../wire/completion-types.js";
import type { ChatCompletionChunk } from "../../wire/openai-types.js";
import { parseEventData } from "../../wire/sse.js";
import { fromChatChunks, fromChatJson, withJsonEstimate } from "../../wire/to-client.js";
import { type Rewrite, toChatRequest, withRewrite } from "../../wire/to-provider.js";
import { messagesRequestToChat } from "../../wire/translate/messages-to-chat.js";
import { UpstreamFailure } from "../../wire/upstream-failure.js";
import { chatOutputText, usageFromChat } from "../../wire/usage.js";
import { type MeteredStream, openMeteredStream } from "../metered-stream.js";
import type { Attempt, CountTokensRequest, ProviderContext } from "../provider.js";
import { geminiHeaders, methodUrl, modelName } from "./endpoints.js";
import { chatToGemini } from "./gemini-request.js";
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
  // A messages client's thinking budget goes over as it is (the chat body has only its level),
  // and its top_k, which Gemini takes and chat has no field for.
  const thinking = req.style === "messages" ? req.body.thinking : undefined;
  if (req.style === "messages" && typeof req.body.top_k === "number") chat.top_k = req.body.top_k;
  const body = chatToGemini(chat, model.max_output_tokens, thinking);
  const headers = geminiHeaders(attempt);
  if (!req.stream) {
    const answer = await http.postJson<GenerateContentResponse>(
      methodUrl(attempt, "generateContent"),
      headers,
      JSON.stringify(body),
      req.signal,
      provider,
    );
    const completion = geminiToChat(answer, chat.model);
    const result = withJsonEstimate(fromChatJson(req, completion), body, () =>
      chatOutputText(completion),
    );
    return withRewrite(result, rewrite);
  }
  const url = `${methodUrl(attempt, "streamGenerateContent")}?alt=sse`;
  const upstream = await openMeteredStream(http, attempt, { url, headers, body }, req.signal);
  return withRewrite(
    fromChatChunks(req, geminiChunks(upstream, chat.model), upstream.meter),
    rewrite,
  );
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
  const chat = messagesRequestToChat(req.body as MessagesRequest, model.upstream_model);
  const { contents, systemInstruction, tools } = chatToGemini(chat, model.max_output_tokens);
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
): AsyncGenerator<ChatCompletionChunk> {
  const toChat = new GeminiStreamToChat(model);
  for await (const ev of events) {
    const data = parseEventData(ev.data);
    if (typeof data !== "object" || data === null) continue;
    const response = data as GenerateContentResponse;
    yield* toChat.push(response);
    if (response.usageMetadata) meter.report(usageFromChat(chatUsageOf(response.usageMetadata)));
  }
  yield* toChat.finish();
}
