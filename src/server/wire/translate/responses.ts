/**
 * Client speaks the OpenAI Responses API; the gateway runs it as a chat completion
 * (directly on an openai-wire provider, or further translated to Anthropic).
 *
 * Request: responses -> chat. Response and stream: chat -> responses.
 */

import type { CompactedTurn } from "../completion-types.js";
import type {
  ChatCompletionRequest,
  ChatCompletionResponse,
  ChatContentPart,
  ChatCustomToolCall,
  ChatMessage,
  ChatTool,
  ChatToolCall,
  ChatToolChoice,
  ReasoningDetail,
} from "../openai-types.js";
import type {
  ResponseObject,
  ResponsesOutputCustomToolCall,
  ResponsesOutputFunctionCall,
  ResponsesOutputItem,
  ResponsesOutputMessage,
  ResponsesOutputReasoning,
  ResponsesRequest,
  ResponsesSSEEvent,
  ResponsesStatus,
  ResponsesTextFormat,
  ResponsesToolChoice,
  ResponsesUsage,
} from "../responses-types.js";
import { emptyUsage, sumUsage, type Usage, usageFromChat } from "../usage.js";
import { decodeReasoning, encodeReasoning } from "./encrypted-reasoning.js";
import type { ChatRequestOptions } from "./messages-to-chat.js";
import {
  asArray,
  asNumber,
  asString,
  chatToolName,
  isRecord,
  type JsonObject,
  nowSeconds,
  programOnly,
  providerToolText,
  randomId,
} from "./shared.js";

// ---------------------------------------------------------------------------
// Request: responses -> chat
// ---------------------------------------------------------------------------

export function responsesRequestToChat(
  req: ResponsesRequest,
  upstreamModel: string,
  opts: ChatRequestOptions = {},
): ChatCompletionRequest {
  const messages: ChatMessage[] = [];
  const instructions = asString(req.instructions);
  if (instructions) messages.push({ role: "system", content: instructions });
  if (typeof req.input === "string") {
    messages.push({ role: "user", content: req.input });
  } else {
    const breakpoints =
      opts.cacheBreakpoints === false ? undefined : { ttl: longTtl(req.prompt_cache_options) };
    appendInputItems(messages, asArray(req.input), breakpoints, opts.reasoningDetails !== false);
  }

  const out: ChatCompletionRequest = { model: upstreamModel, messages };
  const maxTokens = asNumber(req.max_output_tokens);
  if (maxTokens !== undefined) out[opts.maxTokensField ?? "max_tokens"] = maxTokens;
  const temperature = asNumber(req.temperature);
  if (temperature !== undefined) out.temperature = temperature;
  const topP = asNumber(req.top_p);
  if (topP !== undefined) out.top_p = topP;
  if (req.stream === true) {
    out.stream = true;
    out.stream_options = { include_usage: true };
  }

  const custom = opts.customTools === true;
  const tools = convertTools(asArray(req.tools), custom);
  if (tools.length > 0) {
    out.tools = tools;
    const toolChoice = convertToolChoice(req.tool_choice, custom);
    // A choice of a tool not sent (one only a program may call) is refused by the caller.
    const name = isRecord(toolChoice) ? chatToolName(toolChoice) : undefined;
    const sent = (tool: ChatTool) =>
      isRecord(toolChoice) && tool.type === toolChoice.type && chatToolName(tool) === name;
    if (toolChoice !== undefined && (name === undefined || tools.some(sent)))
      out.tool_choice = toolChoice;
    if (typeof req.parallel_tool_calls === "boolean") {
      out.parallel_tool_calls = req.parallel_tool_calls;
    }
  }

  const user = asString(req.safety_identifier) ?? asString(req.user);
  if (user) out.user = user;
  // Chat takes these under the same names (verbosity from under `text`).
  const verbosity = isRecord(req.text) ? asString(req.text.verbosity) : undefined;
  if (verbosity) out.verbosity = verbosity;
  for (const field of ["prompt_cache_key", "prompt_cache_retention", "service_tier"] as const) {
    const value = asString(req[field]);
    if (value) out[field] = value;
  }
  const cacheOptions = promptCacheOptions(req.prompt_cache_options);
  if (cacheOptions) out.prompt_cache_options = cacheOptions;
  const effort = isRecord(req.reasoning) ? asString(req.reasoning.effort) : undefined;
  if (effort) out.reasoning_effort = effort;

  // Log probabilities are asked for as an extra to include; chat asks with a flag.
  if (asArray(req.include).includes("message.output_text.logprobs")) {
    out.logprobs = true;
    const top = asNumber(req.top_logprobs);
    if (top !== undefined) out.top_logprobs = top;
  }

  const format = isRecord(req.text) ? req.text.format : undefined;
  if (isRecord(format) && format.type === "json_schema" && isRecord(format.schema)) {
    out.response_format = {
      type: "json_schema",
      json_schema: {
        name: asString(format.name) ?? "output",
        schema: format.schema,
        ...(typeof format.strict === "boolean" ? { strict: format.strict } : {}),
      },
    };
  } else if (isRecord(format) && format.type === "json_object") {
    out.response_format = { type: "json_object" };
  }
  return out;
}

/**
 * `prompt_cache_options` as chat takes them: the breakpoint mode, and a lifetime chat has (`30m`;
 * a longer one is a minimum the provider may exceed anyway, and chat refuses it).
 */
function promptCacheOptions(options: unknown): JsonObject | undefined {
  if (!isRecord(options)) return undefined;
  const out: JsonObject = {};
  if (options.mode === "implicit" || options.mode === "explicit") out.mode = options.mode;
  if (options.ttl === "30m") out.ttl = options.ttl;
  return Object.keys(out).length > 0 ? out : undefined;
}

/**
 * The request's 12-hour cache lifetime, which chat's options cannot carry: the input's breakpoints
 * without a lifetime of their own take it instead, as they would inherit it.
 */
function longTtl(options: unknown): string | undefined {
  return isRecord(options) && options.ttl === "12h" ? options.ttl : undefined;
}

/**
 * How input parts' `prompt_cache_breakpoint`s go to chat: with the lifetime a breakpoint without
 * one of its own takes; undefined for a server that takes no breakpoints.
 */
type Breakpoints = { ttl?: string } | undefined;

/**
 * Responses input items -> chat messages. The Responses API lists an assistant turn as
 * separate items (a reasoning item, a message, then one item per function call); chat wants them
 * as one assistant message, so consecutive assistant items are merged. A reasoning item's signed
 * reasoning (`encrypted_content` the gateway made, where `reasoning` says to carry it) goes on the
 * assistant turn it came before, as `reasoning_details`. A hosted tool's call (a web search, an MCP
 * call, ...) is the assistant turn's text, apart from the text around it (`providerToolText`).
 */
function appendInputItems(
  messages: ChatMessage[],
  items: unknown[],
  breakpoints: Breakpoints,
  reasoning: boolean,
): void {
  let signed: ReasoningDetail[] = [];
  const lastAssistant = (): Extract<ChatMessage, { role: "assistant" }> => {
    const last = messages[messages.length - 1];
    const assistant: Extract<ChatMessage, { role: "assistant" }> =
      last?.role === "assistant" ? last : { role: "assistant", content: null };
    if (assistant !== last) messages.push(assistant);
    if (signed.length > 0) {
      // Reasoning listed after one of the turn's calls came after it (interleaved thinking).
      const afterCall = assistant.tool_calls?.at(-1)?.id;
      const placed = afterCall
        ? signed.map((detail) => ({ after_tool_call_id: afterCall, ...detail }))
        : signed;
      assistant.reasoning_details = [...(assistant.reasoning_details ?? []), ...placed];
      signed = [];
    }
    return assistant;
  };
  // Whether the assistant's text so far ends with a hosted call's, which the next text keeps apart.
  let afterCall = false;
  const appendText = (text: string, call: boolean) => {
    const assistant = lastAssistant();
    const before = typeof assistant.content === "string" ? assistant.content : "";
    const gap = before !== "" && (call || afterCall) ? "\n\n" : "";
    assistant.content = before + gap + text;
    afterCall = call;
  };

  for (const item of items) {
    if (!isRecord(item)) continue;
    const type = item.type ?? "message";
    if (type === "reasoning") {
      if (reasoning) signed.push(...decodeReasoning(item.encrypted_content));
      continue;
    }
    // Reasoning with no assistant item after it has no turn to go with.
    const assistantItem =
      type === "function_call" ||
      type === "custom_tool_call" ||
      (typeof type === "string" && hostedCallItems.test(type)) ||
      (type === "message" && item.role === "assistant");
    if (!assistantItem) signed = [];
    if (type === "message") {
      const role = item.role;
      if (role === "system" || role === "developer") {
        // Text, or its text parts where one marks the end of a prefix to cache.
        const parts = userContent(item.content, breakpoints).filter((p) => p.type === "text");
        const marked = parts.some((p) => p.prompt_cache_breakpoint !== undefined);
        const text = contentText(item.content);
        if (marked) messages.push({ role: "system", content: parts });
        else if (text) messages.push({ role: "system", content: text });
      } else if (role === "user") {
        const content = userContent(item.content, breakpoints);
        if (content.length > 0) messages.push({ role: "user", content: simplify(content) });
      } else if (role === "assistant") {
        const text = contentText(item.content);
        if (text) appendText(text, false);
      }
    } else if (type === "function_call") {
      const assistant = lastAssistant();
      const call: ChatToolCall = {
        id: asString(item.call_id) || asString(item.id) || randomId("call_"),
        type: "function",
        function: {
          name: flatToolName(asString(item.namespace), asString(item.name) ?? ""),
          arguments: asString(item.arguments) ?? "{}",
        },
      };
      assistant.tool_calls = [...(assistant.tool_calls ?? []), call];
    } else if (type === "custom_tool_call") {
      // Reaches here only toward a chat API that takes custom tools (`clientToolItemSentence`).
      const assistant = lastAssistant();
      const call: ChatCustomToolCall = {
        id: asString(item.call_id) || asString(item.id) || randomId("call_"),
        type: "custom",
        custom: {
          name: flatToolName(asString(item.namespace), asString(item.name) ?? ""),
          input: asString(item.input) ?? "",
        },
      };
      assistant.tool_calls = [...(assistant.tool_calls ?? []), call];
    } else if (type === "function_call_output" || type === "custom_tool_call_output") {
      const callId = asString(item.call_id) ?? "";
      if (typeof item.output === "string") {
        messages.push({ role: "tool", tool_call_id: callId, content: item.output });
      } else {
        const parts = userContent(item.output, breakpoints);
        const texts = parts.filter((p) => p.type === "text");
        const text = texts.map((p) => String(p.text)).join("\n");
        // Its text parts where one marks the end of a prefix to cache, else the text.
        const marked = texts.some((p) => p.prompt_cache_breakpoint !== undefined);
        messages.push({ role: "tool", tool_call_id: callId, content: marked ? texts : text });
        // Tool messages carry text only: images the tool returned go in a user message.
        const images = parts.filter((p) => p.type !== "text");
        if (images.length > 0) messages.push({ role: "user", content: images });
      }
    } else if (typeof type === "string" && hostedCallItems.test(type)) {
      appendText(
        providerToolText(type, type === "tool_search_output" ? withToolsNamed(item) : item),
        true,
      );
    }
    // An item_reference was resolved before (`response-state.ts`).
  }
}

/**
 * Hosted tools' items that chat has no form for, whose content the model can still read: carried
 * as the assistant's text (`providerToolText`): a search, its sources and results, code that ran
 * (the code interpreter's, a programmatic tool calling `program`) and its output, an MCP call, a
 * tool search and the tools it loaded (which are also declared, `withInputSettings`). The image of
 * an `image_generation_call` and an `mcp_approval_response` (which asks OpenAI's API to run a
 * call) cannot be; they are refused (`hostedItemSentence`).
 */
const hostedCallItems =
  /^(web_search_call|file_search_call|code_interpreter_call|mcp_call|mcp_list_tools|mcp_approval_request|tool_search_call|tool_search_output|program|program_output)$/;

/**
 * A tool search's output as the model reads it: the tools it loaded by name and description
 * (their definitions are declared to the model, `withInputSettings`).
 */
function withToolsNamed(output: JsonObject): JsonObject {
  const tool = (loaded: unknown): unknown =>
    isRecord(loaded)
      ? {
          name: loaded.name,
          description: loaded.description,
          tools: asArray(loaded.tools).map(tool),
        }
      : undefined;
  return { ...output, tools: asArray(output.tools).map(tool) };
}

function simplify(parts: ChatContentPart[]): string | ChatContentPart[] {
  const [only] = parts;
  return parts.length === 1 && only.type === "text" && only.prompt_cache_breakpoint === undefined
    ? String(only.text)
    : parts;
}

function contentText(content: unknown): string {
  if (typeof content === "string") return content;
  return asArray(content)
    .map((part) => {
      if (!isRecord(part)) return "";
      if (part.type === "refusal") return asString(part.refusal) ?? "";
      if (part.type === "input_text" || part.type === "output_text" || part.type === "text") {
        return asString(part.text) ?? "";
      }
      return "";
    })
    .join("");
}

/** Input parts as chat's, each with its `prompt_cache_breakpoint` (chat's parts take it too). */
function userContent(content: unknown, breakpoints?: Breakpoints): ChatContentPart[] {
  if (typeof content === "string") return content === "" ? [] : [{ type: "text", text: content }];
  const parts: ChatContentPart[] = [];
  for (const part of asArray(content)) {
    if (!isRecord(part)) continue;
    const converted = chatPart(part);
    if (!converted) continue;
    const breakpoint = part.prompt_cache_breakpoint;
    const ttl = breakpoints?.ttl;
    if (breakpoints && isRecord(breakpoint))
      converted.prompt_cache_breakpoint =
        breakpoint.ttl === undefined && ttl ? { ...breakpoint, ttl } : breakpoint;
    parts.push(converted);
  }
  return parts;
}

function chatPart(part: JsonObject): ChatContentPart | undefined {
  if (part.type === "input_text" || part.type === "output_text" || part.type === "text") {
    const text = asString(part.text);
    return text ? { type: "text", text } : undefined;
  }
  if (part.type === "input_image") {
    const url = asString(part.image_url);
    if (!url) return undefined; // file_id images live in OpenAI's file store; nothing to forward.
    const detail = asString(part.detail);
    return { type: "image_url", image_url: { url, ...(detail ? { detail } : {}) } };
  }
  if (part.type === "input_file") {
    const fileData = asString(part.file_data);
    if (!fileData) return undefined;
    const filename = asString(part.filename);
    return { type: "file", file: { file_data: fileData, ...(filename ? { filename } : {}) } };
  }
  return undefined;
}

/** Tools the Responses API runs itself, so no chat-completions provider can serve them. */
const hostedTools = /^(web_search|file_search|code_interpreter|image_generation|mcp|computer)/;

/**
 * The Responses tools a chat-completions provider cannot run: hosted tools, and tools the client
 * runs but chat has no form for (local shell; custom tools unless the provider's chat API takes
 * them, `custom`). Namespace groups are not among them: their tools are flattened.
 */
export function toolsOutsideChat(req: ResponsesRequest, custom = false): string[] {
  const out: string[] = [];
  for (const tool of asArray(req.tools)) {
    if (!isRecord(tool)) continue;
    const type = asString(tool.type) ?? "";
    const inner = type === "namespace" ? asArray(tool.tools) : [];
    // A namespace groups functions and custom tools.
    if (!custom && inner.some((t) => isRecord(t) && t.type === "custom")) out.push("custom");
    for (const callable of type === "namespace" ? inner : [tool]) {
      const name = isRecord(callable) ? asString(callable.name) : undefined;
      if (isRecord(callable) && name && programOnly(callable))
        out.push(flatToolName(type === "namespace" ? asString(tool.name) : undefined, name));
    }
    if (type === "function" || type === "namespace" || (custom && type === "custom")) continue;
    out.push(type);
  }
  return [...new Set(out)];
}

/**
 * `moderation` (OpenAI's moderated completions: the input and output scored, or blocked, by a
 * moderation model, and the results returned): no other backend runs it, and answering without it
 * would hand back unmoderated text where blocking was asked for.
 */
export const moderationSentence =
  "`moderation` (moderated completions) is not available for this model: only OpenAI's API runs it; leave it out to be answered unmoderated.";

/**
 * The request as the bridge runs it: tools an `additional_tools` input item makes available join
 * the request's tools (chat declares its tools once, for the whole conversation), and the settings
 * of the last `configuration_update` item (reasoning effort, text format) apply where the request
 * sets none itself. Both items are then taken out of the input, which chat has no form for.
 */
/**
 * The discounted completion windows of `background_options` (openai 7.58's `2h` and `8h`) as
 * OpenAI refuses them, a sentence for the client, or undefined: they run queued only, so they need
 * `background: true` and no stream. Refused on every wire alike: a translated wire would answer at
 * once at the full price, where the client's own API refuses the request.
 */
export function backgroundWindowRefusal(body: Record<string, unknown>): string | undefined {
  const options = body.background_options;
  const window = isRecord(options) ? options.completion_window : undefined;
  if (window !== "2h" && window !== "8h") return undefined;
  if (body.background !== true)
    return `\`background_options.completion_window\` \`${window}\` needs \`background: true\`; OpenAI refuses it otherwise. Set background, or leave the window out (\`soonest\`).`;
  if (body.stream === true)
    return `\`background_options.completion_window\` \`${window}\` cannot be streamed; OpenAI refuses it with \`stream: true\`. Leave out stream, or the window.`;
  return undefined;
}

export function withInputSettings(req: ResponsesRequest): ResponsesRequest {
  if (!Array.isArray(req.input)) return req;
  const isSetting = (item: unknown) =>
    isRecord(item) && (item.type === "additional_tools" || item.type === "configuration_update");
  const loadsTools = (item: unknown) => isRecord(item) && item.type === "tool_search_output";
  if (!req.input.some((item) => isSetting(item) || loadsTools(item))) return req;
  const out: ResponsesRequest = { ...req, input: req.input.filter((item) => !isSetting(item)) };
  const tools = [...asArray(req.tools)];
  // A tool search's output names the tools it loaded, which the model may call from then on; one
  // the request declares already is declared once (every API refuses two tools of one name).
  const declared = new Set(tools.map(toolKey));
  let effort: unknown;
  let format: unknown;
  for (const item of req.input) {
    if (!isRecord(item)) continue;
    if (item.type === "additional_tools") tools.push(...asArray(item.tools));
    if (loadsTools(item))
      for (const tool of asArray(item.tools)) {
        if (declared.has(toolKey(tool))) continue;
        declared.add(toolKey(tool));
        tools.push(tool);
      }
    if (item.type === "configuration_update") {
      if (isRecord(item.reasoning) && item.reasoning.effort !== undefined)
        effort = item.reasoning.effort;
      if (isRecord(item.text) && item.text.format !== undefined) format = item.text.format;
    }
  }
  if (tools.length > 0) out.tools = tools as ResponsesRequest["tools"];
  const reasoning = isRecord(req.reasoning) ? req.reasoning : {};
  if (effort !== undefined && reasoning.effort == null)
    out.reasoning = { ...reasoning, effort } as ResponsesRequest["reasoning"];
  const text = isRecord(req.text) ? req.text : {};
  if (format !== undefined && text.format == null)
    out.text = { ...text, format } as ResponsesRequest["text"];
  return out;
}

/** A tool's type and name, which tell two declarations of one tool. */
function toolKey(tool: unknown): string {
  return isRecord(tool) ? `${String(tool.type)} ${String(tool.name ?? "")}` : "";
}

/**
 * The extras a Responses request may `include` (the openai SDK's `ResponseIncludable`): OpenAI's
 * API refuses any other value, and so does the bridge, rather than answer as if it were known.
 */
export const includable: readonly string[] = [
  "file_search_call.results",
  "web_search_call.results",
  "web_search_call.action.sources",
  "message.input_image.image_url",
  "computer_call_output.output.image_url",
  "code_interpreter_call.outputs",
  "reasoning.encrypted_content",
  "message.output_text.logprobs",
];

/**
 * What a Responses request asks for that the bridge to chat cannot carry, or names wrongly (an
 * `include` value no API has), as a sentence for the client, or undefined. A prompt template lives
 * in the client's OpenAI project: answering without its instructions and variables would be a
 * different answer given without a word.
 */
export function untranslatableToChat(req: ResponsesRequest, custom = false): string | undefined {
  if (req.prompt !== undefined && req.prompt !== null)
    return "`prompt` (a prompt template stored in an OpenAI project) is not available for this model: the gateway cannot read the template; send its instructions and input in the request instead.";
  if (req.moderation != null) return moderationSentence;
  if (isRecord(req.prompt_cache_options) && req.prompt_cache_options.prewarm === true)
    return "`prompt_cache_options.prewarm` is not available for this model: its provider has no way to prepare a prompt cache without generating an answer, which would be billed; leave out `prewarm`.";
  const unknown = asArray(req.include).filter((value) => !includable.includes(value as string));
  if (unknown.length > 0)
    return `Invalid value in \`include\`: ${unknown.map((value) => `'${String(value)}'`).join(", ")}. Supported values are: ${includable.map((value) => `'${value}'`).join(", ")}.`;
  if (asArray(req.input).some((item) => isRecord(item) && item.type === "compaction_trigger"))
    return "A `compaction_trigger` input item must be the final input item: it compacts the conversation before it.";
  // One the gateway made was opened into its summary before this (`dispatch/compaction.ts`); this
  // one is OpenAI's, the conversation it stands for encrypted for OpenAI's API: without it the
  // model would answer the turns after it alone.
  if (asArray(req.input).some((item) => isRecord(item) && item.type === "compaction"))
    return "A `compaction` input item made by OpenAI's API is not available for this model: it holds the earlier conversation encrypted for OpenAI's API, which the gateway cannot read; send that conversation's items instead, compact it on this model (POST /v1/responses/compact), or continue with `previous_response_id` or `conversation`.";
  return (
    clientToolItemSentence(req.input, custom) ??
    hostedItemSentence(req.input) ??
    storedInputSentence(req.input)
  );
}

/**
 * Hosted tools' items the bridge cannot carry as text: an `image_generation_call`, whose image the
 * model made and would not see again (chat's assistant turn carries no image), and an
 * `mcp_approval_response`, which asks OpenAI's API to run the approved MCP call.
 */
function hostedItemSentence(input: unknown): string | undefined {
  for (const item of asArray(input)) {
    const type = isRecord(item) ? item.type : undefined;
    if (type === "image_generation_call")
      return "An `image_generation_call` input item is not available for this model: its image would not reach the model (an assistant turn carries no image); send the image as an `input_image` in a user message instead.";
    if (type === "mcp_approval_response")
      return "An `mcp_approval_response` input item is not available for this model: only OpenAI's Responses API runs the MCP call it approves; leave it out.";
  }
  return undefined;
}

/**
 * Calls of tools the client runs that chat has no form for (`shell`, `local_shell`,
 * `apply_patch`, `computer`, and `custom` unless the provider's chat API takes custom tools), and
 * their outputs: the tools are left out, and without these items the model would not see what was
 * called or what came back.
 */
const clientToolItems = /^(custom_tool|shell|local_shell|apply_patch|computer)_call(_output)?$/;

function clientToolItemSentence(input: unknown, custom: boolean): string | undefined {
  for (const item of asArray(input)) {
    const type = isRecord(item) ? asString(item.type) : undefined;
    if (custom && type?.startsWith("custom_tool_call")) continue;
    if (type && clientToolItems.test(type))
      return `A \`${type}\` input item is not available for this model: its tool has no form on this model's provider, so the model would not see the call or its output; send them as message text, or declare the tool as a \`function\`.`;
  }
  return undefined;
}

/**
 * An image or file the input names without its content (a `file_id` in an OpenAI project's file
 * store, a file's URL): the model would answer without seeing it.
 */
function storedInputSentence(input: unknown): string | undefined {
  for (const item of asArray(input)) {
    if (!isRecord(item)) continue;
    const parts = [...asArray(item.content), ...asArray(item.output)];
    for (const part of parts) {
      if (!isRecord(part)) continue;
      if (part.type === "input_image" && !asString(part.image_url))
        return "An `input_image` given by `file_id` is not available for this model: the gateway has no OpenAI file store to read it from; send it as `image_url` (a data URL or an http(s) URL).";
      if (part.type === "input_file" && !asString(part.file_data))
        return "An `input_file` given by `file_id` or `file_url` is not available for this model; send its content as `file_data` (a base64 data URL) with its `filename`.";
    }
  }
  return undefined;
}

/**
 * What a Responses request asked the API to do with an input over the context window that did not
 * happen, as a sentence for the client whose input a backend refused as too long, or undefined. On
 * OpenAI's API `truncation: "auto"` drops the conversation's earliest items once it is over the
 * window, which the bridge does not do; a `context_management` compaction replaces them by a
 * summary once it passes its `compact_threshold`, which the gateway does too (docs/http-api.md),
 * so an input over the window it did not compact was below the threshold.
 */
export function contextStrategySentence(req: ResponsesRequest): string | undefined {
  const asked = [
    ...(req.truncation === "auto"
      ? [
          '`truncation: "auto"` (dropping the earliest items) is not available for this model: the gateway sends the whole conversation to its provider',
        ]
      : []),
    ...(asArray(req.context_management).length > 0
      ? [
          "`context_management` compacts the conversation only once its input passes `compact_threshold`: set one below the model's context window",
        ]
      : []),
  ];
  if (asked.length === 0) return undefined;
  return `The request exceeds the model's maximum context window; ${asked.join("; ")}. Send a shorter conversation, or start a new one.`;
}

/** The hosted tools among `toolsOutsideChat`, named for the refusal sentence. */
export function hostedToolSentence(tools: string[]): string {
  const hosted = tools.filter((t) => hostedTools.test(t));
  return hosted.length > 0
    ? `Hosted tools (${hosted.join(", ")}) run only on OpenAI's Responses API; this model cannot use them.`
    : `Tools of type ${tools.join(", ")} are not available for this model.`;
}

/**
 * A namespace's function as one chat tool: the model calls it by this name, and the answer names
 * the namespace and function again, as the client declared them.
 */
function flatToolName(namespace: string | undefined, name: string): string {
  if (!namespace) return name;
  return namespace.endsWith("_") ? `${namespace}${name}` : `${namespace}__${name}`;
}

export type NamespacedName = { namespace: string; name: string };

/** Flat chat names of a request's namespaced functions; undefined when it declares no namespace. */
function namespacedTools(
  req: ResponsesRequest | undefined,
): Map<string, NamespacedName> | undefined {
  let names: Map<string, NamespacedName> | undefined;
  for (const tool of asArray(req?.tools)) {
    if (!isRecord(tool) || tool.type !== "namespace") continue;
    const namespace = asString(tool.name);
    if (!namespace) continue;
    for (const inner of asArray(tool.tools)) {
      const name = isRecord(inner) ? asString(inner.name) : undefined;
      if (!name) continue;
      names ??= new Map();
      names.set(flatToolName(namespace, name), { namespace, name });
    }
  }
  return names;
}

/** A function call item's `name` (and `namespace`) for the chat tool name the model called. */
function callName(
  names: Map<string, NamespacedName> | undefined,
  flat: string,
): { name: string; namespace?: string } {
  return names?.get(flat) ?? { name: flat };
}

/** `custom`: the provider's chat API takes custom tools (`ChatRequestOptions.customTools`). */
function convertTools(tools: unknown[], custom: boolean): ChatTool[] {
  const out: ChatTool[] = [];
  const convert = (tool: JsonObject, namespace: string | undefined) =>
    programOnly(tool)
      ? undefined
      : (functionTool(tool, namespace) ?? (custom ? customTool(tool, namespace) : undefined));
  for (const tool of tools) {
    if (!isRecord(tool)) continue;
    if (tool.type === "namespace") {
      const namespace = asString(tool.name);
      for (const inner of asArray(tool.tools)) {
        const converted = isRecord(inner) ? convert(inner, namespace) : undefined;
        if (converted) out.push(converted);
      }
      continue;
    }
    const converted = convert(tool, undefined);
    if (converted) out.push(converted);
  }
  return out;
}

/**
 * A Responses `custom` tool as chat's: its name, description and input format under `custom`, a
 * grammar's definition and syntax under `grammar`.
 */
function customTool(tool: JsonObject, namespace: string | undefined): ChatTool | undefined {
  const name = asString(tool.name);
  if (tool.type !== "custom" || !name) return undefined;
  const custom: JsonObject = { name: flatToolName(namespace, name) };
  const description = asString(tool.description);
  if (description) custom.description = description;
  const format = tool.format;
  if (isRecord(format) && format.type === "grammar")
    custom.format = {
      type: "grammar",
      grammar: { definition: format.definition, syntax: format.syntax },
    };
  else if (isRecord(format) && format.type === "text") custom.format = { type: "text" };
  return { type: "custom", custom };
}

function functionTool(tool: JsonObject, namespace: string | undefined): ChatTool | undefined {
  // Hosted tools (web_search, file_search, computer_use...) cannot run elsewhere.
  if (tool.type !== "function") return undefined;
  const name = asString(tool.name);
  if (!name) return undefined;
  const fn: { name: string; description?: string; parameters?: JsonObject; strict?: boolean } = {
    name: flatToolName(namespace, name),
  };
  const description = asString(tool.description);
  if (description) fn.description = description;
  if (isRecord(tool.parameters)) fn.parameters = tool.parameters;
  if (typeof tool.strict === "boolean") fn.strict = tool.strict;
  return { type: "function", function: fn };
}

/**
 * A Responses tool choice as chat's: a named function, or (`custom`: toward a chat API that takes
 * them) a named custom tool, under its type. Undefined for a choice chat has no form for (a
 * hosted tool's), which `droppedChoiceSentence` refuses.
 */
function convertToolChoice(choice: unknown, custom: boolean): ChatToolChoice | undefined {
  if (choice === "auto" || choice === "none" || choice === "required") return choice;
  if (isRecord(choice)) {
    const named = namedChoice(choice, custom);
    if (named) return named;
  }
  // Responses lists the allowed tools flat ({type, name}); chat nests each tool's name.
  if (isRecord(choice) && choice.type === "allowed_tools") {
    const tools = asArray(choice.tools).flatMap((tool) => {
      const named = isRecord(tool) ? namedChoice(tool, custom) : undefined;
      return named ? [named] : [];
    });
    return {
      type: "allowed_tools",
      allowed_tools: { mode: choice.mode === "required" ? "required" : "auto", tools },
    };
  }
  return undefined;
}

/** `{type: "function" | "custom", name}` as chat names the tool, under its type. */
function namedChoice(choice: JsonObject, custom: boolean): ChatToolChoice | undefined {
  const name = asString(choice.name);
  if (!name) return undefined;
  if (choice.type === "function") return { type: "function", function: { name } };
  if (custom && choice.type === "custom") return { type: "custom", custom: { name } };
  return undefined;
}

// ---------------------------------------------------------------------------
// Response: chat -> responses
// ---------------------------------------------------------------------------

export function responsesUsage(usage: Usage, reasoningTokens = 0): ResponsesUsage {
  return {
    input_tokens: usage.input_tokens,
    // Both are required by OpenAI's schema: a client generated from it (Rust, Java) refuses the
    // whole Response without them.
    input_tokens_details: {
      cached_tokens: usage.cache_read_input_tokens ?? 0,
      cache_write_tokens: usage.cache_creation_input_tokens ?? 0,
    },
    output_tokens: usage.output_tokens,
    output_tokens_details: { reasoning_tokens: reasoningTokens },
    total_tokens: usage.input_tokens + usage.output_tokens,
  };
}

/**
 * The item an answer cut short (by its output limit or a content filter) was cut in: the last, which
 * the Responses API marks `incomplete` as it does the response. Items before it were whole.
 */
function markCut(item: ResponsesOutputItem | undefined): void {
  if (item && "status" in item) item.status = "incomplete";
}

function statusFor(finishReason: unknown): {
  status: ResponsesStatus;
  incomplete_details: ResponseObject["incomplete_details"];
} {
  if (finishReason === "length") {
    return { status: "incomplete", incomplete_details: { reason: "max_output_tokens" } };
  }
  if (finishReason === "content_filter") {
    return { status: "incomplete", incomplete_details: { reason: "content_filter" } };
  }
  return { status: "completed", incomplete_details: null };
}

/**
 * The request-echo part of a Response object, as the real API returns it. `usage` and `user`
 * are left out until they have a value: OpenAI's schema types them as an object and a string.
 */
export function baseResponse(
  req: ResponsesRequest | undefined,
  clientModel: string,
  id: string,
  createdAt: number,
): ResponseObject {
  const r: JsonObject = isRecord(req) ? req : {};
  const format = isRecord(r.text) && isRecord(r.text.format) ? r.text.format : { type: "text" };
  const reasoning = isRecord(r.reasoning) ? r.reasoning : {};
  const metadata = isRecord(r.metadata) ? r.metadata : {};
  const user = asString(r.user);
  return {
    id,
    object: "response",
    created_at: createdAt,
    status: "in_progress",
    error: null,
    incomplete_details: null,
    instructions: asString(r.instructions) ?? null,
    max_output_tokens: asNumber(r.max_output_tokens) ?? null,
    model: clientModel,
    output: [],
    parallel_tool_calls: typeof r.parallel_tool_calls === "boolean" ? r.parallel_tool_calls : true,
    previous_response_id: asString(r.previous_response_id) ?? null,
    reasoning: {
      effort: asString(reasoning.effort) ?? null,
      summary: asString(reasoning.summary) ?? null,
    },
    // The Responses API stores a response unless told not to.
    store: r.store !== false,
    temperature: asNumber(r.temperature) ?? null,
    text: { format: format as ResponsesTextFormat },
    tool_choice: (r.tool_choice as ResponsesToolChoice | undefined) ?? "auto",
    tools: asArray(r.tools).filter(isRecord) as ResponseObject["tools"],
    top_p: asNumber(r.top_p) ?? null,
    truncation: r.truncation === "auto" ? "auto" : "disabled",
    ...(user ? { user } : {}),
    metadata: metadata as { [key: string]: string },
    // Which of OpenAI's domain access programs served the request: none, on another provider.
    access_programs: null,
    ...conversationEcho(r.conversation),
  };
}

function outputTextPart(text: string, annotations: unknown[] = [], logprobs: LogProb[] = []) {
  return { type: "output_text" as const, text, annotations, logprobs };
}

/** A token's log probability as an output_text part lists it (chat's, with bytes always a list). */
export type LogProb = {
  token: string;
  logprob: number;
  bytes: number[];
  top_logprobs: { token: string; logprob: number; bytes: number[] }[];
};

/** Chat's `logprobs.content` of a choice or chunk, as the Responses API lists them. */
function chatLogprobs(logprobs: unknown): LogProb[] {
  const out: LogProb[] = [];
  if (!isRecord(logprobs)) return out;
  const entry = (value: JsonObject) => ({
    token: asString(value.token) ?? "",
    logprob: asNumber(value.logprob) ?? 0,
    bytes: asArray(value.bytes).filter((b): b is number => typeof b === "number"),
  });
  for (const token of asArray(logprobs.content)) {
    if (!isRecord(token)) continue;
    out.push({
      ...entry(token),
      top_logprobs: asArray(token.top_logprobs).filter(isRecord).map(entry),
    });
  }
  return out;
}

/** The shorter form a text delta event carries: no bytes. */
export function deltaLogprobs(logprobs: LogProb[]) {
  return logprobs.map(({ token, logprob, top_logprobs }) => ({
    token,
    logprob,
    top_logprobs: top_logprobs.map((top) => ({ token: top.token, logprob: top.logprob })),
  }));
}

/** The conversation a request named, as a Response carries it. */
function conversationEcho(conversation: unknown): Pick<ResponseObject, "conversation"> {
  const id = isRecord(conversation) ? asString(conversation.id) : asString(conversation);
  return id ? { conversation: { id } } : {};
}

/** Chat's `url_citation` annotations (a web search's sources) as the Responses API lists them. */
function urlCitations(annotations: unknown): unknown[] {
  const out: unknown[] = [];
  for (const annotation of asArray(annotations)) {
    if (!isRecord(annotation) || !isRecord(annotation.url_citation)) continue;
    out.push({ type: "url_citation", ...annotation.url_citation });
  }
  return out;
}

/**
 * Whether the request asked for a reasoning summary (`reasoning.summary`, or the older
 * `generate_summary`): only then does the model's thinking come back, as a reasoning item.
 */
export function wantsSummary(req: ResponsesRequest | undefined): boolean {
  const reasoning = req?.reasoning;
  if (!isRecord(reasoning)) return false;
  return Boolean(asString(reasoning.summary) ?? asString(reasoning.generate_summary));
}

/** The thinking of a chat message or delta: `reasoning_content`, or `reasoning` as some servers name it. */
function chatReasoning(from: JsonObject): string | undefined {
  return asString(from.reasoning_content) ?? asString(from.reasoning);
}

/**
 * The tier a chat answer says served it, where it is one OpenAI's Responses API names (an
 * OpenAI-compatible server may name its own, which a client generated from OpenAI's schema refuses).
 */
function responsesTier(tier: unknown): string | undefined {
  const name = asString(tier);
  return name && ["auto", "default", "flex", "scale", "priority"].includes(name) ? name : undefined;
}

/**
 * Whether the request included `reasoning.encrypted_content`: only then does a reasoning item
 * carry the signed reasoning, for the client to send back (`encrypted-reasoning.ts`).
 */
function wantsEncrypted(req: ResponsesRequest | undefined): boolean {
  return asArray(req?.include).includes("reasoning.encrypted_content");
}

/** A reasoning item; its summary is empty while it streams, its one part when it is done. */
function reasoningItem(id: string, text?: string, encrypted?: string): ResponsesOutputReasoning {
  return {
    type: "reasoning",
    id,
    summary: text === undefined ? [] : [summaryPart(text)],
    ...(encrypted === undefined ? {} : { encrypted_content: encrypted }),
  };
}

function summaryPart(text: string) {
  return { type: "summary_text" as const, text };
}

/**
 * Where the signed reasoning the client did not include goes: the stored response keeps it for
 * its chain (`ResponseTurn.keepSigned`).
 */
export type KeepSigned = (responseId: string, encrypted: string) => void;

/**
 * A chat answer's signed reasoning by where it goes: ahead of the message and the calls, or after
 * the call it came after (`after_tool_call_id`: the model thought between its calls). `interleaved`:
 * some goes after a call, so each item's summary is its own details' text rather than the whole
 * `reasoning_content`.
 */
function placedReasoning(message: JsonObject): {
  ahead: JsonObject[];
  after: Map<string, JsonObject[]>;
  interleaved: boolean;
} {
  const callIds = new Set(
    asArray(message.tool_calls).map((call) => (isRecord(call) ? asString(call.id) : undefined)),
  );
  const ahead: JsonObject[] = [];
  const after = new Map<string, JsonObject[]>();
  for (const detail of asArray(message.reasoning_details)) {
    if (!isRecord(detail)) continue;
    const callId = asString(detail.after_tool_call_id);
    if (callId === undefined || !callIds.has(callId)) {
      ahead.push(detail);
      continue;
    }
    after.set(callId, [...(after.get(callId) ?? []), detail]);
  }
  return { ahead, after, interleaved: after.size > 0 };
}

/** The thinking text of reasoning details (redacted thinking has none). */
function detailsText(details: JsonObject[]): string {
  return details
    .map((detail) => (detail.type === "reasoning.text" ? (asString(detail.text) ?? "") : ""))
    .join("");
}

export function chatResponseToResponses(
  resp: ChatCompletionResponse,
  clientModel: string,
  req?: ResponsesRequest,
  keepSigned?: KeepSigned,
  compacted?: CompactedTurn,
): ResponseObject {
  // Created when the chat answer was: the provider's time, or the kit's clock for the mock.
  const createdAt = asNumber(resp.created) ?? nowSeconds();
  const response = baseResponse(req, clientModel, randomId("resp_"), createdAt);
  // The compaction came before the answer, as OpenAI's output lists it.
  if (compacted) response.output.push(clone(compacted.item) as unknown as ResponsesOutputItem);
  const tier = responsesTier(resp.service_tier);
  if (tier) response.service_tier = tier;
  const choice = asArray(resp.choices).find(isRecord) ?? {};
  const message = isRecord(choice.message) ? choice.message : {};

  // The thinking first, as the Responses API lists it: before the message and the calls; what the
  // model thought between its calls (interleaved thinking) after the call it followed.
  const reasoning = placedReasoning(message);
  const summary = (details: JsonObject[] | undefined) =>
    !wantsSummary(req)
      ? undefined
      : (details ? detailsText(details) : chatReasoning(message)) || undefined;
  const pushReasoning = (details: JsonObject[], text: string | undefined) => {
    const encrypted = wantsEncrypted(req) ? encodeReasoning(details) : undefined;
    if (text !== undefined || encrypted !== undefined)
      response.output.push(reasoningItem(randomId("rs_"), text, encrypted));
  };
  pushReasoning(reasoning.ahead, summary(reasoning.interleaved ? reasoning.ahead : undefined));
  const signed =
    keepSigned && !wantsEncrypted(req) ? encodeReasoning(message.reasoning_details) : undefined;
  if (signed !== undefined) keepSigned?.(response.id, signed);

  const text = typeof message.content === "string" ? message.content : contentText(message.content);
  const refusal = asString(message.refusal);
  if (text || refusal) {
    const item: ResponsesOutputMessage = {
      type: "message",
      id: randomId("msg_"),
      status: "completed",
      role: "assistant",
      content: text
        ? [outputTextPart(text, urlCitations(message.annotations), chatLogprobs(choice.logprobs))]
        : [{ type: "refusal", refusal: refusal ?? "" }],
    };
    response.output.push(item);
  }
  const names = namespacedTools(req);
  for (const call of asArray(message.tool_calls)) {
    if (!isRecord(call)) continue;
    const callId = asString(call.id) || randomId("call_");
    if (isRecord(call.custom)) {
      response.output.push({
        type: "custom_tool_call",
        id: randomId("ctc_"),
        call_id: callId,
        ...callName(names, asString(call.custom.name) ?? ""),
        input: asString(call.custom.input) ?? "",
      });
      continue;
    }
    if (!isRecord(call.function)) continue;
    response.output.push({
      type: "function_call",
      id: randomId("fc_"),
      call_id: callId,
      ...callName(names, asString(call.function.name) ?? ""),
      arguments: asString(call.function.arguments) ?? "{}",
      status: "completed",
    });
    const after = reasoning.after.get(callId);
    if (after) pushReasoning(after, summary(after));
  }

  const { status, incomplete_details } = statusFor(choice.finish_reason);
  response.status = status;
  response.incomplete_details = incomplete_details;
  if (status === "incomplete") markCut(response.output.at(-1));
  const rawUsage: unknown = resp.usage;
  const details =
    isRecord(rawUsage) && isRecord(rawUsage.completion_tokens_details)
      ? rawUsage.completion_tokens_details
      : {};
  const used = usageFromChat(resp);
  response.usage = responsesUsage(
    compacted ? sumUsage(compacted.usage, used) : used,
    asNumber(details.reasoning_tokens) ?? 0,
  );
  return response;
}

// ---------------------------------------------------------------------------
// Stream: chat chunks -> responses SSE events
// ---------------------------------------------------------------------------

type OpenText = {
  outputIndex: number;
  item: ResponsesOutputMessage;
  text: string;
  logprobs: LogProb[];
  annotations: unknown[];
  /** The annotations already added, by their JSON, so a repeated list adds only what is new. */
  seen: Set<string>;
};
type OpenReasoning = {
  outputIndex: number;
  item: ResponsesOutputReasoning;
  text: string;
  /** Whether its summary part was added (some thinking came as text). */
  summarized: boolean;
  /** The signed reasoning that came with it, for its `encrypted_content`. */
  details: unknown[];
};
/** A call being streamed: a function's (JSON arguments) or a custom tool's (free-form input). */
type ToolItem = {
  outputIndex?: number;
  item: ResponsesOutputFunctionCall | ResponsesOutputCustomToolCall;
  pendingArgs: string;
  done: boolean;
};

/**
 * Consumes chat chunks (parsed JSON, without `[DONE]`) and yields Responses SSE events.
 * Call `finish()` when the upstream ends; the final `response.completed` carries the
 * whole output, so clients that only read it are correct even for unusual upstreams.
 */
export class ChatStreamToResponses {
  private readonly response: ResponseObject;
  private sequence = 0;
  private started = false;
  private ended = false;
  private failed = false;
  private text: OpenText | undefined;
  /** Whether the request asked for a reasoning summary: thinking is dropped otherwise. */
  private readonly summary: boolean;
  /** Whether the request included the signed reasoning (`reasoning.encrypted_content`). */
  private readonly encrypted: boolean;
  /** The signed reasoning the client did not include, for `keepSigned` once the answer is whole. */
  private readonly unshown: unknown[] = [];
  private reasoning: OpenReasoning | undefined;
  private readonly tools = new Map<number, ToolItem>();
  /** The call id of the last call so far: reasoning after it came between the calls. */
  private lastCallId: string | undefined;
  private finishReason: unknown = null;
  /** Where an answer cut short was cut: that item closes `incomplete`. */
  private cutItem: ResponsesOutputItem | undefined;
  private reasoningTokens = 0;
  private current: Usage = emptyUsage();
  private readonly names: Map<string, NamespacedName> | undefined;

  /**
   * `billed`: the usage the stream is billed, which `response.completed` reports (the provider's,
   * with what it left out estimated), rather than only what the provider reported.
   */
  constructor(
    clientModel: string,
    req?: ResponsesRequest,
    private readonly keepSigned?: KeepSigned,
    private readonly billed?: () => Usage,
    private readonly compacted?: CompactedTurn,
  ) {
    this.response = baseResponse(req, clientModel, randomId("resp_"), nowSeconds());
    this.names = namespacedTools(req);
    this.summary = wantsSummary(req);
    this.encrypted = wantsEncrypted(req);
  }

  /** The id of the response being streamed (e.g. for logs). */
  get responseId(): string {
    return this.response.id;
  }

  push(chunk: unknown): ResponsesSSEEvent[] {
    if (this.ended || !isRecord(chunk)) return [];
    if (isRecord(chunk.error)) {
      return this.fail(asString(chunk.error.message) ?? "upstream stream error");
    }
    // Created when the chat answer was, as a whole answer's (`chatResponseToResponses`).
    const created = asNumber(chunk.created);
    if (!this.started && created !== undefined) this.response.created_at = created;
    const tier = responsesTier(chunk.service_tier);
    if (tier) this.response.service_tier = tier;
    const out = this.start();
    if (isRecord(chunk.usage)) {
      this.current = usageFromChat(chunk);
      const details = chunk.usage.completion_tokens_details;
      if (isRecord(details)) this.reasoningTokens = asNumber(details.reasoning_tokens) ?? 0;
    }
    const choice = asArray(chunk.choices).find((c) => isRecord(c) && (c.index ?? 0) === 0);
    if (!isRecord(choice)) return out;
    const delta = isRecord(choice.delta) ? choice.delta : {};

    if (this.summary) {
      const reasoning = chatReasoning(delta);
      if (reasoning) out.push(...this.appendReasoning(reasoning));
    }
    // A detail comes whole, once its signature is (`MessagesStreamToChat`), or in pieces under its
    // index (OpenRouter), put together as it is encoded. One after a call came after it.
    const details = asArray(delta.reasoning_details).map((detail) =>
      isRecord(detail) && this.lastCallId !== undefined && detail.after_tool_call_id === undefined
        ? { ...detail, after_tool_call_id: this.lastCallId }
        : detail,
    );
    if (this.encrypted && details.length > 0) {
      out.push(...this.openReasoning());
      this.reasoning?.details.push(...details);
    } else if (this.keepSigned) this.unshown.push(...details);
    const text = (asString(delta.content) ?? "") + (asString(delta.refusal) ?? "");
    if (text) out.push(...this.appendText(text, chatLogprobs(choice.logprobs)));
    if (delta.annotations !== undefined && this.text)
      out.push(...this.addAnnotations(this.text, delta.annotations));
    for (const call of asArray(delta.tool_calls)) {
      if (isRecord(call)) out.push(...this.appendToolCall(call));
    }
    if (choice.finish_reason != null) this.finishReason = choice.finish_reason;
    return out;
  }

  /** Closes every open item and emits `response.completed` (or `.incomplete`). Idempotent. */
  finish(): ResponsesSSEEvent[] {
    if (this.ended) return [];
    const out = this.start();
    const { status, incomplete_details } = statusFor(this.finishReason);
    // The item the answer was cut in is the last of the output once every call is in it.
    const unopened = [...this.tools.values()].filter((tool) => tool.outputIndex === undefined);
    if (status === "incomplete")
      this.cutItem = unopened.at(-1)?.item ?? this.response.output.at(-1);
    out.push(...this.closeReasoning(), ...this.closeText());
    for (const tool of this.tools.values()) {
      if (tool.outputIndex === undefined) out.push(...this.openTool(tool));
      out.push(...this.closeTool(tool));
    }
    this.ended = true;
    this.response.status = status;
    this.response.incomplete_details = incomplete_details;
    this.response.usage = responsesUsage(
      this.withCompaction(this.billed?.() ?? this.current),
      this.reasoningTokens,
    );
    const signed = encodeReasoning(this.unshown);
    if (signed !== undefined) this.keepSigned?.(this.response.id, signed);
    const type = status === "incomplete" ? "response.incomplete" : "response.completed";
    out.push(this.emit(type, { response: clone(this.response) }));
    return out;
  }

  /**
   * Ends the stream as failed: an `error` event, then `response.failed` with the Response so far,
   * numbered on from the last event sent. Also after `finish()`, whose closing event the route
   * withholds until the answer's charge is recorded. Its usage is `billed` (what the stream is
   * charged), else what `finish()` would report.
   */
  fail(message: string, code = "upstream_error", billed?: Usage): ResponsesSSEEvent[] {
    if (this.failed) return [];
    this.failed = true;
    const out = this.start();
    this.ended = true;
    this.response.usage = responsesUsage(
      billed ?? this.withCompaction(this.billed?.() ?? this.current),
      this.reasoningTokens,
    );
    const events = failedEvents(this.response, this.sequence, message, code);
    this.sequence += events.length;
    out.push(...events);
    return out;
  }

  usage(): Usage {
    return { ...this.current };
  }

  private emit(type: string, fields: JsonObject): ResponsesSSEEvent {
    return { event: type, data: { type, ...fields, sequence_number: this.sequence++ } };
  }

  private start(): ResponsesSSEEvent[] {
    if (this.started) return [];
    this.started = true;
    const out = [
      this.emit("response.created", { response: clone(this.response) }),
      this.emit("response.in_progress", { response: clone(this.response) }),
    ];
    if (this.compacted) {
      const item = this.compacted.item as unknown as ResponsesOutputItem;
      this.response.output.push(clone(item));
      out.push(...compactionEvents(item, 0, (type, fields) => this.emit(type, fields)));
    }
    return out;
  }

  /** A turn's usage: its compaction's (done before the answer began) and the answer's. */
  private withCompaction(answer: Usage): Usage {
    return this.compacted ? sumUsage(this.compacted.usage, answer) : answer;
  }

  /**
   * The reasoning item, opened unless it is. Items are sequential: whatever is open closes first,
   * and a text or call after the thinking is the next item.
   */
  private openReasoning(): ResponsesSSEEvent[] {
    if (this.reasoning) return [];
    const out = this.closeText();
    for (const tool of this.tools.values()) out.push(...this.closeTool(tool));
    const item = reasoningItem(randomId("rs_"));
    const outputIndex = this.response.output.length;
    this.response.output.push(item);
    this.reasoning = { outputIndex, item, text: "", summarized: false, details: [] };
    out.push(
      this.emit("response.output_item.added", { output_index: outputIndex, item: clone(item) }),
    );
    return out;
  }

  /** Thinking as the reasoning item's one summary part. */
  private appendReasoning(delta: string): ResponsesSSEEvent[] {
    const out = this.openReasoning();
    const open = this.reasoning;
    if (!open) return out;
    if (!open.summarized) {
      open.summarized = true;
      out.push(
        this.emit("response.reasoning_summary_part.added", {
          item_id: open.item.id,
          output_index: open.outputIndex,
          summary_index: 0,
          part: summaryPart(""),
        }),
      );
    }
    open.text += delta;
    out.push(
      this.emit("response.reasoning_summary_text.delta", {
        item_id: open.item.id,
        output_index: open.outputIndex,
        summary_index: 0,
        delta,
      }),
    );
    return out;
  }

  private closeReasoning(): ResponsesSSEEvent[] {
    const open = this.reasoning;
    if (!open) return [];
    this.reasoning = undefined;
    const out: ResponsesSSEEvent[] = [];
    if (open.summarized) {
      open.item.summary = [summaryPart(open.text)];
      const ids = { item_id: open.item.id, output_index: open.outputIndex, summary_index: 0 };
      out.push(
        this.emit("response.reasoning_summary_text.done", { ...ids, text: open.text }),
        this.emit("response.reasoning_summary_part.done", { ...ids, part: summaryPart(open.text) }),
      );
    }
    const encrypted = encodeReasoning(open.details);
    if (encrypted !== undefined) open.item.encrypted_content = encrypted;
    out.push(
      this.emit("response.output_item.done", {
        output_index: open.outputIndex,
        item: clone(open.item),
      }),
    );
    return out;
  }

  private appendText(delta: string, logprobs: LogProb[]): ResponsesSSEEvent[] {
    const out: ResponsesSSEEvent[] = [];
    if (!this.text) {
      out.push(...this.closeReasoning());
      const item: ResponsesOutputMessage = {
        type: "message",
        id: randomId("msg_"),
        status: "in_progress",
        role: "assistant",
        content: [],
      };
      const outputIndex = this.response.output.length;
      this.response.output.push(item);
      this.text = { outputIndex, item, text: "", logprobs: [], annotations: [], seen: new Set() };
      out.push(
        this.emit("response.output_item.added", { output_index: outputIndex, item: clone(item) }),
        this.emit("response.content_part.added", {
          item_id: item.id,
          output_index: outputIndex,
          content_index: 0,
          part: outputTextPart(""),
        }),
      );
    }
    const open = this.text;
    open.text += delta;
    open.logprobs.push(...logprobs);
    out.push(
      this.emit("response.output_text.delta", {
        item_id: open.item.id,
        output_index: open.outputIndex,
        content_index: 0,
        delta,
        logprobs: deltaLogprobs(logprobs),
      }),
    );
    return out;
  }

  /** Chat's `url_citation` annotations on the open text, each new one added as its own event. */
  private addAnnotations(open: OpenText, annotations: unknown): ResponsesSSEEvent[] {
    const out: ResponsesSSEEvent[] = [];
    for (const annotation of urlCitations(annotations)) {
      const key = JSON.stringify(annotation);
      if (open.seen.has(key)) continue;
      open.seen.add(key);
      out.push(
        this.emit("response.output_text.annotation.added", {
          item_id: open.item.id,
          output_index: open.outputIndex,
          content_index: 0,
          annotation_index: open.annotations.length,
          annotation: annotation as JsonObject,
        }),
      );
      open.annotations.push(annotation);
    }
    return out;
  }

  private closeText(): ResponsesSSEEvent[] {
    const open = this.text;
    if (!open) return [];
    this.text = undefined;
    open.item.status = this.closedStatus(open.item);
    const part = outputTextPart(open.text, open.annotations, open.logprobs);
    open.item.content = [part];
    const ids = { item_id: open.item.id, output_index: open.outputIndex, content_index: 0 };
    return [
      this.emit("response.output_text.done", {
        ...ids,
        text: open.text,
        logprobs: deltaLogprobs(open.logprobs),
      }),
      this.emit("response.content_part.done", { ...ids, part: clone(part) }),
      this.emit("response.output_item.done", {
        output_index: open.outputIndex,
        item: clone(open.item),
      }),
    ];
  }

  /** An item's status as it closes: `incomplete` where an answer cut short was cut. */
  private closedStatus(item: ResponsesOutputItem): "completed" | "incomplete" {
    return item === this.cutItem ? "incomplete" : "completed";
  }

  private appendToolCall(call: JsonObject): ResponsesSSEEvent[] {
    const key = asNumber(call.index) ?? 0;
    // A custom tool's call carries its name and input pieces under `custom`.
    const custom = isRecord(call.custom) ? call.custom : undefined;
    const fn = custom ?? (isRecord(call.function) ? call.function : {});
    const id = asString(call.id);
    let tool = this.tools.get(key);
    // A new id at a known index is a new call (some servers send every call at index 0).
    if (
      tool &&
      id &&
      tool.item.call_id !== id &&
      (tool.outputIndex !== undefined || tool.pendingArgs)
    ) {
      this.tools.set(-1 - this.tools.size, tool);
      tool = undefined;
    }
    if (!tool) {
      const callId = id || randomId("call_");
      tool = {
        item:
          custom || call.type === "custom"
            ? {
                type: "custom_tool_call",
                id: randomId("ctc_"),
                call_id: callId,
                name: "",
                input: "",
              }
            : {
                type: "function_call",
                id: randomId("fc_"),
                call_id: callId,
                name: "",
                arguments: "",
                status: "in_progress",
              },
        pendingArgs: "",
        done: false,
      };
      this.tools.set(key, tool);
      this.lastCallId = callId;
    }
    const name = asString(fn.name);
    if (name && tool.outputIndex === undefined)
      Object.assign(tool.item, callName(this.names, name));

    const out: ResponsesSSEEvent[] = [];
    if (tool.outputIndex === undefined && tool.item.name) out.push(...this.openTool(tool));
    const args = asString(custom ? custom.input : fn.arguments);
    if (args) {
      if (tool.outputIndex === undefined) tool.pendingArgs += args;
      else out.push(this.argumentsDelta(tool, args));
    }
    return out;
  }

  private openTool(tool: ToolItem): ResponsesSSEEvent[] {
    // Items are sequential in the real API: the thinking, the text item and any earlier call
    // close first.
    const out = [...this.closeReasoning(), ...this.closeText()];
    for (const other of this.tools.values()) {
      if (other !== tool && other.outputIndex !== undefined) out.push(...this.closeTool(other));
    }
    const outputIndex = this.response.output.length;
    tool.outputIndex = outputIndex;
    this.response.output.push(tool.item);
    out.push(
      this.emit("response.output_item.added", {
        output_index: outputIndex,
        item: clone(tool.item),
      }),
    );
    if (tool.pendingArgs) {
      out.push(this.argumentsDelta(tool, tool.pendingArgs));
      tool.pendingArgs = "";
    }
    return out;
  }

  /** A piece of a call's arguments (a custom tool's input), as its item's delta event. */
  private argumentsDelta(tool: ToolItem, delta: string): ResponsesSSEEvent {
    const ids = { item_id: tool.item.id, output_index: tool.outputIndex ?? 0 };
    if (tool.item.type === "custom_tool_call") {
      tool.item.input += delta;
      return this.emit("response.custom_tool_call_input.delta", { ...ids, delta });
    }
    tool.item.arguments += delta;
    return this.emit("response.function_call_arguments.delta", { ...ids, delta });
  }

  private closeTool(tool: ToolItem): ResponsesSSEEvent[] {
    if (tool.done || tool.outputIndex === undefined) return [];
    tool.done = true;
    const { item } = tool;
    const ids = { item_id: item.id, output_index: tool.outputIndex };
    let done: ResponsesSSEEvent;
    if (item.type === "custom_tool_call") {
      done = this.emit("response.custom_tool_call_input.done", { ...ids, input: item.input });
    } else {
      item.status = this.closedStatus(item);
      done = this.emit("response.function_call_arguments.done", {
        ...ids,
        name: item.name,
        arguments: item.arguments,
      });
    }
    return [
      done,
      this.emit("response.output_item.done", { output_index: tool.outputIndex, item: clone(item) }),
    ];
  }
}

/**
 * The last events of a Responses stream that failed: `error` with the gateway's code, then
 * `response.failed` carrying the whole Response (its request echo, any output so far), numbered
 * from `sequence`, the number the stream's next event would have had. `billed`: what the stream
 * is charged, which the Response's usage reports in place of the provider's count so far.
 */
/**
 * A turn's compaction as OpenAI streams it, at `outputIndex`: the item added, compacting (which
 * carries no summary), the item done with its sealed content.
 */
export function compactionEvents(
  item: ResponsesOutputItem,
  outputIndex: number,
  emit: (type: string, fields: JsonObject) => ResponsesSSEEvent,
): ResponsesSSEEvent[] {
  return [
    emit("response.output_item.added", { output_index: outputIndex, item: clone(item) }),
    emit("response.compaction.compacting", {
      item_id: (item as { id?: unknown }).id,
      output_index: outputIndex,
    }),
    emit("response.output_item.done", { output_index: outputIndex, item: clone(item) }),
  ];
}

export function failedEvents(
  response: ResponseObject,
  sequence: number,
  message: string,
  code: string,
  billed?: Usage,
): ResponsesSSEEvent[] {
  const failed: ResponseObject = {
    ...clone(response),
    status: "failed",
    error: { code: "server_error", message },
  };
  if (billed) failed.usage = responsesUsage(billed, billed.reasoning_tokens ?? 0);
  return [
    {
      event: "error",
      data: { type: "error", code, message, param: null, sequence_number: sequence },
    },
    {
      event: "response.failed",
      data: { type: "response.failed", response: failed, sequence_number: sequence + 1 },
    },
  ];
}

function clone<T>(value: T): T {
  return structuredClone(value);
}
