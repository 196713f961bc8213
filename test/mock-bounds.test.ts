import { type ChildProcess, fork } from "node:child_process";
import { once } from "node:events";
import { writeFileSync } from "node:fs";
import { connect, type Socket } from "node:net";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mockDirectiveBounds } from "../src/server/providers/mock/mock-chat.js";
import { baseConfig, chat, KEY, post, type TestGateway, testGateway } from "./support/gateway.js";

/**
 * The mock's directives are bounded (a 400 naming the bound), and its streams are made as the
 * client reads them: a client that never reads holds no more than the socket's buffers, and
 * what it held is released when it leaves. Before, `[[mock:words=3000000]]` built the whole
 * answer in memory, and thirty never-reading clients took the RSS from 84 to 850 MB.
 */

let gw: TestGateway;
beforeAll(async () => {
  gw = await testGateway();
});
afterAll(async () => {
  await gw?.close();
});

describe("mock directive bounds", () => {
  const past = [
    [
      "words",
      `words=${mockDirectiveBounds.words.max + 1}`,
      `from 0 to ${mockDirectiveBounds.words.max}`,
    ],
    [
      "delay",
      `delay=${mockDirectiveBounds.delay.max + 1}`,
      `from 0 to ${mockDirectiveBounds.delay.max}`,
    ],
    ["break", "break=-1", `from 0 to ${mockDirectiveBounds.break.max}`],
    ["fail", "fail=200", "from 400 to 599"],
    ["words", "words=lots", `from 0 to ${mockDirectiveBounds.words.max}`],
    ["tool", `tool=${"t".repeat(65)}`, "at most 64 characters"],
  ] as const;

  it.each(past)(
    "%s past its bound (%s) is a 400 naming the bound, on every style",
    async (name, directive, bound) => {
      const held = gw.services.ledger.heldMicro("acct");
      for (const stream of [false, true]) {
        const res = await post(
          gw,
          "/v1/chat/completions",
          chat(`hi [[mock:${directive}]]`, "mock-gpt", { stream }),
        );
        expect(res.status).toBe(400);
        const body = (await res.json()) as { error: { code: string; message: string } };
        expect(body.error.code).toBe("bad_request");
        expect(body.error.message).toContain(`[[mock:${name}=`);
        expect(body.error.message).toContain(bound);
      }
      const messages = await post(gw, "/v1/messages", {
        model: "mock-gpt",
        max_tokens: 50,
        messages: [{ role: "user", content: `hi [[mock:${directive}]]` }],
      });
      expect(messages.status).toBe(400);
      expect(await messages.json()).toMatchObject({
        type: "error",
        error: { type: "invalid_request_error", message: expect.stringContaining(bound) },
      });
      expect(gw.services.ledger.heldMicro("acct")).toBe(held);
    },
  );

  it("at the bound the whole answer is served; a stream carries the same text as the JSON answer", async () => {
    const atBound = await post(
      gw,
      "/v1/chat/completions",
      chat(`long [[mock:words=${mockDirectiveBounds.words.max}]]`),
    );
    expect(atBound.status).toBe(200);
    const long = (await atBound.json()) as { choices: { message: { content: string } }[] };
    expect(long.choices[0].message.content.split(" ").length).toBeGreaterThan(
      mockDirectiveBounds.words.max,
    );

    const words = 3_000;
    const prompt = `long [[mock:words=${words}]]`;
    const whole = await post(gw, "/v1/chat/completions", chat(prompt));
    expect(whole.status).toBe(200);
    const json = (await whole.json()) as {
      choices: { message: { content: string } }[];
      usage: { completion_tokens: number };
    };
    const text = json.choices[0].message.content;
    expect(text.split(" ").length).toBeGreaterThan(words);
    expect(json.usage.completion_tokens).toBe(Math.ceil(text.length / 4));

    const streamed = await post(
      gw,
      "/v1/chat/completions",
      chat(prompt, "mock-gpt", { stream: true }),
    );
    let joined = "";
    for (const line of (await streamed.text()).split("\n")) {
      if (!line.startsWith("data: {")) continue;
      const chunk = JSON.parse(line.slice(6)) as { choices: { delta: { content?: string } }[] };
      joined += chunk.choices[0]?.delta.content ?? "";
    }
    expect(joined).toBe(text);
  });

  it("max_tokens cuts the made text where the whole text would be cut", async () => {
    const res = await post(
      gw,
      "/v1/chat/completions",
      chat("x [[mock:words=500]]", "mock-gpt", { max_tokens: 7 }),
    );
    const json = (await res.json()) as {
      choices: { message: { content: string }; finish_reason: string }[];
    };
    expect(json.choices[0].finish_reason).toBe("length");
    expect(json.choices[0].message.content).toHaveLength(28);
  });
});

/** A gateway in a child process with `--expose-gc`, so its heap can be measured after a GC. */
interface Measured {
  child: ChildProcess;
  url: string;
  measure(): Promise<{ heapUsed: number; closedStreams: number }>;
}

async function measuredGateway(dir: string): Promise<Measured> {
  const script = join(dir, "measured-gateway.mjs");
  // The server's own entry: the published one keeps `services` (the request log read below) private.
  const index = join(import.meta.dirname, "..", "dist", "server", "gateway.js");
  writeFileSync(
    script,
    `
    const { startGateway } = await import(${JSON.stringify(index)});
    const gw = await startGateway({ db: ":memory:", port: 0, config: JSON.parse(process.env.CONFIG) });
    const closed = () =>
      gw.services.store.requestLog("acct", 1e9).filter((r) => r.error_code === "client_closed").length;
    process.on("message", (m) => {
      if (m === "stop") return void gw.close().then(() => process.exit(0));
      globalThis.gc();
      globalThis.gc();
      const { heapUsed, external } = process.memoryUsage();
      process.send({ heapUsed: heapUsed + external, closedStreams: closed() });
    });
    process.send({ url: gw.url });
    `,
  );
  const child = fork(script, [], {
    execArgv: ["--expose-gc"],
    env: { ...process.env, CONFIG: JSON.stringify(baseConfig()) },
    stdio: ["ignore", "ignore", "inherit", "ipc"],
  });
  const [ready] = (await once(child, "message")) as [{ url: string }];
  return {
    child,
    url: ready.url,
    async measure() {
      child.send("measure");
      const [m] = (await once(child, "message")) as [{ heapUsed: number; closedStreams: number }];
      return m;
    },
  };
}

/** Asks for a long stream and never reads it: the socket is paused once the answer starts. */
function neverReading(url: string, words: number): Promise<Socket> {
  const { port } = new URL(url);
  const body = JSON.stringify(chat(`[[mock:words=${words}]]`, "mock-gpt", { stream: true }));
  return new Promise((resolve, reject) => {
    const socket = connect({ host: "127.0.0.1", port: Number(port) }, () => {
      socket.write(
        `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
      );
    });
    socket.once("data", (first: Buffer) => {
      socket.pause();
      if (first.toString("latin1").startsWith("HTTP/1.1 200")) resolve(socket);
      else reject(new Error(`unexpected answer: ${first.toString("latin1").slice(0, 200)}`));
    });
    socket.once("error", reject);
  });
}

describe("never-reading clients of long mock streams", () => {
  it("hold little of the gateway's memory, and release it when they leave", {
    timeout: 60_000,
  }, async () => {
    const measured = await measuredGateway(gw.dir);
    const mb = (bytes: number) => bytes / 1024 / 1024;
    try {
      // Warm every code path once, so the baseline holds the loaded modules.
      (await neverReading(measured.url, 100)).destroy();
      const baseline = await measured.measure();

      const clients = 8;
      const sockets = await Promise.all(
        Array.from({ length: clients }, () =>
          neverReading(measured.url, mockDirectiveBounds.words.max),
        ),
      );
      // Let the streams run into their paused clients' buffers.
      await new Promise((r) => setTimeout(r, 1_500));
      const held = await measured.measure();
      // A whole answer of this length is several MB; a stuck stream holds one socket buffer's worth.
      expect(mb(held.heapUsed - baseline.heapUsed)).toBeLessThan(25);

      for (const s of sockets) s.destroy();
      let after = await measured.measure();
      for (let i = 0; i < 100 && after.closedStreams < baseline.closedStreams + clients; i++) {
        await new Promise((r) => setTimeout(r, 100));
        after = await measured.measure();
      }
      expect(after.closedStreams).toBe(baseline.closedStreams + clients);
      expect(mb(after.heapUsed - baseline.heapUsed)).toBeLessThan(10);
    } finally {
      measured.child.send("stop");
      await once(measured.child, "exit");
    }
  });
});
