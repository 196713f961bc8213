import type { ModelRow } from "../../store/types.js";
import type { MessagesRequest, MessagesResponse } from "./anthropic-types.js";
import type {
  Backend,
  ClientStyle,
  CompletionRequest,
  CompletionResult,
  JsonCompletion,
} from "./completion-types.js";
import type {
  ChatCompletionChunk,
  ChatCompletionRequest,
  ChatCompletionResponse,
} from "./openai-types.js";
import type { ResponsesRequest } from "./responses-types.js";
import { encodeSSE, parseEventData, SSE_DONE, type SSEMessage } from "./sse.js";
import type { StreamCompletion, StreamPiece } from "./stream-types.js";
import {
  chatRequestToMessages,
  MessagesStreamToChat,
  messagesResponseToChat,
  untranslatableToMessages,
} from "./translate/chat-to-messages.js";
import { encodeResponsesEvents } from "./translate/errors.js";
import {
  anthropicServerTools,
  ChatStreamToMessages,
  chatResponseToMessages,
  messagesRequestToChat,
  serverToolSentence,
} from "./translate/messages-to-chat.js";
import {
  ChatStreamToResponses,
  chatResponseToResponses,
  hostedToolSentence,
  responsesRequestToChat,
  toolsOutsideChat,
} from "./translate/responses.js";
import { UnsupportedRequest } from "./upstream-failure.js";
import {
  chatDeltaFields,
  deltaChars,
  estimateRequestTokens,
  estimateTokens,
  messagesDeltaFields,
  type StreamMeter,
  usageFromChat,
  usageFromMessages,
  usageOrEstimate,
} from "./usage.js";

/**
 * Glue between the three client styles and the two native wires (chat completions, messages).
 * Same style and wire: the body passes with only the model mapped. Otherwise the translators run.
 */

export class StreamBroken extends Error {
  constructor(message = "upstream stream ended before it was complete") {
    super(message);
    this.name = "StreamBroken";
  }
}

// ---- requests ---------------------------------------------------------------

/** What rewriting a request for one backend left out, for the response header and the log. */
export interface Rewrite {
  omittedTools: string[];
}

/**
 * The client's output limit: `max_tokens`, `max_completion_tokens` or `max_output_tokens` by
 * style, as the field's name and its value.
 */
export function outputLimit(
  style: ClientStyle,
  body: Record<string, unknown>,
): { field: string; value: number } | undefined {
  const field =
    style === "messages"
      ? "max_tokens"
      : style === "responses"
        ? "max_output_tokens"
        : body.max_completion_tokens != null
          ? "max_completion_tokens"
          : "max_tokens";
  const value = body[field];
  return typeof value === "number" ? { field, value } : undefined;
}

/**
 * Whether the body sent to this backend is rewritten rather than forwarded as the client wrote
 * it: translated to another wire (the provider does not speak the client's style, `native`
 * false), run through the Responses bridge, or a route's step. Only a rewritten body has its
 * output limit brought within the model's maximum.
 */
export function rewritesBody(native: boolean, viaRoute: boolean): boolean {
  return viaRoute || !native;
}

/**
 * The output tokens a request may produce on this backend: what the hold at admission covers.
 * `native`: the backend's provider speaks the client's style (undefined when it is unknown).
 */
export function outputBound(
  style: ClientStyle,
  body: Record<string, unknown>,
  model: Pick<ModelRow, "max_output_tokens">,
  native: boolean | undefined,
  viaRoute: boolean,
): number {
  const requested = outputLimit(style, body)?.value;
  if (requested === undefined) return model.max_output_tokens;
  if (native !== undefined && rewritesBody(native, viaRoute))
    return Math.min(requested, model.max_output_tokens);
  return requested;
}

/** The chat request's output limits, at most `max`. */
function clampChat(body: ChatCompletionRequest, max: number): ChatCompletionRequest {
  for (const field of ["max_tokens", "max_completion_tokens"] as const) {
    const value = body[field];
    if (typeof value === "number" && value > max) body[field] = max;
  }
  return body;
}

/** Where a chat body goes after `toChatRequest`, when it is not sent as it is. */
export interface ChatOnward {
  /** Translated on to another wire: a rewrite, so its output limit is clamped. */
  translated?: boolean;
  /** That wire runs a web search of its own (Anthropic's): a hosted web search tool stays. */
  webSearch?: boolean;
}

export function toChatRequest(
  req: CompletionRequest,
  attempt: Backend,
  rewrite: Rewrite,
  onward: ChatOnward = {},
): ChatCompletionRequest {
  const { model } = attempt;
  const max = model.max_output_tokens;
  if (req.style === "messages") {
    const body = req.body as MessagesRequest;
    const server = anthropicServerTools(body);
    if (server.length > 0) omitTools(attempt, server, serverToolSentence(server), rewrite);
    return clampChat(messagesRequestToChat(body, model.upstream_model), max);
  }
  if (req.style === "responses") {
    const body = req.body as ResponsesRequest;
    const chat = responsesRequestToChat(body, model.upstream_model);
    const outside = toolsOutsideChat(body);
    // A wire that runs a web search of its own gets it as chat's web search option.
    const searches = onward.webSearch ? outside.filter(isWebSearch) : [];
    if (searches.length > 0) chat.web_search_options = {};
    const omitted = outside.filter((t) => !searches.includes(t));
    if (omitted.length > 0) omitTools(attempt, omitted, hostedToolSentence(omitted), rewrite);
    return clampChat(chat, max);
  }
  const body = { ...req.body, model: model.upstream_model } as ChatCompletionRequest;
  // Usage is needed for billing; the extra usage chunk is removed again if the client did not ask.
  if (req.stream) body.stream_options = { ...(body.stream_options ?? {}), include_usage: true };
  return req.viaRoute || onward.translated ? clampChat(body, max) : body;
}

export function toMessagesRequest(
  req: CompletionRequest,
  attempt: Backend,
  rewrite: Rewrite,
): MessagesRequest {
  const { model } = attempt;
  const max = model.max_output_tokens;
  if (req.style === "messages") {
    const body = { ...req.body, model: model.upstream_model } as MessagesRequest;
    if (req.viaRoute && body.max_tokens > max) body.max_tokens = max;
    return body;
  }
  const chat = toChatRequest(req, attempt, rewrite, { translated: true, webSearch: true });
  refuseGap(untranslatableToMessages(chat));
  const out = chatRequestToMessages(chat, model.upstream_model, max);
  out.max_tokens = Math.min(out.max_tokens, max);
  return out;
}

const isWebSearch = (type: string) => type.startsWith("web_search");

/**
 * Tools this backend cannot run: left out and named in the answer's header and the request log,
 * or (model or provider option `unsupported_tools: reject`) the request refused before anything
 * is sent. A route's step with later steps is skipped instead, since one of those may run them.
 */
function omitTools(attempt: Backend, tools: string[], sentence: string, rewrite: Rewrite) {
  if (attempt.lastStep === false || unsupportedToolsPolicy(attempt) === "reject")
    throw new UnsupportedRequest(sentence);
  for (const tool of tools)
    if (!rewrite.omittedTools.includes(tool)) rewrite.omittedTools.push(tool);
}

/** The model's own `unsupported_tools` if it has one, else its provider's. */
function unsupportedToolsPolicy({
  model,
  provider,
}: Pick<Backend, "model" | "provider">): "omit" | "reject" {
  if (model.unsupported_tools) return model.unsupported_tools;
  const options = JSON.parse(provider.options_json) as { unsupported_tools?: string };
  return options.unsupported_tools === "reject" ? "reject" : "omit";
}

/** The result, naming the tools its request was sent without. */
export function withRewrite<T extends CompletionResult>(result: T, rewrite: Rewrite): T {
  if (rewrite.omittedTools.length > 0) result.omittedTools = rewrite.omittedTools;
  return result;
}

/** Something the provider's wire cannot carry fails the attempt before anything is sent. */
function refuseGap(gap: string | undefined): void {
  if (gap) throw new UnsupportedRequest(gap);
}

function clientWantsUsage(req: CompletionRequest): boolean {
  const options = req.body.stream_options as { include_usage?: boolean } | undefined;
  return options?.include_usage === true;
}

// ---- non-stream responses ---------------------------------------------------

export function fromChatJson(req: CompletionRequest, resp: ChatCompletionResponse): JsonCompletion {
  const usage = usageFromChat(resp);
  if (req.style === "messages")
    return { kind: "json", body: chatResponseToMessages(resp, req.clientModel), usage };
  if (req.style === "responses") {
    return {
      kind: "json",
      body: chatResponseToResponses(resp, req.clientModel, req.body as ResponsesRequest),
      usage,
    };
  }
  return { kind: "json", body: { ...resp, model: req.clientModel }, usage };
}

export function fromMessagesJson(req: CompletionRequest, resp: MessagesResponse): JsonCompletion {
  const usage = usageFromMessages(resp);
  if (req.style === "messages")
    return { kind: "json", body: { ...resp, model: req.clientModel }, usage };
  return fromChatJson(req, messagesResponseToChat(resp, req.clientModel));
}

// ---- streams ----------------------------------------------------------------

/**
 * A stream of chat chunks (from the mock, or parsed from an upstream) in the client's style, billed
 * by `meter`: the chunks' deltas are counted as they go to the client, their usage reported.
 */
export function fromChatChunks(
  req: CompletionRequest,
  chunks: AsyncIterable<ChatCompletionChunk>,
  meter: StreamMeter,
): StreamCompletion {
  if (req.style === "chat") {
    const relay = new ChatChunkRelay(req, meter);
    async function* pieces(): AsyncGenerator<StreamPiece> {
      for await (const chunk of chunks) {
        const piece = relay.relay(chunk);
        if (piece !== undefined) yield piece;
      }
      if (!relay.finished) throw new StreamBroken();
      yield SSE_DONE;
    }
    return { kind: "stream", pieces: pieces(), usage: () => meter.billed() };
  }
  const translator =
    req.style === "messages"
      ? new ChatStreamToMessages(req.clientModel)
      : new ChatStreamToResponses(req.clientModel, req.body as ResponsesRequest);
  async function* pieces(): AsyncGenerator<StreamPiece> {
    let finished = false;
    for await (const chunk of chunks) {
      if (meterChunk(meter, chunk)) finished = true;
      for (const ev of translator.push(chunk)) yield encodeSSE(ev.data, ev.event);
    }
    if (!finished) throw new StreamBroken();
    for (const ev of translator.finish()) yield encodeSSE(ev.data, ev.event);
  }
  const result: StreamCompletion = {
    kind: "stream",
    pieces: pieces(),
    usage: () => meter.billed(),
  };
  if (translator instanceof ChatStreamToResponses)
    result.errorEvent = (message, code) => encodeResponsesEvents(translator.fail(message, code));
  return result;
}

/** Counts a chat chunk's deltas and reports its usage; true when it finishes a choice. */
function meterChunk(meter: StreamMeter, chunk: ChatCompletionChunk): boolean {
  let finished = false;
  for (const choice of chunk.choices ?? []) {
    const delta = choice.delta as ChunkDelta | undefined;
    if (delta) {
      let chars = textLength(delta.content) + textLength(delta.reasoning_content);
      chars += textLength(delta.refusal);
      for (const call of delta.tool_calls ?? []) chars += textLength(call.function?.arguments);
      meter.delivered(chars);
    }
    if (choice.finish_reason) finished = true;
  }
  if (finished) meter.finished();
  if (chunk.usage) meter.report(usageFromChat(chunk));
  return finished;
}

interface ChunkDelta {
  content?: unknown;
  reasoning_content?: unknown;
  refusal?: unknown;
  tool_calls?: { function?: { arguments?: unknown } }[];
}

const textLength = (value: unknown) => (typeof value === "string" ? value.length : 0);

/** A JSON answer billed by an estimate where its upstream reported no usage (`usageOrEstimate`). */
export function withJsonEstimate(
  result: JsonCompletion,
  body: unknown,
  outputText: () => string,
): JsonCompletion {
  result.usage = usageOrEstimate(result.usage, () => ({
    input_tokens: estimateRequestTokens(body),
    output_tokens: estimateTokens(outputText()),
  }));
  return result;
}

/** Chat chunks on their way to a chat client: usage and the finish are noted on the way. */
class ChatChunkRelay {
  finished = false;
  private readonly wantsUsage: boolean;

  constructor(
    private readonly req: CompletionRequest,
    private readonly meter: StreamMeter,
  ) {
    this.wantsUsage = clientWantsUsage(req);
  }

  /** The chunk as the client gets it, or undefined for the usage chunk it did not ask for. */
  relay(chunk: ChatCompletionChunk): string | undefined {
    if (meterChunk(this.meter, chunk)) this.finished = true;
    if (!this.wantsUsage && chunk.usage && (chunk.choices?.length ?? 0) === 0) return undefined;
    const out = this.wantsUsage || !chunk.usage ? chunk : { ...chunk, usage: undefined };
    return encodeSSE({ ...out, model: this.req.clientModel });
  }
}

const usageField = /"usage"\s*:\s*(null\b)?/;
const finishReasonSet = /"finish_reason"\s*:\s*"/;
const modelField = /"model"\s*:\s*"(?:[^"\\]|\\.)*"/;

/**
 * Same wire, same style: an openai-wire stream to a chat client. An ordinary chunk (no usage, no
 * error, one `model` field) goes on as the upstream's own text with only the model's value
 * replaced, which spares a JSON parse and re-encode per chunk; the rest take the same path as
 * `fromChatChunks`. Ends as that does: `[DONE]` only after a finish reason, else StreamBroken.
 */
export function passThroughChat(
  req: CompletionRequest,
  events: AsyncIterable<SSEMessage>,
  meter: StreamMeter,
): StreamCompletion {
  const relay = new ChatChunkRelay(req, meter);
  const model = `"model":${JSON.stringify(req.clientModel)}`;
  async function* pieces(): AsyncGenerator<StreamPiece> {
    for await (const data of chatStreamData(events)) {
      if (isOrdinaryChunk(data)) {
        meter.delivered(deltaChars(data, chatDeltaFields));
        if (finishReasonSet.test(data)) {
          relay.finished = true;
          meter.finished();
        }
        yield `data: ${data.replace(modelField, model)}\n\n`;
        continue;
      }
      const chunk = parseChatChunk(data);
      if (!chunk) continue;
      const piece = relay.relay(chunk);
      if (piece !== undefined) yield piece;
    }
    if (!relay.finished) throw new StreamBroken();
    yield SSE_DONE;
  }
  return { kind: "stream", pieces: pieces(), usage: () => meter.billed() };
}

/** The data of an openai-wire stream's events, up to `[DONE]`. */
export async function* chatStreamData(events: AsyncIterable<SSEMessage>): AsyncGenerator<string> {
  let done = false;
  for await (const ev of events) {
    // Read on to the end of the body after [DONE]: leaving early aborts the upstream response,
    // which costs an error object and the keep-alive connection on every stream.
    if (done) continue;
    if (ev.data === "[DONE]") {
      done = true;
      continue;
    }
    yield ev.data;
  }
}

/**
 * One chat chunk of an openai-wire stream; undefined for data that is not JSON (skipped). An
 * OpenAI-compatible server reports a failure after the 200 as a chunk with `error`: that breaks
 * the stream.
 */
export function parseChatChunk(data: string): ChatCompletionChunk | undefined {
  const chunk = parseEventData(data) as ChatCompletionChunk | undefined;
  if ((chunk as { error?: unknown } | undefined)?.error)
    throw new StreamBroken("upstream sent an error chunk");
  return chunk;
}

/**
 * A JSON object on one line (an event's data lines are joined with line breaks, and one `data:`
 * line must carry it on) with no usage numbers and no error, whose one `model` field can be
 * swapped in place.
 */
function isOrdinaryChunk(data: string): boolean {
  if (data.charCodeAt(0) !== 123 /* { */ || data.charCodeAt(data.length - 1) !== 125 /* } */)
    return false;
  if (data.includes("\n")) return false;
  if (data.includes('"error"')) return false;
  const usage = usageField.exec(data);
  if (usage && usage[1] === undefined) return false;
  const first = data.indexOf('"model"');
  return first !== -1 && first === data.lastIndexOf('"model"') && modelField.test(data);
}

/** Anthropic SSE events from an anthropic-wire upstream, in the client's style. */
export function fromMessagesEvents(
  req: CompletionRequest,
  events: AsyncIterable<SSEMessage>,
  meter: StreamMeter,
): StreamCompletion {
  if (req.style === "messages") return passThroughMessages(req, events, meter);
  const toChat = new MessagesStreamToChat(req.clientModel, { includeUsage: true });
  async function* chunks(): AsyncGenerator<ChatCompletionChunk> {
    for await (const ev of checkedMessagesEvents(events)) {
      if (ev.event === "message_start" || ev.event === "message_delta")
        reportMessagesUsage(meter, ev.event, parseEventData(ev.data));
      for (const chunk of toChat.push(ev)) yield chunk as ChatCompletionChunk;
    }
    for (const chunk of toChat.finish()) yield chunk as ChatCompletionChunk;
  }
  // The deltas are counted once, as the chat chunks they become.
  return fromChatChunks(req, chunks(), meter);
}

/** An anthropic-wire stream's events. An `error` event, or an end without `message_stop`, breaks the stream. */
async function* checkedMessagesEvents(
  events: AsyncIterable<SSEMessage>,
): AsyncGenerator<SSEMessage> {
  let stopped = false;
  for await (const ev of events) {
    if (ev.event === "message_stop") stopped = true;
    if (ev.event === "error") throw new StreamBroken("upstream sent an error event");
    yield ev;
  }
  if (!stopped) throw new StreamBroken();
}

/** `message_start` reports the input (and a first output count), `message_delta` the whole answer's output. */
function reportMessagesUsage(meter: StreamMeter, event: string, parsed: unknown): void {
  if (parsed === undefined) return;
  if (event === "message_delta") meter.finished();
  meter.report(usageFromMessages(parsed), event === "message_delta");
}

/**
 * Same wire, same style: each upstream event goes on as it arrives; usage is read on the way, and
 * `message_start` names the client's model, never the upstream's.
 */
function passThroughMessages(
  req: CompletionRequest,
  events: AsyncIterable<SSEMessage>,
  meter: StreamMeter,
): StreamCompletion {
  async function* pieces(): AsyncGenerator<StreamPiece> {
    for await (const ev of checkedMessagesEvents(events)) {
      if (ev.event === "content_block_delta")
        meter.delivered(deltaChars(ev.data, messagesDeltaFields));
      if (ev.event === "message_start" || ev.event === "message_delta") {
        const parsed = parseEventData(ev.data);
        reportMessagesUsage(meter, ev.event, parsed);
        const message = (parsed as { message?: { model?: unknown } } | undefined)?.message;
        if (ev.event === "message_start" && message?.model !== undefined) {
          message.model = req.clientModel;
          yield encodeSSE(parsed as object, ev.event);
          continue;
        }
      }
      yield encodeSSE(ev.data, ev.event);
    }
  }
  return { kind: "stream", pieces: pieces(), usage: () => meter.billed() };
}
