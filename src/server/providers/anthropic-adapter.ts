import {
  type ChunkCount,
  fromMessagesEvents,
  fromMessagesJson,
  type Rewrite,
  toMessagesRequest,
  withJsonEstimate,
  withRewrite,
  withStreamEstimate,
} from "../dispatch/bridges.js";
import type {
  Attempt,
  CompletionRequest,
  CompletionResult,
  ProviderAdapter,
} from "../dispatch/types.js";
import type { MessagesResponse } from "../wire/anthropic-types.js";
import { parseSSE } from "../wire/sse.js";
import { messagesOutputText } from "../wire/usage.js";
import { joinUrl, type UpstreamHttp } from "./http-upstream.js";

const anthropicVersion = "2023-06-01";

/** Anthropic's Messages API (or any API that speaks it). */
export class AnthropicAdapter implements ProviderAdapter {
  constructor(private readonly http: UpstreamHttp) {}

  async complete(attempt: Attempt, req: CompletionRequest): Promise<CompletionResult> {
    const { provider, credential } = attempt;
    const headers: Record<string, string> = {
      "content-type": "application/json",
      "anthropic-version": anthropicVersion,
    };
    if (credential.secret) headers["x-api-key"] = credential.secret;
    if (req.anthropicBeta) headers["anthropic-beta"] = req.anthropicBeta;
    const rewrite: Rewrite = { omittedTools: [] };
    const payload = JSON.stringify(toMessagesRequest(req, attempt, rewrite));
    const url = joinUrl(provider.base_url ?? "", "/messages");
    if (!req.stream) {
      const answer = await this.http.postJson<MessagesResponse>(
        url,
        headers,
        payload,
        provider.timeout_ms,
        req.signal,
        provider,
      );
      const result = withJsonEstimate(fromMessagesJson(req, answer), payload, () =>
        messagesOutputText(answer),
      );
      return withRewrite(req, result, rewrite);
    }
    const seen: ChunkCount = { chunks: 0 };
    const events = parseSSE(
      await this.http.postStream(url, headers, payload, provider.timeout_ms, req.signal, provider),
    );
    return withRewrite(
      req,
      withStreamEstimate(fromMessagesEvents(req, events, seen), payload, seen),
      rewrite,
    );
  }
}
