import type { MessagesRequest, MessagesResponse } from "./anthropic-types.js";
import type { ClientStyle, CompletionRequest, JsonCompletion } from "./completion-types.js";
import { closingQuote } from "./json-depth.js";
import type { ChatCompletionChunk, ChatCompletionResponse } from "./openai-types.js";
import { relayEvents, type SSEStream } from "./relay.js";
import type { ResponsesRequest } from "./responses-types.js";
import { encodeSSE, parseEventData, SSE_DONE, type SSEMessage } from "./sse.js";
import type { StreamCompletion, StreamPiece } from "./stream-types.js";
import { MessagesStreamToChat, messagesResponseToChat } from "./translate/chat-to-messages.js";
import { encodeResponsesEvents } from "./translate/errors.js";
import {
  ChatStreamToMessages,
  chatResponseToMessages,
  thinkingOmitted,
} from "./translate/messages-to-chat.js";
import {
  ChatStreamToResponses,
  chatResponseToResponses,
  wantsSummary,
} from "./translate/responses.js";
import { textCompletionChunk } from "./translate/text-completion.js";
import {
  callNameField,
  deltaChars,
  emptyUsage,
  estimateRequestTokens,
  estimateTokens,
  jsonTextLength,
  mergeMessagesUsage,
  messagesDeltaFields,
  type StreamMeter,
  toAnthropicUsage,
  type Usage,
  usageFromChat,
  usageFromMessages,
  usageOrEstimate,
} from "./usage.js";

/*
 * A provider's answer in the client's style: JSON or a stream, translated when style and wire
 * differ, metered as it goes (`StreamMeter`), estimated when the provider reported no usage. The
 * request's way out is `to-provider.ts`.
 */

export class StreamBroken extends Error {
  constructor(message = "upstream stream ended before it was complete") {
    super(message);
    this.name = "StreamBroken";
  }
}

function clientWantsUsage(req: CompletionRequest): boolean {
  const options = req.body.stream_options as { include_usage?: boolean } | undefined;
  return options?.include_usage === true;
}

// ---- non-stream responses ---------------------------------------------------

export function fromChatJson(req: CompletionRequest, resp: ChatCompletionResponse): JsonCompletion {
  const usage = usageFromChat(resp);
  if (req.style === "messages") {
    const shown = !thinkingOmitted(req.body as MessagesRequest);
    return { kind: "json", body: chatResponseToMessages(resp, req.clientModel, shown), usage };
  }
  if (req.style === "responses") {
    return {
      kind: "json",
      body: chatResponseToResponses(
        resp,
        req.clientModel,
        req.body as ResponsesRequest,
        req.responseTurn?.keepSigned,
        req.compacted,
      ),
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
    const relay = new ChatChunkRelay(req, meter, true);
    async function* pieces(): AsyncGenerator<StreamPiece> {
      for await (const chunk of chunks) {
        const piece = relay.relay(chunk);
        if (piece !== undefined) yield piece;
      }
      if (!meter.answered()) throw new StreamBroken();
      yield SSE_DONE;
    }
    return { kind: "stream", pieces: pieces(), meter };
  }
  const showsThinking =
    req.style === "messages"
      ? !thinkingOmitted(req.body as MessagesRequest)
      : wantsSummary(req.body as ResponsesRequest);
  const translator =
    req.style === "messages"
      ? new ChatStreamToMessages(req.clientModel, () => meter.billedAhead(), showsThinking)
      : new ChatStreamToResponses(
          req.clientModel,
          req.body as ResponsesRequest,
          req.responseTurn?.keepSigned,
          () => meter.billedAhead(),
          req.compacted,
        );
  // The messages translation holds a tool call back until its block can open (one block at a
  // time), so its calls are counted as the events that write them are made, not as read.
  const callsWritten = req.style === "messages";
  const encoded = (ev: { event?: string; data: object }) => {
    if (callsWritten) meter.delivered(toolCallChars(ev.data));
    return encodeSSE(ev.data, ev.event);
  };
  async function* pieces(): AsyncGenerator<StreamPiece> {
    for await (const chunk of chunks) {
      meterChunk(meter, chunk, showsThinking, !callsWritten);
      for (const ev of translator.push(chunk)) yield encoded(ev);
    }
    if (!meter.answered()) throw new StreamBroken();
    for (const ev of translator.finish()) yield encoded(ev);
  }
  const result: StreamCompletion = {
    kind: "stream",
    pieces: pieces(),
    meter,
  };
  if (translator instanceof ChatStreamToResponses)
    result.errorEvent = (message, code, billed) =>
      encodeResponsesEvents(translator.fail(message, code, billed));
  return result;
}

/**
 * Counts a chat chunk's deltas, the choices it finishes, and reports its usage. `showsThinking`:
 * the client's style is shown the chunk's reasoning; thinking a translation leaves out (a
 * Responses client that asked for no summary, a messages client that asked for it omitted) never
 * reaches the client, so it is no delivered output.
 */
function meterChunk(
  meter: StreamMeter,
  chunk: ChatCompletionChunk,
  showsThinking: boolean | "both",
  calls = true,
): void {
  for (const choice of chunk.choices ?? []) {
    const delta = choice.delta as ChunkDelta | undefined;
    if (delta) {
      let chars = textLength(delta.content) + textLength(delta.refusal);
      // A chat client is relayed the chunk whole; a translation shows `reasoning` (OpenRouter's
      // and vLLM's name) where there is no `reasoning_content`.
      if (showsThinking === "both")
        chars += textLength(delta.reasoning_content) + textLength(delta.reasoning);
      else if (showsThinking)
        chars += textLength(
          typeof delta.reasoning_content === "string" ? delta.reasoning_content : delta.reasoning,
        );
      for (const call of calls ? (delta.tool_calls ?? []) : []) {
        chars += textLength(call.function?.name) + textLength(call.function?.arguments);
        chars += textLength(call.custom?.name) + textLength(call.custom?.input);
      }
      meter.delivered(chars);
    }
    // A choice without its index is the one answer of a server that leaves it out.
    if (choice.finish_reason) meter.finished(choice.index ?? 0);
  }
  if (chunk.usage) meter.report(usageFromChat(chunk));
}

/** A messages event's tool call output: a `tool_use` block's name, or a piece of its input. */
function toolCallChars(data: unknown): number {
  const ev = data as {
    type?: unknown;
    content_block?: { type?: unknown; name?: unknown };
    delta?: { type?: unknown; partial_json?: unknown };
  };
  if (ev.type === "content_block_start" && ev.content_block?.type === "tool_use")
    return textLength(ev.content_block.name);
  if (ev.type === "content_block_delta" && ev.delta?.type === "input_json_delta")
    return textLength(ev.delta.partial_json);
  return 0;
}

interface ChunkDelta {
  content?: unknown;
  reasoning_content?: unknown;
  reasoning?: unknown;
  refusal?: unknown;
  tool_calls?: {
    function?: { name?: unknown; arguments?: unknown };
    custom?: { name?: unknown; input?: unknown };
  }[];
}

const textLength = (value: unknown) => (typeof value === "string" ? value.length : 0);

/**
 * A JSON answer billed by an estimate where its upstream reported no usage (`usageOrEstimate`).
 * `style`: the answer was translated into that style, and its `usage` is the gateway's to write:
 * it reports what is billed, the estimate where the provider left a part out, not a zero.
 * `inputTokens`: the input's estimate where the body's text is not all of it.
 */
export function withJsonEstimate(
  result: JsonCompletion,
  body: unknown,
  outputText: () => string,
  style?: ClientStyle,
  inputTokens = () => estimateRequestTokens(body),
): JsonCompletion {
  const reported = result.usage;
  result.usage = usageOrEstimate(reported, () => ({
    input_tokens: inputTokens(),
    output_tokens: estimateTokens(outputText()),
  }));
  if (style !== undefined && result.usage !== reported) showUsage(style, result.body, result.usage);
  return result;
}

/** Sets the counts of an answer's `usage` in the client's style to `usage`. */
function showUsage(style: ClientStyle, answer: unknown, usage: Usage): void {
  if (typeof answer !== "object" || answer === null) return;
  const body = answer as { usage?: Record<string, unknown> };
  const shown = typeof body.usage === "object" && body.usage !== null ? body.usage : {};
  body.usage = shown;
  if (style === "chat") {
    shown.prompt_tokens = usage.input_tokens;
    shown.completion_tokens = usage.output_tokens;
    shown.total_tokens = usage.input_tokens + usage.output_tokens;
    return;
  }
  if (style === "messages") {
    // Anthropic's input leaves out the cached part, which it reports apart.
    const anthropic = toAnthropicUsage(usage);
    shown.input_tokens = anthropic.input_tokens;
    shown.output_tokens = anthropic.output_tokens;
    return;
  }
  shown.input_tokens = usage.input_tokens;
  shown.output_tokens = usage.output_tokens;
  shown.total_tokens = usage.input_tokens + usage.output_tokens;
}

/**
 * Chat chunks on their way to a chat client: usage and the finish are noted on the way. The usage
 * a client did not ask for is left out. `ownChunks`: the gateway made the chunks (the mock's, or
 * translated from another wire), so it gives a client that asked for usage OpenAI's `usage: null`
 * on each chunk before the usage; a provider's own chunks go on as it sent them.
 */
class ChatChunkRelay {
  private readonly wantsUsage: boolean;

  constructor(
    private readonly req: CompletionRequest,
    private readonly meter: StreamMeter,
    private readonly ownChunks = false,
  ) {
    this.wantsUsage = clientWantsUsage(req);
  }

  /** The chunk as the client gets it, or undefined for the usage chunk it did not ask for. */
  relay(chunk: ChatCompletionChunk): string | undefined {
    meterChunk(this.meter, chunk, this.req.textCompletion ? false : "both");
    if (!this.wantsUsage && chunk.usage && (chunk.choices?.length ?? 0) === 0) return undefined;
    // undefined leaves the field out of the JSON; a provider's own `usage: null` stays.
    const usage = this.wantsUsage
      ? chunk.usage !== undefined
        ? chunk.usage
        : this.ownChunks
          ? null
          : undefined
      : chunk.usage && undefined;
    const out = { ...chunk, model: this.req.clientModel, usage };
    // The gateway's own chunks: their usage is the gateway's to write, so it says what the stream
    // is billed (the estimate where the provider reported a part as nothing), as a translated
    // whole answer does. Shown only: the meter keeps the provider's report as it was.
    if (this.ownChunks && usage) {
      out.usage = { ...usage };
      showUsage("chat", out, this.meter.billedAhead());
    }
    // A legacy completion's chunk is made from the chat chunk here, before it is encoded: never
    // encoded as chat, parsed back and encoded again.
    return encodeSSE(this.req.textCompletion ? textCompletionChunk(out) : out);
  }
}

/**
 * The keys an ordinary chat chunk is read for, each with the opening quote of its value when that
 * is a string, or its null: the delta fields whose text is billed (`chatDeltaFields`), each
 * choice's `delta`, and model, usage, error and finish_reason. A quote inside a JSON string is
 * escaped, so `"key":` matches keys only. A string value is then skipped whole with indexOf
 * (`closingQuote`): a pattern that matched it a character at a time overflowed the stack on a
 * value of some millions of characters, which a chunk may carry.
 */
const chatChunkKeys =
  /"(content|name|arguments|input|reasoning_content|reasoning|refusal|delta|model|usage|error|finish_reason)"\s*:\s*("|null\b)?/g;

interface OrdinaryChunk {
  /** The chunk with `model` (the field, `"model":"..."`) in place of its own. */
  text: string;
  /** Characters of the delta fields' text, as `deltaChars` counts them. */
  chars: number;
  /** Choices whose delta carries text: a chunk of `n` answers may carry a delta of each. */
  deltas: number;
}

/**
 * Same wire, same style: an openai-wire stream to a chat client. An ordinary chunk (no usage, no
 * error, no finish, one `model` field) goes on as the upstream's own text with only the model's value
 * replaced, which spares a JSON parse and re-encode per chunk; the rest take the same path as
 * `fromChatChunks`. Ends as that does: `[DONE]` only once every answer asked for (`n`) finished,
 * else StreamBroken.
 */
export function passThroughChat(
  req: CompletionRequest,
  events: SSEStream,
  meter: StreamMeter,
): StreamCompletion {
  const relay = new ChatChunkRelay(req, meter);
  const model = `"model":${JSON.stringify(req.clientModel)}`;
  // Read on to the end of the body after [DONE]: leaving early aborts the upstream response,
  // which costs an error object and the keep-alive connection on every stream.
  let done = false;
  const pieces = relayEvents(events, {
    event(ev) {
      const data = ev.data;
      if (done) return "";
      if (data === "[DONE]") {
        done = true;
        return "";
      }
      // The scan counts every text field, reasoning too, which a legacy completion never shows;
      // and it passes on a chat chunk's text, where a legacy completion's client reads another.
      const ordinary = req.textCompletion ? undefined : ordinaryChunk(data, model);
      if (ordinary !== undefined) {
        meter.delivered(ordinary.chars, ordinary.deltas);
        return `data: ${ordinary.text}\n\n`;
      }
      const chunk = parseChatChunk(data);
      return chunk ? (relay.relay(chunk) ?? "") : "";
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
 * An ordinary chunk, read, or undefined for any other event. Ordinary: a JSON object on one line
 * (an event's data lines are joined with line breaks, and one `data:` line must carry it on) with
 * no usage numbers, no error and no finish, whose one `model` field can be swapped in place. This runs for
 * every event of every chat stream, so the chunk is read in one pass of one expression.
 */
function ordinaryChunk(data: string, model: string): OrdinaryChunk | undefined {
  if (data.charCodeAt(0) !== 123 /* { */ || data.charCodeAt(data.length - 1) !== 125 /* } */)
    return undefined;
  if (data.includes("\n")) return undefined;
  let chars = 0;
  let deltas = 0;
  // The choice whose delta the text read belongs to has been counted.
  let counted = false;
  let modelAt = -1;
  let modelEnd = -1;
  const keys = chatChunkKeys;
  keys.lastIndex = 0;
  for (let match = keys.exec(data); match !== null; match = keys.exec(data)) {
    let text: string | undefined;
    if (match[2] === '"') {
      const open = keys.lastIndex - 1;
      const close = closingQuote(data, open);
      if (close === -1) return undefined;
      text = data.slice(open + 1, close);
      keys.lastIndex = close + 1;
    }
    switch (match[1]) {
      case "delta":
        counted = false;
        break;
      case "model":
        if (modelAt !== -1 || text === undefined) return undefined;
        modelAt = match.index;
        modelEnd = keys.lastIndex;
        break;
      case "usage":
        if (match[2] !== "null") return undefined;
        break;
      case "error":
        return undefined;
      case "finish_reason":
        // A finish counts by its choice's index, which the scan does not tell from a tool
        // call's: the chunk is parsed (once an answer).
        if (text !== undefined) return undefined;
        break;
      default: {
        const length = text === undefined ? 0 : jsonTextLength(text);
        if (length === 0) break;
        chars += length;
        if (!counted) deltas++;
        counted = true;
      }
    }
  }
  if (modelAt === -1) return undefined;
  return { text: data.slice(0, modelAt) + model + data.slice(modelEnd), chars, deltas };
}

/** Anthropic SSE events from an anthropic-wire upstream, in the client's style. */
export function fromMessagesEvents(
  req: CompletionRequest,
  events: SSEStream,
  meter: StreamMeter,
): StreamCompletion {
  if (req.style === "messages") return passThroughMessages(req, events, meter);
  const toChat = new MessagesStreamToChat(req.clientModel, { includeUsage: true });
  const reportUsage = messagesUsageReporter(meter);
  async function* chunks(): AsyncGenerator<ChatCompletionChunk> {
    for await (const ev of checkedMessagesEvents(events)) {
      if (ev.event === "message_start" || ev.event === "message_delta")
        reportUsage(ev.event, parseEventData(ev.data));
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

/**
 * What a stream's usage events report to its meter: `message_start` the input (and a first output
 * count), `message_delta` the whole answer's, each merged into the stream's usage so far (the
 * counts are cumulative, and an event may restate only some of them).
 */
function messagesUsageReporter(meter: StreamMeter): (event: string, parsed: unknown) => void {
  let usage = emptyUsage();
  return (event, parsed) => {
    if (typeof parsed !== "object" || parsed === null) return;
    if (event === "message_delta") meter.finished();
    const reported = parsed as { message?: { usage?: unknown }; usage?: unknown };
    usage = mergeMessagesUsage(usage, reported.message?.usage ?? reported.usage);
    meter.report(usage, event === "message_delta");
  };
}

/**
 * Same wire, same style: each upstream event goes on as it arrives; usage is read on the way, and
 * `message_start` names the client's model, never the upstream's. The checks are
 * `checkedMessagesEvents`'s.
 */
function passThroughMessages(
  req: CompletionRequest,
  events: SSEStream,
  meter: StreamMeter,
): StreamCompletion {
  let stopped = false;
  const reportUsage = messagesUsageReporter(meter);
  const pieces = relayEvents(events, {
    event(ev) {
      if (ev.event === "message_stop") stopped = true;
      if (ev.event === "error") throw new StreamBroken("upstream sent an error event");
      if (ev.event === "content_block_delta")
        meter.delivered(deltaChars(ev.data, messagesDeltaFields));
      else if (ev.event === "content_block_start")
        meter.delivered(deltaChars(ev.data, callNameField));
      if (ev.event === "message_start" || ev.event === "message_delta") {
        const parsed = parseEventData(ev.data);
        reportUsage(ev.event, parsed);
        const message = (parsed as { message?: { model?: unknown } } | undefined)?.message;
        if (ev.event === "message_start" && message?.model !== undefined) {
          message.model = req.clientModel;
          return encodeSSE(parsed as object, ev.event);
        }
      }
      return encodeSSE(ev.data, ev.event);
    },
    apart: (ev) => ev.event === "message_stop",
    end() {
      if (!stopped) throw new StreamBroken();
      return [];
    },
  });
  return { kind: "stream", pieces, meter };
}
