/**
 * Request: an OpenAI chat body (what `toChatRequest` makes of any client style) -> Gemini's
 * `GenerateContentRequest`.
 */

import type {
  ChatCompletionRequest,
  ChatContentPart,
  ChatMessage,
  ChatTool,
  ChatToolChoice,
} from "../../wire/openai-types.js";
import { withAllowedToolsOnly } from "../../wire/translate/allowed-tools.js";
import {
  argumentsToInput,
  asArray,
  asNumber,
  asString,
  isRecord,
  type JsonObject,
  parseDataUrl,
} from "../../wire/translate/shared.js";
import { UnsupportedRequest } from "../../wire/upstream-failure.js";
import { FunctionNames } from "./function-names.js";
import { toGeminiSchema } from "./gemini-schema.js";
import type {
  GeminiContent,
  GeminiFunctionDeclaration,
  GeminiGenerationConfig,
  GeminiPart,
  GeminiThinkingConfig,
  GeminiThinkingLevel,
  GenerateContentRequest,
} from "./gemini-types.js";
import { signatureOfCallId } from "./tool-call-ids.js";

/**
 * What Google's docs say to send as a function call's thought signature when the call was not
 * made by a Gemini 3 model (a history from another model, or written by the client): without
 * one, Gemini 3 refuses the turn.
 */
export const unsignedCallSignature = "skip_thought_signature_validator";

/** What the client asked for that its chat body cannot say, read from the client's own body. */
export interface GeminiRequestOptions {
  /**
   * A messages client's `thinking`, whose budget Gemini takes as it is (the chat body carries
   * only the effort level it maps to).
   */
  anthropicThinking?: unknown;
  /** The tool calls whose results the client marked as errors (a messages client's `is_error`). */
  failedCalls?: ReadonlySet<string>;
  /** The client asked to read the model's thinking (a Responses client's `reasoning.summary`). */
  showThoughts?: boolean;
  /** The names Gemini is told for the request's functions (by default, made from the request). */
  names?: FunctionNames;
}

/** `maxOutputTokens` at most `maxOutput`: the model's configured maximum, which the hold covers. */
export function chatToGemini(
  request: ChatCompletionRequest,
  maxOutput: number,
  options: GeminiRequestOptions = {},
): GenerateContentRequest {
  refuseUntranslatable(request);
  const names = options.names ?? FunctionNames.of(request);
  const chat = withAllowedToolsOnly(request);
  const system: GeminiPart[] = [];
  const contents: GeminiContent[] = [];
  const callNames = new Map<string, string>();
  const push = (role: "user" | "model", parts: GeminiPart[]) => {
    if (parts.length === 0) return;
    const last = contents.at(-1);
    // Gemini wants the turns to alternate: tool results and the text after them are one turn.
    if (last?.role === role) last.parts.push(...parts);
    else contents.push({ role, parts });
  };
  for (const message of chat.messages) {
    switch (message.role) {
      case "system":
      case "developer":
        system.push(...userParts(message.content));
        break;
      case "user":
        push("user", userParts(message.content));
        break;
      case "assistant":
        push("model", modelParts(message, callNames, names));
        break;
      case "tool":
        // A function's response is text: images or files the tool returned follow it in the
        // same turn, as a Responses or messages client's tool results reach Gemini.
        push("user", [
          functionResponse(
            callName(callNames, message.tool_call_id),
            message.content,
            options.failedCalls?.has(message.tool_call_id) === true,
          ),
          ...userParts(
            asArray(message.content).filter(
              (part): part is ChatContentPart => isRecord(part) && part.type !== "text",
            ),
          ),
        ]);
        break;
      case "function":
        push("user", [functionResponse(names.toGemini(message.name), message.content)]);
        break;
    }
  }
  const out: GenerateContentRequest = { contents };
  if (system.length > 0) {
    // Only a system prompt: Gemini needs a turn to answer, and the prompt is all there is.
    if (contents.length === 0) contents.push({ role: "user", parts: system });
    else out.systemInstruction = { parts: system };
  }
  // Gemini refuses a request with no turn at all; OpenAI would answer it, Anthropic refuses it too.
  if (contents.length === 0)
    throw new UnsupportedRequest(
      "Every message is empty (no text, image or other content), so there is nothing to answer; send a message with content.",
    );
  const declarations = functionDeclarations(chat.tools, names);
  if (declarations.length > 0) out.tools = [{ functionDeclarations: declarations }];
  const toolConfig = functionCallingConfig(chat.tool_choice, names, strictTools(chat.tools));
  if (toolConfig && declarations.length > 0) out.toolConfig = { functionCallingConfig: toolConfig };
  out.generationConfig = generationConfig(chat, maxOutput);
  const levels = thinkingLevels(chat.model);
  const thinking = levels
    ? levelThinkingConfig(chat, options, levels)
    : thinkingConfig(chat, options, out.generationConfig.maxOutputTokens, budgetRange(chat.model));
  if (thinking) out.generationConfig.thinkingConfig = thinking;
  return out;
}

/**
 * What a chat request asks for that this translation does not carry, refused before anything is
 * sent: answering text without the audio asked for, or `logprobs: null` as if the provider had
 * none to give, would change the answer without a word.
 */
function refuseUntranslatable(chat: ChatCompletionRequest): void {
  if (
    asArray(chat.modalities).includes("audio") ||
    (chat.audio !== undefined && chat.audio !== null)
  )
    throw new UnsupportedRequest("Audio output is not available for this model; ask for text.");
  if (chat.logprobs === true)
    throw new UnsupportedRequest(
      "`logprobs` is not available for this model; leave out `logprobs` (on /v1/responses, `include: message.output_text.logprobs`).",
    );
}

/** Gemini 2.5's thinking budget for each chat `reasoning_effort`, as LiteLLM maps them. */
const effortBudgets: Record<string, number> = {
  none: 0,
  minimal: 128,
  low: 1024,
  medium: 2048,
  high: 4096,
  // Each level above low doubles the one before it.
  xhigh: 8192,
  max: 16384,
};

/**
 * The thinking budgets a model takes besides -1 (the model decides): at least `min` and at most
 * `max` tokens, and 0 (no thinking) where `off`.
 */
interface BudgetRange {
  min: number;
  max: number;
  off: boolean;
}

/**
 * Each family's budgets, by the upstream model's name, as Google's thinking guide lists them: 2.5
 * Pro always thinks, 128 to 32768; Flash-Lite 512 to 24576; Flash up to 24576. Any other model
 * gets the widest range Google's API takes.
 */
const budgetRanges: [RegExp, BudgetRange][] = [
  [/flash-lite/, { min: 512, max: 24_576, off: true }],
  [/gemini-2\.5-pro|gemini-pro-latest/, { min: 128, max: 32_768, off: false }],
  [/gemini-(2\.5-flash|flash-latest)/, { min: 1, max: 24_576, off: true }],
];
const anyBudget: BudgetRange = { min: 1, max: 32_768, off: true };

function budgetRange(upstreamModel: string): BudgetRange {
  const name = upstreamModel.toLowerCase();
  return budgetRanges.find(([family]) => family.test(name))?.[1] ?? anyBudget;
}

const allLevels: readonly GeminiThinkingLevel[] = ["minimal", "low", "medium", "high"];

/**
 * The thinking levels a model takes, by its upstream name, as Google's Gemini 3 guide lists them:
 * Gemini 3 and later think by level, for which Google keeps budgets only for compatibility (and
 * says they may think worse). 3 Pro takes low and high, later Pros also medium, Flash (and
 * Flash-Lite) minimal to high; any other takes low and high, which every Gemini 3 takes. Undefined
 * for a model that thinks by budget (2.5 and any other name).
 */
function thinkingLevels(upstreamModel: string): readonly GeminiThinkingLevel[] | undefined {
  const name = upstreamModel.toLowerCase();
  const major = /gemini-(\d+)/.exec(name)?.[1];
  if (major === undefined || Number(major) < 3) return undefined;
  if (/gemini-3-pro/.test(name)) return ["low", "high"];
  if (/-pro/.test(name)) return ["low", "medium", "high"];
  if (/-flash/.test(name)) return allLevels;
  return ["low", "high"];
}

/** The level each chat `reasoning_effort` asks for: OpenAI's levels above high think as high. */
const effortLevels: Record<string, GeminiThinkingLevel> = {
  minimal: "minimal",
  low: "low",
  medium: "medium",
  high: "high",
  xhigh: "high",
  max: "high",
};

/**
 * The client's thinking as a Gemini 3 `thinkingConfig`: chat's `reasoning_effort` (a messages
 * client's budget arrives as one, by LiteLLM's thresholds) as the lowest level the model takes at
 * or above the one asked (3 Pro has no medium: it thinks high); thinking off as the model's lowest
 * level without its thoughts shown, since Gemini 3 Pro cannot stop thinking and Flash's minimal
 * thinks as little as Google allows; adaptive thinking with no effort, and a Responses summary
 * asked with none, as the model's own default level. Thoughts are asked back as for 2.5.
 */
function levelThinkingConfig(
  chat: ChatCompletionRequest,
  { anthropicThinking: anthropic, showThoughts }: GeminiRequestOptions,
  levels: readonly GeminiThinkingLevel[],
): GeminiThinkingConfig | undefined {
  const effort = asString(chat.reasoning_effort);
  const asked = effort === undefined ? undefined : effortLevels[effort];
  const off = (): GeminiThinkingConfig => ({ thinkingLevel: levels[0] });
  const at = (level: GeminiThinkingLevel) =>
    levels.find((taken) => allLevels.indexOf(taken) >= allLevels.indexOf(level)) ?? levels.at(-1);
  if (isRecord(anthropic)) {
    if (anthropic.type === "disabled") return off();
    // `display: "omitted"`: the model thinks, the client does not want to read it.
    const includeThoughts = anthropic.display !== "omitted";
    if (["enabled", "adaptive", "between_tools"].includes(String(anthropic.type)))
      return asked ? { thinkingLevel: at(asked), includeThoughts } : { includeThoughts };
  }
  if (effort === "none") return off();
  if (asked === undefined) return showThoughts ? { includeThoughts: true } : undefined;
  return { thinkingLevel: at(asked), includeThoughts: true };
}

/**
 * The client's thinking as Gemini's `thinkingConfig`: an Anthropic budget as it is (within the
 * output limit, which Gemini counts thinking against), thinking off as a budget of 0, adaptive
 * thinking as Gemini's dynamic budget (-1) unless an effort level says how much; otherwise chat's
 * `reasoning_effort` by level. Each budget is brought within the model's `range`: a model that
 * cannot stop thinking (2.5 Pro) thinks on its lowest budget where the client asked for none,
 * without showing its thoughts. Thoughts are asked back whenever the model may think, so the
 * client gets them as reasoning (chat) or thinking blocks (messages); a client that asks to read
 * them with no effort named gets them from the model's own default thinking.
 */
function thinkingConfig(
  chat: ChatCompletionRequest,
  { anthropicThinking: anthropic, showThoughts }: GeminiRequestOptions,
  maxOutput: number | undefined,
  range: BudgetRange,
): GeminiThinkingConfig | undefined {
  // Gemini counts thinking against the output limit; the model's lowest budget still wins.
  const within = (budget: number) => {
    if (budget === -1) return budget;
    const limited = maxOutput === undefined ? budget : Math.min(budget, maxOutput);
    return Math.max(range.min, Math.min(limited, range.max));
  };
  const off = (): GeminiThinkingConfig => ({ thinkingBudget: range.off ? 0 : range.min });
  const effort = asString(chat.reasoning_effort);
  const levelBudget = effort === undefined ? undefined : effortBudgets[effort];
  if (isRecord(anthropic)) {
    if (anthropic.type === "disabled") return off();
    // `display: "omitted"`: the model thinks, the client does not want to read it.
    const includeThoughts = anthropic.display !== "omitted";
    const budget = asNumber(anthropic.budget_tokens);
    if (anthropic.type === "enabled" && budget !== undefined)
      return { thinkingBudget: within(budget), includeThoughts };
    // Adaptive (and between-tools) thinking: the model decides, unless an effort level says.
    if (anthropic.type === "adaptive" || anthropic.type === "between_tools")
      return { thinkingBudget: within(levelBudget ?? -1), includeThoughts };
  }
  if (levelBudget === undefined) return showThoughts ? { includeThoughts: true } : undefined;
  if (levelBudget === 0) return off();
  return { thinkingBudget: within(levelBudget), includeThoughts: true };
}

function callName(names: Map<string, string>, id: unknown): string {
  const name = typeof id === "string" ? names.get(id) : undefined;
  if (name === undefined) {
    throw new UnsupportedRequest(
      "A tool message answers a tool_call_id that no earlier assistant message called; Gemini needs the function's name.",
    );
  }
  return name;
}

function textPart(text: string): GeminiPart[] {
  return text === "" ? [] : [{ text }];
}

/** A user's (or system's) content: text, images and files, each as Gemini's part. */
function userParts(content: string | ChatContentPart[] | null | undefined): GeminiPart[] {
  if (typeof content === "string") return textPart(content);
  const parts: GeminiPart[] = [];
  for (const part of asArray(content)) {
    if (!isRecord(part)) continue;
    if (part.type === "text") parts.push(...textPart(asString(part.text) ?? ""));
    else if (part.type === "image_url" && isRecord(part.image_url)) {
      parts.push(mediaPart(asString(part.image_url.url) ?? ""));
    } else if (part.type === "input_audio" && isRecord(part.input_audio)) {
      const format = asString(part.input_audio.format) ?? "wav";
      const data = asString(part.input_audio.data) ?? "";
      parts.push({ inlineData: { mimeType: `audio/${format}`, data } });
    } else if (part.type === "file" && isRecord(part.file)) {
      // A document by URL (a messages client's URLPDFSource) is Google's to fetch.
      const data = asString(part.file.file_data) ?? asString(part.file.file_url);
      if (!data) throw new UnsupportedRequest("Gemini takes files as data, not by file_id.");
      parts.push(mediaPart(data));
    } else if (part.type === "refusal") {
      parts.push(...textPart(asString(part.refusal) ?? ""));
    }
  }
  return parts;
}

/** A data URL goes inline; any other URL is given to Gemini to fetch (`fileData`). */
function mediaPart(url: string): GeminiPart {
  const data = parseDataUrl(url);
  if (data) return { inlineData: { mimeType: data.mediaType, data: data.data } };
  if (!/^(https?|gs):\/\//.test(url))
    throw new UnsupportedRequest("An image or file must be a data URL or an http(s) URL.");
  return { fileData: { fileUri: url, mimeType: mimeTypeOf(url) } };
}

const extensionTypes: Record<string, string> = {
  png: "image/png",
  jpg: "image/jpeg",
  jpeg: "image/jpeg",
  gif: "image/gif",
  webp: "image/webp",
  heic: "image/heic",
  pdf: "application/pdf",
  mp3: "audio/mp3",
  wav: "audio/wav",
  mp4: "video/mp4",
};

function mimeTypeOf(url: string): string {
  const extension = /\.([a-z0-9]+)(?:[?#]|$)/i.exec(url)?.[1]?.toLowerCase() ?? "";
  return extensionTypes[extension] ?? "image/jpeg";
}

/** The model's turn: its text, then its function calls, each with its thought signature. */
function modelParts(
  message: Extract<ChatMessage, { role: "assistant" }>,
  callNames: Map<string, string>,
  names: FunctionNames,
): GeminiPart[] {
  const parts = userParts(message.content ?? null);
  // A turn that only refused says so in `refusal`, as Anthropic's translation reads it too.
  if (parts.length === 0) parts.push(...textPart(asString(message.refusal) ?? ""));
  const calls = asArray(message.tool_calls).filter(isRecord);
  let signed = false;
  const callParts: GeminiPart[] = [];
  for (const call of calls) {
    const fn = isRecord(call.function) ? call.function : {};
    const name = names.toGemini(asString(fn.name) ?? "");
    const id = asString(call.id) ?? "";
    callNames.set(id, name);
    const part: GeminiPart = { functionCall: { name, args: argumentsToInput(fn.arguments) } };
    const signature = signatureOfCallId(id);
    if (signature) {
      part.thoughtSignature = signature;
      signed = true;
    }
    callParts.push(part);
  }
  const legacy = message.function_call;
  if (legacy && isRecord(legacy)) {
    callParts.push({
      functionCall: { name: names.toGemini(legacy.name), args: argumentsToInput(legacy.arguments) },
    });
  }
  if (callParts.length > 0 && !signed) callParts[0].thoughtSignature = unsignedCallSignature;
  return [...parts, ...callParts];
}

/**
 * A tool's result: Google's docs put a function's output under `output`, and a failed call's
 * details under `error`, which tells the model the call failed.
 */
function functionResponse(name: string, content: unknown, failed = false): GeminiPart {
  const text =
    typeof content === "string"
      ? content
      : asArray(content)
          .filter(isRecord)
          .map((part) => asString(part.text) ?? "")
          .join("");
  return { functionResponse: { name, response: failed ? { error: text } : { output: text } } };
}

function functionDeclarations(
  tools: ChatTool[] | undefined,
  names: FunctionNames,
): GeminiFunctionDeclaration[] {
  const declarations: GeminiFunctionDeclaration[] = [];
  for (const tool of asArray(tools).filter(isRecord)) {
    if (tool.type !== "function" || !isRecord(tool.function)) {
      throw new UnsupportedRequest(
        `Gemini runs function tools only; this request has a tool of type "${String(tool.type)}".`,
      );
    }
    const fn = tool.function;
    const declaration: GeminiFunctionDeclaration = {
      name: names.toGemini(asString(fn.name) ?? ""),
    };
    const description = asString(fn.description);
    if (description) declaration.description = description;
    // A function without parameters declares none: Gemini refuses an object with no properties.
    if (isRecord(fn.parameters) && takesParameters(fn.parameters))
      declaration.parametersJsonSchema = toGeminiSchema(fn.parameters);
    declarations.push(declaration);
  }
  return declarations;
}

function takesParameters(schema: JsonObject): boolean {
  const properties = schema.properties;
  if (isRecord(properties) && Object.keys(properties).length > 0) return true;
  return schema.type !== undefined && schema.type !== "object";
}

/**
 * Whether a tool is strict (a function's `strict: true`, Anthropic's strict tool use): its calls must
 * hold to its schema. Gemini's `VALIDATED` mode holds every call to its declaration's schema where
 * the model may also answer in text; `ANY` (a call forced) holds them already.
 */
function strictTools(tools: unknown): boolean {
  return asArray(tools).some(
    (tool) => isRecord(tool) && isRecord(tool.function) && tool.function.strict === true,
  );
}

function functionCallingConfig(
  choice: ChatToolChoice | undefined,
  names: FunctionNames,
  strict: boolean,
): { mode: "AUTO" | "ANY" | "NONE" | "VALIDATED"; allowedFunctionNames?: string[] } | undefined {
  if ((choice === undefined || choice === "auto") && strict) return { mode: "VALIDATED" };
  if (choice === undefined) return undefined;
  if (choice === "auto") return { mode: "AUTO" };
  if (choice === "none") return { mode: "NONE" };
  if (choice === "required") return { mode: "ANY" };
  if (isRecord(choice) && isRecord(choice.function) && typeof choice.function.name === "string")
    return { mode: "ANY", allowedFunctionNames: [names.toGemini(choice.function.name)] };
  return undefined;
}

function generationConfig(chat: ChatCompletionRequest, maxOutput: number): GeminiGenerationConfig {
  const requested = asNumber(chat.max_completion_tokens) ?? asNumber(chat.max_tokens);
  const config: GeminiGenerationConfig = {
    maxOutputTokens: requested === undefined ? maxOutput : Math.min(requested, maxOutput),
  };
  const temperature = asNumber(chat.temperature);
  if (temperature !== undefined) config.temperature = temperature;
  const topP = asNumber(chat.top_p);
  if (topP !== undefined) config.topP = topP;
  // Not OpenAI's, but OpenAI-compatible servers take it, and a messages client's arrives here.
  const topK = asNumber(chat.top_k);
  if (topK !== undefined) config.topK = topK;
  const stop = typeof chat.stop === "string" ? [chat.stop] : asArray(chat.stop);
  const stopSequences = stop.filter((s): s is string => typeof s === "string" && s !== "");
  if (stopSequences.length > 0) config.stopSequences = stopSequences;
  const n = asNumber(chat.n);
  if (n !== undefined && n > 1) config.candidateCount = n;
  const seed = asNumber(chat.seed);
  if (seed !== undefined) config.seed = seed;
  const presence = asNumber(chat.presence_penalty);
  if (presence !== undefined) config.presencePenalty = presence;
  const frequency = asNumber(chat.frequency_penalty);
  if (frequency !== undefined) config.frequencyPenalty = frequency;
  const format = chat.response_format;
  if (format?.type === "json_object") config.responseMimeType = "application/json";
  if (format?.type === "json_schema") {
    config.responseMimeType = "application/json";
    const schema = format.json_schema?.schema;
    if (isRecord(schema)) config.responseJsonSchema = toGeminiSchema(schema);
  }
  return config;
}
