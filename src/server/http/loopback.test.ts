import { describe, expect, it } from "vitest";
import { Loopback, LoopbackClosed } from "./loopback.js";
import { loopbackSource } from "./loopback-socket.js";

describe("Loopback", () => {
  it("serves a request through the listener with the caller's address and source", async () => {
    const loopback = new Loopback();
    loopback.attach((req, res) => {
      const parts: Buffer[] = [];
      req.on("data", (chunk: Buffer) => parts.push(chunk));
      req.on("end", () => {
        res.writeHead(201, {
          "content-type": "text/plain",
          "x-source": String(loopbackSource(req)),
        });
        res.write(`${req.method} ${req.url} `);
        res.end(`${req.socket.remoteAddress} ${req.headers.authorization} ${Buffer.concat(parts)}`);
      });
    });
    for (const n of [1, 2]) {
      const answer = await loopback.send({
        method: "POST",
        path: `/v1/echo?n=${n}`,
        headers: { authorization: "Bearer kn-x", "content-type": "application/json" },
        body: `{"n":${n}}`,
        clientAddress: "203.0.113.7",
        source: "mcp",
      });
      expect(answer.status).toBe(201);
      expect(answer.headers["x-source"]).toBe("mcp");
      expect(answer.body.toString()).toBe(
        `POST /v1/echo?n=${n} 203.0.113.7 Bearer kn-x {"n":${n}}`,
      );
    }
  });

  it("abandons the request when the caller leaves, and the listener sees its client go", async () => {
    const loopback = new Loopback();
    let closedEarly: Promise<boolean> | undefined;
    let started: () => void = () => {};
    const answering = new Promise<void>((resolve) => {
      started = resolve;
    });
    loopback.attach((_req, res) => {
      closedEarly = new Promise((resolve) =>
        res.once("close", () => resolve(!res.writableFinished)),
      );
      res.writeHead(200);
      res.write("partial");
      started();
    });
    const abort = new AbortController();
    const sent = loopback.send({
      method: "GET",
      path: "/slow",
      headers: {},
      clientAddress: "127.0.0.1",
      source: "mcp",
      signal: abort.signal,
    });
    await answering;
    abort.abort();
    await expect(sent).rejects.toBeInstanceOf(LoopbackClosed);
    expect(await closedEarly).toBe(true);
  });

  it("refuses an answer the listener cut off before it was complete", async () => {
    const loopback = new Loopback();
    loopback.attach((_req, res) => {
      res.writeHead(200, { "content-length": "100" });
      res.write("partial", () => res.destroy());
    });
    await expect(
      loopback.send({
        method: "GET",
        path: "/broken",
        headers: {},
        clientAddress: "127.0.0.1",
        source: "mcp",
      }),
    ).rejects.toBeInstanceOf(LoopbackClosed);
  });

  it("tells a request of Node's own server from a loopback one", () => {
    expect(loopbackSource(undefined)).toBeUndefined();
  });
});
