import { connect, type Socket } from "node:net";
import { Agent, fetch as undiciFetch } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import { chat, KEY, type TestGateway, testGateway } from "./support/gateway.js";

/**
 * The server's own connection limits and its plain answers to what Node would refuse with an
 * empty 400/431 or a silent close. Every socket here is raw, so the test sees the bytes a client
 * would.
 */

let gw: TestGateway | undefined;
afterEach(async () => {
  await gw?.close();
  gw = undefined;
});

const portOf = (g: TestGateway) => Number(new URL(g.url).port);

interface Conversation {
  socket: Socket;
  /** Everything the server sent, once it closed the connection (bounded by `withinMs`). */
  closed: Promise<string>;
}

function open(
  g: TestGateway,
  localAddress = "127.0.0.1",
  withinMs = 10_000,
): Promise<Conversation> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: "127.0.0.1", port: portOf(g), localAddress }, () => {
      let received = "";
      socket.on("data", (d: Buffer) => {
        received += d.toString("latin1");
      });
      const closed = new Promise<string>((done, fail) => {
        const timer = setTimeout(() => {
          socket.destroy();
          fail(new Error(`still open after ${withinMs} ms; received: ${received}`));
        }, withinMs);
        socket.once("close", () => {
          clearTimeout(timer);
          done(received);
        });
      });
      resolve({ socket, closed });
    });
    socket.once("error", reject);
  });
}

async function exchange(g: TestGateway, request: string): Promise<string> {
  const c = await open(g);
  c.socket.write(request);
  return c.closed;
}

const statusLine = (raw: string) => raw.split("\r\n")[0];
const bodyOf = (raw: string) => raw.slice(raw.indexOf("\r\n\r\n") + 4);

describe("timeouts of our own", () => {
  it("a client trickling its headers is answered 408 and closed by the header timeout", async () => {
    gw = await testGateway({ connections: { headersTimeoutMs: 300, requestTimeoutMs: 1_000 } });
    const c = await open(gw);
    const trickle = "GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    let i = 0;
    const timer = setInterval(() => {
      if (!c.socket.destroyed) c.socket.write(trickle[i++ % trickle.length]);
    }, 50);
    try {
      const raw = await c.closed;
      expect(statusLine(raw)).toBe("HTTP/1.1 408 Request Timeout");
      expect(bodyOf(raw)).toContain("did not arrive in time");
    } finally {
      clearInterval(timer);
    }
  });

  it("a slow body is cut by the request timeout, but a long streamed answer is not", async () => {
    // Timeouts a starved event loop (a loaded CI runner) cannot outlast while reading a body
    // written at once, still well under the streamed answer's length.
    gw = await testGateway({ connections: { headersTimeoutMs: 1_000, requestTimeoutMs: 2_000 } });
    const c = await open(gw);
    c.socket.write(
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"model":`,
    );
    expect(statusLine(await c.closed)).toBe("HTTP/1.1 408 Request Timeout");

    // A stream whose answer takes several times the request timeout still arrives whole. The
    // request is written at once, so it arrives whole in one read however busy the machine is
    // (a client that sends its body apart, as fetch does, may see its body read after the
    // server's check on a starved event loop: a 408 that only says the test machine was slow).
    const body = JSON.stringify(chat("slow [[mock:delay=3000]]", "mock-gpt", { stream: true }));
    const raw = await exchange(
      gw,
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    expect(statusLine(raw)).toBe("HTTP/1.1 200 OK");
    expect(bodyOf(raw)).toContain("data: [DONE]");
  });

  it("an idle keep-alive connection is closed after the keep-alive timeout", async () => {
    gw = await testGateway({ connections: { keepAliveTimeoutMs: 200 } });
    // Well under Node's own default, so only the configured timeout can close it in time.
    const c = await open(gw, "127.0.0.1", 3_000);
    c.socket.write("GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n");
    const raw = await c.closed;
    expect(statusLine(raw)).toBe("HTTP/1.1 200 OK");
  });
});

describe("connections per client address", () => {
  it("beyond the cap a connection gets a plain 503; other addresses and freed slots are served", async () => {
    gw = await testGateway({ connections: { maxConnectionsPerIp: 3 } });
    const held = await Promise.all([1, 2, 3].map(() => open(gw!)));
    // Let the server count them before the next one arrives.
    await new Promise((r) => setTimeout(r, 50));
    const refused = await open(gw);
    const raw = await refused.closed;
    expect(statusLine(raw)).toBe("HTTP/1.1 503 Service Unavailable");
    expect(bodyOf(raw)).toContain("limit is 3");

    const other = new Agent({ localAddress: "127.0.0.2" });
    try {
      const res = await undiciFetch(`${gw.url}/v1/models`, { dispatcher: other });
      expect(res.status).toBe(200);
      await res.text();
    } finally {
      await other.close();
    }

    held[0].socket.destroy();
    await held[0].closed;
    await new Promise((r) => setTimeout(r, 50));
    expect(
      statusLine(
        await exchange(gw, "GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
      ),
    ).toBe("HTTP/1.1 200 OK");
    for (const h of held.slice(1)) h.socket.destroy();
  });
});

describe("plain answers instead of Node's empty ones", () => {
  it("an unknown method, a malformed request and oversized headers are explained", async () => {
    gw = await testGateway();
    const badMethod = await exchange(gw, "FROB /v1/models HTTP/1.1\r\nHost: x\r\n\r\n");
    expect(statusLine(badMethod)).toBe("HTTP/1.1 400 Bad Request");
    expect(badMethod).toContain("content-type: text/plain");
    expect(bodyOf(badMethod)).toContain("method is not one this server understands");

    const malformed = await exchange(gw, "GET /v1/models HTTP/1.1\r\nHo st: x\r\n\r\n");
    expect(statusLine(malformed)).toBe("HTTP/1.1 400 Bad Request");
    expect(bodyOf(malformed)).toContain("not valid HTTP/1.1");

    const huge = await exchange(
      gw,
      `GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(40_000)}\r\n\r\n`,
    );
    expect(statusLine(huge)).toBe("HTTP/1.1 431 Request Header Fields Too Large");
    expect(bodyOf(huge)).toContain("headers are larger than this server accepts");
  });

  it("CONNECT is answered: the gateway is not a proxy", async () => {
    gw = await testGateway();
    const raw = await exchange(
      gw,
      "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
    );
    expect(statusLine(raw)).toBe("HTTP/1.1 405 Method Not Allowed");
    expect(bodyOf(raw)).toContain("not a proxy");
  });
});
