import { afterAll, beforeAll, describe, it } from "vitest";
import type { MockRule } from "../src/server/providers/mock-script.js";
import { idleMoney, money } from "./support/api.js";
import {
  anyStyleHeaders,
  type EveryWireGateway,
  gatewayOnEveryWire,
  modelOn,
} from "./support/every-wire.js";
import {
  deferred,
  type RecordedRequest,
  type Reply,
  type SseStep,
} from "./support/fake-upstream.js";
import { backends, post, type TestGateway } from "./support/gateway.js";
import { type Logged, logged, outputIn, requestTextTokens } from "./support/metering.js";
import { streamEvents } from "./support/sse.js";

/**
 * The client that leaves: every client style against every target wire (OpenAI chat, Anthropic,
 * Gemini, a native OpenAI Responses API, the mock), and legacy completions (`/v1/completions`)
 * through chat (OpenAI chat, the mock) and to a provider's own Completions API passed through
 * (`completions_native`), chat and completions with and without `n` and include_usage,
 * messages with and without its thinking omitted, the client hanging up after a keepalive's
 * headers (before any piece), after the headers, after the first event, mid thinking, mid tool-call
 * arguments, after the last output, and after the provider's final usage but before the stream's
 * end. Each time: one request-log row, its charge the price of its usage, that usage what reached
 * the client (docs/metering.md), the balance moved by that once, nothing held, and the same key
 * served again. On SQLite and Postgres.
 *
 * The fakes stop at the point (a gated step) until the client has gone, so what the gateway wrote
 * is known: each piece of output is at least eight characters, so its tokens are its characters
 * by four however a translation splits the deltas. A provider's own counts are made the gateway's
 * count of the same output (and, where it reports its input only at the end, the gateway's
 * estimate of it), so a report read just before the client left changes nothing.
 */

const PRICE_IN = 1_000;
const PRICE_OUT = 2_000;
const INPUT = { anthropic: 13, gemini: 19 } as const;

type Style = "chat" | "messages" | "responses" | "completions";
type Target = "openai" | "anthropic" | "gemini" | "native" | "mock" | "text-native";
type Point = "keepalive" | "headers" | "first" | "thinking" | "arguments" | "end" | "final";

/** The answer every target gives: thinking, text, one tool call with its arguments in pieces. */
const THINKING = ["pondering the weather mkthink ", "and then some more of it. "];
const TEXT = ["Let me look that up ", "for you right away. "];
const TOOL = "get_weather";
const ARGS = ['{"city": "Par', 'is mkargs", "u', 'nits": "metric mkend"}'];
const ARGS_TEXT = ARGS.join("");
/** A legacy completion's answer: text only (the request declares no tools), after thinking. */
const COMPLETION = ["def add(a, b): ", "return a + b mkend "];
const COMPLETION_TEXT = COMPLETION.join("");

/** A step of a fake's stream: the characters of output it carries (each answer's), and the points it ends. */
interface Step {
  step: SseStep;
  chars: number;
  /** The provider's output count so far, where this step reports one. */
  reportsOutput?: number;
  /** Its output is thinking, which a style may not show. */
  thinking?: boolean;
  points?: Point[];
}

const thought = (step: Step): Step => ({ ...step, thinking: true });
const tokensOf = (chars: number) => (chars === 0 ? 0 : Math.ceil(chars / 4));
const ALL = [...THINKING, ...TEXT, TOOL, ...ARGS].join("").length;

/**
 * An OpenAI-compatible server's chat chunks, the `n` answers alike in each chunk. `textOnly`: a
 * legacy completion's answer, thinking then `COMPLETION`, with no tool call.
 */
function openaiSteps(
  req: RecordedRequest,
  n: number,
  reasoningField = false,
  textOnly = false,
): Step[] {
  const chunk = (delta: object, finish: string | null = null) => ({
    id: "chatcmpl-up",
    object: "chat.completion.chunk",
    created: 1_700_000_000,
    model: String(req.body.model),
    choices: Array.from({ length: n }, (_, index) => ({
      index,
      delta,
      logprobs: null,
      finish_reason: finish,
    })),
  });
  const call = (fn: object, first = false) => ({
    tool_calls: [{ index: 0, ...(first ? { id: "call_1", type: "function" } : {}), function: fn }],
  });
  const prompt = requestTextTokens(req.body);
  const thinking = reasoningField ? "reasoning" : "reasoning_content";
  const completion =
    n * tokensOf(textOnly ? THINKING.join("").length + COMPLETION_TEXT.length : ALL);
  const step = (data: unknown, chars = 0, points?: Point[]): Step => ({
    step: { data },
    chars,
    points,
  });
  const answer = textOnly
    ? [
        step(chunk({ content: COMPLETION[0] }), COMPLETION[0].length),
        step(chunk({ content: COMPLETION[1] }), COMPLETION[1].length, ["end"]),
        step(chunk({}, "stop")),
      ]
    : [
        step(chunk({ content: TEXT[0] }), TEXT[0].length),
        step(chunk({ content: TEXT[1] }), TEXT[1].length),
        step(chunk(call({ name: TOOL, arguments: "" }, true)), TOOL.length),
        step(chunk(call({ arguments: ARGS[0] })), ARGS[0].length),
        step(chunk(call({ arguments: ARGS[1] })), ARGS[1].length, ["arguments"]),
        step(chunk(call({ arguments: ARGS[2] })), ARGS[2].length, ["end"]),
        step(chunk({}, "tool_calls")),
      ];
  return [
    step(chunk({ role: "assistant", content: "" })),
    thought(step(chunk({ [thinking]: THINKING[0] }), THINKING[0].length, ["thinking"])),
    thought(step(chunk({ [thinking]: THINKING[1] }), THINKING[1].length)),
    ...answer,
    {
      ...step(
        {
          ...chunk({}),
          choices: [],
          usage: {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt + completion,
          },
        },
        0,
        ["final"],
      ),
      reportsOutput: completion,
    },
    step("[DONE]"),
  ];
}

/** Anthropic: thinking, text and a tool_use block; the input at the start, the output at the end. */
function anthropicSteps(): Step[] {
  const ev = (data: { type: string }, chars = 0, points?: Point[]): Step => ({
    step: { event: data.type, data },
    chars,
    points,
  });
  const block = (index: number, content_block: object, chars = 0) =>
    ev({ type: "content_block_start", index, content_block } as { type: string }, chars);
  const delta = (index: number, d: object, chars = 0, points?: Point[]) =>
    ev({ type: "content_block_delta", index, delta: d } as { type: string }, chars, points);
  const stop = (index: number) => ev({ type: "content_block_stop", index } as { type: string });
  const start = ev({
    type: "message_start",
    message: {
      id: "msg_up",
      type: "message",
      role: "assistant",
      model: "claude-up",
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: { input_tokens: INPUT.anthropic, output_tokens: 1 },
    },
  } as { type: string });
  return [
    { ...start, reportsOutput: 1 },
    block(0, { type: "thinking", thinking: "", signature: "" }),
    thought(
      delta(0, { type: "thinking_delta", thinking: THINKING[0] }, THINKING[0].length, ["thinking"]),
    ),
    thought(delta(0, { type: "thinking_delta", thinking: THINKING[1] }, THINKING[1].length)),
    delta(0, { type: "signature_delta", signature: "c2lnbmVk" }),
    stop(0),
    block(1, { type: "text", text: "" }),
    delta(1, { type: "text_delta", text: TEXT[0] }, TEXT[0].length),
    delta(1, { type: "text_delta", text: TEXT[1] }, TEXT[1].length),
    stop(1),
    block(2, { type: "tool_use", id: "toolu_1", name: TOOL, input: {} }, TOOL.length),
    delta(2, { type: "input_json_delta", partial_json: ARGS[0] }, ARGS[0].length),
    delta(2, { type: "input_json_delta", partial_json: ARGS[1] }, ARGS[1].length, ["arguments"]),
    delta(2, { type: "input_json_delta", partial_json: ARGS[2] }, ARGS[2].length, ["end"]),
    stop(2),
    {
      ...ev(
        {
          type: "message_delta",
          delta: { stop_reason: "tool_use", stop_sequence: null },
          usage: { output_tokens: tokensOf(ALL) },
        } as { type: string },
        0,
        ["final"],
      ),
      reportsOutput: tokensOf(ALL),
    },
    ev({ type: "message_stop" }),
  ];
}

/**
 * Gemini: `n` candidates, each event's usage the output so far (cumulative, as Google reports it,
 * by the gateway's count), the call whole in one part (Gemini sends no argument pieces), the
 * finish with the last; an empty event, which the stream skips, before the body ends.
 */
function geminiSteps(n: number): Step[] {
  const args = JSON.parse(ARGS_TEXT) as Record<string, unknown>;
  const parts: { part: object; chars: number; points?: Point[]; thinking?: boolean }[] = [
    {
      part: { text: THINKING[0], thought: true },
      chars: THINKING[0].length,
      points: ["thinking"],
      thinking: true,
    },
    { part: { text: THINKING[1], thought: true }, chars: THINKING[1].length, thinking: true },
    { part: { text: TEXT[0] }, chars: TEXT[0].length },
    { part: { text: TEXT[1] }, chars: TEXT[1].length },
    {
      part: { functionCall: { name: TOOL, args }, thoughtSignature: "c2ln" },
      chars: TOOL.length + JSON.stringify(args).length,
      points: ["end", "final"],
    },
  ];
  let sofar = 0;
  const steps = parts.map(({ part, chars, points, thinking }, i): Step => {
    sofar += chars;
    const output = n * tokensOf(sofar);
    return {
      step: {
        data: {
          candidates: Array.from({ length: n }, (_, index) => ({
            content: { role: "model", parts: [part] },
            index,
            ...(i === parts.length - 1 ? { finishReason: "STOP" } : {}),
          })),
          usageMetadata: {
            promptTokenCount: INPUT.gemini,
            candidatesTokenCount: output,
            totalTokenCount: INPUT.gemini + output,
          },
          modelVersion: "gemini-up",
          responseId: "gemini-up",
        },
      },
      chars,
      reportsOutput: output,
      points,
      thinking,
    };
  });
  steps.push({ step: { data: "" }, chars: 0 });
  return steps;
}

/** A native Responses stream: a reasoning summary, text, a function call, then completed. */
function nativeSteps(req: RecordedRequest): Step[] {
  const usage = { input_tokens: requestTextTokens(req.body), output_tokens: tokensOf(ALL) };
  const response = {
    id: "resp_up",
    object: "response",
    created_at: 1_700_000_000,
    status: "in_progress",
    model: "up-model",
    output: [] as object[],
    usage: null as object | null,
  };
  const reasoning = { type: "reasoning", id: "rs_1", summary: [] };
  const message = {
    type: "message",
    id: "msg_1",
    status: "in_progress",
    role: "assistant",
    content: [],
  };
  const call = {
    type: "function_call",
    id: "fc_1",
    call_id: "call_1",
    name: TOOL,
    arguments: "",
    status: "in_progress",
  };
  let sequence = 0;
  const ev = (event: string, data: object, chars = 0, points?: Point[]): Step => ({
    step: { event, data: { type: event, sequence_number: sequence++, ...data } },
    chars,
    points,
  });
  return [
    ev("response.created", { response }),
    ev("response.output_item.added", { output_index: 0, item: reasoning }),
    ...THINKING.map((delta, i) =>
      thought(
        ev(
          "response.reasoning_summary_text.delta",
          { item_id: "rs_1", output_index: 0, summary_index: 0, delta },
          delta.length,
          i === 0 ? ["thinking"] : undefined,
        ),
      ),
    ),
    ev("response.output_item.added", { output_index: 1, item: message }),
    ...TEXT.map((delta) =>
      ev(
        "response.output_text.delta",
        { item_id: "msg_1", output_index: 1, content_index: 0, delta },
        delta.length,
      ),
    ),
    ev("response.output_item.added", { output_index: 2, item: call }, TOOL.length),
    ...ARGS.map((delta, i) =>
      ev(
        "response.function_call_arguments.delta",
        { item_id: "fc_1", output_index: 2, delta },
        delta.length,
        i === 1 ? ["arguments"] : i === 2 ? ["end"] : undefined,
      ),
    ),
    {
      ...ev("response.completed", {
        response: {
          ...response,
          status: "completed",
          output: [
            { ...reasoning, summary: [{ type: "summary_text", text: THINKING.join("") }] },
            {
              ...message,
              status: "completed",
              content: [{ type: "output_text", text: TEXT.join(""), annotations: [] }],
            },
            { ...call, arguments: ARGS_TEXT, status: "completed" },
          ],
          usage: { ...usage, total_tokens: usage.input_tokens + usage.output_tokens },
        },
      }),
      reportsOutput: usage.output_tokens,
    },
  ];
}

/**
 * A server's own Completions stream (`completions_native`): `COMPLETION` in each of `n` choices,
 * the finish, the usage chunk the gateway asks for, `[DONE]`.
 */
function completionSteps(req: RecordedRequest, n: number): Step[] {
  const chunk = (text: string, finish: string | null = null) => ({
    id: "cmpl-up",
    object: "text_completion",
    created: 1_700_000_000,
    model: String(req.body.model),
    choices: Array.from({ length: n }, (_, index) => ({
      text,
      index,
      logprobs: null,
      finish_reason: finish,
    })),
  });
  const prompt = requestTextTokens(req.body);
  const completion = n * tokensOf(COMPLETION_TEXT.length);
  return [
    { step: { data: chunk(COMPLETION[0]) }, chars: COMPLETION[0].length },
    { step: { data: chunk(COMPLETION[1]) }, chars: COMPLETION[1].length, points: ["end"] },
    { step: { data: chunk("", "stop") }, chars: 0 },
    {
      step: {
        data: {
          ...chunk(""),
          choices: [],
          usage: {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt + completion,
          },
        },
      },
      chars: 0,
      points: ["final"],
      reportsOutput: completion,
    },
    { step: { data: "[DONE]" }, chars: 0 },
  ];
}

/** The mock's answer (its words paced by `chunk_interval_ms`); "slowly" waits past the keepalive. */
const mockReply = {
  reasoning: THINKING.join(""),
  text: TEXT.join(""),
  tool_calls: [{ name: TOOL, arguments: ARGS_TEXT }],
};
/** A legacy completion's: thinking and text, no tool call (it declares no tools). */
const mockCompletion = { reasoning: THINKING.join(""), text: COMPLETION_TEXT };
const mockScript: MockRule[] = [
  {
    match: { tools_offered: false, user_text: "slowly" },
    reply: { ...mockCompletion, delay_ms: 1_500 },
  },
  { match: { tools_offered: false, user_text: "(case" }, reply: mockCompletion },
  { match: { user_text: "slowly" }, reply: { ...mockReply, delay_ms: 1_500 } },
  { reply: mockReply },
] as MockRule[];

// ---- the cases ---------------------------------------------------------------------------------

interface Case {
  name: string;
  /** Named in its prompt, so a fake knows whose request it answers; the case's own account and key. */
  id: number;
  key: string;
  style: Style;
  target: Target;
  n: number;
  includeUsage: boolean;
  /** A messages client that asked for its thinking omitted (`thinking.display`). */
  omitThinking: boolean;
  /** The OpenAI fake names its thinking `reasoning`, as OpenRouter and vLLM do. */
  reasoningField: boolean;
  point: Point;
}

/**
 * The client is not shown the thinking: asked omitted, a translated Responses stream asked for no
 * summary, or a legacy completion, whose text has no place for it.
 */
const hidesThinking = (c: Case) =>
  c.omitThinking || (c.style === "responses" && c.target !== "native") || c.style === "completions";

function cases(): Case[] {
  const out: Case[] = [];
  const targets: Record<Style, Target[]> = {
    chat: ["openai", "anthropic", "gemini", "mock"],
    messages: ["openai", "anthropic", "gemini", "mock"],
    responses: ["openai", "anthropic", "gemini", "native", "mock"],
    completions: ["openai", "text-native", "mock"],
  };
  for (const style of ["chat", "messages", "responses", "completions"] as const) {
    for (const target of targets[style]) {
      // [n, include_usage, thinking omitted, OpenRouter's `reasoning` for `reasoning_content`]
      const variants: [number, boolean, boolean, boolean?][] =
        style === "messages"
          ? target === "anthropic"
            ? [[1, false, false]]
            : [
                [1, false, false],
                [1, false, true],
                ...(target === "openai"
                  ? [[1, false, false, true] as [number, boolean, boolean, boolean]]
                  : []),
              ]
          : style === "responses" || (style === "completions" && target === "mock")
            ? [[1, false, false]]
            : style === "completions"
              ? [
                  [1, false, false],
                  [2, false, false],
                  ...(target === "text-native"
                    ? [[1, true, false] as [number, boolean, boolean]]
                    : []),
                ]
              : target === "anthropic"
                ? [
                    [1, false, false],
                    [1, true, false],
                  ]
                : [
                    [1, false, false],
                    [1, true, false],
                    [2, false, false],
                    [2, true, false],
                  ];
      for (const [
        v,
        [n, includeUsage, omitThinking, reasoningField = false],
      ] of variants.entries()) {
        const points: Point[] = ["headers", "first", "thinking", "arguments", "end", "final"];
        // One keepalive case a style and target: it waits out the keepalive interval.
        if (v === 0) points.unshift("keepalive");
        for (const point of points) {
          // Gemini sends a call whole; the mock's stream is not held at a point, and a native
          // Responses stream's usage is its last event.
          if (target === "gemini" && point === "arguments") continue;
          if ((target === "mock" || target === "native") && point === "final") continue;
          // A legacy completion has no tool call; a server's own Completions API, no thinking.
          if (style === "completions" && point === "arguments") continue;
          if (target === "text-native" && point === "thinking") continue;
          const variant =
            style === "chat" || style === "completions"
              ? ` n=${n}${includeUsage ? " include_usage" : ""}`
              : omitThinking
                ? " thinking omitted"
                : reasoningField
                  ? " reasoning field"
                  : "";
          out.push({
            id: out.length,
            key: `kn-test-leaves-${String(out.length).padStart(4, "0")}-00000000`,
            name: `${style} -> ${target}${variant}: leaves at ${point}`,
            style,
            target,
            n,
            includeUsage,
            omitThinking,
            reasoningField,
            point,
          });
        }
      }
    }
  }
  return out;
}

const weatherTool = {
  chat: {
    type: "function",
    function: {
      name: TOOL,
      description: "The weather in a city.",
      parameters: { type: "object", properties: { city: { type: "string" } } },
    },
  },
  messages: {
    name: TOOL,
    description: "The weather in a city.",
    input_schema: { type: "object", properties: { city: { type: "string" } } },
  },
  responses: {
    type: "function",
    name: TOOL,
    description: "The weather in a city.",
    parameters: { type: "object", properties: { city: { type: "string" } } },
  },
};

function requestOf(c: Case): { path: string; body: Record<string, unknown> } {
  const model =
    c.target === "native" || c.target === "text-native"
      ? `m-${c.target}`
      : modelOn(c.target === "mock" ? "mock" : c.target);
  const prompt = `the weather in Paris (case ${c.id})${c.point === "keepalive" ? ", slowly" : ""}`;
  if (c.style === "chat")
    return {
      path: "/v1/chat/completions",
      body: {
        model,
        stream: true,
        max_tokens: 500,
        messages: [{ role: "user", content: prompt }],
        tools: [weatherTool.chat],
        ...(c.n > 1 ? { n: c.n } : {}),
        ...(c.includeUsage ? { stream_options: { include_usage: true } } : {}),
      },
    };
  if (c.style === "completions")
    return {
      path: "/v1/completions",
      body: {
        model,
        stream: true,
        max_tokens: 500,
        prompt,
        ...(c.n > 1 ? { n: c.n } : {}),
        ...(c.includeUsage ? { stream_options: { include_usage: true } } : {}),
      },
    };
  if (c.style === "messages")
    return {
      path: "/v1/messages",
      body: {
        model,
        stream: true,
        max_tokens: 2_000,
        messages: [{ role: "user", content: prompt }],
        tools: [weatherTool.messages],
        ...(c.omitThinking
          ? { thinking: { type: "enabled", budget_tokens: 1_024, display: "omitted" } }
          : {}),
      },
    };
  return {
    path: "/v1/responses",
    body: {
      model,
      stream: true,
      max_output_tokens: 500,
      input: prompt,
      tools: [weatherTool.responses],
    },
  };
}

interface Left {
  status: number;
  /** The request's id, as its answer's headers name it. */
  requestId: string | null;
  /** Output text the client read. */
  read: string[];
  /** Where the client left before any output: the first bytes of the body it got. */
  opening?: string;
  /** The point's output never reached the client within the bound. */
  unseen: boolean;
}

const markOf: Partial<Record<Point, string>> = {
  thinking: "mkthink",
  arguments: "mkargs",
  end: "mkend",
  final: "mkend",
};

/**
 * The client leaves with no output written: its stream's opening pieces are held until the first
 * output (docs/http-api.md), so it has only the headers a keepalive committed. Thinking it is not
 * shown is no output: at that point too it has nothing.
 */
const beforeOutput = (c: Case) =>
  c.point === "keepalive" || c.point === "headers" || (c.point === "thinking" && hidesThinking(c));

/** Sends the case's request and leaves at its point. */
async function leave(gw: TestGateway, c: Case): Promise<Left> {
  const { path, body } = requestOf(c);
  const abort = new AbortController();
  const left: Left = { status: 0, requestId: null, read: [], unseen: false };
  const res = await post(
    gw,
    path,
    body,
    { ...anyStyleHeaders, authorization: `Bearer ${c.key}` },
    abort.signal,
  );
  left.status = res.status;
  left.requestId = res.headers.get("x-request-id");
  const bound = setTimeout(() => {
    left.unseen = true;
    abort.abort();
  }, 3_000);
  if (res.status !== 200 || beforeOutput(c)) {
    try {
      const first = await res.body?.getReader().read();
      left.opening = new TextDecoder().decode(first?.value);
    } catch (err) {
      if (!abort.signal.aborted) throw err;
    } finally {
      clearTimeout(bound);
      abort.abort();
    }
    return left;
  }
  const mark = markOf[c.point];
  let marked = false;
  try {
    for await (const { event, data } of streamEvents(res)) {
      if (data === "[DONE]") continue;
      const output = outputIn(c.style, event, data);
      left.read.push(...output);
      // The first write the client gets: the held opening pieces and the first output.
      if (c.point === "first") {
        if (output.length > 0) break;
        continue;
      }
      marked ||= mark !== undefined && JSON.stringify(data).includes(mark);
      if (!marked) continue;
      if (c.point !== "final") break;
      // After the provider's final usage: the events that show it where the client sees them.
      if (c.style === "chat" && c.target === "openai" && c.includeUsage && !data.usage) continue;
      if (c.target === "text-native" && c.includeUsage && !data.usage) continue;
      if (c.style === "messages" && c.target === "anthropic" && event !== "message_delta") continue;
      break;
    }
  } catch (err) {
    if (!abort.signal.aborted) throw err;
  } finally {
    clearTimeout(bound);
    abort.abort();
  }
  return left;
}

/**
 * The step of a fake's stream that waits (its gate) until the client at `point` has gone: the
 * first for a keepalive; the first output the client is shown for the headers (the opening pieces
 * before it go, and are held); the one after the first output, or after the point's step.
 */
function gateAt(steps: Step[], c: Case): number {
  if (c.point === "keepalive") return 0;
  const shows = !hidesThinking(c);
  const output = steps.findIndex((s) => s.chars > 0 && (shows || !s.thinking));
  if (c.point === "headers") return output;
  if (c.point === "first") return output + 1;
  return steps.findIndex((s) => s.points?.includes(c.point)) + 1;
}

/**
 * What the gateway should bill a client that left before step `gate`: the fake's output before it
 * (its thinking only where the client is shown it), or the provider's count so far where larger.
 */
function expectedOutput(steps: Step[], gate: number, answers: number, thinking: boolean): number {
  let chars = 0;
  let reported = 0;
  for (const step of steps.slice(0, gate)) {
    if (thinking || !step.thinking) chars += step.chars;
    reported = step.reportsOutput ?? reported;
  }
  return Math.max(reported, tokensOf(answers * chars));
}

/** The rows of `account`'s requests, once there are `count`; at most 10 s. */
async function rowsOf(gw: TestGateway, account: string, count: number): Promise<Logged[]> {
  for (let i = 0; i < 500; i++) {
    const rows = (await logged(gw)).filter((row) => row.account === account);
    if (rows.length >= count) return rows;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error(`fewer than ${count} request-log rows of ${account} after 10 s`);
}

const price = (usage: { input_tokens: number; output_tokens: number }) =>
  usage.input_tokens * PRICE_IN + usage.output_tokens * PRICE_OUT;

/** What a client may be shown of the mock's answer at most. */
const VISIBLE = [...TEXT, TOOL, ...ARGS].join("").length;

const all = cases();
const accountOf = (c: Case) => `leaves-${c.id}`;

// Each case has its own account, key and fake stream, so the cases run at once.
describe.concurrent.each(backends)("a client that leaves, on %s", (backend) => {
  let gateway: EveryWireGateway;
  let gw: TestGateway;
  /** Each case's fake stream, released (its gate opened) once its client is gone. */
  const gates = new Map<number, () => void>();
  /** What the fake of each case streamed. */
  const streamed = new Map<number, { steps: Step[]; body: Record<string, unknown> }>();

  beforeAll(async () => {
    const reply =
      (make: (req: RecordedRequest, c: Case) => Step[]) =>
      (req: RecordedRequest): Reply => {
        const id = /\(case (\d+)\)/.exec(JSON.stringify(req.body));
        const c = all[Number(id?.[1])];
        const steps = make(req, c);
        streamed.set(c.id, { steps, body: req.body });
        const gate = deferred();
        gates.set(c.id, () => gate.resolve());
        const at = gateAt(steps, c);
        return {
          kind: "sse",
          steps: steps.map((s, i) => (i === at ? { ...s.step, gate: gate.promise } : s.step)),
        };
      };
    gateway = await gatewayOnEveryWire({
      backend,
      replies: {
        openai: (req) =>
          req.path.endsWith("/responses")
            ? reply((r) => nativeSteps(r))(req)
            : req.path.endsWith("/v1/completions")
              ? reply((r, c) => completionSteps(r, c.n))(req)
              : reply((r, c) =>
                  openaiSteps(
                    r,
                    c.style === "chat" || c.style === "completions" ? c.n : 1,
                    c.reasoningField,
                    c.style === "completions",
                  ),
                )(req),
        anthropic: reply(() => anthropicSteps()),
        gemini: reply((_r, c) => geminiSteps(c.style === "chat" ? c.n : 1)),
      },
      mock: { chunk_interval_ms: 10 },
      mockScript,
      prices: { input: PRICE_IN, output: PRICE_OUT },
      native: true,
      textNative: true,
      accounts: all.map((c) => ({
        id: accountOf(c),
        balance_idr: 1_000,
        rpm_limit: 1_000,
        keys: [{ id: `k-${c.id}`, value: c.key }],
      })),
    });
    gw = gateway.gw;
  });
  afterAll(async () => {
    for (const release of gates.values()) release();
    await gateway?.close();
  });

  it.for(all.map((c) => [c.name, c] as const))("%s", async ([, c], { expect }) => {
    const before = await money(gw, c.key);
    const left = await leave(gw, c);
    const rows = await rowsOf(gw, accountOf(c), 1);
    gates.get(c.id)?.();
    const after = await idleMoney(gw, c.key);
    const context = JSON.stringify({ left, rows });

    // One row, the request's, the balance down by its charge once, nothing held.
    expect(rows, context).toHaveLength(1);
    const [row] = rows;
    expect(row.id, context).toBe(left.requestId);
    expect(after.held, context).toBe(0);
    expect(before.balance - after.balance, context).toBe(row.cost_micro);
    expect(row.cost_micro, context).toBe(price(row.usage));
    expect(left.status, context).toBe(200);
    // The mock is not held at its point: its answer may end (whole, so unbilled for leaving) in
    // the moment between its last output and the client's leaving.
    if (c.target === "mock" && c.point === "end")
      expect([null, "client_closed"]).toContain(row.error_code);
    else expect(row.error_code, context).toBe("client_closed");
    const answers = c.style === "chat" || c.style === "completions" ? c.n : 1;

    if (beforeOutput(c) && !(c.target === "mock" && c.point !== "keepalive")) {
      // Nothing was written but the headers and a keepalive: free, whatever the provider had
      // sent and reported.
      expect(left.opening, context).toMatch(/^: keepalive\n/);
      expect(row.usage, context).toEqual({ input_tokens: 0, output_tokens: 0 });
    } else if (c.target === "mock") {
      // Not held at the point: at least what the client read, never thinking it is not shown
      // (unless the answer ended whole: then the mock's report of it), and an input the mock knows.
      // At the end the mock may have reported its whole answer, thinking included, before the
      // client's leaving was heard: a provider's report bills what it made.
      const read = tokensOf(left.read.join("").length);
      expect(left.unseen, `${context}: the point's output never reached the client`).toBe(false);
      expect(row.usage.output_tokens, context).toBeGreaterThanOrEqual(read);
      if (hidesThinking(c) && row.error_code === "client_closed" && c.point !== "end")
        expect(row.usage.output_tokens, context).toBeLessThanOrEqual(tokensOf(VISIBLE));
      expect(row.usage.input_tokens, context).toBeGreaterThan(0);
    } else {
      expect(left.unseen, `${context}: the point's output never reached the client`).toBe(false);
      const fake = streamed.get(c.id);
      if (!fake) throw new Error(`${context}: the fake was never asked`);
      const input =
        c.target === "anthropic"
          ? INPUT.anthropic
          : c.target === "gemini"
            ? INPUT.gemini
            : requestTextTokens(fake.body);
      expect(row.usage, context).toEqual({
        input_tokens: input,
        output_tokens: expectedOutput(
          fake.steps,
          gateAt(fake.steps, c),
          answers,
          !hidesThinking(c),
        ),
      });
    }

    // The same key is served again.
    const next = await post(
      gw,
      "/v1/chat/completions",
      { model: modelOn("mock"), messages: [{ role: "user", content: "still there?" }] },
      { ...anyStyleHeaders, authorization: `Bearer ${c.key}` },
    );
    expect(next.status).toBe(200);
    await next.text();
  });
});
