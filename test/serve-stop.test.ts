import { once } from "node:events";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { connect, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Anthropic from "@anthropic-ai/sdk";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { type GatewayConfig, startGateway } from "../src/index.js";
import { appConfig } from "./support/cassette-suite.js";
import { type CliProcess, killRunningClis, spawnCli } from "./support/cli.js";
import {
  deferred,
  type FakeUpstream,
  fakeUpstream,
  type Handler,
  openaiJson,
  openaiStreamSteps,
} from "./support/fake-upstream.js";
import { allStreamEvents, streamEvents } from "./support/sse.js";

/**
 * `gateway serve` stopped by SIGTERM or Ctrl-C: an idle one exits at once, whatever its clients
 * hold open; a busy one lets the requests in flight finish, refusing new connections meanwhile,
 * and exits once they have; a second signal cuts them, and each is still settled before the exit.
 */

const KEY = "kn-serve-stop-key-00000000000000000000";
const BALANCE_IDR = 100_000;
/** Longer than any test: an exit seen is the drain ending, never its bound passing. */
const NO_BOUND = ["--drain-timeout-ms", "600000"];

let dir: string;
let upstream: FakeUpstream;
/** Released by a test: each upstream call waits for it before answering. */
let gate = deferred();
/** How many calls reached the upstream, and who waits for a count of them. */
let arrived = 0;
let onArrival: () => void = () => {};
const sockets: Socket[] = [];

const config = () =>
  appConfig({ key: KEY, providerKey: "sk-up", balanceIdr: BALANCE_IDR }, upstream.baseUrl);

/** The provider: it answers each call once the test opens the gate. */
const gated: Handler = async (req) => {
  arrived++;
  onArrival();
  await gate.promise;
  return req.body.stream
    ? { kind: "sse", steps: openaiStreamSteps(["Finished ", "in time"], { usage: [9, 3] }) }
    : openaiJson("Finished in time", { usage: [9, 3] });
};

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "gateway-serve-stop-"));
  upstream = await fakeUpstream("openai", gated);
});
afterEach(() => {
  killRunningClis();
  for (const socket of sockets.splice(0)) socket.destroy();
  gate.resolve();
  gate = deferred();
  arrived = 0;
  upstream.reset(gated);
});
afterAll(async () => {
  await upstream.close();
  rmSync(dir, { recursive: true, force: true });
});

let served = 0;

/** `gateway serve` on a database file of its own, and the URL it printed when ready. */
async function serve(flags: string[]): Promise<{ cli: CliProcess; url: string; db: string }> {
  const db = join(dir, `stop-${++served}.db`);
  const configFile = join(dir, `stop-${served}.json`);
  writeFileSync(configFile, JSON.stringify(config()));
  const cli = spawnCli(
    ["serve", "--port", "0", "--json", "--db", db, "--config", configFile, ...flags],
    process.env,
  );
  const [line] = await cli.waitFor(/^\{.*\}$/m, 25_000);
  return { cli, url: (JSON.parse(line) as { url: string }).url, db };
}

/** Resolves once `count` calls reached the upstream (each waiting at the gate). */
function upstreamReached(count: number): Promise<void> {
  return new Promise((resolve) => {
    onArrival = () => {
      if (arrived >= count) resolve();
    };
    onArrival();
  });
}

const ask = (url: string, stream: boolean) =>
  fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
    body: JSON.stringify({
      model: "app-chat",
      stream,
      messages: [{ role: "user", content: "Say it" }],
    }),
  });

/** A raw connection to the gateway, closed by the test's clean-up (never by the test itself). */
async function rawConnection(url: string): Promise<Socket> {
  const { hostname, port } = new URL(url);
  // Half-open as a client may leave it: the gateway's end of the connection does not close it.
  const socket = connect({ host: hostname, port: Number(port), allowHalfOpen: true });
  sockets.push(socket);
  socket.on("error", () => {});
  await once(socket, "connect");
  return socket;
}

/** A CONNECT answered (the gateway is no proxy), its connection held open by the client. */
async function heldConnect(url: string): Promise<string> {
  const socket = await rawConnection(url);
  socket.write("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n");
  const [answer] = (await once(socket, "data")) as [Buffer];
  return answer.toString("latin1").split("\r\n")[0];
}

/** What the database holds once the serve is gone: its request log and the account's balance. */
async function afterwards(db: string) {
  const gateway = await startGateway({ db, config: config() });
  try {
    const quota = await fetch(`${gateway.url}/v1/account/quota`, {
      headers: { authorization: `Bearer ${KEY}` },
    });
    const { balance_idr } = (await quota.json()) as { balance_idr: number };
    return { rows: await gateway.listRequests(), balance: balance_idr };
  } finally {
    await gateway.close();
  }
}

describe("gateway serve stopped with nothing in flight", () => {
  it.each(["SIGTERM", "SIGINT"] as const)(
    "exits on %s at once, though its clients hold a keep-alive connection, a connection that sent nothing and a CONNECT's",
    async (signal) => {
      const { cli, url } = await serve(NO_BOUND);
      gate.resolve();
      // fetch keeps its connection alive after the answer.
      expect((await ask(url, false)).status).toBe(200);
      await rawConnection(url);
      expect(await heldConnect(url)).toBe("HTTP/1.1 405 Method Not Allowed");

      cli.child.kill(signal);
      const { code, stderr } = await cli.exit(20_000);
      expect(code).toBe(0);
      // Nothing was in flight, so nothing was waited for.
      expect(stderr).not.toContain("stopping");
    },
    30_000,
  );

  it("startGateway's close() resolves though a client holds a CONNECT's connection open", async () => {
    const gateway = await startGateway({ config: config() });
    expect(await heldConnect(gateway.url)).toBe("HTTP/1.1 405 Method Not Allowed");
    // A close that waited for the client to let go would never end: the test's time runs out.
    await gateway.close();
  });
});

describe("gateway serve stopped with requests in flight", () => {
  it("finishes them (an answer and a stream whose 200 went out), refusing new connections, then exits; both are charged, nothing is held", async () => {
    const { cli, url, db } = await serve(["--keepalive-ms", "50", ...NO_BOUND]);
    const reached = upstreamReached(2);
    const whole = ask(url, false);
    const stream = await ask(url, true);
    // Committed: its keepalive comments flow while the provider has not answered.
    expect(stream.status).toBe(200);
    await reached;

    cli.child.kill("SIGTERM");
    await cli.waitFor(/stopping: finishing 2 requests in flight/, 15_000);
    expect(cli.child.exitCode).toBeNull();
    // No new connection is taken while it drains.
    await expect(fetch(`${url}/health`)).rejects.toThrow();

    gate.resolve();
    const answer = await whole;
    expect(answer.status).toBe(200);
    const completion = (await answer.json()) as { choices: { message: { content: string } }[] };
    expect(completion.choices[0].message.content).toBe("Finished in time");
    const events = await allStreamEvents(stream);
    expect(events.at(-1)?.data).toBe("[DONE]");
    const text = events
      .map((e) => (e.data === "[DONE]" ? "" : (e.data.choices?.[0]?.delta?.content ?? "")))
      .join("");
    expect(text).toBe("Finished in time");

    const { code } = await cli.exit(20_000);
    expect(code).toBe(0);
    const { rows, balance } = await afterwards(db);
    expect(rows.map((r) => [r.stream, r.status, r.state]).sort()).toEqual([
      [false, 200, "settled"],
      [true, 200, "settled"],
    ]);
    expect(rows.every((r) => r.cost_micro > 0)).toBe(true);
    const charged = rows.reduce((sum, r) => sum + r.cost_micro, 0);
    expect(Math.round(balance * 1e6)).toBe(BALANCE_IDR * 1e6 - charged);
  }, 40_000);

  it("a second Ctrl-C cuts what is still in flight; it is settled as its client saw it before the exit", async () => {
    const { cli, url, db } = await serve(["--keepalive-ms", "50", ...NO_BOUND]);
    const reached = upstreamReached(1);
    const stream = await ask(url, true);
    expect(stream.status).toBe(200);
    await reached;

    cli.child.kill("SIGINT");
    await cli.waitFor(/stopping: finishing the request in flight/, 15_000);
    expect(cli.child.exitCode).toBeNull();
    cli.child.kill("SIGINT");
    // The provider never answered: the client's stream ends without a finished answer.
    const events = await allStreamEvents(stream).catch(() => []);
    expect(events.map((e) => e.data)).not.toContain("[DONE]");

    const { code } = await cli.exit(20_000);
    expect(code).toBe(0);
    const { rows, balance } = await afterwards(db);
    expect(rows).toHaveLength(1);
    expect(rows[0].state).not.toBe("reserved");
    expect(rows[0].cost_micro).toBe(0);
    // Its hold went back: nothing delivered, nothing charged.
    expect(balance).toBe(BALANCE_IDR);
  }, 40_000);
});

describe("gateway serve cutting a stream under way", () => {
  /** A provider that streams a word every 50 ms and never finishes, until its connection closes. */
  const paced: Handler = () => ({
    kind: "drip",
    contentType: "text/event-stream",
    everyMs: 50,
    piece: (i) =>
      `data: ${JSON.stringify({
        id: "chatcmpl-paced",
        object: "chat.completion.chunk",
        created: 1_700_000_000,
        model: "gpt-up",
        choices: [{ index: 0, delta: { content: `w${i} ` }, finish_reason: null }],
      })}\n\n`,
  });

  it("a second Ctrl-C ends each open stream with its style's error event, then the end; each is settled once, charged what it delivered", async () => {
    upstream.reset(paced);
    const { cli, url, db } = await serve(NO_BOUND);
    const chatStream = await ask(url, true);
    expect(chatStream.status).toBe(200);
    const chatEvents = streamEvents(chatStream);
    const firstChat = await chatEvents.next();
    expect(firstChat.value?.data.choices[0].delta.content).toBeTypeOf("string");
    const anthropic = new Anthropic({ apiKey: KEY, baseURL: url, maxRetries: 0 });
    const messages = await anthropic.messages.create({
      model: "app-chat",
      max_tokens: 1_000,
      stream: true,
      messages: [{ role: "user", content: "Say it" }],
    });
    const messageEvents = messages[Symbol.asyncIterator]();
    expect((await messageEvents.next()).value?.type).toBe("message_start");

    cli.child.kill("SIGINT");
    await cli.waitFor(/stopping: finishing 2 requests in flight/, 15_000);
    cli.child.kill("SIGINT");

    // The chat client reads an error chunk and then the end of the body, not a dropped connection.
    const rest = [];
    for await (const event of { [Symbol.asyncIterator]: () => chatEvents }) rest.push(event.data);
    expect(rest.length).toBeGreaterThan(0);
    expect(rest).not.toContain("[DONE]");
    const last = rest.at(-1) as { error?: { code: string; message: string } };
    expect(last.error?.code).toBe("upstream_error");
    expect(last.error?.message).toContain("shutting down");
    // The messages client: Anthropic's error event, which its SDK raises.
    const raised = await (async () => {
      for (;;) if ((await messageEvents.next()).done) return undefined;
    })().catch((err: unknown) => err);
    expect(raised).toBeInstanceOf(Anthropic.APIError);
    expect((raised as Error).message).toContain("shutting down");

    const { code } = await cli.exit(20_000);
    expect(code).toBe(0);
    const { rows, balance } = await afterwards(db);
    expect(rows.map((r) => [r.endpoint, r.state, r.error_code]).sort()).toEqual([
      ["chat.completions", "settled", "upstream_error"],
      ["messages", "settled", "upstream_error"],
    ]);
    // What reached each client is charged, once.
    expect(rows.every((r) => r.cost_micro > 0)).toBe(true);
    const charged = rows.reduce((sum, r) => sum + r.cost_micro, 0);
    expect(Math.round(balance * 1e6)).toBe(BALANCE_IDR * 1e6 - charged);
  }, 40_000);
});

describe("gateway serve writing a stream it makes in memory", () => {
  it("keeps answering others and hears a stop while a long mock stream goes to a client that keeps up, then finishes it", async () => {
    // A mock that makes its words as fast as they are read (the demo's paces them like a model).
    const configFile = join(dir, "in-memory.json");
    const mock: GatewayConfig = {
      providers: [{ id: "mock", wire: "mock" }],
      models: [{ name: "mock-fast", provider: "mock", price_input_per_mtok: 1_000 }],
      accounts: [{ id: "app", balance_idr: BALANCE_IDR, keys: [{ id: "app", value: KEY }] }],
    };
    writeFileSync(configFile, JSON.stringify(mock));
    const cli = spawnCli(
      ["serve", "--port", "0", "--json", "--db", ":memory:", "--config", configFile, ...NO_BOUND],
      process.env,
    );
    const [line] = await cli.waitFor(/^\{.*\}$/m, 25_000);
    const { url } = JSON.parse(line) as { url: string };
    const stream = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
      body: JSON.stringify({
        model: "mock-fast",
        stream: true,
        messages: [{ role: "user", content: "[[mock:words=100000]] a long one" }],
      }),
    });
    expect(stream.status).toBe(200);
    const seen: string[] = [];
    const reader = stream.body!.getReader();
    await reader.read();
    const health = fetch(`${url}/health`).then((res) => seen.push(`health ${res.status}`));
    const stopping = health
      .then(() => {
        cli.child.kill("SIGTERM");
        return cli.waitFor(/stopping: finishing the request in flight/, 15_000);
      })
      .then(() => seen.push("stopping"));
    let tail = Buffer.alloc(0);
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      tail = Buffer.concat([tail, value]).subarray(-64);
    }
    seen.push("stream ended");
    await stopping;
    expect(seen).toEqual(["health 200", "stopping", "stream ended"]);
    // The stop let the stream finish.
    expect(tail.toString()).toContain("data: [DONE]");
    expect((await cli.exit(20_000)).code).toBe(0);
  }, 40_000);
});
