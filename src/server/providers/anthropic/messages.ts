import type { MessagesResponse } from "../../wire/anthropic-types.js";
import type { CompletionRequest, CompletionResult } from "../../wire/completion-types.js";
import { fromMessagesEvents, fromMessagesJson } from "../../wire/to-client.js";
import {
  forwardedBody,
  type Rewrite,
  toMessagesRequest,
  withRewrite,
} from "../../wire/to-provider.js";
import { UpstreamFailure } from "../../wire/upstream-failure.js";
import { messagesOutputText } from "../../wire/usage.js";
import { joinUrl } from "../http-upstream.js";
import { openMeteredStream, postMeteredJson } from "../metered-stream.js";
import type { Attempt, CountTokensRequest, ProviderContext } from "../provider.js";

const anthropicVersion = "2023-06-01";

export async function anthropicComplete(
  { http }: ProviderContext,
  attempt: Attempt,
  req: CompletionRequest,
): Promise<CompletionResult> {
  const { provider } = attempt;
  const headers = anthropicHeaders(attempt, req.anthropicBeta);
  const rewrite: Rewrite = { omittedTools: [] };
  const body = toMessagesRequest(req, attempt, rewrite);
  const url = joinUrl(provider.base_url ?? "", "/messages");
  const sent = forwardedBody(req, "messages", body.model);
  if (!req.stream) {
    const result = await postMeteredJson<MessagesResponse>(
      http,
      attempt,
      { url, headers, body, sent },
      req,
      "messages",
      { answer: (json) => fromMessagesJson(req, json), outputText: messagesOutputText },
    );
    return withRewrite(result, rewrite);
  }
  const upstream = await openMeteredStream(http, attempt, { url, headers, body, sent }, req.signal);
  return withRewrite(fromMessagesEvents(req, upstream.events, upstream.meter), rewrite);
}

function anthropicHeaders(attempt: Attempt, beta: string | undefined): Record<string, string> {
  const headers: Record<string, string> = {
    "content-type": "application/json",
    "anthropic-version": anthropicVersion,
  };
  if (attempt.credential.secret) headers["x-api-key"] = attempt.credential.secret;
  if (beta) headers["anthropic-beta"] = beta;
  return headers;
}

/** The provider's own count of a Messages body's input tokens (its `/messages/count_tokens`). */
export async function anthropicCountTokens(
  { http }: ProviderContext,
  attempt: Attempt,
  { body, anthropicBeta: beta, signal }: CountTokensRequest,
): Promise<number> {
  const answer = await http.postJson<{ input_tokens?: unknown }>(
    joinUrl(attempt.provider.base_url ?? "", "/messages/count_tokens"),
    anthropicHeaders(attempt, beta),
    JSON.stringify({ ...body, model: attempt.model.upstream_model }),
    signal,
    attempt.provider,
  );
  const tokens = answer.input_tokens;
  if (typeof tokens !== "number" || !Number.isInteger(tokens) || tokens < 0) {
    throw new UpstreamFailure("unavailable", 502);
  }
  return tokens;
}
