/**
 * Response: Gemini's `GenerateContentResponse` -> an OpenAI chat completion, and a stream of them
 * (each SSE event is a whole GenerateContentResponse holding the next piece) -> chat chunks.
 * `wire/to-client.ts` takes the chat shapes on to the client's style.
 */

import type {
  ChatChoice,
  ChatCompletionChunk,
  ChatCompletionResponse,
  ChatFinishReason,
  ChatToolCall,
  ChatUsage,
} from "../../wire/openai-types.js";
import { StreamBroken } from "../../wire/to-client.js";
import { nowSeconds, randomId } from "../../wire/translate/shared.js";
import { UpstreamFailure } from "../../wire/upstream-failure.js";
import type { FunctionNames } from "./function-names.js";
import type {
  GeminiCandidate,
  GeminiPart,
  GeminiUsageMetadata,
  GenerateContentResponse,
} from "./gemini-types.js";
import { callIdFor } from "./tool-call-ids.js";

const filtered = new Set([
  "SAFETY",
  "RECITATION",
  "BLOCKLIST",
  "PROHIBITED_CONTENT",
  "SPII",
  "IMAGE_SAFETY",
  "LANGUAGE",
]);

/**
 * Finishes that mean the answer broke: a function call Gemini could not write out whole, one to a
 * function the request did not offer, or more calls than it may make. The candidate then holds no
 * call, and often nothing at all: passed on, it would be an empty turn that looks finished. It is
 * the provider failing: the client gets the spec's 503 `upstream_error`, which the SDKs retry (a
 * malformed call seldom comes twice), and a route tries its next step.
 */
const brokenFinishes = new Set([
  "MALFORMED_FUNCTION_CALL",
  "UNEXPECTED_TOOL_CALL",
  "TOO_MANY_TOOL_CALLS",
]);

const broke = (candidate: GeminiCandidate) => brokenFinishes.has(candidate.finishReason ?? "");

/** Gemini's finish reason as chat's; a choice that called a function finishes `tool_calls`. */
export function finishReasonOf(reason: string, calledTool: boolean): ChatFinishReason {
  if (reason === "MAX_TOKENS") return "length";
  if (filtered.has(reason)) return "content_filter";
  return calledTool ? "tool_calls" : "stop";
}

/**
 * Usage as chat reports it: thinking is output the model was paid to produce, and a tool's
 * prompt (`toolUsePromptTokenCount`) is input.
 */
export function chatUsageOf(usage: GeminiUsageMetadata): ChatUsage {
  const prompt = (usage.promptTokenCount ?? 0) + (usage.toolUsePromptTokenCount ?? 0);
  const thoughts = usage.thoughtsTokenCount ?? 0;
  const completion = (usage.candidatesTokenCount ?? 0) + thoughts;
  const out: ChatUsage = {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    prompt_tokens_details: { cached_tokens: usage.cachedContentTokenCount ?? 0 },
  };
  if (thoughts > 0) out.completion_tokens_details = { reasoning_tokens: thoughts };
  return out;
}

/**
 * A prompt Gemini refused to answer comes back as a 200 without candidates; the client sees the
 * spec's content-policy rejection, and a route moves on to its next step.
 */
function refusePromptBlock(resp: GenerateContentResponse): void {
  if (resp.promptFeedback?.blockReason && !resp.candidates?.length)
    throw new UpstreamFailure("rejected", 400, "content_policy_violation");
}

/** What the request said about the calls an answer may hold. */
export interface AnswerCalls {
  /** The client's names for the functions Gemini was told of under others. */
  names?: FunctionNames;
  /**
   * The client asked for at most one call a turn (`parallel_tool_calls: false`), which Gemini has
   * no setting for: each choice keeps its first call, the one that carries the turn's thought
   * signature, and the model makes the next on the turn after, as OpenAI's models do.
   */
  oneCall?: boolean;
}

interface PartsText {
  content: string;
  reasoning: string;
  calls: ChatToolCall[];
}

/** A candidate's parts; `room` is how many more calls it may make. */
function readParts(
  parts: GeminiPart[] | undefined,
  { names }: AnswerCalls,
  room = Number.POSITIVE_INFINITY,
): PartsText {
  const out: PartsText = { content: "", reasoning: "", calls: [] };
  for (const part of parts ?? []) {
    if (part.functionCall) {
      if (out.calls.length >= room) continue;
      out.calls.push({
        id: callIdFor(part.thoughtSignature),
        type: "function",
        function: {
          name: names?.toClient(part.functionCall.name) ?? part.functionCall.name,
          arguments: JSON.stringify(part.functionCall.args ?? {}),
        },
      });
    } else if (typeof part.text === "string") {
      if (part.thought) out.reasoning += part.text;
      else out.content += part.text;
    }
  }
  return out;
}

function responseId(resp: GenerateContentResponse): string {
  return resp.responseId ? `chatcmpl-${resp.responseId}` : randomId("chatcmpl-");
}

export function geminiToChat(
  resp: GenerateContentResponse,
  model: string,
  answerCalls: AnswerCalls = {},
): ChatCompletionResponse {
  refusePromptBlock(resp);
  // Neither an answer nor a refusal: the provider failed, and a route may try its next step.
  if (!resp.candidates?.length || resp.candidates.some(broke))
    throw new UpstreamFailure("unavailable", 502);
  const choices: ChatChoice[] = (resp.candidates ?? []).map((candidate, i) => {
    const { content, reasoning, calls } = readParts(
      candidate.content?.parts,
      answerCalls,
      answerCalls.oneCall ? 1 : undefined,
    );
    // `refusal` is a required field of chat's message (OpenAI's schema and SDK): Gemini has none.
    const message: ChatChoice["message"] = {
      role: "assistant",
      content: content || null,
      refusal: null,
    };
    if (reasoning) message.reasoning_content = reasoning;
    if (calls.length > 0) message.tool_calls = calls;
    return {
      index: candidate.index ?? i,
      message,
      logprobs: null,
      finish_reason: finishReasonOf(candidate.finishReason ?? "STOP", calls.length > 0),
    };
  });
  const out: ChatCompletionResponse = {
    id: responseId(resp),
    object: "chat.completion",
    created: nowSeconds(),
    model,
    choices,
  };
  if (resp.usageMetadata) out.usage = chatUsageOf(resp.usageMetadata);
  return out;
}

/**
 * A Gemini stream's events, one at a time, as chat chunks. Gemini sends a function call whole,
 * in one event, so each becomes one tool-call delta with its name and all its arguments. Usage
 * is cumulative on every event; the last one's goes out as chat's usage chunk after the finish.
 */
export class GeminiStreamToChat {
  private readonly id = randomId("chatcmpl-");
  private readonly created = nowSeconds();
  /** Per choice: whether its role went out, and how many tool calls it made. */
  private readonly started = new Set<number>();
  private readonly calls = new Map<number, number>();
  usage: GeminiUsageMetadata | undefined;

  constructor(
    private readonly model: string,
    private readonly answerCalls: AnswerCalls = {},
  ) {}

  /**
   * Gemini reports a failure after the 200 as an event holding `error`, and an answer that broke
   * as its finish (`brokenFinishes`): either way the stream breaks.
   */
  push(resp: GenerateContentResponse): ChatCompletionChunk[] {
    if ("error" in resp) throw new StreamBroken("upstream sent an error event");
    if (this.started.size === 0) refusePromptBlock(resp);
    if (resp.candidates?.some(broke)) throw new StreamBroken("the model's answer broke");
    if (resp.usageMetadata) this.usage = resp.usageMetadata;
    const chunks: ChatCompletionChunk[] = [];
    for (const [i, candidate] of (resp.candidates ?? []).entries()) {
      chunks.push(...this.candidateChunks(candidate, candidate.index ?? i));
    }
    return chunks;
  }

  /**
   * Chat's usage chunk, once the stream is over: Gemini's last report, or none of its counts where
   * it sent no usage. The chunk is there either way, so a chat client that asked for usage is
   * shown what the stream is billed (the gateway writes its own chunks' usage), and a report of
   * nothing is no report to the meter.
   */
  finish(): ChatCompletionChunk[] {
    return [{ ...this.base(), choices: [], usage: chatUsageOf(this.usage ?? {}) }];
  }

  private base(): { id: string; object: "chat.completion.chunk"; created: number; model: string } {
    return {
      id: this.id,
      object: "chat.completion.chunk",
      created: this.created,
      model: this.model,
    };
  }

  private candidateChunks(candidate: GeminiCandidate, index: number): ChatCompletionChunk[] {
    const chunks: ChatCompletionChunk[] = [];
    const before = this.calls.get(index) ?? 0;
    const { content, reasoning, calls } = readParts(
      candidate.content?.parts,
      this.answerCalls,
      this.answerCalls.oneCall ? 1 - before : undefined,
    );
    const delta: ChatCompletionChunk["choices"][number]["delta"] = {};
    if (!this.started.has(index)) {
      this.started.add(index);
      delta.role = "assistant";
    }
    if (content) delta.content = content;
    if (reasoning) delta.reasoning_content = reasoning;
    if (calls.length > 0) {
      delta.tool_calls = calls.map((call, k) => ({ index: before + k, ...call }));
      this.calls.set(index, before + calls.length);
    }
    if (Object.keys(delta).length > 0) {
      chunks.push({
        ...this.base(),
        choices: [{ index, delta, logprobs: null, finish_reason: null }],
      });
    }
    if (candidate.finishReason) {
      const called = (this.calls.get(index) ?? 0) > 0;
      chunks.push({
        ...this.base(),
        choices: [
          {
            index,
            delta: {},
            logprobs: null,
            finish_reason: finishReasonOf(candidate.finishReason, called),
          },
        ],
      });
    }
    return chunks;
  }
}
