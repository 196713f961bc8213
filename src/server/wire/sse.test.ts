import { describe, expect, it } from "vitest";
import { encodeSSE, parseSSE, type SSEMessage } from "./sse.js";

async function* chunksOf(parts: Array<string | Uint8Array>): AsyncGenerator<Uint8Array> {
  for (const part of parts) yield typeof part === "string" ? new TextEncoder().encode(part) : part;
}

async function collect(parts: Array<string | Uint8Array>): Promise<SSEMessage[]> {
  const out: SSEMessage[] = [];
  for await (const message of parseSSE(chunksOf(parts))) out.push(message);
  return out;
}

/** Splits the UTF-8 bytes of `text` into single bytes: the worst case for a decoder. */
function byteByByte(text: string): Uint8Array[] {
  return Array.from(new TextEncoder().encode(text), (byte) => Uint8Array.of(byte));
}

describe("parseSSE", () => {
  const stream =
    'event: message_start\ndata: {"a":1}\n\n' +
    ": keep-alive comment\n\n" +
    "data: first line\ndata: second line\n\n" +
    "event: ping\ndata:{}\n\n" +
    "id: 7\nretry: 100\ndata: héllo → 😀\n\n";
  const expected: SSEMessage[] = [
    { event: "message_start", data: '{"a":1}' },
    { data: "first line\nsecond line" },
    { event: "ping", data: "{}" },
    { data: "héllo → 😀" },
  ];

  it("parses events, comments, multi-line data and ignores id/retry", async () => {
    expect(await collect([stream])).toEqual(expected);
  });

  it("survives chunks split at every byte, including inside multi-byte characters", async () => {
    expect(await collect(byteByByte(stream))).toEqual(expected);
  });

  it("drops one leading byte order mark, also split across chunks, and no other", async () => {
    const bom = [0xef, 0xbb, 0xbf];
    expect(await collect([Uint8Array.from([...bom, ...new TextEncoder().encode(stream)])])).toEqual(
      expected,
    );
    expect(await collect([...bom.map((b) => Uint8Array.of(b)), stream])).toEqual(expected);
    expect(await collect(["data: a\uFEFF\n\n"])).toEqual([{ data: "a\uFEFF" }]);
  });

  it("replaces bytes that are not UTF-8 with U+FFFD, at the end of the stream too", async () => {
    const bad = Uint8Array.from([...new TextEncoder().encode("data: a"), 0xff, 0x0a, 0x0a]);
    expect(
      await collect([bad, Uint8Array.from([...new TextEncoder().encode("data: b"), 0xe2])]),
    ).toEqual([{ data: "a\uFFFD" }, { data: "b\uFFFD" }]);
  });

  it("handles CRLF and bare CR line endings, also when CR and LF straddle chunks", async () => {
    const crlf = stream.replaceAll("\n", "\r\n");
    expect(await collect([crlf])).toEqual(expected);
    expect(await collect(byteByByte(crlf))).toEqual(expected);
    expect(await collect([stream.replaceAll("\n", "\r")])).toEqual(expected);
    expect(await collect(["data: x\r", "\n\r", "\ndata: y\r\n\r\n"])).toEqual([
      { data: "x" },
      { data: "y" },
    ]);
  });

  it("a CR, an empty chunk, then its LF end one line", async () => {
    expect(await collect(["data: a\r", new Uint8Array(0), "\ndata: b\n\n"])).toEqual([
      { data: "a\nb" },
    ]);
  });

  it("reads a line that arrives in many chunks whole, with the events after it", async () => {
    const long = "z".repeat(300_000);
    const text = `data: ${long}\n\ndata: after\r\n\r\n`;
    const parts: string[] = [];
    for (let i = 0; i < text.length; i += 4_096) parts.push(text.slice(i, i + 4_096));
    expect(await collect(parts)).toEqual([{ data: long }, { data: "after" }]);
  });

  it("reads the same events whatever line endings meet at a chunk's edge", async () => {
    const mixed = 'data: {"a":1}\n\ndata: b\r\n\r\ndata: c\n\ndata: d\r\rdata: e\n\n';
    const whole = await collect([mixed]);
    expect(whole).toEqual([
      { data: '{"a":1}' },
      { data: "b" },
      { data: "c" },
      { data: "d" },
      { data: "e" },
    ]);
    for (let i = 1; i < mixed.length; i++)
      for (let j = i + 1; j < mixed.length; j += 3)
        expect(await collect([mixed.slice(0, i), mixed.slice(i, j), mixed.slice(j)])).toEqual(
          whole,
        );
  });

  it("delivers a final event that lacks the closing blank line", async () => {
    expect(await collect(["data: a\n\ndata: b"])).toEqual([{ data: "a" }, { data: "b" }]);
    expect(await collect(["event: x\ndata: b\n"])).toEqual([{ event: "x", data: "b" }]);
  });

  it("fails a line that grows past the bound as it arrives, having read no further", async () => {
    let pulled = 0;
    async function* endless(): AsyncGenerator<Uint8Array> {
      yield new TextEncoder().encode('data: {"ok":1}\n\ndata: ');
      for (;;) {
        pulled++;
        yield new Uint8Array(1024).fill(0x78);
      }
    }
    const seen: SSEMessage[] = [];
    const reading = (async () => {
      for await (const message of parseSSE(endless(), 10 * 1024)) seen.push(message);
    })();
    await expect(reading).rejects.toMatchObject({ name: "UpstreamFailure", kind: "unavailable" });
    expect(seen).toEqual([{ data: '{"ok":1}' }]);
    expect(pulled).toBe(10);
  });

  it("fails an event whose many short data lines add up past the bound", async () => {
    const lines = Array.from({ length: 100 }, () => "data: 0123456789\n").join("");
    const read = async (bound: number) => {
      const out: SSEMessage[] = [];
      for await (const message of parseSSE(chunksOf([lines, "\n"]), bound)) out.push(message);
      return out;
    };
    await expect(read(1000)).rejects.toMatchObject({ name: "UpstreamFailure" });
    expect(await read(1100)).toHaveLength(1);
  });

  it("does not dispatch events without data", async () => {
    expect(await collect(["event: lonely\n\n\n\ndata: [DONE]\n\n"])).toEqual([{ data: "[DONE]" }]);
  });
});

describe("encodeSSE", () => {
  it("frames objects as JSON with an optional event name", () => {
    expect(encodeSSE({ a: 1 })).toBe('data: {"a":1}\n\n');
    expect(encodeSSE({ type: "ping" }, "ping")).toBe('event: ping\ndata: {"type":"ping"}\n\n');
  });

  it("splits multi-line strings into several data lines, which parse back", async () => {
    const text = encodeSSE("one\ntwo\r\nthree", "multi");
    expect(text).toBe("event: multi\ndata: one\ndata: two\ndata: three\n\n");
    expect(await collect([text])).toEqual([{ event: "multi", data: "one\ntwo\nthree" }]);
  });
});
