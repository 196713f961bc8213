import { connect } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { idleMoney, money } from "./support/api.js";
import {
  backends,
  chat,
  gatewayOn,
  KEY,
  readUntilClosed,
  type TestGateway,
} from "./support/gateway.js";
import { eventually } from "./support/gateways-on-postgres.js";
import { logged } from "./support/metering.js";

/**
 * A client that stops reading its answer, or never starts: Node's own timeouts end once the
 * request is in, so only the gateway's send timeout ends such a connection. Each case looks from
 * the outside: the connection closes, the request's row is written, nothing stays held, and the
 * gateway serves on.
 */

let gw: TestGateway | undefined;
afterEach(async () => {
  await gw?.close();
  gw = undefined;
});

/** A stream far larger than a connection's buffers, so a client that reads none of it stalls it. */
const longStream = chat("tell me everything [[mock:words=100000]]", "mock-gpt", { stream: true });

describe.each(backends)("a client that never reads its stream (%s)", (backend) => {
  it("has its connection closed after the send timeout; the stream is settled as one its client left: its row written, charged what reached it, nothing held", async () => {
    gw = await gatewayOn(backend, { connections: { sendTimeoutMs: 500 } });
    const before = await money(gw);
    const socket = connect({ host: "127.0.0.1", port: Number(new URL(gw.url).port) });
    socket.on("error", () => {});
    await new Promise((resolve) => socket.once("connect", resolve));
    // Never read: the client's buffers fill, then the gateway's.
    socket.pause();
    const text = JSON.stringify(longStream);
    socket.write(
      `POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer ${KEY}\r\n` +
        `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(text)}\r\n\r\n${text}`,
    );
    // The gateway's side: the stream settled as one whose client left, a row written for it.
    const [row] = await eventually(
      () => logged(gw!),
      (rows) => rows.length === 1 && rows[0]!.error_code !== null,
      20_000,
      "the row of the stream its client never read",
    );
    expect(row!.error_code).toBe("client_closed");
    // The client's side: once it reads, what its buffers held ends, with the connection.
    expect(await readUntilClosed(socket, 10_000)).toBe("closed by the gateway");
    // What stayed in the buffers never reached the client, and is not billed.
    expect(row!.usage.output_tokens).toBeGreaterThan(0);
    expect(row!.usage.output_tokens).toBeLessThan(100_000);
    const after = await idleMoney(gw);
    expect(after.held).toBe(0);
    expect(before.balance - after.balance).toBe(row!.cost_micro);

    // The gateway serves on.
    const res = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
      body: JSON.stringify(chat("still there?")),
    });
    expect(res.status).toBe(200);
  }, 60_000);
});
