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

/** Splits text into lines on CR, LF or CRLF, even when the pair straddles two chunks. */
class LineSplitter {
  private buffer = "";
  /** Where the next scan for a line break starts: the text before it has none. */
  private scanned = 0;

  constructor(private readonly maxLine: number) {}

  push(text: string): string[] {
    // Upstreams end their lines with LF alone: with no CR anywhere, a native search for each LF.
    if (!text.includes("\r") && !this.buffer.endsWith("\r")) return this.pushLf(text);
    this.buffer += text;
    const lines: string[] = [];
    let start = 0;
    // A regex scan, not a loop over characters: a stream passes through here chunk by chunk.
    // It starts where the last one stopped, so a long line is scanned once, not once a chunk.
    const breaks = /\r\n|\r|\n/g;
    breaks.lastIndex = this.scanned;
    let waiting = false;
    for (let m = breaks.exec(this.buffer); m !== null; m = breaks.exec(this.buffer)) {
      // A trailing CR may be the first half of a CRLF: wait for the next chunk.
      if (m[0] === "\r" && m.index === this.buffer.length - 1) {
        waiting = true;
        break;
      }
      lines.push(this.buffer.slice(start, m.index));
      start = m.index + m[0].length;
    }
    this.buffer = this.buffer.slice(start);
    if (this.buffer.length > this.maxLine) throw eventTooLarge();
    this.scanned = waiting ? this.buffer.length - 1 : this.buffer.length;
    return lines;
  }

  private pushLf(text: string): string[] {
    const buffer = this.buffer + text;
    const lines: string[] = [];
    let start = 0;
    for (
      let end = buffer.indexOf("\n", this.scanned);
      end !== -1;
      end = buffer.indexOf("\n", start)
    ) {
      lines.push(buffer.slice(start, end));
      start = end + 1;
    }
    this.buffer = start === 0 ? buffer : buffer.slice(start);
    if (this.buffer.length > this.maxLine) throw eventTooLarge();
    this.scanned = this.buffer.length;
    return lines;
  }

  flush(): string[] {
    const rest = this.buffer.endsWith("\r") ? this.buffer.slice(0, -1) : this.buffer;
    this.buffer = "";
    this.scanned = 0;
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
