import { createHash } from "node:crypto";
import type { ClientStyle } from "../../wire/completion-types.js";
import type { ResponsesRequest } from "../../wire/responses-types.js";
import { withInputSettings } from "../../wire/translate/responses.js";
import { toolChoiceRefusal } from "../../wire/translate/tool-choice.js";
import { estimateTokens, estimateTokensOfLength } from "../../wire/usage.js";
import { type MockFill, mockFillLead } from "./mock-fill.js";
import { maxTopLogprobs } from "./mock-logprobs.js";
import { exampleOf } from "./schema-example.js";

/**
 * The built-in `mock` provider's chat engine: deterministic, offline, with realistic token counts.
 * It speaks the chat-completions wire; other styles reach it through the translators.
 *
 * Directives in the last user message steer it, so users can test their own client code:
 *   [[mock:fail=503]]            answer with that upstream status
 *   [[mock:reject=context_length_exceeded]]  a 400 rejection with that reason
 *   [[mock:delay=1500]]          wait that many ms before the first token
 *   [[mock:words=200]]           length of the reply
 *   [[mock:tool]] / [[mock:tool=name]]  call a tool (also when tool_choice forces one; never
 *                                       when it is "none")
 *   [[mock:break=3]]             break the stream after that many chunks
 * Each is bounded (mockDirectiveBounds); a stream's words are made as the client takes them.
 */
export interface MockTiming {
  latency_ms?: number;
  first_token_ms?: number;
  chunk_interval_ms?: number;
  fail_status?: number;
}

export interface MockDirectives {
  fail?: number;
  reject?: string;
  delay?: number;
  words?: number;
  tool?: string | true;
  break?: number;
}

type ChatMessage = { role?: unknown; content?: unknown; tool_calls?: unknown };
type ChatTool = { type?: string; function?: { name?: string; parameters?: unknown } };

export interface ChatRequestLike {
  model?: unknown;
  messages?: unknown;
  tools?: unknown;
  tool_choice?: unknown;
  max_tokens?: unknown;
  max_completion_tokens?: unknown;
  response_format?: unknown;
  stream_options?: { include_usage?: boolean };
  stop?: unknown;
  parallel_tool_calls?: unknown;
}

export function contentText(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content
      .map((part) => {
        if (part && typeof part === "object") {
          const p = part as { type?: string; text?: unknown };
          if (typeof p.text === "string") return p.text;
          if (p.type === "image_url") return "[image]";
        }
        return "";
      })
      .join(" ");
  }
  return "";
}

/** Bounds the mock's summary, as a real model's answer is bounded. */
const summaryChars = 2_000;

/**
 * The mock's summary of a conversation it is asked to compact (every message but the last, which
 * asks for it): each message's role and text in order, so a test reads what the next turn is given
 * in its place. Deterministic: the same conversation, the same summary.
 */
export function mockSummary(req: ChatRequestLike): string {
  const messages = (Array.isArray(req.messages) ? req.messages : []) as ChatMessage[];
  const lines = messages
    .slice(0, -1)
    .map((m) => `${String(m.role)}: ${contentText(m.content).replace(/\s+/g, " ").trim()}`);
  return `Mock summary of ${lines.length} messages. ${lines.join(" | ")}`.slice(0, summaryChars);
}

/**
 * Bounds on the directives, so a prompt cannot make the mock hold a huge answer or a request
 * for long: a directive past its bound is refused as a bad request naming the bound.
 */
export const mockDirectiveBounds = {
  words: { min: 0, max: 100_000 },
  delay: { min: 0, max: 60_000 },
  break: { min: 0, max: 100_000 },
  fail: { min: 400, max: 599 },
} as const;
const maxNameLength = 64;

/** A directive the mock will not follow; the adapter refuses the request with this text. */
export class MockDirectiveError extends Error {}

export function parseDirectives(text: string): MockDirectives {
  const found: MockDirectives = {};
  for (const match of text.matchAll(/\[\[mock:(\w+)(?:=([^\]]*))?\]\]/g)) {
    const [, name, value] = match;
    if (name === "fail" || name === "delay" || name === "words" || name === "break")
      found[name] = boundedNumber(name, value);
    else if (name === "reject") found.reject = boundedName(name, value) || "invalid_request_error";
    else if (name === "tool") found.tool = boundedName(name, value) || true;
  }
  return found;
}

function boundedNumber(name: keyof typeof mockDirectiveBounds, value: string | undefined): number {
  const { min, max } = mockDirectiveBounds[name];
  const n = Number(value);
  if (value === undefined || value.trim() === "" || !Number.isInteger(n) || n < min || n > max) {
    throw new MockDirectiveError(
      `Mock directive [[mock:${name}=${(value ?? "").slice(0, 20)}]] is out of bounds: ${name} must be a whole number from ${min} to ${max}.`,
    );
  }
  return n;
}

function boundedName(name: string, value: string | undefined): string | undefined {
  if (value !== undefined && value.length > maxNameLength) {
    throw new MockDirectiveError(
      `Mock directive [[mock:${name}=...]] is out of bounds: its value may be at most ${maxNameLength} characters.`,
    );
  }
  return value;
}

const vocabulary =
  "the gateway answers every request with care and a steady voice while models think about tokens streams routes keys limits and the quiet work of billing".split(
    " ",
  );

export interface MockPlan {
  /** The reply, whole (for JSON answers). */
  text(): string;
  /** The reply in word-sized pieces, made one at a time: a stream never holds it whole. */
  pieces(): Generator<string>;
  toolCalls?: { id: string; name: string; arguments: string }[];
  reasoning?: string;
  inputTokens: number;
  outputTokens: number;
  finishReason: "stop" | "length" | "tool_calls";
  /** The stop sequence the reply ended before, where it wrote one of the request's. */
  stopSequence?: string;
  directives: MockDirectives;
}

/**
 * Decides the whole answer up front; the JSON and stream renderers only format it. `choice` is
 * the answer's index where a request asks for several (`n`): each draws its own words. `fill`: a
 * legacy completion's insertion point, which the answer fills in.
 */
export function planMockReply(req: ChatRequestLike, choice = 0, fill?: MockFill): MockPlan {
  const messages = (Array.isArray(req.messages) ? req.messages : []) as ChatMessage[];
  const sentText = messages.map((m) => contentText(m.content)).join("\n");
  // A suffix sent apart from the prompt is input too, and draws words of its own.
  const allText = fill?.apart ? `${sentText}\n${fill.after}` : sentText;
  const lastUser = [...messages].reverse().find((m) => m.role === "user");
  const lastText = lastUser ? contentText(lastUser.content) : "";
  const last = messages[messages.length - 1];
  const directives = parseDirectives(lastText);
  const inputTokens = estimateTokens(allText) + 3 * messages.length;

  const tools = (Array.isArray(req.tools) ? req.tools : []) as ChatTool[];
  const forced = forcedToolName(req.tool_choice, tools);
  const wantsTool =
    toolCallsAllowed(req) > 0 &&
    last?.role !== "tool" &&
    (forced !== undefined || directives.tool !== undefined);
  if (wantsTool && tools.length > 0) {
    const name =
      forced ??
      (typeof directives.tool === "string" ? directives.tool : undefined) ??
      tools[0].function?.name ??
      "tool";
    const example = exampleOf(tools.find((t) => t.function?.name === name)?.function?.parameters);
    // Arguments are an object whatever the declared parameters say.
    const args = JSON.stringify(example && typeof example === "object" ? example : {});
    // Each answer's call has an id of its own; the first's is that of a request with one answer.
    const seed = choice === 0 ? allText : `${allText}#${choice}`;
    const id = `call_${digest(`${seed}|${name}`).slice(0, 24)}`;
    return {
      text: () => "",
      pieces: function* () {},
      toolCalls: [{ id, name, arguments: args }],
      inputTokens,
      outputTokens: estimateTokens(name + args) + 5,
      finishReason: "tool_calls",
      directives,
    };
  }

  const snippet = lastText
    .replace(/\[\[mock:[^\]]*\]\]/g, "")
    .trim()
    .slice(0, 120);
  const toolResult = last?.role === "tool" ? contentText(last.content).slice(0, 120) : undefined;
  const lead = fill
    ? mockFillLead(fill)
    : toolResult
      ? `Tool result received: ${toolResult}.`
      : `Mock reply to: ${snippet || "(empty prompt)"}.`;
  const json = structuredAnswer(req.response_format, lead);
  const reply = json
    ? new FixedText(json)
    : new MockWords(
        lead,
        directives.words ?? 12,
        createHash("sha256")
          .update(choice === 0 ? allText : `${allText}#${choice}`)
          .digest(),
      );
  return { ...endedReply(reply, req), inputTokens, directives };
}

/** A reply's text before it is cut: its whole length, and its pieces up to a length. */
interface ReplyText {
  length(): number;
  pieces(limit: number): Generator<string>;
}

/**
 * The reply as a real model ends it: at the output limit (`length`), or before the first of the
 * request's stop sequences it writes (`stop`, the sequence itself left out), else whole. The
 * output counted is what is delivered.
 */
export function endedReply(
  reply: ReplyText,
  req: ChatRequestLike,
): Pick<MockPlan, "text" | "pieces" | "outputTokens" | "finishReason" | "stopSequence"> {
  const maxTokens = Number(req.max_completion_tokens ?? req.max_tokens ?? Number.POSITIVE_INFINITY);
  let length = reply.length();
  let outputTokens = estimateTokensOfLength(length);
  let finishReason: MockPlan["finishReason"] = "stop";
  if (outputTokens > maxTokens) {
    length = Math.max(0, maxTokens) * 4;
    outputTokens = Math.max(0, maxTokens);
    finishReason = "length";
  }
  const stop = firstStop(reply.pieces(length), stopSequences(req.stop));
  if (stop) {
    length = stop.at;
    outputTokens = estimateTokensOfLength(length);
    finishReason = "stop";
  }
  return {
    text: () => [...reply.pieces(length)].join(""),
    pieces: () => reply.pieces(length),
    outputTokens,
    finishReason,
    ...(stop ? { stopSequence: stop.sequence } : {}),
  };
}

/** Chat's `stop`: one sequence or a list of them; empty ones stop nothing. */
function stopSequences(stop: unknown): string[] {
  const listed = Array.isArray(stop) ? stop : [stop];
  return listed.filter((s): s is string => typeof s === "string" && s !== "");
}

/**
 * Where the first stop sequence the text writes begins, read piece by piece as a model writes it,
 * so a sequence split across pieces is found and the text is never held whole. The first written
 * is the one whose end comes first.
 */
function firstStop(
  pieces: Iterable<string>,
  stops: string[],
): { at: number; sequence: string } | undefined {
  if (stops.length === 0) return undefined;
  const keep = Math.max(...stops.map((s) => s.length)) - 1;
  let tail = "";
  let offset = 0;
  for (const piece of pieces) {
    const window = tail + piece;
    let found: { at: number; end: number; sequence: string } | undefined;
    for (const sequence of stops) {
      const at = window.indexOf(sequence);
      const end = at + sequence.length;
      if (at !== -1 && (!found || end < found.end)) found = { at, end, sequence };
    }
    if (found) return { at: offset + found.at, sequence: found.sequence };
    const cut = Math.max(0, window.length - keep);
    tail = window.slice(cut);
    offset += cut;
  }
  return undefined;
}

/**
 * How many tool calls an answer may make: none with `tool_choice: "none"`, one with
 * `parallel_tool_calls: false`, as the real APIs hold to them.
 */
export function toolCallsAllowed(req: ChatRequestLike): number {
  if (req.tool_choice === "none") return 0;
  return req.parallel_tool_calls === false ? 1 : Number.POSITIVE_INFINITY;
}

/** OpenAI's bound on chat's `stop` (Anthropic's `stop_sequences` has no such small one). */
const openaiMostStops = 4;

/**
 * What the API a client's style stands for refuses in a body the mock answers in its place, as the
 * refusal's text naming the parameter, or undefined: OpenAI's for chat and Responses, Anthropic's
 * for messages. `body` is the client's own; `chat` the same request as the mock reads it. An app
 * that passes on the mock then passes in production.
 */
export function mockRefusal(
  style: ClientStyle,
  body: Record<string, unknown>,
  chat: ChatRequestLike,
  mostStops = openaiMostStops,
): string | undefined {
  if (style === "messages") return toolChoiceRefusal(style, body);
  // A Responses input item may declare tools too (`additional_tools`).
  const asked = style === "responses" ? withInputSettings(body as ResponsesRequest) : body;
  return openaiRefusal(chat, style, mostStops) ?? openaiParamRefusal(style, asked);
}

/**
 * OpenAI's refusals of the request as chat reads it (chat, or Responses through chat, named by
 * `style`): JSON mode unless the conversation asks for JSON by name (a model told nothing could
 * write whitespace up to the output limit), and more stop sequences than `mostStops`.
 */
function openaiRefusal(
  req: ChatRequestLike,
  style: "chat" | "responses",
  mostStops: number,
): string | undefined {
  const format = req.response_format as { type?: unknown } | undefined;
  if (format?.type === "json_object") {
    const messages = (Array.isArray(req.messages) ? req.messages : []) as ChatMessage[];
    if (!messages.some((m) => /json/i.test(contentText(m.content)))) {
      const field = style === "chat" ? "`response_format`" : "`text.format`";
      return `${field} \`json_object\` needs the word "json" in the conversation; OpenAI refuses the request otherwise. Ask for JSON in a system or user message.`;
    }
  }
  const stops = Array.isArray(req.stop) ? req.stop.length : 0;
  if (style === "chat" && stops > mostStops)
    return `\`stop\` has ${stops} sequences; OpenAI takes at most ${mostStops}. Send at most ${mostStops}.`;
  return undefined;
}

/**
 * OpenAI's refusals of parameters as the client wrote them: `top_logprobs` past its bound (both
 * styles), chat's `stream_options` on a request that does not stream, and a `tool_choice` that
 * cannot be followed.
 */
function openaiParamRefusal(
  style: "chat" | "responses",
  body: Record<string, unknown>,
): string | undefined {
  const top = body.top_logprobs;
  const topTaken = typeof top === "number" && Number.isInteger(top) && top >= 0;
  if (top != null && !(topTaken && top <= maxTopLogprobs))
    return `\`top_logprobs\` must be a whole number from 0 to ${maxTopLogprobs}, not ${shown(top)}; OpenAI refuses the request otherwise.`;
  if (style === "chat" && body.stream_options != null && body.stream !== true)
    return "`stream_options` is only allowed with `stream: true`; OpenAI refuses it on a request that does not stream. Leave it out, or stream.";
  return toolChoiceRefusal(style, body);
}

/** A client's value in a refusal's text, cut short. */
function shown(value: unknown): string {
  const text = JSON.stringify(value) ?? String(value);
  return text.length > 40 ? `${text.slice(0, 40)}...` : text;
}

const wordPattern = /\S+\s*/g;

/**
 * The answer a structured output asks for, as a real model in strict mode gives it: JSON its
 * `json_schema` accepts, or for `json_object` a JSON object; undefined for plain text.
 */
function structuredAnswer(format: unknown, lead: string): string | undefined {
  if (!format || typeof format !== "object") return undefined;
  const { type, json_schema } = format as { type?: unknown; json_schema?: { schema?: unknown } };
  if (type === "json_schema") return JSON.stringify(exampleOf(json_schema?.schema ?? {}));
  if (type === "json_object") return JSON.stringify({ reply: lead });
  return undefined;
}

/** A reply given whole (structured output), cut into pieces of a few characters to stream. */
class FixedText {
  constructor(private readonly text: string) {}

  length(): number {
    return this.text.length;
  }

  *pieces(limit: number): Generator<string> {
    const text = this.text.slice(0, limit);
    for (let i = 0; i < text.length; i += 8) yield text.slice(i, i + 8);
  }
}

/** A reply whose text is given whole (a scripted one), streamed word by word. */
export class ScriptedText {
  constructor(private readonly text: string) {}

  length(): number {
    return this.text.length;
  }

  *pieces(limit: number): Generator<string> {
    yield* this.text.slice(0, limit).match(/\s*\S+\s*|\s+/g) ?? [];
  }
}

/** The mock's reply text: a lead sentence, then `count` words drawn from the seed. */
class MockWords {
  constructor(
    private readonly lead: string,
    private readonly count: number,
    private readonly seed: Buffer,
  ) {}

  private word(i: number): string {
    return vocabulary[(this.seed[i % this.seed.length] + i) % vocabulary.length];
  }

  length(): number {
    let n = this.lead.length;
    for (let i = 0; i < this.count; i++) n += 1 + this.word(i).length;
    return n;
  }

  /** The text's words, each with the space after it, cut at `limit` characters. */
  *pieces(limit: number): Generator<string> {
    let left = limit;
    const cut = (piece: string) => {
      const kept = piece.length <= left ? piece : piece.slice(0, left);
      left -= kept.length;
      return kept;
    };
    const lead = this.lead.match(wordPattern) ?? [];
    for (const [i, piece] of lead.entries()) {
      const spaced = i === lead.length - 1 && this.count > 0 ? `${piece} ` : piece;
      const kept = cut(spaced);
      if (kept) yield kept;
      if (left === 0) return;
    }
    for (let i = 0; i < this.count; i++) {
      const kept = cut(i === this.count - 1 ? this.word(i) : `${this.word(i)} `);
      if (kept) yield kept;
      if (left === 0) return;
    }
  }
}

function forcedToolName(choice: unknown, tools: ChatTool[]): string | undefined {
  if (choice === "required") return tools[0]?.function?.name;
  if (choice && typeof choice === "object") {
    const named = (choice as { function?: { name?: string } }).function?.name;
    if (named) return named;
  }
  return undefined;
}

function digest(text: string): string {
  return createHash("sha256").update(text).digest("hex");
}

/** Errors the mock raises before any output, as a real upstream would answer. */
export function mockFailure(
  plan: MockPlan,
  timing: MockTiming,
): { status: number; reason?: string } | null {
  if (plan.directives.reject)
    return { status: plan.directives.fail ?? 400, reason: plan.directives.reject };
  const status = plan.directives.fail ?? timing.fail_status;
  return status ? { status } : null;
}
