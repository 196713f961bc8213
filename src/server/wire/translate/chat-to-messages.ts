/**
 * Client speaks OpenAI Chat Completions, provider speaks Anthropic Messages.
 *
 * Request: chat -> messages. Response and stream: messages -> chat.
 */

import type {
  AnthropicContentBlock,
  AnthropicMessageParam,
  AnthropicTextBlock,
  AnthropicTool,
  AnthropicToolChoice,
  MessagesRequest,
  MessagesResponse,
} from "../anthropic-types.js";
import type {
  ChatCompletionChunk,
  ChatCompletionRequest,
  ChatCompletionResponse,
  ChatDelta,
  ChatErrorBody,
  ChatFinishReason,
  ChatMessage,
  ChatToolCall,
  ChatUsage,
  ReasoningDetail,
} from "../openai-types.js";
import {
  emptyUsage,
  mergeMessagesUsage,
  toChatUsage,
  type Usage,
  usageFromMessages,
} from "../usage.js";
import { withAllowedToolsOnly } from "./allowed-tools.js";
import { toAnthropicSchema } from "./anthropic-schema.js";
import {
  automaticCacheControl,
  cacheControlOf,
  fitCacheMarkers,
  longCacheSentence,
} from "./prompt-cache.js";
import {
  argumentsToInput,
  asArray,
  asNumber,
  asString,
  inputToArguments,
  isRecord,
  type JsonObject,
  nowSeconds,
  objectSchema,
  parseDataUrl,
  randomId,
} from "./shared.js";

/** Anthropic requires max_tokens; chat clients often leave it out. */
export const DEFAULT_ANTHROPIC_MAX_TOKENS = 4096;

// ---------------------------------------------------------------------------
// Request: chat -> messages
// ---------------------------------------------------------------------------

/** Anthropic's own web search, which chat's `web_search_options` (and Responses' `web_search`) map to. */
const ANTHROPIC_WEB_SEARCH = { type: "web_search_20250305", name: "web_search" } as const;

/** `maxTokens`: the output limit when the client names none (the model's maximum output). */
export function chatRequestToMessages(
  request: ChatCompletionRequest,
  upstreamModel: string,
  maxTokens = DEFAULT_ANTHROPIC_MAX_TOKENS,
): MessagesRequest {
  const req = withAllowedToolsOnly(request);
  const inheritedTtl = isRecord(req.prompt_cache_options)
    ? req.prompt_cache_options.ttl
    : undefined;
  const { system, messages } = convertMessages(asArray(req.messages), inheritedTtl);
  const out: MessagesRequest = {
    model: upstreamModel,
    messages,
    max_tokens: asNumber(req.max_completion_tokens) ?? asNumber(req.max_tokens) ?? maxTokens,
  };
  if (system !== undefined) out.system = system;

  const tools = convertTools(asArray(req.tools));
  if (isRecord(req.web_search_options)) tools.push({ ...ANTHROPIC_WEB_SEARCH });
  if (tools.length > 0) {
    out.tools = tools;
    const toolChoice = convertToolChoice(req.tool_choice, req.parallel_tool_calls);
    if (toolChoice) out.tool_choice = toolChoice;
  }

  const thinking = thinkingFor(req, out);
  if (thinking) {
    // Anthropic refuses sampling settings alongside extended thinking.
    out.thinking = thinking;
  } else {
    const temperature = asNumber(req.temperature);
    // OpenAI allows 0..2, Anthropic 0..1: clamp rather than have the upstream reject the call.
    if (temperature !== undefined) out.temperature = Math.min(Math.max(temperature, 0), 1);
    const topP = asNumber(req.top_p);
    if (topP !== undefined) out.top_p = topP;
  }

  const stop = typeof req.stop === "string" ? [req.stop] : asArray(req.stop);
  const stopSequences = stop.filter((s): s is string => typeof s === "string" && s !== "");
  if (stopSequences.length > 0) out.stop_sequences = stopSequences;

  if (req.stream === true) out.stream = true;

  const user = asString(req.user) ?? asString(req.safety_identifier);
  if (user) out.metadata = { user_id: user };
  const tier = anthropicServiceTier(req.service_tier);
  if (tier) out.service_tier = tier;

  const format = req.response_format;
  if (isRecord(format) && format.type === "json_schema" && isRecord(format.json_schema)) {
    const schema = format.json_schema.schema;
    if (isRecord(schema)) {
      out.output_config = { format: { type: "json_schema", schema: toAnthropicSchema(schema) } };
    }
  }
  const automatic = automaticCacheControl(req.prompt_cache_options);
  if (automatic) out.cache_control = automatic;
  fitCacheMarkers(out);
  return out;
}

/**
 * OpenAI's `service_tier` as Anthropic's: `auto` lets Anthropic serve from priority capacity where
 * the organization has it, which is what OpenAI's `auto`, `priority` (and its `fast` and the old
 * `scale`) ask for; `default` and `flex` ask for no more than standard capacity, `standard_only`.
 */
function anthropicServiceTier(tier: unknown): "auto" | "standard_only" | undefined {
  if (tier === "default" || tier === "flex") return "standard_only";
  if (tier === "auto" || tier === "priority" || tier === "fast" || tier === "scale") return "auto";
  return undefined;
}

/**
 * What a chat request asks for that the Messages API cannot carry, as a sentence for the client,
 * or undefined. Dropping these would change the answer's meaning or shape without a word: the
 * model would answer without hearing the audio, or the client would get one choice of `n`.
 */
export function untranslatableToMessages(req: ChatCompletionRequest): string | undefined {
  const n = asNumber(req.n);
  if (n !== undefined && n > 1) {
    return "`n` greater than 1 is not available for this model; send one request per choice.";
  }
  const audioOut =
    asArray(req.modalities).includes("audio") || (req.audio !== undefined && req.audio !== null);
  if (audioOut) return "Audio output is not available for this model; ask for text.";
  // Anthropic's API reports no log probabilities: answering `logprobs: null` would look like a
  // provider that had none to give.
  if (req.logprobs === true) {
    return "`logprobs` is not available for this model: its provider reports no log probabilities; leave out `logprobs` (on /v1/responses, `include: message.output_text.logprobs`).";
  }
  // Anthropic samples without penalties: a repetition the client penalized could fill the answer.
  // A penalty of 0 is no penalty, and passes.
  for (const field of ["presence_penalty", "frequency_penalty"] as const) {
    const penalty = asNumber(req[field]);
    if (penalty !== undefined && penalty !== 0)
      return `\`${field}\` is not available for this model: its provider takes no penalties; leave out \`${field}\`.`;
  }
  // Anthropic constrains output to a JSON schema whose objects list their properties; "any JSON
  // object" has no such schema, and without one the answer would be prose where JSON was promised.
  const format = req.response_format;
  if (isRecord(format) && format.type === "json_object") {
    return '`response_format` `json_object` is not available for this model: its provider constrains output to a JSON schema only; send `response_format: {type: "json_schema", json_schema: {name, schema}}` (on /v1/responses, `text.format` of type `json_schema`).';
  }
  const longCache = longCacheSentence(req);
  if (longCache) return longCache;
  for (const message of asArray(req.messages)) {
    if (!isRecord(message)) continue;
    const audioIn = asArray(message.content).some(
      (part) => isRecord(part) && part.type === "input_audio",
    );
    if (audioIn) {
      return "Audio input is not available for this model; transcribe it first (/v1/audio/transcriptions).";
    }
    // A file the Messages API cannot be given (one in OpenAI's file store, or of a type it does
    // not read): the model would answer without it.
    for (const part of asArray(message.content)) {
      if (!isRecord(part) || part.type !== "file") continue;
      if (!isRecord(part.file) || fileBlock(part.file) === undefined) {
        return "A `file` content part is not available for this model unless it is `file_data` (a base64 data URL) of a PDF, an image or text: a `file_id` names OpenAI's file store, which the gateway cannot read.";
      }
    }
  }
  return undefined;
}

/**
 * Share of the output limit that `reasoning_effort` gives to extended thinking. `xhigh` and `max`
 * (OpenAI's levels above `high`) get high's share: the budget must stay inside the client's own
 * output limit, and the answer still needs room after the thinking. `minimal` (a little reasoning)
 * gets Anthropic's lowest budget; `none` none at all.
 */
const thinkingShare: Record<string, number> = {
  low: 0.2,
  medium: 0.5,
  high: 0.8,
  xhigh: 0.8,
  max: 0.8,
};
const MIN_THINKING_BUDGET = 1024;

/**
 * `reasoning_effort` becomes extended thinking with a budget inside the client's own output
 * limit (so the hold taken at admission still covers the answer). Left off where Anthropic would
 * refuse it: a budget under its minimum, a forced tool, or a tool loop whose last assistant turn
 * came back without its signed thinking (a client that drops `reasoning_details`).
 */
function thinkingFor(
  req: ChatCompletionRequest,
  out: MessagesRequest,
): MessagesRequest["thinking"] | undefined {
  const effort = asString(req.reasoning_effort) ?? "";
  const share = thinkingShare[effort];
  if (!share && effort !== "minimal") return undefined;
  const budget = share
    ? Math.min(Math.floor(out.max_tokens * share), out.max_tokens - 1)
    : MIN_THINKING_BUDGET;
  // Anthropic's budget is at least its minimum and less than the output limit.
  if (budget < MIN_THINKING_BUDGET || budget >= out.max_tokens) return undefined;
  const choice = out.tool_choice?.type;
  if (choice === "any" || choice === "tool") return undefined;
  const content = out.messages.findLast((m) => m.role === "assistant")?.content;
  if (Array.isArray(content) && content.some((block) => block.type === "tool_use")) {
    const opener = content[0]?.type;
    if (opener !== "thinking" && opener !== "redacted_thinking") return undefined;
  }
  return { type: "enabled", budget_tokens: budget };
}

// ---------------------------------------------------------------------------
// Signed thinking <-> reasoning_details
// ---------------------------------------------------------------------------

const ANTHROPIC_REASONING_FORMAT = "anthropic-claude-v1";

/**
 * A thinking or redacted_thinking block as a reasoning detail, or undefined for other blocks.
 * `afterCall`: the id of the turn's tool call the block came after (interleaved thinking).
 */
function reasoningDetail(
  block: JsonObject,
  index: number,
  afterCall: string | undefined,
): ReasoningDetail | undefined {
  const placed = afterCall === undefined ? {} : { after_tool_call_id: afterCall };
  if (block.type === "thinking") {
    return {
      type: "reasoning.text",
      text: asString(block.thinking) ?? "",
      signature: asString(block.signature) ?? null,
      format: ANTHROPIC_REASONING_FORMAT,
      index,
      ...placed,
    };
  }
  if (block.type === "redacted_thinking") {
    const data = asString(block.data);
    if (data)
      return {
        type: "reasoning.encrypted",
        data,
        format: ANTHROPIC_REASONING_FORMAT,
        index,
        ...placed,
      };
  }
  return undefined;
}

/**
 * The thinking blocks a client sent back as `reasoning_details`, each with the id of the call it
 * came after, if any. Only signed Anthropic reasoning is usable: Anthropic refuses unsigned or
 * altered thinking, and other providers' signatures.
 */
function thinkingFromDetails(
  details: unknown,
): { block: AnthropicContentBlock; afterCall?: string }[] {
  const out: { block: AnthropicContentBlock; afterCall?: string }[] = [];
  for (const detail of asArray(details)) {
    if (!isRecord(detail)) continue;
    if (detail.format !== undefined && detail.format !== ANTHROPIC_REASONING_FORMAT) continue;
    const signature = asString(detail.signature);
    const afterCall = asString(detail.after_tool_call_id);
    let block: AnthropicContentBlock | undefined;
    if (detail.type === "reasoning.text" && signature) {
      block = { type: "thinking", thinking: asString(detail.text) ?? "", signature };
    } else if (detail.type === "reasoning.encrypted" && asString(detail.data)) {
      block = { type: "redacted_thinking", data: asString(detail.data) };
    }
    if (block) out.push(afterCall ? { block, afterCall } : { block });
  }
  return out;
}

type SystemPrompt = string | AnthropicTextBlock[] | undefined;

/**
 * Builds the Anthropic message list. Consecutive same-role turns are merged (tool
 * results arrive as separate chat messages but must share one Anthropic user turn,
 * ahead of any text the user adds after them).
 */
function convertMessages(
  input: unknown[],
  inheritedTtl: unknown,
): {
  system: SystemPrompt;
  messages: AnthropicMessageParam[];
} {
  const systemBlocks: AnthropicTextBlock[] = [];
  const messages: Array<{ role: "user" | "assistant"; content: AnthropicContentBlock[] }> = [];
  // Legacy `function_call` turns carry no id; remember the one we invented per name.
  const legacyCallIds = new Map<string, string>();

  const append = (role: "user" | "assistant", blocks: AnthropicContentBlock[]) => {
    if (blocks.length === 0) return;
    const last = messages[messages.length - 1];
    if (last && last.role === role) last.content.push(...blocks);
    else messages.push({ role, content: blocks });
  };

  for (const raw of input) {
    if (!isRecord(raw)) continue;
    const message = raw as ChatMessage;
    switch (message.role) {
      case "system":
      case "developer":
        systemBlocks.push(...textBlocks(message.content, inheritedTtl));
        break;
      case "user":
        append("user", userBlocks(message.content, inheritedTtl));
        break;
      case "assistant": {
        const text = textBlocks(message.content, inheritedTtl);
        if (typeof message.refusal === "string" && message.refusal !== "" && text.length === 0) {
          text.push({ type: "text", text: message.refusal });
        }
        // Signed thinking where the model wrote it: ahead of the turn's text and tool calls, and
        // thinking it did between its calls after the call it followed (Anthropic refuses the
        // latest turn's thinking moved).
        const thinking = thinkingFromDetails(message.reasoning_details);
        const callIds = new Set(
          asArray(message.tool_calls).map((call) => (isRecord(call) ? asString(call.id) : "")),
        );
        // Thinking after a call the turn does not hold goes ahead, as thinking without one does.
        const thinkingAfter = (callId: string | undefined) =>
          thinking
            .filter(
              (t) => (t.afterCall && callIds.has(t.afterCall) ? t.afterCall : undefined) === callId,
            )
            .map((t) => t.block);
        const blocks: AnthropicContentBlock[] = [...thinkingAfter(undefined), ...text];
        for (const call of asArray(message.tool_calls)) {
          if (!isRecord(call) || !isRecord(call.function)) continue;
          const id = asString(call.id) || randomId("toolu_");
          blocks.push({
            type: "tool_use",
            id,
            name: asString(call.function.name) ?? "",
            input: argumentsToInput(call.function.arguments),
          });
          blocks.push(...thinkingAfter(id));
        }
        const legacy = message.function_call;
        if (isRecord(legacy) && typeof legacy.name === "string") {
          const id = randomId("toolu_");
          legacyCallIds.set(legacy.name, id);
          blocks.push({
            type: "tool_use",
            id,
            name: legacy.name,
            input: argumentsToInput(legacy.arguments),
          });
        }
        append("assistant", blocks);
        break;
      }
      case "tool":
        append("user", [
          toolResultBlock(asString(message.tool_call_id) ?? "", message.content, inheritedTtl),
        ]);
        break;
      case "function": {
        const id = legacyCallIds.get(message.name) ?? randomId("toolu_");
        append("user", [toolResultBlock(id, message.content, inheritedTtl)]);
        break;
      }
      default:
        break;
    }
  }

  let system: SystemPrompt;
  if (systemBlocks.length === 1 && Object.keys(systemBlocks[0]).length === 2) {
    system = systemBlocks[0].text;
  } else if (systemBlocks.length > 0) {
    system = systemBlocks;
  }
  return { system, messages };
}

/**
 * Text parts only (system prompts, assistant turns). Empty text is dropped: Anthropic rejects it.
 * `inheritedTtl`: the request's cache lifetime, which a breakpoint without its own takes.
 */
function textBlocks(content: unknown, inheritedTtl: unknown): AnthropicTextBlock[] {
  if (typeof content === "string") return content === "" ? [] : [{ type: "text", text: content }];
  const blocks: AnthropicTextBlock[] = [];
  for (const part of asArray(content)) {
    if (!isRecord(part)) continue;
    const text = part.type === "refusal" ? asString(part.refusal) : asString(part.text);
    if ((part.type === "text" || part.type === "refusal") && text) {
      blocks.push(withCacheControl({ type: "text", text }, part, inheritedTtl));
    }
  }
  return blocks;
}

/** User content: text, images and files (audio was refused by `untranslatableToMessages`). */
function userBlocks(content: unknown, inheritedTtl: unknown): AnthropicContentBlock[] {
  if (typeof content === "string") return content === "" ? [] : [{ type: "text", text: content }];
  const blocks: AnthropicContentBlock[] = [];
  for (const part of asArray(content)) {
    if (!isRecord(part)) continue;
    if (part.type === "text") {
      const text = asString(part.text);
      if (text) blocks.push(withCacheControl({ type: "text", text }, part, inheritedTtl));
    } else if (part.type === "image_url") {
      const url = isRecord(part.image_url)
        ? asString(part.image_url.url)
        : asString(part.image_url);
      const block = url ? imageBlock(url) : undefined;
      if (block) blocks.push(withCacheControl(block, part, inheritedTtl));
    } else if (part.type === "file" && isRecord(part.file)) {
      const block = fileBlock(part.file);
      if (block) blocks.push(withCacheControl(block, part, inheritedTtl));
    }
  }
  return blocks;
}

function imageBlock(url: string): AnthropicContentBlock | undefined {
  const inline = parseDataUrl(url);
  if (inline) {
    return {
      type: "image",
      source: { type: "base64", media_type: inline.mediaType, data: inline.data },
    };
  }
  if (/^https?:\/\//i.test(url)) return { type: "image", source: { type: "url", url } };
  return undefined;
}

function fileBlock(file: JsonObject): AnthropicContentBlock | undefined {
  const inline = parseDataUrl(asString(file.file_data) ?? "");
  if (!inline) return undefined;
  if (inline.mediaType.startsWith("image/")) {
    return {
      type: "image",
      source: { type: "base64", media_type: inline.mediaType, data: inline.data },
    };
  }
  const title = asString(file.filename);
  if (inline.mediaType === "application/pdf") {
    return {
      type: "document",
      source: { type: "base64", media_type: "application/pdf", data: inline.data },
      ...(title ? { title } : {}),
    };
  }
  if (inline.mediaType.startsWith("text/")) {
    const text = Buffer.from(inline.data, "base64").toString("utf8");
    return {
      type: "document",
      source: { type: "text", media_type: "text/plain", data: text },
      ...(title ? { title } : {}),
    };
  }
  return undefined;
}

/**
 * A tool message as a `tool_result`. A marker on one of its parts goes on the `tool_result`
 * itself, which the tool message stands for: Anthropic's API (and others that speak it) may
 * refuse one inside `tool_result.content`.
 */
function toolResultBlock(
  toolUseId: string,
  content: unknown,
  inheritedTtl: unknown,
): AnthropicContentBlock {
  const block: AnthropicContentBlock = { type: "tool_result", tool_use_id: toolUseId };
  if (typeof content === "string") {
    if (content !== "") block.content = content;
  } else {
    // Text, images and documents (a PDF or text file the tool read): a `tool_result` holds each.
    const blocks = userBlocks(content, inheritedTtl).map((b) => {
      if (b.cache_control === undefined) return b;
      const { cache_control, ...rest } = b;
      block.cache_control = cache_control;
      return rest as AnthropicContentBlock;
    });
    if (blocks.length > 0) block.content = blocks;
  }
  return block;
}

/**
 * A part's cache marker on its block: a breakpoint as Anthropic's `cache_control`, or the
 * `cache_control` itself that clients knowing Anthropic's caching put on OpenAI parts.
 */
function withCacheControl<T extends AnthropicContentBlock>(
  block: T,
  part: JsonObject,
  inheritedTtl: unknown,
): T {
  const cacheControl = cacheControlOf(part, inheritedTtl);
  return cacheControl ? { ...block, cache_control: cacheControl } : block;
}

function convertTools(tools: unknown[]): AnthropicTool[] {
  const out: AnthropicTool[] = [];
  for (const tool of tools) {
    if (!isRecord(tool) || tool.type !== "function" || !isRecord(tool.function)) continue;
    const name = asString(tool.function.name);
    if (!name) continue;
    const converted: AnthropicTool = { name, input_schema: objectSchema(tool.function.parameters) };
    const description = asString(tool.function.description);
    if (description) converted.description = description;
    if (isRecord(tool.cache_control)) converted.cache_control = tool.cache_control;
    // Strict tool use: Anthropic guarantees the call's input matches the schema, as OpenAI does.
    if (tool.function.strict === true) converted.strict = true;
    out.push(converted);
  }
  return out;
}

function convertToolChoice(choice: unknown, parallel: unknown): AnthropicToolChoice | undefined {
  const disableParallel = parallel === false ? { disable_parallel_tool_use: true } : {};
  if (choice === "none") return { type: "none" };
  if (choice === "required") return { type: "any", ...disableParallel };
  if (isRecord(choice) && choice.type === "function" && isRecord(choice.function)) {
    const name = asString(choice.function.name);
    if (name) return { type: "tool", name, ...disableParallel };
  }
  if (choice === "auto" || parallel === false) return { type: "auto", ...disableParallel };
  return undefined;
}

// ---------------------------------------------------------------------------
// Response: messages -> chat
// ---------------------------------------------------------------------------

/** A web search result a text cites, as chat's web search answers carry it. */
export type UrlCitation = {
  type: "url_citation";
  url_citation: { url: string; title: string; start_index: number; end_index: number };
};

/** The web search results a text block cites (Anthropic's web search), over that text's span. */
function webCitations(citations: unknown, start: number, end: number): UrlCitation[] {
  const out: UrlCitation[] = [];
  for (const citation of asArray(citations)) {
    if (!isRecord(citation) || citation.type !== "web_search_result_location") continue;
    const url = asString(citation.url);
    if (!url) continue;
    const title = asString(citation.title) ?? url;
    out.push({
      type: "url_citation",
      url_citation: { url, title, start_index: start, end_index: end },
    });
  }
  return out;
}

function anthropicStopToChatFinish(reason: unknown): ChatFinishReason {
  switch (reason) {
    case "max_tokens":
    case "model_context_window_exceeded":
      return "length";
    case "tool_use":
      return "tool_calls";
    case "refusal":
      return "content_filter";
    default:
      // end_turn, stop_sequence, pause_turn and anything new read as a normal stop.
      return "stop";
  }
}

/**
 * The capacity Anthropic served an answer from (`usage.service_tier`) as OpenAI's answers name
 * their tier: standard is OpenAI's `default`, priority its `priority`; a batch has no such answer.
 */
function servedTier(usage: unknown): "default" | "priority" | undefined {
  const tier = isRecord(usage) ? usage.service_tier : undefined;
  if (tier === "standard") return "default";
  return tier === "priority" ? tier : undefined;
}

function chatIdFromMessageId(id: unknown): string {
  const raw = asString(id);
  return raw ? `chatcmpl-${raw.replace(/^msg_/, "")}` : randomId("chatcmpl-");
}

export function messagesResponseToChat(
  resp: MessagesResponse,
  clientModel: string,
): ChatCompletionResponse {
  let text = "";
  let reasoning = "";
  const details: ReasoningDetail[] = [];
  const toolCalls: ChatToolCall[] = [];
  const annotations: UrlCitation[] = [];
  for (const block of asArray(resp.content)) {
    if (!isRecord(block)) continue;
    const detail = reasoningDetail(block, details.length, toolCalls.at(-1)?.id);
    if (detail) details.push(detail);
    if (block.type === "text") {
      const piece = asString(block.text) ?? "";
      annotations.push(...webCitations(block.citations, text.length, text.length + piece.length));
      text += piece;
    } else if (block.type === "thinking") reasoning += asString(block.thinking) ?? "";
    else if (block.type === "tool_use") {
      toolCalls.push({
        id: asString(block.id) || randomId("toolu_"),
        type: "function",
        function: { name: asString(block.name) ?? "", arguments: inputToArguments(block.input) },
      });
    }
  }
  const hasText = text !== "";
  const message: ChatCompletionResponse["choices"][number]["message"] = {
    role: "assistant",
    content: hasText || toolCalls.length === 0 ? text : null,
    refusal: null,
  };
  if (toolCalls.length > 0) message.tool_calls = toolCalls;
  if (annotations.length > 0) message.annotations = annotations;
  if (reasoning !== "") message.reasoning_content = reasoning;
  if (details.length > 0) message.reasoning_details = details;

  const usage = usageFromMessages(resp);
  const tier = servedTier(resp.usage);
  return {
    id: chatIdFromMessageId(resp.id),
    object: "chat.completion",
    created: nowSeconds(),
    model: clientModel,
    ...(tier ? { service_tier: tier } : {}),
    choices: [
      {
        index: 0,
        message,
        logprobs: null,
        finish_reason: anthropicStopToChatFinish(resp.stop_reason),
      },
    ],
    usage: toChatUsage(usage),
  };
}

// ---------------------------------------------------------------------------
// Stream: messages SSE events -> chat chunks
// ---------------------------------------------------------------------------

type BlockState =
  /** `start`: where the block's text begins in the answer; `citations`: its web search sources. */
  | { kind: "text"; start: number; citations: unknown[] }
  | { kind: "thinking"; block: JsonObject }
  | { kind: "redacted"; block: JsonObject }
  | { kind: "tool"; toolIndex: number; streamedArgs: boolean; initialInput: unknown }
  | { kind: "ignored" };

export type ChatStreamOutput = ChatCompletionChunk | ChatErrorBody;

/**
 * Consumes Anthropic SSE events and yields the chat chunks to send. The caller
 * writes each as `data: <json>` and ends with `data: [DONE]` after `finish()`.
 */
export class MessagesStreamToChat {
  private readonly clientModel: string;
  private readonly includeUsage: boolean;
  private id = randomId("chatcmpl-");
  private readonly created = nowSeconds();
  private readonly blocks = new Map<number, BlockState>();
  private nextToolIndex = 0;
  private reasoningDetails = 0;
  /** The id of the last tool call so far: thinking after it came between the calls. */
  private lastCallId: string | undefined;
  /** Length of the answer's text so far, where a cited span starts and ends. */
  private textLength = 0;
  private readonly annotations: UrlCitation[] = [];
  private current: Usage = emptyUsage();
  /** The tier that served the answer (`message_start`'s usage), on every chunk as OpenAI's. */
  private tier: string | undefined;
  private roleSent = false;
  private finishSent = false;
  private usageSent = false;

  constructor(clientModel: string, opts: { includeUsage: boolean }) {
    this.clientModel = clientModel;
    this.includeUsage = opts.includeUsage;
  }

  push(ev: { event?: string; data: string }): ChatStreamOutput[] {
    let data: unknown;
    try {
      data = JSON.parse(ev.data);
    } catch {
      return [];
    }
    if (!isRecord(data)) return [];
    const type = asString(data.type) ?? ev.event;
    switch (type) {
      case "message_start":
        return this.onMessageStart(data);
      case "content_block_start":
        return this.onBlockStart(data);
      case "content_block_delta":
        return this.onBlockDelta(data);
      case "content_block_stop":
        return this.onBlockStop(data);
      case "message_delta":
        return this.onMessageDelta(data);
      case "message_stop":
        return this.finish();
      case "error": {
        const error = isRecord(data.error) ? data.error : {};
        const message = asString(error.message) ?? "upstream stream error";
        this.finishSent = true;
        this.usageSent = true;
        return [
          { error: { message, type: "upstream_error", code: "upstream_error", param: null } },
        ];
      }
      default:
        // ping and event types we do not know carry nothing for a chat client.
        return [];
    }
  }

  /** Closes the stream: emits whatever the upstream failed to (finish reason, usage). Idempotent. */
  finish(): ChatStreamOutput[] {
    const out = this.start();
    if (!this.finishSent) {
      this.finishSent = true;
      out.push(this.chunk({}, "stop"));
    }
    if (this.includeUsage && !this.usageSent) {
      this.usageSent = true;
      out.push({
        id: this.id,
        object: "chat.completion.chunk",
        created: this.created,
        model: this.clientModel,
        ...(this.tier ? { service_tier: this.tier } : {}),
        choices: [],
        usage: this.chatUsage(),
      });
    }
    return out;
  }

  usage(): Usage {
    return { ...this.current };
  }

  private chatUsage(): ChatUsage {
    return toChatUsage(this.current);
  }

  private chunk(
    delta: ChatDelta,
    finishReason: ChatFinishReason | null = null,
  ): ChatCompletionChunk {
    return {
      id: this.id,
      object: "chat.completion.chunk",
      created: this.created,
      model: this.clientModel,
      ...(this.tier ? { service_tier: this.tier } : {}),
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
    };
  }

  /** The first chunk must carry the role; SDK accumulators reject a message without one. */
  private start(): ChatCompletionChunk[] {
    if (this.roleSent) return [];
    this.roleSent = true;
    return [this.chunk({ role: "assistant", content: "" })];
  }

  private onMessageStart(data: JsonObject): ChatStreamOutput[] {
    const message = isRecord(data.message) ? data.message : {};
    if (!this.roleSent && asString(message.id)) this.id = chatIdFromMessageId(message.id);
    this.tier ??= servedTier(message.usage);
    this.mergeUsage(message.usage);
    return this.start();
  }

  private onBlockStart(data: JsonObject): ChatStreamOutput[] {
    const index = asNumber(data.index) ?? this.blocks.size;
    const block = isRecord(data.content_block) ? data.content_block : {};
    const out: ChatStreamOutput[] = this.start();
    if (block.type === "text") {
      this.blocks.set(index, { kind: "text", start: this.textLength, citations: [] });
      const text = asString(block.text);
      if (text) out.push(this.text(text));
    } else if (block.type === "thinking") {
      const thinking = asString(block.thinking);
      this.blocks.set(index, { kind: "thinking", block: { ...block, thinking: thinking ?? "" } });
      if (thinking) out.push(this.chunk({ reasoning_content: thinking }));
    } else if (block.type === "redacted_thinking") {
      this.blocks.set(index, { kind: "redacted", block });
    } else if (block.type === "tool_use") {
      const toolIndex = this.nextToolIndex++;
      this.blocks.set(index, {
        kind: "tool",
        toolIndex,
        streamedArgs: false,
        initialInput: block.input,
      });
      this.lastCallId = asString(block.id) || randomId("toolu_");
      out.push(
        this.chunk({
          tool_calls: [
            {
              index: toolIndex,
              id: this.lastCallId,
              type: "function",
              function: { name: asString(block.name) ?? "", arguments: "" },
            },
          ],
        }),
      );
    } else {
      // server_tool_use, web search results...: nothing a chat client can use.
      this.blocks.set(index, { kind: "ignored" });
    }
    return out;
  }

  private onBlockDelta(data: JsonObject): ChatStreamOutput[] {
    const state = this.blocks.get(asNumber(data.index) ?? -1);
    const delta = isRecord(data.delta) ? data.delta : {};
    if (delta.type === "text_delta") {
      const text = asString(delta.text);
      // Text deltas are accepted even for an unannounced block: losing text is worse.
      if (text && (state === undefined || state.kind === "text")) {
        return [...this.start(), this.text(text)];
      }
    } else if (delta.type === "citations_delta" && state?.kind === "text") {
      state.citations.push(delta.citation);
    } else if (delta.type === "input_json_delta" && state?.kind === "tool") {
      const partial = asString(delta.partial_json);
      if (partial) {
        state.streamedArgs = true;
        return [
          ...this.start(),
          this.chunk({
            tool_calls: [{ index: state.toolIndex, function: { arguments: partial } }],
          }),
        ];
      }
    } else if (delta.type === "thinking_delta" && state?.kind === "thinking") {
      const thinking = asString(delta.thinking);
      if (thinking) {
        state.block.thinking += thinking;
        return [...this.start(), this.chunk({ reasoning_content: thinking })];
      }
    } else if (delta.type === "signature_delta" && state?.kind === "thinking") {
      state.block.signature =
        (asString(state.block.signature) ?? "") + (asString(delta.signature) ?? "");
    }
    return [];
  }

  private text(content: string): ChatCompletionChunk {
    this.textLength += content.length;
    return this.chunk({ content });
  }

  private onBlockStop(data: JsonObject): ChatStreamOutput[] {
    const state = this.blocks.get(asNumber(data.index) ?? -1);
    if (state?.kind === "text" && state.citations.length > 0) {
      this.annotations.push(...webCitations(state.citations, state.start, this.textLength));
      // Every annotation so far, as the JSON answer lists them: SDK accumulators keep an unknown
      // delta field's last value.
      return [this.chunk({ annotations: [...this.annotations] })];
    }
    if (state?.kind === "thinking" || state?.kind === "redacted") {
      // Whole, once its signature is complete: SDK accumulators keep an unknown delta field's
      // last value, so a detail must never arrive in pieces.
      const detail = reasoningDetail(state.block, this.reasoningDetails++, this.lastCallId);
      return detail ? [...this.start(), this.chunk({ reasoning_details: [detail] })] : [];
    }
    // Some Anthropic-compatible servers put the whole input in content_block_start and
    // stream no deltas; the client still needs the arguments.
    if (state?.kind === "tool" && !state.streamedArgs) {
      state.streamedArgs = true;
      const input = state.initialInput;
      if (isRecord(input) && Object.keys(input).length > 0) {
        return [
          this.chunk({
            tool_calls: [
              { index: state.toolIndex, function: { arguments: inputToArguments(input) } },
            ],
          }),
        ];
      }
      return [
        this.chunk({ tool_calls: [{ index: state.toolIndex, function: { arguments: "{}" } }] }),
      ];
    }
    return [];
  }

  private onMessageDelta(data: JsonObject): ChatStreamOutput[] {
    this.mergeUsage(data.usage);
    const delta = isRecord(data.delta) ? data.delta : {};
    if (this.finishSent || delta.stop_reason == null) return [];
    this.finishSent = true;
    return [...this.start(), this.chunk({}, anthropicStopToChatFinish(delta.stop_reason))];
  }

  /** Anthropic usage counters are cumulative: a field present later overwrites, never adds. */
  private mergeUsage(raw: unknown): void {
    this.current = mergeMessagesUsage(this.current, raw);
  }
}
