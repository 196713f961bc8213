/**
 * Server-Sent Events framing, both directions.
 *
 * The parser follows the WHATWG event-stream rules closely enough for LLM
 * upstreams: CR, LF and CRLF line endings, multi-line `data:`, `:` comments,
 * and byte chunks split anywhere (even inside a multi-byte character or
 * between the CR and LF of one line ending).
 */

import { StringDecoder } from "node:string_decoder";
import { UpstreamFailure } from "./upstream-failure.js";

export type SSEMessage = { event?: string; data: string };

/** The terminator OpenAI-style chat streams end with. */
export const SSE_DONE = "data: [DONE]\n\n";

/**
 * The largest event (or line) a stream may send, by default: far above any real event (a
 * Responses stream's closing event carries the whole answer), far below what would hurt.
 */
export const defaultMaxEventBytes = 16 * 1024 * 1024;

/**
 * Parses a stream into events. A line or an event that grows past `maxEventBytes` (counted in
 * characters of the decoded text: bytes, for the ASCII JSON upstreams send) fails the stream as
 * the provider failing, as it arrives: nothing past the bound is ever held.
 */
export async function* parseSSE(
  body: AsyncIterable<Uint8Array>,
  maxEventBytes = defaultMaxEventBytes,
): AsyncGenerator<SSEMessage> {
  const parser = new SSEParser(maxEventBytes);
  for await (const chunk of body) yield* parser.push(chunk);
  yield* parser.end();
}

/**
 * `parseSSE` one chunk at a time, for a reader that turns each chunk into what it sends on in the
 * callback that read it, with no generator between.
 */
export class SSEParser {
  // Node's StringDecoder, not TextDecoder: streaming TextDecoder goes through ICU's converter,
  // several times the instructions per chunk of the native UTF-8 slice StringDecoder uses. Both
  // keep a character split across chunks whole and replace invalid bytes with U+FFFD.
  private readonly decoder = new StringDecoder("utf8");
  private readonly lines: LineSplitter;
  private readonly assembler: EventAssembler;
  private started = false;

  constructor(maxEventBytes = defaultMaxEventBytes) {
    this.lines = new LineSplitter(maxEventBytes);
    this.assembler = new EventAssembler(maxEventBytes);
  }

  /** The events a chunk completes. */
  push(chunk: Uint8Array): SSEMessage[] {
    let text = this.decoder.write(chunk);
    if (!this.started && text !== "") {
      this.started = true;
      // A stream may start with a byte order mark, which is not part of its first line.
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    }
    return this.dispatch(this.lines.push(text), []);
  }

  /** The events the end of the stream completes. */
  end(): SSEMessage[] {
    const events = this.dispatch(this.lines.push(this.decoder.end()), []);
    this.dispatch(this.lines.flush(), events);
    // A stream that ends without the final blank line still delivers its last event:
    // upstreams that are cut off mid-stream often leave one behind.
    const last = this.assembler.line("");
    if (last) events.push(last);
    return events;
  }

  private dispatch(lines: string[], events: SSEMessage[]): SSEMessage[] {
    for (const line of lines) {
      const message = this.assembler.line(line);
      if (message) events.push(message);
    }
    return events;
  }
}

/** A stream sent a line or an event larger than its bound. */
function eventTooLarge(): UpstreamFailure {
  return new UpstreamFailure("unavailable", 502);
}

/**
 * Splits text into lines on CR, LF or CRLF, even when the pair straddles two chunks. Each chunk is
 * searched once and the unfinished line is only appended to, so a line that arrives in many chunks
 * (a large event) costs its length, not its length times its chunks.
 */
class LineSplitter {
  /** The line begun and not yet ended: no line break in it. */
  private pending = "";
  /** The last chunk ended with a CR, which ended its line: a LF first in the next is its pair. */
  private afterCr = false;

  constructor(private readonly maxLine: number) {}

  push(text: string): string[] {
    // A chunk that ended inside a character decodes to nothing: the CR's pair may still come.
    if (text === "") return [];
    let start = 0;
    if (this.afterCr) {
      this.afterCr = false;
      if (text.charCodeAt(0) === 10 /* \n */) start = 1;
    }
    const lines: string[] = [];
    // Upstreams end their lines with LF alone: with no CR in the chunk, a native search for each LF.
    if (!text.includes("\r")) {
      for (let end = text.indexOf("\n", start); end !== -1; end = text.indexOf("\n", start)) {
        lines.push(this.ended(text, start, end));
        start = end + 1;
      }
    } else {
      const breaks = /\r\n|\r|\n/g;
      breaks.lastIndex = start;
      for (let m = breaks.exec(text); m !== null; m = breaks.exec(text)) {
        lines.push(this.ended(text, start, m.index));
        start = m.index + m[0].length;
      }
      this.afterCr = start === text.length && text.charCodeAt(start - 1) === 13; /* \r */
    }
    if (start < text.length) {
      const rest = start === 0 ? text : text.slice(start);
      this.pending = this.pending === "" ? rest : this.pending + rest;
      if (this.pending.length > this.maxLine) throw eventTooLarge();
    }
    return lines;
  }

  /** The line that ends at `end` of `text`, with what came of it in earlier chunks. */
  private ended(text: string, start: number, end: number): string {
    const piece = text.slice(start, end);
    if (this.pending === "") return piece;
    const line = this.pending + piece;
    this.pending = "";
    return line;
  }

  flush(): string[] {
    const rest = this.pending;
    this.pending = "";
    this.afterCr = false;
    return rest === "" ? [] : [rest];
  }
}

/** Accumulates field lines until a blank line dispatches the event. */
class EventAssembler {
  private event: string | undefined;
  // The data lines joined as they come: nearly every event has one, which then needs no array.
  private data: string | undefined;
  private size = 0;

  constructor(private readonly maxEvent: number) {}

  line(line: string): SSEMessage | undefined {
    if (line === "") return this.dispatch();
    if (line.startsWith(":")) return undefined;
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") this.event = value;
    else if (field === "data") {
      // Many short data lines add up to one event: bounded as a whole.
      this.size += value.length + 1;
      if (this.size > this.maxEvent) throw eventTooLarge();
      this.data = this.data === undefined ? value : `${this.data}\n${value}`;
    }
    // `id` and `retry` mean nothing to a proxy; unknown fields are ignored per spec.
    return undefined;
  }

  private dispatch(): SSEMessage | undefined {
    const data = this.data;
    const event = this.event;
    this.event = undefined;
    this.data = undefined;
    this.size = 0;
    // Per spec an event without data lines is not dispatched.
    if (data === undefined) return undefined;
    return event === undefined ? { data } : { event, data };
  }
}

/** An event's data as JSON, or undefined where it is not JSON (such events are skipped, not fatal). */
export function parseEventData(data: string): unknown {
  try {
    return JSON.parse(data);
  } catch {
    return undefined;
  }
}

/** Frames one event. Objects are JSON-encoded; multi-line strings become several `data:` lines. */
export function encodeSSE(data: string | object, event?: string): string {
  const text = typeof data === "string" ? data : JSON.stringify(data);
  // JSON.stringify never emits a raw line break, so the usual event needs no split.
  const dataLines = /[\r\n]/.test(text)
    ? text
        .split(/\r\n|\r|\n/)
        .map((line) => `data: ${line}`)
        .join("\n")
    : `data: ${text}`;
  return event === undefined ? `${dataLines}\n\n` : `event: ${event}\n${dataLines}\n\n`;
}
