import { answersAsked } from "../to-provider.js";
import { estimateRequestTokens, type Usage } from "../usage.js";
import { isRecord, type JsonObject } from "./shared.js";

/*
 * OpenAI's legacy Completions API (POST /v1/completions, the openai SDK's `completions.create`),
 * which editor autocomplete still calls, answered through chat: the prompt goes as one user
 * message, so every wire the chat route reaches serves it, and the chat answer comes back as
 * `text_completion` objects, whole or streamed. What only the Completions API carries (`suffix`,
 * `echo`, ...: `textOnlyAsked`) goes to a provider that serves that API itself, which is sent the
 * client's body as written (`providers/openai/completions.ts`), or to the mock, which fills in.
 */

/** The Completions API's fields that chat has no form for, or that chat reads another way. */
const legacyOnly = ["prompt", "suffix", "echo", "logprobs", "best_of"] as const;

/**
 * Chat's fields that ask for an answer a `text_completion` has no place for (tool calls, audio)
 * or that would replace the prompt: a client sending them meant /v1/chat/completions.
 */
const chatOnly = [
  "messages",
  "tools",
  "tool_choice",
  "functions",
  "function_call",
  "audio",
  "modalities",
];

/**
 * What a Completions request asks for that no provider can answer (chat's own fields, an empty
 * list of prompts), as the sentence of its 400 naming the parameter and what to do; undefined
 * otherwise. What only some providers carry is `textOnlyAsked`'s.
 */
export function textCompletionRefusal(body: JsonObject): string | undefined {
  const { prompt } = body;
  if (Array.isArray(prompt) && prompt.length === 0)
    return "`prompt` has 0 strings: send the text to complete as a string.";
  const field = chatOnly.find((name) => body[name] != null);
  if (field)
    return `\`${field}\` is a /v1/chat/completions field: /v1/completions answers a \`prompt\` with text only. Send the request to /v1/chat/completions.`;
  return undefined;
}

/**
 * A field of the Completions API that a chat translation cannot carry. A provider that serves the
 * API itself carries them all; one answering through chat, those it names
 * (`Provider.textCompletions`: the mock fills in the middle and echoes).
 */
export type TextOnlyField = "suffix" | "echo" | "logprobs" | "best_of" | "prompt";

/** One such field as a request uses it, with its refusal toward a model that cannot carry it. */
export interface TextOnlyAsk {
  field: TextOnlyField;
  /** The 400's sentence for `target` (a model or route name), naming the field and what to do. */
  refusal(target: string): string;
}

/**
 * How the refusal of a field only the Completions API carries ends: the provider option that
 * makes a model's server answer it itself.
 */
const nativeHint =
  "Or, where the model's server speaks the Completions API itself (vLLM, llama.cpp's server, DeepSeek's beta, Together, Fireworks), set `completions_native: true` on its provider in the gateway's config: the request then goes to that server as written.";

/** What a Completions request asks for beyond chat, in the order its parameters are read. */
export function textOnlyAsked(body: JsonObject): TextOnlyAsk[] {
  const asked: TextOnlyAsk[] = [];
  const ask = (field: TextOnlyField, sentence: (target: string) => string) =>
    asked.push({ field, refusal: (target) => `${sentence(target)} ${nativeHint}` });
  const { prompt } = body;
  if (Array.isArray(prompt)) {
    if (prompt.some((item) => typeof item !== "string"))
      ask(
        "prompt",
        (target) =>
          `\`prompt\` as token ids is not supported by "${target}": it answers through chat, which takes text, and token ids are a tokenizer's own. Send \`prompt\` as a string.`,
      );
    else if (prompt.length > 1)
      ask(
        "prompt",
        (target) =>
          `\`prompt\` has ${prompt.length} strings; "${target}" answers through chat, one prompt a request (as one user message). Send \`prompt\` as one string, and each other prompt as a request of its own (\`n\` asks for several answers to one prompt).`,
      );
  }
  // An empty suffix is taken as none, as OpenAI takes it.
  if (typeof body.suffix === "string" && body.suffix !== "")
    ask(
      "suffix",
      (target) =>
        `\`suffix\` (fill-in-the-middle) is not supported by "${target}": it answers through chat, which takes no text after the insertion point. Leave out \`suffix\`, or put the text around the insertion point in \`prompt\`.`,
    );
  if (body.echo === true)
    ask(
      "echo",
      (target) =>
        `\`echo: true\` is not supported by "${target}": it answers through chat, whose models do not repeat their prompt. Leave out \`echo\` and put the prompt before the answer's \`text\` yourself.`,
    );
  if (typeof body.logprobs === "number")
    ask(
      "logprobs",
      (target) =>
        `\`logprobs\` is not supported by "${target}": it answers through chat, whose models give the log probabilities of their answer in chat's shape only. Leave out \`logprobs\`, or ask /v1/chat/completions with \`logprobs: true\` and \`top_logprobs\`.`,
    );
  if (typeof body.best_of === "number" && body.best_of > 1)
    ask(
      "best_of",
      (target) =>
        `\`best_of\` above 1 is not supported by "${target}": it answers through chat, whose models do not rank candidate answers by their log probabilities. Leave out \`best_of\`, or ask for several answers with \`n\` and choose one yourself.`,
    );
  return asked;
}

/**
 * How many prompts a Completions body sends: a list of strings, or of token-id lists, is one each;
 * a string, or one list of token ids, is one.
 */
function promptCount(prompt: unknown): number {
  if (!Array.isArray(prompt) || prompt.length === 0) return 1;
  return prompt.every((item) => typeof item === "number") ? 1 : prompt.length;
}

/** The choices a Completions answer has: `n` for each prompt, each finished on its own. */
export function textChoicesAsked(body: JsonObject): number {
  return promptCount(body.prompt) * answersAsked(body);
}

/**
 * The answers a Completions request makes its provider write, and so is held for: `best_of`
 * candidates (at least `n`) for each prompt, each billed though only `n` come back.
 */
export function textAnswersMade(body: JsonObject): number {
  const candidates = answersAsked({ n: body.best_of });
  return promptCount(body.prompt) * Math.max(answersAsked(body), candidates);
}

/**
 * The input of a Completions body as tokens, where its provider reports none: its text by the
 * gateway's estimate, and a token for each token id of a prompt given as ids.
 */
export function textCompletionInputTokens(body: JsonObject): number {
  const ids = (value: unknown): number =>
    Array.isArray(value)
      ? value.reduce((sum: number, item) => sum + (typeof item === "number" ? 1 : ids(item)), 0)
      : 0;
  return estimateRequestTokens(body) + ids(body.prompt);
}

/**
 * The chat body of a Completions request `textCompletionRefusal` passed: its prompt as one user
 * message, and every field chat shares with it (`max_tokens`, `stop`, `n`, `temperature`,
 * `top_p`, `seed`, `user`, the penalties, `logit_bias`, `stream` and `stream_options`) carried as
 * written, as are a provider's own extensions (vLLM's `top_k`...), which chat carries too.
 */
export function textCompletionToChat(body: JsonObject): ChatOfPrompt {
  const chat: JsonObject = {};
  for (const [field, value] of Object.entries(body))
    if (!(legacyOnly as readonly string[]).includes(field)) chat[field] = value;
  const prompt = Array.isArray(body.prompt) ? body.prompt[0] : body.prompt;
  return {
    ...chat,
    model: String(body.model),
    messages: [{ role: "user", content: String(prompt) }],
  };
}

/** A chat body of one user message. */
type ChatOfPrompt = JsonObject & { model: string; messages: { role: "user"; content: string }[] };

/** A chat answer (JSON) as a `text_completion`, its usage what the request is billed. */
export function chatToTextCompletion(answer: unknown, billed: Usage): JsonObject {
  const chat = isRecord(answer) ? answer : {};
  const shown = isRecord(chat.usage) ? chat.usage : {};
  return {
    ...common(chat),
    choices: (Array.isArray(chat.choices) ? chat.choices : []).map((choice, i) =>
      textChoice(isRecord(choice) ? choice : {}, "message", i),
    ),
    usage: {
      ...shown,
      prompt_tokens: billed.input_tokens,
      completion_tokens: billed.output_tokens,
      total_tokens: billed.input_tokens + billed.output_tokens,
    },
  };
}

/**
 * A chat chunk, as the chat relay made it for the client (its model and usage the client's), as a
 * `text_completion` chunk. The relay turns each chunk into this before it encodes it, so a chunk
 * is read and encoded once. A chunk with no choices list is no chat chunk: it goes as it came.
 */
export function textCompletionChunk(chunk: JsonObject): JsonObject {
  if (!Array.isArray(chunk.choices)) return chunk;
  const out: JsonObject = {
    ...common(chunk),
    choices: chunk.choices.map((choice, i) =>
      textChoice(isRecord(choice) ? choice : {}, "delta", i),
    ),
  };
  // A client that asked for usage gets it (and chat's `usage: null` before it) where chat has it.
  if ("usage" in chunk) out.usage = chunk.usage;
  return out;
}

/** What a chat answer and each of its chunks tell a `text_completion` besides its choices. */
function common(chat: JsonObject): JsonObject {
  const id = typeof chat.id === "string" ? chat.id : "";
  const out: JsonObject = {
    // OpenAI's completions are `cmpl-...` where its chat completions are `chatcmpl-...`.
    id: id.startsWith("chatcmpl-") ? `cmpl-${id.slice("chatcmpl-".length)}` : id,
    object: "text_completion",
    created: chat.created,
    model: chat.model,
  };
  if (typeof chat.system_fingerprint === "string") out.system_fingerprint = chat.system_fingerprint;
  return out;
}

/**
 * A chat choice (its `message`, or a chunk's `delta`) as a completion's: its text (a refusal is the
 * model's text too: a completion has no place apart for it), and a finish reason the Completions
 * API has (a tool call's cannot come: the request declares no tools).
 */
function textChoice(choice: JsonObject, part: "message" | "delta", i: number): JsonObject {
  const said = isRecord(choice[part]) ? choice[part] : {};
  const text = [said.content, said.refusal].filter((t) => typeof t === "string").join("");
  const finish = choice.finish_reason;
  return {
    text,
    index: typeof choice.index === "number" ? choice.index : i,
    logprobs: null,
    finish_reason:
      finish == null ? null : finish === "length" || finish === "content_filter" ? finish : "stop",
  };
}
