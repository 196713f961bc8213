import type { IncomingHttpHeaders } from "node:http";
import type { JsonReply, RecordedRequest, Reply, SseStep } from "./fake-upstream.js";
import type { Refusal, WireRules } from "./upstream-rules.js";

/**
 * Google's Gemini API (`generativelanguage` v1beta) as `FakeUpstream` plays it (`fakeGemini` in
 * `fake-gemini.ts`): its answers (JSON, SSE, errors) and the rules Google's API checks a request by, each refusal in Google's error shape
 * (`{"error":{"code","message","status"}}`): the key (`x-goog-api-key`; missing is 403
 * PERMISSION_DENIED, a wrong one 400 API_KEY_INVALID, a bearer token 401 UNAUTHENTICATED),
 * unknown fields anywhere in the body, roles other than user/model, empty parts or text, a
 * function response without a name or not answering each call of the turn before it, Gemini 3's
 * thought signatures on function calls, the output limit, at most five stop sequences and eight
 * candidates, function names (a letter or underscore first, at most 64 characters), each model
 * family's thinking budgets and levels, JSON answers beside function calling before Gemini 3, image types it
 * cannot read, and schema keywords Google does not take. One rule is the gateway's, not Google's: a key in the URL (`?key=`) is refused, since the
 * gateway must never put it where logs and traces keep it.
 */

export interface GeminiRules extends WireRules {
  /** The keys the fake accepts. */
  apiKeys: string[];
}

export const defaultGeminiRules: GeminiRules = { maxOutputTokens: 65_536, apiKeys: [] };

/** What the fake answers unless a test scripts otherwise, by the method the path names. */
export function defaultGeminiAnswer(req: RecordedRequest): Reply {
  const method = methodOf(req.path);
  if (method === "countTokens")
    return { kind: "json", body: { totalTokens: countedTokens(req.body) } };
  if (method === "batchEmbedContents") {
    const requests = req.body.requests as { outputDimensionality?: number; content: Json }[];
    return {
      kind: "json",
      body: {
        embeddings: requests.map((r) => ({
          values: fakeVector(JSON.stringify(r.content), r.outputDimensionality ?? 8),
        })),
      },
    };
  }
  if (method === "streamGenerateContent")
    return { kind: "sse", steps: geminiStreamSteps(["o", "k"]) };
  return geminiJson("ok");
}

/** A small deterministic vector per text, so a test can tell which input got which. */
export function fakeVector(text: string, dimensions: number): number[] {
  let seed = 0;
  for (const ch of text) seed = (seed * 31 + ch.charCodeAt(0)) % 1_000_003;
  return Array.from({ length: dimensions }, (_, i) => ((seed + i * 7919) % 1000) / 1000);
}

// ---- answers ------------------------------------------------------------------------

export interface GeminiCall {
  name: string;
  args: Record<string, unknown>;
  /** Gemini 3 signs the first call of a turn. */
  signature?: string;
}

/** [prompt, candidates, thoughts] tokens. */
export type GeminiUsage = [number, number, number?];

function usageMetadata([prompt, candidates, thoughts]: GeminiUsage): Json {
  const usage: Json = {
    promptTokenCount: prompt,
    candidatesTokenCount: candidates,
    totalTokenCount: prompt + candidates + (thoughts ?? 0),
  };
  if (thoughts) usage.thoughtsTokenCount = thoughts;
  return usage;
}

function callPart(call: GeminiCall): Json {
  const part: Json = { functionCall: { name: call.name, args: call.args } };
  if (call.signature) part.thoughtSignature = call.signature;
  return part;
}

/** A generateContent answer: one candidate per text (`texts` for n > 1). */
export function geminiJson(
  text: string | string[] | null,
  options: { calls?: GeminiCall[]; finish?: string; usage?: GeminiUsage; thought?: string } = {},
): JsonReply {
  const texts = Array.isArray(text) ? text : [text];
  const candidates = texts.map((t, index) => {
    const parts: Json[] = [];
    if (options.thought) parts.push({ text: options.thought, thought: true });
    if (t !== null) parts.push({ text: t });
    if (index === 0) parts.push(...(options.calls ?? []).map(callPart));
    return { content: { role: "model", parts }, finishReason: options.finish ?? "STOP", index };
  });
  return {
    kind: "json",
    body: {
      candidates,
      usageMetadata: usageMetadata(options.usage ?? [11, 7]),
      modelVersion: "gemini-fake",
      responseId: "fake-response-id",
    },
  };
}

/**
 * streamGenerateContent?alt=sse events, as Google sends them: each a whole response with the next
 * text piece, usage (cumulative) on each, the finish and the calls on the last.
 */
export function geminiStreamSteps(
  pieces: string[],
  options: { calls?: GeminiCall[]; finish?: string; usage?: GeminiUsage } = {},
): SseStep[] {
  const [prompt, candidates, thoughts] = options.usage ?? [11, 7];
  const steps: SseStep[] = pieces.map((text, i) => ({
    data: {
      candidates: [{ content: { role: "model", parts: [{ text }] }, index: 0 }],
      usageMetadata: usageMetadata([prompt, Math.min(i + 1, candidates)]),
      modelVersion: "gemini-fake",
    },
  }));
  steps.push({
    data: {
      candidates: [
        {
          content: { role: "model", parts: (options.calls ?? []).map(callPart) },
          finishReason: options.finish ?? "STOP",
          index: 0,
        },
      ],
      usageMetadata: usageMetadata([prompt, candidates, thoughts]),
      modelVersion: "gemini-fake",
    },
  });
  return steps;
}

/** An error body as Google's API writes it. */
export function geminiError(
  code: number,
  status: string,
  message: string,
  reason?: string,
): JsonReply {
  const details = reason
    ? [
        {
          "@type": "type.googleapis.com/google.rpc.ErrorInfo",
          reason,
          domain: "googleapis.com",
          metadata: { service: "generativelanguage.googleapis.com" },
        },
      ]
    : [];
  return { kind: "json", status: code, body: { error: { code, message, status, details } } };
}

/**
 * A 429 as Google's API writes one for a quota used up: which quota (`QuotaFailure`), a help link,
 * and how long to wait (`RetryInfo.retryDelay`, a protobuf Duration), with no Retry-After header.
 */
export function geminiQuotaExceeded(retryDelay: string): JsonReply {
  const code = 429;
  return {
    kind: "json",
    status: code,
    body: {
      error: {
        code,
        message:
          "You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.",
        status: "RESOURCE_EXHAUSTED",
        details: [
          {
            "@type": "type.googleapis.com/google.rpc.QuotaFailure",
            violations: [
              {
                quotaMetric: "generativelanguage.googleapis.com/generate_content_requests",
                quotaId: "GenerateRequestsPerMinutePerProjectPerModel",
                quotaValue: "10",
              },
            ],
          },
          {
            "@type": "type.googleapis.com/google.rpc.Help",
            links: [
              {
                description: "Learn more about Gemini API quotas",
                url: "https://ai.google.dev/gemini-api/docs/rate-limits",
              },
            ],
          },
          { "@type": "type.googleapis.com/google.rpc.RetryInfo", retryDelay },
        ],
      },
    },
  };
}

// ---- rules --------------------------------------------------------------------------

type Json = Record<string, unknown>;

const isRecord = (v: unknown): v is Json =>
  typeof v === "object" && v !== null && !Array.isArray(v);

const refusal = (code: number, status: string, message: string, reason?: string): Refusal => {
  const { body } = geminiError(code, status, message, reason);
  return { status: code, body };
};
const invalid = (message: string) => refusal(400, "INVALID_ARGUMENT", message);
const unknownName = (name: string, at: string) =>
  invalid(`Invalid JSON payload received. Unknown name "${name}" at '${at}': Cannot find field.`);

const methods = [
  "generateContent",
  "streamGenerateContent",
  "countTokens",
  "embedContent",
  "batchEmbedContents",
] as const;
type Method = (typeof methods)[number];

function methodOf(path: string): Method | undefined {
  const match = /^\/v1beta\/models\/[^/:?]+:([A-Za-z]+)(?:\?|$)/.exec(path);
  return methods.find((m) => m === match?.[1]);
}

const requestFields = new Set([
  "contents",
  "systemInstruction",
  "tools",
  "toolConfig",
  "generationConfig",
  "safetySettings",
  "cachedContent",
]);
const generationConfigFields = new Set([
  "stopSequences",
  "responseMimeType",
  "responseSchema",
  "responseJsonSchema",
  "responseModalities",
  "candidateCount",
  "maxOutputTokens",
  "temperature",
  "topP",
  "topK",
  "seed",
  "presencePenalty",
  "frequencyPenalty",
  "responseLogprobs",
  "logprobs",
  "thinkingConfig",
  "mediaResolution",
  "speechConfig",
  "imageConfig",
]);
const partFields = new Set([
  "text",
  "thought",
  "thoughtSignature",
  "inlineData",
  "fileData",
  "functionCall",
  "functionResponse",
  "executableCode",
  "codeExecutionResult",
  "videoMetadata",
]);
const partData = ["text", "inlineData", "fileData", "functionCall", "functionResponse"];
/** The image types Google's image-understanding guide lists; any other image type is refused. */
const imageTypes = new Set(["image/png", "image/jpeg", "image/webp", "image/heic", "image/heif"]);
const declarationFields = new Set([
  "name",
  "description",
  "parameters",
  "parametersJsonSchema",
  "response",
  "responseJsonSchema",
  "behavior",
]);
/** Google's own `Schema` message (for `parameters` and `responseSchema`). */
const openApiSchemaFields = new Set([
  "type",
  "format",
  "title",
  "description",
  "nullable",
  "enum",
  "maxItems",
  "minItems",
  "properties",
  "required",
  "minProperties",
  "maxProperties",
  "minLength",
  "maxLength",
  "pattern",
  "example",
  "anyOf",
  "propertyOrdering",
  "default",
  "items",
  "minimum",
  "maximum",
]);
/** The keywords Google lists as supported in `parametersJsonSchema` and `responseJsonSchema`. */
const jsonSchemaKeywords = new Set([
  "$id",
  "$defs",
  "$ref",
  "$anchor",
  "type",
  "format",
  "title",
  "description",
  "enum",
  "items",
  "prefixItems",
  "minItems",
  "maxItems",
  "minimum",
  "maximum",
  "anyOf",
  "oneOf",
  "properties",
  "additionalProperties",
  "required",
  "propertyOrdering",
]);

/** The refusal Google's API gives this request, if any. */
export function checkGemini(req: RecordedRequest, rules: GeminiRules): Refusal | undefined {
  const keyRefusal = checkKey(req.path, req.headers, rules);
  if (keyRefusal) return keyRefusal;
  const method = methodOf(req.path);
  const model = /^\/v1beta\/(models\/[^/:?]+):/.exec(req.path)?.[1];
  if (!method || !model) return refusal(404, "NOT_FOUND", `Method not found: ${req.path}`);
  if (method === "streamGenerateContent" && !/[?&]alt=sse(&|$)/.test(req.path))
    return invalid("This fake streams only as server-sent events (alt=sse).");
  const body = req.body;
  if (method === "generateContent" || method === "streamGenerateContent")
    return checkGenerate(body, rules, "GenerateContentRequest", model);
  if (method === "countTokens") return checkCountTokens(body, rules);
  return checkEmbed(method, body, model);
}

function checkKey(
  path: string,
  headers: IncomingHttpHeaders,
  rules: GeminiRules,
): Refusal | undefined {
  if (/[?&]key=/.test(path))
    return refusal(
      403,
      "PERMISSION_DENIED",
      "The fake refuses a key in the URL: send x-goog-api-key.",
    );
  const key = headers["x-goog-api-key"];
  if (typeof key !== "string" || key === "") {
    if (headers.authorization) {
      return refusal(
        401,
        "UNAUTHENTICATED",
        "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.",
      );
    }
    return refusal(
      403,
      "PERMISSION_DENIED",
      "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.",
    );
  }
  if (rules.apiKeys.length > 0 && !rules.apiKeys.includes(key))
    return refusal(
      400,
      "INVALID_ARGUMENT",
      "API key not valid. Please pass a valid API key.",
      "API_KEY_INVALID",
    );
  return undefined;
}

function checkCountTokens(body: Json, rules: GeminiRules): Refusal | undefined {
  for (const key of Object.keys(body))
    if (key !== "contents" && key !== "generateContentRequest") return unknownName(key, "");
  if (body.contents !== undefined && body.generateContentRequest !== undefined)
    return invalid("contents and generateContentRequest are mutually exclusive.");
  if (isRecord(body.generateContentRequest)) {
    const { model, ...rest } = body.generateContentRequest;
    if (typeof model !== "string" || !model.startsWith("models/"))
      return invalid("* CountTokensRequest.generate_content_request.model: model is required.");
    return checkGenerate(rest, rules, "CountTokensRequest.generate_content_request", model);
  }
  return checkContents(body.contents, "CountTokensRequest");
}

function checkEmbed(method: Method, body: Json, model: string): Refusal | undefined {
  const requests = method === "embedContent" ? [{ model, ...body }] : body.requests;
  if (method === "batchEmbedContents") {
    for (const key of Object.keys(body)) if (key !== "requests") return unknownName(key, "");
  }
  if (!Array.isArray(requests) || requests.length === 0)
    return invalid("* BatchEmbedContentsRequest.requests: requests is required.");
  if (requests.length > 100)
    return invalid(
      "* BatchEmbedContentsRequest.requests: at most 100 requests can be in one batch.",
    );
  for (const [i, request] of requests.entries()) {
    if (!isRecord(request)) return invalid(`requests[${i}] must be an object.`);
    for (const key of Object.keys(request)) {
      if (!["model", "content", "taskType", "title", "outputDimensionality"].includes(key))
        return unknownName(key, `requests[${i}]`);
    }
    if (request.model !== model) {
      return invalid(
        `* BatchEmbedContentsRequest.requests[${i}].model: model in the request (${String(request.model)}) and model in the url (${model}) must be the same.`,
      );
    }
    const parts = isRecord(request.content) ? request.content.parts : undefined;
    if (!Array.isArray(parts) || parts.length === 0)
      return invalid(
        `* BatchEmbedContentsRequest.requests[${i}].content.parts: must not be empty.`,
      );
    const dims = request.outputDimensionality;
    if (dims !== undefined && (!Number.isInteger(dims) || (dims as number) < 1))
      return invalid(`requests[${i}].output_dimensionality must be a positive integer.`);
  }
  return undefined;
}

function checkGenerate(
  body: Json,
  rules: GeminiRules,
  at: string,
  model: string,
): Refusal | undefined {
  for (const key of Object.keys(body)) if (!requestFields.has(key)) return unknownName(key, "");
  const contentsRefusal = checkContents(body.contents, at);
  if (contentsRefusal) return contentsRefusal;
  if (body.systemInstruction !== undefined) {
    const parts = isRecord(body.systemInstruction) ? body.systemInstruction.parts : undefined;
    if (!Array.isArray(parts) || parts.length === 0)
      return invalid(`* ${at}.system_instruction.parts: must not be empty.`);
    for (const part of parts) {
      if (!isRecord(part) || typeof part.text !== "string" || part.text === "")
        return invalid("Unable to submit request because it has an empty text parameter.");
    }
  }
  return (
    checkGenerationConfig(body.generationConfig, rules, at, model) ??
    checkTools(body.tools, at) ??
    checkToolConfig(body.toolConfig) ??
    checkJsonWithFunctions(body, model)
  );
}

/**
 * Gemini 2.x (and 1.x) cannot answer in JSON in a request whose model may call a function: Google
 * refuses the JSON response type beside function declarations unless calling is off (`NONE`).
 * Gemini 3 takes both together. Any other name (the tests' `gemini-up`) is taken as Gemini 3.
 */
function checkJsonWithFunctions(body: Json, model: string): Refusal | undefined {
  if (!/^models\/gemini-[12](\.\d+)?-/.test(model)) return undefined;
  const config = isRecord(body.generationConfig) ? body.generationConfig : {};
  if (config.responseMimeType !== "application/json") return undefined;
  const declares =
    Array.isArray(body.tools) &&
    body.tools.some(
      (tool) =>
        isRecord(tool) &&
        Array.isArray(tool.functionDeclarations) &&
        tool.functionDeclarations.length > 0,
    );
  const calling = isRecord(body.toolConfig) ? body.toolConfig.functionCallingConfig : undefined;
  if (!declares || (isRecord(calling) && calling.mode === "NONE")) return undefined;
  return invalid("Function calling with a response mime type: 'application/json' is unsupported");
}

function checkContents(contents: unknown, at: string): Refusal | undefined {
  if (!Array.isArray(contents) || contents.length === 0)
    return invalid(`* ${at}.contents: contents is not specified`);
  let lastUserText = -1;
  for (const [i, content] of contents.entries()) {
    if (!isRecord(content)) return invalid(`* ${at}.contents[${i}]: must be an object.`);
    for (const key of Object.keys(content))
      if (key !== "role" && key !== "parts") return unknownName(key, `contents[${i}]`);
    if (content.role !== undefined && content.role !== "user" && content.role !== "model")
      return invalid("Please use a valid role: user, model.");
    const parts = content.parts;
    if (!Array.isArray(parts) || parts.length === 0)
      return invalid(`* ${at}.contents[${i}].parts: contents.parts must not be empty.`);
    for (const [j, part] of parts.entries()) {
      const partRefusal = checkPart(part, `${at}.contents[${i}].parts[${j}]`);
      if (partRefusal) return partRefusal;
    }
    if (content.role !== "model" && parts.some((p) => isRecord(p) && typeof p.text === "string"))
      lastUserText = i;
  }
  return checkFunctionTurns(contents as Json[], lastUserText);
}

function checkPart(part: unknown, at: string): Refusal | undefined {
  if (!isRecord(part)) return invalid(`* ${at}: must be an object.`);
  for (const key of Object.keys(part)) if (!partFields.has(key)) return unknownName(key, at);
  const data = partData.filter((key) => part[key] !== undefined);
  if (data.length !== 1)
    return invalid(
      `* ${at}: a part must hold exactly one of text, inline_data, file_data, function_call, function_response.`,
    );
  if (part.text === "")
    return invalid("Unable to submit request because it has an empty text parameter.");
  if (part.text !== undefined && typeof part.text !== "string")
    return invalid(`* ${at}.text: must be a string.`);
  if (part.inlineData !== undefined) {
    const inline = part.inlineData;
    if (!isRecord(inline) || typeof inline.mimeType !== "string" || typeof inline.data !== "string")
      return invalid(`* ${at}.inline_data: mime_type and data are required.`);
    if (inline.mimeType.startsWith("image/") && !imageTypes.has(inline.mimeType))
      return invalid(`Unsupported MIME type: ${inline.mimeType}`);
    if (!/^[A-Za-z0-9+/]*={0,2}$/.test(inline.data))
      return invalid(
        `Invalid value at '${at}.inline_data.data' (TYPE_BYTES), Base64 decoding failed.`,
      );
  }
  if (part.functionCall !== undefined) {
    const call = part.functionCall;
    if (!isRecord(call) || typeof call.name !== "string" || call.name === "")
      return invalid(`* ${at}.function_call.name: Name cannot be empty.`);
    if (call.args !== undefined && !isRecord(call.args))
      return invalid(`* ${at}.function_call.args: must be an object.`);
  }
  if (part.functionResponse !== undefined) {
    const response = part.functionResponse;
    if (!isRecord(response) || typeof response.name !== "string" || response.name === "")
      return invalid(`* ${at}.function_response.name: Name cannot be empty.`);
    if (!isRecord(response.response))
      return invalid(`* ${at}.function_response.response: must be an object.`);
  }
  return undefined;
}

/**
 * A turn of function responses answers each call of the model's turn before it, one for one; a
 * model turn in the current exchange (after the user's last text) that calls functions carries a
 * thought signature on its first call, as Gemini 3 requires.
 */
function checkFunctionTurns(contents: Json[], lastUserText: number): Refusal | undefined {
  for (const [i, content] of contents.entries()) {
    const parts = content.parts as Json[];
    const calls = parts.filter((p) => p.functionCall !== undefined);
    const responses = parts.filter((p) => p.functionResponse !== undefined);
    if (responses.length > 0) {
      const before = contents[i - 1];
      const called =
        before?.role === "model" ? (before.parts as Json[]).filter((p) => p.functionCall) : [];
      if (called.length !== responses.length) {
        return invalid(
          "Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn.",
        );
      }
    }
    if (calls.length > 0 && i > lastUserText && calls[0].thoughtSignature === undefined) {
      return invalid(
        `Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. Additional data, function call \`${String((calls[0].functionCall as Json).name)}\` , position ${i + 1}.`,
      );
    }
  }
  return undefined;
}

function checkGenerationConfig(
  config: unknown,
  rules: GeminiRules,
  at: string,
  model: string,
): Refusal | undefined {
  if (config === undefined) return undefined;
  if (!isRecord(config)) return invalid(`* ${at}.generation_config: must be an object.`);
  for (const key of Object.keys(config))
    if (!generationConfigFields.has(key)) return unknownName(key, "generation_config");
  const max = config.maxOutputTokens;
  if (
    max !== undefined &&
    (!Number.isInteger(max) || (max as number) < 1 || (max as number) > rules.maxOutputTokens)
  ) {
    return invalid(
      `Unable to submit request because it has a maxOutputTokens value of ${String(max)} but the supported range is from 1 (inclusive) to ${rules.maxOutputTokens + 1} (exclusive). Update the value and try again.`,
    );
  }
  const stops = config.stopSequences;
  if (Array.isArray(stops) && stops.length > 5)
    return invalid(
      `* ${at}.generation_config.stop_sequences: at most 5 stop sequences are allowed, got ${stops.length}.`,
    );
  const n = config.candidateCount;
  if (n !== undefined && (!Number.isInteger(n) || (n as number) < 1 || (n as number) > 8))
    return invalid("candidateCount must be between 1 and 8.");
  const thinking = checkThinkingConfig(config.thinkingConfig, model);
  if (thinking) return thinking;
  if (config.responseJsonSchema !== undefined) {
    if (config.responseSchema !== undefined)
      return invalid("response_schema and response_json_schema cannot both be set.");
    if (config.responseMimeType !== "application/json")
      return invalid("response_mime_type must be application/json when a response schema is set.");
    return checkJsonSchema(config.responseJsonSchema, "generation_config.response_json_schema");
  }
  if (config.responseSchema !== undefined)
    return checkOpenApiSchema(config.responseSchema, "generation_config.response_schema");
  return undefined;
}

const thinkingConfigFields = new Set(["thinkingBudget", "includeThoughts", "thinkingLevel"]);

/**
 * The thinking budgets each model family takes besides -1 (the model decides), as Google's
 * thinking guide lists them: 2.5 Pro 128 to 32768 and never 0 (it cannot stop thinking),
 * Flash-Lite 512 to 24576 or 0, Flash 0 to 24576. Any other model (the tests' `gemini-up`), 0 to
 * 32768, the widest Google takes.
 */
function budgetRule(model: string): { min: number; max: number; off: boolean } {
  if (/flash-lite/.test(model)) return { min: 512, max: 24_576, off: true };
  if (/gemini-2\.5-pro/.test(model)) return { min: 128, max: 32_768, off: false };
  if (/gemini-2\.5-flash/.test(model)) return { min: 1, max: 24_576, off: true };
  return { min: 1, max: 32_768, off: true };
}

/**
 * The thinking levels a model takes (`thinkingLevel`, Gemini 3 on), as Google's Gemini 3 guide
 * lists them: 3 Pro low and high, later Pros also medium, Flash minimal to high; none before 3
 * (2.5 thinks by budget only). Any other model (the tests' `gemini-up`) takes every level.
 */
function levelRule(model: string): string[] | undefined {
  if (/gemini-[12]\./.test(model)) return undefined;
  if (/gemini-3-pro/.test(model)) return ["low", "high"];
  if (/gemini-\d+(\.\d+)?-pro/.test(model)) return ["low", "medium", "high"];
  return ["minimal", "low", "medium", "high"];
}

/**
 * Gemini's thinking settings: a budget of -1 (the model decides) or within the model's range
 * (`budgetRule`), with Google's words for each refusal, or a level the model takes
 * (`levelRule`), not both.
 */
function checkThinkingConfig(config: unknown, model: string): Refusal | undefined {
  if (config === undefined) return undefined;
  if (!isRecord(config)) return invalid("* generation_config.thinking_config: must be an object.");
  for (const key of Object.keys(config))
    if (!thinkingConfigFields.has(key))
      return unknownName(key, "generation_config.thinking_config");
  const budget = config.thinkingBudget;
  const rule = budgetRule(model);
  if (budget === 0 && !rule.off)
    return invalid("Budget 0 is invalid. This model only works in thinking mode.");
  if (
    budget !== undefined &&
    budget !== -1 &&
    budget !== 0 &&
    (!Number.isInteger(budget) || (budget as number) < rule.min || (budget as number) > rule.max)
  )
    return invalid(
      `The thinking budget ${String(budget)} is invalid. Please choose a value between ${rule.min} and ${rule.max}.`,
    );
  if (config.includeThoughts !== undefined && typeof config.includeThoughts !== "boolean")
    return invalid("* generation_config.thinking_config.include_thoughts: must be a boolean.");
  if (budget !== undefined && config.thinkingLevel !== undefined)
    return invalid("thinking_budget and thinking_level are not supported together.");
  const level = config.thinkingLevel;
  if (level === undefined) return undefined;
  const levels = levelRule(model);
  if (!levels) return invalid("Thinking level is not supported for this model.");
  // The API takes the enum's names in either case.
  if (typeof level !== "string" || !levels.includes(level.toLowerCase()))
    return invalid(
      `Thinking level ${String(level)} is not supported for this model. Supported levels: ${levels.join(", ")}.`,
    );
  return undefined;
}

function checkTools(tools: unknown, at: string): Refusal | undefined {
  if (tools === undefined) return undefined;
  if (!Array.isArray(tools)) return invalid(`* ${at}.tools: must be a list.`);
  for (const [i, tool] of tools.entries()) {
    if (!isRecord(tool)) return invalid(`* ${at}.tools[${i}]: must be an object.`);
    for (const key of Object.keys(tool)) {
      if (!["functionDeclarations", "googleSearch", "codeExecution", "urlContext"].includes(key))
        return unknownName(key, `tools[${i}]`);
    }
    const declarations = tool.functionDeclarations;
    if (declarations === undefined) continue;
    if (!Array.isArray(declarations))
      return invalid(`* tools[${i}].function_declarations: must be a list.`);
    for (const [j, declaration] of declarations.entries()) {
      const path = `tools[${i}].function_declarations[${j}]`;
      if (!isRecord(declaration)) return invalid(`* ${path}: must be an object.`);
      for (const key of Object.keys(declaration))
        if (!declarationFields.has(key)) return unknownName(key, path);
      if (
        typeof declaration.name !== "string" ||
        !/^[A-Za-z_][A-Za-z0-9_.:-]{0,63}$/.test(declaration.name)
      )
        return invalid(`* ${at}.${path}.name: Invalid function name.`);
      if (declaration.parameters !== undefined && declaration.parametersJsonSchema !== undefined)
        return invalid(`* ${path}: parameters and parameters_json_schema are mutually exclusive.`);
      const refused =
        declaration.parameters !== undefined
          ? checkOpenApiSchema(declaration.parameters, `${path}.parameters`)
          : declaration.parametersJsonSchema !== undefined
            ? checkJsonSchema(declaration.parametersJsonSchema, `${path}.parameters_json_schema`)
            : undefined;
      if (refused) return refused;
    }
  }
  return undefined;
}

function checkToolConfig(config: unknown): Refusal | undefined {
  if (config === undefined) return undefined;
  const calling = isRecord(config) ? config.functionCallingConfig : undefined;
  if (!isRecord(calling)) return invalid("* tool_config.function_calling_config: is required.");
  if (!["AUTO", "ANY", "NONE", "VALIDATED"].includes(String(calling.mode)))
    return invalid(
      `Invalid value at 'tool_config.function_calling_config.mode' (${String(calling.mode)}).`,
    );
  if (
    calling.allowedFunctionNames !== undefined &&
    calling.mode !== "ANY" &&
    calling.mode !== "VALIDATED"
  )
    return invalid(
      "* tool_config.function_calling_config.allowed_function_names: only allowed when mode is ANY.",
    );
  return undefined;
}

/** Google's own Schema message: any other field is an unknown name. */
function checkOpenApiSchema(schema: unknown, at: string): Refusal | undefined {
  if (!isRecord(schema)) return invalid(`* ${at}: must be an object.`);
  for (const key of Object.keys(schema))
    if (!openApiSchemaFields.has(key)) return unknownName(key, at);
  if (isRecord(schema.properties)) {
    for (const [name, sub] of Object.entries(schema.properties)) {
      const refused = checkOpenApiSchema(sub, `${at}.properties[${name}].value`);
      if (refused) return refused;
    }
  }
  if (schema.items !== undefined) return checkOpenApiSchema(schema.items, `${at}.items`);
  for (const sub of Array.isArray(schema.anyOf) ? schema.anyOf : []) {
    const refused = checkOpenApiSchema(sub, `${at}.any_of`);
    if (refused) return refused;
  }
  return undefined;
}

/** A JSON schema with only the keywords Google lists, and nothing beside a `$ref` but `$` ones. */
function checkJsonSchema(schema: unknown, at: string): Refusal | undefined {
  if (typeof schema === "boolean") return undefined;
  if (!isRecord(schema)) return invalid(`* ${at}: a schema must be an object.`);
  for (const key of Object.keys(schema)) {
    if (!jsonSchemaKeywords.has(key))
      return invalid(`* ${at}: the JSON schema keyword "${key}" is not supported.`);
    if (schema.$ref !== undefined && !key.startsWith("$"))
      return invalid(`* ${at}: a schema with $ref may not set "${key}".`);
  }
  const subs: [string, unknown][] = [];
  for (const key of ["properties", "$defs"]) {
    if (isRecord(schema[key]))
      for (const [name, sub] of Object.entries(schema[key])) subs.push([`${key}.${name}`, sub]);
  }
  for (const key of ["anyOf", "oneOf", "prefixItems"]) {
    const list = schema[key];
    if (Array.isArray(list))
      for (const [i, sub] of list.entries()) subs.push([`${key}[${i}]`, sub]);
  }
  for (const key of ["items", "additionalProperties"])
    if (schema[key] !== undefined) subs.push([key, schema[key]]);
  for (const [path, sub] of subs) {
    const refused = checkJsonSchema(sub, `${at}.${path}`);
    if (refused) return refused;
  }
  return undefined;
}

/** Four characters a token, like the gateway's own estimate: enough for the fake's count. */
function countedTokens(body: Json): number {
  const text = JSON.stringify(body.generateContentRequest ?? body.contents ?? "");
  let chars = 0;
  for (const match of text.matchAll(/"text":"((?:[^"\\]|\\.)*)"/g)) chars += match[1].length;
  return Math.max(1, Math.ceil(chars / 4));
}
