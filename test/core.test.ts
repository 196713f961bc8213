import { subscribe, unsubscribe } from "node:diagnostics_channel";
import { connect } from "node:net";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { type StageMessage, stageChannelName } from "../src/index.js";
import { errorOf } from "./support/api.js";
import { apiKeysOnDisk } from "./support/database-file.js";
import {
  ADMIN_KEY,
  chat,
  KEY,
  KEY2,
  POOR_KEY,
  post,
  SHARED_KEY,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";
import { streamDataInText } from "./support/sse.js";

let gw: TestGateway;
let openai: OpenAI;
let anthropic: Anthropic;

beforeAll(async () => {
  gw = await testGateway({
    extraRoutes: [
      {
        method: "GET",
        path: "/v1/test-crash",
        access: "key",
        errors: "chat",
        handler: () => {
          throw new Error("boom at /secret/path");
        },
      },
    ],
  });
  openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 10_000 });
  anthropic = new Anthropic({ apiKey: KEY, baseURL: gw.url, maxRetries: 0, timeout: 10_000 });
});
afterAll(() => gw.close());

/** A chat completion whose body is sent as a stream (chunked, no Content-Length). */
function postBodyStream(body: ReadableStream<Uint8Array>): Promise<Response> {
  return fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
    body,
    duplex: "half",
  } as RequestInit);
}
describe("authentication", () => {
  it("answers 401 in plain text when the key is missing", async () => {
    const res = await post(gw, "/v1/chat/completions", chat(), {});
    expect(res.status).toBe(401);
    expect(res.headers.get("content-type")).toMatch(/^text\/plain/);
    expect(await res.text()).toMatch(/missing API key/);
  });

  it("answers 401 in plain text for a wrong key, in both styles", async () => {
    for (const path of ["/v1/chat/completions", "/v1/messages"]) {
      const res = await post(gw, path, chat(), {
        authorization: "Bearer kn-not-a-real-key-at-all-000000",
      });
      expect(res.status).toBe(401);
      expect(res.headers.get("content-type")).toMatch(/^text\/plain/);
      expect(await res.text()).toBe(
        "invalid API key: no gateway key has this value; check the kn-... key you sent (each key is shown once, when it is made)",
      );
    }
  });

  it("accepts the key in x-api-key as well as Bearer", async () => {
    const res = await post(gw, "/v1/chat/completions", chat(), { "x-api-key": KEY });
    expect(res.status).toBe(200);
  });

  it("refuses a revoked key from the very next request, leaving other keys working", async () => {
    const { store } = gw.services;
    const { value, key } = store.createKey({ accountId: "acct", label: "tmp", kind: "standard" });
    expect(
      (await post(gw, "/v1/chat/completions", chat(), { authorization: `Bearer ${value}` })).status,
    ).toBe(200);
    await store.revokeKey(key.id);
    const res = await post(gw, "/v1/chat/completions", chat(), {
      authorization: `Bearer ${value}`,
    });
    expect(res.status).toBe(401);
    expect(await res.text()).toBe(
      "API key revoked: make a new key on the dashboard's Keys page or with `gateway keys create`, and send that one",
    );
    expect((await post(gw, "/v1/chat/completions", chat())).status).toBe(200);
  });

  it("stops every key of a suspended account at once and restores them on reinstatement", async () => {
    const { store } = gw.services;
    await store.setAccountStatus("acct", "suspended");
    try {
      for (const key of [KEY, KEY2, SHARED_KEY]) {
        const res = await post(gw, "/v1/chat/completions", chat(), {
          authorization: `Bearer ${key}`,
        });
        expect(res.status).toBe(401);
        expect(await res.text()).toBe(
          "account suspended: ask the account's owner (or the gateway's admin) to reinstate it; its keys work again then",
        );
      }
      expect(
        (await post(gw, "/v1/chat/completions", chat(), { authorization: `Bearer ${POOR_KEY}` }))
          .status,
      ).not.toBe(401);
    } finally {
      await store.setAccountStatus("acct", "active");
    }
    expect((await post(gw, "/v1/chat/completions", chat())).status).toBe(200);
  });

  it("stores keys only as SHA-256 hashes", () => {
    const rows = apiKeysOnDisk(gw.dbPath);
    const dump = JSON.stringify(rows);
    expect(dump).not.toContain(KEY);
    expect(rows.every((r) => /^[0-9a-f]{64}$/.test(String(r.hash)))).toBe(true);
  });
});

describe("GET /v1/models", () => {
  it("is public and lists models with pricing", async () => {
    const res = await fetch(`${gw.url}/v1/models`);
    expect(res.status).toBe(200);
    const body = (await res.json()) as { object: string; data: Record<string, unknown>[] };
    expect(body.object).toBe("list");
    const gpt = body.data.find((m) => m.id === "mock-gpt")!;
    expect(gpt).toMatchObject({
      object: "model",
      owned_by: "gateway",
      modality: "chat",
      free: false,
    });
    expect(gpt.internal).toBeUndefined();
    expect(body.data.find((m) => m.id === "mock-gpt:free")?.free).toBe(true);
  });

  it("adds internal fields for an admin key, and works with the SDK", async () => {
    const res = await fetch(`${gw.url}/v1/models`, {
      headers: { authorization: `Bearer ${ADMIN_KEY}` },
    });
    const body = (await res.json()) as {
      data: { id: string; internal?: Record<string, unknown> }[];
    };
    expect(body.data.find((m) => m.id === "mock-gpt")?.internal).toMatchObject({
      provider: "mock",
      wire: "mock",
      upstream_model: "mock-gpt",
    });
    expect(body.data.find((m) => m.id === "auto")?.internal).toEqual({
      steps: ["mock-down", "mock-gpt"],
    });
    const ids: string[] = [];
    for await (const m of openai.models.list()) ids.push(m.id);
    expect(ids).toContain("mock-gpt");
  });
});

describe("bad input", () => {
  it("rejects a body that is not JSON with 400 bad_request in the chat style", async () => {
    const res = await post(gw, "/v1/chat/completions", "{not json");
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({
      error: {
        message: "Request body is not valid JSON.",
        type: "bad_request",
        param: null,
        code: "bad_request",
      },
    });
  });

  it("rejects a body that is not JSON with 400 invalid_request_error in the messages style, without code", async () => {
    const res = await post(gw, "/v1/messages", "[1,2");
    expect(res.status).toBe(400);
    const body = (await res.json()) as { type: string; error: Record<string, unknown> };
    expect(body.type).toBe("error");
    expect(body.error.type).toBe("invalid_request_error");
    expect(body.error).not.toHaveProperty("code");
  });

  it.each([
    ["missing messages", { model: "mock-gpt" }, /messages/],
    ["empty messages", { model: "mock-gpt", messages: [] }, /messages/],
    ["model of the wrong type", { model: 5, messages: [{ role: "user", content: "x" }] }, /model/],
    ["stream of the wrong type", { ...chat(), stream: "yes" }, /stream/],
    ["unknown role", { model: "mock-gpt", messages: [{ role: "wizard", content: "x" }] }, /role/],
    ["a JSON array", [], /JSON object/],
    ["an empty body", "", /empty/],
  ])("names the problem for %s", async (_, body, pattern) => {
    const res = await post(gw, "/v1/chat/completions", body);
    expect(res.status).toBe(400);
    const json = (await res.json()) as { error: { code: string; message: string } };
    expect(json.error.code).toBe("bad_request");
    expect(json.error.message).toMatch(pattern);
  });

  it("requires max_tokens on /v1/messages", async () => {
    const res = await post(gw, "/v1/messages", chat());
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(
      /max_tokens/,
    );
  });

  it("answers an unknown model with 400 model_not_found in both styles", async () => {
    const a = await post(gw, "/v1/chat/completions", chat("hi", "no-such-model"));
    expect(a.status).toBe(400);
    expect(((await a.json()) as { error: { code: string; type: string } }).error).toMatchObject({
      code: "model_not_found",
      type: "model_not_found",
    });
    const b = await post(gw, "/v1/messages", { ...chat("hi", "no-such-model"), max_tokens: 10 });
    expect(b.status).toBe(400);
    expect(((await b.json()) as { error: { type: string } }).error.type).toBe("not_found_error");
  });

  it("answers a huge body with 413, not a crash", async () => {
    const huge = JSON.stringify(chat("x".repeat(33 * 1024 * 1024)));
    const res = await post(gw, "/v1/chat/completions", huge);
    expect(res.status).toBe(413);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("bad_request");
    expect((await post(gw, "/v1/chat/completions", chat())).status).toBe(200);
  });

  it("answers a huge chunked body (no Content-Length) with 413 too", async () => {
    const chunk = new TextEncoder().encode("x".repeat(1024 * 1024));
    let sent = 0;
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (sent++ < 40) controller.enqueue(chunk);
        else controller.close();
      },
    });
    const res = await postBodyStream(body);
    expect(res.status).toBe(413);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("bad_request");
  });

  it("turns an unexpected exception into 500 internal_error without a stack trace", async () => {
    const res = await fetch(`${gw.url}/v1/test-crash`, {
      headers: { authorization: `Bearer ${KEY}` },
    });
    expect(res.status).toBe(500);
    const text = await res.text();
    expect(JSON.parse(text)).toEqual({
      error: {
        message:
          "The gateway hit an unexpected error: send the request again, and if it recurs, report it with this answer's x-request-id.",
        type: "internal_error",
        param: null,
        code: "internal_error",
      },
    });
    expect(text).not.toMatch(/boom|secret|at \//);
  });

  it("answers an unknown /v1 route with a JSON 404", async () => {
    const res = await fetch(`${gw.url}/v1/nope`, { headers: { authorization: `Bearer ${KEY}` } });
    expect(res.status).toBe(404);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("not_found");
  });
});

describe("chat completions with the openai SDK", () => {
  it("answers non-stream with content and usage", async () => {
    const res = await openai.chat.completions.create({
      model: "mock-gpt",
      messages: [{ role: "user", content: "Say hi" }],
    });
    expect(res.object).toBe("chat.completion");
    expect(res.model).toBe("mock-gpt");
    expect(res.choices[0].message.content).toContain("Mock reply to: Say hi");
    expect(res.choices[0].finish_reason).toBe("stop");
    expect(res.usage!.prompt_tokens).toBeGreaterThan(0);
    expect(res.usage!.total_tokens).toBe(res.usage!.prompt_tokens + res.usage!.completion_tokens);
  });

  it("is deterministic", async () => {
    const a = await openai.chat.completions.create({
      model: "mock-gpt",
      messages: [{ role: "user", content: "same" }],
    });
    const b = await openai.chat.completions.create({
      model: "mock-gpt",
      messages: [{ role: "user", content: "same" }],
    });
    expect(a.choices[0].message.content).toBe(b.choices[0].message.content);
  });

  it("streams chunks that the SDK assembles, with usage when asked", async () => {
    const stream = await openai.chat.completions.create({
      model: "mock-gpt",
      messages: [{ role: "user", content: "Stream please" }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = "";
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? "";
      if (chunk.usage) usage = chunk.usage;
    }
    const plain = await openai.chat.completions.create({
      model: "mock-gpt",
      messages: [{ role: "user", content: "Stream please" }],
    });
    expect(text).toBe(plain.choices[0].message.content);
    expect(usage?.completion_tokens).toBe(plain.usage?.completion_tokens);
  });

  it("omits the usage chunk when the client did not ask for it", async () => {
    const res = await post(
      gw,
      "/v1/chat/completions",
      chat("no usage", "mock-gpt", { stream: true }),
    );
    const text = await res.text();
    expect(text).not.toContain('"usage"');
    expect(text.trim().endsWith("data: [DONE]")).toBe(true);
  });

  it("sends keepalive comments while waiting for the first token", async () => {
    const res = await post(
      gw,
      "/v1/chat/completions",
      chat("slow [[mock:delay=2500]]", "mock-gpt", { stream: true }),
    );
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const text = await res.text();
    const firstData = text.indexOf("data:");
    const keepalives = text.slice(0, firstData).match(/^: keepalive$/gm) ?? [];
    expect(keepalives.length).toBeGreaterThanOrEqual(2);
  });

  it("still parses with the SDK when keepalives precede the answer", async () => {
    const stream = await openai.chat.completions.create({
      model: "mock-gpt",
      messages: [{ role: "user", content: "slow [[mock:delay=1300]]" }],
      stream: true,
    });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? "";
    expect(text).toContain("Mock reply to: slow");
  });

  it("ends a broken stream with an error chunk, not a clean [DONE]", async () => {
    const res = await post(
      gw,
      "/v1/chat/completions",
      chat("break [[mock:break=2]]", "mock-gpt", { stream: true }),
    );
    const text = await res.text();
    expect(text).not.toContain("[DONE]");
    expect((await streamDataInText(text)).at(-1)).toMatchObject({
      error: { code: "upstream_error" },
    });
    await expect(async () => {
      const s = await openai.chat.completions.create({
        ...chat("break [[mock:break=2]]"),
        stream: true,
      } as OpenAI.ChatCompletionCreateParamsStreaming);
      for await (const _ of s) void _;
    }).rejects.toThrow();
  });

  it("settles a stream the client abandons midway and keeps serving", async () => {
    const log = () => gw.services.store.requestLog("acct", 10_000);
    // The row is written when the request settles; earlier tests' streams have rows of their own.
    const before = new Set(log().map((r) => r.id));
    const abort = new AbortController();
    const res = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
      body: JSON.stringify(
        chat("walk away [[mock:words=400]] [[mock:delay=100]]", "mock-gpt", { stream: true }),
      ),
      signal: abort.signal,
    });
    const reader = res.body!.getReader();
    await reader.read();
    abort.abort();
    const row = () => log().find((r) => r.stream === 1 && !before.has(r.id));
    for (let i = 0; i < 100 && row() === undefined; i++)
      await new Promise((r) => setTimeout(r, 20));
    expect(row()?.state).toBe("settled");
    expect((await post(gw, "/v1/chat/completions", chat())).status).toBe(200);
  });

  it("logs a request whose client left before the answer as client_closed, and charges nothing", async () => {
    const log = () => gw.services.store.requestLog("acct", 10_000);
    // An earlier test's client may also have left: only this request's row counts.
    const before = new Set(log().map((r) => r.id));
    const abort = new AbortController();
    const pending = fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
      body: JSON.stringify(chat("leaving early [[mock:delay=5000]]")),
      signal: abort.signal,
    }).catch(() => "aborted");
    // Left once the request holds its money, not after a fixed wait: on a busy machine that wait
    // could end before the request was admitted (no row at all) or after it was answered.
    for (let i = 0; i < 250 && gw.services.ledger.holdsInFlight().count === 0; i++)
      await new Promise((r) => setTimeout(r, 20));
    abort.abort();
    expect(await pending).toBe("aborted");
    const row = () =>
      log()
        .filter((r) => r.error_code === "client_closed" && !before.has(r.id))
        .map(({ state, error_code, cost_micro }) => ({ state, error_code, cost_micro }))[0];
    for (let i = 0; i < 50 && !row(); i++) await new Promise((r) => setTimeout(r, 20));
    expect(row()).toEqual({ state: "failed", error_code: "client_closed", cost_micro: 0 });
  });

  it("reports a mock upstream failure as 503 upstream_error and a rejection with its reason", async () => {
    const a = await post(gw, "/v1/chat/completions", chat("[[mock:fail=503]]"));
    expect(a.status).toBe(503);
    expect(((await a.json()) as { error: object }).error).toEqual({
      message: "The provider failed or timed out: send the request again in a few seconds.",
      type: "upstream_error",
      param: null,
      code: "upstream_error",
    });
    const b = await post(
      gw,
      "/v1/chat/completions",
      chat("[[mock:reject=context_length_exceeded]]"),
    );
    expect(b.status).toBe(400);
    expect(((await b.json()) as { error: object }).error).toMatchObject({
      type: "invalid_request_error",
      code: "context_length_exceeded",
    });
  });
});

describe("messages with the Anthropic SDK", () => {
  it("answers non-stream with content blocks and usage", async () => {
    const msg = await anthropic.messages.create({
      model: "mock-gpt",
      max_tokens: 200,
      messages: [{ role: "user", content: "Say hi" }],
    });
    expect(msg.type).toBe("message");
    expect(msg.role).toBe("assistant");
    expect(msg.model).toBe("mock-gpt");
    expect(msg.content[0].type).toBe("text");
    expect((msg.content[0] as Anthropic.TextBlock).text).toContain("Mock reply to: Say hi");
    expect(msg.stop_reason).toBe("end_turn");
    expect(msg.usage.input_tokens).toBeGreaterThan(0);
    expect(msg.usage.output_tokens).toBeGreaterThan(0);
  });

  it("streams events that the SDK assembles into the same message", async () => {
    const stream = anthropic.messages.stream({
      model: "mock-gpt",
      max_tokens: 200,
      messages: [{ role: "user", content: "Say hi" }],
    });
    const final = await stream.finalMessage();
    const plain = await anthropic.messages.create({
      model: "mock-gpt",
      max_tokens: 200,
      messages: [{ role: "user", content: "Say hi" }],
    });
    expect(final.content).toEqual(plain.content);
    expect(final.usage.output_tokens).toBe(plain.usage.output_tokens);
  });

  it("surfaces errors in the messages style through the SDK", async () => {
    const err = await anthropic.messages
      .create({
        model: "no-such-model",
        max_tokens: 10,
        messages: [{ role: "user", content: "x" }],
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.BadRequestError);
    expect((err as InstanceType<typeof Anthropic.BadRequestError>).error).toMatchObject({
      type: "error",
      error: { type: "not_found_error" },
    });
  });

  it("answers a resource the gateway does not serve in the style of the SDK that asked", async () => {
    // The Anthropic SDK sends anthropic-version on every call, its beta resources included.
    const err = await anthropic.beta.skills
      .list()
      .then(() => undefined)
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.BadRequestError);
    expect((err as InstanceType<typeof Anthropic.BadRequestError>).error).toMatchObject({
      type: "error",
      error: { type: "invalid_request_error", message: expect.stringContaining("/v1/skills") },
    });
    const openaiStyle = await fetch(`${gw.url}/v1/skills`, {
      headers: { authorization: `Bearer ${KEY}` },
    });
    expect(openaiStyle.status).toBe(400);
    expect(await errorOf(openaiStyle)).toMatchObject({ code: "bad_request" });
  });

  it("ends a broken stream with an error event", async () => {
    const res = await post(gw, "/v1/messages", {
      ...chat("break [[mock:break=2]]"),
      max_tokens: 100,
      stream: true,
    });
    const text = await res.text();
    expect(text).toContain("event: error");
    expect(text).not.toContain("event: message_stop");
  });
});

describe("the completion routes, served outside the router", () => {
  it("answers 401 in plain text with the CORS headers", async () => {
    const res = await post(gw, "/v1/messages", chat(), { origin: "https://app.example" });
    expect(res.status).toBe(401);
    expect(res.headers.get("content-type")).toBe("text/plain; charset=UTF-8");
    expect(res.headers.get("access-control-allow-origin")).toBe("*");
    expect(await res.text()).toMatch(/^missing API key/);
  });

  it("refuses an oversized declared body with 413 before looking at the key, in the route's style", async () => {
    const res = await fetch(`${gw.url}/v1/messages`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "x".repeat(33 * 1024 * 1024),
    });
    expect(res.status).toBe(413);
    expect(await res.json()).toEqual({
      type: "error",
      error: { type: "invalid_request_error", message: expect.stringMatching(/larger than/) },
    });
  });

  it("serves the path with a query string, and answers other methods with 404", async () => {
    const res = await post(gw, "/v1/chat/completions?api-version=2024-10-21", chat());
    expect(res.status).toBe(200);
    expect(((await res.json()) as { object: string }).object).toBe("chat.completion");
    // (GET is the stored completions list, refused on its own: see below.)
    const put = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "PUT",
      headers: { authorization: `Bearer ${KEY}` },
    });
    expect(put.status).toBe(404);
    expect(((await put.json()) as { error: { code: string } }).error.code).toBe("not_found");
  });

  it("reads bodies sent in the same packet as their headers, request after request on one connection", async () => {
    const port = Number(new URL(gw.url).port);
    const socket = connect(port, "127.0.0.1");
    let received = "";
    socket.setEncoding("utf8");
    socket.on("data", (d: string) => {
      received += d;
    });
    const answers = () => received.split("HTTP/1.1 ").slice(1);
    try {
      for (const [i, content] of ["first", "second", "third"].entries()) {
        const body = JSON.stringify(chat(content));
        // One write: headers and body leave together, as pooled HTTP clients send them.
        socket.write(
          `POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${KEY}\r\n` +
            `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
        );
        for (let t = 0; t < 200 && !/"usage"/.test(answers()[i] ?? ""); t++)
          await new Promise((r) => setTimeout(r, 10));
      }
      const all = answers();
      expect(all).toHaveLength(3);
      for (const answer of all) {
        expect(answer.startsWith("200 OK")).toBe(true);
        expect(answer).toContain('"object":"chat.completion"');
      }
    } finally {
      socket.destroy();
    }
  });

  it("reads a body that arrives in pieces after the headers", async () => {
    const text = JSON.stringify(chat("sent slowly"));
    const pieces = [text.slice(0, 10), text.slice(10, 30), text.slice(30)];
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        const piece = pieces.shift();
        if (piece === undefined) return controller.close();
        await new Promise((r) => setTimeout(r, 20));
        controller.enqueue(new TextEncoder().encode(piece));
      },
    });
    const res = await postBodyStream(body);
    expect(res.status).toBe(200);
    expect(((await res.json()) as { object: string }).object).toBe("chat.completion");
  });

  it("answers an empty body with 400", async () => {
    const res = await post(gw, "/v1/chat/completions", "");
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { message: string } }).error.message).toBe(
      "Request body is empty; send a JSON object.",
    );
  });

  it("answers a body that is not JSON with 400 in the messages style", async () => {
    const res = await post(gw, "/v1/messages", "{not json");
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({
      type: "error",
      error: { type: "invalid_request_error", message: "Request body is not valid JSON." },
    });
  });
});

describe("CORS", () => {
  it("accepts a preflight on /v1 with any request headers and no credentials", async () => {
    const res = await fetch(`${gw.url}/v1/messages`, {
      method: "OPTIONS",
      headers: {
        origin: "https://app.example",
        "access-control-request-method": "POST",
        "access-control-request-headers":
          "authorization,content-type,x-api-key,anthropic-version,anthropic-beta",
      },
    });
    expect(res.status).toBe(204);
    expect(res.headers.get("access-control-allow-origin")).toBe("*");
    expect(res.headers.get("access-control-allow-headers")).toMatch(/anthropic-version/);
    expect(res.headers.get("access-control-allow-headers")).toMatch(/x-api-key/);
    expect(res.headers.get("access-control-allow-credentials")).toBeNull();
  });

  it("sends CORS headers on /v1 responses, errors included", async () => {
    const res = await post(gw, "/v1/chat/completions", chat("hi", "nope"), {
      authorization: `Bearer ${KEY}`,
      origin: "https://app.example",
    });
    expect(res.headers.get("access-control-allow-origin")).toBe("*");
  });

  it("sends CORS headers on streamed answers too", async () => {
    const res = await post(gw, "/v1/chat/completions", chat("hi", "mock-gpt", { stream: true }), {
      authorization: `Bearer ${KEY}`,
      origin: "https://app.example",
    });
    expect(res.headers.get("access-control-allow-origin")).toBe("*");
    expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
    expect(await res.text()).toContain("data: [DONE]");
    const again = await post(gw, "/v1/chat/completions", chat(), {
      authorization: `Bearer ${KEY}`,
    });
    expect(again.headers.get("access-control-allow-origin")).toBe("*");
    expect(again.headers.get("x-hono-already-sent")).toBeNull();
  });

  it("sends a JSON answer with its CORS headers and a JSON content type", async () => {
    const res = await post(gw, "/v1/chat/completions", chat(), {
      authorization: `Bearer ${KEY}`,
      origin: "https://app.example",
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("application/json");
    expect(res.headers.get("access-control-allow-origin")).toBe("*");
    expect(res.headers.get("access-control-expose-headers")).toMatch(/Retry-After/);
    expect(Number(res.headers.get("content-length"))).toBe((await res.text()).length);
  });

  it("refuses cross-origin requests on /api", async () => {
    const res = await fetch(`${gw.url}/api/public/pricing`, {
      headers: { origin: "https://evil.example" },
    });
    expect(res.status).toBe(403);
    expect(res.headers.get("access-control-allow-origin")).toBeNull();
    const pre = await fetch(`${gw.url}/api/public/pricing`, {
      method: "OPTIONS",
      headers: { origin: "https://evil.example", "access-control-request-method": "GET" },
    });
    expect(pre.headers.get("access-control-allow-origin")).toBeNull();
  });
});

describe("stage diagnostics", () => {
  it("publishes each stage of a completion, in order, on the model-gateway diagnostics channel", async () => {
    const seen: { stage: string; path: string | undefined }[] = [];
    const listener = (message: unknown) => {
      const { stage, request } = message as StageMessage;
      seen.push({ stage, path: request?.url });
    };
    subscribe(stageChannelName, listener);
    try {
      await openai.chat.completions.create({
        model: "mock-gpt",
        messages: [{ role: "user", content: "hi" }],
      });
    } finally {
      unsubscribe(stageChannelName, listener);
    }
    expect(seen.map((s) => s.stage)).toEqual([
      "authenticated",
      "parsed",
      "admitted",
      "dispatched",
      "settled",
      "sent",
    ]);
    expect(new Set(seen.map((s) => s.path))).toEqual(new Set(["/v1/chat/completions"]));
  });
});

describe("model_not_found", () => {
  let own: TestGateway | undefined;
  afterEach(async () => {
    await own?.close();
    own = undefined;
  });

  it("names the closest model and points to /v1/models, in both styles", async () => {
    own = await testGateway();
    const chatStyle = await errorOf(
      await post(own, "/v1/chat/completions", chat("hi", "mock-gtp")),
    );
    expect(chatStyle).toMatchObject({ status: 400, code: "model_not_found" });
    expect(chatStyle.message).toBe(
      'The model or route "mock-gtp" does not exist or is not available. Did you mean "mock-gpt"? GET /v1/models lists the models and routes.',
    );
    const messages = await post(own, "/v1/messages", {
      model: "mock-gpt:fre",
      max_tokens: 5,
      messages: [{ role: "user", content: "hi" }],
    });
    expect(messages.status).toBe(400);
    expect(((await messages.json()) as { error: { message: string } }).error.message).toContain(
      'Did you mean "mock-gpt:free"?',
    );
    const far = await errorOf(await post(own, "/v1/chat/completions", chat("hi", "llama-3-70b")));
    expect(far.message).not.toContain("Did you mean");
    expect(far.message).toContain("GET /v1/models");
  });
});

describe("GET /openapi.json", () => {
  let own: TestGateway | undefined;
  afterEach(async () => {
    await own?.close();
    own = undefined;
  });

  it("is public and describes the route table, with the zod schemas as request bodies", async () => {
    own = await testGateway();
    const res = await fetch(`${own.url}/openapi.json`);
    expect(res.status).toBe(200);
    const doc = (await res.json()) as {
      openapi: string;
      paths: Record<string, Record<string, Record<string, unknown>>>;
    };
    expect(doc.openapi).toBe("3.1.0");
    const chatOp = doc.paths["/v1/chat/completions"].post as {
      security: object[];
      requestBody: { content: { "application/json": { schema: { required: string[] } } } };
    };
    expect(chatOp.requestBody.content["application/json"].schema.required).toEqual(
      expect.arrayContaining(["model", "messages"]),
    );
    expect(chatOp.security).toEqual([{ bearer: [] }, { apiKey: [] }]);
    const messagesSchema = (
      doc.paths["/v1/messages"].post as {
        requestBody: { content: { "application/json": { schema: { required: string[] } } } };
      }
    ).requestBody.content["application/json"].schema;
    expect(messagesSchema.required).toEqual(expect.arrayContaining(["max_tokens"]));
    expect(doc.paths["/v1/models"].get.security).toEqual([]);
    expect(doc.paths["/v1/models/{id}"].get.parameters).toEqual([
      { name: "id", in: "path", required: true, schema: { type: "string" } },
    ]);
    expect(Object.keys(doc.paths).some((p) => p.startsWith("/dashboard"))).toBe(false);
  });
});

describe("the stored chat completions API", () => {
  it("says chat completions are not kept and names /v1/responses, for each of its calls", async () => {
    await openai.chat.completions.create({
      model: "mock-gpt",
      store: true,
      messages: [{ role: "user", content: "keep this" }],
    });
    const calls: [string, () => Promise<unknown>][] = [
      ["list", () => openai.chat.completions.list()],
      ["retrieve", () => openai.chat.completions.retrieve("chatcmpl-abc")],
      ["update", () => openai.chat.completions.update("chatcmpl-abc", { metadata: { a: "b" } })],
      ["delete", () => openai.chat.completions.delete("chatcmpl-abc")],
      ["messages", () => openai.chat.completions.messages.list("chatcmpl-abc")],
    ];
    for (const [name, call] of calls) {
      const err = await call().catch((e: unknown) => e);
      expect(err, name).toBeInstanceOf(OpenAI.BadRequestError);
      expect((err as InstanceType<typeof OpenAI.BadRequestError>).code, name).toBe("bad_request");
      expect((err as Error).message, name).toContain("/v1/responses");
    }
  });
});
