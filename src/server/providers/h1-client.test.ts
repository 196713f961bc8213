import { subscribe, unsubscribe } from "node:diagnostics_channel";
import { once } from "node:events";
import {
  createServer as createHttpServer,
  type Server as HttpServer,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type ServerResponse,
} from "node:http";
import { createServer as createHttpsServer } from "node:https";
import { type AddressInfo, createServer as createNetServer, type Socket } from "node:net";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { hasOpenssl, selfSignedCertificate } from "../../../test/support/tls.js";
import {
  type AnswerHandler,
  H1Agent,
  UpstreamError,
  type UpstreamRequest,
  type UpstreamStepMessage,
  upstreamChannelName,
} from "./h1-client.js";

/**
 * Conformance of the small HTTP/1.1 client (`h1-client.ts`) against real servers on 127.0.0.1:
 * node:http and node:https servers for ordinary answers, raw node:net servers for the answers
 * node:http would never write (chunk extensions, trailers, interim answers, broken status lines,
 * bodies cut short). Every wait is bounded, every server and agent is closed after each test, and
 * every handler is watched for the contract's order: onConnect once and first, then at most one
 * of onComplete/onError, exactly once, nothing after it (checked in afterEach).
 */

// ---------------------------------------------------------------------------------------------
// Bounded waits

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Polls `cond` every 10 ms; fails with `what` after `ms`. */
async function waitFor(cond: () => boolean, ms: number, what: string): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(10);
  }
}

/** `promise`, or a rejection naming `what` after `ms`. */
function bounded<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const limit = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not done within ${ms} ms`)), ms);
  });
  return Promise.race([promise, limit]).finally(() => clearTimeout(timer));
}

const codeOf = (err: unknown): unknown => (err as { code?: unknown } | undefined)?.code;

// ---------------------------------------------------------------------------------------------
// Cleanup and the handler contract

/** Servers to close after the test (before the agents, so no connection is left in use). */
const serverCleanups: (() => Promise<void>)[] = [];
const agents: H1Agent[] = [];
/** Agents the test closed itself (close() is not called twice on them). */
const closedByTest = new WeakSet<H1Agent>();
/** Breaches of the handler contract, seen by any handler of the test. */
const violations: string[] = [];

afterEach(async () => {
  const problems: string[] = [];
  for (const close of serverCleanups.splice(0).reverse()) {
    await bounded(close(), 2_000, "closing a test server").catch((err: Error) =>
      problems.push(err.message),
    );
  }
  for (const agent of agents.splice(0)) {
    if (closedByTest.has(agent)) continue;
    await bounded(agent.close(), 2_000, "agent.close() after the servers closed").catch(
      (err: Error) => problems.push(err.message),
    );
  }
  // Late callbacks (a second onError, onData after the end) have a moment to show up.
  await sleep(30);
  problems.push(...violations.splice(0));
  expect(problems).toEqual([]);
});

function newAgent(options?: ConstructorParameters<typeof H1Agent>[0]): H1Agent {
  const agent = new H1Agent(options);
  agents.push(agent);
  return agent;
}

/** Closes an agent within the test (bounded). */
function closeAgent(agent: H1Agent): Promise<void> {
  closedByTest.add(agent);
  return bounded(agent.close(), 2_000, "agent.close()");
}

// ---------------------------------------------------------------------------------------------
// Dispatch as a promise

interface Outcome {
  status?: number;
  rawHeaders?: string[];
  headersCalls: number;
  chunks: Buffer[];
  error?: Error;
  completed: boolean;
  connectCalls: number;
  /** onConnect ran inside dispatch (synchronously). */
  connectedSync: boolean;
  elapsedMs: number;
}

interface Hooks {
  onConnect?: (abort: (err: Error) => void) => void;
  onHeaders?: (status: number, rawHeaders: string[], resume: () => void) => boolean | undefined;
  onData?: (chunk: Buffer, outcome: Outcome) => boolean | undefined;
}

interface Sent {
  outcome: Outcome;
  /** Settles on onComplete or onError; rejects if neither comes within the test's bound. */
  done: Promise<Outcome>;
  abort(err: Error): void;
  resume(): void;
}

const bodyOf = (o: Outcome) => Buffer.concat(o.chunks);
const textOf = (o: Outcome) => bodyOf(o).toString("utf8");
const bytesOf = (o: Outcome) => o.chunks.reduce((n, c) => n + c.length, 0);

/** A request with roomy bounds; tests narrow what they test. */
function req(origin: string, extra: Partial<UpstreamRequest> = {}): UpstreamRequest {
  return {
    origin,
    path: "/",
    method: "POST",
    headers: {},
    headersTimeout: 4_000,
    bodyTimeout: 4_000,
    ...extra,
  };
}

function send(agent: H1Agent, request: UpstreamRequest, hooks: Hooks = {}, limitMs = 4_000): Sent {
  const label = `${request.method} ${request.origin}${request.path.slice(0, 40)}`;
  const outcome: Outcome = {
    headersCalls: 0,
    chunks: [],
    completed: false,
    connectCalls: 0,
    connectedSync: false,
    elapsedMs: 0,
  };
  let abortFn: ((err: Error) => void) | undefined;
  let resumeFn: (() => void) | undefined;
  let settle!: (o: Outcome) => void;
  const settled = new Promise<Outcome>((resolve) => {
    settle = resolve;
  });
  let ends = 0;
  let inDispatch = true;
  const started = performance.now();
  const end = (what: string) => {
    ends++;
    if (ends > 1) violations.push(`${label}: ${what} after the answer had already ended`);
    if (outcome.connectCalls === 0) violations.push(`${label}: ${what} before onConnect`);
    if (ends === 1) outcome.elapsedMs = performance.now() - started;
    settle(outcome);
  };
  const handler: AnswerHandler = {
    onConnect: (abort) => {
      outcome.connectCalls++;
      if (outcome.connectCalls > 1) violations.push(`${label}: onConnect called again`);
      outcome.connectedSync = inDispatch;
      abortFn = abort;
      hooks.onConnect?.(abort);
    },
    onHeaders: (status, rawHeaders, resume) => {
      if (ends) violations.push(`${label}: onHeaders after the end`);
      outcome.headersCalls++;
      outcome.status = status;
      outcome.rawHeaders = rawHeaders;
      resumeFn = resume;
      return hooks.onHeaders?.(status, rawHeaders, resume) ?? true;
    },
    onData: (chunk) => {
      if (ends) violations.push(`${label}: onData after the end`);
      if (outcome.headersCalls === 0) violations.push(`${label}: onData before onHeaders`);
      if (!Buffer.isBuffer(chunk)) violations.push(`${label}: onData given a non-Buffer`);
      outcome.chunks.push(chunk);
      return hooks.onData?.(chunk, outcome) ?? true;
    },
    onComplete: () => {
      outcome.completed = true;
      end("onComplete");
    },
    onError: (err) => {
      if (!(err instanceof Error)) violations.push(`${label}: onError given a non-Error`);
      outcome.error ??= err;
      end("onError");
    },
  };
  try {
    agent.dispatch(request, handler);
  } catch (err) {
    violations.push(`${label}: dispatch threw ${String(err)}`);
    outcome.error = err as Error;
    settle(outcome);
  }
  inDispatch = false;
  if (outcome.connectCalls === 0) violations.push(`${label}: onConnect not called by dispatch`);
  const done = bounded(settled, limitMs, `${label}: neither onComplete nor onError`).catch(
    (err: Error) => {
      throw new Error(
        `${err.message} (status ${outcome.status}, ${bytesOf(outcome)} body bytes in ` +
          `${outcome.chunks.length} onData calls)`,
      );
    },
  );
  return {
    outcome,
    done,
    abort: (err) => {
      if (!abortFn) throw new Error("no abort function: onConnect was not called");
      abortFn(err);
    },
    resume: () => {
      if (!resumeFn) throw new Error("no resume function: onHeaders was not called");
      resumeFn();
    },
  };
}

const request = (agent: H1Agent, r: UpstreamRequest, hooks?: Hooks, limitMs?: number) =>
  send(agent, r, hooks, limitMs).done;

/** The answer arrived whole and without error. */
function expectComplete(o: Outcome, status = 200): void {
  expect(o.error, `unexpected onError: ${o.error?.message}`).toBeUndefined();
  expect(o.completed).toBe(true);
  expect(o.status).toBe(status);
}

/** The answer ended in onError with an UpstreamError of `code`. */
function expectUpstreamError(o: Outcome, code: string): void {
  expect(o.completed).toBe(false);
  expect(o.error, "onError was expected").toBeDefined();
  expect(codeOf(o.error), `error: ${o.error?.message}`).toBe(code);
  expect(o.error).toBeInstanceOf(UpstreamError);
}

// ---------------------------------------------------------------------------------------------
// Servers

interface SocketCounts {
  /** 'connection' events. */
  connections: number;
  open: number;
  maxOpen: number;
  /** Sockets the server saw close. */
  closed: number;
}

function countSockets(counts: SocketCounts, sockets: Set<Socket>, socket: Socket): void {
  counts.connections++;
  counts.open++;
  counts.maxOpen = Math.max(counts.maxOpen, counts.open);
  sockets.add(socket);
  socket.on("close", () => {
    counts.open--;
    counts.closed++;
    sockets.delete(socket);
  });
}

interface SeenRequest {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  rawHeaders: string[];
  body: Buffer;
}

interface HttpFixture extends SocketCounts {
  origin: string;
  server: HttpServer;
  requests: SeenRequest[];
}

type HttpHandler = (req: IncomingMessage, res: ServerResponse, body: Buffer) => void;

/** A node:http (or node:https) server that reads each request whole before `handler` answers. */
async function serveHttp(
  handler: HttpHandler,
  options: { tls?: { key: string; cert: string }; keepAliveTimeout?: number } = {},
): Promise<HttpFixture> {
  const sockets = new Set<Socket>();
  const requests: SeenRequest[] = [];
  const onRequest = (req: IncomingMessage, res: ServerResponse) => {
    const parts: Buffer[] = [];
    req.on("data", (part: Buffer) => parts.push(part));
    req.on("end", () => {
      const body = Buffer.concat(parts);
      requests.push({
        method: req.method ?? "",
        url: req.url ?? "",
        headers: req.headers,
        rawHeaders: req.rawHeaders,
        body,
      });
      handler(req, res, body);
    });
  };
  const server: HttpServer = options.tls
    ? createHttpsServer({ key: options.tls.key, cert: options.tls.cert }, onRequest)
    : createHttpServer(onRequest);
  if (options.keepAliveTimeout !== undefined) server.keepAliveTimeout = options.keepAliveTimeout;
  const fixture = {
    origin: "",
    server,
    requests,
    connections: 0,
    open: 0,
    maxOpen: 0,
    closed: 0,
  } satisfies HttpFixture;
  server.on("connection", (socket: Socket) => countSockets(fixture, sockets, socket));
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as AddressInfo;
  fixture.origin = `${options.tls ? "https" : "http"}://127.0.0.1:${port}`;
  serverCleanups.push(async () => {
    for (const socket of sockets) socket.destroy();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return fixture;
}

interface RawRequest {
  method: string;
  path: string;
  /** Header names lower-cased. */
  headers: Record<string, string>;
  body: Buffer;
  socket: Socket;
}

interface RawFixture extends SocketCounts {
  origin: string;
  requests: RawRequest[];
}

/**
 * A node:net server that parses each request (head, then a content-length body) and lets
 * `onRequest` write whatever bytes it likes on the socket.
 */
async function serveRaw(onRequest: (req: RawRequest) => void): Promise<RawFixture> {
  const sockets = new Set<Socket>();
  const requests: RawRequest[] = [];
  const fixture = {
    origin: "",
    requests,
    connections: 0,
    open: 0,
    maxOpen: 0,
    closed: 0,
  } satisfies RawFixture;
  const server = createNetServer((socket) => {
    countSockets(fixture, sockets, socket);
    socket.setNoDelay(true);
    socket.on("error", () => {});
    let buffer = Buffer.alloc(0);
    socket.on("data", (data: Buffer) => {
      buffer = Buffer.concat([buffer, data]);
      for (;;) {
        const headEnd = buffer.indexOf("\r\n\r\n");
        if (headEnd < 0) return;
        const lines = buffer.subarray(0, headEnd).toString("latin1").split("\r\n");
        const [method = "", path = ""] = (lines[0] ?? "").split(" ");
        const headers: Record<string, string> = {};
        for (const line of lines.slice(1)) {
          const colon = line.indexOf(":");
          headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
        }
        const length = Number(headers["content-length"] ?? 0);
        if (buffer.length < headEnd + 4 + length) return;
        const body = buffer.subarray(headEnd + 4, headEnd + 4 + length);
        buffer = buffer.subarray(headEnd + 4 + length);
        const seen = { method, path, headers, body, socket };
        requests.push(seen);
        onRequest(seen);
      }
    });
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  fixture.origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  serverCleanups.push(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return fixture;
}

/** Writes `pieces` on `socket` one by one, `gapMs` apart. */
async function writeSlowly(socket: Socket, pieces: (string | Buffer)[], gapMs: number) {
  for (const piece of pieces) {
    if (socket.destroyed) return;
    socket.write(piece);
    await sleep(gapMs);
  }
}

/** A content-length answer on a kept-alive connection. */
const rawAnswer = (body: string, extraHeaders = "") =>
  `HTTP/1.1 200 OK\r\n${extraHeaders}Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;

// =============================================================================================

describe("requests and content-length answers", () => {
  it("delivers a content-length answer: status, raw headers as written, exact body bytes; onConnect ran once inside dispatch", async () => {
    const body = Buffer.concat([
      Buffer.from("héllo ✓ 🚀 ", "utf8"),
      Buffer.from(Array.from({ length: 256 }, (_, i) => i)),
    ]);
    const raw = await serveRaw(({ socket }) => {
      socket.write(
        "HTTP/1.1 201 Created\r\n" +
          "X-Mixed-Case: Value One\r\n" +
          "content-type: application/octet-stream\r\n" +
          "Set-Cookie: a=1\r\n" +
          "Set-Cookie: b=2\r\n" +
          `Content-Length: ${body.length}\r\n\r\n`,
      );
      socket.write(body);
    });
    const agent = newAgent();
    const o = await request(agent, req(raw.origin));
    expectComplete(o, 201);
    expect(o.rawHeaders).toEqual([
      "X-Mixed-Case",
      "Value One",
      "content-type",
      "application/octet-stream",
      "Set-Cookie",
      "a=1",
      "Set-Cookie",
      "b=2",
      "Content-Length",
      String(body.length),
    ]);
    expect(bodyOf(o).equals(body)).toBe(true);
    expect(o.headersCalls).toBe(1);
    expect(o.connectCalls).toBe(1);
    expect(o.connectedSync).toBe(true);
  });

  it("sends method, path with query, the given headers, host, and a content-length of the UTF-8 bytes of a string body", async () => {
    const http = await serveHttp((_req, res) => res.end("ok"));
    const agent = newAgent();
    const body = '{"text":"héllo ✓ 🚀 你好"}';
    const o = await request(
      agent,
      req(http.origin, {
        path: "/v1/chat/completions?x=1&y=%C3%A9",
        headers: {
          "Content-Type": "application/json",
          "X-Api-Key": "sk-test-123",
          "anthropic-version": "2023-06-01",
        },
        body,
      }),
    );
    expectComplete(o);
    expect(textOf(o)).toBe("ok");
    expect(http.requests).toHaveLength(1);
    const seen = http.requests[0];
    expect(seen.method).toBe("POST");
    expect(seen.url).toBe("/v1/chat/completions?x=1&y=%C3%A9");
    expect(seen.headers["content-type"]).toBe("application/json");
    expect(seen.headers["x-api-key"]).toBe("sk-test-123");
    expect(seen.headers["anthropic-version"]).toBe("2023-06-01");
    expect(seen.headers.host).toBe(http.origin.slice("http://".length));
    expect(seen.headers["content-length"]).toBe(String(Buffer.byteLength(body, "utf8")));
    expect(Buffer.byteLength(body, "utf8")).toBeGreaterThan(body.length);
    expect(seen.body.toString("utf8")).toBe(body);
    // Each of host and content-length is written once.
    const names = seen.rawHeaders.filter((_, i) => i % 2 === 0).map((n) => n.toLowerCase());
    expect(names.filter((n) => n === "host")).toHaveLength(1);
    expect(names.filter((n) => n === "content-length")).toHaveLength(1);
  });

  it("sends a Uint8Array body (a view into a larger buffer) byte for byte with its length", async () => {
    const http = await serveHttp((_req, res) => res.end("ok"));
    const agent = newAgent();
    const backing = new Uint8Array(3_000).map((_, i) => (i * 7 + 3) % 256);
    const body = backing.subarray(1_000, 2_000);
    const o = await request(agent, req(http.origin, { path: "/bytes", body }));
    expectComplete(o);
    const seen = http.requests[0];
    expect(seen.headers["content-length"]).toBe("1000");
    expect(seen.body.equals(Buffer.from(body))).toBe(true);
  });

  it("gives header values without the whitespace around them", async () => {
    const raw = await serveRaw(({ socket }) =>
      socket.write(rawAnswer("x", "X-Spaced:   padded value  \r\nX-Tight:v\r\n")),
    );
    const agent = newAgent();
    const o = await request(agent, req(raw.origin));
    expectComplete(o);
    expect(o.rawHeaders?.slice(0, 4)).toEqual(["X-Spaced", "padded value", "X-Tight", "v"]);
  });

  it("takes an error status as an ordinary answer", async () => {
    const http = await serveHttp((_req, res) => {
      res.writeHead(503, { "content-type": "application/json" }).end('{"error":"busy"}');
    });
    const agent = newAgent();
    const o = await request(agent, req(http.origin));
    expectComplete(o, 503);
    expect(textOf(o)).toBe('{"error":"busy"}');
  });
});

describe("chunked and close-delimited answers", () => {
  it("delivers a chunked answer written in many separate writes whole, in order, over several onData calls", async () => {
    const pieces = Array.from({ length: 10 }, (_, i) => `piece ${i} é✓;`);
    const http = await serveHttp((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.flushHeaders();
      void (async () => {
        for (const piece of pieces) {
          await sleep(15);
          res.write(piece);
        }
        res.end();
      })();
    });
    const agent = newAgent();
    const o = await request(agent, req(http.origin));
    expectComplete(o);
    expect(o.rawHeaders?.map((h) => h.toLowerCase())).toContain("transfer-encoding");
    expect(textOf(o)).toBe(pieces.join(""));
    expect(o.chunks.length).toBeGreaterThan(1);
  });

  it("publishes a call's steps on its diagnostics channel: sent, headers, each chunk, done", async () => {
    const http = await serveHttp((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.flushHeaders();
      void (async () => {
        for (const piece of ["one", "two", "three"]) {
          await sleep(15);
          res.write(piece);
        }
        res.end();
      })();
    });
    const steps: string[] = [];
    const listener = (message: unknown) => {
      const { step, origin } = message as UpstreamStepMessage;
      if (origin === http.origin) steps.push(step);
    };
    subscribe(upstreamChannelName, listener);
    try {
      const o = await request(newAgent(), req(http.origin));
      expectComplete(o);
      expect(steps).toEqual(["sent", "headers", ...o.chunks.map(() => "chunk"), "done"]);
      expect(o.chunks.length).toBeGreaterThan(1);
    } finally {
      unsubscribe(upstreamChannelName, listener);
    }
  });

  it("tolerates chunk extensions and trailers, and reuses the connection after them", async () => {
    let answered = 0;
    const raw = await serveRaw(({ socket }) => {
      if (answered++ > 0) {
        socket.write(rawAnswer("second"));
        return;
      }
      socket.write(
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" +
          "5;ext=1\r\nhello\r\n" +
          '6;name="quoted value";flag\r\n world\r\n' +
          "A\r\n0123456789\r\n" +
          "a \r\nabcdefghij\r\n" +
          "0\r\nX-Trailer: yes\r\nX-Other: 2\r\n\r\n",
      );
    });
    const agent = newAgent();
    const first = await request(agent, req(raw.origin));
    expectComplete(first);
    expect(textOf(first)).toBe("hello world0123456789abcdefghij");
    const second = await request(agent, req(raw.origin));
    expectComplete(second);
    expect(textOf(second)).toBe("second");
    expect(raw.connections, "connections opened for the two requests").toBe(1);
  });

  it("reads a chunked answer that arrives one byte per write", async () => {
    const answer =
      "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-type: text/plain\r\n\r\n" +
      "4\r\nabcd\r\n3;x=y\r\nefg\r\n1\r\nh\r\n0\r\nT: 1\r\n\r\n";
    const raw = await serveRaw(({ socket }) => {
      void writeSlowly(socket, [...answer], 1);
    });
    const agent = newAgent();
    const o = await request(agent, req(raw.origin));
    expectComplete(o);
    expect(textOf(o)).toBe("abcdefgh");
  });

  it("completes a close-delimited body (no length, no chunking) when the server ends the connection", async () => {
    const raw = await serveRaw(({ socket }) => {
      socket.write("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\npart one, ");
      setTimeout(() => socket.end("part two"), 30);
    });
    const agent = newAgent();
    const o = await request(agent, req(raw.origin));
    expectComplete(o);
    expect(textOf(o)).toBe("part one, part two");
    await waitFor(() => agent.connections(raw.origin).total === 0, 1_000, "the pool to let go");
  });
  it("completes a close-delimited body whose reader held it paused while the server ended", async () => {
    const raw = await serveRaw(({ socket }) => {
      socket.write("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nfirst piece; ");
      setTimeout(() => socket.end("second piece"), 50);
    });
    const agent = newAgent();
    let paused = false;
    const sent = send(agent, req(raw.origin), {
      onData: () => {
        if (paused) return true;
        paused = true;
        return false;
      },
    });
    await waitFor(() => paused, 2_000, "the first piece");
    // The server ends its side 50 ms in; the reader still holds the answer paused.
    await sleep(300);
    expect(
      sent.outcome.error,
      `failed while paused: ${sent.outcome.error?.message}`,
    ).toBeUndefined();
    sent.resume();
    const o = await sent.done;
    expectComplete(o);
    expect(textOf(o)).toBe("first piece; second piece");
  });
});

describe("connections", () => {
  it("reuses one keep-alive connection for two sequential requests; connections() shows it idle between them", async () => {
    const http = await serveHttp((req, res) => res.end(`answer to ${req.url}`));
    const agent = newAgent();
    expect(agent.connections(http.origin)).toEqual({ idle: 0, total: 0 });
    const first = await request(agent, req(http.origin, { path: "/one" }));
    expectComplete(first);
    await waitFor(() => agent.connections(http.origin).idle === 1, 500, "idle 1");
    expect(agent.connections(http.origin)).toEqual({ idle: 1, total: 1 });
    const second = await request(agent, req(http.origin, { path: "/two" }));
    expectComplete(second);
    expect(textOf(first)).toBe("answer to /one");
    expect(textOf(second)).toBe("answer to /two");
    expect(http.connections).toBe(1);
  });

  it("does not reuse a connection the server answered with connection: close", async () => {
    const http = await serveHttp((_req, res) => {
      res.setHeader("Connection", "close");
      res.end("bye");
    });
    const agent = newAgent();
    const first = await request(agent, req(http.origin));
    expectComplete(first);
    expect(textOf(first)).toBe("bye");
    await waitFor(() => agent.connections(http.origin).total === 0, 1_000, "the pool to let go");
    const second = await request(agent, req(http.origin));
    expectComplete(second);
    expect(textOf(second)).toBe("bye");
    expect(http.connections).toBe(2);
  });

  it("opens a new connection when a node:http server (keepAliveTimeout 200 ms) closed the idle one", async () => {
    const http = await serveHttp((_req, res) => res.end("fine"), { keepAliveTimeout: 200 });
    const agent = newAgent();
    expectComplete(await request(agent, req(http.origin)));
    await sleep(500);
    const second = await request(agent, req(http.origin));
    expectComplete(second);
    expect(textOf(second)).toBe("fine");
    expect(http.connections).toBe(2);
  });

  it("does not reuse the connection of an HTTP/1.0 answer without keep-alive", async () => {
    // The server leaves the socket open: only the answer's version says not to reuse it.
    const raw = await serveRaw(({ socket }) =>
      socket.write("HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok"),
    );
    const agent = newAgent();
    expectComplete(await request(agent, req(raw.origin)));
    const second = await request(agent, req(raw.origin));
    expectComplete(second);
    expect(textOf(second)).toBe("ok");
    expect(raw.connections).toBe(2);
  });

  it("opens a new connection when the server closed the idle one", async () => {
    // No keep-alive hint: only the server's close tells the agent the connection is gone.
    const raw = await serveRaw(({ socket }) => {
      socket.write(rawAnswer("fine"));
      setTimeout(() => socket.end(), 200);
    });
    const agent = newAgent();
    expectComplete(await request(agent, req(raw.origin)));
    await sleep(500);
    const pooledAfterClose = agent.connections(raw.origin);
    const second = await request(agent, req(raw.origin));
    expectComplete(second);
    expect(textOf(second)).toBe("fine");
    expect(raw.connections).toBe(2);
    expect(pooledAfterClose, "the closed idle connection is out of the pool").toEqual({
      idle: 0,
      total: 0,
    });
  });

  it("does not reuse a connection idle past the server's keep-alive: timeout=1 hint", async () => {
    // The server itself never closes: reuse would "work" here, but races a real server's close.
    const raw = await serveRaw(({ socket }) => {
      socket.write(rawAnswer("hinted", "Keep-Alive: timeout=1\r\n"));
    });
    const agent = newAgent();
    expectComplete(await request(agent, req(raw.origin)));
    await sleep(1_200);
    const second = await request(agent, req(raw.origin));
    expectComplete(second);
    expect(textOf(second)).toBe("hinted");
    expect(raw.connections).toBe(2);
  });

  it("closes a connection idle for keepAliveMs", async () => {
    const http = await serveHttp((_req, res) => res.end("ok"));
    const agent = newAgent({ keepAliveMs: 200 });
    expectComplete(await request(agent, req(http.origin)));
    await waitFor(() => http.closed === 1, 2_000, "the server to see the idle connection close");
    expect(agent.connections(http.origin)).toEqual({ idle: 0, total: 0 });
  });

  it("keeps to connectionsPerOrigin: 2 for five concurrent requests, and all five complete", async () => {
    const agent = newAgent({ connectionsPerOrigin: 2 });
    let inFlight = 0;
    let maxInFlight = 0;
    let maxPooled = 0;
    const http = await serveHttp((req, res) => {
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      maxPooled = Math.max(maxPooled, agent.connections(http.origin).total);
      setTimeout(() => {
        inFlight--;
        res.end(`done ${req.url}`);
      }, 100);
    });
    const all = await Promise.all(
      Array.from({ length: 5 }, (_, i) => request(agent, req(http.origin, { path: `/r${i}` }))),
    );
    all.forEach((o, i) => {
      expectComplete(o);
      expect(textOf(o)).toBe(`done /r${i}`);
    });
    expect(http.maxOpen).toBeLessThanOrEqual(2);
    expect(maxInFlight).toBe(2);
    expect(maxPooled).toBeLessThanOrEqual(2);
    expect(http.requests).toHaveLength(5);
  });

  it("completes a 204 and a content-length: 0 answer with empty bodies and reuses the connection", async () => {
    const http = await serveHttp((req, res) => {
      if (req.url === "/204") res.writeHead(204).end();
      else if (req.url === "/empty") res.writeHead(200, { "content-length": "0" }).end();
      else res.end("after");
    });
    const agent = newAgent();
    const noContent = await request(agent, req(http.origin, { path: "/204" }));
    expectComplete(noContent, 204);
    expect(bytesOf(noContent)).toBe(0);
    const empty = await request(agent, req(http.origin, { path: "/empty" }));
    expectComplete(empty);
    expect(bytesOf(empty)).toBe(0);
    const after = await request(agent, req(http.origin, { path: "/after" }));
    expectComplete(after);
    expect(textOf(after)).toBe("after");
    expect(http.connections).toBe(1);
  });
});

describe("answers cut short", () => {
  it("fails an answer whose server closes mid-body (content-length 100, 10 bytes sent), never completing it", async () => {
    const raw = await serveRaw(({ socket }) => {
      socket.write("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789");
      setTimeout(() => socket.destroy(), 30);
    });
    const agent = newAgent();
    const o = await request(agent, req(raw.origin));
    expect(o.completed).toBe(false);
    expect(o.error).toBeInstanceOf(Error);
    if (o.error instanceof UpstreamError) expect(o.error.code).toBe("UPSTREAM_CLOSED");
    else expect(String(codeOf(o.error)), o.error?.message).toMatch(/^E[A-Z]+$/);
    expect(bytesOf(o)).toBeLessThanOrEqual(10);
  });

  it("fails a chunked answer whose server closes before the last chunk", async () => {
    const raw = await serveRaw(({ socket }) => {
      socket.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n");
      setTimeout(() => socket.end(), 30);
    });
    const agent = newAgent();
    const o = await request(agent, req(raw.origin));
    expect(o.completed).toBe(false);
    expect(o.error).toBeInstanceOf(Error);
    if (o.error instanceof UpstreamError) expect(o.error.code).toBe("UPSTREAM_CLOSED");
  });

  it("fails a request whose server closes the connection without answering", async () => {
    const raw = await serveRaw(({ socket }) => socket.destroy());
    const agent = newAgent();
    const o = await request(agent, req(raw.origin));
    expect(o.completed).toBe(false);
    expect(o.error).toBeInstanceOf(Error);
    expect(o.headersCalls).toBe(0);
  });
});

describe("time bounds", () => {
  it("fails with UPSTREAM_HEADERS_TIMEOUT when the server never answers, and closes the connection", async () => {
    const http = await serveHttp(() => {});
    const agent = newAgent();
    const o = await request(agent, req(http.origin, { headersTimeout: 300 }));
    expectUpstreamError(o, "UPSTREAM_HEADERS_TIMEOUT");
    expect(o.elapsedMs).toBeGreaterThanOrEqual(250);
    expect(o.elapsedMs).toBeLessThan(300 + 2_000);
    expect(http.requests).toHaveLength(1);
    await waitFor(() => http.closed === 1, 1_000, "the server to see the connection closed");
    expect(agent.connections(http.origin).total).toBe(0);
  });

  it("fails with UPSTREAM_HEADERS_TIMEOUT when the headers start but never finish", async () => {
    const raw = await serveRaw(({ socket }) => socket.write("HTTP/1.1 200 OK\r\nX-A: 1\r\n"));
    const agent = newAgent();
    const o = await request(agent, req(raw.origin, { headersTimeout: 300 }));
    expectUpstreamError(o, "UPSTREAM_HEADERS_TIMEOUT");
    expect(o.headersCalls).toBe(0);
    await waitFor(() => raw.closed === 1, 1_000, "the server to see the connection closed");
  });

  it("counts headersTimeout from dispatch, including the wait for a free connection", async () => {
    const http = await serveHttp(() => {});
    const agent = newAgent({ connectionsPerOrigin: 1 });
    const first = send(agent, req(http.origin, { path: "/first", headersTimeout: 3_000 }));
    await waitFor(() => http.requests.length === 1, 2_000, "the first request to reach the server");
    const queued = await request(
      agent,
      req(http.origin, { path: "/queued", headersTimeout: 300 }),
      {},
      2_000,
    );
    expectUpstreamError(queued, "UPSTREAM_HEADERS_TIMEOUT");
    expect(first.outcome.error, "the first request is still waiting").toBeUndefined();
    first.abort(new Error("done with it"));
    await first.done;
    await sleep(50);
    expect(http.requests.map((r) => r.url)).toEqual(["/first"]);
  });

  it("fails a TLS handshake that never completes with UPSTREAM_CONNECT_TIMEOUT (connectTimeoutMs)", async () => {
    // A TCP server that accepts and says nothing: the handshake never ends.
    const silent = await serveRaw(() => {});
    const agent = newAgent({ connectTimeoutMs: 300 });
    const origin = silent.origin.replace("http:", "https:");
    const o = await request(agent, req(origin, { headersTimeout: 3_000 }));
    expectUpstreamError(o, "UPSTREAM_CONNECT_TIMEOUT");
    expect(o.elapsedMs).toBeLessThan(300 + 2_000);
    await waitFor(() => silent.closed === 1, 1_000, "the server to see the connection closed");
  });

  it("does not count headersTimeout once the headers are complete", async () => {
    const http = await serveHttp((_req, res) => {
      res.writeHead(200);
      res.flushHeaders();
      void (async () => {
        for (let i = 0; i < 5; i++) {
          await sleep(100);
          res.write(`${i}`);
        }
        res.end();
      })();
    });
    const agent = newAgent();
    const o = await request(agent, req(http.origin, { headersTimeout: 200, bodyTimeout: 2_000 }));
    expectComplete(o);
    expect(textOf(o)).toBe("01234");
  });

  it("fails with UPSTREAM_BODY_TIMEOUT when the headers come and then nothing", async () => {
    const http = await serveHttp((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.flushHeaders();
    });
    const agent = newAgent();
    const o = await request(agent, req(http.origin, { bodyTimeout: 300 }));
    expect(o.status).toBe(200);
    expectUpstreamError(o, "UPSTREAM_BODY_TIMEOUT");
    expect(o.elapsedMs).toBeLessThan(300 + 2_000);
    await waitFor(() => http.closed === 1, 1_000, "the server to see the connection closed");
  });

  it("fails with UPSTREAM_BODY_TIMEOUT when a body goes silent after its first piece", async () => {
    const http = await serveHttp((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write("data: first\n\n");
    });
    const agent = newAgent();
    const o = await request(agent, req(http.origin, { bodyTimeout: 300 }));
    expectUpstreamError(o, "UPSTREAM_BODY_TIMEOUT");
    expect(textOf(o)).toBe("data: first\n\n");
  });

  it("completes a trickle whose gaps stay under bodyTimeout though its total exceeds it", async () => {
    const http = await serveHttp((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.flushHeaders();
      void (async () => {
        for (let i = 0; i < 6; i++) {
          await sleep(100);
          res.write(`data: ${i}\n\n`);
        }
        res.end();
      })();
    });
    const agent = newAgent();
    const o = await request(agent, req(http.origin, { bodyTimeout: 300 }));
    expectComplete(o);
    expect(textOf(o)).toBe([0, 1, 2, 3, 4, 5].map((i) => `data: ${i}\n\n`).join(""));
    expect(o.elapsedMs).toBeGreaterThan(300);
  });
});

describe("abort", () => {
  /** A server streaming a piece every 30 ms until its socket closes. */
  async function endlessStream(): Promise<HttpFixture> {
    return serveHttp((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      const timer = setInterval(() => res.write("data: more\n\n"), 30);
      res.on("close", () => clearInterval(timer));
    });
  }

  it("ends a streaming answer with the given error and closes its connection", async () => {
    const http = await endlessStream();
    const agent = newAgent();
    const sent = send(agent, req(http.origin));
    await waitFor(() => sent.outcome.chunks.length >= 2, 2_000, "two pieces of the body");
    const reason = new Error("the client went away");
    sent.abort(reason);
    sent.abort(new Error("a second abort changes nothing"));
    const o = await sent.done;
    expect(o.error).toBe(reason);
    expect(o.completed).toBe(false);
    await waitFor(() => http.closed === 1, 1_000, "the server to see its socket closed");
    expect(agent.connections(http.origin).total).toBe(0);
  });

  it("ends an answer aborted from inside onData, with no onData after it", async () => {
    const http = await endlessStream();
    const agent = newAgent();
    const reason = new Error("enough");
    let abort: ((err: Error) => void) | undefined;
    const o = await request(agent, req(http.origin), {
      onConnect: (a) => {
        abort = a;
      },
      onData: (_chunk, seen) => {
        if (seen.chunks.length === 2) abort?.(reason);
        return true;
      },
    });
    expect(o.error).toBe(reason);
    expect(o.chunks).toHaveLength(2);
    await waitFor(() => http.closed === 1, 1_000, "the server to see its socket closed");
  });

  it("ends a request still waiting for its headers with the given error", async () => {
    const http = await serveHttp(() => {});
    const agent = newAgent();
    const sent = send(agent, req(http.origin));
    await waitFor(() => http.requests.length === 1, 2_000, "the request to reach the server");
    const reason = new Error("cancelled");
    sent.abort(reason);
    const o = await sent.done;
    expect(o.error).toBe(reason);
    expect(o.headersCalls).toBe(0);
    await waitFor(() => http.closed === 1, 1_000, "the server to see its socket closed");
  });

  it("removes a queued request (connectionsPerOrigin: 1, one in flight) with onError and never sends it", async () => {
    const held: ServerResponse[] = [];
    const http = await serveHttp((req, res) => {
      if (req.url === "/first") held.push(res);
      else res.end(`answer to ${req.url}`);
    });
    const agent = newAgent({ connectionsPerOrigin: 1 });
    const first = send(agent, req(http.origin, { path: "/first" }));
    await waitFor(() => held.length === 1, 2_000, "the first request to reach the server");
    const second = send(agent, req(http.origin, { path: "/second" }));
    const reason = new Error("gave up waiting");
    second.abort(reason);
    const o2 = await bounded(second.done, 1_000, "the queued request's onError");
    expect(o2.error).toBe(reason);
    expect(o2.headersCalls).toBe(0);
    expect(first.outcome.completed).toBe(false);
    held[0].end("first done");
    const o1 = await first.done;
    expectComplete(o1);
    expect(textOf(o1)).toBe("first done");
    // The queue still moves, and the aborted request never went out.
    const o3 = await request(agent, req(http.origin, { path: "/third" }));
    expectComplete(o3);
    expect(http.requests.map((r) => r.url)).toEqual(["/first", "/third"]);
  });

  it("ignores an abort after the answer completed", async () => {
    const http = await serveHttp((_req, res) => res.end("ok"));
    const agent = newAgent();
    const sent = send(agent, req(http.origin));
    expectComplete(await sent.done);
    sent.abort(new Error("too late"));
    await sleep(50);
    expect(sent.outcome.error).toBeUndefined();
    expectComplete(await request(agent, req(http.origin)));
  });
});

describe("backpressure", () => {
  it("stalls the server while onData's false holds, and delivers the rest after resume()", async () => {
    const total = 20 * 1024 * 1024;
    const pieceSize = 64 * 1024;
    let flushed = 0;
    const http = await serveHttp((_req, res) => {
      res.writeHead(200, { "content-type": "application/octet-stream" });
      void (async () => {
        for (let sent = 0; sent < total && !res.destroyed; sent += pieceSize) {
          const piece = Buffer.alloc(pieceSize, (sent / pieceSize) % 256);
          const more = res.write(piece, () => {
            flushed += piece.length;
          });
          if (!more) {
            await new Promise<void>((resolve) => {
              const go = () => {
                res.off("drain", go);
                res.off("close", go);
                resolve();
              };
              res.on("drain", go);
              res.on("close", go);
            });
          }
        }
        res.end();
      })();
    });
    const agent = newAgent();
    let paused = false;
    let callsWhilePaused = 0;
    const sent = send(
      agent,
      req(http.origin, { bodyTimeout: 10_000 }),
      {
        onData: () => {
          if (!paused) {
            paused = true;
            return false;
          }
          callsWhilePaused++;
          return true;
        },
      },
      5_500,
    );
    await waitFor(() => paused, 2_000, "the first piece of the body");
    await sleep(1_000);
    const writtenWhilePaused = flushed;
    const deliveredWhilePaused = bytesOf(sent.outcome);
    expect(
      writtenWhilePaused,
      `the server wrote ${writtenWhilePaused} bytes while the reader held`,
    ).toBeLessThan(10 * 1024 * 1024);
    expect(
      deliveredWhilePaused,
      `${deliveredWhilePaused} bytes in ${callsWhilePaused + 1} onData calls while paused`,
    ).toBeLessThan(1024 * 1024);
    sent.resume();
    const o = await sent.done;
    expectComplete(o);
    const body = bodyOf(o);
    expect(body.length).toBe(total);
    for (let at = 0; at < total; at += pieceSize) {
      const want = (at / pieceSize) % 256;
      if (body[at] !== want || body[at + pieceSize - 1] !== want) {
        throw new Error(`body differs in the piece at byte ${at}`);
      }
    }
  }, 8_000);
});

describe("bad answers and refused requests", () => {
  it("fails a malformed status line with UPSTREAM_BAD_ANSWER", async () => {
    const raw = await serveRaw(({ socket }) => socket.write("HTXP/1.1 200 OK\r\n\r\n"));
    const agent = newAgent();
    const o = await request(agent, req(raw.origin));
    expectUpstreamError(o, "UPSTREAM_BAD_ANSWER");
    expect(o.headersCalls).toBe(0);
  });

  it("fails headers larger than 64 KiB with UPSTREAM_BAD_ANSWER", async () => {
    const raw = await serveRaw(({ socket }) => {
      let head = "HTTP/1.1 200 OK\r\n";
      for (let i = 0; i < 70; i++) head += `X-Filler-${i}: ${"a".repeat(1_000)}\r\n`;
      socket.write(`${head}Content-Length: 2\r\n\r\nok`);
    });
    const agent = newAgent();
    const o = await request(agent, req(raw.origin));
    expectUpstreamError(o, "UPSTREAM_BAD_ANSWER");
  });

  it("fails headers passing 64 KiB without an end as they arrive, not at the headers timeout", async () => {
    const raw = await serveRaw(({ socket }) => {
      socket.write(`HTTP/1.1 200 OK\r\nX-Endless: ${"b".repeat(80 * 1024)}`);
    });
    const agent = newAgent();
    const o = await request(agent, req(raw.origin, { headersTimeout: 3_000 }));
    expectUpstreamError(o, "UPSTREAM_BAD_ANSWER");
  });

  it("fails a chunk size that is not hex with UPSTREAM_BAD_ANSWER", async () => {
    const raw = await serveRaw(({ socket }) =>
      socket.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"),
    );
    const agent = newAgent();
    const o = await request(agent, req(raw.origin));
    expectUpstreamError(o, "UPSTREAM_BAD_ANSWER");
  });

  it("fails a content-length that is not a number with UPSTREAM_BAD_ANSWER", async () => {
    const raw = await serveRaw(({ socket }) =>
      socket.write("HTTP/1.1 200 OK\r\nContent-Length: 12abc\r\n\r\nhello"),
    );
    const agent = newAgent();
    const o = await request(agent, req(raw.origin));
    expectUpstreamError(o, "UPSTREAM_BAD_ANSWER");
  });

  it("fails two different content-length values with UPSTREAM_BAD_ANSWER", async () => {
    const raw = await serveRaw(({ socket }) =>
      socket.write("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\nhello"),
    );
    const agent = newAgent();
    const o = await request(agent, req(raw.origin));
    expectUpstreamError(o, "UPSTREAM_BAD_ANSWER");
  });

  it("frames an answer with both content-length and chunked by its chunks, or refuses it", async () => {
    const raw = await serveRaw(({ socket }) =>
      socket.write(
        "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n" +
          "5\r\nhello\r\n0\r\n\r\n",
      ),
    );
    const agent = newAgent();
    const o = await request(agent, req(raw.origin));
    if (o.error) expect(codeOf(o.error), o.error.message).toBe("UPSTREAM_BAD_ANSWER");
    else expect(textOf(o)).toBe("hello");
  });

  it("skips 1xx interim answers: the handler sees the 200 only", async () => {
    const raw = await serveRaw(({ socket }) => {
      void writeSlowly(
        socket,
        [
          "HTTP/1.1 100 Continue\r\n\r\n",
          "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n",
          rawAnswer("final", "X-Final: yes\r\n"),
        ],
        20,
      );
    });
    const agent = newAgent();
    const o = await request(agent, req(raw.origin));
    expectComplete(o);
    expect(o.headersCalls).toBe(1);
    expect(o.rawHeaders?.slice(0, 2)).toEqual(["X-Final", "yes"]);
    expect(textOf(o)).toBe("final");
  });

  it("refuses a header value containing CR or LF with onError, sending nothing, throwing nothing", async () => {
    const http = await serveHttp((_req, res) => res.end("ok"));
    const agent = newAgent();
    for (const value of ["a\r\nX-Injected: 1", "a\nX-Injected: 1", "a\rb"]) {
      const o = await request(agent, req(http.origin, { headers: { "x-note": value } }));
      expect(o.completed, JSON.stringify(value)).toBe(false);
      expect(o.error, JSON.stringify(value)).toBeInstanceOf(Error);
    }
    await sleep(200);
    expect(http.requests).toHaveLength(0);
    // The agent is still good for a clean request.
    expectComplete(await request(agent, req(http.origin, { headers: { "x-note": "fine" } })));
    expect(http.requests).toHaveLength(1);
  });

  it("refuses a path containing CR, LF or a space with onError, sending nothing", async () => {
    const http = await serveHttp((_req, res) => res.end("ok"));
    const agent = newAgent();
    for (const path of ["/a\r\nX-Injected: 1", "/a HTTP/1.1\r\n\r\nGET /b", "/a b"]) {
      const o = await request(agent, req(http.origin, { path }));
      expect(o.completed, JSON.stringify(path)).toBe(false);
      expect(o.error, JSON.stringify(path)).toBeInstanceOf(Error);
    }
    await sleep(200);
    expect(http.requests).toHaveLength(0);
  });

  it("fails with ECONNREFUSED where nothing listens", async () => {
    const probe = createNetServer();
    probe.listen(0, "127.0.0.1");
    await once(probe, "listening");
    const { port } = probe.address() as AddressInfo;
    await new Promise<void>((resolve) => probe.close(() => resolve()));
    const agent = newAgent();
    const o = await request(agent, req(`http://127.0.0.1:${port}`));
    expect(o.completed).toBe(false);
    expect(codeOf(o.error), o.error?.message).toBe("ECONNREFUSED");
  });
});

// ---------------------------------------------------------------------------------------------

const tlsTest = it.skipIf(!hasOpenssl);
const tlsNote = hasOpenssl ? "" : " [SKIPPED: openssl is not on PATH]";

describe("https", () => {
  let key = "";
  let cert = "";

  beforeAll(() => {
    if (hasOpenssl) ({ key, cert } = selfSignedCertificate());
  });

  /** A TLS server answering a chunked body in pieces. */
  const chunkedOverTls = () =>
    serveHttp(
      (_req, res) => {
        res.writeHead(200, { "content-type": "text/plain" });
        void (async () => {
          for (let i = 0; i < 5; i++) {
            res.write(`secure ${i};`);
            await sleep(10);
          }
          res.end();
        })();
      },
      { tls: { key, cert } },
    );
  const wholeTlsBody = [0, 1, 2, 3, 4].map((i) => `secure ${i};`).join("");

  tlsTest(`delivers a chunked answer whole over https with the test CA${tlsNote}`, async () => {
    const https = await chunkedOverTls();
    const agent = newAgent({ tls: { ca: cert } });
    const o = await request(agent, req(https.origin, { body: "{}" }));
    expectComplete(o);
    expect(textOf(o)).toBe(wholeTlsBody);
    expect(https.requests[0].body.toString()).toBe("{}");
  });

  tlsTest(`reuses one TLS connection for two sequential requests${tlsNote}`, async () => {
    const https = await chunkedOverTls();
    const agent = newAgent({ tls: { ca: cert } });
    expectComplete(await request(agent, req(https.origin)));
    const second = await request(agent, req(https.origin));
    expectComplete(second);
    expect(textOf(second)).toBe(wholeTlsBody);
    expect(https.connections).toBe(1);
  });

  tlsTest(`refuses the self-signed certificate without the CA${tlsNote}`, async () => {
    const https = await chunkedOverTls();
    const agent = newAgent();
    const o = await request(agent, req(https.origin));
    expect(o.completed).toBe(false);
    expect(o.error).toBeInstanceOf(Error);
    expect(o.headersCalls).toBe(0);
    expect(https.requests).toHaveLength(0);
  });
});

describe("close()", () => {
  it("closes idle connections, and a dispatch after it fails with UPSTREAM_AGENT_CLOSED", async () => {
    const http = await serveHttp((_req, res) => res.end("ok"));
    const agent = newAgent();
    expectComplete(await request(agent, req(http.origin)));
    await waitFor(() => agent.connections(http.origin).idle === 1, 500, "idle 1");
    await closeAgent(agent);
    await waitFor(() => http.closed === 1, 1_000, "the server to see the idle connection end");
    expect(agent.connections(http.origin)).toEqual({ idle: 0, total: 0 });
    const after = await request(agent, req(http.origin));
    expectUpstreamError(after, "UPSTREAM_AGENT_CLOSED");
    expect(http.connections).toBe(1);
    expect(http.requests).toHaveLength(1);
  });

  it("resolves once the connections in use are done, letting their answers complete", async () => {
    const held: ServerResponse[] = [];
    const http = await serveHttp((_req, res) => held.push(res));
    const agent = newAgent();
    const sent = send(agent, req(http.origin));
    await waitFor(() => held.length === 1, 2_000, "the request to reach the server");
    let closed = false;
    let completedBeforeClose: boolean | undefined;
    const closing = closeAgent(agent).then(() => {
      closed = true;
      completedBeforeClose = sent.outcome.completed;
    });
    await sleep(100);
    expect(closed, "close() resolved while an answer was still in flight").toBe(false);
    const during = await request(agent, req(http.origin));
    expectUpstreamError(during, "UPSTREAM_AGENT_CLOSED");
    held[0].end("finished");
    const o = await sent.done;
    expectComplete(o);
    expect(textOf(o)).toBe("finished");
    await closing;
    expect(completedBeforeClose).toBe(true);
    await waitFor(() => http.closed === 1, 1_000, "the server to see the connection end");
    expect(http.requests).toHaveLength(1);
  });
});
