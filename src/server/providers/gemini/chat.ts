import type { MessagesRequest } from "../../wire/anthropic-types.js";
import type { CompletionRequest, CompletionResult } from "../../wire/completion-types.js";
import type { ChatCompletionChunk } from "../../wire/openai-types.js";
import type { ResponsesRequest } from "../../wire/responses-types.js";
import { parseEventData } from "../../wire/sse.js";
import { fromChatChunks, fromChatJson, withJsonEstimate } from "../../wire/to-client.js";
import {
  answersAsked,
  type Rewrite,
  refuseStopsOver,
  toChatRequest,
  withRewrite,
} from "../../wire/to-provider.js";
import { failedToolCalls, messagesRequestToChat } from "../../wire/translate/messages-to-chat.js";
import { wantsSummary } from "../../wire/translate/responses.js";
import { isRecord } from "../../wire/translate/shared.js";
import { UnsupportedRequest, UpstreamFailure } from "../../wire/upstream-failure.js";
import { chatOutputText, usageFromChat } from "../../wire/usage.js";
import { type MeteredStream, openMeteredStream } from "../metered-stream.js";
import type { Attempt, CountTokensRequest, ProviderContext } from "../provider.js";
import { geminiHeaders, methodUrl, modelName } from "./endpoints.js";
import { FunctionNames } from "./function-names.js";
import { chatToGemini, type GeminiRequestOptions } from "./gemini-request.js";
import {
  type AnswerCalls,
  chatUsageOf,
  GeminiStreamToChat,
  geminiToChat,
} from "./gemini-response.js";
import type { GenerateContentRequest, GenerateContentResponse } from "./gemini-types.js";

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
  const names = FunctionNames.of(chat);
  const body = chatToGemini(chat, model.max_output_tokens, { ...clientOptions(req), names });
  refuseWhatGeminiRefuses(req, body, model.upstream_model);
  const calls: AnswerCalls = { names, oneCall: chat.parallel_tool_calls === false };
  const headers = geminiHeaders(attempt);
  if (!req.stream) {
    const answer = await http.postJson<GenerateContentResponse>(
      methodUrl(attempt, "generateContent"),
      headers,
      JSON.stringify(body),
      req.signal,
      provider,
    );
    const completion = geminiToChat(answer, chat.model, calls);
    const result = withJsonEstimate(
      fromChatJson(req, completion),
      body,
      () => chatOutputText(completion),
      req.style,
    );
    return withRewrite(result, rewrite);
  }
  const url = methodUrl(attempt, "streamGenerateContent?alt=sse");
  const answers = answersAsked(chat);
  const upstream = await openMeteredStream(
    http,
    attempt,
    { url, headers, body, answers },
    req.signal,
  );
  return withRewrite(
    fromChatChunks(req, geminiChunks(upstream, chat.model, calls), upstream.meter),
    rewrite,
  );
}

/** Gemini's `stopSequences` takes at most five. */
const geminiMostStops = 5;

/** Gemini's `candidateCount` is at most eight, as Google's GenerationConfig reference says. */
const geminiMostCandidates = 8;

/** Gemini 1.x and 2.x by the upstream model's name; an alias or a later model may do more. */
const beforeGemini3 = /(^|\/)gemini-[12](\.\d+)?-/;

/**
 * What Gemini is known to refuse in a body the translation made, refused before it is sent with
 * the client's own field named: more choices than it gives, and (before Gemini 3) a JSON answer
 * in a request whose model may call a function. Sent, either would cost a call and come back as
 * a rejection that cannot say which field to change.
 */
function refuseWhatGeminiRefuses(
  req: CompletionRequest,
  body: GenerateContentRequest,
  upstreamModel: string,
): void {
  const candidates = body.generationConfig?.candidateCount ?? 1;
  if (candidates > geminiMostCandidates)
    throw new UnsupportedRequest(
      `\`n\` is ${candidates}; this model's provider gives at most ${geminiMostCandidates} choices a request. Send \`n\` of at most ${geminiMostCandidates}.`,
    );
  const json = body.generationConfig?.responseMimeType === "application/json";
  const mayCall =
    body.tools !== undefined && body.toolConfig?.functionCallingConfig.mode !== "NONE";
  if (json && mayCall && beforeGemini3.test(upstreamModel.toLowerCase()))
    throw new UnsupportedRequest(
      `\`${jsonFormatField(req)}\` (a JSON answer) cannot be combined with \`tools\` on this model: Gemini before version 3 refuses a JSON answer where it may call a function. Leave out one of them, set \`tool_choice\` to none, or use a Gemini 3 model.`,
    );
}

/** Where the client asked for a JSON answer, in its own style. */
function jsonFormatField(req: CompletionRequest): string {
  if (req.style === "responses") return "text.format";
  if (req.style !== "messages") return "response_format";
  const body = req.body as MessagesRequest;
  return isRecord(body.output_config) && body.output_config.format != null
    ? "output_config.format"
    : "output_format";
}

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
 * so a stream cut before its end is billed for the input Gemini counted, not an estimate. An
 * event's report is read with the event, before the chunks it makes are handed on: a client that
 * leaves while one of them waits to be written (a candidate's, with the next candidate's or the
 * finish's chunk read ahead of it) is billed with the report the gateway read.
 */
async function* geminiChunks(
  { events, meter }: MeteredStream,
  model: string,
  calls: AnswerCalls,
): AsyncGenerator<ChatCompletionChunk> {
  const toChat = new GeminiStreamToChat(model, calls);
  for await (const ev of events) {
    const data = parseEventData(ev.data);
    if (typeof data !== "object" || data === null) continue;
    const response = data as GenerateContentResponse;
    const chunks = toChat.push(response);
    if (response.usageMetadata) meter.report(usageFromChat(chatUsageOf(response.usageMetadata)));
    yield* chunks;
  }
  yield* toChat.finish();
}
