import { describe, expect, it } from "vitest";
import { type EventRelay, relayEvents, SSEStream } from "./relay.js";
import type { StreamPiece } from "./stream-types.js";

/** An upstream body that yields `parts` as chunks and notes whether its reader stopped it. */
function body(parts: string[]): AsyncIterable<Uint8Array> & { stopped: boolean } {
  let index = 0;
  const iterator: AsyncIterator<Uint8Array> = {
    next: async () =>
      index < parts.length
        ? { value: new TextEncoder().encode(parts[index++]), done: false }
        : { value: undefined, done: true },
    return: async () => {
      source.stopped = true;
      return { value: undefined, done: true };
    },
  };
  const source = { stopped: false, [Symbol.asyncIterator]: () => iterator };
  return source;
}

/** Relays each event's data as `<data>;`; `stop` leaves apart, `bad` throws; the end adds `END`. */
const relay: EventRelay = {
  event(ev) {
    if (ev.data === "bad") throw new Error("broken");
    return `${ev.data};`;
  },
  apart: (ev) => ev.data === "stop",
  end: () => ["END"],
};

async function drain(pieces: AsyncIterator<StreamPiece>): Promise<(StreamPiece | Error)[]> {
  const out: (StreamPiece | Error)[] = [];
  for (;;) {
    try {
      const result = await pieces.next();
      if (result.done) return out;
      out.push(result.value);
    } catch (err) {
      out.push(err as Error);
      return out;
    }
  }
}

describe("relayEvents", () => {
  it("sends the events of one upstream chunk as one piece, and an event split across chunks once it is whole", async () => {
    const pieces = relayEvents(
      new SSEStream(body(["data: a\n\ndata: b\n\ndata: c", "1\n", "\ndata: d\n\n"])),
      relay,
    );
    expect(await drain(pieces)).toEqual(["a;b;", "c1;d;", "END"]);
  });

  it("sends an event the relay sets apart as a piece of its own", async () => {
    const pieces = relayEvents(
      new SSEStream(body(["data: a\n\ndata: stop\n\ndata: b\n\n"])),
      relay,
    );
    expect(await drain(pieces)).toEqual(["a;", "stop;", "b;", "END"]);
  });

  it("hands over the events before a failure in the same chunk, then fails, and stops the upstream", async () => {
    const upstream = body(["data: a\n\ndata: b\n\ndata: bad\n\ndata: c\n\n", "data: d\n\n"]);
    const out = await drain(relayEvents(new SSEStream(upstream), relay));
    expect(out.slice(0, 1)).toEqual(["a;b;"]);
    expect(out[1]).toBeInstanceOf(Error);
    expect(out).toHaveLength(2);
    expect(upstream.stopped).toBe(true);
  });

  it("stops the upstream when the writer stops reading", async () => {
    const upstream = body(["data: a\n\n", "data: b\n\n"]);
    const pieces = relayEvents(new SSEStream(upstream), relay);
    expect(await pieces.next()).toEqual({ value: "a;", done: false });
    await pieces.return?.();
    expect(upstream.stopped).toBe(true);
    expect(await pieces.next()).toEqual({ value: undefined, done: true });
  });

  it("fails an event past the size bound", async () => {
    const out = await drain(
      relayEvents(new SSEStream(body([`data: ${"x".repeat(64)}\n\n`]), 32), relay),
    );
    expect(out).toHaveLength(1);
    expect(out[0]).toBeInstanceOf(Error);
  });
});
