import { providerOptions } from "../../../store/provider-options.js";
import type { ProviderRow } from "../../../store/types.js";
import type { CompletionRequest, CompletionResult } from "../../wire/completion-types.js";
import { relayEvents, type SSEStream } from "../../wire/relay.js";
import { encodeSSE, SSE_DONE } from "../../wire/sse.js";
import type { StreamCompletion } from "../../wire/stream-types.js";
import { parseChatChunk, StreamBroken } from "../../wire/to-client.js";
import { asksStreamUsage, forwardedBody, withStreamUsage } from "../../wire/to-provider.js";
import { asString, isRecord, type JsonObject } from "../../wire/translate/shared.js";
import {
  textChoicesAsked,
  textCompletionInputTokens,
} from "../../wire/translate/text-completion.js";
import { type StreamMeter, usageFromChat } from "../../wire/usage.js";
import { joinUrl, type UpstreamHttp } from "../http-upstream.js";
import { openMeteredStream, postMeteredJson } from "../metered-stream.js";
import type { Attempt } from "../provider.js";

/*
 * The legacy Completions API (POST /v1/completions) to a provider that serves it itself
 * (`completions_native`: vLLM, llama.cpp's server, DeepSeek's beta, Together, Fireworks): the
 * client's body goes to the provider's `/completions` as the client wrote it, only the model
 * renamed, so `suffix`, `echo`, `logprobs`, `best_of` and token-id prompts reach it; the answer
 * comes back as the provider wrote it, the model renamed, a stream chunk by chunk.
 */

/** The provider serves POST /v1/completions with its own Completions API. */
export function completionsNative(provider: Pick<ProviderRow, "options_json">): boolean {
  return providerOptions(provider).completions_native === true;
}

/** A Completions answer, whole or a stream's chunk, as far as the gateway reads it. */
interface TextCompletionAnswer {
  model: string;
  choices?: { text?: unknown; index?: unknown; finish_reason?: unknown }[];
  usage?: unknown;
}

/** The request's `textCompletion` body, sent to the provider's own Completions API. */
export async function nativeTextCompletion(
  http: UpstreamHttp,
  attempt: Attempt,
  req: CompletionRequest,
  headers: Record<string, string>,
): Promise<CompletionResult> {
  const { provider, model } = attempt;
  const client = req.textCompletion ?? req.body;
  const body: JsonObject = { ...client, model: model.upstream_model };
  // A route's step is a rewritten body: its output limit within the model's maximum.
  const limit = body.max_tokens;
  if (req.viaRoute && typeof limit === "number" && limit > model.max_output_tokens)
    body.max_tokens = model.max_output_tokens;
  // A stream's usage is billed from the provider's last chunk, which it sends when asked, as a
  // chat stream's is.
  const asksUsage = asksStreamUsage(provider);
  if (req.stream) withStreamUsage(body, asksUsage);
  const call = {
    url: joinUrl(provider.base_url ?? "", "/completions"),
    headers,
    body,
    sent: forwardedBody(req, "chat", model.upstream_model, client, asksUsage),
    answers: textChoicesAsked(client),
    inputTokens: () => textCompletionInputTokens(body),
  };
  if (!req.stream)
    return postMeteredJson<TextCompletionAnswer>(http, attempt, call, req, "chat", {
      answer: (json) => ({
        kind: "json",
        body: { ...json, model: req.clientModel },
        usage: usageFromChat(json),
      }),
      outputText: completionText,
    });
  const upstream = await openMeteredStream(http, attempt, call, req.signal);
  return passThroughTextCompletion(req, upstream.events, upstream.meter);
}

/** Every choice's text, for the estimate of an answer whose provider reported no usage. */
function completionText(answer: TextCompletionAnswer): string {
  return (answer.choices ?? []).map((choice) => asString(choice.text) ?? "").join("");
}

/**
 * A Completions stream relayed chunk by chunk, each with the client's model: every choice's text
 * is counted as it goes, each finish noted, the usage reported; the usage chunk a client did not
 * ask for is left out. Ends with the gateway's own `[DONE]` once every choice finished, else
 * StreamBroken, as a chat stream passed through does.
 */
function passThroughTextCompletion(
  req: CompletionRequest,
  events: SSEStream,
  meter: StreamMeter,
): StreamCompletion {
  const asked = req.textCompletion?.stream_options;
  const wantsUsage = isRecord(asked) && asked.include_usage === true;
  // Read on to the end of the body after [DONE]: leaving early aborts the upstream response.
  let done = false;
  const pieces = relayEvents(events, {
    event(ev) {
      if (done) return "";
      if (ev.data === "[DONE]") {
        done = true;
        return "";
      }
      // A chunk with `error` (a failure after the 200) breaks the stream, as a chat chunk's does.
      const chunk: unknown = parseChatChunk(ev.data);
      if (!isRecord(chunk)) return "";
      const choices = Array.isArray(chunk.choices) ? chunk.choices : [];
      let chars = 0;
      let deltas = 0;
      for (const choice of choices) {
        if (!isRecord(choice)) continue;
        const text = asString(choice.text) ?? "";
        if (text !== "") {
          chars += text.length;
          deltas++;
        }
        // A choice without its index is the one answer of a server that leaves it out.
        if (choice.finish_reason)
          meter.finished(typeof choice.index === "number" ? choice.index : 0);
      }
      meter.delivered(chars, deltas);
      if (isRecord(chunk.usage)) meter.report(usageFromChat(chunk));
      if (wantsUsage || chunk.usage == null) return encodeSSE({ ...chunk, model: req.clientModel });
      if (choices.length === 0) return "";
      const shown: JsonObject = { ...chunk, model: req.clientModel };
      delete shown.usage;
      return encodeSSE(shown);
    },
    // The closing `[DONE]` is the gateway's own, sent once the upstream's stream ended.
    apart: () => false,
    end() {
      if (!meter.answered()) throw new StreamBroken();
      return [SSE_DONE];
    },
  });
  return { kind: "stream", pieces, meter };
}
