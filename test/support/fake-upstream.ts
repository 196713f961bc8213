import { createServer, type IncomingHttpHeaders, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { checkGemini, defaultGeminiAnswer, type GeminiRules } from "./gemini-wire.js";
import {
  answeredOrder,
  checkAnthropic,
  checkChat,
  checkCompact,
  checkCompletions,
  checkResponses,
  checkUnknownFields,
  defaultRules,
  type Refusal,
  type SignedThinking,
  type ThreadTurn,
  type WireRules,
} from "./upstream-rules.js";

/**
 * Fake provider APIs for integration tests: an OpenAI-compatible, an Anthropic-compatible and a
 * Google Gemini server on 127.0.0.1 (port 0; Gemini's rules and answers in `gemini-wire.ts`). Every request is recorded (path, headers, parsed body) and each
 * test scripts the answers: JSON, SSE streams chunk by chunk, errors, 429 with Retry-After,
 * hangs (for timeouts) and streams that break midway. Requests are checked first as the real
 * APIs check them (`upstream-rules.ts`): one that breaks a rule gets the real API's refusal and
 * takes no scripted reply.
 */

export interface RecordedRequest {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  /** The body parsed as JSON (undefined when it is not JSON). */
  body: Record<string, unknown>;
  raw: string;
  /** A Responses request to a native fake: its whole input, the held chain before its own. */
  items?: Record<string, unknown>[];
}

export interface SseStep {
  /** An object is JSON-encoded; a string is sent as is (e.g. "[DONE]"). */
  data: unknown;
  event?: string;
  /** Wait this long before writing the step. */
  delayMs?: number;
  /** Wait for this before writing the step (bounded by `gateTimeoutMs`). */
  gate?: Promise<unknown>;
}

export type Reply =
  | {
      kind: "json";
      status?: number;
      body: unknown;
      headers?: Record<string, string>;
      delayMs?: number;
      /** Send the first half of the body under a length for all of it, then cut the connection. */
      cutHalfway?: boolean;
    }
  | {
      kind: "sse";
      steps: SseStep[];
      /** `destroy` cuts the connection after the last step: a stream that broke midway. */
      end?: "close" | "destroy";
      /** Send nothing, not even the headers, for this long (a provider holding them through prefill). */
      holdHeadersMs?: number;
    }
  /** Never answers; the connection is cut when the server closes. */
  | { kind: "hang" }
  /**
   * A body written piece by piece: `piece(i)` for i = 0, 1, ... each `everyMs` apart (0: as fast
   * as the connection takes them), until it gives undefined or the connection closes. Every byte
   * written is counted in `dripped`.
   */
  | {
      kind: "drip";
      contentType: string;
      everyMs: number;
      piece: (index: number) => string | undefined;
    };

export type JsonReply = Extract<Reply, { kind: "json" }>;

export type Handler = (req: RecordedRequest) => Reply | Promise<Reply>;

/** When a step was written, so a test can tell what the client saw before it. */
export interface SentStep {
  index: number;
  at: number;
}

const gateTimeoutMs = 5_000;

export class FakeUpstream {
  readonly requests: RecordedRequest[] = [];
  readonly sent: SentStep[] = [];
  /** When each SSE answer's headers went out. */
  readonly headersSentAt: number[] = [];
  /** Requests whose connection the gateway closed before the fake finished answering. */
  aborted = 0;
  /** Bytes written by `drip` replies (since the last reset). */
  dripped = 0;
  private readonly queued: Reply[] = [];
  private handler: Handler;
  private readonly sockets = new Set<Socket>();
  /** Anthropic message threads the fake holds, by the id of their last reply. */
  private readonly threads = new Map<string, ThreadTurn>();
  /**
   * The thinking the fake answered with (Anthropic), by its signature: its text, and the order of
   * the answer's thinking and tool calls, which a later turn must keep.
   */
  private readonly signed = new Map<string, SignedThinking>();
  /**
   * Responses the fake stored (a native Responses API): each one's whole input and output, by id,
   * for the API key that made it (as OpenAI keeps them for the key's project only).
   */
  private readonly responses = new Map<string, Map<string, Record<string, unknown>[]>>();
  private replies = 0;
  /** Requests refused by the rules, with why. */
  readonly refused: Refusal[] = [];
  private readonly server = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on("data", (chunk: Buffer) => parts.push(chunk));
    req.on("end", () => {
      const raw = Buffer.concat(parts).toString("utf8");
      const recorded: RecordedRequest = {
        method: req.method ?? "GET",
        path: req.url ?? "/",
        headers: req.headers,
        body: parseJson(raw),
        raw,
      };
      this.requests.push(recorded);
      void this.answer(recorded, res);
    });
  });
  url = "";

  constructor(
    readonly wire: FakeWire,
    defaultHandler?: Handler,
    readonly rules: WireRules = defaultRules,
  ) {
    this.handler = defaultHandler ?? plainAnswer(wire);
    this.server.keepAliveTimeout = 30_000;
    this.server.on("connection", (socket) => {
      this.sockets.add(socket);
      socket.on("close", () => this.sockets.delete(socket));
    });
  }

  async start(): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  /** The base_url a provider config should use (both wires put `/v1` in the base). */
  get baseUrl(): string {
    return `${this.url}/v1`;
  }

  /** Answers every later request with `handler` (after any queued replies). */
  handle(handler: Handler): void {
    this.handler = handler;
  }

  /** The next requests get these replies, in order; then the handler answers again. */
  queue(...replies: Reply[]): void {
    this.queued.push(...replies);
  }

  /** Forget recorded requests and queued replies; the handler goes back to a plain answer. */
  reset(handler?: Handler): void {
    this.requests.length = 0;
    this.refused.length = 0;
    this.sent.length = 0;
    this.headersSentAt.length = 0;
    this.queued.length = 0;
    this.aborted = 0;
    this.dripped = 0;
    this.handler = handler ?? plainAnswer(this.wire);
  }

  get last(): RecordedRequest {
    const last = this.requests.at(-1);
    if (!last) throw new Error(`the fake ${this.wire} upstream got no request`);
    return last;
  }

  async close(): Promise<void> {
    await new Promise<void>((resolve) => {
      this.server.close(() => resolve());
      for (const socket of this.sockets) socket.destroy();
    });
  }

  private async drip(reply: Extract<Reply, { kind: "drip" }>, res: ServerResponse): Promise<void> {
    res.writeHead(200, { "content-type": reply.contentType, "cache-control": "no-cache" });
    res.flushHeaders();
    // The response is marked destroyed only at the socket's 'close', a turn of the loop after the
    // socket itself: in between Node drops every write silently, so a loop that looked at the
    // response alone ran through all the pieces at once and ended the answer, and the gateway's
    // cut was never counted (seen under load: 100 MB "written", `aborted` 0).
    const gone = () => res.destroyed || res.socket?.destroyed === true;
    for (let index = 0; !gone(); index++) {
      const piece = reply.piece(index);
      if (piece === undefined) break;
      this.dripped += Buffer.byteLength(piece);
      res.write(piece);
      // Written only as fast as the connection takes it: nothing piles up in the fake.
      while (!gone() && res.writableLength > 256 * 1024) await sleep(2);
      if (reply.everyMs > 0) await sleep(reply.everyMs);
    }
    if (!gone()) res.end();
  }

  /** The rules of the request's API, and for a thread the conversation it stands for. */
  private check(
    req: RecordedRequest,
  ):
    | { refusal: Refusal }
    | { conversation: ThreadTurn }
    | { items: Record<string, unknown>[] }
    | undefined {
    if (req.method !== "POST") return undefined;
    if (this.wire === "gemini") {
      const refusal = checkGemini(req, this.rules as GeminiRules);
      return refusal ? { refusal } : undefined;
    }
    if (this.wire === "openai" && req.path.endsWith("/responses/compact"))
      return checkCompact(req.body, this.responsesOf(req));
    if (
      this.wire === "openai" &&
      (req.path.endsWith("/responses") || req.path.endsWith("/responses/input_tokens"))
    )
      return checkResponses(req.body, this.responsesOf(req));
    if (this.wire === "anthropic" && req.path.endsWith("/messages"))
      return checkAnthropic(req.body, req.headers, this.rules, this.threads, this.signed);
    if (this.wire === "openai" && req.path.endsWith("/chat/completions")) {
      const refusal = checkUnknownFields(req.body, this.rules) ?? checkChat(req.body, this.rules);
      return refusal ? { refusal } : undefined;
    }
    if (this.wire === "openai" && req.path.endsWith("/completions")) {
      const refusal =
        checkUnknownFields(req.body, this.rules) ?? checkCompletions(req.body, this.rules);
      return refusal ? { refusal } : undefined;
    }
    return undefined;
  }

  /** A threaded reply gets an id of its own, under which the thread now holds the conversation. */
  private holdThread(reply: Reply, conversation: ThreadTurn): Reply {
    const id = `msg_thread_${++this.replies}`;
    let content: unknown[] = [];
    if (reply.kind === "json" && reply.body && typeof reply.body === "object") {
      const body = reply.body as { id?: string; content?: unknown[] };
      reply = { ...reply, body: { ...body, id } };
      content = body.content ?? [];
    } else if (reply.kind === "sse") {
      reply = {
        ...reply,
        steps: reply.steps.map((step) => {
          const data = step.data as { type?: string; message?: object; content_block?: unknown };
          if (data?.type === "content_block_start") content.push(data.content_block);
          if (data?.type !== "message_start") return step;
          return { ...step, data: { ...data, message: { ...data.message, id } } };
        }),
      };
    }
    this.threads.set(id, {
      ...conversation,
      messages: [...conversation.messages, { role: "assistant", content }],
    });
    return reply;
  }

  /** The responses held for the request's API key. */
  private responsesOf(req: RecordedRequest): Map<string, Record<string, unknown>[]> {
    const key = String(req.headers.authorization ?? "");
    let held = this.responses.get(key);
    if (!held) {
      held = new Map();
      this.responses.set(key, held);
    }
    return held;
  }

  /** A Responses answer is held under its id, with the input it answered, for a later turn. */
  private holdResponse(
    held: Map<string, Record<string, unknown>[]>,
    reply: Reply,
    input: Record<string, unknown>[],
  ): void {
    let response: { id?: unknown; output?: unknown } | undefined;
    if (reply.kind === "json") response = reply.body as typeof response;
    else if (reply.kind === "sse") {
      const done = reply.steps.find((step) => step.event === "response.completed");
      response = (done?.data as { response?: typeof response } | undefined)?.response;
    }
    if (typeof response?.id !== "string") return;
    const output = Array.isArray(response.output) ? response.output : [];
    held.set(response.id, [...input, ...output]);
  }

  private async answer(req: RecordedRequest, res: ServerResponse): Promise<void> {
    let cutByFake = false;
    res.on("close", () => {
      if (!res.writableEnded && !cutByFake) this.aborted++;
    });
    const checked = this.check(req);
    if (checked && "refusal" in checked) {
      this.refused.push(checked.refusal);
      res.writeHead(checked.refusal.status, { "content-type": "application/json" });
      res.end(JSON.stringify(checked.refusal.body));
      return;
    }
    if (checked && "items" in checked) req.items = checked.items;
    // OpenAI's count of a Responses input: the chain it holds and the new input, a token for
    // every four characters of their text here.
    if (checked && "items" in checked && req.path.endsWith("/responses/input_tokens")) {
      const chars =
        JSON.stringify(checked.items).length + String(req.body.instructions ?? "").length;
      res.writeHead(200, { "content-type": "application/json" });
      res.end(
        JSON.stringify({ object: "response.input_tokens", input_tokens: Math.ceil(chars / 4) }),
      );
      return;
    }
    let reply = this.queued.shift() ?? (await this.handler(req));
    if (checked && "conversation" in checked && req.body.thread)
      reply = this.holdThread(reply, checked.conversation);
    if (checked && "items" in checked && req.body.store !== false)
      this.holdResponse(this.responsesOf(req), reply, checked.items);
    if (this.wire === "anthropic") {
      const blocks = answeredBlocks(reply);
      const order = answeredOrder(blocks);
      for (const block of blocks)
        if (block.type === "thinking" && typeof block.signature === "string" && block.signature)
          this.signed.set(block.signature, { text: String(block.thinking ?? ""), order });
    }
    if (reply.kind === "hang") return;
    if (reply.kind === "drip") {
      await this.drip(reply, res);
      return;
    }
    if (reply.kind === "json") {
      if (reply.delayMs) await sleep(reply.delayMs);
      const text = typeof reply.body === "string" ? reply.body : JSON.stringify(reply.body);
      const headers = { "content-type": "application/json", ...reply.headers };
      if (reply.cutHalfway) {
        res.writeHead(reply.status ?? 200, {
          ...headers,
          "content-length": Buffer.byteLength(text),
        });
        res.write(text.slice(0, text.length >> 1));
        await sleep(20);
        cutByFake = true;
        res.socket?.destroy();
        return;
      }
      res.writeHead(reply.status ?? 200, headers);
      res.end(text);
      return;
    }
    if (reply.holdHeadersMs) await sleep(reply.holdHeadersMs);
    if (res.destroyed) return;
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
    res.flushHeaders();
    this.headersSentAt.push(Date.now());
    for (const [index, step] of reply.steps.entries()) {
      if (step.delayMs) await sleep(step.delayMs);
      if (step.gate) await Promise.race([step.gate, sleep(gateTimeoutMs)]);
      if (res.destroyed) return;
      const data = typeof step.data === "string" ? step.data : JSON.stringify(step.data);
      res.write(step.event ? `event: ${step.event}\ndata: ${data}\n\n` : `data: ${data}\n\n`);
      this.sent.push({ index, at: Date.now() });
    }
    if (reply.end === "destroy") {
      // Let the written bytes leave before the cut, so the client really saw a started stream.
      await sleep(20);
      cutByFake = true;
      res.socket?.destroy();
      return;
    }
    res.end();
  }
}

export type FakeWire = "openai" | "anthropic" | "gemini";

/** The content blocks of an Anthropic answer (JSON, or assembled from a stream's deltas). */
function answeredBlocks(reply: Reply): Record<string, unknown>[] {
  type Block = Record<string, unknown>;
  const found: Block[] = [];
  if (reply.kind === "json" && reply.body && typeof reply.body === "object") {
    const content = (reply.body as { content?: unknown }).content;
    if (Array.isArray(content)) found.push(...(content as Block[]));
  } else if (reply.kind === "sse") {
    const open = new Map<unknown, Block>();
    for (const step of reply.steps) {
      const data = step.data as {
        type?: unknown;
        index?: unknown;
        content_block?: Block;
        delta?: { type?: unknown; thinking?: unknown; signature?: unknown };
      };
      if (data?.type === "content_block_start" && data.content_block) {
        const block = { ...data.content_block };
        open.set(data.index, block);
        found.push(block);
      }
      const block = open.get(data?.index);
      if (data?.type !== "content_block_delta" || !block || !data.delta) continue;
      if (data.delta.type === "thinking_delta")
        block.thinking = String(block.thinking ?? "") + String(data.delta.thinking);
      if (data.delta.type === "signature_delta")
        block.signature = String(block.signature ?? "") + String(data.delta.signature);
    }
  }
  return found.filter((b) => typeof b === "object" && b !== null);
}

/** What a fake answers when no test scripted anything. */
function plainAnswer(wire: FakeWire): Handler {
  if (wire === "gemini") return defaultGeminiAnswer;
  return () => (wire === "openai" ? openaiJson("ok") : anthropicJson("ok"));
}

export async function fakeUpstream(
  wire: "openai" | "anthropic",
  handler?: Handler,
  rules?: WireRules,
): Promise<FakeUpstream> {
  return new FakeUpstream(wire, handler, rules).start();
}

function parseJson(raw: string): Record<string, unknown> {
  try {
    const value = JSON.parse(raw) as unknown;
    return value && typeof value === "object" ? (value as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** A promise with its resolver outside, for gating a fake stream on what the client has seen. */
export function deferred<T = void>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

// ---- OpenAI-compatible answers ------------------------------------------------

export interface OpenAIToolCall {
  id: string;
  name: string;
  arguments: string;
}

export function openaiJson(
  text: string | null,
  options: {
    toolCalls?: OpenAIToolCall[];
    finish?: string;
    usage?: [number, number];
    model?: string;
  } = {},
): JsonReply {
  const [prompt, completion] = options.usage ?? [11, 7];
  const message: Record<string, unknown> = { role: "assistant", content: text };
  if (options.toolCalls) {
    message.tool_calls = options.toolCalls.map((t) => ({
      id: t.id,
      type: "function",
      function: { name: t.name, arguments: t.arguments },
    }));
  }
  return {
    kind: "json",
    body: {
      id: "chatcmpl-fake",
      object: "chat.completion",
      created: 1_700_000_000,
      model: options.model ?? "upstream-model",
      choices: [
        {
          index: 0,
          message,
          logprobs: null,
          finish_reason: options.finish ?? (options.toolCalls ? "tool_calls" : "stop"),
        },
      ],
      usage: {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: prompt + completion,
      },
    },
  };
}

/** An OpenAI error body, as the real API sends it. */
export function openaiError(
  status: number,
  message: string,
  code: string | null,
  type = "invalid_request_error",
): JsonReply {
  return { kind: "json", status, body: { error: { message, type, param: null, code } } };
}

function chunk(
  delta: Record<string, unknown>,
  finish: string | null = null,
): Record<string, unknown> {
  return {
    id: "chatcmpl-fake",
    object: "chat.completion.chunk",
    created: 1_700_000_000,
    model: "upstream-model",
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
  };
}

function usageChunk(prompt: number, completion: number): Record<string, unknown> {
  return {
    id: "chatcmpl-fake",
    object: "chat.completion.chunk",
    created: 1_700_000_000,
    model: "upstream-model",
    choices: [],
    usage: {
      prompt_tokens: prompt,
      completion_tokens: completion,
      total_tokens: prompt + completion,
    },
  };
}

/** One chunk of an OpenAI stream of `n` answers that carries a delta of every choice at once. */
export function everyChoice(n: number, delta: object, finish: string | null = null): SseStep {
  return {
    data: {
      id: "chatcmpl-n",
      object: "chat.completion.chunk",
      created: 1_700_000_000,
      model: "gpt-up",
      choices: Array.from({ length: n }, (_, index) => ({
        index,
        delta,
        logprobs: null,
        finish_reason: finish,
      })),
    },
  };
}

/** OpenAI stream steps: role, one chunk per text piece, finish, usage, [DONE]. */
export function openaiStreamSteps(
  pieces: string[],
  options: { usage?: [number, number]; finish?: string } = {},
): SseStep[] {
  const [prompt, completion] = options.usage ?? [11, 7];
  return [
    { data: chunk({ role: "assistant", content: "" }) },
    ...pieces.map((p) => ({ data: chunk({ content: p }) })),
    { data: chunk({}, options.finish ?? "stop") },
    { data: usageChunk(prompt, completion) },
    { data: "[DONE]" },
  ];
}

/** A legacy Completions answer (`text_completion`), one choice a text, as OpenAI's API sends it. */
export function completionJson(
  texts: string[],
  options: { usage?: [number, number] | null; finish?: string; model?: string } = {},
): JsonReply {
  const [prompt, completion] = options.usage ?? [11, 7];
  return {
    kind: "json",
    body: {
      id: "cmpl-fake",
      object: "text_completion",
      created: 1_700_000_000,
      model: options.model ?? "upstream-model",
      choices: texts.map((text, index) => ({
        text,
        index,
        logprobs: null,
        finish_reason: options.finish ?? "stop",
      })),
      ...(options.usage === null
        ? {}
        : {
            usage: {
              prompt_tokens: prompt,
              completion_tokens: completion,
              total_tokens: prompt + completion,
            },
          }),
    },
  };
}

/** One chunk of a Completions stream: a piece of each of `texts.length` choices, or their finish. */
export function completionChunk(
  texts: string[],
  finish: string | null = null,
  model = "upstream-model",
): Record<string, unknown> {
  return {
    id: "cmpl-fake",
    object: "text_completion",
    created: 1_700_000_000,
    model,
    choices: texts.map((text, index) => ({ text, index, logprobs: null, finish_reason: finish })),
  };
}

/**
 * A Completions stream as OpenAI's API (and vLLM's) sends it: a chunk a piece of text, the finish
 * in a chunk of empty text, the usage chunk (`choices: []`, asked with `include_usage`; `null`
 * leaves it out), `[DONE]`.
 */
export function completionStreamSteps(
  pieces: string[],
  options: { usage?: [number, number] | null; finish?: string } = {},
): SseStep[] {
  const [prompt, completion] = options.usage ?? [11, 7];
  return [
    ...pieces.map((piece) => ({ data: completionChunk([piece]) })),
    { data: completionChunk([""], options.finish ?? "stop") },
    ...(options.usage === null
      ? []
      : [
          {
            data: {
              ...completionChunk([]),
              usage: {
                prompt_tokens: prompt,
                completion_tokens: completion,
                total_tokens: prompt + completion,
              },
            },
          },
        ]),
    { data: "[DONE]" },
  ];
}

/**
 * A streamed tool call whose arguments arrive split in several pieces, the way OpenAI sends them:
 * the first delta names the call, the next ones carry argument fragments only.
 */
export function openaiToolStreamSteps(
  calls: { id: string; name: string; argumentPieces: string[] }[],
  options: { text?: string; usage?: [number, number] } = {},
): SseStep[] {
  const [prompt, completion] = options.usage ?? [20, 15];
  const steps: SseStep[] = [{ data: chunk({ role: "assistant", content: options.text ?? null }) }];
  calls.forEach((call, index) => {
    steps.push({
      data: chunk({
        tool_calls: [
          { index, id: call.id, type: "function", function: { name: call.name, arguments: "" } },
        ],
      }),
    });
    for (const piece of call.argumentPieces) {
      steps.push({ data: chunk({ tool_calls: [{ index, function: { arguments: piece } }] }) });
    }
  });
  steps.push(
    { data: chunk({}, "tool_calls") },
    { data: usageChunk(prompt, completion) },
    { data: "[DONE]" },
  );
  return steps;
}

// ---- Anthropic-compatible answers ---------------------------------------------

export interface AnthropicToolUse {
  id: string;
  name: string;
  input: Record<string, unknown>;
}

/** A signed thinking block, as extended thinking returns it. */
export interface AnthropicThinking {
  text: string;
  signature: string;
}

export function anthropicJson(
  text: string | null,
  options: {
    toolUses?: AnthropicToolUse[];
    stop?: string;
    usage?: [number, number];
    thinking?: AnthropicThinking;
    /** A `redacted_thinking` block's data, after the thinking. */
    redacted?: string;
    /** The capacity that served the answer (`usage.service_tier`: standard, priority, batch). */
    serviceTier?: string;
  } = {},
): Reply {
  const [input, output] = options.usage ?? [13, 5];
  const content: Record<string, unknown>[] = [];
  if (options.thinking) {
    const { text: thinking, signature } = options.thinking;
    content.push({ type: "thinking", thinking, signature });
  }
  if (options.redacted) content.push({ type: "redacted_thinking", data: options.redacted });
  if (text !== null) content.push({ type: "text", text });
  for (const t of options.toolUses ?? [])
    content.push({ type: "tool_use", id: t.id, name: t.name, input: t.input });
  return {
    kind: "json",
    body: {
      id: "msg_fake",
      type: "message",
      role: "assistant",
      model: "upstream-model",
      content,
      stop_reason: options.stop ?? (options.toolUses ? "tool_use" : "end_turn"),
      stop_sequence: null,
      usage: {
        input_tokens: input,
        output_tokens: output,
        ...(options.serviceTier ? { service_tier: options.serviceTier } : {}),
      },
    },
  };
}

/** An Anthropic error body, as the real API sends it. */
export function anthropicError(status: number, type: string, message: string): JsonReply {
  return { kind: "json", status, body: { type: "error", error: { type, message } } };
}

function messageStart(input: number, serviceTier?: string): SseStep {
  return {
    event: "message_start",
    data: {
      type: "message_start",
      message: {
        id: "msg_fake",
        type: "message",
        role: "assistant",
        model: "upstream-model",
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: {
          input_tokens: input,
          output_tokens: 1,
          ...(serviceTier ? { service_tier: serviceTier } : {}),
        },
      },
    },
  };
}

function messageEnd(stop: string, output: number): SseStep[] {
  return [
    {
      event: "message_delta",
      data: {
        type: "message_delta",
        delta: { stop_reason: stop, stop_sequence: null },
        usage: { output_tokens: output },
      },
    },
    { event: "message_stop", data: { type: "message_stop" } },
  ];
}

/** Anthropic stream steps: message_start, one text block streamed in pieces, message_delta, message_stop. */
export function anthropicStreamSteps(
  pieces: string[],
  options: { usage?: [number, number]; stop?: string; serviceTier?: string } = {},
): SseStep[] {
  const [input, output] = options.usage ?? [13, 5];
  return [
    messageStart(input, options.serviceTier),
    {
      event: "content_block_start",
      data: { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
    },
    { event: "ping", data: { type: "ping" } },
    ...pieces.map((text) => ({
      event: "content_block_delta",
      data: { type: "content_block_delta", index: 0, delta: { type: "text_delta", text } },
    })),
    { event: "content_block_stop", data: { type: "content_block_stop", index: 0 } },
    ...messageEnd(options.stop ?? "end_turn", output),
  ];
}

/**
 * A thinking block, a text block, then tool_use blocks whose input JSON arrives in pieces
 * (input_json_delta); with no calls, an answer that ends its turn.
 */
export function anthropicToolStreamSteps(
  calls: { id: string; name: string; jsonPieces: string[] }[],
  options: { text?: string; usage?: [number, number]; thinking?: AnthropicThinking } = {},
): SseStep[] {
  const [input, output] = options.usage ?? [30, 12];
  const steps: SseStep[] = [messageStart(input)];
  let index = 0;
  if (options.thinking) {
    const delta = (d: Record<string, unknown>) => ({
      event: "content_block_delta",
      data: { type: "content_block_delta", index, delta: d },
    });
    const { text, signature } = options.thinking;
    const half = Math.ceil(text.length / 2);
    steps.push(
      {
        event: "content_block_start",
        data: {
          type: "content_block_start",
          index,
          content_block: { type: "thinking", thinking: "", signature: "" },
        },
      },
      delta({ type: "thinking_delta", thinking: text.slice(0, half) }),
      delta({ type: "thinking_delta", thinking: text.slice(half) }),
      delta({ type: "signature_delta", signature }),
      { event: "content_block_stop", data: { type: "content_block_stop", index } },
    );
    index++;
  }
  if (options.text) {
    steps.push(
      {
        event: "content_block_start",
        data: { type: "content_block_start", index, content_block: { type: "text", text: "" } },
      },
      {
        event: "content_block_delta",
        data: {
          type: "content_block_delta",
          index,
          delta: { type: "text_delta", text: options.text },
        },
      },
      { event: "content_block_stop", data: { type: "content_block_stop", index } },
    );
    index++;
  }
  for (const call of calls) {
    steps.push({
      event: "content_block_start",
      data: {
        type: "content_block_start",
        index,
        content_block: { type: "tool_use", id: call.id, name: call.name, input: {} },
      },
    });
    for (const partial_json of call.jsonPieces) {
      steps.push({
        event: "content_block_delta",
        data: {
          type: "content_block_delta",
          index,
          delta: { type: "input_json_delta", partial_json },
        },
      });
    }
    steps.push({ event: "content_block_stop", data: { type: "content_block_stop", index } });
    index++;
  }
  steps.push(...messageEnd(calls.length > 0 ? "tool_use" : "end_turn", output));
  return steps;
}

/**
 * An answer of these content blocks in this order (interleaved thinking: thinking, a call,
 * thinking, a call), JSON; the stop reason `tool_use` where there is a call.
 */
export function anthropicContentJson(
  content: Record<string, unknown>[],
  options: { usage?: [number, number] } = {},
): JsonReply {
  const [input, output] = options.usage ?? [13, 5];
  const calls = content.some((block) => block.type === "tool_use");
  return {
    kind: "json",
    body: {
      id: "msg_fake",
      type: "message",
      role: "assistant",
      model: "upstream-model",
      content,
      stop_reason: calls ? "tool_use" : "end_turn",
      stop_sequence: null,
      usage: { input_tokens: input, output_tokens: output },
    },
  };
}

/**
 * The same answer streamed: each block started, its thinking, text or input JSON in two pieces
 * and a thinking block's signature as deltas, then stopped.
 */
export function anthropicContentStreamSteps(
  content: Record<string, unknown>[],
  options: { usage?: [number, number] } = {},
): SseStep[] {
  const [input, output] = options.usage ?? [30, 12];
  const steps: SseStep[] = [messageStart(input)];
  const halves = (text: string) => [text.slice(0, text.length >> 1), text.slice(text.length >> 1)];
  for (const [index, block] of content.entries()) {
    const delta = (d: Record<string, unknown>): SseStep => ({
      event: "content_block_delta",
      data: { type: "content_block_delta", index, delta: d },
    });
    const start = (content_block: Record<string, unknown>): SseStep => ({
      event: "content_block_start",
      data: { type: "content_block_start", index, content_block },
    });
    if (block.type === "thinking") {
      steps.push(start({ type: "thinking", thinking: "", signature: "" }));
      for (const thinking of halves(String(block.thinking)))
        steps.push(delta({ type: "thinking_delta", thinking }));
      steps.push(delta({ type: "signature_delta", signature: block.signature }));
    } else if (block.type === "text") {
      steps.push(start({ type: "text", text: "" }));
      for (const text of halves(String(block.text)))
        steps.push(delta({ type: "text_delta", text }));
    } else if (block.type === "tool_use") {
      steps.push(start({ ...block, input: {} }));
      for (const partial_json of halves(JSON.stringify(block.input)))
        steps.push(delta({ type: "input_json_delta", partial_json }));
    } else steps.push(start(block));
    steps.push({ event: "content_block_stop", data: { type: "content_block_stop", index } });
  }
  const calls = content.some((block) => block.type === "tool_use");
  steps.push(...messageEnd(calls ? "tool_use" : "end_turn", output));
  return steps;
}

/** Authorization as the fake saw it, whichever header the wire uses. */
export function credentialSeen(req: RecordedRequest): string | undefined {
  const bearer = req.headers.authorization;
  if (typeof bearer === "string") return bearer.replace(/^Bearer /, "");
  const key = req.headers["x-api-key"];
  return typeof key === "string" ? key : undefined;
}
