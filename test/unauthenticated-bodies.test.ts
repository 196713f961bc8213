import { connect, type Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type TestGateway, testGateway } from "./support/gateway.js";

/**
 * Issue 29, point 1: bodies from callers without a key. A route anyone may call takes a few KB,
 * a keyed route reads nothing before its key checks out, and either refusal closes the
 * connection instead of reading the rest to drop it. Measured as the bytes the gateway's own
 * process holds (it runs in this process) and as what each client sees, never as time.
 */

let gw: TestGateway;
beforeAll(async () => {
  gw = await testGateway();
});
afterAll(async () => {
  await gw?.close();
});

const bigBody = 31 * 1024 * 1024;
const piece = Buffer.alloc(64 * 1024, 0x61);
// Built once: the client shares this process, and its own garbage would count as the gateway's.
const chunkFrame = Buffer.concat([
  Buffer.from(`${piece.length.toString(16)}\r\n`),
  piece,
  Buffer.from("\r\n"),
]);

interface Flood {
  /** The status line the gateway answered, or "" when it closed without one. */
  status: string;
  body: string;
  /** Body bytes the client handed its socket before the gateway answered and closed. */
  sent: number;
}

/**
 * One raw request that announces (or streams, chunked) a 31 MB body and writes it as fast as the
 * connection takes it, until the gateway answers and closes. Bounded: a client that could write
 * the whole body is done writing, and the answer must come within 20 s.
 */
function flood(path: string, headers: string[], chunked = false): Promise<Flood> {
  const port = Number(new URL(gw.url).port);
  return new Promise((resolve, reject) => {
    let sent = 0;
    let received = "";
    let stop = false;
    const socket: Socket = connect({ host: "127.0.0.1", port }, () => {
      const framing = chunked ? ["Transfer-Encoding: chunked"] : [`Content-Length: ${bigBody}`];
      socket.write(
        [`POST ${path} HTTP/1.1`, "Host: 127.0.0.1", ...framing, ...headers, "", ""].join("\r\n"),
      );
      const pump = () => {
        while (!stop && sent < bigBody) {
          sent += piece.length;
          const frame = chunked ? chunkFrame : piece;
          if (!socket.write(frame)) return void socket.once("drain", pump);
        }
      };
      pump();
    });
    const timer = setTimeout(() => socket.destroy(new Error("no answer within 20 s")), 20_000);
    socket.on("data", (d: Buffer) => {
      received += d.toString("latin1");
    });
    // The gateway closing mid-body shows here as a reset or a broken pipe: that is the point.
    socket.on("error", (err: NodeJS.ErrnoException) => {
      if (err.code !== "ECONNRESET" && err.code !== "EPIPE") reject(err);
    });
    socket.once("close", () => {
      stop = true;
      clearTimeout(timer);
      resolve({
        status: received.split("\r\n")[0],
        body: received.slice(received.indexOf("\r\n\r\n") + 4),
        sent,
      });
    });
  });
}

/** The largest growth of this process's Buffer memory while `work` runs, sampled as it goes. */
async function peakBufferGrowth<T>(work: () => Promise<T>): Promise<{ result: T; peak: number }> {
  const base = process.memoryUsage().arrayBuffers;
  let peak = 0;
  const sample = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage().arrayBuffers - base);
  }, 5);
  try {
    const result = await work();
    peak = Math.max(peak, process.memoryUsage().arrayBuffers - base);
    return { result, peak };
  } finally {
    clearInterval(sample);
  }
}

describe("an unauthenticated flood of big bodies", () => {
  it("refuses twelve 31 MB bodies to the public device-token route at their headers, and /health answers meanwhile", async () => {
    const { result, peak } = await peakBufferGrowth(async () => {
      const floods = Array.from({ length: 12 }, (_, i) =>
        flood("/api/auth/device/token", ["Content-Type: application/json"], i % 2 === 1),
      );
      const health = await fetch(`${gw.url}/health`);
      return { floods: await Promise.all(floods), health: health.status };
    });
    expect(result.health).toBe(200);
    for (const answer of result.floods) {
      expect(answer.status).toBe("HTTP/1.1 413 Payload Too Large");
      expect(JSON.parse(answer.body)).toMatchObject({
        error: { message: "Request body is larger than the limit of 8 KB." },
      });
      // Closed, not read to the end: the client could not hand over its whole body.
      expect(answer.sent).toBeLessThan(bigBody);
    }
    // Twelve bodies read whole would be 372 MB; refused, they leave no more than socket buffers.
    expect(peak).toBeLessThan(16 * 1024 * 1024);
  }, 60_000);

  it("answers a keyed route without a key with 401 before its body, and closes the connection", async () => {
    const { result, peak } = await peakBufferGrowth(() =>
      Promise.all(
        ["/v1/chat/completions", "/v1/audio/transcriptions", "/api/keys"].flatMap((path) => [
          flood(path, ["Content-Type: application/json"]),
          flood(path, ["Content-Type: application/json", "Authorization: Bearer kn-wrong"], true),
        ]),
      ),
    );
    for (const answer of result) {
      expect(answer.status).toBe("HTTP/1.1 401 Unauthorized");
      expect(answer.sent).toBeLessThan(bigBody);
    }
    expect(peak).toBeLessThan(16 * 1024 * 1024);
  }, 60_000);

  it("takes a device-code request of a few hundred bytes as before", async () => {
    const res = await fetch(`${gw.url}/api/auth/device/code`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ client_name: "x".repeat(100), padding: " ".repeat(4000) }),
    });
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ user_code: expect.any(String) });
  });

  it("allows an address as many connections as a developer's machine needs, not hundreds", async () => {
    const port = Number(new URL(gw.url).port);
    // An address of its own: the gateway counts these connections until it sees them close,
    // which is after this test, and the other tests come from 127.0.0.1.
    const open = () =>
      new Promise<{ socket: Socket; answer: Promise<string> }>((resolve, reject) => {
        const socket = connect({ host: "127.0.0.1", port, localAddress: "127.0.0.2" }, () => {
          let received = "";
          socket.on("data", (d: Buffer) => {
            received += d.toString("latin1");
          });
          const answer = new Promise<string>((done) => socket.once("close", () => done(received)));
          resolve({ socket, answer });
        });
        socket.once("error", reject);
      });
    const held = [];
    try {
      for (let i = 0; i < 128; i++) held.push(await open());
      const refused = await open();
      held.push(refused);
      const raw = await refused.answer;
      expect(raw.split("\r\n")[0]).toBe("HTTP/1.1 503 Service Unavailable");
      expect(raw).toContain("the limit is 128");
    } finally {
      for (const { socket } of held) socket.destroy();
    }
  }, 30_000);
});
