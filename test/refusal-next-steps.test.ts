import { connect } from "node:net";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FinishedRequest } from "../src/server/http/request-trace.js";
import { chat, KEY, POOR_KEY, post, type TestGateway, testGateway } from "./support/gateway.js";

/**
 * A refusal says what happened and what the caller can do next; a request the server could not
 * take still has a line in serve's log saying what of it could be read, and why it was refused.
 */

let gw: TestGateway;
const lines: FinishedRequest[] = [];
beforeAll(async () => {
  gw = await testGateway({ onRequest: (line) => lines.push(line) });
});
afterAll(() => gw?.close());

const openai = (key = KEY) =>
  new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 10_000 });
const anthropic = () =>
  new Anthropic({ apiKey: KEY, baseURL: gw.url, maxRetries: 0, timeout: 10_000 });

const ask = (model = "mock-gpt") => ({
  model,
  messages: [{ role: "user" as const, content: "hi" }],
});

/** What the SDK call threw (an APIError), or a failure of the test if it succeeded. */
async function refusal<T>(call: Promise<T>): Promise<{ status?: number; message: string }> {
  try {
    await call;
  } catch (err) {
    return err as { status?: number; message: string };
  }
  throw new Error("the request was not refused");
}

describe("a refusal says what to do", () => {
  it.each([
    [
      "context_length_exceeded",
      /choose a model with a larger context window from GET \/v1\/models/i,
    ],
    ["invalid_request_error", /check its fields and values against this route's API/i],
    ["content_policy_violation", /change the flagged content/i],
    ["model_not_found", /choose another model from GET \/v1\/models/i],
    ["upstream_rejected", /choose another model from GET \/v1\/models/i],
  ])(
    "a provider's rejection %s names what the caller can do (both styles)",
    async (reason, next) => {
      const content = `[[mock:reject=${reason}]] hi`;
      const chatStyle = await refusal(
        openai().chat.completions.create({
          model: "mock-gpt",
          messages: [{ role: "user", content }],
        }),
      );
      const messagesStyle = await refusal(
        anthropic().messages.create({
          model: "mock-gpt",
          max_tokens: 16,
          messages: [{ role: "user", content }],
        }),
      );
      // The Anthropic SDK's message is the whole body; its error object has the text.
      const messagesText = (messagesStyle as unknown as { error: { error: { message: string } } })
        .error.error.message;
      expect(chatStyle.status).toBe(400);
      expect(messagesStyle.status).toBe(400);
      for (const text of [chatStyle.message.replace(/^400 /, ""), messagesText]) {
        expect(text).toMatch(/^The provider |^The request exceeds/);
        expect(text).toMatch(next);
      }
    },
  );

  it("401 for a revoked key: make a new key on the dashboard or with `gateway keys create`", async () => {
    const { value, key } = gw.services.store.createKey({
      accountId: "acct",
      label: "old",
      kind: "standard",
    });
    await gw.services.store.revokeKey(key.id);
    const res = await post(gw, "/v1/chat/completions", chat(), {
      authorization: `Bearer ${value}`,
    });
    expect(res.status).toBe(401);
    expect(res.headers.get("content-type")).toMatch(/^text\/plain/);
    const body = await res.text();
    expect(body).toMatch(/^API key revoked/);
    expect(body).toContain("dashboard");
    expect(body).toContain("`gateway keys create`");
    expect(body).not.toContain(value);
  });

  it("401 for a suspended account: every key of it is refused until it is reinstated; contact its owner", async () => {
    await gw.services.store.setAccountStatus("poor", "suspended");
    try {
      const err = await refusal(openai(POOR_KEY).chat.completions.create(ask()));
      expect(err.status).toBe(401);
      expect(err.message).toMatch(/account suspended/);
      expect(err.message).toMatch(/reinstate/);
      expect(err.message).toMatch(/account's owner/);
    } finally {
      await gw.services.store.setAccountStatus("poor", "active");
    }
  });

  it("403 subscribers_only: subscribe, or pick another model, which GET /v1/models lists (both styles)", async () => {
    const chatStyle = await refusal(openai().chat.completions.create(ask("mock-pro")));
    const messagesStyle = await refusal(
      anthropic().messages.create({
        model: "mock-pro",
        max_tokens: 16,
        messages: [{ role: "user", content: "hi" }],
      }),
    );
    for (const err of [chatStyle, messagesStyle]) {
      expect(err.status).toBe(403);
      expect(err.message).toContain("subscribers only");
      expect(err.message).toMatch(/subscribe/i);
      expect(err.message).toContain("GET /v1/models");
    }
    const res = await post(gw, "/v1/chat/completions", chat("hi", "mock-pro"));
    expect(((await res.json()) as { error: object }).error).toMatchObject({
      code: "subscribers_only",
    });
  });

  it("503 upstream_error: the provider failed or timed out, send the request again", async () => {
    const err = await refusal(openai().chat.completions.create(ask("mock-down")));
    expect(err.status).toBe(503);
    expect(err.message).toContain("The provider failed or timed out");
    expect(err.message).toMatch(/send the request again/i);
    const res = await post(gw, "/v1/chat/completions", chat("hi", "mock-down"));
    expect(((await res.json()) as { error: object }).error).toMatchObject({
      code: "upstream_error",
    });
  });
});

/** Sends `bytes` on a connection of its own; what came back by the time the server closed it (5 s). */
function exchange(bytes: Buffer | string): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect(Number(new URL(gw.url).port), "127.0.0.1");
    let received = "";
    const timer = setTimeout(() => socket.destroy(), 5_000);
    socket.on("data", (d: Buffer) => {
      received += d.toString("latin1");
    });
    socket.on("error", () => {});
    socket.on("close", () => {
      clearTimeout(timer);
      resolve(received);
    });
    socket.write(bytes);
  });
}

/** The serve line of the answer `raw` (its x-request-id), once published (5 s). */
async function lineOfAnswer(raw: string): Promise<FinishedRequest | undefined> {
  const id = /\r\nx-request-id: (req_[\w-]+)\r\n/i.exec(raw)?.[1];
  expect(id, raw).toBeDefined();
  for (let waited = 0; waited < 5_000; waited += 20) {
    const line = lines.find((l) => l.requestId === id);
    if (line) return line;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return undefined;
}

describe("serve's line for a request the server could not take", () => {
  it("a request line with a protocol Node does not know shows its method and path", async () => {
    const raw = await exchange("GET /v1/models HTTX/1.1\r\nHost: x\r\n\r\n");
    expect(raw).toMatch(/^HTTP\/1\.1 400 /);
    const line = await lineOfAnswer(raw);
    expect(line).toMatchObject({
      method: "GET",
      path: "/v1/models",
      status: 400,
      errorCode: "malformed_request",
    });
  });

  it("bytes that are no request line (TLS sent to the plain-HTTP port) are shown escaped and bounded", async () => {
    const hello = Buffer.concat([
      Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03]),
      Buffer.alloc(4_000, 0x1b),
      Buffer.from("\r\n\r\n"),
    ]);
    const raw = await exchange(hello);
    expect(raw).toMatch(/^HTTP\/1\.1 400 /);
    const line = await lineOfAnswer(raw);
    expect(line?.status).toBe(400);
    expect(line?.errorCode).toBe("malformed_request");
    const shown = `${line?.method} ${line?.path}`;
    expect(shown.startsWith("\\x16\\x03\\x01\\x02\\x00")).toBe(true);
    // Printable ASCII only: nothing in it can drive a terminal or forge a line.
    expect(shown).toMatch(/^[\x20-\x7e]+$/);
    expect(shown.length).toBeLessThan(400);
  });

  it("a Host header the adapter cannot read is a 400 whose line names malformed_host, with its method and path", async () => {
    const raw = await exchange(
      "GET /api/public/pricing HTTP/1.1\r\nHost: bad host\r\nConnection: close\r\n\r\n",
    );
    expect(raw).toMatch(/^HTTP\/1\.1 400 /);
    expect(raw).toMatch(/Host/);
    const line = await lineOfAnswer(raw);
    expect(line).toMatchObject({
      method: "GET",
      path: "/api/public/pricing",
      status: 400,
      errorCode: "malformed_host",
    });
  });

  it.each([
    ["GET", "/v1/models", ""],
    ["POST", "/v1/chat/completions", JSON.stringify(chat())],
    ["POST", "/v1/messages", JSON.stringify({ ...chat(), max_tokens: 16 })],
  ])(
    "%s %s (the direct router's) with a Host it cannot read is the same 400 malformed_host",
    async (method, path, body) => {
      for (const host of ["bad host", "a:b:c", "x/y"]) {
        const raw = await exchange(
          `${method} ${path} HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer ${KEY}\r\n` +
            `anthropic-version: 2023-06-01\r\ncontent-type: application/json\r\n` +
            `content-length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
        );
        expect({ host, status: raw.slice(0, 12) }).toEqual({ host, status: "HTTP/1.1 400" });
        expect(raw).toContain("The Host header cannot be read");
        const line = await lineOfAnswer(raw);
        expect(line).toMatchObject({ method, path, status: 400, errorCode: "malformed_host" });
      }
    },
  );

  it("a Host the direct router does not take as it is, but Hono reads, is served as ever", async () => {
    for (const host of ["LOCALHOST:80", "127.0.0.1:80", "[::1]:8080"]) {
      const body = JSON.stringify(chat());
      const raw = await exchange(
        `POST /v1/chat/completions HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer ${KEY}\r\n` +
          `content-type: application/json\r\ncontent-length: ${body.length}\r\nConnection: close\r\n\r\n${body}`,
      );
      expect({ host, status: raw.slice(0, 12) }).toEqual({ host, status: "HTTP/1.1 200" });
    }
  });
});

/** One request on a connection of its own: its status, serve line and body. */
async function rawLine(
  method: string,
  target: string,
  headers: Record<string, string>,
  body = "",
): Promise<{ status: number; line: FinishedRequest | undefined; body: string }> {
  const fields = Object.entries({
    ...headers,
    "content-length": String(Buffer.byteLength(body)),
    connection: "close",
  }).map(([name, value]) => `${name}: ${value}\r\n`);
  const raw = await exchange(`${method} ${target} HTTP/1.1\r\n${fields.join("")}\r\n${body}`);
  return {
    status: Number(raw.slice(9, 12)),
    line: await lineOfAnswer(raw),
    body: raw.slice(raw.indexOf("\r\n\r\n") + 4),
  };
}

describe("every refusal's serve line names its code, never only its status", () => {
  const host = () => new URL(gw.url).host;
  const mcpHeaders = () => ({
    host: host(),
    authorization: `Bearer ${KEY}`,
    "content-type": "application/json",
    accept: "application/json, text/event-stream",
  });
  const ping = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping" });

  it.each([
    ["POST /mcp whose body is no JSON", "POST", "/mcp", {}, "{not json", 400, "bad_request"],
    [
      "POST /mcp whose body is no JSON-RPC message",
      "POST",
      "/mcp",
      {},
      '{"hello":"there"}',
      400,
      "bad_request",
    ],
    [
      "POST /mcp of a protocol version the transport does not speak",
      "POST",
      "/mcp",
      { "mcp-protocol-version": "1999-01-01" },
      ping,
      400,
      "bad_request",
    ],
    [
      "POST /mcp of a batch its version has none of",
      "POST",
      "/mcp",
      { "mcp-protocol-version": "2025-06-18" },
      `[${ping}]`,
      400,
      "bad_request",
    ],
    [
      "POST /mcp whose Accept lacks text/event-stream (the transport's 406)",
      "POST",
      "/mcp",
      { accept: "application/json" },
      ping,
      406,
      "not_acceptable",
    ],
    [
      "POST /mcp whose Content-Type is not JSON (the transport's 415)",
      "POST",
      "/mcp",
      { "content-type": "text/plain" },
      ping,
      415,
      "unsupported_media_type",
    ],
    [
      "two different keys (a Hono route)",
      "GET",
      "/v1/models/mock-gpt",
      { "x-api-key": "kn-another-key" },
      "",
      401,
      "key_conflicting",
    ],
    [
      "two different keys (a direct route)",
      "POST",
      "/v1/chat/completions",
      { "x-api-key": "kn-another-key" },
      JSON.stringify(chat()),
      401,
      "key_conflicting",
    ],
    [
      "the dashboard's JSON API without a session",
      "GET",
      "/api/dashboard/account",
      { authorization: "", accept: "application/json" },
      "",
      401,
      "session_required",
    ],
    [
      "a dashboard form over its limit",
      "POST",
      "/dashboard/keys",
      { authorization: "", "content-type": "application/x-www-form-urlencoded" },
      `label=${"x".repeat(20_000)}`,
      413,
      "bad_request",
    ],
  ])("%s: %s %s", async (_what, method, path, headers, body, status, code) => {
    const sent: Record<string, string> = { ...mcpHeaders(), ...headers };
    for (const [name, value] of Object.entries(sent)) if (value === "") delete sent[name];
    const answer = await rawLine(method, path, sent, body);
    expect(answer.status).toBe(status);
    expect(answer.line).toMatchObject({ method, path, status, errorCode: code });
  });

  it("a device code refused for too many from one address: slow_down, as its body says", async () => {
    let refused: Awaited<ReturnType<typeof rawLine>> | undefined;
    for (let sent = 0; sent < 12 && refused === undefined; sent++) {
      const answer = await rawLine(
        "POST",
        "/api/auth/device/code",
        { host: host(), "content-type": "application/json" },
        JSON.stringify({ client_name: "refusal lines" }),
      );
      if (answer.status !== 200) refused = answer;
    }
    expect(refused?.status).toBe(429);
    expect(JSON.parse(refused!.body)).toMatchObject({ error: "slow_down" });
    expect(refused?.line?.errorCode).toBe("slow_down");
  });

  it("an absolute-form target naming the gateway with its scheme in capitals is served on every route, as RFC 9112's scheme is case-insensitive", async () => {
    for (const path of ["/v1/models", "/v1/models/mock-gpt", "/api/public/pricing"]) {
      const answer = await rawLine("GET", `HTTP://${host()}${path}`, {
        host: host(),
        authorization: `Bearer ${KEY}`,
      });
      expect({ path, status: answer.status }).toEqual({ path, status: 200 });
      expect(answer.line).toMatchObject({ method: "GET", path, status: 200 });
    }
  });
});

describe("the Host header, on the direct router's routes and on Hono's alike", () => {
  /** One of each: the direct router's, Hono's plain route, and one that makes a URL of the request. */
  const paths: [string, string, () => Record<string, string>, string][] = [
    ["GET", "/v1/models", () => ({ authorization: `Bearer ${KEY}` }), ""],
    ["GET", "/v1/models/mock-gpt", () => ({ authorization: `Bearer ${KEY}` }), ""],
    [
      "POST",
      "/mcp",
      () => ({
        authorization: `Bearer ${KEY}`,
        "content-type": "application/json",
        accept: "application/json, text/event-stream",
      }),
      JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping" }),
    ],
  ];

  it.each([
    ["127.0.0.1:PORT", 200],
    ["localhost:PORT", 200],
    ["LOCALHOST:65000", 200],
    ["Gateway.Example.COM:65535", 200],
    ["gateway.example:1", 200],
    ["a_b.internal", 200],
    ["[::1]:8787", 200],
    ["[::1]", 200],
    ["xn--bcher-kva.example:9000", 200],
    ["bad host", 400],
    ["a@b", 400],
    ["ex%41mple:8080", 400],
    ["x:99999", 400],
    ["h:", 400],
    [":80", 400],
    ["a:b:c", 400],
    ["[zz]", 400],
    ["x/y", 400],
    // What @hono/node-server took as it came, and a route that made a URL of it failed on.
    ["xn--", 400],
    ["xn--:8080", 400],
    ["1.2.3.999:8080", 400],
    ["127.1:8080", 400],
    ["[0:0::1]:8787", 400],
  ])("Host %s: %i on every route", async (given, status) => {
    const hostHeader = given.replace("PORT", new URL(gw.url).port);
    for (const [method, path, headers, body] of paths) {
      const answer = await rawLine(method, path, { host: hostHeader, ...headers() }, body);
      const seen = { host: hostHeader, path, status: answer.status };
      expect(seen).toEqual({ ...seen, status });
      expect(answer.line?.errorCode).toBe(status === 400 ? "malformed_host" : undefined);
      if (status === 400) expect(answer.body).toContain("The Host header cannot be read");
    }
  });
});
