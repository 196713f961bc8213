import type { IncomingHttpHeaders } from "node:http";

/**
 * The request rules the fake upstreams enforce, as the real APIs do, each refusal with the real
 * API's status and body shape: roles, tool-call pairing, the output-limit maximum, (Anthropic)
 * mid-conversation system messages, message threads and the schema keywords structured outputs
 * refuse, prompt caching's markers (Anthropic's four `cache_control` blocks, their type, lifetimes
 * and order; OpenAI's `prompt_cache_breakpoint` and `prompt_cache_options` values), extended
 * thinking's budget and signed blocks (a tool loop continued with thinking on starts its assistant
 * turn with them), each API's refusal of the other's fields (and Anthropic's of service tiers it
 * does not have), and (OpenAI's chat) at most four stop sequences, its service tiers, a
 * `tool_choice` only beside `tools`, and the rules of strict schemas.
 */

export interface WireRules {
  /** The model's maximum output: a larger max_tokens is refused with the real 400. */
  maxOutputTokens: number;
  /**
   * The Completions API's server: OpenAI's (the default) takes its own fields only and at most four
   * stop sequences; vLLM's takes any number of stop sequences and its own sampling fields.
   */
  completions?: "openai" | "vllm";
  /**
   * Fields the server refuses as unknown, on chat and the Completions API alike, with vLLM's 400
   * (`extra_forbidden`): vLLM before 0.4.3 refused every field its request model did not declare,
   * and had no `stream_options`.
   */
  unknownFields?: string[];
}

export const defaultRules: WireRules = { maxOutputTokens: 64_000 };

export type Refusal = { status: number; body: unknown };

type Json = Record<string, unknown>;

const isRecord = (v: unknown): v is Json =>
  typeof v === "object" && v !== null && !Array.isArray(v);
const blocks = (content: unknown): Json[] =>
  Array.isArray(content) ? content.filter(isRecord) : [];

// ---- Anthropic Messages ----------------------------------------------------------

const MID_CONVERSATION_SYSTEM = "mid-conversation-system-2026-04-07";
const MESSAGE_THREADS = "message-threads-2026-08-12";

const anthropicRefusal = (message: string, status = 400, details?: Json): Refusal => ({
  status,
  body: {
    type: "error",
    error: {
      type: status === 404 ? "not_found_error" : "invalid_request_error",
      message,
      ...(details ? { details } : {}),
    },
  },
});

function betas(headers: IncomingHttpHeaders): string[] {
  const raw = headers["anthropic-beta"];
  const value = Array.isArray(raw) ? raw.join(",") : (raw ?? "");
  return value
    .split(",")
    .map((b) => b.trim())
    .filter(Boolean);
}

/** One turn a thread holds: what the model saw, and the reply's tool calls and text. */
export interface ThreadTurn {
  messages: Json[];
  system: unknown;
  tools: unknown;
}

/**
 * Thinking the fake answered with: its text, and the order of its answer's thinking and tool
 * calls (`answeredOrder`), which Anthropic requires of the latest assistant turn sent back.
 */
export interface SignedThinking {
  text: string;
  order: string[];
}

/**
 * The order of an answer's blocks that a later turn must keep: its thinking (by signature),
 * redacted thinking (by data) and tool calls (by id). Text is not in it: a client may join it.
 */
export function answeredOrder(content: unknown): string[] {
  const out: string[] = [];
  for (const block of blocks(content)) {
    if (block.type === "thinking") out.push(`thinking ${String(block.signature)}`);
    else if (block.type === "redacted_thinking") out.push(`redacted ${String(block.data)}`);
    else if (block.type === "tool_use") out.push(`tool_use ${String(block.id)}`);
  }
  return out;
}

/**
 * The whole conversation an Anthropic request stands for: its messages, after the history its
 * thread holds when it continues one. A refusal when the request breaks a rule. `signed`: the
 * thinking the fake answered with, by its signature.
 */
export function checkAnthropic(
  body: Json,
  headers: IncomingHttpHeaders,
  rules: WireRules,
  threads: Map<string, ThreadTurn>,
  signed: ReadonlyMap<string, SignedThinking> = new Map(),
): { refusal: Refusal } | { conversation: ThreadTurn } {
  const enabled = betas(headers);
  const maxTokens = body.max_tokens;
  if (typeof maxTokens !== "number" || !Number.isInteger(maxTokens) || maxTokens < 1)
    return { refusal: anthropicRefusal("max_tokens: Field required") };
  if (maxTokens > rules.maxOutputTokens) {
    return {
      refusal: anthropicRefusal(
        `max_tokens: ${maxTokens} > ${rules.maxOutputTokens}, which is the maximum allowed number of output tokens for ${String(body.model)}`,
      ),
    };
  }
  if (!Array.isArray(body.messages))
    return { refusal: anthropicRefusal("messages: Field required") };
  const choiceRefused =
    openaiFieldIn(body) ??
    checkAnthropicToolChoice(body) ??
    checkThinking(body, maxTokens) ??
    checkCacheControl(body);
  if (choiceRefused) return { refusal: anthropicRefusal(choiceRefused) };
  const outputConfig = isRecord(body.output_config) ? body.output_config : {};
  const format = isRecord(outputConfig.format) ? outputConfig.format : undefined;
  if (format?.type === "json_schema") {
    const refused = refusedSchemaKeywords(format.schema, "output_config.format.schema");
    if (refused) return { refusal: anthropicRefusal(refused) };
  }

  let history: Json[] = [];
  let system = body.system;
  let tools = body.tools;
  const thread = body.thread;
  if (thread !== undefined && thread !== null) {
    if (!enabled.includes(MESSAGE_THREADS))
      return { refusal: anthropicRefusal("thread: Extra inputs are not permitted") };
    if (!isRecord(thread) || (thread.type !== "create" && thread.type !== "continue"))
      return { refusal: anthropicRefusal("thread.type: Input should be 'create' or 'continue'") };
    if (thread.type === "continue") {
      const held = threads.get(String(thread.previous_message_id));
      if (!held) {
        return {
          refusal: anthropicRefusal(
            "No usable Thread state was found for `previous_message_id`.",
            404,
            { error_code: "thread_not_found" },
          ),
        };
      }
      if (body.system !== undefined || body.tools !== undefined) {
        return {
          refusal: anthropicRefusal("system, tools: set when the thread was created", 400, {
            error_code: "thread_fingerprint_mismatch",
          }),
        };
      }
      history = held.messages;
      system = held.system;
      tools = held.tools;
    }
  }

  const messages = [...history, ...(body.messages as unknown[]).filter(isRecord)];
  let previous: Json | undefined;
  for (const [i, message] of messages.entries()) {
    const role = message.role;
    if (role === "system") {
      if (!enabled.includes(MID_CONVERSATION_SYSTEM)) {
        return {
          refusal: anthropicRefusal(`messages.${i}.role: Input should be 'user' or 'assistant'`),
        };
      }
      continue;
    }
    if (role !== "user" && role !== "assistant") {
      return {
        refusal: anthropicRefusal(`messages.${i}.role: Input should be 'user' or 'assistant'`),
      };
    }
    if (!previous && role !== "user")
      return { refusal: anthropicRefusal('messages: first message must use the "user" role') };
    if (previous && previous.role === role) {
      return {
        refusal: anthropicRefusal(
          'messages: roles must alternate between "user" and "assistant", but found multiple "' +
            `${role}" roles in a row`,
        ),
      };
    }
    const asked = blocks(previous?.content)
      .filter((b) => b.type === "tool_use")
      .map((b) => String(b.id));
    const answered = blocks(message.content)
      .filter((b) => b.type === "tool_result")
      .map((b) => String(b.tool_use_id));
    const stray = answered.filter((id) => !asked.includes(id));
    if (stray.length > 0) {
      return {
        refusal: anthropicRefusal(
          `messages.${i}.content.0: unexpected \`tool_use_id\` found in \`tool_result\` blocks: ${stray.join(", ")}. Each \`tool_result\` block must have a corresponding \`tool_use\` block in the previous message.`,
        ),
      };
    }
    if (role === "user") {
      const unanswered = asked.filter((id) => !answered.includes(id));
      if (unanswered.length > 0) {
        return {
          refusal: anthropicRefusal(
            `messages.${i - 1}: \`tool_use\` ids were found without \`tool_result\` blocks immediately after: ${unanswered.join(", ")}. Each \`tool_use\` block must have a corresponding \`tool_result\` block in the next message.`,
          ),
        };
      }
    }
    previous = message;
  }
  const thinkingRefused = checkSignedThinking(body, messages, signed);
  if (thinkingRefused) return { refusal: anthropicRefusal(thinkingRefused) };
  return { conversation: { messages, system, tools } };
}

/**
 * Extended thinking's blocks as Anthropic checks them when they come back: a `thinking` block
 * with its signature (and, for one the fake signed, the very text it signed: Anthropic refuses
 * altered thinking), a `redacted_thinking` block with its data. In the latest assistant turn the
 * thinking the fake signed keeps its place among its answer's thinking and tool calls (interleaved
 * thinking: Anthropic refuses those blocks moved, e.g. all thinking put ahead of the calls). With
 * thinking on, a tool loop being continued (the last assistant turn called tools, their results
 * follow) needs that turn to start with its thinking.
 */
function checkSignedThinking(
  body: Json,
  messages: Json[],
  signed: ReadonlyMap<string, SignedThinking>,
): string | undefined {
  for (const [i, message] of messages.entries()) {
    for (const [j, block] of blocks(message.content).entries()) {
      const at = `messages.${i}.content.${j}`;
      if (block.type === "thinking") {
        const signature = block.signature;
        if (typeof signature !== "string" || signature === "")
          return `${at}.thinking.signature: Field required`;
        const held = signed.get(signature);
        if (held !== undefined && held.text !== block.thinking)
          return `${at}: Invalid \`signature\` in \`thinking\` block`;
      }
      if (block.type === "redacted_thinking" && (typeof block.data !== "string" || !block.data))
        return `${at}.redacted_thinking.data: Field required`;
    }
  }
  const last = messages.findLastIndex((m) => m.role === "assistant");
  const moved = movedThinking(messages[last]?.content, signed);
  if (moved !== undefined)
    return `messages.${last}.content.${moved}: \`thinking\` or \`redacted_thinking\` blocks in the latest assistant message cannot be modified. These blocks must remain as they were in the original response.`;
  const thinking = isRecord(body.thinking) ? body.thinking.type : undefined;
  if (thinking !== "enabled" && thinking !== "adaptive") return undefined;
  const turn = blocks(messages[last]?.content);
  const continued = blocks(messages[last + 1]?.content).some((b) => b.type === "tool_result");
  if (last === -1 || !continued || !turn.some((b) => b.type === "tool_use")) return undefined;
  const opener = String(turn[0]?.type);
  if (opener === "thinking" || opener === "redacted_thinking") return undefined;
  return `messages.${last}.content.0.type: Expected \`thinking\` or \`redacted_thinking\`, but found \`${opener}\`. When \`thinking\` is enabled, a final \`assistant\` message must start with a thinking block (preceeding the lastmost set of \`tool_use\` and \`tool_result\` blocks). We recommend you include thinking blocks from previous turns. To avoid this requirement, disable \`thinking\`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking`;
}

/**
 * Where a turn's thinking the fake signed is no longer where its answer had it, among that
 * answer's thinking and tool calls: the index of the first block out of its place, or undefined.
 */
function movedThinking(
  content: unknown,
  signed: ReadonlyMap<string, SignedThinking>,
): number | undefined {
  const turn = blocks(content);
  const keyed = turn.flatMap((block, j) => answeredOrder([block]).map((key) => ({ key, j })));
  for (const block of turn) {
    if (block.type !== "thinking") continue;
    const held = signed.get(String(block.signature));
    if (!held) continue;
    const kept = keyed.filter(({ key }) => held.order.includes(key));
    const expected = held.order.filter((key) => kept.some((sent) => sent.key === key));
    const moved = kept.find((sent, k) => sent.key !== expected[k]);
    if (moved) return moved.j;
  }
  return undefined;
}

/** OpenAI's fields, which the Messages API refuses as extra inputs (top level and on blocks). */
const openaiOnlyFields = [
  "prompt_cache_key",
  "prompt_cache_options",
  "prompt_cache_retention",
  "reasoning_effort",
  "seed",
  "verbosity",
  "prediction",
  "truncation",
  "include",
];

/** Anthropic's service tiers (OpenAI's `default`, `flex`, `priority` are not among them). */
const anthropicServiceTiers = ["auto", "standard_only"];

function openaiFieldIn(body: Json): string | undefined {
  const field = openaiOnlyFields.find((name) => name in body);
  if (field) return `${field}: Extra inputs are not permitted`;
  if ("service_tier" in body && !anthropicServiceTiers.includes(String(body.service_tier)))
    return "service_tier: Input should be 'auto' or 'standard_only'";
  for (const [i, message] of (Array.isArray(body.messages) ? body.messages : []).entries()) {
    for (const [j, block] of blocks(isRecord(message) ? message.content : []).entries()) {
      if ("prompt_cache_breakpoint" in block)
        return `messages.${i}.content.${j}.${String(block.type)}.prompt_cache_breakpoint: Extra inputs are not permitted`;
    }
  }
  return undefined;
}

/** Extended thinking: a budget of at least 1024 tokens, under `max_tokens`. */
function checkThinking(body: Json, maxTokens: number): string | undefined {
  const thinking = body.thinking;
  if (thinking === undefined) return undefined;
  if (
    !isRecord(thinking) ||
    !["enabled", "disabled", "adaptive", "between_tools"].includes(String(thinking.type))
  )
    return "thinking: Input tag does not match any of the expected tags: 'enabled', 'disabled', 'between_tools', 'adaptive'";
  if (thinking.type !== "enabled") return undefined;
  const budget = thinking.budget_tokens;
  if (typeof budget !== "number" || !Number.isInteger(budget) || budget < 1024)
    return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024";
  if (budget >= maxTokens)
    return "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size";
  return undefined;
}

/**
 * Prompt caching's markers, in the order Anthropic reads them (tools, system, messages, then the
 * top-level marker on the last block): at most four, each `ephemeral` with a lifetime of `5m` or
 * `1h`, and no `1h` marker after a `5m` one.
 */
function checkCacheControl(body: Json): string | undefined {
  const markers: [string, unknown][] = [];
  for (const [i, tool] of (Array.isArray(body.tools) ? body.tools : []).entries())
    if (isRecord(tool) && tool.cache_control != null)
      markers.push([`tools.${i}.cache_control`, tool.cache_control]);
  for (const [i, block] of blocks(body.system).entries())
    if (block.cache_control != null)
      markers.push([`system.${i}.cache_control`, block.cache_control]);
  for (const [i, message] of (Array.isArray(body.messages) ? body.messages : []).entries()) {
    for (const [j, block] of blocks(isRecord(message) ? message.content : []).entries()) {
      const at = `messages.${i}.content.${j}`;
      if (block.cache_control != null) markers.push([`${at}.cache_control`, block.cache_control]);
      for (const [k, inner] of blocks(block.content).entries())
        if (inner.cache_control != null)
          markers.push([`${at}.content.${k}.cache_control`, inner.cache_control]);
    }
  }
  if (body.cache_control != null) markers.push(["cache_control", body.cache_control]);
  let shortSeen = false;
  for (const [at, marker] of markers) {
    if (!isRecord(marker) || marker.type !== "ephemeral")
      return `${at}.type: Input should be 'ephemeral'`;
    if (marker.ttl !== undefined && marker.ttl !== "5m" && marker.ttl !== "1h")
      return `${at}.ttl: Input should be '5m' or '1h'`;
    if (marker.ttl === "1h" && shortSeen)
      return "a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block. Note that blocks are processed in the following order: `tools`, `system`, `messages`.";
    if (marker.ttl !== "1h") shortSeen = true;
  }
  if (markers.length > 4)
    return `A maximum of 4 blocks with cache_control may be provided. Found ${markers.length}.`;
  return undefined;
}

/** Anthropic's tool choices: auto, any, none, or one tool by a name among the tools sent. */
function checkAnthropicToolChoice(body: Json): string | undefined {
  const choice = body.tool_choice;
  if (choice === undefined) return undefined;
  if (!isRecord(choice) || !["auto", "any", "tool", "none"].includes(String(choice.type)))
    return "tool_choice: Input tag does not match any of the expected tags: 'auto', 'any', 'tool', 'none'";
  const names = (Array.isArray(body.tools) ? body.tools : [])
    .filter(isRecord)
    .map((tool) => tool.name);
  if (choice.type !== "none" && names.length === 0)
    return "tool_choice: tool_choice may only be specified while providing tools.";
  if (choice.type === "tool" && !names.includes(choice.name))
    return `tool_choice: Tool '${String(choice.name)}' not found in tools.`;
  return undefined;
}

const anthropicStringFormats = new Set([
  "date-time",
  "time",
  "date",
  "duration",
  "email",
  "hostname",
  "uri",
  "ipv4",
  "ipv6",
  "uuid",
]);

/**
 * What Anthropic's structured outputs refuse in a schema: numeric and string-length constraints,
 * array bounds other than minItems 0 or 1, unknown string formats, and an object that is not
 * closed with `additionalProperties: false`.
 */
function refusedSchemaKeywords(schema: unknown, at: string): string | undefined {
  if (!isRecord(schema)) return undefined;
  const type = schema.type;
  const present = (keys: string[]) => keys.filter((k) => k in schema);
  let refused: string[] = [];
  if (type === "integer" || type === "number") {
    refused = present(["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"]);
  } else if (type === "string") {
    refused = present(["minLength", "maxLength"]);
    if (typeof schema.format === "string" && !anthropicStringFormats.has(schema.format))
      refused.push("format");
  } else if (type === "array") {
    refused = present(["maxItems", "uniqueItems"]);
    if ("minItems" in schema && schema.minItems !== 0 && schema.minItems !== 1)
      refused.push("minItems");
  } else if (type === "object" && schema.additionalProperties !== false) {
    return `${at}: For 'object' type, 'additionalProperties' must be explicitly set to false`;
  }
  if (refused.length > 0)
    return `${at}: For '${String(type)}' type, properties ${refused.join(", ")} are not supported`;
  const children: [string, unknown][] = [];
  for (const key of ["properties", "$defs", "definitions"]) {
    if (isRecord(schema[key]))
      for (const [name, child] of Object.entries(schema[key]))
        children.push([`${key}.${name}`, child]);
  }
  if (schema.items !== undefined) children.push(["items", schema.items]);
  for (const key of ["anyOf", "allOf", "oneOf"]) {
    const list = schema[key];
    if (Array.isArray(list)) {
      for (const [i, child] of list.entries()) children.push([`${key}.${i}`, child]);
    }
  }
  for (const [path, child] of children) {
    const found = refusedSchemaKeywords(child, `${at}.${path}`);
    if (found) return found;
  }
  return undefined;
}

/** The first of `rules.unknownFields` in the body, refused as vLLM's pydantic models refuse it. */
export function checkUnknownFields(body: Json, rules: WireRules): Refusal | undefined {
  const field = rules.unknownFields?.find((name) => name in body);
  if (field === undefined) return undefined;
  return {
    status: 400,
    body: {
      object: "error",
      message: `[{'type': 'extra_forbidden', 'loc': ('body', '${field}'), 'msg': 'Extra inputs are not permitted', 'input': ${JSON.stringify(body[field])}}]`,
      type: "BadRequestError",
      param: null,
      code: 400,
    },
  };
}

// ---- OpenAI Chat Completions -------------------------------------------------------

const openaiRefusal = (message: string, param: string | null, code: string | null): Refusal => ({
  status: 400,
  body: { error: { message, type: "invalid_request_error", param, code } },
});

const chatRoles = new Set(["system", "developer", "user", "assistant", "tool", "function"]);

/** `reasoning_effort`'s values across OpenAI's reasoning models (the SDK's `ReasoningEffort`). */
const reasoningEfforts = ["none", "minimal", "low", "medium", "high", "xhigh", "max"];

/** Chat's service tiers (the SDK's; Anthropic's `standard_only` is not among them). */
const chatServiceTiers = ["auto", "default", "flex", "scale", "priority", "fast"];

/**
 * Anthropic's fields, and the legacy Completions API's, which Chat Completions does not take (chat's
 * `logprobs` is a boolean, checked below).
 */
const notChatFields = [
  "thinking",
  "output_config",
  "cache_control",
  "prompt",
  "suffix",
  "echo",
  "best_of",
];

/** OpenAI's chat: a breakpoint's lifetimes, and the request's cache options. */
const breakpointTtls = ["30m", "12h"];

export function checkChat(body: Json, rules: WireRules): Refusal | undefined {
  for (const field of notChatFields) {
    if (field in body)
      return openaiRefusal(`Unrecognized request argument supplied: ${field}`, null, null);
  }
  if (body.logprobs != null && typeof body.logprobs !== "boolean")
    return openaiRefusal(
      `Invalid type for 'logprobs': expected a boolean, but got ${typeof body.logprobs} instead.`,
      "logprobs",
      "invalid_type",
    );
  const tier = body.service_tier;
  if (tier !== undefined && tier !== null && !chatServiceTiers.includes(String(tier))) {
    return openaiRefusal(
      `Invalid value: '${String(tier)}'. Supported values are: ${chatServiceTiers.map((t) => `'${t}'`).join(", ")}.`,
      "service_tier",
      "invalid_value",
    );
  }
  const effort = body.reasoning_effort;
  if (effort !== undefined && effort !== null && !reasoningEfforts.includes(String(effort))) {
    return openaiRefusal(
      `Invalid value: '${String(effort)}'. Supported values are: ${reasoningEfforts.map((e) => `'${e}'`).join(", ")}.`,
      "reasoning_effort",
      "invalid_value",
    );
  }
  for (const field of ["max_tokens", "max_completion_tokens"]) {
    const value = body[field];
    if (typeof value === "number" && value > rules.maxOutputTokens) {
      return openaiRefusal(
        `${field} is too large: ${value}. This model supports at most ${rules.maxOutputTokens} completion tokens, whereas you provided ${value}.`,
        field,
        "invalid_value",
      );
    }
  }
  if (Array.isArray(body.stop) && body.stop.length > 4) {
    return openaiRefusal(
      `Invalid 'stop': array too long. Expected an array with maximum length 4, but got an array with length ${body.stop.length} instead.`,
      "stop",
      "array_above_max_length",
    );
  }
  const strictRefused = checkStrictSchemas(body);
  if (strictRefused) return strictRefused;
  if (body.tool_choice != null && !(Array.isArray(body.tools) && body.tools.length > 0))
    return openaiRefusal(
      "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.",
      "tool_choice",
      null,
    );
  if (!Array.isArray(body.messages) || body.messages.length === 0)
    return openaiRefusal("[] is too short - 'messages'", "messages", "empty_array");
  const messages = (body.messages as unknown[]).filter(isRecord);
  const cacheRefused = checkChatCaching(body, messages);
  if (cacheRefused) return cacheRefused;
  let pending: string[] = [];
  for (const [i, message] of messages.entries()) {
    const role = String(message.role);
    if (!chatRoles.has(role)) {
      return openaiRefusal(
        `Invalid value: '${role}'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.`,
        `messages[${i}].role`,
        "invalid_value",
      );
    }
    if (role === "tool") {
      const id = String(message.tool_call_id);
      if (!pending.includes(id)) {
        return openaiRefusal(
          "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.",
          `messages.[${i}].role`,
          null,
        );
      }
      pending = pending.filter((p) => p !== id);
      continue;
    }
    if (pending.length > 0) {
      return openaiRefusal(
        `An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: ${pending.join(", ")}`,
        "messages",
        null,
      );
    }
    if (role === "assistant") {
      pending = (Array.isArray(message.tool_calls) ? message.tool_calls : [])
        .filter(isRecord)
        .map((c) => String(c.id));
    }
  }
  return undefined;
}

// ---- OpenAI Completions (legacy) ---------------------------------------------------

/** The Completions API's parameters (the openai SDK's `CompletionCreateParams`). */
const completionFields = new Set([
  "model",
  "prompt",
  "best_of",
  "echo",
  "frequency_penalty",
  "logit_bias",
  "logprobs",
  "max_tokens",
  "n",
  "presence_penalty",
  "seed",
  "stop",
  "stream",
  "stream_options",
  "suffix",
  "temperature",
  "top_p",
  "user",
]);

/** vLLM's own sampling fields, which its Completions API takes beside OpenAI's. */
const vllmFields = new Set(["top_k", "min_p", "repetition_penalty", "min_tokens", "ignore_eos"]);

const isInt = (value: unknown): value is number => Number.isInteger(value);

/** A prompt as the Completions API takes it: a string, strings, token ids, or lists of them. */
function promptProblem(prompt: unknown): string | undefined {
  if (typeof prompt === "string") return undefined;
  if (!Array.isArray(prompt)) return "is not of type 'string', 'array'";
  if (prompt.length === 0) return "[] is too short";
  const ok =
    prompt.every((p) => typeof p === "string") ||
    prompt.every(isInt) ||
    prompt.every((p) => Array.isArray(p) && p.length > 0 && p.every(isInt));
  return ok ? undefined : "is not valid under any of the given schemas";
}

/**
 * The legacy Completions API's rules: its fields only (chat's `messages` is an unknown argument),
 * a prompt of text or token ids, `logprobs` 0 to 5, `best_of` 0 to 20 and at least `n`, never
 * streamed, at most four stop sequences, `stream_options` only with `stream`, and the model's
 * output limit. `rules.completions` "vllm": any number of stop sequences, and vLLM's own fields.
 */
export function checkCompletions(body: Json, rules: WireRules): Refusal | undefined {
  const vllm = rules.completions === "vllm";
  for (const field of Object.keys(body)) {
    if (!completionFields.has(field) && !(vllm && vllmFields.has(field)))
      return openaiRefusal(`Unrecognized request argument supplied: ${field}`, null, null);
  }
  if (typeof body.model !== "string" || body.model === "")
    return openaiRefusal("you must provide a model parameter", null, null);
  const prompt = promptProblem(body.prompt);
  if (prompt) return openaiRefusal(`${prompt} - 'prompt'`, "prompt", "invalid_type");
  if (body.suffix != null && typeof body.suffix !== "string")
    return openaiRefusal("is not of type 'string' - 'suffix'", "suffix", "invalid_type");
  if (body.echo != null && typeof body.echo !== "boolean")
    return openaiRefusal("is not of type 'boolean' - 'echo'", "echo", "invalid_type");
  if (body.logprobs != null && !(isInt(body.logprobs) && body.logprobs >= 0 && body.logprobs <= 5))
    return openaiRefusal(
      `${JSON.stringify(body.logprobs)} is greater than the maximum of 5 - 'logprobs'`,
      "logprobs",
      "invalid_value",
    );
  const n = body.n ?? 1;
  if (!isInt(n) || n < 1 || n > 128)
    return openaiRefusal(`${JSON.stringify(n)} is not valid - 'n'`, "n", "invalid_value");
  if (body.best_of != null) {
    if (!isInt(body.best_of) || body.best_of < 0 || body.best_of > 20)
      return openaiRefusal(
        `${JSON.stringify(body.best_of)} is greater than the maximum of 20 - 'best_of'`,
        "best_of",
        "invalid_value",
      );
    if (body.best_of < n)
      return openaiRefusal("best_of must be greater than or equal to n.", "best_of", null);
    if (body.best_of > 1 && body.stream === true)
      return openaiRefusal("Cannot stream results with best_of greater than 1.", "best_of", null);
  }
  const maxTokens = body.max_tokens;
  if (maxTokens != null && !(isInt(maxTokens) && maxTokens >= 0))
    return openaiRefusal(
      `${JSON.stringify(maxTokens)} is not valid - 'max_tokens'`,
      "max_tokens",
      "invalid_value",
    );
  if (typeof maxTokens === "number" && maxTokens > rules.maxOutputTokens)
    return openaiRefusal(
      `This model's maximum completion length is ${rules.maxOutputTokens} tokens, however you requested ${maxTokens} tokens.`,
      "max_tokens",
      "invalid_value",
    );
  const stops = body.stop;
  if (stops != null && typeof stops !== "string") {
    if (!Array.isArray(stops) || !stops.every((stop) => typeof stop === "string"))
      return openaiRefusal("is not valid under any of the given schemas - 'stop'", "stop", null);
    if (!vllm && stops.length > 4)
      return openaiRefusal(
        `[...] is too long - 'stop'. Expected at most 4 sequences, got ${stops.length}.`,
        "stop",
        "array_above_max_length",
      );
  }
  if (body.stream_options != null && body.stream !== true)
    return openaiRefusal(
      "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
      "stream_options",
      null,
    );
  return undefined;
}

/**
 * Prompt caching on chat: a part's `prompt_cache_breakpoint` is `{mode: "explicit", ttl?}` with a
 * lifetime of `30m` or `12h`; the request's `prompt_cache_options` take a mode and `30m`. A part
 * with Anthropic's `cache_control` is an unknown parameter.
 */
function checkChatCaching(body: Json, messages: Json[]): Refusal | undefined {
  const options = body.prompt_cache_options;
  if (options !== undefined) {
    const mode = isRecord(options) ? options.mode : undefined;
    const ttl = isRecord(options) ? options.ttl : undefined;
    if (!isRecord(options) || (mode !== undefined && mode !== "implicit" && mode !== "explicit"))
      return openaiRefusal(
        `Invalid value: '${String(mode)}'. Supported values are: 'implicit' and 'explicit'.`,
        "prompt_cache_options.mode",
        "invalid_value",
      );
    if (ttl !== undefined && ttl !== "30m")
      return openaiRefusal(
        `Invalid value: '${String(ttl)}'. Supported values are: '30m'.`,
        "prompt_cache_options.ttl",
        "invalid_value",
      );
  }
  for (const [i, message] of messages.entries()) {
    for (const [j, part] of blocks(message.content).entries()) {
      const at = `messages[${i}].content[${j}]`;
      if ("cache_control" in part)
        return openaiRefusal(
          `Unknown parameter: '${at}.cache_control'.`,
          `${at}.cache_control`,
          "unknown_parameter",
        );
      const breakpoint = part.prompt_cache_breakpoint;
      if (breakpoint === undefined) continue;
      if (!isRecord(breakpoint) || breakpoint.mode !== "explicit")
        return openaiRefusal(
          `Invalid value: '${String(isRecord(breakpoint) ? breakpoint.mode : breakpoint)}'. Supported values are: 'explicit'.`,
          `${at}.prompt_cache_breakpoint.mode`,
          "invalid_value",
        );
      if (breakpoint.ttl !== undefined && !breakpointTtls.includes(String(breakpoint.ttl)))
        return openaiRefusal(
          `Invalid value: '${String(breakpoint.ttl)}'. Supported values are: '30m' and '12h'.`,
          `${at}.prompt_cache_breakpoint.ttl`,
          "invalid_value",
        );
    }
  }
  return undefined;
}

/**
 * Strict structured outputs (`strict: true` on a `json_schema` response format or a function):
 * OpenAI refuses a schema whose objects do not set `additionalProperties: false` and list every
 * property in `required`, or that uses a keyword strict mode does not take.
 */
function checkStrictSchemas(body: Json): Refusal | undefined {
  const strict: [string, string, unknown][] = [];
  const format = isRecord(body.response_format) ? body.response_format : {};
  const jsonSchema = isRecord(format.json_schema) ? format.json_schema : {};
  if (format.type === "json_schema" && jsonSchema.strict === true)
    strict.push(["response_format", String(jsonSchema.name), jsonSchema.schema]);
  for (const [i, tool] of (Array.isArray(body.tools) ? body.tools : []).entries()) {
    const fn = isRecord(tool) && isRecord(tool.function) ? tool.function : {};
    if (fn.strict === true) strict.push([`tools[${i}].function`, String(fn.name), fn.parameters]);
  }
  for (const [param, name, schema] of strict) {
    const problem = strictSchemaProblem(schema, []);
    if (problem)
      return openaiRefusal(
        `Invalid schema for ${param === "response_format" ? "response_format" : "function"} '${name}': ${problem}`,
        param,
        "invalid_function_parameters",
      );
  }
  return undefined;
}

const strictUnsupported = [
  "minLength",
  "maxLength",
  "patternProperties",
  "minProperties",
  "maxProperties",
  "allOf",
  "not",
  "if",
  "then",
  "else",
];

function strictSchemaProblem(schema: unknown, at: string[]): string | undefined {
  if (!isRecord(schema)) return undefined;
  const context = `In context=(${at.map((p) => `'${p}'`).join(", ")})`;
  const unsupported = strictUnsupported.find((key) => key in schema);
  if (unsupported) return `${context}, '${unsupported}' is not permitted.`;
  if (schema.type === "object" || isRecord(schema.properties)) {
    if (schema.additionalProperties !== false)
      return `${context}, 'additionalProperties' is required to be supplied and to be false.`;
    const properties = isRecord(schema.properties) ? schema.properties : {};
    const required = Array.isArray(schema.required) ? schema.required : [];
    const missing = Object.keys(properties).find((name) => !required.includes(name));
    if (missing !== undefined)
      return `${context}, 'required' is required to be supplied and to be an array including every key in properties. Missing '${missing}'.`;
    for (const [name, child] of Object.entries(properties)) {
      const problem = strictSchemaProblem(child, [...at, "properties", name]);
      if (problem) return problem;
    }
  }
  if (schema.items !== undefined) return strictSchemaProblem(schema.items, [...at, "items"]);
  for (const [i, child] of (Array.isArray(schema.anyOf) ? schema.anyOf : []).entries()) {
    const problem = strictSchemaProblem(child, [...at, "anyOf", String(i)]);
    if (problem) return problem;
  }
  return undefined;
}

// ---- OpenAI Responses (a provider that speaks it natively) -------------------------------

/** The parameters of OpenAI's POST /v1/responses/compact (the SDK's ResponseCompactParams). */
const compactParams = new Set([
  "model",
  "input",
  "instructions",
  "previous_response_id",
  "prompt_cache_key",
  "prompt_cache_options",
  "prompt_cache_retention",
  "service_tier",
  "image",
]);

/**
 * POST /v1/responses/compact as OpenAI checks it: only its own parameters, a model, and a
 * conversation (`input`, a held `previous_response_id`, or both) whose items it can read.
 */
export function checkCompact(
  body: Json,
  held: Map<string, Json[]>,
): { refusal: Refusal } | { items: Json[] } {
  const unknown = Object.keys(body).find((field) => !compactParams.has(field));
  if (unknown !== undefined)
    return {
      refusal: openaiRefusal(`Unknown parameter: '${unknown}'.`, unknown, "unknown_parameter"),
    };
  if (typeof body.model !== "string" || body.model === "")
    return { refusal: openaiRefusal("Missing required parameter: 'model'.", "model", null) };
  if (body.input == null && body.previous_response_id == null)
    return {
      refusal: openaiRefusal(
        "Either 'input' or 'previous_response_id' must be provided.",
        "input",
        null,
      ),
    };
  return checkResponses(body, held);
}

/**
 * The whole input a Responses request stands for (the chain its `previous_response_id` names,
 * as the fake holds it, then its own input), or the real API's refusal: an unknown previous
 * response, a conversation it does not hold (the fake holds none), a function call output with no
 * function call before it.
 */
export function checkResponses(
  body: Json,
  held: Map<string, Json[]>,
): { refusal: Refusal } | { items: Json[] } {
  let history: Json[] = [];
  const previous = body.previous_response_id;
  if (previous !== undefined && previous !== null) {
    const chain = held.get(String(previous));
    if (!chain) {
      return {
        refusal: {
          status: 400,
          body: {
            error: {
              message: `Previous response with id '${String(previous)}' not found.`,
              type: "invalid_request_error",
              param: "previous_response_id",
              code: "previous_response_not_found",
            },
          },
        },
      };
    }
    history = chain;
  }
  if (body.conversation !== undefined && body.conversation !== null) {
    const id = isRecord(body.conversation) ? body.conversation.id : body.conversation;
    return {
      refusal: {
        status: 404,
        body: {
          error: {
            message: `Conversation with id '${String(id)}' not found.`,
            type: "invalid_request_error",
            param: null,
            code: null,
          },
        },
      },
    };
  }
  // The discounted completion windows run queued only (openai 7.59's `background_options`).
  const options = body.background_options;
  if (isRecord(options) && body.background !== true) {
    const window = options.completion_window;
    if (window !== undefined && window !== "soonest") {
      return {
        refusal: openaiRefusal(
          `The completion window '${String(window)}' requires 'background' to be true.`,
          "background_options.completion_window",
          null,
        ),
      };
    }
  }
  const written =
    typeof body.input === "string"
      ? [{ type: "message", role: "user", content: body.input }]
      : Array.isArray(body.input)
        ? body.input.filter(isRecord)
        : [];
  // An item_reference is looked up among the items of the key's stored responses.
  const known = new Map<unknown, Json>();
  for (const chain of held.values()) for (const item of chain) known.set(item.id, item);
  const input: Json[] = [];
  for (const item of written) {
    if (item.type !== "item_reference") {
      input.push(item);
      continue;
    }
    const found = known.get(item.id);
    if (!found) {
      return {
        refusal: {
          status: 404,
          body: {
            error: {
              message: `Item with id '${String(item.id)}' not found.`,
              type: "invalid_request_error",
              param: "input",
              code: null,
            },
          },
        },
      };
    }
    input.push(found);
  }
  const items = [...history, ...input];
  // Encrypted reasoning and compactions open only where they were made: OpenAI's are tokens of
  // its own (`gAAAA`...).
  for (const item of input) {
    const encrypted =
      item.type === "reasoning" || item.type === "compaction" ? item.encrypted_content : undefined;
    if (typeof encrypted === "string" && !encrypted.startsWith("gAAAA")) {
      return {
        refusal: openaiRefusal(
          `The encrypted content ${encrypted.slice(0, 8)}... could not be verified. Reason: Encrypted content could not be decrypted or parsed.`,
          null,
          "invalid_encrypted_content",
        ),
      };
    }
  }
  const calls = new Set<string>();
  for (const item of items) {
    if (item.type === "function_call") calls.add(String(item.call_id));
    if (item.type === "function_call_output" && !calls.has(String(item.call_id))) {
      return {
        refusal: openaiRefusal(
          `No tool call found for function call output with call_id ${String(item.call_id)}.`,
          "input",
          null,
        ),
      };
    }
  }
  return { items };
}
