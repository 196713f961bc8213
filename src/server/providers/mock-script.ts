import { createHash } from "node:crypto";
import { z } from "zod";
import { estimateTokens } from "../wire/usage.js";
import {
  type ChatRequestLike,
  contentText,
  endedReply,
  type MockPlan,
  planMockReply,
  ScriptedText,
  toolCallsAllowed,
} from "./mock/mock-chat.js";

/**
 * Scripted answers for the `mock` provider: a test says what the model answers to which requests.
 * Rules are tried in order; the first that matches and has uses left answers; a request no rule
 * matches gets the default mock (and its `[[mock:...]]` directives). Requests are matched in their
 * chat-completions form, so one rule answers every client style.
 */

const nonNegativeInt = z.number().int().nonnegative();

const userTextMatch = z.union([
  z.string(),
  z
    .object({
      regex: z.string(),
      flags: z
        .string()
        .regex(/^[dgimsuy]*$/)
        .optional(),
    })
    .strict(),
]);

export const mockMatchSchema = z
  .object({
    /** The catalog's model name (or its upstream model name). */
    model: z.string().min(1).optional(),
    /** The last user message contains this text, or matches this regex. */
    user_text: userTextMatch.optional(),
    /** The last message is a tool result (true) or is not (false). */
    tool_result: z.boolean().optional(),
    /** Any tools are offered (true), none (false), or a tool of this name is. */
    tools_offered: z.union([z.boolean(), z.string().min(1)]).optional(),
  })
  .strict()
  .superRefine((m, ctx) => {
    if (typeof m.user_text !== "object") return;
    try {
      new RegExp(m.user_text.regex, m.user_text.flags);
    } catch (err) {
      ctx.addIssue({
        code: "custom",
        path: ["user_text", "regex"],
        message: (err as Error).message,
      });
    }
  });

export const mockReplySchema = z
  .object({
    text: z.string().optional(),
    tool_calls: z
      .array(
        z
          .object({
            name: z.string().min(1),
            /** An object, or its JSON text: every client style must get the same call. */
            arguments: z
              .union([
                z.string().refine(isJsonObjectText, {
                  message: "must be an object or the JSON text of one",
                }),
                z.record(z.string(), z.unknown()),
              ])
              .default({}),
          })
          .strict(),
      )
      .optional(),
    reasoning: z.string().optional(),
    usage: z
      .object({ input_tokens: nonNegativeInt, output_tokens: nonNegativeInt })
      .strict()
      .optional(),
    /** An upstream failure: 429 is a rate limit, 5xx an outage, a 4xx (or a reason) a rejection. */
    error: z
      .object({
        status: z.number().int().min(400).max(599),
        reason: z
          .enum([
            "invalid_request_error",
            "context_length_exceeded",
            "model_not_found",
            "content_policy_violation",
            "upstream_rejected",
          ])
          .optional(),
      })
      .strict()
      .optional(),
    /** Prefill time: before the first token of a stream, before the whole answer otherwise. */
    delay_ms: nonNegativeInt.max(600_000).optional(),
    /** A stream breaks (an error event) after this many content chunks. */
    break_after: nonNegativeInt.optional(),
  })
  .strict();

/**
 * Tool-call arguments as text must be a JSON object: the messages style carries them as a parsed
 * `input`, so anything else would reach its whole and streamed answers differently.
 */
function isJsonObjectText(text: string): boolean {
  try {
    const parsed: unknown = JSON.parse(text);
    return typeof parsed === "object" && parsed !== null && !Array.isArray(parsed);
  } catch {
    return false;
  }
}

export const mockRuleSchema = z
  .object({
    match: mockMatchSchema.default({}),
    reply: mockReplySchema,
    /** How many requests the rule answers; unlimited when absent. */
    times: z.number().int().positive().optional(),
  })
  .strict();

export const mockScriptSchema = z.array(mockRuleSchema);

export type MockMatch = z.input<typeof mockMatchSchema>;
export type MockReply = z.input<typeof mockReplySchema>;
export type MockRule = z.input<typeof mockRuleSchema>;
type ParsedRule = z.output<typeof mockRuleSchema>;

interface LiveRule {
  rule: ParsedRule;
  left: number;
  userText?: (text: string) => boolean;
}

/** The script as a test drives it (`gateway.mock`). */
export interface GatewayMock {
  /**
   * Appends a rule: `reply(rule)` or `reply(match, reply, { times })`. A bad rule throws a
   * `ConfigError` naming its field.
   */
  reply(rule: MockRule): void;
  reply(match: MockMatch, reply: MockReply, options?: { times?: number }): void;
  /** Back to the config's rules (none without a config `mock.script`). */
  reset(): void;
}

export class MockScript {
  private rules: LiveRule[] = [];
  private baseline: ParsedRule[] = [];

  /** Checked before any matching work: a gateway with no rules pays one property read. */
  get active(): boolean {
    return this.rules.length > 0;
  }

  /** The rules the config gives; `reset` comes back to them. */
  setBaseline(rules: readonly MockRule[]): void {
    this.baseline = mockScriptSchema.parse(rules);
    this.reset();
  }

  add(rules: readonly MockRule[]): void {
    this.rules.push(...mockScriptSchema.parse(rules).map(live));
  }

  replace(rules: readonly MockRule[]): void {
    const parsed = mockScriptSchema.parse(rules);
    this.rules = parsed.map(live);
  }

  reset(): void {
    this.rules = this.baseline.map(live);
  }

  /** Rules with uses left, in the order they are tried. */
  list(): { rule: ParsedRule; remaining: number | null }[] {
    return this.rules.map((r) => ({
      rule: r.rule,
      remaining: Number.isFinite(r.left) ? r.left : null,
    }));
  }

  /**
   * The scripted answers to this request, `count` of them (chat's `n`), using up one of the
   * rule's uses; undefined when none matches.
   */
  answers(modelNames: readonly string[], req: ChatRequestLike, count = 1): MockPlan[] | undefined {
    const facts = requestFacts(req);
    const at = this.rules.findIndex((r) => matches(r, modelNames, facts));
    if (at === -1) return undefined;
    const hit = this.rules[at];
    hit.left--;
    if (hit.left <= 0) this.rules.splice(at, 1);
    return scriptedAnswers(hit.rule.reply, req, count);
  }
}

function live(rule: ParsedRule): LiveRule {
  const text = rule.match.user_text;
  let userText: LiveRule["userText"];
  if (typeof text === "string") userText = (t) => t.includes(text);
  else if (text) {
    const re = new RegExp(text.regex, text.flags?.replace(/[gy]/g, ""));
    userText = (t) => re.test(t);
  }
  return { rule, left: rule.times ?? Number.POSITIVE_INFINITY, userText };
}

interface RequestFacts {
  lastUserText: string;
  toolResult: boolean;
  toolNames: string[];
}

function requestFacts(req: ChatRequestLike): RequestFacts {
  const messages = (Array.isArray(req.messages) ? req.messages : []) as {
    role?: unknown;
    content?: unknown;
  }[];
  const lastUser = messages.findLast((m) => m.role === "user");
  const tools = (Array.isArray(req.tools) ? req.tools : []) as {
    function?: { name?: unknown };
    name?: unknown;
  }[];
  return {
    lastUserText: lastUser ? contentText(lastUser.content) : "",
    toolResult: messages.at(-1)?.role === "tool",
    toolNames: tools.map((t) => String(t.function?.name ?? t.name ?? "")),
  };
}

function matches(r: LiveRule, modelNames: readonly string[], facts: RequestFacts): boolean {
  const m = r.rule.match;
  if (m.model !== undefined && !modelNames.includes(m.model)) return false;
  if (r.userText && !r.userText(facts.lastUserText)) return false;
  if (m.tool_result !== undefined && m.tool_result !== facts.toolResult) return false;
  if (typeof m.tools_offered === "boolean" && m.tools_offered !== facts.toolNames.length > 0)
    return false;
  if (typeof m.tools_offered === "string" && !facts.toolNames.includes(m.tools_offered))
    return false;
  return true;
}

/**
 * The reply as mock plans, one for each of the `count` answers a request asks for (chat's `n`),
 * so the mock's own renderers draw it on every wire. A scripted `usage` is the whole response's,
 * as OpenAI reports one for `n` answers: the prompt counted once, the output of every answer
 * together (shared among the plans). Every tool call has an id of its own, in every answer.
 * The request holds the reply as it would hold a model: the text ends at the output limit or a
 * stop sequence, and no more tool calls are made than `tool_choice` and `parallel_tool_calls`
 * allow (a reply left with neither text nor calls is the mock's own words).
 */
export function scriptedAnswers(
  reply: z.output<typeof mockReplySchema>,
  req: ChatRequestLike,
  count = 1,
): MockPlan[] {
  const base = planMockReply({ messages: req.messages });
  const scriptedCalls = reply.tool_calls ?? [];
  const calls = scriptedCalls.slice(0, toolCallsAllowed(req)).map((call) => ({
    name: call.name,
    arguments: typeof call.arguments === "string" ? call.arguments : JSON.stringify(call.arguments),
  }));
  const ownWords = reply.text === undefined && calls.length === 0 && scriptedCalls.length > 0;
  const ended = ownWords ? planMockReply(req) : endedReply(new ScriptedText(reply.text ?? ""), req);
  const scriptedOutput = reply.usage?.output_tokens;
  // The text's count is what it delivers, within the output limit.
  const estimatedOutput =
    ended.outputTokens +
    estimateTokens(reply.reasoning ?? "") +
    calls.reduce((sum, c) => sum + estimateTokens(c.name + c.arguments) + 5, 0);
  return Array.from({ length: count }, (_, choice) => {
    // The first answer's ids are those of a request with one answer.
    const seed = choice === 0 ? base.text() : `${base.text()}#${choice}`;
    const toolCalls = calls.map((call, i) => ({
      id: `call_${createHash("sha256")
        .update(`${seed}|${i}|${call.name}|${call.arguments}`)
        .digest("hex")
        .slice(0, 24)}`,
      ...call,
    }));
    return {
      text: ended.text,
      pieces: ended.pieces,
      toolCalls: toolCalls.length > 0 ? toolCalls : undefined,
      reasoning: reply.reasoning,
      inputTokens: reply.usage?.input_tokens ?? base.inputTokens,
      outputTokens:
        scriptedOutput === undefined
          ? estimatedOutput
          : Math.floor(scriptedOutput / count) + (choice < scriptedOutput % count ? 1 : 0),
      finishReason: toolCalls.length > 0 ? "tool_calls" : ended.finishReason,
      ...(toolCalls.length === 0 && ended.stopSequence ? { stopSequence: ended.stopSequence } : {}),
      directives: {
        delay: reply.delay_ms,
        break: reply.break_after,
        fail: reply.error?.status,
        reject: reply.error?.reason,
      },
    };
  });
}
