import { isAscii, isUtf8 } from "node:buffer";
import { providerOptions } from "../../store/provider-options.js";
import type { ModelRow, ProviderRow } from "../../store/types.js";
import type { MessagesRequest } from "./anthropic-types.js";
import type {
  Backend,
  ClientStyle,
  CompletionRequest,
  CompletionResult,
} from "./completion-types.js";
import type { ChatCompletionRequest } from "./openai-types.js";
import type { ResponsesRequest } from "./responses-types.js";
import { chatRequestToMessages, untranslatableToMessages } from "./translate/chat-to-messages.js";
import {
  anthropicToolsOutsideChat,
  anthropicToolsSentence,
  type ChatRequestOptions,
  citationsSentence,
  documentUrlSentence,
  fileSourceSentence,
  type MaxTokensField,
  messagesRequestToChat,
} from "./translate/messages-to-chat.js";
import { longCacheSentence } from "./translate/prompt-cache.js";
import {
  hostedToolSentence,
  moderationSentence,
  responsesRequestToChat,
  toolsOutsideChat,
  untranslatableToChat,
  wantsSummary,
  withInputSettings,
} from "./translate/responses.js";
import { asArray, asString, chatToolName, isRecord } from "./translate/shared.js";
import { type AddedNulls, fitStrictSchemas } from "./translate/strict-nulls.js";
import { toolChoiceRefusal } from "./translate/tool-choice.js";
import { InvalidRequest, UnsupportedRequest } from "./upstream-failure.js";

/*
 * A client's request as the body its provider's wire takes: the same style passes with only the
 * model mapped, any other is translated (`wire/translate/`), with the tool policy applied and the
 * output limit clamped where the body is rewritten. The answer's way back is `to-client.ts`.
 */

// ---- requests ---------------------------------------------------------------

/**
 * What rewriting a request for one backend left out, for the response header and the log, and
 * what its answer needs undone on the way back.
 */
export interface Rewrite {
  omittedTools: string[];
  /** Strict schemas sent with their optional properties nullable: the answer's nulls go. */
  addedNulls?: AddedNulls;
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
 * How many answers a chat body asks for (`n`, one when absent): each is produced, held for and
 * finished on its own.
 */
export function answersAsked(chat: { n?: unknown }): number {
  return typeof chat.n === "number" && Number.isInteger(chat.n) && chat.n > 1 ? chat.n : 1;
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

/**
 * A body of at least this many bytes is spliced as bytes, smaller ones as text: encoding a short
 * text into the socket's write costs less than the buffers of a splice and a second piece to write.
 */
const spliceBytesFrom = 8 * 1024;

/**
 * A body forwarded as the client wrote it, to a wire of the client's own style `wireStyle` (chat
 * to an openai wire, messages to an anthropic wire, responses to a provider that speaks it
 * natively, where the turn sends the client's body) and not as a route's step: the client's own
 * text (or, for a long conversation, its bytes) with the model renamed, and a chat stream's usage
 * option added in front where the client sent no stream options. Serializing the body again costs
 * about as much as parsing it, and encoding a long text again a third of that, for every request
 * and every byte of a conversation. Undefined when the text cannot be had for certain (a key
 * written twice, a model written otherwise than JSON.stringify does), or when `body`, the body to
 * send, is not the one the client wrote (a thread or a stored chain replayed): the caller
 * serializes `body`.
 */
export function forwardedBody(
  req: CompletionRequest,
  wireStyle: ClientStyle,
  upstreamModel: string,
  body: Record<string, unknown> = req.body,
  asksUsage = true,
): string | Uint8Array | undefined {
  const sent = req.rawBody;
  if (sent?.data !== body || req.style !== wireStyle || req.viaRoute) return undefined;
  const { raw, text, shape } = sent;
  if (shape.topLevelKeys !== Object.keys(body).length || !shape.model) return undefined;
  const [start, end] = shape.model;
  const from = JSON.stringify(req.clientModel);
  if (end - start !== from.length || !text.startsWith(from, start)) return undefined;
  // A chat stream's body carries include_usage (billing reads the usage chunk), or, to a provider
  // not asked for it (`withStreamUsage`), no stream options at all.
  let front = "";
  if (wireStyle === "chat" && req.stream) {
    if (!asksUsage) {
      if ("stream_options" in body) return undefined;
    } else if (!("stream_options" in body)) front = '{"stream_options":{"include_usage":true},';
    else if ((body.stream_options as { include_usage?: unknown } | null)?.include_usage !== true)
      return undefined;
  }
  // The bytes are spliced only where they are exactly the text's encoding: bytes that are not
  // UTF-8 were read as replacement characters, and go on as the text the gateway read.
  const long = raw.length >= spliceBytesFrom;
  const ascii = long && raw.length === text.length && isAscii(raw);
  const bytes = long && (ascii || isUtf8(raw));
  if (front === "" && req.clientModel === upstreamModel) return bytes ? raw : text;
  const to = JSON.stringify(upstreamModel);
  // The usage option takes the body's own opening brace.
  if (!bytes) {
    const rest = front === "" ? 0 : text.indexOf("{") + 1;
    return `${front}${text.slice(rest, start)}${to}${text.slice(end)}`;
  }
  // Where the text's characters are its bytes (ASCII), an index is both; else count the bytes.
  const modelStart = ascii ? start : Buffer.byteLength(text.slice(0, start));
  const rest = front === "" ? 0 : raw.indexOf(0x7b) + 1;
  return Buffer.concat([
    Buffer.from(front, "latin1"),
    raw.subarray(rest, modelStart),
    Buffer.from(to),
    raw.subarray(modelStart + Buffer.byteLength(from)),
  ]);
}

/**
 * Whether a stream sent to this provider asks for its usage (`stream_options.include_usage`, whose
 * last chunk billing reads): not where its `stream_usage` is false, for a server that refuses the
 * field as unknown (vLLM before 0.4.3 refused every field it did not know, and had no
 * `stream_options`); such a stream is billed the estimate of what it delivered.
 */
export function asksStreamUsage(provider: Pick<ProviderRow, "options_json">): boolean {
  return providerOptions(provider).stream_usage !== false;
}

/**
 * A stream's body as an OpenAI-style API is sent it (chat, and a legacy completion to its own
 * Completions API): the client's stream options with `include_usage` added, or, where the
 * provider is not asked for its usage (`asksStreamUsage`), none at all, the client's own too.
 */
export function withStreamUsage(body: { stream_options?: unknown }, asks: boolean): void {
  if (!asks) {
    delete body.stream_options;
    return;
  }
  const options = body.stream_options;
  if (isRecord(options) && options.include_usage === true) return;
  // A literal when the client sent no options: adding a field to a spread copy is slow on Node 20.
  body.stream_options = isRecord(options)
    ? { ...options, include_usage: true }
    : { include_usage: true };
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
  /** That wire fetches a document given by URL itself (Gemini's fileData). */
  fetchesUrls?: boolean;
  /**
   * The body is sent as it is to a chat API that takes `custom` (free-form) tools, their calls and
   * a choice forcing one (OpenAI's): a Responses client's custom tools go as chat's.
   */
  customTools?: boolean;
  /**
   * The body is sent as it is to a chat API that holds strict schemas to OpenAI's rules (an
   * openai wire's): a rewritten body's strict schemas are fitted to them (`fitStrictSchemas`).
   */
  strictRules?: boolean;
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
    refuseInvalid(toolChoiceRefusal(req.style, body));
    refuseGap(fileSourceSentence(body));
    refuseGap(citationsSentence(body));
    refuseGap(inferenceGeoSentence(body));
    const outside = anthropicToolsOutsideChat(body);
    const omitted = [...outside.server, ...outside.unformed];
    if (omitted.length > 0) omitTools(attempt, omitted, anthropicToolsSentence(outside), rewrite);
    const chat = messagesRequestToChat(body, model.upstream_model, chatOptions(attempt, onward));
    if (!onward.fetchesUrls) refuseGap(documentUrlSentence(chat));
    refuseGap(droppedChoiceSentence(req, chat));
    fitStrict(chat, onward, req.style, rewrite);
    if (req.stream) withStreamUsage(chat, asksStreamUsage(attempt.provider));
    return clampChat(chat, max);
  }
  if (req.style === "responses") {
    const body = withInputSettings(req.body as ResponsesRequest);
    const custom = onward.customTools === true && !onward.translated;
    refuseInvalid(toolChoiceRefusal(req.style, body));
    refuseGap(untranslatableToChat(body, custom));
    const options = chatOptions(attempt, onward);
    const chat = responsesRequestToChat(
      body,
      model.upstream_model,
      custom ? { ...options, customTools: true } : options,
    );
    const outside = toolsOutsideChat(body, custom);
    // A wire that runs a web search of its own gets it as chat's web search option, and a choice
    // forcing it as a choice of the tool the option becomes (`web_search`).
    const searches = onward.webSearch ? outside.filter(isWebSearch) : [];
    if (searches.length > 0) {
      chat.web_search_options = {};
      const choice = body.tool_choice;
      if (isRecord(choice) && isWebSearch(String(choice.type)))
        chat.tool_choice = { type: "function", function: { name: webSearchTool } };
    }
    const omitted = outside.filter((t) => !searches.includes(t));
    if (omitted.length > 0) omitTools(attempt, omitted, hostedToolSentence(omitted), rewrite);
    refuseGap(droppedChoiceSentence(req, chat));
    fitStrict(chat, onward, req.style, rewrite);
    if (req.stream) withStreamUsage(chat, asksStreamUsage(attempt.provider));
    return clampChat(chat, max);
  }
  const body = { ...req.body, model: model.upstream_model } as ChatCompletionRequest;
  // Usage is needed for billing; the extra usage chunk is removed again if the client did not ask.
  if (req.stream) withStreamUsage(body, asksStreamUsage(attempt.provider));
  if (onward.translated) {
    refuseInvalid(toolChoiceRefusal(req.style, body));
    refuseGap(legacyFunctionsSentence(body));
    refuseGap(historySentence(body));
    if (body.moderation != null) refuseGap(moderationSentence);
    refuseGap(logitBiasSentence(body));
    omitNonFunctionTools(body, attempt, rewrite);
    refuseGap(droppedChoiceSentence(req, body));
    // Chat's web search option is a hosted web search: a wire without one leaves it out, named.
    if (!onward.webSearch && body.web_search_options != null) {
      omitTools(attempt, ["web_search"], hostedToolSentence(["web_search"]), rewrite);
      delete body.web_search_options;
    }
  }
  if (!req.viaRoute && !onward.translated) return body;
  // A route's step is a rewrite, as the other styles' bodies are; a direct one goes as written.
  if (req.viaRoute) fitStrict(body, onward, req.style, rewrite);
  return clampChat(body, max);
}

/**
 * A rewritten chat body's strict schemas fitted to OpenAI's strict rules where its chat API holds
 * them there. A messages client's strict tool or format that strict mode cannot carry goes
 * without `strict` (Anthropic holds any schema; OpenAI would refuse it strict and answers it
 * otherwise); a client of OpenAI's own styles gets what OpenAI's API makes of its schema.
 */
function fitStrict(
  chat: ChatCompletionRequest,
  onward: ChatOnward,
  style: ClientStyle,
  rewrite: Rewrite,
): void {
  if (!onward.strictRules || onward.translated) return;
  const added = fitStrictSchemas(chat, style === "messages" ? "lenient" : "as-sent");
  if (added) rewrite.addedNulls = added;
}

/**
 * Chat's deprecated `functions` (and `function_call` choosing among them): the other wires'
 * translations read `tools`, and a client of `functions` reads the answer's `function_call`, which
 * they do not write. Refused rather than answered by a model that was never told of the functions.
 */
function legacyFunctionsSentence(body: ChatCompletionRequest): string | undefined {
  const functions = (body as { functions?: unknown }).functions;
  if (!Array.isArray(functions) || functions.length === 0) return undefined;
  return '`functions` (deprecated) is not available for this model; declare them as `tools` (`{type: "function", function}`) and choose with `tool_choice`.';
}

/**
 * What a chat conversation holds that the other wires have no form for, as a sentence for the
 * client: a `custom` (free-form) tool call, whose tool is left out there and whose result would
 * answer a call the model never made, and an assistant's earlier audio answer (`audio.id`), which
 * OpenAI keeps and the gateway cannot read. Either way the model would not see that turn.
 */
function historySentence(body: ChatCompletionRequest): string | undefined {
  for (const message of body.messages) {
    if (message.role !== "assistant") continue;
    const calls = asArray(message.tool_calls);
    if (calls.some((call) => isRecord(call) && call.type === "custom"))
      return "A `custom` tool call in `messages` is not available for this model: its provider runs function tools only; send the call and its result as message text, or declare the tool as a `function`.";
    const said =
      typeof message.content === "string"
        ? message.content !== ""
        : asArray(message.content).length > 0;
    if (isRecord(message.audio) && !said && calls.length === 0)
      return "An assistant message's `audio` (an earlier audio answer that OpenAI keeps by its id) is not available for this model; send its transcript as the message's `content`.";
  }
  return undefined;
}

/**
 * Chat's `logit_bias` (token ids to make likelier or unlikelier, in OpenAI's tokenizer): neither
 * Anthropic's nor Gemini's API takes token biases, and a token the client banned could appear in
 * the answer. An empty map asks for nothing and passes.
 */
function logitBiasSentence(body: ChatCompletionRequest): string | undefined {
  const bias = body.logit_bias;
  if (!isRecord(bias) || Object.keys(bias).length === 0) return undefined;
  return "`logit_bias` is not available for this model: its provider takes no token biases; leave out `logit_bias`.";
}

/**
 * A messages request's `inference_geo` (where Anthropic runs the model): the gateway cannot say
 * where another provider runs it, and answering anyway would break the client's residency rule.
 */
function inferenceGeoSentence(body: MessagesRequest): string | undefined {
  if (body.inference_geo == null) return undefined;
  return "`inference_geo` is not available for this model: its provider is not Anthropic, and the gateway cannot tell where it runs the model; leave out `inference_geo`.";
}

/**
 * More stop sequences than the wire's API takes (OpenAI's chat 4, Gemini's 5), refused naming the
 * client's own field: the API would refuse them, and sending only some would let the answer run
 * past a sequence the client set.
 */
export function refuseStopsOver(
  req: CompletionRequest,
  chat: ChatCompletionRequest,
  most: number,
): void {
  const count = Array.isArray(chat.stop) ? chat.stop.length : 0;
  if (count <= most) return;
  const field = req.style === "messages" ? "stop_sequences" : "stop";
  throw new UnsupportedRequest(
    `\`${field}\` has ${count} sequences; this model's provider takes at most ${most}. Send at most ${most}.`,
  );
}

/**
 * Chat tools other wires have no form for (`custom`, a free-form text tool): left out and named
 * like a hosted tool, since the translation would otherwise drop them without a word.
 */
function omitNonFunctionTools(body: ChatCompletionRequest, attempt: Backend, rewrite: Rewrite) {
  if (!Array.isArray(body.tools)) return;
  const isFunction = (tool: unknown) => isRecord(tool) && tool.type === "function";
  const outside = [
    ...new Set(body.tools.filter((t) => !isFunction(t)).map((t) => String(t?.type))),
  ];
  if (outside.length === 0) return;
  omitTools(attempt, outside, hostedToolSentence(outside), rewrite);
  body.tools = body.tools.filter(isFunction);
  if (body.tools.length === 0) {
    delete body.tools;
    delete body.tool_choice;
    delete body.parallel_tool_calls;
  }
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
  if (req.style === "responses") {
    const body = req.body as ResponsesRequest;
    // The Responses options' own lifetime, which chat's options cannot carry.
    refuseGap(longCacheSentence(chat, body.prompt_cache_options));
    // A summary asked for with no effort: Anthropic thinks only when asked to, so the summary
    // comes from thinking at OpenAI's default effort.
    if (chat.reasoning_effort == null && wantsSummary(body)) chat.reasoning_effort = "medium";
  }
  const out = chatRequestToMessages(chat, model.upstream_model, max);
  out.max_tokens = Math.min(out.max_tokens, max);
  return out;
}

const isWebSearch = (type: string) => type.startsWith("web_search");

/** The name chat's web search option goes under on a wire that runs one (Anthropic's tool). */
const webSearchTool = "web_search";

/**
 * A client's `tool_choice` that forces a named tool the chat body no longer forces, its tool left
 * out (a hosted or server tool, a custom tool toward a wire without them), as a sentence for the
 * client: the model would answer without the tool the client made it call, which
 * `x-gateway-tools-omitted` alone does not undo. A Responses choice becomes chat's only for a tool
 * that is carried (and names a namespace's tool by its own name, where chat's is flat), so that one
 * went is all that is checked there.
 */
function droppedChoiceSentence(
  req: CompletionRequest,
  chat: ChatCompletionRequest,
): string | undefined {
  const forced = forcedToolName(req.style, req.body);
  if (forced === undefined) return undefined;
  const sent = isRecord(chat.tool_choice) ? chat.tool_choice : undefined;
  if (sent?.type === "function" || sent?.type === "custom") {
    if (req.style === "responses") return undefined;
    const name = chatToolName(sent);
    const tools = asArray(chat.tools).filter(isRecord);
    if (tools.some((tool) => tool.type === sent.type && chatToolName(tool) === name))
      return undefined;
    if (name === webSearchTool && chat.web_search_options != null) return undefined;
  }
  return `\`tool_choice\` forces the tool \`${forced}\`, which this model cannot run: its provider has no form for the tool, so the model would answer without calling it. Leave out \`tool_choice\` (or choose \`auto\`) to be answered without the tool.`;
}

/**
 * The tool a client's `tool_choice` forces by name (a hosted tool's by its type) where that tool
 * may be left out, in its style's shape: a messages tool the request declares, a chat `custom`
 * tool, any Responses tool. Undefined where it names none (`auto`, `required`, `allowed_tools`...)
 * or names one the request does not declare, refused before (`toolChoiceRefusal`).
 */
function forcedToolName(style: ClientStyle, body: Record<string, unknown>): string | undefined {
  const choice = body.tool_choice;
  if (!isRecord(choice)) return undefined;
  const type = asString(choice.type);
  const declared = asArray(body.tools).filter(isRecord);
  if (style === "messages") {
    const name = type === "tool" ? asString(choice.name) : undefined;
    return declared.some((tool) => tool.name === name) ? name : undefined;
  }
  if (style === "chat") {
    const name = type === "custom" ? chatToolName(choice) : undefined;
    const found = declared.some((tool) => tool.type === "custom" && chatToolName(tool) === name);
    return found ? String(name) : undefined;
  }
  if (type === undefined || ["allowed_tools", "auto", "none", "required"].includes(type))
    return undefined;
  return asString(choice.name) ?? type;
}

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

/**
 * How a chat body is written for the provider: the output limit under the field its API takes,
 * and whether its parts carry prompt cache breakpoints. OpenAI's own API takes
 * `max_completion_tokens` on every chat model and its reasoning models refuse `max_tokens`;
 * OpenAI-compatible servers (vLLM, Ollama, older proxies) may know only `max_tokens`, and may
 * refuse `prompt_cache_breakpoint` as an unknown field (those that cache do it without markers).
 * The provider's `max_tokens_field` and `prompt_cache_breakpoints` decide; absent, OpenAI's host
 * gets the new field and the breakpoints, any other the old field and none. Neither takes the
 * signed reasoning of a Responses client's reasoning items, which only another wire reads. A body
 * translated on to another wire is read for each.
 */
function chatOptions(attempt: Backend, onward: ChatOnward): ChatRequestOptions {
  if (onward.translated) return {};
  const { provider } = attempt;
  let options = chatOptionsOfRow.get(provider);
  if (!options) {
    const set = providerOptions(provider);
    options = {
      maxTokensField: set.max_tokens_field ?? defaultMaxTokensField(provider.base_url),
      cacheBreakpoints: set.prompt_cache_breakpoints ?? isOpenAIHost(provider.base_url),
      reasoningDetails: false,
    };
    chatOptionsOfRow.set(provider, options);
  }
  return options;
}

/** Each provider row's options, found once per row (a config apply makes new rows). */
const chatOptionsOfRow = new WeakMap<Backend["provider"], ChatRequestOptions>();

function isOpenAIHost(baseUrl: string | null): boolean {
  return (
    baseUrl !== null && URL.canParse(baseUrl) && new URL(baseUrl).hostname === "api.openai.com"
  );
}

export function defaultMaxTokensField(baseUrl: string | null): MaxTokensField {
  return isOpenAIHost(baseUrl) ? "max_completion_tokens" : "max_tokens";
}

/** The model's own `unsupported_tools` if it has one, else its provider's. */
function unsupportedToolsPolicy({
  model,
  provider,
}: Pick<Backend, "model" | "provider">): "omit" | "reject" {
  if (model.unsupported_tools) return model.unsupported_tools;
  return providerOptions(provider).unsupported_tools === "reject" ? "reject" : "omit";
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

/** A request its client's own API refuses fails the attempt the same way, as that API says it. */
function refuseInvalid(refusal: string | undefined): void {
  if (refusal) throw new InvalidRequest(refusal);
}
