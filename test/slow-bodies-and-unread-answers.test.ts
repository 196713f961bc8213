import { connect, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { idleMoney, money } from "./support/api.js";
import {
  backends,
  chat,
  gatewayOn,
  KEY,
  LOGIN_KEY,
  readUntilClosed,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";
import { eventually } from "./support/gateways-on-postgres.js";
import { logged } from "./support/metering.js";

/**
 * A client that sends its headers and then its body slowly, never, or short of its length, on
 * every route family that reads a body; and one that never reads a whole (non-stream) answer.
 * Each looks from the outside: how the connection ends, what was charged, that the gateway serves on.
 */

let gw: TestGateway | undefined;
afterEach(async () => {
  await gw?.close();
  gw = undefined;
});

/** Route families that read a body: path, credentials, content type and a start of a body. */
const bodyRoutes: { path: string; auth?: string; type: string; start: string }[] = [
  { path: "/v1/images/generations", auth: KEY, type: "application/json", start: '{"model":' },
  {
    path: "/v1/audio/transcriptions",
    auth: KEY,
    type: "multipart/form-data; boundary=XyZ",
    start: '--XyZ\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper-1\r\n',
  },
  { path: "/v1/videos", auth: KEY, type: "application/json", start: '{"model":' },
  { path: "/mcp", auth: KEY, type: "application/json", start: '{"jsonrpc":' },
  { path: "/api/keys", auth: LOGIN_KEY, type: "application/json", start: '{"label":' },
  { path: "/api/auth/device/code", type: "application/json", start: '{"client' },
  { path: "/api/auth/device/token", type: "application/x-www-form-urlencoded", start: "device_" },
  { path: "/dashboard/keys", type: "application/x-www-form-urlencoded", start: "label=" },
];

type Sending = "short of its length" | "nothing" | "a byte at a time" | "short, then its end";

/**
 * Sends `route`'s headers (a body of 1000 bytes declared) and then its body as `sending` says;
 * answers what the gateway sent once it closed the connection, or that it did not within `boundMs`.
 */
async function sendSlowly(
  g: TestGateway,
  route: (typeof bodyRoutes)[number],
  sending: Sending,
  boundMs: number,
): Promise<string> {
  const port = Number(new URL(g.url).port);
  const socket: Socket = connect({ host: "127.0.0.1", port });
  socket.on("error", () => {});
  await new Promise((resolve) => socket.once("connect", resolve));
  let received = "";
  socket.on("data", (d: Buffer) => {
    received += d.toString("latin1");
  });
  const closed = new Promise<string>((resolve) => socket.once("close", () => resolve(received)));
  socket.write(
    `POST ${route.path} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nOrigin: http://127.0.0.1:${port}\r\n` +
      (route.auth ? `Authorization: Bearer ${route.auth}\r\n` : "") +
      `Content-Type: ${route.type}\r\nContent-Length: 1000\r\n\r\n`,
  );
  let trickle: NodeJS.Timeout | undefined;
  if (sending === "short of its length") socket.write(route.start);
  if (sending === "short, then its end") socket.end(route.start);
  if (sending === "a byte at a time")
    trickle = setInterval(() => {
      if (!socket.destroyed) socket.write(" ");
    }, 100);
  let bound: NodeJS.Timeout | undefined;
  const outcome = await Promise.race([
    closed,
    new Promise<string>((resolve) => {
      bound = setTimeout(() => resolve(`still open after ${boundMs} ms`), boundMs);
    }),
  ]);
  clearTimeout(bound);
  clearInterval(trickle);
  socket.destroy();
  return outcome;
}

const statusLine = (raw: string) => raw.split("\r\n")[0];

describe("a body that does not come whole", () => {
  it.each<[Sending, string]>([
    ["short of its length", "HTTP/1.1 408 Request Timeout"],
    ["nothing", "HTTP/1.1 408 Request Timeout"],
    ["a byte at a time", "HTTP/1.1 408 Request Timeout"],
    ["short, then its end", "HTTP/1.1 400 Bad Request"],
  ])(
    "sending %s, on every route family, is answered (%s) and closed; the gateway serves on",
    async (sending, status) => {
      gw = await testGateway({ connections: { headersTimeoutMs: 500, requestTimeoutMs: 1_500 } });
      const g = gw;
      // Generous next to the request timeout: a loaded machine notices it late, never this late.
      const answers = await Promise.all(bodyRoutes.map((r) => sendSlowly(g, r, sending, 15_000)));
      answers.forEach((raw, i) => {
        expect(statusLine(raw), bodyRoutes[i]!.path).toBe(status);
        expect(raw.toLowerCase(), bodyRoutes[i]!.path).toMatch(/x-request-id: req_/);
      });
      // Nothing of them was admitted, so nothing was logged or held.
      expect(await logged(g)).toHaveLength(0);
      expect((await idleMoney(g)).held).toBe(0);
      const res = await fetch(`${g.url}/v1/models`, {
        headers: { authorization: `Bearer ${KEY}` },
      });
      expect(res.status).toBe(200);
      await res.text();
    },
    60_000,
  );
});

describe.each(backends)("a whole answer its client never reads (%s)", (backend) => {
  it("ends by the send timeout; the request was settled before its answer left: charged once, nothing held; the gateway serves on", async () => {
    gw = await gatewayOn(backend, { connections: { sendTimeoutMs: 500 } });
    const before = await money(gw);
    const socket = connect({ host: "127.0.0.1", port: Number(new URL(gw.url).port) });
    socket.on("error", () => {});
    await new Promise((resolve) => socket.once("connect", resolve));
    // Never read: a whole answer far larger than the connection's buffers waits on them.
    socket.pause();
    const text = JSON.stringify(
      chat("tell me everything [[mock:words=100000]]", "mock-gpt", { n: 16 }),
    );
    socket.write(
      `POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer ${KEY}\r\n` +
        `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(text)}\r\n\r\n${text}`,
    );
    const [row] = await eventually(
      () => logged(gw!),
      (rows) => rows.length === 1,
      20_000,
      "the row of the answer its client never read",
    );
    // The answer was settled before it left; the client reads none of it for ten send timeouts
    // (a loaded machine's check comes late, never this late), then what its buffers held ends,
    // with the connection, short of the whole.
    await new Promise((resolve) => setTimeout(resolve, 5_000));
    let received = "";
    socket.on("data", (d: Buffer) => {
      received += d.toString("latin1");
    });
    expect(await readUntilClosed(socket, 15_000)).toBe("closed by the gateway");
    const declared = Number(/content-length: (\d+)/i.exec(received)?.[1]);
    const bodyBytes = Buffer.byteLength(received.slice(received.indexOf("\r\n\r\n") + 4), "latin1");
    expect(bodyBytes).toBeLessThan(declared);
    // Settled as a whole answer, once: the row stands alone, and the balance moved by its cost.
    expect(row!.error_code).toBeNull();
    expect(row!.cost_micro).toBeGreaterThan(0);
    expect(await logged(gw)).toHaveLength(1);
    const after = await idleMoney(gw);
    expect(after.held).toBe(0);
    expect(before.balance - after.balance).toBe(row!.cost_micro);

    const res = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
      body: JSON.stringify(chat("still there?")),
    });
    expect(res.status).toBe(200);
  }, 60_000);
});
