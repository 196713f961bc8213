import { request } from "node:http";
import OpenAI from "openai";
import { ResponsesWS } from "openai/resources/responses/ws";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KEY, type TestGateway, testGateway } from "./support/gateway.js";

/**
 * The openai SDK's WebSocket modes, which the gateway does not serve: the SDK's own clients get a
 * clear refusal at once (not a hang, not the 404 of an unknown path), and the body of that
 * refusal names what is not supported and what to send instead.
 */

let gw: TestGateway;
let client: OpenAI;
beforeAll(async () => {
  gw = await testGateway();
  client = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
});
afterAll(async () => {
  await gw?.close();
});

/** A WebSocket upgrade of `path` as `ws` sends it, answered without a switch of protocols. */
function upgrade(path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(`${gw.url}${path}`, {
      headers: {
        authorization: `Bearer ${KEY}`,
        connection: "Upgrade",
        upgrade: "websocket",
        "sec-websocket-version": "13",
        "sec-websocket-key": Buffer.from("0123456789abcdef").toString("base64"),
      },
    });
    req.on("upgrade", () => reject(new Error("the gateway switched protocols")));
    req.on("response", (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => {
        body += chunk;
      });
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on("error", reject);
    req.end();
  });
}

describe("WebSocket modes of the openai SDK", () => {
  it("ResponsesWS is refused with a 426 the SDK reports as an error event, and its queued event unsent", async () => {
    const ws = new ResponsesWS(client, { reconnect: null });
    const ended = new Promise<{ error: string; unsent: unknown[] }>((resolve) => {
      let error = "";
      ws.on("error", (err) => {
        error = err.message;
      });
      ws.on("close", (_code, _reason, unsent) => resolve({ error, unsent: unsent ?? [] }));
    });
    ws.send({ type: "response.create", model: "mock-gpt", input: "hi" } as never);
    const { error, unsent } = await ended;
    expect(error).toBe("Unexpected server response: 426");
    expect(unsent).toHaveLength(1);
  });

  // 426, not 400: Codex's built-in OpenAI provider pointed at the gateway opens this WebSocket
  // first, and falls back to POST /v1/responses on a 426 handshake only (any other status ends
  // its turn with the error).
  it("the refusal is a 426 naming the Responses WebSocket mode and POST /v1/responses, in the chat-completions style", async () => {
    const { status, body } = await upgrade("/v1/responses");
    expect(status).toBe(426);
    const { error } = JSON.parse(body) as { error: { code: string; message: string } };
    expect(error.code).toBe("bad_request");
    expect(error.message).toContain("Responses API over WebSocket is not supported");
    expect(error.message).toContain("POST /v1/responses");
  });

  // The SDK's Realtime client connects only over wss:, so a raw upgrade stands in for it (as
  // through a TLS-terminating proxy).
  it("an upgrade of /v1/realtime is refused the same way", async () => {
    const { status, body } = await upgrade("/v1/realtime?model=mock-gpt");
    expect(status).toBe(426);
    expect(JSON.parse(body).error.message).toContain(
      "Realtime API over WebSocket is not supported",
    );
  });

  it("a GET /v1/responses that is no upgrade is the 404 of a method the path does not take, naming POST", async () => {
    const res = await fetch(`${gw.url}/v1/responses`, {
      headers: { authorization: `Bearer ${KEY}` },
    });
    expect(res.status).toBe(404);
    const { error } = (await res.json()) as { error: { code: string; message: string } };
    expect(error).toMatchObject({
      code: "not_found",
      message: "No route GET /v1/responses; this path takes POST.",
    });
  });
});
