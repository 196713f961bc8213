/**
 * Server-Sent Events framing, both directions.
 *
 * The parser follows the WHATWG event-stream rules closely enough for LLM
 * upstreams: CR, LF and CRLF line endings, multi-line `data:`, `:` comments,
 * and byte chunks split anywhere (even inside a multi-byte character or
 * between the CR and LF of one line ending).
 */

export type SSEMessage = { event?: string; data: string };

/** The terminator OpenAI-style chat streams end with. */
export const SSE_DONE = "data: [DONE]\n\n";

export async function* parseSSE(body: AsyncIterable<Uint8Array>): AsyncGenerator<SSEMessage> {
  const decoder = new TextDecoder();
  const lines = new LineSplitter();
  const assembler = new EventAssembler();

  for await (const chunk of body) {
    for (const line of lines.push(decoder.decode(chunk, { stream: true }))) {
      const message = assembler.line(line);
      if (message) yield message;
    }
  }
  for (const line of lines.push(decoder.decode())) {
    const message = assembler.line(line);
    if (message) yield message;
  }
  for (const line of lines.flush()) {
    const message = assembler.line(line);
    if (message) yield message;
  }
  // A stream that ends without the final blank line still delivers its last event:
  // upstreams that are cut off mid-stream often leave one behind.
  const last = assembler.line("");
  if (last) yield last;
}

/** Splits text into lines on CR, LF or CRLF, even when the pair straddles two chunks. */
class LineSplitter {
  private buffer = "";

  push(text: string): string[] {
    this.buffer += text;
    const lines: string[] = [];
    let start = 0;
    // A regex scan, not a loop over characters: a stream passes through here chunk by chunk.
    const breaks = /\r\n|\r|\n/g;
    for (let m = breaks.exec(this.buffer); m !== null; m = breaks.exec(this.buffer)) {
      // A trailing CR may be the first half of a CRLF: wait for the next chunk.
      if (m[0] === "\r" && m.index === this.buffer.length - 1) break;
      lines.push(this.buffer.slice(start, m.index));
      start = m.index + m[0].length;
    }
    this.buffer = this.buffer.slice(start);
    return lines;
  }

  flush(): string[] {
    const rest = this.buffer.endsWith("\r") ? this.buffer.slice(0, -1) : this.buffer;
    this.buffer = "";
    return rest === "" ? [] : [rest];
  }
}

/** Accumulates field lines until a blank line dispatches the event. */
class EventAssembler {
  private event: string | undefined;
  private data: string[] = [];

  line(line: string): SSEMessage | undefined {
    if (line === "") return this.dispatch();
    if (line.startsWith(":")) return undefined;
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") this.event = value;
    else if (field === "data") this.data.push(value);
    // `id` and `retry` mean nothing to a proxy; unknown fields are ignored per spec.
    return undefined;
  }

  private dispatch(): SSEMessage | undefined {
    const hasData = this.data.length > 0;
    const message: SSEMessage = { data: this.data.join("\n") };
    if (this.event !== undefined) message.event = this.event;
    this.event = undefined;
    this.data = [];
    // Per spec an event without data lines is not dispatched.
    return hasData ? message : undefined;
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
