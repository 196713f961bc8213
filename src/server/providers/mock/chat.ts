import { createHash, randomBytes } from "node:crypto";
import { providerOptions } from "../../../store/provider-options.js";
import type { ErrorCode } from "../../errors.js";
import type { GoneSignal } from "../../time/gone-signal.js";
import { sleep } from "../../time/sleep.js";
import type { CompletionRequest, CompletionResult } from "../../wire/completion-types.js";
import type {
  ChatCompletionChunk,
  ChatCompletionResponse,
  ChatUsage,
} from "../../wire/openai-types.js";
import { fromChatChunks, fromChatJson } from "../../wire/to-client.js";
import { answersAsked, type Rewrite, toChatRequest, withRewrite } from "../../wire/to-provider.js";
import {
  ExplainedRejection,
  UnsupportedRequest,
  UpstreamFailure,
} from "../../wire/upstream-failure.js";
import { estimateTokens, StreamMeter } from "../../wire/usage.js";
import { failureOf } from "../classify.js";
import { scriptedAnswers } from "../mock-script.js";
import type { Attempt, ProviderContext } from "../provider.js";
import {
  MockDirectiveError,
  type MockPlan,
  type MockTiming,
  mockFailure,
  mockRefusal,
  mockSummary,
  planMockReply,
} from "./mock-chat.js";
import { type MockFill, mockFillOf } from "./mock-fill.js";
import { mockLogprobs, mockLogprobsWanted, mockTokenLogprob } from "./mock-logprobs.js";

/** Answers chat-style requests; wire/to-client.ts gives each client its own style. */
export async function mockComplete(
  { mockScript, options }: ProviderContext,
  attempt: Attempt,
  req: CompletionRequest,
): Promise<CompletionResult> {
  const timing = (providerOptions(attempt.provider).mock ?? {}) as MockTiming;
  const rewrite: Rewrite = { omittedTools: [] };
  const chatReq = toChatRequest(req, attempt, rewrite);
  // A legacy completion: where its text goes in, and whether its prompt comes back first.
  const text = req.textCompletion;
  const fill = text && mockFillOf(text);
  // As the real API's refusal reaches a client through the gateway: a 400 rejection, its reason
  // given, nothing charged. A legacy completion takes any number of stop sequences, as vLLM and
  // llama.cpp's server do: an editor's autocomplete sends a dozen.
  const refusal = mockRefusal(
    req.style,
    req.body,
    chatReq,
    text ? Number.POSITIVE_INFINITY : undefined,
  );
  if (refusal) throw new ExplainedRejection(400, refusal);
  const count = answersAsked(chatReq);
  // LiteLLM's `mock_response`: the answer is that text, ahead of any script or directive. A
  // compaction's summary is the mock's own, as deterministic as its other answers.
  const mocked = req.compaction
    ? mockSummary(chatReq)
    : (req.body as { mock_response?: unknown }).mock_response;
  const scripted =
    (typeof mocked === "string" && scriptedAnswers({ text: mocked }, chatReq, count)) ||
    (mockScript.active &&
      mockScript.answers([attempt.model.name, attempt.model.upstream_model], chatReq, count));
  // Several answers (`n`) as providers give them: each its own words, all in the usage.
  const planned =
    scripted ||
    Array.from({ length: count }, (_, i) =>
      i === 0 ? planOrRefuse(chatReq, fill) : planMockReply(chatReq, i, fill),
    );
  const prompt = chatReq.messages[0]?.content;
  const answers =
    text?.echo === true && typeof prompt === "string"
      ? planned.map((plan) => echoed(plan, prompt))
      : planned;
  const [plan] = answers;
  if (plan.directives.tool !== undefined && !plan.toolCalls?.length && asksForTool(chatReq)) {
    // Answering plain text would let a tool loop under test pass without ever calling a tool.
    throw new UnsupportedRequest(
      "[[mock:tool]] asks the mock for a tool call, but the request declares no tools; add `tools` to the request.",
    );
  }
  // A requested delay is prefill time: before the first token of a stream, before the whole answer otherwise.
  await sleep(
    (timing.latency_ms ?? 0) + (req.stream ? 0 : (plan.directives.delay ?? 0)),
    req.signal,
  );
  const failure = mockFailure(plan, timing);
  if (failure) {
    // A reason names the rejection whatever the status; a status alone means what a live
    // provider's does.
    if (failure.reason)
      throw new UpstreamFailure("rejected", failure.status, failure.reason as ErrorCode);
    throw failureOf(failure.status, undefined, "", "upstream_rejected");
  }
  const id = `chatcmpl-${randomBytes(12).toString("base64url")}`;
  // The kit's clock: under a manual clock the answers carry the time the test set.
  const created = Math.floor(options.now() / 1000);
  const meter = new StreamMeter(() => plan.inputTokens, answers.length);
  const answer: AnswerShape = {
    id,
    created,
    model: chatReq.model,
    fingerprint: mockFingerprint(chatReq.model),
    serviceTier: servedTier(chatReq.service_tier),
    top: mockLogprobsWanted(chatReq.logprobs, chatReq.top_logprobs),
    // Anthropic's answers name the stop sequence they ended at; OpenAI's never do.
    namesStop: req.style === "messages",
  };
  const result = req.stream
    ? fromChatChunks(req, mockChunks(answer, answers, timing, req.signal), meter)
    : fromChatJson(req, mockCompletion(answer, answers));
  return withRewrite(result, rewrite);
}

/**
 * What every chunk or choice of one answer shares. `top`: with `logprobs: true`, how many
 * `top_logprobs` each token lists. `namesStop`: a choice that ended at a stop sequence names it
 * as `stop_reason` (as vLLM's chat answers do), which the messages translation reads.
 */
interface AnswerShape {
  id: string;
  created: number;
  model: string;
  /** `system_fingerprint`: OpenAI names the backend configuration on every answer and chunk. */
  fingerprint: string;
  /** `service_tier`: the capacity that served the answer, named on the answer and every chunk. */
  serviceTier: string;
  top: number | undefined;
  namesStop: boolean;
}

/**
 * The tier OpenAI says served a request that asked for `asked`: the one asked for, fast mode as the
 * priority tier it runs on, and the project's default (`default`) for `auto` or none.
 */
function servedTier(asked: unknown): string {
  if (asked === "fast") return "priority";
  return asked === "flex" || asked === "priority" || asked === "scale" ? asked : "default";
}

/** The stop sequence a choice ended at, in the chat form the translators read. */
function stopField(plan: MockPlan, shape: AnswerShape): { stop_reason?: string } {
  return shape.namesStop && plan.stopSequence !== undefined
    ? { stop_reason: plan.stopSequence }
    : {};
}

/** No tools declared, and not the turn after a tool result (which answers in text). */
function asksForTool(req: { tools?: unknown; messages?: unknown }): boolean {
  if (Array.isArray(req.tools) && req.tools.length > 0) return false;
  const messages = Array.isArray(req.messages) ? req.messages : [];
  return (messages[messages.length - 1] as { role?: unknown } | undefined)?.role !== "tool";
}

function mockCompletion(shape: AnswerShape, answers: MockPlan[]): ChatCompletionResponse {
  return {
    id: shape.id,
    object: "chat.completion",
    created: shape.created,
    model: shape.model,
    service_tier: shape.serviceTier,
    system_fingerprint: shape.fingerprint,
    choices: answers.map((plan, index) => mockChoice(plan, index, shape)),
    usage: mockUsage(answers),
  } as ChatCompletionResponse;
}

/** A stable `fp_` and ten hex digits per model, as OpenAI's look: a CI run can compare them. */
function mockFingerprint(model: string): string {
  return `fp_${createHash("sha256").update(`mock|${model}`).digest("hex").slice(0, 10)}`;
}

/**
 * The usage of every answer together, with both of OpenAI's breakdowns whole (each count it
 * always sends, zero where the mock has none: it caches nothing and hears no audio), so a client
 * that reads `prompt_tokens_details.cached_tokens` or `reasoning_tokens` finds a number. The
 * thinking is part of the output, as OpenAI counts it.
 */
function mockUsage(answers: MockPlan[]): ChatUsage {
  const { inputTokens } = answers[0];
  let outputTokens = 0;
  let reasoningTokens = 0;
  for (const plan of answers) {
    outputTokens += plan.outputTokens;
    // A scripted usage may count less output than the thinking's words: never more than it.
    reasoningTokens += Math.min(estimateTokens(plan.reasoning ?? ""), plan.outputTokens);
  }
  return {
    prompt_tokens: inputTokens,
    completion_tokens: outputTokens,
    total_tokens: inputTokens + outputTokens,
    prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
    completion_tokens_details: {
      reasoning_tokens: reasoningTokens,
      audio_tokens: 0,
      accepted_prediction_tokens: 0,
      rejected_prediction_tokens: 0,
    },
  };
}

function mockChoice(plan: MockPlan, index: number, shape: AnswerShape) {
  const { top } = shape;
  const text = plan.text();
  return {
    index,
    message: {
      role: "assistant",
      content: plan.toolCalls && !text ? null : text,
      refusal: null,
      ...(plan.reasoning ? { reasoning_content: plan.reasoning } : {}),
      ...(plan.toolCalls
        ? {
            tool_calls: plan.toolCalls.map((call) => ({
              id: call.id,
              type: "function",
              function: { name: call.name, arguments: call.arguments },
            })),
          }
        : {}),
    },
    logprobs: top === undefined ? null : mockLogprobs(plan.pieces(), top),
    finish_reason: plan.finishReason,
    ...stopField(plan, shape),
  };
}

/** The planned reply as deltas, made one at a time as the stream asks for them. */
function* deltas(plan: MockPlan): Generator<object> {
  for (const word of plan.reasoning?.match(/\S+\s*/g) ?? []) yield { reasoning_content: word };
  for (const word of plan.pieces()) yield { content: word };
  for (const [index, call] of (plan.toolCalls ?? []).entries()) {
    const { id: callId, name, arguments: args } = call;
    yield {
      tool_calls: [{ index, id: callId, type: "function", function: { name, arguments: "" } }],
    };
    for (let i = 0; i < args.length; i += 8) {
      yield { tool_calls: [{ index, function: { arguments: args.slice(i, i + 8) } }] };
    }
  }
}

/**
 * `echo: true`: the prompt, then the answer. The output counted is the answer's, as OpenAI
 * counts it; a stream sends the prompt as its first piece.
 */
function echoed(plan: MockPlan, prompt: string): MockPlan {
  if (prompt === "") return plan;
  return {
    ...plan,
    text: () => prompt + plan.text(),
    pieces: function* () {
      yield prompt;
      yield* plan.pieces();
    },
  };
}

/** A directive past its bound is the request's fault: a 400 naming the bound, nothing charged. */
function planOrRefuse(chatReq: Parameters<typeof planMockReply>[0], fill?: MockFill): MockPlan {
  try {
    return planMockReply(chatReq, 0, fill);
  } catch (err) {
    if (err instanceof MockDirectiveError) throw new UnsupportedRequest(err.message);
    throw err;
  }
}

/**
 * Splits the planned replies into word-sized deltas, paced like a real model; several answers
 * (`n`) take turns, each chunk naming its choice, and the usage of all of them comes last.
 */
async function* mockChunks(
  shape: AnswerShape,
  answers: MockPlan[],
  timing: MockTiming,
  signal: GoneSignal,
): AsyncGenerator<ChatCompletionChunk> {
  const [plan] = answers;
  const { id, created, model, fingerprint, serviceTier, top } = shape;
  const base = {
    id,
    object: "chat.completion.chunk",
    created,
    model,
    service_tier: serviceTier,
    system_fingerprint: fingerprint,
  } as const;
  const chunk = (index: number, delta: object, finish: string | null = null): ChatCompletionChunk =>
    ({
      ...base,
      choices: [{ index, delta, logprobs: chunkLogprobs(index, delta), finish_reason: finish }],
    }) as ChatCompletionChunk;
  const finishChunk = (index: number, answer: MockPlan): ChatCompletionChunk =>
    ({
      ...base,
      choices: [
        {
          index,
          delta: {},
          logprobs: null,
          finish_reason: answer.finishReason,
          ...stopField(answer, shape),
        },
      ],
    }) as ChatCompletionChunk;
  // With `logprobs: true`, each chunk of text carries its token's (as OpenAI's do).
  const tokens = answers.map(() => 0);
  const chunkLogprobs = (index: number, delta: object) => {
    const text = (delta as { content?: unknown }).content;
    if (top === undefined || typeof text !== "string" || text === "") return null;
    return { content: [mockTokenLogprob(text, tokens[index]++, top)], refusal: null };
  };
  await sleep((timing.first_token_ms ?? 0) + (plan.directives.delay ?? 0), signal);
  for (let index = 0; index < answers.length; index++)
    yield chunk(index, { role: "assistant", content: "" });
  const pending = answers.map((answer, index) => ({ index, answer, deltas: deltas(answer) }));
  let sent = 0;
  while (pending.length > 0) {
    for (const choice of [...pending]) {
      const next = choice.deltas.next();
      if (next.done) {
        pending.splice(pending.indexOf(choice), 1);
        yield finishChunk(choice.index, choice.answer);
        continue;
      }
      if (plan.directives.break !== undefined && sent >= plan.directives.break) {
        throw new Error("mock stream broken on request");
      }
      if (sent > 0) await sleep(timing.chunk_interval_ms ?? 0, signal);
      yield chunk(choice.index, next.value);
      sent++;
    }
  }
  yield { ...base, choices: [], usage: mockUsage(answers) } as ChatCompletionChunk;
}
