import type { ServerResponse } from "node:http";
import type { Socket } from "node:net";
import { clearInterval, setImmediate, setInterval } from "../../host-timers.js";
import type { StreamPiece } from "../wire/stream-types.js";
import { markStage } from "./stages.js";

const encoder = new TextEncoder();
const keepaliveComment = encoder.encode(": keepalive\n\n");
const crlf = Buffer.from("\r\n", "latin1");
/** How many pieces the writer hands on in a row before it lets other work run. */
const piecesPerTurn = 64;

export interface StreamEnd {
  /** Pieces reached the client: left the gateway for its connection. */
  delivered: boolean;
  /** Why the stream stopped early: an upstream break, or the client going away. */
  error?: unknown;
  cancelled: boolean;
}

export interface SseStream {
  first: IteratorResult<StreamPiece>;
  pieces: AsyncIterator<StreamPiece>;
  headers: Record<string, string>;
  /** The event that tells the client, in the route's style, that the stream broke. */
  errorEvent: (err: unknown) => string;
  /**
   * The route's closing event (`data: [DONE]`, `message_stop`, `response.completed` or
   * `.incomplete`).
   */
  isClosingEvent: (piece: StreamPiece) => boolean;
  /**
   * Called before each piece goes out: a promise when the piece must wait for it (the stream's
   * charge made durable ahead of what it delivers, `deliveryCover`).
   */
  beforePiece: () => void | Promise<void>;
  /**
   * The stream's meter, told of each piece: `taken` once the writer holds it (before it asks for
   * the next), `written` once it was handed to the client's connection, and `reached` once it left
   * the gateway (or, `false`, once it never will: the client left first). What was read ahead of a
   * client that left never reached it, nor did what still waited in the gateway's buffer for a
   * client that read slowly: neither is billed as delivered.
   */
  tally: { taken(): void; written(): void; reached(left: boolean): void };
  onEnd: (end: StreamEnd) => void;
  /**
   * Resolves once what `onEnd` recorded is durable. A stream that ends cleanly sends its closing
   * event only after that, so every stream a client saw finish was billed, even across a crash.
   */
  recorded: () => Promise<void>;
}

/** The socket side of the pump. `write` returns false when the client is not keeping up. */
interface Sink {
  /**
   * `metered`: the piece carries output the stream is billed for: `onLeft` hears, in the order of
   * the writes, whether each such piece left the gateway.
   */
  write(piece: StreamPiece, metered?: boolean): boolean;
  end(): void;
  drained(): Promise<void>;
  /**
   * Resolves once every metered piece written left the gateway or never will (the connection
   * closed); undefined when none is on its way.
   */
  flushed(): Promise<void> | undefined;
  readonly closed: boolean;
  /** A metered piece left the gateway for the client. */
  readonly delivered: boolean;
}

export const sseHeaders = {
  "content-type": "text/event-stream; charset=utf-8",
  "cache-control": "no-cache",
  connection: "keep-alive",
  "x-accel-buffering": "no",
};

/**
 * A 200 committed before the answer is known: SSE headers and a keepalive comment now, one more
 * every `keepaliveMs`, until the answer starts (`sendSse`) or never comes (`fail`).
 */
export class KeptAlive {
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly outgoing: ServerResponse,
    headers: Record<string, string>,
    keepaliveMs: number,
  ) {
    outgoing.writeHead(200, { ...sseHeaders, ...headers });
    outgoing.write(keepaliveComment);
    this.timer = setInterval(() => {
      if (!outgoing.destroyed) outgoing.write(keepaliveComment);
    }, keepaliveMs);
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** Ends the stream with `event`, the route's error event: no answer came. */
  fail(event: string): void {
    this.stop();
    if (this.outgoing.destroyed) return;
    this.outgoing.end(event);
  }
}

/**
 * Answers with an SSE stream fed from an iterator, and `errorEvent` (never a clean end) when the
 * stream breaks after it started. The pieces go straight to the Node socket: the headers leave
 * with the first piece (unless `keptAlive` committed them already) and pieces that are ready
 * together share one write, which a web ReadableStream body cannot do.
 */
export function sendSse(outgoing: ServerResponse, stream: SseStream, keptAlive?: KeptAlive): void {
  if (keptAlive) keptAlive.stop();
  else outgoing.writeHead(200, { ...sseHeaders, ...stream.headers });
  const sink = nodeSink(outgoing, (left) => stream.tally.reached(left));
  void pump(sink, stream, () => markStage(outgoing.req, "first piece written"));
}

async function pump(sink: Sink, stream: SseStream, firstWritten: () => void): Promise<void> {
  let written = false;
  const finish = (end: Omit<StreamEnd, "delivered">) =>
    stream.onEnd({ delivered: sink.delivered, ...end });
  let next = Promise.resolve(stream.first);
  // The closing event waits here until the stream's charge is committed.
  let closing: StreamPiece | undefined;
  /** Pieces written since the writer last let the event loop run. */
  let sinceTurn = 0;
  try {
    for (;;) {
      const result = await next;
      if (sink.closed) {
        void stream.pieces.return?.(undefined).catch(() => {});
        finish({ cancelled: true });
        return;
      }
      if (result.done) break;
      // Text goes to the socket as it is: Node encodes it into the write itself, where encoding it
      // here first would copy every piece once more.
      const piece = result.value;
      stream.tally.taken();
      next = stream.pieces.next();
      if (stream.isClosingEvent(piece)) {
        closing = piece;
        continue;
      }
      if (closing) sink.write(closing);
      closing = undefined;
      const covering = stream.beforePiece();
      if (covering instanceof Promise) {
        // The next piece may fail meanwhile (the client left, the upstream was cut): its error is
        // taken when it is awaited, not left unhandled until then.
        next.catch(ignore);
        await covering;
        // The client left while the piece waited for its mark: it is not written.
        if (sink.closed) continue;
      }
      stream.tally.written();
      const keptUp = sink.write(piece, true);
      if (!written) firstWritten();
      written = true;
      if (!keptUp) {
        next.catch(ignore);
        await sink.drained();
      }
      if (++sinceTurn === piecesPerTurn) {
        // A stream made in memory (the mock's, a replayed cassette's) to a client that keeps up
        // never waits on the event loop: its writes complete at once and their drain comes in
        // the same turn. Without a pause the process would serve nothing else, not even a
        // signal to stop, until the stream ends.
        sinceTurn = 0;
        next.catch(ignore);
        await new Promise((resolve) => setImmediate(resolve));
      }
    }
  } catch (error) {
    // A client that left aborts the upstream, which surfaces here as an error: it is a cancel.
    if (sink.closed) {
      finish({ cancelled: true });
      return;
    }
    sink.write(stream.errorEvent(error));
    const flushing = sink.flushed();
    if (flushing instanceof Promise) await flushing;
    // Settled before the response ends: what ended it is known by then (serve's line, the log).
    finish({ error, cancelled: false });
    sink.end();
    return;
  }
  // A client that reads slowly has pieces waiting in the gateway's buffer: they reach it only once
  // they leave, and one that leaves first never got them. The stream is settled after that.
  const flushing = sink.flushed();
  if (flushing instanceof Promise) await flushing;
  if (sink.closed) {
    finish({ cancelled: true });
    return;
  }
  finish({ cancelled: false });
  if (closing) {
    try {
      await stream.recorded();
    } catch (error) {
      // The charge could not be recorded: the client must not see a finished answer.
      sink.write(stream.errorEvent(error));
      sink.end();
      return;
    }
    sink.write(closing);
  }
  sink.end();
}

const ignore = () => {};

function nodeSink(outgoing: ServerResponse, onLeft: (left: boolean) => void): Sink {
  // A client that left before its answer started (while the hold or the provider was awaited)
  // closed the response before this listener: it would never hear of it, and a write to the
  // closed response never drains, so the stream would wait forever, unsettled.
  let closed = outgoing.destroyed;
  let delivered = false;
  // Metered pieces written and not yet heard of, and who waits for them all.
  let onWay = 0;
  let allLeft: (() => void) | undefined;
  const settle = () => {
    const waiting = allLeft;
    allLeft = undefined;
    waiting?.();
  };
  outgoing.once("close", () => {
    if (!outgoing.writableFinished) closed = true;
    // A write the closed connection dropped may never call back.
    settle();
  });
  // One callback for every metered write: Node counts repeats of the same one without allocating,
  // and calls them in the order of the writes. A write still queued when the connection was
  // destroyed is called back without an error although its bytes never left (Node's
  // `onWriteComplete` reports success for a destroyed stream): it counts only while the
  // connection stands.
  const connection = outgoing.socket;
  const left = (err?: Error | null) => {
    onWay--;
    const reached = !err && connection?.destroyed !== true && !outgoing.destroyed;
    if (reached) delivered = true;
    onLeft(reached);
    if (onWay === 0) settle();
  };
  // After the first piece (which takes the headers with it), each piece is framed as its HTTP
  // chunk here and written to the socket in one write: Node's own chunked write is four writes
  // (size, CRLF, data, CRLF), which its native writev takes apart again, several times the CPU
  // of the event itself. Only where Node frames chunks itself, and so will end them.
  let socket: Socket | undefined;
  let corked = false;
  const uncork = () => {
    corked = false;
    socket?.uncork();
  };
  return {
    write(piece, metered) {
      if (closed) {
        if (metered) onLeft(false);
        return true;
      }
      const done = metered ? left : undefined;
      if (metered) onWay++;
      if (socket) {
        // Pieces written in the same tick (a translated stream's several chunks) leave together.
        if (!corked) {
          corked = true;
          socket.cork();
          process.nextTick(uncork);
        }
        if (typeof piece === "string")
          return socket.write(`${Buffer.byteLength(piece).toString(16)}\r\n${piece}\r\n`, done);
        const size = Buffer.from(`${piece.byteLength.toString(16)}\r\n`, "latin1");
        return socket.write(Buffer.concat([size, piece, crlf]), done);
      }
      // Node's ServerResponse corks its socket on a write and uncorks it on the next tick.
      const keptUp = outgoing.write(piece, done);
      // A response whose write someone wrapped (the test kit's capture of answers) keeps it.
      if (outgoing.chunkedEncoding === true && outgoing.socket && !Object.hasOwn(outgoing, "write"))
        socket = outgoing.socket;
      return keptUp;
    },
    end() {
      outgoing.end();
    },
    drained() {
      // A raw write's backpressure is the socket's; the response's own writes' is the response's.
      const source: NodeJS.EventEmitter = socket ?? outgoing;
      return new Promise((resolve) => {
        const done = () => {
          source.off("drain", done);
          outgoing.off("close", done);
          resolve();
        };
        source.once("drain", done);
        outgoing.once("close", done);
      });
    },
    flushed() {
      if (onWay === 0 || closed) return undefined;
      return new Promise<void>((resolve) => {
        allLeft = resolve;
      });
    },
    get closed() {
      return closed;
    },
    get delivered() {
      return delivered;
    },
  };
}
