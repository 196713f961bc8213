import { connect } from "node:net";
import OpenAI from "openai";
import { ResponsesWS } from "openai/resources/responses/ws";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { admin } from "./support/api.js";
import { KEY, KEY2, type TestGateway, testGateway } from "./support/gateway.js";

/**
 * The Responses WebSocket mode is not served (responses-websocket.test.ts): what a client that
 * tries it anyway is told when its key is wrong or its account suspended, and that the refused
 * upgrade leaves an ordinary HTTP/1.1 connection the client may reuse.
 */

let gw: TestGateway;
beforeAll(async () => {
  gw = await testGateway();
});
afterAll(async () => {
  await gw?.close();
});

/** ResponsesWS's own outcome: the error it reports and its close code. */
function sdkAttempt(apiKey: string): Promise<{ error: string; code: number; unsent: number }> {
  const client = new OpenAI({ apiKey, baseURL: `${gw.url}/v1`, maxRetries: 0 });
  const ws = new ResponsesWS(client, { reconnect: null });
  return new Promise((resolve) => {
    let error = "";
    ws.on("error", (e) => {
      error = e.message;
    });
    ws.on("close", (code, _reason, unsent) =>
      resolve({ error, code, unsent: (unsent ?? []).length }),
    );
    ws.send({ type: "response.create", model: "mock-gpt", input: "hi" } as never);
  });
}

const upgradeRequest = (key: string) =>
  `GET /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${key}\r\n` +
  "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n" +
  `Sec-WebSocket-Key: ${Buffer.from("0123456789abcdef").toString("base64")}\r\n\r\n`;

describe("a client that tries the Responses WebSocket mode anyway", () => {
  it("with a wrong key is refused as unauthenticated (401), before the mode's 426", async () => {
    const r = await sdkAttempt("kn-not-a-key-000000000000000000");
    expect(r.error).toBe("Unexpected server response: 401");
    expect(r.unsent).toBe(1);
  });

  it("with a key of a suspended account is refused 401, and 426 again once reinstated", async () => {
    expect((await admin(gw, "PATCH", "/accounts/acct", { status: "suspended" })).status).toBe(200);
    try {
      expect((await sdkAttempt(KEY2)).error).toBe("Unexpected server response: 401");
    } finally {
      await admin(gw, "PATCH", "/accounts/acct", { status: "active" });
    }
    expect((await sdkAttempt(KEY2)).error).toBe("Unexpected server response: 426");
  });

  it("keeps a plain HTTP/1.1 connection: the refusal has a request id and the next request on it is answered", async () => {
    const u = new URL(gw.url);
    const socket = connect(Number(u.port), u.hostname);
    let out = "";
    const closed = new Promise<void>((resolve) => socket.on("close", () => resolve()));
    const grew = () =>
      new Promise<void>((resolve) => {
        const check = () => {
          if (/\{"status":"ok"\}|"code":"bad_request"\}\}$/.test(out)) {
            socket.off("data", check);
            resolve();
          }
        };
        socket.on("data", check);
      });
    socket.on("data", (d: Buffer) => {
      out += d.toString("latin1");
    });
    try {
      await new Promise<void>((resolve, reject) => {
        socket.once("connect", () => resolve());
        socket.once("error", reject);
      });
      const refused = grew();
      socket.write(upgradeRequest(KEY));
      await Promise.race([refused, closed]);
      expect(out).toMatch(/^HTTP\/1\.1 426 /);
      expect(out).toMatch(/\r\nx-request-id: req_/i);
      expect(out).not.toMatch(/\r\nupgrade:/i);
      out = "";
      const answered = grew();
      socket.write("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
      await Promise.race([answered, closed]);
      expect(out).toMatch(/^HTTP\/1\.1 200 /);
    } finally {
      socket.destroy();
    }
  });
});
