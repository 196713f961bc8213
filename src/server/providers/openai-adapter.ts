import {
  type ChunkCount,
  chatStreamData,
  fromChatChunks,
  fromChatJson,
  parseChatChunk,
  passThroughChat,
  type Rewrite,
  StreamBroken,
  toChatRequest,
  withJsonEstimate,
  withRewrite,
  withStreamEstimate,
} from "../wire/bridges.js";
import type { CompletionRequest, CompletionResult } from "../wire/completion-types.js";
import type { ChatCompletionChunk, ChatCompletionResponse } from "../wire/openai-types.js";
import { encodeSSE, parseEventData, type SSEMessage } from "../wire/sse.js";
import type { StreamCompletion } from "../wire/stream-types.js";
import { chatOutputText, responsesOutputText } from "../wire/usage.js";
import { joinUrl, type UpstreamHttp } from "./http-upstream.js";
import type { Attempt, ProviderAdapter } from "./types.js";

/** Any OpenAI-compatible API: chat completions (and Responses, where the provider speaks it natively). */
export class OpenAIAdapter implements ProviderAdapter {
  constructor(private readonly http: UpstreamHttp) {}

  async complete(attempt: Attempt, req: CompletionRequest): Promise<CompletionResult> {
    const { provider, credential } = attempt;
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (credential.secret) headers.authorization = `Bearer ${credential.secret}`;
    if (req.style === "responses" && provider.responses_native) {
      return this.nativeResponses(attempt, req, headers);
    }
    const rewrite: Rewrite = { omittedTools: [] };
    const payload = JSON.stringify(toChatRequest(req, attempt, rewrite));
    const url = joinUrl(provider.base_url ?? "", "/chat/completions");
    if (!req.stream) {
      const answer = await this.http.postJson<ChatCompletionResponse>(
        url,
        headers,
        payload,
        provider.timeout_ms,
        req.signal,
        provider,
      );
      const result = withJsonEstimate(fromChatJson(req, answer), payload, () =>
        chatOutputText(answer),
      );
      return withRewrite(result, rewrite);
    }
    const events = await this.http.postEvents(
      url,
      headers,
      payload,
      provider.timeout_ms,
      req.signal,
      provider,
    );
    const seen: ChunkCount = { chunks: 0 };
    const result =
      req.style === "chat"
        ? passThroughChat(req, events, seen)
        : fromChatChunks(req, chatChunks(events, seen));
    return withRewrite(withStreamEstimate(result, payload, seen), rewrite);
  }

  private async nativeResponses(
    attempt: Attempt,
    req: CompletionRequest,
    headers: Record<string, string>,
  ): Promise<CompletionResult> {
    const { provider, model } = attempt;
    const body: Record<string, unknown> = { ...req.body, model: model.upstream_model };
    const limit = body.max_output_tokens;
    if (req.viaRoute && typeof limit === "number" && limit > model.max_output_tokens)
      body.max_output_tokens = model.max_output_tokens;
    const payload = JSON.stringify(body);
    const url = joinUrl(provider.base_url ?? "", "/responses");
    if (!req.stream) {
      const json = await this.http.postJson<{
        usage?: { input_tokens?: number; output_tokens?: number };
        output?: unknown;
      }>(url, headers, payload, provider.timeout_ms, req.signal, provider);
      const usage = {
        input_tokens: json.usage?.input_tokens ?? 0,
        output_tokens: json.usage?.output_tokens ?? 0,
      };
      const result = { kind: "json" as const, body: { ...json, model: req.clientModel }, usage };
      return withJsonEstimate(result, payload, () => responsesOutputText(json));
    }
    const seen: ChunkCount = { chunks: 0 };
    const events = await this.http.postEvents(
      url,
      headers,
      payload,
      provider.timeout_ms,
      req.signal,
      provider,
    );
    return withStreamEstimate(responsesPassThrough(req, events, seen), payload, seen);
  }
}

interface LifecycleEvent {
  response?: { model?: unknown; usage?: { input_tokens?: number; output_tokens?: number } };
}

async function* chatChunks(
  events: AsyncIterable<SSEMessage>,
  seen: ChunkCount,
): AsyncGenerator<ChatCompletionChunk> {
  for await (const data of chatStreamData(events)) {
    const chunk = parseChatChunk(data);
    if (!chunk) continue;
    seen.chunks++;
    yield chunk;
  }
}

/**
 * A native Responses stream, event by event. The lifecycle events that carry the whole response
 * (`response.created`, `response.completed`, ...) name the client's model, never the upstream's;
 * `response.completed` also carries the usage.
 */
function responsesPassThrough(
  req: CompletionRequest,
  events: AsyncIterable<SSEMessage>,
  seen: ChunkCount,
): StreamCompletion {
  let usage = { input_tokens: 0, output_tokens: 0 };
  async function* pieces() {
    let completed = false;
    for await (const ev of events) {
      if (ev.event === "error" || ev.event === "response.failed")
        throw new StreamBroken("upstream stream failed");
      const name = ev.event ?? "message";
      if (name.endsWith(".delta")) seen.chunks++;
      const lifecycle =
        ev.event === "response.completed" ||
        (name.startsWith("response.") && ev.data.includes('"model"'));
      const data = lifecycle ? (parseEventData(ev.data) as LifecycleEvent | undefined) : undefined;
      if (ev.event === "response.completed") {
        completed = true;
        usage = {
          input_tokens: data?.response?.usage?.input_tokens ?? 0,
          output_tokens: data?.response?.usage?.output_tokens ?? 0,
        };
      }
      if (data?.response?.model !== undefined) {
        data.response.model = req.clientModel;
        yield encodeSSE(data, name);
        continue;
      }
      yield encodeSSE(ev.data, name);
    }
    if (!completed) throw new StreamBroken();
  }
  return { kind: "stream", pieces: pieces(), usage: () => usage };
}
