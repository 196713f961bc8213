import { clearTimeout, performanceNow, setTimeout } from "../../host-timers.js";
import { providerOptions } from "../../store/provider-options.js";
import type { ProviderRow } from "../../store/types.js";
import { describeSystemError } from "../../system-errors.js";
import { GatewayError } from "../errors.js";
import type { GoneSignal } from "../time/gone-signal.js";
import { SSEStream } from "../wire/relay.js";
import { defaultMaxEventBytes } from "../wire/sse.js";
import { UpstreamFailure } from "../wire/upstream-failure.js";
import { failureOf } from "./classify.js";
import { type AnswerHandler, H1Agent, type UpstreamRequest } from "./h1-client.js";

/** Bounded read of an error body, only to classify it. */
const maxErrorBodyBytes = 64 * 1024;

/**
 * Largest whole answer (JSON, audio) read from a provider. Generous next to real answers; an
 * answer past it is cut off as it arrives and the attempt fails (503 upstream_error).
 */
export const defaultUpstreamAnswerLimitBytes = 32 * 1024 * 1024;

/** The longest a streamed answer may run by default: past any real answer, not forever. */
export const defaultMaxStreamMs = 60 * 60 * 1000;

type Body = string | Uint8Array;

/**
 * A provider's time and size bounds (docs/providers.md): `timeout_ms` bounds a whole answer from
 * the request to its last byte, and a stream's wait for its headers; `idleMs` the gap between two
 * pieces of any body; `maxStreamMs` a stream from the request on; `maxEventBytes` one event.
 */
export interface UpstreamBounds {
  idleMs: number;
  maxStreamMs: number;
  maxEventBytes: number;
}

const boundsOfRow = new WeakMap<UpstreamProvider, UpstreamBounds>();

/** The bounds a provider's config row sets, read once per row (a config apply makes new rows). */
export function upstreamBounds(provider: UpstreamProvider): UpstreamBounds {
  let bounds = boundsOfRow.get(provider);
  if (!bounds) {
    const options = providerOptions(provider);
    bounds = {
      idleMs: options.idle_timeout_ms ?? provider.timeout_ms,
      maxStreamMs: options.max_stream_ms ?? defaultMaxStreamMs,
      maxEventBytes: options.max_event_bytes ?? defaultMaxEventBytes,
    };
    boundsOfRow.set(provider, bounds);
  }
  return bounds;
}

/**
 * Pooled keep-alive HTTP to upstreams (`H1Agent`), shared by every provider wire.
 *
 * Whole answers (JSON, audio) are read by a small handler straight into a buffer. Streams are
 * read by another (`StreamReader`), which hands each chunk to the waiting reader directly and
 * pauses the connection for backpressure.
 */
export class UpstreamHttp {
  private readonly agent = new H1Agent();

  constructor(private readonly answerLimitBytes = defaultUpstreamAnswerLimitBytes) {}

  /** A 2xx JSON answer, parsed. */
  async postJson<T>(
    url: string,
    headers: Record<string, string>,
    body: Body,
    signal: GoneSignal,
    provider: UpstreamProvider,
  ): Promise<T> {
    return (await this.postJsonText<T>(url, headers, body, signal, provider)).json;
  }

  /** A 2xx JSON answer, parsed, with its text as the upstream wrote it. */
  async postJsonText<T>(
    url: string,
    headers: Record<string, string>,
    body: Body,
    signal: GoneSignal,
    provider: UpstreamProvider,
  ): Promise<{ json: T; text: string }> {
    const text = (await this.postForBytes(url, headers, body, signal, provider)).toString("utf8");
    return { json: parseJsonText<T>(text), text };
  }

  /**
   * A 2xx answer read whole, within the provider's `timeout_ms` from the request to its last
   * byte; any other status becomes the UpstreamFailure that classifies it.
   */
  async postForBytes(
    url: string,
    headers: Record<string, string>,
    // Bytes too: multipart uploads (audio transcriptions) are built as one buffer.
    body: Body,
    signal: GoneSignal,
    provider: UpstreamProvider,
  ): Promise<Buffer> {
    const { idleMs } = upstreamBounds(provider);
    // The connection bounds the wait for the headers and each gap in the body, not the whole: a body
    // dripped a byte at a time would never end.
    const deadline = new Deadline(signal, provider.timeout_ms);
    let answer: WholeAnswer;
    try {
      answer = await this.sendWhole(
        postOptions(url, headers, body, provider.timeout_ms, idleMs),
        deadline,
        provider,
      );
    } catch (err) {
      throw callFailure(err, signal, deadline);
    } finally {
      deadline.clear();
    }
    if (answer.status >= 200 && answer.status < 300) return answer.body;
    throw failureOf(answer.status, answer.headers["retry-after"], answer.body.toString("utf8"));
  }

  /**
   * A 2xx answer's body as it arrives; a cut, a gap longer than the idle bound or a stream
   * running past its longest while reading is a failure.
   */
  async postStream(
    url: string,
    headers: Record<string, string>,
    body: Body,
    signal: GoneSignal,
    provider: UpstreamProvider,
  ): Promise<AsyncIterable<Uint8Array>> {
    const { idleMs, maxStreamMs } = upstreamBounds(provider);
    const started = performanceNow();
    const deadline = new Deadline(signal, maxStreamMs);
    let answer: StreamAnswer;
    try {
      answer = await this.openStream(
        postOptions(url, headers, body, provider.timeout_ms, idleMs),
        deadline,
        provider,
      );
    } catch (err) {
      deadline.clear();
      throw callFailure(err, signal, deadline);
    }
    const status = answer.statusCode;
    if (status >= 200 && status < 300) {
      // A cassette's recording wraps the reader: its body gets the same failure mapping.
      return answer.body instanceof StreamReader
        ? answer.body
        : streamedBody(answer.body, deadline);
    }
    try {
      // A refusal is a whole answer, not a stream: read only what classifies it, within the
      // provider's timeout_ms from the request, never an endless or trickling error body.
      const left = Math.max(1, provider.timeout_ms - (performanceNow() - started));
      throw failureOf(status, answer.headers["retry-after"], await readBounded(answer.body, left));
    } finally {
      deadline.clear();
    }
  }

  /** A 2xx answer's server-sent events as they arrive, each within the provider's size bound. */
  async postEvents(
    url: string,
    headers: Record<string, string>,
    body: Body,
    signal: GoneSignal,
    provider: UpstreamProvider,
  ): Promise<SSEStream> {
    const stream = await this.postStream(url, headers, body, signal, provider);
    return new SSEStream(stream, upstreamBounds(provider).maxEventBytes);
  }

  /**
   * One POST, its answer read whole (bounded when not 2xx). Not async, like `openStream`: an
   * extra promise hop here would cost on every request. The cassette recorder wraps both.
   */
  protected sendWhole(
    options: UpstreamRequest,
    signal: GoneSignal,
    _provider: UpstreamProvider,
  ): Promise<WholeAnswer> {
    return readWhole(this.agent, options, signal, this.answerLimitBytes);
  }

  /** One POST whose body is read as it arrives. */
  protected openStream(
    options: UpstreamRequest,
    signal: GoneSignal,
    _provider: UpstreamProvider,
  ): Promise<StreamAnswer> {
    return readStream(this.agent, options, signal);
  }

  close(): Promise<void> {
    return this.agent.close();
  }

  /** A start that was refused: what the start made goes with it. */
  abandon(): Promise<void> {
    return this.close();
  }
}

/** Which provider a call goes to (cassettes name and match exchanges by it), and its bounds. */
export type UpstreamProvider = Pick<ProviderRow, "id" | "base_url" | "timeout_ms" | "options_json">;

export type UpstreamHeaders = Record<string, string | string[] | undefined>;

export interface WholeAnswer {
  status: number;
  headers: UpstreamHeaders;
  /** The whole body of a 2xx answer; at most `maxErrorBodyBytes` of any other. */
  body: Buffer;
}

export interface StreamAnswer {
  statusCode: number;
  headers: UpstreamHeaders;
  body: AsyncIterable<Uint8Array>;
}

function readWhole(
  agent: H1Agent,
  options: UpstreamRequest,
  signal: GoneSignal,
  limit: number,
): Promise<WholeAnswer> {
  return new Promise<WholeAnswer>((resolve, reject) => {
    agent.dispatch(options, new WholeAnswerReader(signal, limit, resolve, reject));
  });
}

/** Collects one answer into a buffer; the client's abort signal aborts the upstream call. */
class WholeAnswerReader implements AnswerHandler {
  private abort: ((err: Error) => void) | undefined;
  private status = 0;
  private rawHeaders: string[] = [];
  private readonly chunks: Buffer[] = [];
  private size = 0;
  private done = false;

  constructor(
    private readonly signal: GoneSignal,
    private readonly limit: number,
    private readonly resolve: (answer: WholeAnswer) => void,
    private readonly reject: (err: unknown) => void,
  ) {
    if (signal.aborted) this.finish(abortReason(signal));
    else signal.addEventListener("abort", this.onAbort, { once: true });
  }

  private readonly onAbort = () => {
    const reason = abortReason(this.signal);
    if (this.abort) this.abort(reason);
    // Still queued for a connection: answer now; onConnect aborts it once it gets one.
    else this.finish(reason);
  };

  onConnect(abort: (err: Error) => void): void {
    this.abort = abort;
    if (this.signal.aborted) abort(abortReason(this.signal));
  }

  onHeaders(
    statusCode: number,
    rawHeaders: string[],
    _resume: () => void,
    contentLength: number,
  ): boolean {
    this.status = statusCode;
    this.rawHeaders = rawHeaders;
    if (this.isWhole() && contentLength > this.limit) this.abort?.(answerTooLarge(this.limit));
    return true;
  }

  onData(chunk: Buffer): boolean {
    this.size += chunk.length;
    const whole = this.isWhole();
    if (whole && this.size > this.limit) {
      // Cut off as it arrives: what was read so far is dropped, never the whole answer held.
      this.chunks.length = 0;
      this.abort?.(answerTooLarge(this.limit));
      return false;
    }
    if (whole || this.size - chunk.length < maxErrorBodyBytes) this.chunks.push(chunk);
    return true;
  }

  private isWhole(): boolean {
    return this.status >= 200 && this.status < 300;
  }

  onComplete(): void {
    this.finish();
  }

  onError(err: Error): void {
    // An error body that breaks off still classifies by its status.
    const refused = this.status >= 300 && !this.signal.aborted;
    this.finish(refused ? undefined : err);
  }

  private finish(err?: unknown): void {
    if (this.done) return;
    this.done = true;
    this.signal.removeEventListener("abort", this.onAbort);
    if (err !== undefined) {
      this.reject(err);
      return;
    }
    const body = this.chunks.length === 1 ? this.chunks[0] : Buffer.concat(this.chunks);
    const whole = this.status >= 200 && this.status < 300;
    this.resolve(
      new ReadAnswer(
        this.status,
        this.rawHeaders,
        whole ? body : body.subarray(0, maxErrorBodyBytes),
      ),
    );
  }
}

/** The headers of an answer read here, made an object only when read (a refusal, a cassette). */
class RawHeaders {
  private parsed: UpstreamHeaders | undefined;

  constructor(private readonly rawHeaders: string[]) {}

  get headers(): UpstreamHeaders {
    this.parsed ??= headersOf(this.rawHeaders);
    return this.parsed;
  }
}

/** A header list as an object: names in lower case, a repeated header's values in a list. */
function headersOf(raw: string[]): UpstreamHeaders {
  const headers: UpstreamHeaders = {};
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i].toLowerCase();
    const value = raw[i + 1];
    const had = headers[name];
    if (had === undefined) headers[name] = value;
    else if (Array.isArray(had)) had.push(value);
    else headers[name] = [had, value];
  }
  return headers;
}

class ReadAnswer extends RawHeaders implements WholeAnswer {
  constructor(
    readonly status: number,
    rawHeaders: string[],
    readonly body: Buffer,
  ) {
    super(rawHeaders);
  }
}

class ReadStreamAnswer extends RawHeaders implements StreamAnswer {
  constructor(
    readonly statusCode: number,
    rawHeaders: string[],
    readonly body: StreamReader,
  ) {
    super(rawHeaders);
  }
}

function readStream(
  agent: H1Agent,
  options: UpstreamRequest,
  signal: GoneSignal,
): Promise<StreamAnswer> {
  return new Promise<StreamAnswer>((resolve, reject) => {
    agent.dispatch(options, new StreamReader(signal, resolve, reject));
  });
}

/** Bytes a stream's reader may fall behind by before the upstream connection is paused. */
const streamQueueBytes = 64 * 1024;

/**
 * A streaming answer's body, chunk by chunk as the connection reads it. A chunk the consumer is already
 * waiting for is handed over at once: Node's Readable and its async iterator in between cost a
 * buffer, events and a deferred 'readable' for every chunk of every stream. A reader that falls
 * behind pauses the connection. A cut, an idle gap or the stream's time bound while reading is
 * the provider failing, as `postStream` says; the call's `Deadline` is cleared once it is over.
 */
class StreamReader implements AnswerHandler, AsyncIterableIterator<Uint8Array> {
  private abort: ((err: Error) => void) | undefined;
  private resume: (() => void) | undefined;
  private paused = false;
  private started = false;
  private done = false;
  private failure: unknown;
  private readonly queue: Buffer[] = [];
  private queued = 0;
  private waiting:
    | { resolve: (r: IteratorResult<Uint8Array>) => void; reject: (err: unknown) => void }
    | undefined;

  constructor(
    private readonly signal: GoneSignal,
    private readonly resolveAnswer: (answer: StreamAnswer) => void,
    private readonly reject: (err: unknown) => void,
  ) {
    if (signal.aborted) this.onAbort();
    else signal.addEventListener("abort", this.onAbort, { once: true });
  }

  private readonly onAbort = () => {
    const reason = abortReason(this.signal);
    if (this.abort) this.abort(reason);
    // Still queued for a connection: fail now; onConnect aborts it once it gets one.
    else this.finish(reason);
  };

  onConnect(abort: (err: Error) => void): void {
    this.abort = abort;
    if (this.signal.aborted) abort(abortReason(this.signal));
  }

  onHeaders(statusCode: number, rawHeaders: string[], resume: () => void): boolean {
    this.started = true;
    this.resume = resume;
    this.resolveAnswer(new ReadStreamAnswer(statusCode, rawHeaders, this));
    return true;
  }

  onData(chunk: Buffer): boolean {
    const waiting = this.waiting;
    if (waiting) {
      this.waiting = undefined;
      waiting.resolve({ value: chunk, done: false });
      return true;
    }
    this.queue.push(chunk);
    this.queued += chunk.length;
    this.paused = this.queued > streamQueueBytes;
    return !this.paused;
  }

  onComplete(): void {
    this.finish();
  }

  onError(err: Error): void {
    this.finish(err);
  }

  next(): Promise<IteratorResult<Uint8Array>> {
    const chunk = this.queue.shift();
    if (chunk) {
      this.queued -= chunk.length;
      if (this.paused && this.queued <= streamQueueBytes) {
        this.paused = false;
        this.resume?.();
      }
      return Promise.resolve({ value: chunk, done: false });
    }
    if (this.failure !== undefined) return Promise.reject(this.failure);
    if (this.done) return Promise.resolve({ value: undefined, done: true });
    return new Promise((resolve, reject) => {
      this.waiting = { resolve, reject };
    });
  }

  /** The consumer stopped reading: the rest of the answer is not wanted. */
  return(): Promise<IteratorResult<Uint8Array>> {
    if (!this.done) this.abort?.(new Error("the stream's reader stopped"));
    this.finish();
    this.queue.length = 0;
    return Promise.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  private finish(err?: unknown): void {
    if (this.done) return;
    this.done = true;
    this.signal.removeEventListener("abort", this.onAbort);
    const deadline = this.signal instanceof Deadline ? this.signal : undefined;
    if (!this.started) {
      // postStream's caller maps it, as any failure before the headers.
      this.reject(err ?? new Error("the upstream closed before answering"));
      return;
    }
    deadline?.clear();
    if (err !== undefined) {
      this.failure = deadline?.expired
        ? new UpstreamFailure("unavailable", 504)
        : providerFailed(err);
    }
    const waiting = this.waiting;
    this.waiting = undefined;
    if (!waiting) return;
    if (this.failure === undefined) waiting.resolve({ value: undefined, done: true });
    else waiting.reject(this.failure);
  }
}

function answerTooLarge(limit: number): Error {
  return new Error(`the provider's answer is larger than ${limit} bytes`);
}

function abortReason(signal: GoneSignal): Error {
  return signal.reason instanceof Error ? signal.reason : new Error("aborted");
}

/**
 * Upstream URLs come from the provider config, so there are few of them: parse each once instead
 * of on every request (a WHATWG URL parse is a few microseconds on the hot path).
 */
const targetCache = new Map<string, { origin: string; path: string }>();
const maxCachedTargets = 1024;
function targetOf(url: string): { origin: string; path: string } {
  let target = targetCache.get(url);
  if (!target) {
    const parsed = new URL(url);
    target = { origin: parsed.origin, path: parsed.pathname + parsed.search };
    // Bounded in case a caller ever builds URLs per request.
    if (targetCache.size >= maxCachedTargets) targetCache.clear();
    targetCache.set(url, target);
  }
  return target;
}

const timeoutCodes = new Set([
  "UPSTREAM_HEADERS_TIMEOUT",
  "UPSTREAM_BODY_TIMEOUT",
  "UPSTREAM_CONNECT_TIMEOUT",
]);

/** A call that got no (whole) answer: the provider failed, or timed out (504). */
function providerFailed(err: unknown): UpstreamFailure {
  // A cassette's recording wraps a body `StreamReader` already read: its failure stays as it is.
  if (err instanceof UpstreamFailure) return err;
  const timedOut = timeoutCodes.has((err as { code?: string } | null)?.code ?? "");
  const failure = new UpstreamFailure("unavailable", timedOut ? 504 : 502);
  const cause = connectionError(err);
  if (cause) failure.unreachable = describeSystemError(cause);
  return failure;
}

/** The errors of a connection never made: the address, its name or the route to it. */
const connectCodes = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
]);

/** `err`, or the error it wraps, when it says no connection to the provider was made. */
function connectionError(err: unknown): unknown {
  for (let at = err, depth = 0; at && depth < 3; at = (at as { cause?: unknown }).cause, depth++)
    if (connectCodes.has(String((at as { code?: unknown }).code))) return at;
  return undefined;
}

/**
 * How a call given `signal` (what `sendWhole` and `openStream` get) ended when it failed with
 * `err`: its client left, a time bound passed, or the provider failed it (refused, cut, garbled).
 */
export function failedCall(err: unknown, signal: GoneSignal): "client left" | "timeout" | "failed" {
  if (signal instanceof Deadline && signal.expired) return "timeout";
  if (signal.aborted) return "client left";
  return timeoutCodes.has((err as { code?: string } | null)?.code ?? "") ? "timeout" : "failed";
}

/** Why a call failed: the client left (its own error), a bound passed (504), or the provider. */
function callFailure(err: unknown, client: GoneSignal, deadline: Deadline): unknown {
  if (client.aborted || err instanceof GatewayError) return err;
  return deadline.expired ? new UpstreamFailure("unavailable", 504) : providerFailed(err);
}

/**
 * The client's signal or the time bound of one upstream call, whichever comes first: what the
 * call's reader and the connection are given, so a call past its bound is cut as one whose client left.
 * `clear` once the call is over.
 */
class Deadline implements GoneSignal {
  aborted = false;
  reason: unknown = undefined;
  /** The bound passed (the client had not left before). */
  expired = false;
  private listeners: (() => void)[] = [];
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly client: GoneSignal,
    ms: number,
  ) {
    this.timer = setTimeout(this.expire, ms);
    if (client.aborted) this.abort(client.reason);
    else client.addEventListener("abort", this.clientLeft, { once: true });
  }

  private readonly clientLeft = () => this.abort(this.client.reason);

  private readonly expire = () => {
    if (this.aborted) return;
    this.expired = true;
    this.abort(new Error("the provider's answer passed its time bound"));
  };

  private abort(reason: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    this.clear();
    const listeners = this.listeners;
    this.listeners = [];
    for (const listener of listeners) listener();
  }

  addEventListener(_type: "abort", listener: () => void): void {
    if (!this.aborted) this.listeners.push(listener);
  }

  removeEventListener(_type: "abort", listener: () => void): void {
    const at = this.listeners.indexOf(listener);
    if (at !== -1) this.listeners.splice(at, 1);
  }

  clear(): void {
    clearTimeout(this.timer);
    this.client.removeEventListener("abort", this.clientLeft);
  }
}

/** One POST to an upstream URL. */
function postOptions(
  url: string,
  headers: Record<string, string>,
  body: Body,
  timeoutMs: number,
  idleMs: number,
): UpstreamRequest {
  const { origin, path } = targetOf(url);
  return {
    origin,
    path,
    method: "POST",
    headers,
    body,
    headersTimeout: timeoutMs,
    bodyTimeout: idleMs,
  };
}

/**
 * At most `maxErrorBodyBytes` of an error body, read for at most `ms`: the rest is not wanted, and
 * the reader's `return` closes the provider's connection.
 */
async function readBounded(body: AsyncIterable<Buffer | Uint8Array>, ms: number): Promise<string> {
  const parts: Buffer[] = [];
  let size = 0;
  const reader = body[Symbol.asyncIterator]();
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), ms);
  });
  let over = false;
  try {
    while (size < maxErrorBodyBytes) {
      const step = await Promise.race([reader.next(), late]);
      if (!step || step.done) {
        over = step?.done === true;
        break;
      }
      parts.push(Buffer.from(step.value));
      size += step.value.length;
    }
  } catch {
    // A broken error body still classifies by status.
    over = true;
  } finally {
    clearTimeout(timer);
  }
  if (!over) void reader.return?.()?.catch(() => {});
  return Buffer.concat(parts).toString("utf8").slice(0, maxErrorBodyBytes);
}

/**
 * The body of a streaming answer that `StreamReader` did not read (a cassette's). A cut, an idle timeout or the stream's time bound while reading
 * is the provider failing: before the first piece it becomes 503 upstream_error, after it the
 * route's stream error event (the path every broken stream takes, settled for what was delivered).
 */
async function* streamedBody(
  body: AsyncIterable<Uint8Array>,
  deadline: Deadline,
): AsyncGenerator<Uint8Array> {
  try {
    for await (const chunk of body) yield chunk;
  } catch (err) {
    throw deadline.expired ? new UpstreamFailure("unavailable", 504) : providerFailed(err);
  } finally {
    deadline.clear();
  }
}

/** A 2xx answer that should be JSON; a body that is not is the provider failing, not the client. */
export function parseJsonAnswer<T>(bytes: Buffer): T {
  return parseJsonText<T>(bytes.toString("utf8"));
}

function parseJsonText<T>(text: string): T {
  try {
    return JSON.parse(text) as T;
  } catch {
    throw new UpstreamFailure("unavailable", 502);
  }
}

/**
 * A provider's base URL and a path, joined once per pair: the same string each call is looked up
 * in `targetCache` by a hash computed once, where a new string is hashed again every request. The
 * path goes after the base's own path; a query string in the base (an `api-version`) stays the
 * URL's query, before any of the path's, and a fragment, which is never sent, is dropped.
 */
const joinedUrls = new Map<string, Map<string, string>>();

function joinedUrl(base: string, path: string): string {
  const hash = base.indexOf("#");
  const unhashed = hash < 0 ? base : base.slice(0, hash);
  const mark = unhashed.indexOf("?");
  if (mark < 0) return `${unhashed.replace(/\/+$/, "")}${path}`;
  const query = unhashed.slice(mark + 1);
  const root = `${unhashed.slice(0, mark).replace(/\/+$/, "")}${path}`;
  if (!query) return root;
  return root.includes("?") ? root.replace("?", () => `?${query}&`) : `${root}?${query}`;
}
export function joinUrl(base: string, path: string): string {
  let paths = joinedUrls.get(base);
  if (!paths) {
    // Bounded in case a caller ever joins URLs made per request.
    if (joinedUrls.size >= maxCachedTargets) joinedUrls.clear();
    paths = new Map();
    joinedUrls.set(base, paths);
  }
  let url = paths.get(path);
  if (url === undefined) {
    if (paths.size >= maxCachedTargets) paths.clear();
    url = joinedUrl(base, path);
    paths.set(path, url);
  }
  return url;
}
