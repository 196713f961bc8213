import { connect, createServer, type Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import type { FinishedRequest } from "../src/server/http/request-trace.js";
import { requestIdMeta } from "../src/server/mcp/tools.js";
import { admin, idleMoney, money } from "./support/api.js";
import { ownerSession } from "./support/cli.js";
import {
  type FakeUpstream,
  fakeUpstream,
  openaiError,
  openaiJson,
} from "./support/fake-upstream.js";
import {
  ADMIN_KEY,
  baseConfig,
  baseConfigWith,
  KEY,
  LOGIN_KEY,
  POOR_KEY,
  SHARED_KEY,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";
import { mcpClient } from "./support/mcp.js";

/**
 * A developer's day against `gateway serve`, from the client's side: every refusal of every route
 * names its code in the route's style with a request id, and a request the server cannot take
 * (no Host, an Expect it does not meet, a body that never comes) is answered as itself: the id
 * its client got is the id of its line in serve's log.
 */

const REVOKED_KEY = "kn-test-revoked-key-000000000000";
const SUSPENDED_KEY = "kn-test-suspended-key-0000000000";
const BUSY_KEY = "kn-test-busy-account-key-0000000";
/** What the fake provider says in its own error bodies, which no client may see. */
const PROVIDER_WORDS = "PROVIDER-OWN-WORDS sk-upstream-secret-0000";

interface Answer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** What to send after the first bytes: a body a character at a time, or once 100 Continue came. */
interface Then {
  drip?: { body: string; everyMs: number };
  afterContinue?: string;
}

/**
 * Sends `bytes` on a connection of its own and reads one answer (after any 100 Continue): until it
 * is complete (its length, or a chunked body's end) or the server closes the connection, within
 * 5 s.
 */
function rawExchange(gw: { url: string }, bytes: string, then: Then = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const socket = connect(Number(new URL(gw.url).port), "127.0.0.1");
    let received = "";
    let afterContinue = then.afterContinue;
    let dripper: NodeJS.Timeout | undefined;
    const finish = () => {
      clearTimeout(timer);
      clearInterval(dripper);
      socket.destroy();
    };
    const done = () => {
      finish();
      resolve(parseAnswer(withoutContinue(received)));
    };
    const timer = setTimeout(() => {
      finish();
      reject(new Error(`no answer within 5 s; received: ${received}`));
    }, 5_000);
    socket.on("data", (d: Buffer) => {
      received += d.toString("latin1");
      if (afterContinue !== undefined && received.startsWith(CONTINUE)) {
        socket.write(afterContinue);
        afterContinue = undefined;
      }
      if (complete(withoutContinue(received))) done();
    });
    socket.on("error", () => {});
    socket.on("close", done);
    socket.write(bytes);
    if (then.drip) {
      const { body, everyMs } = then.drip;
      let sent = 0;
      dripper = setInterval(() => {
        if (sent < body.length && !socket.destroyed) socket.write(body[sent++]!);
      }, everyMs);
    }
  });
}

const CONTINUE = "HTTP/1.1 100 Continue\r\n\r\n";
const withoutContinue = (raw: string) =>
  raw.startsWith(CONTINUE) ? raw.slice(CONTINUE.length) : raw;

function complete(raw: string): boolean {
  const end = raw.indexOf("\r\n\r\n");
  if (end === -1) return false;
  const { headers } = parseAnswer(raw);
  if (headers["transfer-encoding"] === "chunked") return raw.endsWith("0\r\n\r\n");
  const length = headers["content-length"];
  return length !== undefined && raw.length - end - 4 >= Number(length);
}

function parseAnswer(raw: string): Answer {
  const end = raw.indexOf("\r\n\r\n");
  const [statusLine, ...lines] = raw.slice(0, end).split("\r\n");
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const colon = line.indexOf(":");
    headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
  }
  return { status: Number(statusLine!.split(" ")[1]), headers, body: raw.slice(end + 4) };
}

/**
 * Everything a connection receives until the server closes it (within 5 s), having sent `bytes`
 * and, once an answer came, `afterAnswer`; `closed` says whether the server closed it. A client
 * that sent `Expect: 100-continue` sends no body before its 100, and none comes here.
 */
function rawUntilClosed(
  gw: { url: string },
  bytes: string,
  afterAnswer?: string,
): Promise<{ raw: string; closed: boolean }> {
  return new Promise((resolve) => {
    const socket = connect(Number(new URL(gw.url).port), "127.0.0.1");
    let raw = "";
    let closed = false;
    let pending = afterAnswer;
    const timer = setTimeout(() => socket.destroy(), 5_000);
    socket.on("data", (d: Buffer) => {
      raw += d.toString("latin1");
      if (pending !== undefined && complete(raw)) {
        socket.write(pending);
        pending = undefined;
      }
    });
    socket.on("end", () => {
      closed = true;
    });
    socket.on("error", () => {});
    socket.on("close", () => {
      clearTimeout(timer);
      resolve({ raw, closed });
    });
    socket.write(bytes);
  });
}

/**
 * The status lines of every response in `raw`, 100 Continue included (a body without a final
 * newline runs into the next response's status line).
 */
const statusLines = (raw: string) => raw.match(/HTTP\/1\.1 \d{3}(?= )/g) ?? [];

/** How a refusal's body reads: the route's JSON style, OAuth's, JSON-RPC's, plain text or a page. */
type Style =
  | { chat: string; type?: string }
  | { messages: string }
  | { jsonrpc: number }
  | { oauth: string }
  | "plain"
  | "page";

interface Row {
  /** What the client did. */
  what: string;
  method: string;
  path: string;
  /** The key sent as Bearer (KEY unless given; null: none). */
  key?: string | null;
  headers?: Record<string, string>;
  body?: string;
  /** The bytes to send on a connection of their own, instead of a fetch. */
  raw?: string;
  status: number;
  style: Style;
  /** What the message must say, where a row's refusal has one thing to tell. */
  says?: RegExp;
  /** The `Allow` header a refusal of a method must carry. */
  allow?: string;
}

const json = (value: unknown) => JSON.stringify(value);
const chatBody = (model: string, extra: object = {}) =>
  json({ model, messages: [{ role: "user", content: "hello" }], ...extra });
const messagesBody = (model: string) =>
  json({ model, max_tokens: 50, messages: [{ role: "user", content: "hello" }] });
const ANTHROPIC_SDK = { "anthropic-version": "2023-06-01" };
const tooLarge = json({
  model: "mock-gpt",
  messages: [{ role: "user", content: "x".repeat(70_000) }],
});

const chatError = (code: string, type = code): Style => ({ chat: code, type });
const messagesError = (type: string): Style => ({ messages: type });
const post = (path: string, what: string, body: string, status: number, style: Style): Row => ({
  what,
  method: "POST",
  path,
  body,
  status,
  style,
});
const get = (path: string, what: string, status: number, style: Style): Row => ({
  what,
  method: "GET",
  path,
  status,
  style,
});
const as = (key: string | null, row: Row): Row => ({ ...row, key });
const withHeaders = (headers: Record<string, string>, row: Row): Row => ({ ...row, headers });
const saying = (says: RegExp, row: Row): Row => ({ ...row, says });
const allowing = (allow: string, row: Row): Row => ({ ...row, allow });
const raw = (method: string, path: string, what: string, bytes: string, status: number): Row => ({
  what,
  method,
  path,
  raw: bytes,
  status,
  style: "plain",
});

const CHAT = "/v1/chat/completions";
const MESSAGES = "/v1/messages";
const SSE_TOO = { accept: "application/json, text/event-stream" };
const head = (line: string, ...fields: string[]) =>
  `${line}\r\n${fields.map((f) => `${f}\r\n`).join("")}\r\n`;
const bearer = `authorization: Bearer ${KEY}`;

/** Every route's refusals, as a client meets them (`cookie`: an owner's dashboard session). */
const rows = (cookie: string): Row[] => [
  // ---- /v1/chat/completions
  post(CHAT, "bad JSON", "{nope", 400, chatError("bad_request")),
  post(CHAT, "an empty body", "", 400, chatError("bad_request")),
  post(CHAT, "a JSON array", "[]", 400, chatError("bad_request")),
  post(CHAT, "no model", json({ messages: [] }), 400, chatError("bad_request")),
  post(CHAT, "a body over the limit", tooLarge, 413, chatError("bad_request")),
  post(CHAT, "an unknown model", chatBody("mock-nope"), 400, chatError("model_not_found")),
  post(CHAT, "an image model", chatBody("mock-image"), 503, chatError("no_wire_for_modality")),
  as(null, post(CHAT, "no key", chatBody("mock-gpt"), 401, "plain")),
  as(REVOKED_KEY, post(CHAT, "a revoked key", chatBody("mock-gpt"), 401, "plain")),
  as(SUSPENDED_KEY, post(CHAT, "a suspended account", chatBody("mock-gpt"), 401, "plain")),
  as(
    POOR_KEY,
    post(CHAT, "an empty balance", chatBody("mock-gpt"), 402, chatError("insufficient_balance")),
  ),
  post(CHAT, "a subscribers-only model", chatBody("mock-pro"), 403, chatError("subscribers_only")),
  as(
    BUSY_KEY,
    post(CHAT, "the minute used", chatBody("mock-gpt"), 429, chatError("rate_limit_exceeded")),
  ),
  post(CHAT, "a provider's 400", chatBody("fake-reject"), 400, chatError("invalid_request_error")),
  post(CHAT, "a provider's 500", chatBody("fake-fail"), 503, chatError("upstream_error")),
  post(CHAT, "every step failing", chatBody("fake-route"), 503, chatError("all_providers_failed")),
  allowing(
    "GET, HEAD, POST, OPTIONS",
    saying(/takes GET, POST\./, {
      ...post(CHAT, "PUT", "{}", 404, chatError("not_found")),
      method: "PUT",
    }),
  ),
  get(`${CHAT}/chatcmpl-x`, "a stored completion", 400, chatError("bad_request")),
  // ---- /v1/messages
  post(MESSAGES, "bad JSON", "{nope", 400, messagesError("invalid_request_error")),
  post(
    MESSAGES,
    "no max_tokens",
    chatBody("mock-gpt"),
    400,
    messagesError("invalid_request_error"),
  ),
  post(MESSAGES, "a body over the limit", tooLarge, 413, messagesError("invalid_request_error")),
  post(
    MESSAGES,
    "an unknown model",
    messagesBody("mock-nope"),
    400,
    messagesError("not_found_error"),
  ),
  as(null, post(MESSAGES, "no key", messagesBody("mock-gpt"), 401, "plain")),
  as(SUSPENDED_KEY, post(MESSAGES, "a suspended account", messagesBody("mock-gpt"), 401, "plain")),
  as(
    POOR_KEY,
    post(
      MESSAGES,
      "an empty balance",
      messagesBody("mock-gpt"),
      402,
      messagesError("payment_required"),
    ),
  ),
  post(
    MESSAGES,
    "subscribers only",
    messagesBody("mock-pro"),
    403,
    messagesError("permission_error"),
  ),
  as(
    BUSY_KEY,
    post(
      MESSAGES,
      "the minute used",
      messagesBody("mock-gpt"),
      429,
      messagesError("rate_limit_error"),
    ),
  ),
  post(
    MESSAGES,
    "a provider's 400",
    messagesBody("fake-reject"),
    400,
    messagesError("invalid_request_error"),
  ),
  post(MESSAGES, "a provider's 500", messagesBody("fake-fail"), 503, messagesError("api_error")),
  allowing(
    "POST, OPTIONS",
    saying(/takes POST\./, get(MESSAGES, "GET", 404, messagesError("not_found_error"))),
  ),
  post(
    `${MESSAGES}/count_tokens`,
    "bad JSON",
    "{nope",
    400,
    messagesError("invalid_request_error"),
  ),
  // ---- the other /v1 routes
  post(
    "/v1/responses",
    "an unknown previous_response_id",
    json({ model: "mock-gpt", input: "hi", previous_response_id: "resp_nope" }),
    400,
    chatError("bad_request"),
  ),
  post(
    "/v1/responses",
    "a provider's 500",
    json({ model: "fake-fail", input: "hi" }),
    503,
    chatError("upstream_error"),
  ),
  allowing(
    "POST, OPTIONS",
    saying(
      /this path takes POST\./,
      get("/v1/responses", "GET without a WebSocket upgrade", 404, chatError("not_found")),
    ),
  ),
  // GET there is only the WebSocket mode, which is refused: not a method the path takes.
  allowing(
    "POST, OPTIONS",
    saying(/this path takes POST\./, {
      ...post("/v1/responses", "PUT", "{}", 404, chatError("not_found")),
      method: "PUT",
    }),
  ),
  allowing(
    "OPTIONS",
    saying(/^No route PUT \/v1\/realtime\.$/, {
      ...post("/v1/realtime", "PUT", "{}", 404, chatError("not_found")),
      method: "PUT",
    }),
  ),
  post(
    "/v1/responses/input_tokens",
    "an unknown model",
    json({ model: "mock-nope", input: "hi" }),
    400,
    chatError("model_not_found"),
  ),
  post(
    "/v1/embeddings",
    "a chat model",
    json({ model: "mock-gpt", input: "hi" }),
    503,
    chatError("no_wire_for_modality"),
  ),
  post(
    "/v1/images/generations",
    "a size too large",
    json({ model: "mock-image", prompt: "a", size: "9999x9999" }),
    400,
    chatError("bad_request"),
  ),
  post(
    "/v1/audio/speech",
    "mp3 from the mock",
    json({ model: "mock-tts", input: "hi", voice: "alloy", response_format: "mp3" }),
    400,
    chatError("bad_request"),
  ),
  post(
    "/v1/audio/transcriptions",
    "JSON, not a form",
    json({ model: "mock-whisper" }),
    400,
    chatError("bad_request"),
  ),
  post(
    "/v1/music/generations",
    "a negative duration",
    json({ model: "mock-music", prompt: "a", duration: -5 }),
    400,
    chatError("bad_request"),
  ),
  post(
    "/v1/videos/extensions",
    "an unknown video",
    json({ video_id: "video_nope", prompt: "a" }),
    404,
    chatError("not_found"),
  ),
  get("/v1/music/generations/music_nope", "an unknown job", 404, chatError("not_found")),
  get("/v1/responses/resp_nope", "an unknown response", 404, chatError("not_found")),
  get("/v1/conversations/conv_nope", "an unknown conversation", 404, chatError("not_found")),
  as(null, get("/v1/models/mock-nope", "an unknown model", 400, chatError("model_not_found"))),
  as(
    SHARED_KEY,
    get("/v1/account/quota", "a shared key", 403, chatError("shared_key_not_allowed")),
  ),
  as(
    SHARED_KEY,
    get("/v1/usage/summary", "a shared key", 403, chatError("shared_key_not_allowed")),
  ),
  saying(/\bdays\b/, get("/v1/usage/summary?days=0", "days=0", 400, chatError("bad_request"))),
  saying(/\bdays\b/, get("/v1/usage/daily?days=abc", "days=abc", 400, chatError("bad_request"))),
  saying(/\bdays\b/, get("/v1/usage/daily?days=400", "days=400", 400, chatError("bad_request"))),
  get("/v1/usage/requests?limit=0", "limit=0", 400, chatError("bad_request")),
  get("/v1/files/file_nope", "an unknown file", 404, chatError("not_found")),
  withHeaders(
    ANTHROPIC_SDK,
    get(
      "/v1/files/file_nope",
      "an unknown file, Anthropic's SDK",
      404,
      messagesError("not_found_error"),
    ),
  ),
  get("/v1/nope", "an unknown path", 404, chatError("not_found")),
  withHeaders(
    ANTHROPIC_SDK,
    get("/v1/nope", "an unknown path, Anthropic's SDK", 404, messagesError("not_found_error")),
  ),
  as(null, get("/v1/nope", "an unknown path without a key", 401, "plain")),
  { ...get("/v1/nope", "HEAD of an unknown path", 404, chatError("not_found")), method: "HEAD" },
  // ---- /mcp
  withHeaders(SSE_TOO, post("/mcp", "bad JSON", "{nope", 400, { jsonrpc: -32700 })),
  post("/mcp", "no Accept for SSE", json({ jsonrpc: "2.0", id: 1, method: "tools/list" }), 406, {
    jsonrpc: -32000,
  }),
  withHeaders(
    { ...SSE_TOO, "content-type": "text/plain" },
    post("/mcp", "text/plain", "{}", 415, { jsonrpc: -32000 }),
  ),
  as(null, post("/mcp", "no key", "{}", 401, "plain")),
  allowing("POST, OPTIONS", get("/mcp", "GET", 405, "plain")),
  allowing(
    "POST, OPTIONS",
    saying(/this path takes POST\./, {
      ...post("/mcp", "PUT", "{}", 404, { jsonrpc: -32000 }),
      method: "PUT",
    }),
  ),
  // ---- /api
  as(null, get("/api/admin/accounts", "no key", 401, "plain")),
  get("/api/admin/accounts", "a standard key", 401, "plain"),
  as(ADMIN_KEY, post("/api/admin/accounts", "bad JSON", "{nope", 400, chatError("bad_request"))),
  get("/api/keys", "a standard key", 403, chatError("forbidden")),
  as(LOGIN_KEY, post("/api/keys", "no label", "{}", 400, chatError("bad_request"))),
  as(
    null,
    post("/api/auth/device/token", "no device code", "{}", 400, { oauth: "invalid_request" }),
  ),
  as(null, get("/api/dashboard/keys", "no session", 401, "plain")),
  as(
    null,
    withHeaders(
      { origin: "http://evil.test" },
      get("/api/public/pricing", "another origin", 403, "plain"),
    ),
  ),
  get("/api/nope", "an unknown path", 404, chatError("not_found")),
  // ---- the rest
  as(null, get("/dashboard", "no session", 401, "page")),
  as(
    null,
    withHeaders({ cookie }, get("/dashboard/requests/req_nope", "an unknown request", 404, "page")),
  ),
  as(null, saying(/href="\/dashboard"/, get("/dashboard/setings", "a mistyped page", 404, "page"))),
  as(
    null,
    withHeaders(
      { cookie },
      saying(/href="\/dashboard"/, get("/dashboard/keys", "a form's address opened", 404, "page")),
    ),
  ),
  as(null, get("/nope", "an unknown path", 404, chatError("not_found"))),
  as(null, get("/metrics", "no admin key", 401, "plain")),
  // ---- what the HTTP server itself refuses
  raw("GET", "/v1/models", "HTTP/1.1 without Host", head("GET /v1/models HTTP/1.1"), 400),
  raw(
    "POST",
    MESSAGES,
    "HTTP/1.1 without Host",
    head(`POST ${MESSAGES} HTTP/1.1`, bearer, "content-length: 0"),
    400,
  ),
  raw(
    "POST",
    CHAT,
    "an Expect of 200-ok",
    head(`POST ${CHAT} HTTP/1.1`, "host: x", bearer, "expect: 200-ok", "content-length: 0"),
    417,
  ),
  raw(
    "POST",
    CHAT,
    "a broken chunked body",
    `${head(`POST ${CHAT} HTTP/1.1`, "host: x", bearer, "transfer-encoding: chunked")}zz\r\n{}\r\n`,
    400,
  ),
  raw("GET", "*", "the server as a whole, not OPTIONS", head("GET * HTTP/1.1", "host: x"), 400),
  raw(
    "GET",
    "/v1\\models",
    "a backslash in the path",
    head("GET /v1\\models HTTP/1.1", "host: x", bearer),
    400,
  ),
  allowing(
    "GET, HEAD, OPTIONS",
    saying(
      /this path takes GET\./,
      raw(
        "BREW",
        "/v1/models",
        "an unknown method",
        head("BREW /v1/models HTTP/1.1", "host: x"),
        400,
      ),
    ),
  ),
  {
    ...raw(
      "GET",
      "/%zz",
      "a path that is no percent-encoding",
      head("GET /%zz HTTP/1.1", "host: x"),
      404,
    ),
    style: chatError("not_found"),
  },
  raw(
    "GET",
    "http://[bad/",
    "an absolute URL that does not parse",
    head("GET http://[bad/ HTTP/1.1", "host: x", bearer),
    400,
  ),
  saying(
    /not a proxy/,
    raw(
      "GET",
      "/v1/models",
      "an absolute-form target naming another host (a client told to use the gateway as a proxy)",
      head("GET http://example.com/v1/models HTTP/1.1", "host: example.com", bearer),
      421,
    ),
  ),
  raw(
    "CONNECT",
    "example.com:443",
    "CONNECT",
    head("CONNECT example.com:443 HTTP/1.1", "host: example.com"),
    405,
  ),
];

/** What no refusal may show: a stack, an internal name, a provider's own words or a key. */
const leaks =
  /\bat \S+ \(|node:internal|node_modules|TypeError|ReferenceError|SQLITE_|ZodError|\[object Object\]|PROVIDER-OWN-WORDS|sk-upstream|kn-test-/;

/** Whatever the answer gets wrong for its row; nothing when it is right. */
function problemsOf(row: Row, answer: Answer): string[] {
  const problems: string[] = [];
  const expect = (ok: boolean, what: string) => {
    if (!ok) problems.push(what);
  };
  expect(answer.status === row.status, `status ${answer.status}, not ${row.status}`);
  const id = answer.headers["x-request-id"];
  expect(/^req_[\w-]+$/.test(id ?? ""), `x-request-id ${id}`);
  if (row.path.startsWith("/v1/messages") && !row.path.startsWith("/v1/messages/"))
    expect(answer.headers["request-id"] === id, `request-id ${answer.headers["request-id"]}`);
  expect(!leaks.test(answer.body), `shows what it must not: ${answer.body.slice(0, 200)}`);
  if (row.allow !== undefined)
    expect(answer.headers.allow === row.allow, `allow ${answer.headers.allow}, not ${row.allow}`);
  const type = answer.headers["content-type"] ?? "";
  if (row.method === "HEAD") return problems;
  const style = row.style;
  if (style === "plain") {
    expect(type.startsWith("text/plain"), `content-type ${type}`);
    expect(answer.body.trim().length > 10, `plain text ${JSON.stringify(answer.body)}`);
    expect(row.says?.test(answer.body) ?? true, `the text does not say ${row.says}`);
    return problems;
  }
  if (style === "page") {
    expect(type.startsWith("text/html") && /<title>/.test(answer.body), `a page: ${type}`);
    expect(row.says?.test(answer.body) ?? true, `the page does not say ${row.says}`);
    return problems;
  }
  let body: Record<string, unknown> = {};
  try {
    body = JSON.parse(answer.body) as Record<string, unknown>;
  } catch {
    problems.push(`not JSON: ${answer.body.slice(0, 200)}`);
    return problems;
  }
  const error = (body.error ?? {}) as Record<string, unknown>;
  const said = (text: unknown) =>
    typeof text === "string" && text.trim().length > 10 && (row.says?.test(text) ?? true);
  if ("chat" in style) {
    expect(error.code === style.chat, `code ${String(error.code)}, not ${style.chat}`);
    expect(error.type === (style.type ?? style.chat), `type ${String(error.type)}`);
    expect(said(error.message), `message ${String(error.message)}`);
  } else if ("messages" in style) {
    expect(body.type === "error", `type ${String(body.type)}`);
    expect(
      error.type === style.messages,
      `error.type ${String(error.type)}, not ${style.messages}`,
    );
    expect(said(error.message), `message ${String(error.message)}`);
  } else if ("jsonrpc" in style) {
    expect(error.code === style.jsonrpc, `JSON-RPC code ${String(error.code)}`);
    expect(said(error.message), `message ${String(error.message)}`);
  } else {
    expect(body.error === style.oauth, `error ${String(body.error)}`);
    expect(said(body.error_description), `error_description ${String(body.error_description)}`);
  }
  return problems;
}

async function answerOf(gw: { url: string }, row: Row): Promise<Answer> {
  if (row.raw !== undefined) return rawExchange(gw, row.raw);
  const key = row.key === undefined ? KEY : row.key;
  const res = await fetch(`${gw.url}${row.path}`, {
    method: row.method,
    headers: {
      ...(row.body !== undefined ? { "content-type": "application/json" } : {}),
      ...(key ? { authorization: `Bearer ${key}` } : {}),
      ...row.headers,
    },
    body: row.body,
  });
  return { status: res.status, headers: Object.fromEntries(res.headers), body: await res.text() };
}

describe("every refusal names its code, in the route's style", () => {
  let gw: TestGateway;
  let upstream: FakeUpstream;
  let owner: { cookie: string };
  const lines: FinishedRequest[] = [];

  beforeAll(async () => {
    upstream = await fakeUpstream("openai", (req) => {
      if (req.body.model === "upstream-reject")
        return openaiError(400, `${PROVIDER_WORDS}: bad field`, "invalid_value");
      if (req.body.model === "upstream-fail")
        return openaiError(500, `${PROVIDER_WORDS}: on fire`, null, "server_error");
      return openaiJson("hi");
    });
    gw = await testGateway({
      clock: "manual",
      bodyLimitBytes: 64 * 1024,
      onRequest: (line) => lines.push(line),
      config: baseConfigWith({
        providers: [
          {
            id: "fake",
            wire: "openai",
            base_url: `${upstream.baseUrl}/v1`,
            api_keys: ["sk-upstream-secret-0000"],
          },
        ],
        models: [
          { name: "mock-tts", provider: "mock", modality: "speech", price_per_unit: 1 },
          { name: "mock-whisper", provider: "mock", modality: "transcription", price_per_unit: 1 },
          { name: "mock-music", provider: "mock", modality: "music", price_per_unit: 1 },
          {
            name: "fake-reject",
            provider: "fake",
            upstream_model: "upstream-reject",
            price_input_per_mtok: 1000,
          },
          {
            name: "fake-fail",
            provider: "fake",
            upstream_model: "upstream-fail",
            price_input_per_mtok: 1000,
          },
        ],
        routes: [{ name: "fake-route", steps: ["fake-fail", "mock-down"] }],
        accounts: (accounts) => [
          {
            ...accounts[0],
            keys: [...accounts[0].keys!, { id: "kr", label: "revoked", value: REVOKED_KEY }],
          },
          accounts[1],
          {
            id: "suspended",
            status: "suspended",
            balance_idr: 1000,
            keys: [{ id: "kz", value: SUSPENDED_KEY }],
          },
          { id: "busy", balance_idr: 1000, rpm_limit: 1, keys: [{ id: "kb", value: BUSY_KEY }] },
        ],
      }),
    });
    expect((await admin(gw, "DELETE", "/keys/kr")).status).toBe(200);
    // The busy account's one request of the minute (the clock stands still: the minute never ends).
    const used = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${BUSY_KEY}`, "content-type": "application/json" },
      body: chatBody("mock-gpt"),
    });
    expect(used.status).toBe(200);
    await used.text();
    owner = await ownerSession(gw);
  });
  afterAll(async () => {
    await gw?.close();
    await upstream?.close();
  });

  it("on every route: the spec's status, the code or type, a message, x-request-id (and request-id on /v1/messages), and nothing of a provider, a stack or a key", async () => {
    const wrong: Record<string, string[]> = {};
    for (const row of rows(owner.cookie)) {
      const problems = problemsOf(row, await answerOf(gw, row));
      if (problems.length > 0) wrong[`${row.method} ${row.path}: ${row.what}`] = problems;
    }
    expect(wrong).toEqual({});
  });

  it("every refusal's line in serve's log has the id its client got, the method, the path and the code", async () => {
    const wrong: Record<string, unknown> = {};
    for (const row of rows(owner.cookie)) {
      const answer = await answerOf(gw, row);
      const id = answer.headers["x-request-id"] ?? "";
      const line = await lineOf(lines, id);
      const seen = {
        status: line?.status,
        method: line?.method,
        path: line?.path,
        code: line?.errorCode !== undefined,
      };
      const want = {
        status: answer.status,
        method: row.method,
        path: row.path.split("?")[0],
        code: true,
      };
      if (JSON.stringify(seen) !== JSON.stringify(want))
        wrong[`${row.method} ${row.path}: ${row.what}`] = seen;
    }
    expect(wrong).toEqual({});
  });

  it("an absolute-form target naming the gateway itself (RFC 9112: a server must accept it) is served as its path, and its line shows the path", async () => {
    const { port } = new URL(gw.url);
    for (const host of [`127.0.0.1:${port}`, `localhost:${port}`]) {
      const answer = await rawExchange(
        gw,
        head(`GET http://${host}/v1/models?x=1 HTTP/1.1`, `host: ${host}`),
      );
      expect({ host, status: answer.status }).toEqual({ host, status: 200 });
      const line = await lineOf(lines, answer.headers["x-request-id"]!);
      expect({ host, path: line?.path, error: line?.errorCode }).toEqual({
        host,
        path: "/v1/models",
        error: undefined,
      });
    }
    const messages = await rawExchange(
      gw,
      head(`POST http://127.0.0.1:${port}${MESSAGES} HTTP/1.1`, "host: x", "content-length: 0"),
    );
    expect(messages.status).toBe(401);
    expect(messages.headers["request-id"]).toBe(messages.headers["x-request-id"]);
  });

  it("OPTIONS * is asked of the server as a whole: 200, Allow naming every method its routes take, no body, an id", async () => {
    const answer = await rawExchange(gw, head("OPTIONS * HTTP/1.1", "host: x"));
    expect(answer).toMatchObject({
      status: 200,
      headers: {
        allow: "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS",
        "content-length": "0",
        "x-request-id": expect.stringMatching(/^req_[\w-]+$/),
      },
      body: "",
    });
  });
});

/** The line `gateway serve` prints for the request whose answer carried `id`, once printed (5 s). */
async function lineOf(lines: FinishedRequest[], id: string): Promise<FinishedRequest | undefined> {
  for (let waited = 0; waited < 5_000; waited += 20) {
    const line = lines.find((l) => l.requestId === id);
    if (line) return line;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return undefined;
}

describe("nothing hangs: a client whose request does not come whole", () => {
  let gw: TestGateway;
  const lines: FinishedRequest[] = [];
  beforeAll(async () => {
    gw = await testGateway({
      connections: { headersTimeoutMs: 500, requestTimeoutMs: 1_000 },
      onRequest: (line) => lines.push(line),
    });
  });
  afterAll(() => gw?.close());

  const body = chatBody("mock-gpt");
  const request = (path: string, ...fields: string[]) =>
    head(`POST ${path} HTTP/1.1`, "host: x", bearer, "content-type: application/json", ...fields);

  it("is answered as itself, 408 at the request timeout or 400 for a broken body: the answer's id is its line's, which says why; nothing held", async () => {
    const before = await money(gw);
    const cases: [string, string, number, string, Promise<Answer>][] = [
      [
        "headers, then part of the body",
        CHAT,
        408,
        "request_timeout",
        rawExchange(gw, request(CHAT, `content-length: ${body.length + 50}`) + body),
      ],
      [
        "a body a byte every 200 ms",
        CHAT,
        408,
        "request_timeout",
        rawExchange(gw, request(CHAT, `content-length: ${body.length}`), {
          drip: { body, everyMs: 200 },
        }),
      ],
      [
        "headers and no body",
        MESSAGES,
        408,
        "request_timeout",
        rawExchange(gw, request(MESSAGES, "content-length: 100")),
      ],
      [
        "headers and no body",
        "/mcp",
        408,
        "request_timeout",
        rawExchange(
          gw,
          request("/mcp", "accept: application/json, text/event-stream", "content-length: 100"),
        ),
      ],
      [
        "a chunked body that breaks",
        MESSAGES,
        400,
        "malformed_request",
        rawExchange(gw, `${request(MESSAGES, "transfer-encoding: chunked")}5\r\n{"mod\r\nzz\r\n`),
      ],
    ];
    for (const [what, path, status, code, answered] of cases) {
      const answer = await answered;
      const id = answer.headers["x-request-id"]!;
      expect({ what, status: answer.status, id }).toEqual({
        what,
        status,
        id: expect.stringMatching(/^req_[\w-]+$/),
      });
      if (path === MESSAGES) expect(answer.headers["request-id"], what).toBe(id);
      const line = await lineOf(lines, id);
      expect({ what, path: line?.path, status: line?.status, error: line?.errorCode }).toEqual({
        what,
        path,
        status,
        error: code,
      });
    }
    expect(await idleMoney(gw)).toEqual(before);
  });

  it("a request refused from its headers whose body never comes, or comes broken, has that one answer; then the connection closes", async () => {
    const keyless = (path: string, ...fields: string[]) =>
      head(`POST ${path} HTTP/1.1`, "host: x", "content-type: application/json", ...fields);
    const cases: [string, number, Promise<{ raw: string; closed: boolean }>][] = [
      ["no key, no body", 401, rawUntilClosed(gw, keyless(CHAT, "content-length: 100"))],
      [
        "no key, part of the body",
        401,
        rawUntilClosed(gw, `${keyless(MESSAGES, "content-length: 100")}{"model"`),
      ],
      [
        "a declared length over the limit, no body",
        413,
        rawUntilClosed(gw, request(CHAT, "content-length: 40000000")),
      ],
      [
        "a method the path does not take, then a broken chunked body",
        404,
        rawUntilClosed(
          gw,
          head(`PUT ${CHAT} HTTP/1.1`, "host: x", bearer, "transfer-encoding: chunked"),
          "zz\r\n{}\r\n",
        ),
      ],
    ];
    for (const [what, status, exchanged] of cases) {
      const { raw, closed } = await exchanged;
      expect({ what, answers: statusLines(raw), closed }).toEqual({
        what,
        answers: [`HTTP/1.1 ${status}`],
        closed: true,
      });
    }
  });

  it("expect: 100-continue is not answered 100 for a request refused from its headers (no key, a declared length over the limit, no such route): the refusal comes instead, and the connection closes", async () => {
    const expecting = (line: string, ...fields: string[]) =>
      head(line, "host: x", "content-type: application/json", "expect: 100-continue", ...fields);
    const cases: [string, number, string][] = [
      ["no key", 401, expecting(`POST ${CHAT} HTTP/1.1`, "content-length: 100")],
      [
        "a declared length over the limit",
        413,
        expecting(`POST ${CHAT} HTTP/1.1`, bearer, "content-length: 40000000"),
      ],
      ["no such route", 404, expecting("POST /v1/nope HTTP/1.1", bearer, "content-length: 100")],
      ["no admin key", 401, expecting("POST /api/admin/accounts HTTP/1.1", "content-length: 100")],
    ];
    for (const [what, status, bytes] of cases) {
      const { raw, closed } = await rawUntilClosed(gw, bytes);
      expect({ what, answers: statusLines(raw), closed }).toEqual({
        what,
        answers: [`HTTP/1.1 ${status}`],
        closed: true,
      });
      const line = await lineOf(lines, parseAnswer(raw).headers["x-request-id"]!);
      expect({ what, status: line?.status }).toEqual({ what, status });
    }
  });

  it("expect: 100-continue gets its 100, then its answer, whose id is its line's", async () => {
    const answer = await rawExchange(
      gw,
      request(CHAT, `content-length: ${body.length}`, "expect: 100-continue"),
      { afterContinue: body },
    );
    expect(answer.status).toBe(200);
    const line = await lineOf(lines, answer.headers["x-request-id"]!);
    expect(line).toMatchObject({ path: CHAT, status: 200, model: "mock-gpt" });
  });
});

/** What a client that sends a body over the limit sees, by where it is in sending it. */
interface BodyOutcome {
  /** The status lines that came before the client sent a byte of its body. */
  beforeBody: string[];
  /** Every status line it got, 100 Continue included, the next request's answer last. */
  answers: string[];
  /** Whether the server closed the connection (before the client sent its next request). */
  closed: boolean;
}

/**
 * Sends `head`, waits for an answer (bounded), then `bodyBytes` of body (chunked when the head says
 * so) unless the connection closed, then a GET /health on the same connection; all within 5 s.
 */
async function sendOverLimit(
  gw: { url: string },
  head: string,
  bodyBytes: number,
): Promise<BodyOutcome> {
  const socket = connect(Number(new URL(gw.url).port), "127.0.0.1");
  let raw = "";
  let closed = false;
  const gone = new Promise<void>((resolve) => socket.once("close", () => resolve()));
  socket.on("data", (d: Buffer) => {
    raw += d.toString("latin1");
  });
  socket.on("end", () => {
    closed = true;
  });
  socket.on("error", () => {});
  const until = async (done: () => boolean) => {
    for (let waited = 0; waited < 2_000 && !done() && !socket.destroyed; waited += 10)
      await new Promise((resolve) => setTimeout(resolve, 10));
  };
  const answered = () => statusLines(raw).filter((line) => line !== "HTTP/1.1 100").length;
  socket.write(head);
  await until(() => answered() > 0 || closed);
  const beforeBody = statusLines(raw);
  const body = "x".repeat(bodyBytes);
  const chunked = /transfer-encoding: chunked/i.test(head);
  if (!closed) socket.write(chunked ? `${bodyBytes.toString(16)}\r\n${body}\r\n0\r\n\r\n` : body);
  await until(() => answered() > 0 || closed);
  // Time for the server to close a connection it does not keep, before the next request.
  await new Promise((resolve) => setTimeout(resolve, 100));
  if (!closed && !socket.destroyed) {
    socket.write("GET /health HTTP/1.1\r\nhost: x\r\n\r\n");
    await until(() => answered() > 1 || closed);
  }
  socket.destroy();
  await gone;
  return { beforeBody, answers: statusLines(raw), closed };
}

describe("a body over the limit, as docs/security.md tells it: what is refused from the headers, and which bodies are read to be dropped", () => {
  let gw: TestGateway;
  /** Over the API limit of this gateway and over what is drained after a refusal (64 KB). */
  const limit = 128 * 1024;
  const over = limit + 1024;
  beforeAll(async () => {
    gw = await testGateway({ bodyLimitBytes: limit });
  });
  afterAll(() => gw?.close());

  const request = (path: string, ...fields: string[]) =>
    head(`POST ${path} HTTP/1.1`, "host: x", "content-type: application/json", ...fields);
  const WRONG = "authorization: Bearer kn-test-wrong-key-00000000000000";
  const DEVICE = "/api/auth/device/code";
  const answer = (status: number) => `HTTP/1.1 ${status}`;
  const kept = (...statuses: number[]) => ({
    answers: [...statuses.map(answer), answer(200)],
    closed: false,
  });
  const cut = (...statuses: number[]) => ({ answers: statuses.map(answer), closed: true });

  it("each case: the answer, whether it came before the body, and whether the connection stays for the next request", async () => {
    const cases: [
      string,
      string,
      number,
      BodyOutcome | Omit<BodyOutcome, "beforeBody">,
      boolean,
    ][] = [
      // [what, head, body bytes, outcome, answered before the body]
      [
        "a key, a declared length over the limit",
        request(CHAT, bearer, `content-length: ${over}`),
        over,
        kept(413),
        true,
      ],
      [
        "a wrong key, a declared length over the limit",
        request(CHAT, WRONG, `content-length: ${over}`),
        over,
        kept(413),
        true,
      ],
      [
        "no key, a declared length over the limit",
        request(CHAT, `content-length: ${over}`),
        over,
        cut(413),
        true,
      ],
      [
        "a key, a chunked body over the limit",
        request(CHAT, bearer, "transfer-encoding: chunked"),
        over,
        kept(413),
        false,
      ],
      ["no key, a body up to 64 KB", request(CHAT, "content-length: 1000"), 1000, kept(401), true],
      [
        "no key, a body over 64 KB",
        request(CHAT, "content-length: 102400"),
        100 * 1024,
        cut(401),
        true,
      ],
      ["no key, a chunked body", request(CHAT, "transfer-encoding: chunked"), 1000, cut(401), true],
      [
        "a public route, a declared 10 KB",
        request(DEVICE, "content-length: 10240"),
        10_240,
        kept(413),
        true,
      ],
      [
        "a public route, a declared 100 KB",
        request(DEVICE, "content-length: 102400"),
        102_400,
        cut(413),
        true,
      ],
      [
        "a public route, a chunked 10 KB",
        request(DEVICE, "transfer-encoding: chunked"),
        10_240,
        cut(413),
        false,
      ],
      [
        "Expect: 100-continue, a key, a declared length over the limit",
        request(CHAT, bearer, "expect: 100-continue", `content-length: ${over}`),
        over,
        cut(413),
        true,
      ],
      [
        "Expect: 100-continue, a key, a chunked body over the limit",
        request(CHAT, bearer, "expect: 100-continue", "transfer-encoding: chunked"),
        over,
        kept(100, 413),
        false,
      ],
      [
        "a key, no such route, a chunked body",
        request("/v1/nope", bearer, "transfer-encoding: chunked"),
        over,
        kept(404),
        true,
      ],
      [
        "Expect: 100-continue, no key",
        request(CHAT, "expect: 100-continue", "content-length: 1000"),
        1000,
        cut(401),
        true,
      ],
    ];
    const seen: Record<string, unknown> = {};
    const wanted: Record<string, unknown> = {};
    for (const [what, bytes, size, outcome, early] of cases) {
      const got = await sendOverLimit(gw, bytes, size);
      const final = got.answers.filter((line) => line !== answer(100))[0];
      seen[what] = {
        answers: got.answers,
        closed: got.closed,
        answeredBeforeBody: final !== undefined && got.beforeBody.includes(final),
      };
      wanted[what] = { ...outcome, answeredBeforeBody: early };
    }
    expect(seen).toEqual(wanted);
  });
});

describe("nothing hangs: a provider that does not answer, on every wire, streamed or not", () => {
  const behaviours = ["hang", "headers", "half"] as const;
  const wires = ["openai", "anthropic", "gemini"] as const;
  const sockets = new Set<Socket>();
  /**
   * A provider on a raw socket, which reads a whole request and then, by the upstream model the
   * request names: says nothing (`hang`), sends its headers and no body (`headers`), or sends half
   * a chunk of its body (`half`, an SSE event's for a stream).
   */
  const provider = createServer((socket) => {
    sockets.add(socket);
    socket.on("error", () => {});
    socket.on("close", () => sockets.delete(socket));
    let request = "";
    let answered = false;
    socket.on("data", (d: Buffer) => {
      if (answered) return;
      request += d.toString("latin1");
      const end = request.indexOf("\r\n\r\n");
      const length = Number(/content-length: (\d+)/i.exec(request)?.[1] ?? 0);
      if (end === -1 || request.length < end + 4 + length) return;
      answered = true;
      const stream = /"stream":true|streamGenerateContent/.test(request);
      const type = stream ? "text/event-stream" : "application/json";
      if (request.includes("headers-model"))
        socket.write(`HTTP/1.1 200 OK\r\ncontent-type: ${type}\r\ncontent-length: 500\r\n\r\n`);
      else if (request.includes("half-model"))
        socket.write(
          `HTTP/1.1 200 OK\r\ncontent-type: ${type}\r\ntransfer-encoding: chunked\r\n\r\n40\r\n${stream ? "data: " : ""}{"id":"x","obj`,
        );
    });
  });
  let gw: TestGateway;
  beforeAll(async () => {
    await new Promise<void>((resolve) => provider.listen(0, "127.0.0.1", resolve));
    const base = `http://127.0.0.1:${(provider.address() as { port: number }).port}`;
    type Provider = NonNullable<ConfigInput["providers"]>[number];
    gw = await testGateway({
      // A stream that fails before its first piece is then a plain HTTP error.
      keepaliveMs: 60_000,
      config: baseConfig({
        providers: wires.map(
          (wire) =>
            ({
              id: wire,
              wire,
              base_url: wire === "openai" ? `${base}/v1` : base,
              api_keys: ["sk-upstream-secret-0000"],
              timeout_ms: 500,
              idle_timeout_ms: 500,
            }) as Provider,
        ),
        models: wires.flatMap((wire) =>
          behaviours.map((behaviour) => ({
            name: `${wire}-${behaviour}`,
            provider: wire,
            upstream_model: `${behaviour}-model`,
            price_input_per_mtok: 10_000,
            price_output_per_mtok: 10_000,
          })),
        ),
        routes: [],
      }),
    });
  });
  afterAll(async () => {
    await gw?.close();
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => provider.close(resolve));
  });

  it("each request ends with the style's upstream_error within the provider's bounds, and the meter settles: nothing held, nothing charged", async () => {
    const before = await money(gw);
    const calls = wires.flatMap((wire) =>
      behaviours.flatMap((behaviour) =>
        [CHAT, MESSAGES].flatMap((path) =>
          [false, true].map(async (stream) => {
            const model = `${wire}-${behaviour}`;
            const res = await fetch(`${gw.url}${path}`, {
              method: "POST",
              headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
              body:
                path === CHAT
                  ? chatBody(model, { stream })
                  : json({ ...JSON.parse(messagesBody(model)), stream }),
              signal: AbortSignal.timeout(20_000),
            });
            const text = await res.text();
            const error = (JSON.parse(text) as { error: { code?: string; type: string } }).error;
            return {
              call: `${model} ${path}${stream ? " stream" : ""}`,
              status: res.status,
              error: path === CHAT ? error.code : error.type,
            };
          }),
        ),
      ),
    );
    for (const outcome of await Promise.all(calls)) {
      expect(outcome).toEqual({
        call: outcome.call,
        status: 503,
        error: outcome.call.includes(MESSAGES) ? "api_error" : "upstream_error",
      });
    }
    expect(await idleMoney(gw)).toEqual(before);
  });
});

describe("the request id a client got finds its request", () => {
  let gw: TestGateway;
  let owner: { cookie: string };
  const lines: FinishedRequest[] = [];
  beforeAll(async () => {
    gw = await testGateway({ onRequest: (line) => lines.push(line) });
    owner = await ownerSession(gw);
  });
  afterAll(() => gw?.close());

  /** The request's id in the request log, its line in serve's log and on the dashboard. */
  async function expectFound(id: string, path: string, via?: string) {
    let logged: { id: string; via?: string }[] = [];
    for (let waited = 0; waited < 5_000 && !logged.some((r) => r.id === id); waited += 20) {
      const res = await fetch(`${gw.url}/v1/usage/requests?limit=50`, {
        headers: { authorization: `Bearer ${KEY}` },
      });
      logged = ((await res.json()) as { data: typeof logged }).data;
    }
    expect(logged.find((r) => r.id === id)?.via, `${id} in /v1/usage/requests`).toBe(via);
    expect(
      logged.some((r) => r.id === id),
      `${id} in /v1/usage/requests`,
    ).toBe(true);
    expect(await lineOf(lines, id), `${id}'s line`).toMatchObject({ path, via });
    const dashboard = await fetch(`${gw.url}/dashboard`, { headers: { cookie: owner.cookie } });
    expect(await dashboard.text(), `${id} on the dashboard`).toContain(id);
    const page = await fetch(`${gw.url}/dashboard/requests/${id}`, {
      headers: { cookie: owner.cookie },
    });
    expect(page.status, `${id}'s page`).toBe(200);
    await page.text();
  }

  it("a success, a refusal after admission and a stream cut midway", async () => {
    const ok = await fetch(`${gw.url}${CHAT}`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
      body: chatBody("mock-gpt"),
    });
    expect(ok.status).toBe(200);
    await ok.text();
    const refused = await fetch(`${gw.url}${CHAT}`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
      body: chatBody("mock-down"),
    });
    expect(refused.status).toBe(503);
    await refused.text();
    const cut = await fetch(`${gw.url}${MESSAGES}`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
      body: json({
        model: "mock-gpt",
        max_tokens: 200,
        stream: true,
        messages: [{ role: "user", content: "hello [[mock:words=40]] [[mock:break=3]]" }],
      }),
    });
    expect(await cut.text()).toContain("event: error");
    expect(cut.headers.get("request-id")).toBe(cut.headers.get("x-request-id"));
    for (const [res, path] of [
      [ok, CHAT],
      [refused, CHAT],
      [cut, MESSAGES],
    ] as const)
      await expectFound(res.headers.get("x-request-id")!, path);
  });

  it("an MCP tool call's result names the /v1 request it was served as; a refusal says it in its text too", async () => {
    const { client } = await mcpClient(gw.url, KEY, "day-without-a-snag");
    try {
      const answered = await client.callTool({
        name: "chat",
        arguments: { model: "mock-gpt", prompt: "hello" },
      });
      const refused = await client.callTool({
        name: "chat",
        arguments: { model: "mock-down", prompt: "hello" },
      });
      expect(refused.isError).toBe(true);
      const answeredId = answered._meta?.[requestIdMeta] as string;
      const refusedId = refused._meta?.[requestIdMeta] as string;
      expect([answeredId, refusedId]).toEqual([
        expect.stringMatching(/^req_[\w-]+$/),
        expect.stringMatching(/^req_[\w-]+$/),
      ]);
      const [text] = refused.content as { text: string }[];
      expect(text!.text).toContain(refusedId);
      expect(refused.structuredContent).toMatchObject({ error: { request_id: refusedId } });
      await expectFound(answeredId, CHAT, "mcp");
      await expectFound(refusedId, CHAT, "mcp");
    } finally {
      await client.close();
    }
  });
});
