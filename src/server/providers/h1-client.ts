import { channel } from "node:diagnostics_channel";
import { connect as connectTcp, isIP, type Socket } from "node:net";
import { type ConnectionOptions, connect as connectTls } from "node:tls";
import { clearTimeout, performanceNow, setTimeout } from "../../host-timers.js";

/**
 * The gateway's HTTP/1.1 client toward providers: keep-alive pools per origin, one request per
 * connection at a time, answers handed to a handler piece by piece as the socket delivers them.
 *
 * It replaces undici on the request path. The gateway sends one kind of request (a POST whose
 * body it already holds) and reads answers of three kinds (content-length, chunked, until close),
 * so a reader written for exactly that skips undici's general machinery: its WebAssembly parser,
 * the per-request Request object and header validation by regular expressions, the Readable
 * between the socket and the parser. docs/performance.md counts what that saves.
 */

export interface UpstreamRequest {
  /** `http://host:port` or `https://host:port`. */
  origin: string;
  path: string;
  method: string;
  headers: Record<string, string>;
  /** Sent whole, with its content-length. */
  body?: string | Uint8Array;
  /** From the dispatch until the answer's headers are complete. */
  headersTimeout: number;
  /** The longest gap between two pieces of the answer's body. */
  bodyTimeout: number;
}

export interface AnswerHandler {
  /** Called by `dispatch` itself; `abort` ends the call (queued or under way) with `err`. */
  onConnect(abort: (err: Error) => void): void;
  /**
   * The header list as written (name, value, name, value, ...), and the body's announced length
   * (-1 when the answer gives none).
   */
  onHeaders(
    status: number,
    rawHeaders: string[],
    resume: () => void,
    contentLength: number,
  ): boolean;
  /** `false` pauses the connection until `resume` is called. */
  onData(chunk: Buffer): boolean;
  onComplete(): void;
  onError(err: Error): void;
}

/**
 * A call's steps, published for profilers (`npm run bench -- --stages` times them): "sent" once
 * the request is written, "headers", each body "chunk", "done". One property read a step while
 * nobody subscribes.
 */
export const upstreamChannelName = "model-gateway:upstream";
const upstreamChannel = channel(upstreamChannelName);

export interface UpstreamStepMessage {
  step: "sent" | "headers" | "chunk" | "done";
  origin: string;
}

function publishStep(step: UpstreamStepMessage["step"], request: UpstreamRequest): void {
  upstreamChannel.publish({ step, origin: request.origin } satisfies UpstreamStepMessage);
}

export type UpstreamErrorCode =
  | "UPSTREAM_CONNECT_TIMEOUT"
  | "UPSTREAM_HEADERS_TIMEOUT"
  | "UPSTREAM_BODY_TIMEOUT"
  | "UPSTREAM_CLOSED"
  | "UPSTREAM_BAD_ANSWER"
  | "UPSTREAM_AGENT_CLOSED";

export class UpstreamError extends Error {
  constructor(
    readonly code: UpstreamErrorCode,
    message: string,
  ) {
    super(message);
    this.name = "UpstreamError";
  }
}

export interface H1AgentOptions {
  /** The longest a connection waits idle for its next request. */
  keepAliveMs?: number;
  connectionsPerOrigin?: number;
  connectTimeoutMs?: number;
  /** Added to every TLS connection's options (a test's own CA). */
  tls?: ConnectionOptions;
}

/** Largest header section of an answer. */
const maxHeadBytes = 64 * 1024;
/** A connection is not reused this close to the end of the idle time its server announced. */
const keepAliveMarginMs = 1_000;
/** Refused in a header name or value: it would end the header early and start another. */
const headerBreak = /[\r\n\0]/;
/** Refused in the request line's method and path. */
const lineBreakOrSpace = /[\r\n\0 ]/;

interface Pending {
  request: UpstreamRequest;
  handler: AnswerHandler;
  head: string;
  /** Ended: answered, failed or aborted. */
  over: boolean;
  connection: Connection | undefined;
  origin: Origin;
  /** Set while the call waits for a free connection: its headers' bound runs from dispatch. */
  queued: { since: number; timer: NodeJS.Timeout } | undefined;
}

export class H1Agent {
  private readonly origins = new Map<string, Origin>();
  readonly keepAliveMs: number;
  readonly connectTimeoutMs: number;
  private readonly perOrigin: number;
  private readonly tls: ConnectionOptions | undefined;
  private closed = false;
  private closing: { resolve: () => void; promise: Promise<void> } | undefined;

  constructor(options: H1AgentOptions = {}) {
    this.keepAliveMs = options.keepAliveMs ?? 30_000;
    this.perOrigin = options.connectionsPerOrigin ?? 256;
    this.connectTimeoutMs = options.connectTimeoutMs ?? 10_000;
    this.tls = options.tls;
  }

  dispatch(request: UpstreamRequest, handler: AnswerHandler): void {
    const origin = this.originOf(request.origin);
    const pending: Pending = {
      request,
      handler,
      head: "",
      over: false,
      connection: undefined,
      origin,
      queued: undefined,
    };
    handler.onConnect((err) => abortCall(pending, err));
    if (pending.over) return;
    if (this.closed) {
      endCall(pending, agentClosed());
      return;
    }
    try {
      pending.head = requestHead(request, origin.host);
    } catch (err) {
      endCall(pending, err as Error);
      return;
    }
    const connection = origin.take() ?? (origin.count < this.perOrigin ? origin.open() : undefined);
    if (connection) connection.send(pending);
    else origin.enqueue(pending);
  }

  connections(origin: string): { idle: number; total: number } {
    const found = this.origins.get(origin);
    return { idle: found?.idle.length ?? 0, total: found?.count ?? 0 };
  }

  close(): Promise<void> {
    this.closed = true;
    for (const origin of this.origins.values()) origin.closeIdle();
    if (this.openCount() === 0) return Promise.resolve();
    if (!this.closing) {
      let resolve!: () => void;
      const promise = new Promise<void>((ok) => (resolve = ok));
      this.closing = { resolve, promise };
    }
    return this.closing.promise;
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** A connection of an origin closed: the agent's close may be over. */
  connectionGone(): void {
    if (this.closing && this.openCount() === 0) this.closing.resolve();
  }

  /**
   * A plain connection reads into this one buffer and hands on a copy of each read: Node's
   * Readable and a fresh 64 KiB allocation a read are skipped, and nothing keeps a view of it.
   */
  private readonly readInto = Buffer.allocUnsafe(65536);

  openSocket(url: URL, session: Buffer | undefined, onData: (data: Buffer) => void): Socket {
    const port = Number(url.port) || (url.protocol === "https:" ? 443 : 80);
    const host = url.hostname.startsWith("[") ? url.hostname.slice(1, -1) : url.hostname;
    if (url.protocol === "https:") {
      return connectTls({
        ...this.tls,
        host,
        port,
        servername: isIP(host) ? undefined : host,
        ALPNProtocols: ["http/1.1"],
        session,
      });
    }
    const buffer = this.readInto;
    return connectTcp({
      host,
      port,
      onread: {
        buffer,
        callback: (size: number) => {
          const data = Buffer.allocUnsafe(size);
          buffer.copy(data, 0, 0, size);
          onData(data);
          return true;
        },
      },
    });
  }

  private openCount(): number {
    let open = 0;
    for (const origin of this.origins.values()) open += origin.count;
    return open;
  }

  private originOf(origin: string): Origin {
    let found = this.origins.get(origin);
    if (!found) {
      found = new Origin(this, new URL(origin));
      this.origins.set(origin, found);
    }
    return found;
  }
}

/** Ends a call that is not over with `err`. */
function endCall(pending: Pending, err: Error): void {
  if (pending.over) return;
  pending.over = true;
  pending.handler.onError(err);
}

/** The handler's abort: a queued call leaves the queue, one under way loses its connection. */
function abortCall(pending: Pending, err: Error): void {
  if (pending.over) return;
  if (pending.connection) {
    pending.connection.fail(err);
    return;
  }
  pending.origin.dequeue(pending);
  endCall(pending, err);
}

/** The connections to one origin: idle ones (newest last), and calls waiting for one. */
class Origin {
  readonly idle: Connection[] = [];
  readonly queue: Pending[] = [];
  count = 0;
  readonly host: string;

  constructor(
    readonly agent: H1Agent,
    readonly url: URL,
  ) {
    this.host = url.host;
  }

  /** The most recently used idle connection still inside its keep-alive time. */
  take(): Connection | undefined {
    const now = performanceNow();
    for (;;) {
      const connection = this.idle.pop();
      if (!connection) return undefined;
      if (now < connection.reusableUntil && connection.writable) return connection;
      connection.destroy();
    }
  }

  open(): Connection {
    this.count++;
    let connection: Connection | undefined;
    const socket = this.agent.openSocket(this.url, this.tlsSession, (data) =>
      connection?.onSocketData(data),
    );
    // A later connection resumes this one's TLS session: one round trip less.
    if (this.url.protocol === "https:") socket.on("session", this.keepSession);
    connection = new Connection(this, socket);
    return connection;
  }

  private tlsSession: Buffer | undefined;

  private readonly keepSession = (session: Buffer) => {
    this.tlsSession = session;
  };

  enqueue(pending: Pending): void {
    const timer = setTimeout(() => {
      this.dequeue(pending);
      endCall(pending, headersLate());
    }, pending.request.headersTimeout);
    pending.queued = { since: performanceNow(), timer };
    this.queue.push(pending);
  }

  dequeue(pending: Pending): void {
    if (pending.queued) clearTimeout(pending.queued.timer);
    const at = this.queue.indexOf(pending);
    if (at !== -1) this.queue.splice(at, 1);
  }

  private next(): Pending | undefined {
    const next = this.queue.shift();
    if (next?.queued) clearTimeout(next.queued.timer);
    return next;
  }

  /** A connection finished an answer and can carry another call. */
  release(connection: Connection): void {
    const next = this.next();
    if (next) connection.send(next);
    else if (this.agent.isClosed) connection.destroy();
    else {
      this.idle.push(connection);
      this.sweepLater(connection.reusableUntil);
    }
  }

  /** A connection closed: it leaves the pool, and a waiting call gets a new one. */
  gone(connection: Connection): void {
    this.count--;
    const at = this.idle.indexOf(connection);
    if (at !== -1) this.idle.splice(at, 1);
    const next = this.next();
    if (next) this.open().send(next);
    this.agent.connectionGone();
  }

  private sweep: NodeJS.Timeout | undefined;

  /** Idle connections past their keep-alive time are closed, not left for the server to drop. */
  private sweepLater(at: number): void {
    if (this.sweep) return;
    this.sweep = setTimeout(this.sweepIdle, Math.max(0, at - performanceNow()) + 1);
    this.sweep.unref();
  }

  private readonly sweepIdle = () => {
    this.sweep = undefined;
    const now = performanceNow();
    let soonest = Infinity;
    for (const connection of [...this.idle]) {
      if (now >= connection.reusableUntil) connection.destroy();
      else soonest = Math.min(soonest, connection.reusableUntil);
    }
    if (soonest !== Infinity) this.sweepLater(soonest);
  };

  closeIdle(): void {
    clearTimeout(this.sweep);
    this.sweep = undefined;
    for (const connection of this.idle.splice(0)) connection.destroy();
    for (const pending of this.queue.splice(0)) {
      if (pending.queued) clearTimeout(pending.queued.timer);
      endCall(pending, agentClosed());
    }
  }
}

enum Read {
  Head,
  Length,
  ChunkSize,
  ChunkData,
  ChunkEnd,
  Trailers,
  UntilClose,
}

const closedEarly = "the upstream closed the connection before its answer ended";

/** One socket to an origin and the answer being read on it. */
class Connection {
  private pending: Pending | undefined;
  private state = Read.Head;
  /** Bytes of the current content-length body or chunk still to come. */
  private left = 0;
  /** A head or a chunk's line split between reads. */
  private partial: Buffer | undefined;
  /** Unread bytes kept while the handler has paused the connection. */
  private held: Buffer | undefined;
  private paused = false;
  private keepAlive = true;
  /** How long the server said it keeps an idle connection, less a margin. */
  private serverIdleMs = Infinity;
  private inBody = false;
  private lastActivity = 0;
  private timer: NodeJS.Timeout | undefined;
  private connectTimer: NodeJS.Timeout | undefined;
  /** Inside `read`: an answer that ends there is released once the read is over. */
  private reading = false;
  private ended = false;
  private closed = false;
  private counted = true;
  reusableUntil = 0;

  constructor(
    private readonly origin: Origin,
    private readonly socket: Socket,
  ) {
    socket.setNoDelay(true);
    this.connectTimer = setTimeout(this.connectTimedOut, origin.agent.connectTimeoutMs);
    socket.once(origin.url.protocol === "https:" ? "secureConnect" : "connect", this.connected);
    if (origin.url.protocol === "https:") socket.on("data", this.onSocketData);
    socket.on("end", this.onSocketEnd);
    socket.on("error", this.fail);
    socket.on("close", this.onSocketClose);
  }

  private readonly connected = () => {
    clearTimeout(this.connectTimer);
    this.connectTimer = undefined;
  };

  private readonly connectTimedOut = () => {
    this.fail(
      new UpstreamError(
        "UPSTREAM_CONNECT_TIMEOUT",
        "the upstream did not accept a connection in time",
      ),
    );
  };

  send(pending: Pending): void {
    pending.connection = this;
    this.pending = pending;
    this.state = Read.Head;
    this.keepAlive = true;
    this.serverIdleMs = Infinity;
    this.inBody = false;
    const waited = pending.queued ? performanceNow() - pending.queued.since : 0;
    pending.queued = undefined;
    this.timer = setTimeout(this.timedOut, Math.max(1, pending.request.headersTimeout - waited));
    const { head, request } = pending;
    const body = request.body;
    if (body === undefined) this.socket.write(head, "latin1");
    else if (typeof body === "string") this.socket.write(head + body);
    else {
      this.socket.cork();
      this.socket.write(head, "latin1");
      this.socket.write(body);
      this.socket.uncork();
    }
    if (upstreamChannel.hasSubscribers) publishStep("sent", request);
  }

  destroy(): void {
    this.closed = true;
    this.socket.destroy();
  }

  /** Not ended by the server, even if its close has not been heard yet. */
  get writable(): boolean {
    return !this.closed && this.socket.writable;
  }

  /** The call under way fails; the connection cannot carry another. */
  readonly fail = (err: Error) => {
    const pending = this.pending;
    this.pending = undefined;
    clearTimeout(this.timer);
    this.destroy();
    this.leavePool();
    if (pending) endCall(pending, err);
  };

  /** The pool stops counting this connection, once. */
  private leavePool(): void {
    if (!this.counted) return;
    this.counted = false;
    this.origin.gone(this);
  }

  private readonly timedOut = () => {
    const pending = this.pending;
    if (!pending) return;
    if (!this.inBody) {
      this.fail(
        new UpstreamError(
          "UPSTREAM_HEADERS_TIMEOUT",
          "the upstream's answer did not start in time",
        ),
      );
      return;
    }
    const bound = pending.request.bodyTimeout;
    // A reader that paused the connection is not the upstream's silence.
    const quiet = this.paused ? 0 : performanceNow() - this.lastActivity;
    if (quiet >= bound)
      this.fail(
        new UpstreamError("UPSTREAM_BODY_TIMEOUT", "the upstream's answer paused too long"),
      );
    else this.timer = setTimeout(this.timedOut, bound - quiet);
  };

  readonly onSocketData = (data: Buffer) => {
    if (!this.pending) {
      // Bytes nobody asked for: the connection's framing can no longer be trusted.
      this.destroy();
      return;
    }
    this.lastActivity = performanceNow();
    this.read(data);
  };

  private readonly onSocketEnd = () => {
    if (!this.pending) return;
    if (this.state === Read.UntilClose && !this.paused) this.finish();
    else this.fail(new UpstreamError("UPSTREAM_CLOSED", closedEarly));
  };

  private readonly onSocketClose = () => {
    clearTimeout(this.connectTimer);
    this.closed = true;
    if (this.pending) this.fail(new UpstreamError("UPSTREAM_CLOSED", closedEarly));
    else this.leavePool();
  };

  /** The answer is whole: the handler hears so, and the connection carries the next call. */
  private finish(): void {
    const pending = this.pending;
    if (!pending) return;
    this.pending = undefined;
    pending.connection = undefined;
    clearTimeout(this.timer);
    if (this.paused) {
      this.paused = false;
      this.held = undefined;
      if (!this.closed) this.socket.resume();
    }
    // A body still being written is one the server stopped reading: the framing is unsure.
    const reusable = this.keepAlive && !this.closed && this.socket.writableLength === 0;
    if (reusable) {
      const idleMs = Math.min(this.origin.agent.keepAliveMs, this.serverIdleMs);
      this.reusableUntil = performanceNow() + idleMs;
    } else {
      this.destroy();
      this.leavePool();
    }
    pending.over = true;
    if (upstreamChannel.hasSubscribers) publishStep("done", pending.request);
    pending.handler.onComplete();
    if (!reusable) return;
    if (this.reading) this.ended = true;
    else if (!this.closed) this.origin.release(this);
  }

  private resumeFor(pending: Pending): () => void {
    return () => {
      if (this.pending !== pending || !this.paused) return;
      this.paused = false;
      const held = this.held;
      this.held = undefined;
      if (held) this.read(held);
      if (!this.paused && !this.closed) this.socket.resume();
    };
  }

  /** Reads what the socket delivered, as far as the handler lets it. */
  private read(data: Buffer): void {
    this.reading = true;
    let at = 0;
    while (at < data.length) {
      const pending = this.pending;
      if (!pending) break;
      if (this.paused) {
        this.held = data.subarray(at);
        at = data.length;
        break;
      }
      switch (this.state) {
        case Read.Head:
          at = this.readHead(data, at, pending);
          break;
        case Read.Length:
        case Read.ChunkData: {
          const take = Math.min(this.left, data.length - at);
          const chunk = at === 0 && take === data.length ? data : data.subarray(at, at + take);
          this.left -= take;
          at += take;
          const last = this.left === 0;
          if (last && this.state === Read.ChunkData) this.state = Read.ChunkEnd;
          this.deliver(chunk, pending);
          if (last && this.state === Read.Length && this.pending === pending) this.finish();
          break;
        }
        case Read.UntilClose:
          this.deliver(at === 0 ? data : data.subarray(at), pending);
          at = data.length;
          break;
        default:
          at = this.readLine(data, at);
      }
    }
    this.reading = false;
    if (!this.ended) return;
    this.ended = false;
    // More bytes after the answer: no request asked for them.
    if (at < data.length) {
      this.destroy();
      this.leavePool();
    } else if (!this.closed) this.origin.release(this);
  }

  private deliver(chunk: Buffer, pending: Pending): void {
    if (chunk.length === 0) return;
    if (upstreamChannel.hasSubscribers) publishStep("chunk", pending.request);
    if (!pending.handler.onData(chunk)) this.pause();
  }

  private pause(): void {
    if (this.paused) return;
    this.paused = true;
    this.socket.pause();
  }

  private bad(message: string, data: Buffer): number {
    this.fail(new UpstreamError("UPSTREAM_BAD_ANSWER", message));
    return data.length;
  }

  /** The status line and headers; returns where the body starts, or the end when incomplete. */
  private readHead(data: Buffer, at: number, pending: Pending): number {
    let buffer = data;
    let start = at;
    const partial = this.partial;
    if (partial) {
      buffer = Buffer.concat([partial, data.subarray(at)]);
      start = 0;
    }
    const end = buffer.indexOf("\r\n\r\n", start, "latin1");
    if (end === -1 || end - start > maxHeadBytes) {
      if (buffer.length - start > maxHeadBytes)
        return this.bad("the upstream's answer headers are too large", data);
      this.partial = Buffer.from(buffer.subarray(start));
      return data.length;
    }
    this.partial = undefined;
    // Where the body starts in `data`.
    const after = partial ? at + end + 4 - partial.length : end + 4;
    const lines = buffer.toString("latin1", start, end).split("\r\n");
    const status = statusOf(lines[0]);
    if (status === 0) return this.bad("the upstream's answer is not HTTP/1.1", data);
    // An interim answer (100 Continue, 103 Early Hints): the real one follows.
    if (status < 200) return after;
    const raw: string[] = [];
    let length = -1;
    let chunked = false;
    this.keepAlive = lines[0].charCodeAt(7) !== 48; // HTTP/1.0 closes unless it says otherwise
    for (let i = 1; i < lines.length; i++) {
      const line = lines[i];
      const colon = line.indexOf(":");
      if (colon <= 0) return this.bad("the upstream's answer has a malformed header", data);
      const name = line.slice(0, colon);
      const value = line.slice(colon + 1).trim();
      raw.push(name, value);
      switch (name.length) {
        case 10:
          if (isHeader(name, "connection", "Connection")) {
            const option = value.toLowerCase();
            if (option.includes("close")) this.keepAlive = false;
            else if (option.includes("keep-alive")) this.keepAlive = true;
          } else if (isHeader(name, "keep-alive", "Keep-Alive")) {
            const timeout = /timeout=(\d+)/i.exec(value);
            if (timeout) this.serverIdleMs = Number(timeout[1]) * 1000 - keepAliveMarginMs;
          }
          break;
        case 14:
          if (isHeader(name, "content-length", "Content-Length")) {
            const n = digitsOnly(value) ? Number(value) : Number.NaN;
            if (Number.isNaN(n) || (length !== -1 && length !== n))
              return this.bad("the upstream's content-length is not valid", data);
            length = n;
          }
          break;
        case 17:
          if (isHeader(name, "transfer-encoding", "Transfer-Encoding"))
            chunked = value.toLowerCase().endsWith("chunked");
          break;
      }
    }
    clearTimeout(this.timer);
    this.inBody = true;
    this.lastActivity = performanceNow();
    this.timer = setTimeout(this.timedOut, pending.request.bodyTimeout);
    let whole = false;
    if (status === 204 || status === 304) whole = true;
    else if (chunked) {
      this.state = Read.ChunkSize;
      // Both framings in one answer (RFC 9112 6.3): read it chunked, then trust the connection no more.
      if (length >= 0) this.keepAlive = false;
    } else if (length >= 0) {
      this.left = length;
      this.state = Read.Length;
      whole = length === 0;
    } else {
      this.state = Read.UntilClose;
      this.keepAlive = false;
    }
    if (upstreamChannel.hasSubscribers) publishStep("headers", pending.request);
    if (!pending.handler.onHeaders(status, raw, this.resumeFor(pending), length)) this.pause();
    if (whole && this.pending === pending) this.finish();
    return after;
  }

  /** A chunk's size line, the line break after its data, or a trailer line. */
  private readLine(data: Buffer, at: number): number {
    if (!this.partial) {
      // The usual lines, whole in this read, read from the bytes without making a string.
      if (this.state === Read.ChunkEnd && data[at] === 13 && data[at + 1] === 10) {
        this.state = Read.ChunkSize;
        return at + 2;
      }
      if (this.state === Read.ChunkSize) {
        let size = 0;
        let i = at;
        for (; i < data.length && i - at < 12; i++) {
          const digit = hexDigit(data[i]);
          if (digit < 0) break;
          size = size * 16 + digit;
        }
        if (i > at && data[i] === 13 && data[i + 1] === 10) {
          if (size === 0) this.state = Read.Trailers;
          else {
            this.left = size;
            this.state = Read.ChunkData;
          }
          return i + 2;
        }
      }
    }
    const lf = data.indexOf(10, at);
    if (lf === -1) {
      const part = data.subarray(at);
      this.partial = this.partial ? Buffer.concat([this.partial, part]) : Buffer.from(part);
      if (this.partial.length > maxHeadBytes)
        return this.bad("the upstream's chunked framing is malformed", data);
      return data.length;
    }
    let line = data.toString("latin1", at, lf);
    if (this.partial) {
      line = this.partial.toString("latin1") + line;
      this.partial = undefined;
    }
    if (line.endsWith("\r")) line = line.slice(0, -1);
    const next = lf + 1;
    if (this.state === Read.ChunkEnd) {
      if (line !== "") return this.bad("the upstream's chunked framing is malformed", data);
      this.state = Read.ChunkSize;
      return next;
    }
    if (this.state === Read.Trailers) {
      if (line === "") this.finish();
      return next;
    }
    const semicolon = line.indexOf(";");
    const hex = (semicolon === -1 ? line : line.slice(0, semicolon)).trim();
    const size = /^[0-9a-fA-F]{1,12}$/.test(hex) ? parseInt(hex, 16) : NaN;
    if (Number.isNaN(size)) return this.bad("the upstream's chunked framing is malformed", data);
    if (size === 0) this.state = Read.Trailers;
    else {
      this.left = size;
      this.state = Read.ChunkData;
    }
    return next;
  }
}

/** A header name is `lower` in any case; the two usual spellings are compared without a copy. */
function isHeader(name: string, lower: string, title: string): boolean {
  return name === lower || name === title || name.toLowerCase() === lower;
}

/** One to fifteen ASCII digits: a length JavaScript's numbers hold exactly. */
function digitsOnly(value: string): boolean {
  if (value.length === 0 || value.length > 15) return false;
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (c < 48 || c > 57) return false;
  }
  return true;
}

function hexDigit(byte: number): number {
  if (byte >= 48 && byte <= 57) return byte - 48;
  if (byte >= 97 && byte <= 102) return byte - 87;
  if (byte >= 65 && byte <= 70) return byte - 55;
  return -1;
}

function agentClosed(): UpstreamError {
  return new UpstreamError("UPSTREAM_AGENT_CLOSED", "the upstream client is closed");
}

function headersLate(): UpstreamError {
  return new UpstreamError(
    "UPSTREAM_HEADERS_TIMEOUT",
    "the upstream's answer did not start in time",
  );
}

/** The status of `HTTP/1.x NNN reason`, or 0 for anything else. */
function statusOf(line: string): number {
  if (!line.startsWith("HTTP/1.") || line.charCodeAt(8) !== 32 || line.charCodeAt(12) > 32)
    return 0;
  const status = Number(line.slice(9, 12));
  return Number.isInteger(status) && status >= 100 && status <= 999 ? status : 0;
}

/** The request line and headers, with the host and the body's length. */
function requestHead(request: UpstreamRequest, host: string): string {
  const { method, path, headers } = request;
  if (lineBreakOrSpace.test(method) || lineBreakOrSpace.test(path))
    throw new UpstreamError(
      "UPSTREAM_BAD_ANSWER",
      "the request line holds a space or a line break",
    );
  let head = `${method} ${path} HTTP/1.1\r\n`;
  // Every name and value checked in one pass: a test per header costs more than the rest of it.
  let fields = "";
  let hasHost = false;
  for (const name in headers) {
    const value = headers[name];
    fields += name;
    fields += value;
    if (name === "host") hasHost = true;
    head += `${name}: ${value}\r\n`;
  }
  if (headerBreak.test(fields)) {
    const name = Object.keys(headers).find((n) => headerBreak.test(n + headers[n]));
    throw new UpstreamError(
      "UPSTREAM_BAD_ANSWER",
      `the header ${JSON.stringify(name)} holds a line break`,
    );
  }
  if (!hasHost) head += `host: ${host}\r\n`;
  const body = request.body;
  const length =
    body === undefined ? 0 : typeof body === "string" ? Buffer.byteLength(body) : body.byteLength;
  return `${head}content-length: ${length}\r\n\r\n`;
}
