import type {
  CompactionAsk,
  CompletionRequest,
  CompletionResult,
  ResponseTurn,
} from "../../wire/completion-types.js";
import type { ChatCompletionChunk, ChatCompletionResponse } from "../../wire/openai-types.js";
import { relayEvents } from "../../wire/relay.js";
import type { ResponseObject, ResponsesRequest } from "../../wire/responses-types.js";
import { encodeSSE, parseEventData, type SSEMessage } from "../../wire/sse.js";
import type { StreamCompletion } from "../../wire/stream-types.js";
import {
  chatStreamData,
  fromChatChunks,
  fromChatJson,
  parseChatChunk,
  passThroughChat,
  StreamBroken,
  withJsonEstimate,
} from "../../wire/to-client.js";
import {
  answersAsked,
  asksStreamUsage,
  forwardedBody,
  type Rewrite,
  refuseStopsOver,
  toChatRequest,
  withRewrite,
} from "../../wire/to-provider.js";
import { withoutGatewayReasoning } from "../../wire/translate/encrypted-reasoning.js";
import { encodeResponsesEvents } from "../../wire/translate/errors.js";
import { baseResponse, failedEvents } from "../../wire/translate/responses.js";
import { isRecord, nowSeconds, randomId } from "../../wire/translate/shared.js";
import { dropAddedNullsFromAnswer, withoutAddedNulls } from "../../wire/translate/strict-nulls.js";
import {
  callNameField,
  chatOutputText,
  deltaChars,
  responsesDeltaFields,
  responsesOutputText,
  type Usage,
} from "../../wire/usage.js";
import { joinUrl, type UpstreamHttp } from "../http-upstream.js";
import { type MeteredStream, openMeteredStream, postMeteredJson } from "../metered-stream.js";
import type { Attempt, ProviderContext } from "../provider.js";
import { completionsNative, nativeTextCompletion } from "./completions.js";

/**
 * Chat completions (and Responses, and legacy completions, where the provider speaks them
 * natively).
 */
export async function openaiComplete(
  { http }: ProviderContext,
  attempt: Attempt,
  req: CompletionRequest,
): Promise<CompletionResult> {
  const { provider, credential } = attempt;
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (credential.secret) headers.authorization = `Bearer ${credential.secret}`;
  if (req.style === "responses" && provider.responses_native) {
    return req.compaction
      ? nativeCompaction(http, attempt, req.compaction, req, headers)
      : nativeResponses(http, attempt, req, headers);
  }
  if (req.textCompletion && completionsNative(provider))
    return nativeTextCompletion(http, attempt, req, headers);
  const rewrite: Rewrite = { omittedTools: [] };
  // OpenAI's chat takes custom tools (`openaiProvider.takesCustomTools`), and holds strict
  // schemas to its rules.
  const body = toChatRequest(req, attempt, rewrite, { customTools: true, strictRules: true });
  const nulls = rewrite.addedNulls;
  // A chat client's own `stop` goes as written (the provider answers for it); a translated one is
  // the gateway's to fit within OpenAI's four.
  if (req.style === "messages") refuseStopsOver(req, body, 4);
  const url = joinUrl(provider.base_url ?? "", "/chat/completions");
  const sent = forwardedBody(req, "chat", body.model, req.body, asksStreamUsage(provider));
  if (!req.stream) {
    const result = await postMeteredJson<ChatCompletionResponse>(
      http,
      attempt,
      { url, headers, body, sent },
      req,
      "chat",
      {
        answer: (json) => fromChatJson(req, json),
        outputText: chatOutputText,
        restore: nulls && ((json) => dropAddedNullsFromAnswer(json, nulls)),
      },
    );
    return withRewrite(result, rewrite);
  }
  const answers = answersAsked(body);
  const upstream = await openMeteredStream(
    http,
    attempt,
    { url, headers, body, sent, answers },
    req.signal,
  );
  // A stream whose strict calls or output have nulls to take out is read chunk by chunk.
  if (req.style === "chat" && !nulls)
    return withRewrite(passThroughChat(req, upstream.events, upstream.meter), rewrite);
  const chunks = chatChunks(upstream.events);
  const result = fromChatChunks(
    req,
    nulls ? withoutAddedNulls(chunks, nulls) : chunks,
    upstream.meter,
  );
  return withRewrite(result, rewrite);
}

async function nativeResponses(
  http: UpstreamHttp,
  attempt: Attempt,
  req: CompletionRequest,
  headers: Record<string, string>,
): Promise<CompletionResult> {
  const { provider, model } = attempt;
  const client = withoutGatewayReasoning(
    req.responseTurn?.nativeBody({ providerId: provider.id, secret: attempt.credential.secret }) ??
      req.body,
  );
  const body: Record<string, unknown> = { ...client, model: model.upstream_model };
  // Every response is answered complete (docs/stateful-apis.md), `background` ones too: the
  // provider would answer one queued, which the gateway could neither store nor serve to the
  // client's polling GET /v1/responses/{id}. Its options (a completion window) go with it: the
  // discounted windows are refused without `background`.
  const background = "background" in body;
  delete body.background;
  if (background) delete body.background_options;
  // The body the turn left as the client sent it goes as the client wrote it.
  const sent = background
    ? undefined
    : forwardedBody(req, "responses", model.upstream_model, client);
  const limit = body.max_output_tokens;
  if (req.viaRoute && typeof limit === "number" && limit > model.max_output_tokens)
    body.max_output_tokens = model.max_output_tokens;
  const url = joinUrl(provider.base_url ?? "", "/responses");
  if (!req.stream) {
    const json = await http.postJson<{
      usage?: { input_tokens?: number; output_tokens?: number };
      output?: unknown;
    }>(url, headers, sent ?? JSON.stringify(body), req.signal, provider);
    const usage = {
      input_tokens: json.usage?.input_tokens ?? 0,
      output_tokens: json.usage?.output_tokens ?? 0,
    };
    const answer: Record<string, unknown> = { ...json, model: req.clientModel };
    req.responseTurn?.echo(answer);
    const result = { kind: "json" as const, body: answer, usage };
    return withJsonEstimate(result, body, () => responsesOutputText(json));
  }
  const upstream = await openMeteredStream(http, attempt, { url, headers, body, sent }, req.signal);
  return responsesPassThrough(req, upstream);
}

/**
 * POST /v1/responses/compact to a provider with a compaction of its own: the client's body (the
 * chain it names as the provider holds it, or replayed), the model renamed; its CompactedResponse
 * back as it is, billed by its usage.
 */
async function nativeCompaction(
  http: UpstreamHttp,
  attempt: Attempt,
  compaction: CompactionAsk,
  req: CompletionRequest,
  headers: Record<string, string>,
): Promise<CompletionResult> {
  const { provider, model } = attempt;
  const client = withoutGatewayReasoning(
    compaction.nativeBody({ providerId: provider.id, secret: attempt.credential.secret }),
  );
  const body: Record<string, unknown> = { ...client, model: model.upstream_model };
  const url = joinUrl(provider.base_url ?? "", "/responses/compact");
  const json = await http.postJson<{
    usage?: { input_tokens?: number; output_tokens?: number };
    output?: unknown;
  }>(url, headers, JSON.stringify(body), req.signal, provider);
  const usage = {
    input_tokens: json.usage?.input_tokens ?? 0,
    output_tokens: json.usage?.output_tokens ?? 0,
  };
  const result = { kind: "json" as const, body: json as Record<string, unknown>, usage };
  return withJsonEstimate(result, body, () => responsesOutputText(json));
}

interface LifecycleEvent {
  response?: {
    model?: unknown;
    usage?: { input_tokens?: number; output_tokens?: number };
    [field: string]: unknown;
  };
}

async function* chatChunks(events: AsyncIterable<SSEMessage>): AsyncGenerator<ChatCompletionChunk> {
  for await (const data of chatStreamData(events)) {
    const chunk = parseChatChunk(data);
    if (chunk) yield chunk;
  }
}

/**
 * A native Responses stream, event by event. The lifecycle events that carry the whole response
 * (`response.created`, `response.completed`, ...) name the client's model, never the upstream's;
 * `response.completed` also carries the usage.
 */
function responsesPassThrough(
  req: CompletionRequest,
  { events, meter }: MeteredStream,
): StreamCompletion {
  // What the gateway's own last events continue from if the stream breaks: the upstream's
  // numbering and its latest Response.
  let nextSequence = 0;
  let latest: ResponseObject | undefined;
  let completed = false;
  const pieces = relayEvents(events, {
    event(ev) {
      if (ev.event === "error" || ev.event === "response.failed")
        throw new StreamBroken("upstream stream failed");
      const name = ev.event ?? "message";
      if (name.endsWith(".delta")) meter.delivered(deltaChars(ev.data, responsesDeltaFields));
      else if (name === "response.output_item.added")
        meter.delivered(deltaChars(ev.data, callNameField));
      const sequence = sequenceNumber.exec(ev.data);
      if (sequence) nextSequence = Number(sequence[1]) + 1;
      // A response cut short (max_output_tokens, content filter) ends with response.incomplete:
      // as final as response.completed, and it carries the usage the same way.
      const final = ev.event === "response.completed" || ev.event === "response.incomplete";
      const lifecycle = final || (name.startsWith("response.") && ev.data.includes('"model"'));
      const data = lifecycle ? (parseEventData(ev.data) as LifecycleEvent | undefined) : undefined;
      if (final) {
        completed = true;
        meter.report(
          {
            input_tokens: data?.response?.usage?.input_tokens ?? 0,
            output_tokens: data?.response?.usage?.output_tokens ?? 0,
          },
          true,
        );
      }
      if (data?.response?.model !== undefined) {
        data.response.model = req.clientModel;
        latest = data.response as ResponseObject;
        req.responseTurn?.echo(data.response);
        return encodeSSE(data, name);
      }
      const renamed = itemEvent(req.responseTurn, name, ev.data);
      return encodeSSE(renamed ?? ev.data, name);
    },
    apart: (ev) => ev.event === "response.completed" || ev.event === "response.incomplete",
    end() {
      if (!completed) throw new StreamBroken();
      return [];
    },
  });
  const errorEvent = (message: string, code: string, billed: Usage) => {
    const response =
      latest ??
      baseResponse(req.body as ResponsesRequest, req.clientModel, randomId("resp_"), nowSeconds());
    return encodeResponsesEvents(failedEvents(response, nextSequence, message, code, billed));
  };
  return { kind: "stream", pieces, meter, errorEvent };
}

const sequenceNumber = /"sequence_number"\s*:\s*(\d+)/;

/**
 * An event naming an output item, as the turn names that item (`ResponseTurn.echoItem`); undefined
 * when it stays as the server wrote it. An item's first and last events are read for its id; the
 * others (deltas) only once an item of the answer was given another id.
 */
function itemEvent(
  turn: ResponseTurn | undefined,
  name: string,
  data: string,
): Record<string, unknown> | undefined {
  if (!turn) return undefined;
  const named =
    name === "response.output_item.added" ||
    name === "response.output_item.done" ||
    (turn.renamesItems() && data.includes('"item_id"'));
  if (!named) return undefined;
  const event = parseEventData(data);
  return isRecord(event) && turn.echoItem(event) ? event : undefined;
}
