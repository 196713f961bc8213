import type { ServerResponse } from "node:http";
import type { Socket } from "node:net";
import { clearInterval, setInterval } from "../../host-timers.js";
import type { StreamPiece } from "../wire/stream-types.js";
import { markStage } from "./stages.js";

const encoder = new TextEncoder();
const keepaliveComment = encoder.encode(": keepalive\n\n");
const crlf = Buffer.from("\r\n", "latin1");

export interface StreamEnd {
  /** Pieces reached the client. */
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
   * the next), `written` once it went to the client. What was read ahead of a client that left
   * never reached it, and is not billed as delivered.
   */
  tally: { taken(): void; written(): void };
  onEnd: (end: StreamEnd) => void;
  /**
   * Resolves once what `onEnd` recorded is durable. A stream that ends cleanly sends its closing
   * event only after that, so every stream a client saw finish was billed, even across a crash.
   */
  recorded: () => Promise<void>;
}

/** The socket side of the pump. `write` returns false when the client is not keeping up. */
interface Sink {
  write(piece: StreamPiece): boolean;
  end(): void;
  drained(): Promise<void>;
  readonly closed: boolean;
}

const sseHeaders = {
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
  void pump(nodeSink(outgoing), stream, () => markStage(outgoing.req, "first piece written"));
}

async function pump(sink: Sink, stream: SseStream, firstWritten: () => void): Promise<void> {
  let delivered = false;
  const finish = (end: Omit<StreamEnd, "delivered">) => stream.onEnd({ delivered, ...end });
  let next = Promise.resolve(stream.first);
  // The closing event waits here until the stream's charge is committed.
  let closing: StreamPiece | undefined;
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
      const keptUp = sink.write(piece);
      stream.tally.written();
      if (!delivered) firstWritten();
      delivered = true;
      if (!keptUp) {
        next.catch(ignore);
        await sink.drained();
      }
    }
  } catch (error) {
    // A client that left aborts the upstream, which surfaces here as an error: it is a cancel.
    if (sink.closed) {
      finish({ cancelled: true });
      return;
    }
    sink.write(stream.errorEvent(error));
    sink.end();
    finish({ error, cancelled: false });
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

function nodeSink(outgoing: ServerResponse): Sink {
  // A client that left before its answer started (while the hold or the provider was awaited)
  // closed the response before this listener: it would never hear of it, and a write to the
  // closed response never drains, so the stream would wait forever, unsettled.
  let closed = outgoing.destroyed;
  outgoing.once("close", () => {
    if (!outgoing.writableFinished) closed = true;
  });
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
    write(piece) {
      if (closed) return true;
      if (socket) {
        // Pieces written in the same tick (a translated stream's several chunks) leave together.
        if (!corked) {
          corked = true;
          socket.cork();
          process.nextTick(uncork);
        }
        if (typeof piece === "string")
          return socket.write(`${Buffer.byteLength(piece).toString(16)}\r\n${piece}\r\n`);
        const size = Buffer.from(`${piece.byteLength.toString(16)}\r\n`, "latin1");
        return socket.write(Buffer.concat([size, piece, crlf]));
      }
      // Node's ServerResponse corks its socket on a write and uncorks it on the next tick.
      const keptUp = outgoing.write(piece);
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
    get closed() {
      return closed;
    },
  };
}
