import type { ThreadConversation } from "../../store/threads.js";
import type { ModelRow, ProviderRow } from "../../store/types.js";
import type { GoneSignal } from "../time/gone-signal.js";
import type { JsonShape } from "./json-depth.js";
import type { StreamCompletion } from "./stream-types.js";
import type { Usage } from "./usage.js";

export type ClientStyle = "chat" | "messages" | "responses";

export interface CompletionRequest {
  style: ClientStyle;
  /** The client's body, as parsed; adapters map `model` and translate when wires differ. */
  body: Record<string, unknown>;
  /**
   * The client's body as it sent it: `data` is that body parsed (`body` itself unless a message
   * thread or a stored response's chain was replayed into it). A provider of the client's own
   * style that is sent `data` gets this text with only the model renamed, not `data` serialized
   * again: its bytes as they came (`raw`), its text, and what the walk before parsing found of it
   * (its top-level keys as written, where its model is).
   */
  rawBody?: { data: Record<string, unknown>; raw: Buffer; text: string; shape: JsonShape };
  stream: boolean;
  clientModel: string;
  signal: GoneSignal;
  /** The client's `anthropic-beta` header: forwarded to anthropic-wire providers (Claude Code relies on it). */
  anthropicBeta?: string;
  /** The client named a route: each step's body is rewritten, and its output limit clamped. */
  viaRoute?: boolean;
  /** The message thread the gateway holds for this request (its body is then the whole conversation). */
  thread?: MessageThread;
  /** The Responses API turn the gateway keeps for this request (its body then carries the chain). */
  responseTurn?: ResponseTurn;
  /**
   * A legacy completion (POST /v1/completions): the client's own body, whose text `rawBody` holds.
   * A provider that serves the Completions API itself is sent it as written; every other provider
   * answers `body`, its chat translation, and reads in this only the fields it carries beyond
   * chat's (`Provider.textCompletions`). Its answer is text alone: a stream's reasoning is never
   * shown to its client, so never delivered output. A stream through chat goes to the client as
   * the chat relay writes it, each chunk a `text_completion` chunk.
   */
  textCompletion?: Record<string, unknown>;
  /**
   * POST /v1/responses/compact: a provider with a compaction of its own (a `responses_native`
   * one) is sent the client's compact body and answers a CompactedResponse; every other answers
   * `body`, which asks the model for the conversation's summary.
   */
  compaction?: CompactionAsk;
  /**
   * A Responses turn the gateway compacted before its model answers (`context_management`): the
   * answer's output starts with the compaction item, and its usage counts the compaction's.
   */
  compacted?: CompactedTurn;
}

/** What a Responses turn's compaction made before its model answered: the item and its usage. */
export type CompactedTurn = { readonly item: Record<string, unknown>; readonly usage: Usage };

/** A compaction as a provider with one of its own is sent it. */
export interface CompactionAsk {
  /** The account the compaction is made for, as a turn's. */
  readonly accountId: string;
  /** The client's compact body, its `previous_response_id` as that provider holds it (or replayed). */
  nativeBody(server: NativeServer): Record<string, unknown>;
}

/** A provider that speaks the Responses API itself, and the key a request is sent to it with. */
export interface NativeServer {
  providerId: string;
  secret: string | undefined;
}

/** A responses request's turn (`dispatch/response-state.ts` opens and records it). */
export interface ResponseTurn {
  /** The account the turn is made for: a compaction the gateway sealed for it opens for it only. */
  readonly accountId: string;
  /**
   * The body for a provider that speaks the Responses API itself: the client's own with the
   * provider's id for the response it continues, when that provider, with the same key, served
   * it; the client's own (the same object) when nothing was replayed and the body names no
   * previous response or conversation; else the chain replayed.
   */
  nativeBody(server: NativeServer): Record<string, unknown>;
  /**
   * A native provider's Response says what the client asked (`previous_response_id`,
   * `conversation`), not what it was sent in their place, and has the gateway's id for the
   * response (the provider's is kept for the next turn: a provider may give its ids again).
   */
  echo(response: Record<string, unknown>): void;
  /**
   * A native stream's event that names an output item (`item`, or `item_id` beside its
   * `output_index`) names it by the id `echo` gives it: the server's own, unless the chain, the
   * turn's input or another item of the answer has it. True when the event was changed.
   */
  echoItem(event: Record<string, unknown>): boolean;
  /** Whether an output item so far got an id other than the server's (`echoItem` has work). */
  renamesItems(): boolean;
  /**
   * Present when the response is stored or its conversation kept: the signed reasoning of a
   * translated answer whose client did not include `reasoning.encrypted_content` is kept with it
   * for the chain (or the conversation), as the encoded `encrypted_content` of response
   * `responseId`.
   */
  keepSigned?: (responseId: string, encrypted: string) => void;
  /** Called with the whole Response; `native` is the server whose own id it is (null: translated). */
  record(response: Record<string, unknown>, native: NativeServer | null): Promise<void>;
}

/** A message thread the gateway holds for a request (`dispatch/threads.ts` opens and records it). */
export interface MessageThread {
  /** The conversation sent for this turn: the held history, then the new turn. */
  conversation: ThreadConversation;
  /** Called with the reply: the thread now ends in it. */
  record(replyId: string, content: unknown[]): Promise<void>;
}

/** The model and provider a request is written for: what shapes its body on the wire. */
export interface Backend {
  model: ModelRow;
  provider: ProviderRow;
  /**
   * No later step of a route follows: a tool this backend cannot run is left out here, where an
   * earlier step is skipped so that a later one may run it.
   */
  lastStep?: boolean;
}

/** `omittedTools`: tools the backend could not run, left out of the request it was sent. */
export type JsonCompletion = {
  kind: "json";
  body: unknown;
  usage: Usage;
  omittedTools?: string[];
  /**
   * `body` as JSON when the upstream's own text is that already (an answer in the client's style
   * with its model renamed): sent as it is, which saves serializing the answer again.
   */
  text?: string;
};
export type CompletionResult = JsonCompletion | StreamCompletion;
