import { createServer, type Server, type Socket } from "node:net";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { errorOf } from "./support/api.js";
import {
  type FakeUpstream,
  fakeUpstream,
  openaiJson,
  openaiStreamSteps,
} from "./support/fake-upstream.js";
import { baseConfig, chat, KEY, post, type TestGateway, testGateway } from "./support/gateway.js";

/**
 * Misbehaving providers on raw sockets: each connection reads one request and answers as the
 * test's current `behave` says. Every wait is bounded.
 */

type Behave = (socket: Socket, request: string) => void;

interface RawUpstream {
  baseUrl: string;
  behave: Behave;
  sockets: Set<Socket>;
  /** Connections the gateway closed (or that ended). */
  closed: number;
  close(): Promise<void>;
}

async function rawUpstream(): Promise<RawUpstream> {
  const sockets = new Set<Socket>();
  const up: RawUpstream = {
    baseUrl: "",
    behave: () => {},
    sockets,
    closed: 0,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on("error", () => {});
    socket.on("close", () => {
      sockets.delete(socket);
      up.closed++;
    });
    let head = "";
    let answered = false;
    socket.on("data", (d: Buffer) => {
      if (answered) return;
      head += d.toString("latin1");
      const end = head.indexOf("\r\n\r\n");
      if (end === -1) return;
      const length = Number(/content-length: (\d+)/i.exec(head)?.[1] ?? 0);
      if (head.length < end + 4 + length) return;
      answered = true;
      up.behave(socket, head);
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  const port = (server.address() as { port: number }).port;
  up.baseUrl = `http://127.0.0.1:${port}`;
  return up;
}

/** Writes `piece()` every `everyMs` until the socket closes. */
function every(socket: Socket, everyMs: number, piece: () => string): void {
  const timer = setInterval(() => {
    if (socket.destroyed) clearInterval(timer);
    else socket.write(piece());
  }, everyMs);
  socket.once("close", () => clearInterval(timer));
}

let up: RawUpstream;
let good: FakeUpstream;
let gw: TestGateway;

type ProviderInput = NonNullable<ConfigInput["providers"]>[number];
const bounds = { timeout_ms: 1_000, idle_timeout_ms: 2_000 } as const;

beforeAll(async () => {
  up = await rawUpstream();
  good = await fakeUpstream("openai", (req) =>
    req.body.stream
      ? { kind: "sse", steps: openaiStreamSteps(["from", " the next step"]) }
      : openaiJson("from the next step"),
  );
  const provider = (id: string, wire: string, base: string): ProviderInput =>
    ({ id, wire, base_url: base, api_keys: ["sk-hunt-0000"], ...bounds }) as ProviderInput;
  gw = await testGateway({
    keepaliveMs: 30_000,
    config: baseConfig({
      providers: [
        provider("oa", "openai", `${up.baseUrl}/v1`),
        provider("an", "anthropic", up.baseUrl),
        provider("ge", "gemini", up.baseUrl),
        { id: "good", wire: "openai", base_url: good.baseUrl, api_keys: ["sk-good-0000"] },
      ],
      models: [
        { name: "oa-model", provider: "oa", price_input_per_mtok: 10_000 },
        { name: "an-model", provider: "an", price_input_per_mtok: 10_000 },
        { name: "ge-model", provider: "ge", price_input_per_mtok: 10_000 },
        { name: "good-model", provider: "good", price_input_per_mtok: 10_000 },
      ],
      routes: [{ name: "oa-then-good", steps: ["oa-model", "good-model"] }],
    }),
  });
});
afterAll(async () => {
  await gw?.close();
  await up?.close();
  await good?.close();
});

beforeEach(() => {
  // A case that failed leaves its connection behind: the next starts without it.
  for (const socket of up.sockets) socket.destroy();
});

const within = <T>(p: Promise<T>, ms: number, what: string): Promise<T> =>
  Promise.race([
    p,
    new Promise<T>((_, reject) =>
      setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms),
    ),
  ]);

const sse = (obj: unknown, event?: string) =>
  `${event ? `event: ${event}\n` : ""}data: ${JSON.stringify(obj)}\n\n`;
/** The first content event of each wire's stream. */
function firstEvents(request: string): string {
  if (/^POST \S*\/messages/.test(request))
    return (
      sse(
        {
          type: "message_start",
          message: {
            id: "m1",
            type: "message",
            role: "assistant",
            model: "x",
            content: [],
            usage: { input_tokens: 3, output_tokens: 0 },
          },
        },
        "message_start",
      ) +
      sse(
        { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
        "content_block_start",
      ) +
      sse(
        { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "hello" } },
        "content_block_delta",
      )
    );
  if (request.includes(":streamGenerateContent"))
    return sse({ candidates: [{ content: { role: "model", parts: [{ text: "hello" }] } }] });
  return (
    sse({
      id: "c1",
      object: "chat.completion.chunk",
      created: 1,
      model: "x",
      choices: [{ index: 0, delta: { role: "assistant", content: "" } }],
    }) +
    sse({
      id: "c1",
      object: "chat.completion.chunk",
      created: 1,
      model: "x",
      choices: [{ index: 0, delta: { content: "hello" } }],
    })
  );
}

const models = ["oa-model", "an-model", "ge-model"] as const;
/** Generous: the configured bound (timeout_ms 1 s, idle 2 s) plus a wide margin. */
const answerWithinMs = 8_000;

/** A refusal whose chunked error body never ends: a byte every 100 ms, or 16 KiB as fast as it goes. */
function endlessRefusal(everyMs: number, piece: string): Behave {
  return (socket) => {
    socket.write(
      "HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\n" +
        "transfer-encoding: chunked\r\n\r\n",
    );
    const chunk = `${Buffer.byteLength(piece).toString(16)}\r\n${piece}\r\n`;
    if (everyMs > 0) every(socket, everyMs, () => chunk);
    else {
      const flood = () => {
        while (!socket.destroyed && socket.write(chunk));
      };
      socket.on("drain", flood);
      flood();
    }
  };
}

/** The gateway closed the raw upstream's connections (bounded wait). */
async function upstreamLetGo(): Promise<number> {
  for (let i = 0; i < 250 && up.sockets.size > 0; i++) await new Promise((r) => setTimeout(r, 20));
  return up.sockets.size;
}

describe("a stream whose provider refuses with an error body that never ends", () => {
  for (const model of models)
    it(`${model}: is answered 503 upstream_error within timeout_ms, and the provider let go`, async () => {
      up.behave = endlessRefusal(100, " ");
      const res = await within(
        post(gw, "/v1/chat/completions", chat("hi", model, { stream: true })),
        answerWithinMs,
        "a stream refused with a trickling error body",
      );
      expect(res.status).toBe(503);
      expect((await errorOf(res)).code).toBe("upstream_error");
      expect(await upstreamLetGo()).toBe(0);
    }, 20_000);

  it("read no further than it needs when the error body floods: 503 within timeout_ms, provider let go", async () => {
    up.behave = endlessRefusal(0, "x".repeat(16 * 1024));
    const res = await within(
      post(gw, "/v1/chat/completions", chat("hi", "oa-model", { stream: true })),
      answerWithinMs,
      "a stream refused with an endless error body",
    );
    expect(res.status).toBe(503);
    expect(await upstreamLetGo()).toBe(0);
  }, 20_000);

  it("inside a route, the next step answers within timeout_ms", async () => {
    up.behave = endlessRefusal(100, " ");
    const res = await within(
      post(gw, "/v1/chat/completions", chat("hi", "oa-then-good", { stream: true })),
      answerWithinMs,
      "a route whose first step refuses with a trickling error body",
    );
    expect(res.status).toBe(200);
    expect(await res.text()).toContain("the next step");
  }, 20_000);

  it("a whole (non-stream) answer refused the same way is already cut at timeout_ms", async () => {
    up.behave = endlessRefusal(100, " ");
    const res = await within(
      post(gw, "/v1/chat/completions", chat("hi", "oa-model")),
      answerWithinMs,
      "a refused whole answer",
    );
    expect(res.status).toBe(503);
  }, 20_000);
});

/** Headers and each wire's first content events, then silence. */
const firstEventsThenSilence: Behave = (socket, request) => {
  socket.write(
    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
  );
  const first = firstEvents(request);
  socket.write(`${Buffer.byteLength(first).toString(16)}\r\n${first}\r\n`);
};

describe("a stream that goes silent after its first content, on every wire and client style", () => {
  const styles = [
    [
      "/v1/chat/completions",
      (model: string) => chat("hi", model, { stream: true }),
      '"code":"upstream_error"',
    ],
    [
      "/v1/messages",
      (model: string) => ({
        model,
        max_tokens: 50,
        stream: true,
        messages: [{ role: "user", content: "hi" }],
      }),
      "event: error",
    ],
    [
      "/v1/responses",
      (model: string) => ({ model, stream: true, input: "hi" }),
      '"code":"upstream_error"',
    ],
  ] as const;
  for (const model of models)
    for (const [path, body, errorMark] of styles)
      it(`${model} ${path}: ends with the style's error event within idle_timeout_ms`, async () => {
        up.behave = firstEventsThenSilence;
        const res = await within(post(gw, path, body(model)), answerWithinMs, "stream");
        expect(res.status).toBe(200);
        const text = await within(res.text(), answerWithinMs, "stream body");
        expect(text).toContain("hello");
        expect(text).toContain(errorMark);
        expect(text).not.toContain("[DONE]");
        expect(text).not.toContain("message_stop");
        expect(text).not.toContain("response.completed");
      }, 20_000);
});

describe("a client that leaves, and a gateway that closes, while the provider stalls", () => {
  it("a client leaving during keepalives closes the provider's connection; close() does not wait for a stalled stream", async () => {
    const slowUp = await rawUpstream();
    const g = await testGateway({
      keepaliveMs: 100,
      config: baseConfig({
        providers: [
          {
            id: "slow",
            wire: "openai",
            base_url: `${slowUp.baseUrl}/v1`,
            api_keys: ["sk-x"],
            timeout_ms: 20_000,
            idle_timeout_ms: 20_000,
          } as ProviderInput,
        ],
        models: [{ name: "slow-model", provider: "slow", price_input_per_mtok: 10_000 }],
        routes: [],
      }),
    });
    try {
      slowUp.behave = () => {};
      const ac = new AbortController();
      const res = await post(
        g,
        "/v1/chat/completions",
        chat("hi", "slow-model", { stream: true }),
        { authorization: `Bearer ${KEY}` },
        ac.signal,
      );
      expect(res.status).toBe(200);
      await within(res.body!.getReader().read(), answerWithinMs, "a keepalive comment");
      ac.abort();
      for (let i = 0; i < 250 && slowUp.closed === 0; i++)
        await new Promise((r) => setTimeout(r, 20));
      expect(slowUp.closed).toBe(1);
      // A stream that went silent (its bounds 20 s away) and a client that never reads it.
      slowUp.behave = firstEventsThenSilence;
      const stalled = await post(
        g,
        "/v1/chat/completions",
        chat("hi", "slow-model", { stream: true }),
      );
      expect(stalled.status).toBe(200);
      await within(g.close(), answerWithinMs, "close() with a stalled stream");
      expect(slowUp.sockets.size).toBe(0);
    } finally {
      await g.close();
      await slowUp.close();
    }
  }, 30_000);
});
