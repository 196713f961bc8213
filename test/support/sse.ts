import { parseSSE } from "../../src/server/wire/sse.js";

/**
 * A streamed answer as a client reads it, through the gateway's own SSE parser: each event's
 * name and its data parsed as JSON. Chat streams' closing `[DONE]` is kept as that string, so a
 * test can tell a clean end from a cut one; keepalive comments are not events.
 */

// biome-ignore lint/suspicious/noExplicitAny: a test reads whichever fields its wire style has.
type Json = any;

export interface StreamEvent<T = Json> {
  event?: string;
  data: T | "[DONE]";
}

/** The events as they arrive; leaving the loop early cancels the body. */
export async function* streamEvents<T = Json>(res: Response): AsyncGenerator<StreamEvent<T>> {
  if (!res.body) throw new Error(`HTTP ${res.status} answered without a body`);
  for await (const message of parseSSE(res.body))
    yield {
      event: message.event,
      data: message.data === "[DONE]" ? "[DONE]" : (JSON.parse(message.data) as T),
    };
}

/** Every event of the answer, read to its end. */
export async function allStreamEvents<T = Json>(res: Response): Promise<StreamEvent<T>[]> {
  const events: StreamEvent<T>[] = [];
  for await (const event of streamEvents<T>(res)) events.push(event);
  return events;
}

/** The events' data without the closing `[DONE]`. */
export async function streamData<T = Json>(res: Response): Promise<T[]> {
  return (await allStreamEvents<T>(res))
    .map((event) => event.data)
    .filter((data): data is T => data !== "[DONE]");
}

/** The events' data (`[DONE]` included) of an answer whose text a test has read already. */
export async function streamDataInText<T = Json>(text: string): Promise<(T | "[DONE]")[]> {
  return (await allStreamEvents<T>(new Response(text))).map((event) => event.data);
}

/**
 * A stream's text, read until its first keepalive comment (which must open it), then, once
 * `release` let the provider answer, to its end.
 */
export async function textPastKeepalive(res: Response, release: () => void): Promise<string> {
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = "";
  while (!text.includes(": keepalive")) {
    const { value, done } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
  }
  if (!text.startsWith(": keepalive\n")) throw new Error(`the stream opened with ${text}`);
  release();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return text;
    text += decoder.decode(value, { stream: true });
  }
}
