/**
 * Client speaks Anthropic Messages, provider speaks OpenAI Chat Completions.
 *
 * Request: messages -> chat. Response and stream: chat -> messages.
 */

import type {
  AnthropicContentBlock,
  AnthropicStopReason,
  MessagesRequest,
  MessagesResponse,
  MessagesSSEEvent,
  MessagesStreamEvent,
} from "../anthropic-types.js";
import type {
  ChatCompletionRequest,
  ChatCompletionResponse,
  ChatContentPart,
  ChatMessage,
  ChatTool,
  ChatToolCall,
  ChatToolChoice,
} from "../openai-types.js";
import {
  emptyUsage,
  toAnthropicMessageUsage,
  toAnthropicUsage,
  type Usage,
  usageFromChat,
} from "../usage.js";
import { anthropicClientTool } from "./anthropic-client-tools.js";
import {
  type BreakpointOf,
  breakpointOf,
  markLastPart,
  noBreakpoints,
  withBreakpoint,
} from "./prompt-cache.js";
import {
  argumentsToInput,
  asArray,
  asNumber,
  asString,
  inputToArguments,
  isRecord,
  type JsonObject,
  programOnly,
  providerToolText,
  randomId,
  toDataUrl,
  toolTypesMatching,
} from "./shared.js";

export type MaxTokensField = "max_tokens" | "max_completion_tokens";

export type ChatRequestOptions = {
  /**
   * Which field carries the output limit. OpenAI's reasoning models accept only
   * `max_completion_tokens`; many OpenAI-compatible servers know only `max_tokens`.
   */
  maxTokensField?: MaxTokensField;
  /**
   * Whether parts carry prompt cache breakpoints (`prompt_cache_breakpoint`, from Anthropic's
   * `cache_control`): OpenAI's API takes them, an OpenAI-compatible server may refuse the field.
   * Absent, they do (a body translated on to another wire reads or ignores them).
   */
  cacheBreakpoints?: boolean;
  /**
   * Whether assistant turns carry the signed reasoning a Responses client sent back in its
   * reasoning items (`reasoning_details`), which an anthropic-wire model needs to think through a
   * tool loop; OpenAI's chat API takes no such field. Absent, they do.
   */
  reasoningDetails?: boolean;
  /**
   * Whether the provider's chat API takes `custom` (free-form) tools, their calls and a choice
   * forcing one, as OpenAI's does: a Responses client's custom tools then go as chat's. Absent,
   * it does not (the tools are left out, their calls refused).
   */
  customTools?: boolean;
};

// ---------------------------------------------------------------------------
// Request: messages -> chat
// ---------------------------------------------------------------------------

/**
 * Anthropic's server tools: run by Anthropic's API itself, so no other provider can serve them
 * (`mcp_toolset`: the tools of an MCP server Anthropic's MCP connector calls).
 */
const anthropicServerTool = /^(web_search|web_fetch|code_execution|tool_search_tool|mcp)_/;

/**
 * The Anthropic tools of a messages request a chat-completions provider cannot run, server tools
 * first: the server tools (and `mcp_servers`, the MCP connector's servers, whose tools Anthropic's
 * API calls), then Anthropic-defined client tools with no published schema to send (memory, the
 * computer and browser toolsets). They are left out, named (or the request refused, as the
 * provider is configured), never dropped without a word.
 */
export function anthropicToolsOutsideChat(req: MessagesRequest): {
  server: string[];
  unformed: string[];
} {
  const server = toolTypesMatching(req.tools, anthropicServerTool);
  if (asArray(req.mcp_servers).length > 0) server.push("mcp_servers");
  for (const tool of asArray(req.tools))
    if (isRecord(tool) && programOnly(tool)) server.push(String(tool.name));
  const unformed = toolTypesMatching(req.tools, /./).filter(
    (type) => type !== "custom" && !anthropicServerTool.test(type) && !anthropicClientTool(type),
  );
  return { server, unformed };
}

export function anthropicToolsSentence({
  server,
  unformed,
}: {
  server: string[];
  unformed: string[];
}): string {
  const sentences: string[] = [];
  if (server.length > 0)
    sentences.push(
      `Anthropic server tools (${server.join(", ")}) run only on Anthropic's API; this model cannot use them.`,
    );
  if (unformed.length > 0)
    sentences.push(`Tools of type ${unformed.join(", ")} are not available for this model.`);
  return sentences.join(" ");
}

export function messagesRequestToChat(
  req: MessagesRequest,
  upstreamModel: string,
  opts: ChatRequestOptions = {},
): ChatCompletionRequest {
  const messages: ChatMessage[] = [];
  const marks = opts.cacheBreakpoints === false ? noBreakpoints : breakpointOf;
  const system = systemContent(req.system, marks);
  if (system.length > 0) messages.push({ role: "system", content: system });
  for (const message of asArray(req.messages)) {
    if (isRecord(message)) messages.push(...convertMessage(message, marks));
  }
  markLastPart(messages, marks(req.cache_control));

  const out: ChatCompletionRequest = { model: upstreamModel, messages };
  const maxTokens = asNumber(req.max_tokens);
  if (maxTokens !== undefined) out[opts.maxTokensField ?? "max_tokens"] = maxTokens;
  const temperature = asNumber(req.temperature);
  if (temperature !== undefined) out.temperature = temperature;
  const topP = asNumber(req.top_p);
  if (topP !== undefined) out.top_p = topP;
  const stop = asArray(req.stop_sequences).filter((s): s is string => typeof s === "string");
  if (stop.length > 0) out.stop = stop;

  if (req.stream === true) {
    out.stream = true;
    // Usage only arrives on a chat stream when asked for, and billing needs it.
    out.stream_options = { include_usage: true };
  }

  const tools = convertTools(asArray(req.tools));
  if (tools.length > 0) {
    out.tools = tools;
    const rawChoice: unknown = req.tool_choice;
    const choice = isRecord(rawChoice) ? rawChoice : undefined;
    const toolChoice = convertToolChoice(choice);
    if (toolChoice !== undefined) out.tool_choice = toolChoice;
    if (choice?.disable_parallel_tool_use === true) out.parallel_tool_calls = false;
  }

  const user = isRecord(req.metadata) ? asString(req.metadata.user_id) : undefined;
  if (user) out.user = user;
  const tier = chatServiceTier(req.service_tier);
  if (tier) out.service_tier = tier;
  const effort = reasoningEffortOf(req);
  if (effort) out.reasoning_effort = effort;

  // `output_format` is the structured-outputs beta's name, which SDKs of that time still send.
  const format =
    (isRecord(req.output_config) ? req.output_config.format : undefined) ?? req.output_format;
  if (isRecord(format) && format.type === "json_schema" && isRecord(format.schema)) {
    // Anthropic's structured outputs always hold to the schema; a chat API with OpenAI's strict
    // rules gets it as they let it be (`fitStrictSchemas`, docs/http-api.md).
    out.response_format = {
      type: "json_schema",
      json_schema: { name: "output", schema: format.schema, strict: true },
    };
  }
  return out;
}

/**
 * Anthropic's `service_tier` as chat's: `auto` (priority capacity where the organization has it)
 * is OpenAI's `auto` too, and `standard_only` its standard capacity, `default`.
 */
function chatServiceTier(tier: unknown): "auto" | "default" | undefined {
  if (tier === "standard_only") return "default";
  return tier === "auto" ? "auto" : undefined;
}

/**
 * A messages request's thinking as chat's `reasoning_effort`, as LiteLLM maps it: a budget by
 * LiteLLM's thresholds (10000 tokens and more high, 5000 medium, 2000 low, less minimal);
 * adaptive thinking, or `output_config.effort` alone, by that effort (`xhigh` and `max` are
 * chat's `high`).
 * Thinking turned off sends nothing: without the field a chat model thinks as little as it does
 * by default, and not every chat model knows `none`.
 */
function reasoningEffortOf(req: MessagesRequest): string | undefined {
  const thinking = isRecord(req.thinking) ? req.thinking : undefined;
  if (thinking?.type === "disabled") return undefined;
  if (thinking?.type === "enabled") {
    const budget = asNumber(thinking.budget_tokens) ?? 0;
    if (budget >= 10_000) return "high";
    if (budget >= 5_000) return "medium";
    return budget >= 2_000 ? "low" : "minimal";
  }
  const effort = isRecord(req.output_config) ? asString(req.output_config.effort) : undefined;
  // Not every chat model knows `xhigh`; all reasoning models know `high`.
  if (effort === "xhigh" || effort === "max") return "high";
  return effort === "low" || effort === "medium" || effort === "high" ? effort : undefined;
}

/**
 * A system prompt as chat's system content: its text, or where a block carries a cache marker, its
 * blocks as text parts, the marked ones with their breakpoints.
 */
function systemContent(system: unknown, marks: BreakpointOf): string | ChatContentPart[] {
  if (typeof system === "string") return system;
  const blocks = asArray(system).filter(
    (block): block is JsonObject =>
      isRecord(block) && block.type === "text" && (asString(block.text) ?? "") !== "",
  );
  if (!blocks.some((block) => marks(block.cache_control)))
    return blocks.map((block) => String(block.text)).join("\n\n");
  return blocks.map((block) =>
    withBreakpoint({ type: "text", text: String(block.text) }, marks(block.cache_control)),
  );
}

/**
 * One Anthropic turn may become several chat messages: every `tool_result` block is a
 * `role: "tool"` message, and these must directly follow the assistant's tool calls,
 * so they come first; the user's own content (and any images the tools returned,
 * which tool messages cannot carry) follows in one user message.
 */
function convertMessage(message: JsonObject, marks: BreakpointOf): ChatMessage[] {
  const content = message.content;
  if (message.role === "system") {
    // A mid-conversation system message keeps its place: it speaks to the turns after it.
    const system = systemContent(content, marks);
    return system.length === 0 ? [] : [{ role: "system", content: system }];
  }
  if (message.role === "assistant") {
    const assistant = convertAssistant(content, marks);
    return assistant ? [assistant] : [];
  }
  if (message.role !== "user") return [];
  if (typeof content === "string") return content === "" ? [] : [{ role: "user", content }];

  const out: ChatMessage[] = [];
  const userParts: ChatContentPart[] = [];
  for (const block of asArray(content)) {
    if (!isRecord(block)) continue;
    const breakpoint = marks(block.cache_control);
    if (block.type === "tool_result") {
      const { text, images } = splitToolResult(block.content);
      const error = block.is_error === true && text === "" ? "Error" : text;
      // The tool message ends the marked prefix: its text as a part carries the breakpoint.
      const content =
        breakpoint && error !== ""
          ? [withBreakpoint({ type: "text", text: error }, breakpoint)]
          : error;
      out.push({ role: "tool", tool_call_id: asString(block.tool_use_id) ?? "", content });
      userParts.push(...images);
    } else {
      const parts = userPart(block);
      // A block that became several parts (a document's blocks) ends at its last.
      if (parts.length > 0) parts.push(withBreakpoint(parts.pop() as ChatContentPart, breakpoint));
      userParts.push(...parts);
    }
  }
  if (
    userParts.length === 1 &&
    userParts[0].type === "text" &&
    userParts[0].prompt_cache_breakpoint === undefined
  ) {
    out.push({ role: "user", content: String(userParts[0].text) });
  } else if (userParts.length > 0) {
    out.push({ role: "user", content: userParts });
  }
  return out;
}

/**
 * The calls whose `tool_result` the client marked `is_error`, by the id their chat tool message
 * answers: chat has no flag for it, and a wire that has one (Gemini's `error`) reads it here.
 */
export function failedToolCalls(req: MessagesRequest): Set<string> {
  const failed = new Set<string>();
  for (const message of asArray(req.messages)) {
    if (!isRecord(message) || message.role !== "user") continue;
    for (const block of asArray(message.content)) {
      if (isRecord(block) && block.type === "tool_result" && block.is_error === true)
        failed.add(asString(block.tool_use_id) ?? "");
    }
  }
  return failed;
}

/**
 * Anthropic's server tools' blocks in an assistant turn (`server_tool_use`, `mcp_tool_use` and
 * their `*_tool_result`s), which chat has no form for: carried as the turn's text
 * (`providerToolText`), so the model still reads what was searched, fetched or run.
 */
const serverToolBlock = /^(server_tool_use|mcp_tool_use|[a-z_]+_tool_result)$/;

function convertAssistant(content: unknown, marks: BreakpointOf): ChatMessage | undefined {
  if (typeof content === "string") {
    return content === "" ? undefined : { role: "assistant", content };
  }
  const texts: ChatContentPart[] = [];
  // The server tools' texts, kept apart from the text around them.
  const apart = new Set<ChatContentPart>();
  const toolCalls: ChatToolCall[] = [];
  for (const block of asArray(content)) {
    if (!isRecord(block)) continue;
    const type = asString(block.type) ?? "";
    const server = serverToolBlock.test(type);
    const piece =
      type === "text" ? (asString(block.text) ?? "") : server ? providerToolText(type, block) : "";
    if (piece !== "") {
      const part = withBreakpoint({ type: "text", text: piece }, marks(block.cache_control));
      if (server) apart.add(part);
      texts.push(part);
    } else if (block.type === "tool_use") {
      toolCalls.push({
        id: asString(block.id) || randomId("call_"),
        type: "function",
        function: { name: asString(block.name) ?? "", arguments: inputToArguments(block.input) },
      });
    }
    // thinking blocks are Anthropic-signed and mean nothing to another provider. A marker on a
    // tool call has no part to go on: OpenAI's implicit breakpoint and later ones cover it.
  }
  if (texts.length === 0 && toolCalls.length === 0) return undefined;
  // The text as one string, unless a marked block needs its part.
  const marked = texts.some((part) => part.prompt_cache_breakpoint !== undefined);
  const text = texts
    .map((part, i) => {
      const gap = i > 0 && (apart.has(part) || apart.has(texts[i - 1])) ? "\n\n" : "";
      return gap + String(part.text);
    })
    .join("");
  const message: ChatMessage = {
    role: "assistant",
    content: marked ? texts : text === "" ? null : text,
  };
  if (toolCalls.length > 0) message.tool_calls = toolCalls;
  return message;
}

/** Tool messages carry text only; images in a tool result travel in the next user message. */
function splitToolResult(content: unknown): { text: string; images: ChatContentPart[] } {
  if (typeof content === "string") return { text: content, images: [] };
  const texts: string[] = [];
  const images: ChatContentPart[] = [];
  for (const block of asArray(content)) {
    if (!isRecord(block)) continue;
    if (block.type === "text") texts.push(asString(block.text) ?? "");
    else {
      for (const part of userPart(block)) {
        if (part.type === "text") texts.push(String(part.text));
        else images.push(part);
      }
    }
  }
  return { text: texts.join("\n"), images };
}

/**
 * A block as chat parts (none for a block chat has no part for). A document's `context` (what the
 * client tells the model about it) goes as text ahead of the document: chat's parts have no field
 * for it, and the model must still read it.
 */
function userPart(block: JsonObject): ChatContentPart[] {
  const parts = blockParts(block);
  const context = block.type === "document" ? asString(block.context) : undefined;
  return context && parts.length > 0 ? [{ type: "text", text: context }, ...parts] : parts;
}

function blockParts(block: JsonObject): ChatContentPart[] {
  if (block.type === "search_result") return searchResultParts(block);
  const source = isRecord(block.source) ? block.source : undefined;
  // A document whose source is content blocks: its text and images, under its title.
  if (block.type === "document" && source?.type === "content") {
    const title = asString(block.title);
    const inner =
      typeof source.content === "string"
        ? [{ type: "text", text: source.content }]
        : asArray(source.content).filter(isRecord);
    const parts = inner.flatMap((b) =>
      b.type === "text" || b.type === "image" ? userPart(b) : [],
    );
    return title && parts.length > 0 ? [{ type: "text", text: title }, ...parts] : parts;
  }
  const part = singlePart(block);
  return part ? [part] : [];
}

/**
 * Anthropic's `search_result` block (a source the model may cite) as text: chat has no such part,
 * and the model must still read the result.
 */
function searchResultParts(block: JsonObject): ChatContentPart[] {
  const body = asArray(block.content)
    .map((b) => (isRecord(b) && b.type === "text" ? (asString(b.text) ?? "") : ""))
    .filter((t) => t !== "")
    .join("\n\n");
  const head = [asString(block.title), asString(block.source)].filter(Boolean).join("\n");
  const text = [head, body].filter((t) => t !== "").join("\n\n");
  return text ? [{ type: "text", text }] : [];
}

function singlePart(block: JsonObject): ChatContentPart | undefined {
  if (block.type === "text") {
    const text = asString(block.text);
    return text ? { type: "text", text } : undefined;
  }
  const source = isRecord(block.source) ? block.source : undefined;
  if (!source) return undefined;
  if (block.type === "image") {
    if (source.type === "base64") {
      const data = asString(source.data) ?? "";
      const mediaType = asString(source.media_type) ?? "image/png";
      return { type: "image_url", image_url: { url: toDataUrl(mediaType, data) } };
    }
    if (source.type === "url") {
      const url = asString(source.url);
      return url ? { type: "image_url", image_url: { url } } : undefined;
    }
  }
  if (block.type === "document") {
    const title = asString(block.title);
    if (source.type === "base64") {
      const mediaType = asString(source.media_type) ?? "application/pdf";
      return {
        type: "file",
        file: {
          file_data: toDataUrl(mediaType, asString(source.data) ?? ""),
          filename: title ?? "document.pdf",
        },
      };
    }
    if (source.type === "text") {
      const text = asString(source.data);
      return text ? { type: "text", text: title ? `${title}\n\n${text}` : text } : undefined;
    }
    // A PDF by URL (`URLPDFSource`): chat has no such part, so it goes as a file by URL, which
    // a wire that fetches URLs (Gemini's fileData) sends and any other refuses
    // (`documentUrlSentence`), never answering without the document.
    if (source.type === "url") {
      const url = asString(source.url);
      return url
        ? { type: "file", file: { file_url: url, filename: title ?? "document.pdf" } }
        : undefined;
    }
  }
  return undefined;
}

/**
 * An image or document a messages request gives by `file_id` (Anthropic's Files API), or a
 * `container_upload` (a file of the Files API put in the code execution container), as a sentence
 * for the client, or undefined: the gateway has no file store to read it from, and the model would
 * answer without it.
 */
export function fileSourceSentence(req: MessagesRequest): string | undefined {
  const blocks = asArray(req.messages).flatMap((m) => (isRecord(m) ? asArray(m.content) : []));
  const nested = blocks.flatMap((b) =>
    isRecord(b) && b.type === "tool_result" ? asArray(b.content) : [],
  );
  for (const block of [...blocks, ...nested]) {
    if (isRecord(block) && block.type === "container_upload")
      return "A `container_upload` block is not available for this model: it puts a file of Anthropic's Files API in the code execution container, which only Anthropic's API runs, and the gateway has no file store to read the file from; send its content as a `document` or `text` block.";
    if (!isRecord(block) || (block.type !== "image" && block.type !== "document")) continue;
    if (isRecord(block.source) && block.source.type === "file")
      return `An \`${block.type}\` given by \`file_id\` (source type \`file\`) is not available for this model: the gateway has no file store to read it from; send it as a base64 \`source\`.`;
  }
  return undefined;
}

/**
 * A document or search result the client asked citations of (`citations: {enabled: true}`), as a
 * sentence for the client, or undefined: the answer's text blocks would come back without the
 * `citations` that point into it, which only Anthropic's API writes.
 */
export function citationsSentence(req: MessagesRequest): string | undefined {
  const blocks = asArray(req.messages).flatMap((m) => (isRecord(m) ? asArray(m.content) : []));
  const nested = blocks.flatMap((b) =>
    isRecord(b) && b.type === "tool_result" ? asArray(b.content) : [],
  );
  for (const block of [...blocks, ...nested]) {
    if (!isRecord(block) || (block.type !== "document" && block.type !== "search_result")) continue;
    if (isRecord(block.citations) && block.citations.enabled === true)
      return `\`citations\` on a \`${block.type}\` block is not available for this model: its provider does not cite the sources it reads; leave out \`citations\` (or set \`enabled: false\`) to have it read without citations.`;
  }
  return undefined;
}

/**
 * A chat body's documents given by URL (from a messages client's `URLPDFSource`), as a sentence
 * for the client of a wire that cannot fetch them, or undefined.
 */
export function documentUrlSentence(chat: ChatCompletionRequest): string | undefined {
  for (const message of asArray(chat.messages)) {
    if (!isRecord(message)) continue;
    for (const part of asArray(message.content)) {
      if (isRecord(part) && part.type === "file" && isRecord(part.file) && part.file.file_url)
        return "A `document` given by URL is not available for this model: its provider takes documents as data; send it as a base64 `source`.";
    }
  }
  return undefined;
}

function convertTools(tools: unknown[]): ChatTool[] {
  const out: ChatTool[] = [];
  for (const tool of tools) {
    if (!isRecord(tool)) continue;
    const name = asString(tool.name);
    if (!name) continue;
    // Anthropic-defined client tools declare no schema; they get their published one.
    const builtIn = anthropicClientTool(asString(tool.type) ?? "");
    if (builtIn) {
      out.push({ type: "function", function: { name, ...builtIn } });
      continue;
    }
    // Otherwise only tools with a schema can run through another provider (server tools are
    // left out by the tool policy; computer and memory tools too).
    if (!isRecord(tool.input_schema) || programOnly(tool)) continue;
    if (tool.type !== undefined && tool.type !== "custom") continue;
    const fn: { name: string; description?: string; parameters: JsonObject; strict?: boolean } = {
      name,
      parameters: tool.input_schema,
    };
    const description = asString(tool.description);
    if (description) fn.description = description;
    // Strict tool use, as Anthropic's: the call's input holds to the schema (fitted to OpenAI's
    // strict rules where a chat API holds them, `fitStrictSchemas`).
    if (tool.strict === true) fn.strict = true;
    out.push({ type: "function", function: fn });
  }
  return out;
}

function convertToolChoice(choice: JsonObject | undefined): ChatToolChoice | undefined {
  switch (choice?.type) {
    case "auto":
      return "auto";
    case "any":
      return "required";
    case "none":
      return "none";
    case "tool": {
      const name = asString(choice.name);
      return name ? { type: "function", function: { name } } : undefined;
    }
    default:
      return undefined;
  }
}

// ---------------------------------------------------------------------------
// Response: chat -> messages
// ---------------------------------------------------------------------------

/** `sawToolCalls`: some servers (Ollama...) report "stop" even when the turn is a tool call. */
export function chatFinishToAnthropicStop(
  reason: unknown,
  sawToolCalls = false,
): AnthropicStopReason {
  if (sawToolCalls && (reason === "stop" || reason == null)) return "tool_use";
  switch (reason) {
    case "length":
      return "max_tokens";
    case "tool_calls":
    case "function_call":
      return "tool_use";
    case "content_filter":
      return "refusal";
    default:
      return "end_turn";
  }
}

/**
 * The stop sequence a chat choice ended at: vLLM's `stop_reason` (and the mock's, toward a
 * messages client) names it when `finish_reason` is `stop`; OpenAI's answers never do. A number
 * there is a stop token, which a messages client has no field for.
 */
function chatStopSequence(choice: JsonObject): string | undefined {
  const sequence = asString(choice.stop_reason);
  return choice.finish_reason === "stop" && sequence ? sequence : undefined;
}

/**
 * A translated answer's id is the gateway's own, never made from the upstream's chat id: a client
 * names the answer by it (a message thread's `previous_message_id`), and servers repeat their ids
 * (Ollama draws them from 999).
 */
function newMessageId(): string {
  return randomId("msg_");
}

/** Text of a chat message's content, whether a string or (some servers) an array of parts. */
function contentText(content: unknown): string {
  if (typeof content === "string") return content;
  return asArray(content)
    .map((part) => (isRecord(part) && part.type === "text" ? (asString(part.text) ?? "") : ""))
    .join("");
}

/**
 * Whether a messages client asked not to read the model's thinking (`thinking.display:
 * "omitted"`): a chat backend's reasoning text is then left out of the answer, as Anthropic's API
 * leaves it out of its thinking blocks.
 */
export function thinkingOmitted(req: MessagesRequest): boolean {
  return isRecord(req.thinking) && req.thinking.display === "omitted";
}

/** `showThinking`: false where the client asked for its thinking omitted (`thinkingOmitted`). */
export function chatResponseToMessages(
  resp: ChatCompletionResponse,
  clientModel: string,
  showThinking = true,
): MessagesResponse {
  const choice = asArray(resp.choices).find(isRecord) ?? {};
  const message = isRecord(choice.message) ? choice.message : {};
  const content: AnthropicContentBlock[] = [];

  const reasoning = asString(message.reasoning_content) ?? asString(message.reasoning);
  if (reasoning && showThinking)
    content.push({ type: "thinking", thinking: reasoning, signature: "" });
  const text = contentText(message.content) || (asString(message.refusal) ?? "");
  if (text) content.push(textBlock(text));

  const toolCalls = asArray(message.tool_calls);
  for (const call of toolCalls) {
    if (!isRecord(call) || !isRecord(call.function)) continue;
    content.push(
      toolUseBlock(
        toolUseId(asString(call.id)),
        asString(call.function.name) ?? "",
        argumentsToInput(call.function.arguments),
      ),
    );
  }
  const legacy = message.function_call;
  if (isRecord(legacy) && asString(legacy.name)) {
    content.push(
      toolUseBlock(
        randomId("toolu_"),
        asString(legacy.name) ?? "",
        argumentsToInput(legacy.arguments),
      ),
    );
  }

  const sawToolCalls = content.some((block) => block.type === "tool_use");
  const stopSequence = sawToolCalls ? undefined : chatStopSequence(choice);
  return {
    ...messageShape(newMessageId(), clientModel),
    content,
    stop_reason: stopSequence
      ? "stop_sequence"
      : chatFinishToAnthropicStop(choice.finish_reason, sawToolCalls),
    stop_sequence: stopSequence ?? null,
    usage: toAnthropicMessageUsage(usageFromChat(resp), anthropicTier(resp.service_tier)),
  };
}

/**
 * What every translated message carries besides its content, stop and usage: the keys the
 * @anthropic-ai/sdk types require, null where only Anthropic's API has something to say (the code
 * execution container, a refusal's policy category, prompt cache diagnostics).
 */
function messageShape(id: string, clientModel: string) {
  return {
    id,
    type: "message" as const,
    role: "assistant" as const,
    model: clientModel,
    container: null,
    stop_details: null,
    diagnostics: null,
  };
}

/** A text block as Anthropic's answers write it: no citations (only Anthropic's API cites). */
function textBlock(text: string): AnthropicContentBlock {
  return { type: "text", text, citations: null };
}

/** A tool call as Anthropic's answers write it: called by the model itself (`direct`). */
function toolUseBlock(id: string, name: string, input: unknown): AnthropicContentBlock {
  return { type: "tool_use", id, name, input, caller: { type: "direct" } };
}

/**
 * The capacity a chat answer says served it, as Anthropic names it: OpenAI's `default` is its
 * standard capacity; a tier Anthropic has no name for (flex, scale) is not said.
 */
function anthropicTier(tier: unknown): "standard" | "priority" | null {
  if (tier === "default") return "standard";
  return tier === "priority" ? "priority" : null;
}

// ---------------------------------------------------------------------------
// Stream: chat chunks -> messages SSE events
// ---------------------------------------------------------------------------

type ToolState = {
  id: string;
  name: string;
  /** Anthropic block index once the block is opened; undefined while the name is unknown. */
  blockIndex?: number;
  /** Arguments that arrived before the block could open. */
  pendingArgs: string;
  /** Every argument piece so far, to tell when the call's JSON is whole. */
  args: string;
  /** The order the calls began in, which their blocks keep. */
  seq: number;
};

type OpenBlock =
  | { kind: "text" | "thinking"; index: number }
  | { kind: "tool"; index: number; tool: ToolState };

/**
 * Consumes chat chunks (parsed JSON objects, without the `[DONE]` sentinel) and yields
 * Anthropic SSE events. Call `finish()` once the upstream stream has ended.
 */
export class ChatStreamToMessages {
  private readonly clientModel: string;
  /**
   * The stream's usage as it is billed, where the caller meters it: `message_start` carries its
   * input (a chat stream reports usage only at its end, so until then the count of what was sent)
   * and `message_delta` the whole answer's, so a client reading either event is told what it is
   * charged. Without it, the usage the chunks report.
   */
  private readonly billed: (() => Usage) | undefined;
  private stopSequence: string | undefined;
  private readonly messageId = newMessageId();
  private started = false;
  private ended = false;
  private nextBlockIndex = 0;
  private open: OpenBlock | undefined;
  /** Keyed by the chat tool-call index, re-keyed when a server reuses an index for a new id. */
  private readonly tools = new Map<number, ToolState>();
  private sawToolCalls = false;
  private toolSeq = 0;
  /** Calls whose blocks have not opened: while none waits, a piece needs no scan of the calls. */
  private waitingTools = 0;
  private finishReason: unknown = null;
  private current: Usage = emptyUsage();
  /** The capacity the chunks say served the answer (`anthropicTier`). */
  private tier: "standard" | "priority" | null = null;

  /** `showThinking`: as `chatResponseToMessages` takes it. */
  constructor(
    clientModel: string,
    billed?: () => Usage,
    private readonly showThinking = true,
  ) {
    this.clientModel = clientModel;
    this.billed = billed;
  }

  push(chunk: unknown): MessagesSSEEvent[] {
    if (this.ended || !isRecord(chunk)) return [];
    const out: MessagesSSEEvent[] = [];
    if (isRecord(chunk.error)) {
      this.ended = true;
      const message = asString(chunk.error.message) ?? "upstream stream error";
      return [event({ type: "error", error: { type: "api_error", message } })];
    }
    if (chunk.service_tier != null) this.tier = anthropicTier(chunk.service_tier);
    out.push(...this.start());
    if (isRecord(chunk.usage)) this.current = usageFromChat(chunk);

    // Only the first choice is relayed: Anthropic has no `n`.
    const choice = asArray(chunk.choices).find((c) => isRecord(c) && (c.index ?? 0) === 0);
    if (!isRecord(choice)) return out;
    const delta = isRecord(choice.delta) ? choice.delta : {};

    const reasoning = asString(delta.reasoning_content) ?? asString(delta.reasoning);
    if (reasoning && this.showThinking) out.push(...this.appendThinking(reasoning));
    const text = contentText(delta.content) || (asString(delta.refusal) ?? "");
    if (text) out.push(...this.appendText(text));
    for (const call of asArray(delta.tool_calls)) {
      if (isRecord(call)) out.push(...this.appendToolCall(call));
    }
    if (choice.finish_reason != null) {
      this.finishReason = choice.finish_reason;
      this.stopSequence = chatStopSequence(choice);
      out.push(...this.closeOpenBlock());
    }
    return out;
  }

  /** Ends the message: closes blocks, then `message_delta` and `message_stop`. Idempotent. */
  finish(): MessagesSSEEvent[] {
    if (this.ended) return [];
    const out = this.start();
    out.push(...this.openWaitingTools(true));
    out.push(...this.closeOpenBlock());
    this.ended = true;
    const stopSequence = this.sawToolCalls ? undefined : this.stopSequence;
    out.push(
      event({
        type: "message_delta",
        delta: {
          stop_reason: stopSequence
            ? "stop_sequence"
            : chatFinishToAnthropicStop(this.finishReason, this.sawToolCalls),
          stop_sequence: stopSequence ?? null,
          stop_details: null,
          container: null,
        },
        usage: toAnthropicUsage(this.billed?.() ?? this.current),
      }),
      event({ type: "message_stop" }),
    );
    return out;
  }

  usage(): Usage {
    return { ...this.current };
  }

  private start(): MessagesSSEEvent[] {
    if (this.started) return [];
    this.started = true;
    return [
      event({
        type: "message_start",
        message: {
          ...messageShape(this.messageId, this.clientModel),
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: toAnthropicMessageUsage(this.billed?.() ?? emptyUsage(), this.tier),
        },
      }),
    ];
  }

  private closeOpenBlock(): MessagesSSEEvent[] {
    if (!this.open) return [];
    const index = this.open.index;
    this.open = undefined;
    return [event({ type: "content_block_stop", index })];
  }

  private openBlock(kind: "text" | "thinking", block: AnthropicContentBlock): MessagesSSEEvent[] {
    const out = this.closeOpenBlock();
    const index = this.nextBlockIndex++;
    this.open = { kind, index };
    out.push(event({ type: "content_block_start", index, content_block: block }));
    return out;
  }

  private appendText(text: string): MessagesSSEEvent[] {
    const out = this.open?.kind === "text" ? [] : this.openBlock("text", textBlock(""));
    const index = this.open?.index ?? 0;
    out.push(event({ type: "content_block_delta", index, delta: { type: "text_delta", text } }));
    return out;
  }

  private appendThinking(thinking: string): MessagesSSEEvent[] {
    const out =
      this.open?.kind === "thinking"
        ? []
        : this.openBlock("thinking", { type: "thinking", thinking: "", signature: "" });
    const index = this.open?.index ?? 0;
    out.push(
      event({ type: "content_block_delta", index, delta: { type: "thinking_delta", thinking } }),
    );
    return out;
  }

  private appendToolCall(call: JsonObject): MessagesSSEEvent[] {
    this.sawToolCalls = true;
    const key = asNumber(call.index) ?? 0;
    const fn = isRecord(call.function) ? call.function : {};
    const raw = asString(call.id);
    const id = raw ? toolUseId(raw) : undefined;
    let tool = this.tools.get(key);
    // A new id at a known index is a new call (some servers send every call at index 0).
    if (
      tool &&
      id &&
      tool.id !== id &&
      (tool.blockIndex !== undefined || tool.pendingArgs || tool.name)
    ) {
      this.tools.set(-1 - this.tools.size, tool);
      tool = undefined;
    }
    if (!tool) {
      tool = {
        id: id ?? randomId("toolu_"),
        name: "",
        pendingArgs: "",
        args: "",
        seq: this.toolSeq++,
      };
      this.waitingTools++;
      this.tools.set(key, tool);
    }
    const name = asString(fn.name);
    if (name && tool.blockIndex === undefined) tool.name = name;

    const out: MessagesSSEEvent[] = [];
    const args = asString(fn.arguments);
    if (args) {
      tool.args += args;
      if (tool.blockIndex === undefined) tool.pendingArgs += args;
      else if (this.open?.kind === "tool" && this.open.index === tool.blockIndex)
        out.push(jsonDelta(tool.blockIndex, args));
      // A piece for a block already closed (text came between) cannot follow its stop.
    }
    out.push(...this.openWaitingTools(false));
    return out;
  }

  /**
   * Opens the calls whose blocks wait, in the order they began. A messages stream writes one
   * block at a time and never a delta after its block's stop, while a chat stream may interleave
   * calls' argument pieces by index: a call that begins while the open call's JSON is not whole
   * waits (its pieces held) until that one is, or until the end (`all`).
   */
  private openWaitingTools(all: boolean): MessagesSSEEvent[] {
    if (this.waitingTools === 0) return [];
    const out: MessagesSSEEvent[] = [];
    const waiting = [...this.tools.values()]
      .filter((t) => t.blockIndex === undefined && (t.name || all))
      .sort((a, b) => a.seq - b.seq);
    for (const tool of waiting) {
      if (!all && !this.openToolWhole()) break;
      out.push(...this.openTool(tool));
    }
    return out;
  }

  /** Whether no call's block is open, or the open one's arguments are whole JSON. */
  private openToolWhole(): boolean {
    if (this.open?.kind !== "tool") return true;
    try {
      JSON.parse(this.open.tool.args);
      return true;
    } catch {
      return false;
    }
  }

  private openTool(tool: ToolState): MessagesSSEEvent[] {
    const out = this.closeOpenBlock();
    const index = this.nextBlockIndex++;
    tool.blockIndex = index;
    this.waitingTools--;
    this.open = { kind: "tool", index, tool };
    out.push(
      event({
        type: "content_block_start",
        index,
        content_block: toolUseBlock(tool.id, tool.name, {}),
      }),
    );
    if (tool.pendingArgs) {
      out.push(jsonDelta(index, tool.pendingArgs));
      tool.pendingArgs = "";
    }
    return out;
  }
}

function jsonDelta(index: number, partialJson: string): MessagesSSEEvent {
  return event({
    type: "content_block_delta",
    index,
    delta: { type: "input_json_delta", partial_json: partialJson },
  });
}

function event(data: MessagesStreamEvent): MessagesSSEEvent {
  return { event: data.type, data };
}

/**
 * A chat tool call's id as the messages style shows it: `call_abc` becomes `toolu_abc`, the shape
 * Anthropic's clients expect. The client sends it back as a `tool_use_id`, which goes to the chat
 * backend unchanged, so the history the backend sees stays consistent with itself.
 */
export function toolUseId(chatId: string | undefined): string {
  if (!chatId) return randomId("toolu_");
  if (chatId.startsWith("toolu_")) return chatId;
  const rest = chatId.startsWith("call_") ? chatId.slice(5) : chatId;
  return `toolu_${rest.replace(/[^A-Za-z0-9_-]/g, "_")}`;
}
