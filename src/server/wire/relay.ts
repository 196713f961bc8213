import { defaultMaxEventBytes, parseSSE, type SSEMessage, SSEParser } from "./sse.js";
import type { StreamPiece } from "./stream-types.js";

/**
 * An upstream's server-sent events: read one by one (a stream translated to another style), or
 * relayed chunk by chunk (`relayEvents`, a stream passed through in its own style).
 */
export class SSEStream implements AsyncIterable<SSEMessage> {
  constructor(
    readonly body: AsyncIterable<Uint8Array>,
    readonly maxEventBytes = defaultMaxEventBytes,
  ) {}

  [Symbol.asyncIterator](): AsyncIterator<SSEMessage> {
    return parseSSE(this.body, this.maxEventBytes);
  }
}

/** What a stream passed through does with each upstream event. */
export interface EventRelay {
  /** The event as the client gets it ("" for nothing); may throw StreamBroken. */
  event(ev: SSEMessage): string;
  /**
   * An event that leaves as a piece of its own: the style's closing event, which the route holds
   * until the charge is committed, and a final event the Responses state reads from its piece.
   */
  apart(ev: SSEMessage): boolean;
  /** The pieces after the upstream's last event; throws when the stream ended before it was complete. */
  end(): StreamPiece[];
}

const finished: IteratorResult<StreamPiece> = { value: undefined, done: true };

/**
 * A stream passed through, one piece per upstream chunk: the chunk is parsed and relayed in the
 * callback that reads it and handed to the waiting writer as one piece (every event it completed,
 * in one write), with no generator or promise between the reader and the writer but the one the
 * writer awaits. Each event the relay meters is in a piece the writer is given, so a client is
 * charged for what it was sent: a failure after some of a chunk's events leaves those first.
 */
export function relayEvents(events: SSEStream, relay: EventRelay): AsyncIterator<StreamPiece> {
  return new RelayedPieces(events.body[Symbol.asyncIterator](), events.maxEventBytes, relay);
}

class RelayedPieces implements AsyncIterator<StreamPiece> {
  private readonly parser: SSEParser;
  private readonly pending: StreamPiece[] = [];
  private failure: { error: unknown } | undefined;
  private ended = false;

  constructor(
    private readonly body: AsyncIterator<Uint8Array>,
    maxEventBytes: number,
    private readonly relay: EventRelay,
  ) {
    this.parser = new SSEParser(maxEventBytes);
  }

  next(): Promise<IteratorResult<StreamPiece>> {
    try {
      const ready = this.take();
      if (ready) return Promise.resolve(ready);
    } catch (err) {
      return Promise.reject(err);
    }
    return this.body.next().then(this.read);
  }

  return(): Promise<IteratorResult<StreamPiece>> {
    const reading = !this.ended;
    this.ended = true;
    this.pending.length = 0;
    this.failure = undefined;
    if (!reading || !this.body.return) return Promise.resolve(finished);
    return this.body.return().then(() => finished);
  }

  /** What the writer gets now, or undefined when that takes another chunk. */
  private take(): IteratorResult<StreamPiece> | undefined {
    const piece = this.pending.shift();
    if (piece !== undefined) return { value: piece, done: false };
    const failure = this.failure;
    if (failure) {
      this.failure = undefined;
      throw failure.error;
    }
    if (this.ended) return finished;
    return undefined;
  }

  private readonly read = (
    result: IteratorResult<Uint8Array>,
  ): IteratorResult<StreamPiece> | Promise<IteratorResult<StreamPiece>> => {
    try {
      if (result.done) {
        this.ended = true;
        this.relayAll(this.parser.end());
        this.pending.push(...this.relay.end());
      } else this.relayAll(this.parser.push(result.value));
    } catch (error) {
      this.failure = { error };
      if (!this.ended) {
        this.ended = true;
        // The rest of the upstream's answer is not wanted.
        void this.body.return?.()?.catch(() => {});
      }
    }
    // A chunk that completed no event (one split mid-event) waits for the next.
    return this.take() ?? this.body.next().then(this.read);
  };

  private relayAll(events: SSEMessage[]): void {
    let text = "";
    try {
      for (const ev of events) {
        if (!this.relay.apart(ev)) {
          text += this.relay.event(ev);
          continue;
        }
        if (text !== "") this.pending.push(text);
        text = "";
        const alone = this.relay.event(ev);
        if (alone !== "") this.pending.push(alone);
      }
    } finally {
      if (text !== "") this.pending.push(text);
    }
  }
}
