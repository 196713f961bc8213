import { connect, type Socket } from "node:net";
import OpenAI, { toFile } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { encodeWav } from "../src/server/media/wav.js";
import { idleMoney, money } from "./support/api.js";
import { type FakeUpstream, fakeUpstream } from "./support/fake-upstream.js";
import {
  ADMIN_KEY,
  backends,
  baseConfigWith,
  chat,
  gatewayOn,
  KEY,
  type TestGateway,
} from "./support/gateway.js";
import { eventually } from "./support/gateways-on-postgres.js";
import { type Logged, logged } from "./support/metering.js";

/**
 * A client that hangs up on the wires and at the moments the stream hunts left: requests
 * pipelined on one HTTP/1.1 connection, and the whole answers of the other modalities (images,
 * embeddings, speech, transcription) while their provider works. Each case looks from the
 * outside at what the owner sees: the request log's rows, the balance, nothing left held (the
 * quota and /metrics), the provider's call stopped, and the gateway still serving.
 */

let upstream: FakeUpstream;

beforeAll(async () => {
  // A provider that is still working on every request when its client hangs up.
  upstream = await fakeUpstream("openai", () => ({ kind: "hang" }));
});
afterAll(async () => {
  await upstream?.close();
});

function config() {
  return baseConfigWith({
    providers: [
      { id: "slow", wire: "openai" as const, base_url: upstream.baseUrl, api_keys: ["sk-slow"] },
    ],
    models: [
      { name: "slow-chat", provider: "slow", price_input_per_mtok: 1_000 },
      { name: "slow-image", provider: "slow", modality: "image" as const, price_per_unit: 500 },
      {
        name: "slow-embed",
        provider: "slow",
        modality: "embedding" as const,
        price_input_per_mtok: 300,
      },
      { name: "slow-tts", provider: "slow", modality: "speech" as const, price_per_unit: 2 },
      {
        name: "slow-stt",
        provider: "slow",
        modality: "transcription" as const,
        price_per_unit: 10,
      },
    ],
  });
}

/** Admitted requests whose hold is not settled, as /metrics shows them. */
async function holdsInFlight(gw: { url: string }): Promise<number> {
  const res = await fetch(`${gw.url}/metrics`, {
    headers: { authorization: `Bearer ${ADMIN_KEY}` },
  });
  return Number(/^gateway_holds_in_flight (\d+)$/m.exec(await res.text())?.[1]);
}

/** A request's row as the admin listing shows it, with its HTTP status. */
type Row = Logged & { endpoint: string; status: number };

/** A raw HTTP/1.1 connection to the gateway, and everything it has received so far. */
async function connection(gw: {
  url: string;
}): Promise<{ socket: Socket; received: () => string }> {
  const socket = connect(Number(new URL(gw.url).port), "127.0.0.1");
  let received = "";
  socket.setEncoding("utf8");
  socket.on("data", (text: string) => {
    received += text;
  });
  socket.on("error", () => {});
  await new Promise((resolve) => socket.once("connect", resolve));
  return { socket, received: () => received };
}

/** A chat completion as it goes on the wire, to be written with others in one packet. */
function wireRequest(body: object): string {
  const text = JSON.stringify(body);
  return [
    "POST /v1/chat/completions HTTP/1.1",
    "host: 127.0.0.1",
    `authorization: Bearer ${KEY}`,
    "content-type: application/json",
    `content-length: ${Buffer.byteLength(text)}`,
    "",
    text,
  ].join("\r\n");
}

describe.each(backends)("requests pipelined on one connection (%s)", (backend) => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await gatewayOn(backend, { config: config() });
  });
  afterAll(async () => {
    await gw?.close();
  });

  it("a client that hangs up while its first request is worked on is charged for none, and the requests queued behind it never run", async () => {
    const before = await money(gw);
    const rowsBefore = (await logged(gw)).length;
    const sentBefore = upstream.requests.length;
    const abortedBefore = upstream.aborted;
    const { socket, received } = await connection(gw);
    // The provider works on the first; a long stream (more output than a socket's buffer) and
    // another call to the provider wait behind it for their turn to answer.
    socket.write(
      wireRequest(chat("first", "slow-chat")) +
        wireRequest(chat("second [[mock:words=6000]]", "mock-gpt", { stream: true })) +
        wireRequest(chat("third", "slow-chat")),
    );
    await eventually(
      async () => upstream.requests.length - sentBefore,
      (sent) => sent >= 1,
      5_000,
      "the first request at the provider",
    );
    socket.destroy();

    // The provider's call is stopped, and nothing is left held.
    await eventually(
      async () => upstream.aborted - abortedBefore,
      (aborted) => aborted === 1,
      5_000,
      "the first request's provider call stopped",
    );
    expect(await idleMoney(gw)).toEqual(before);
    expect(await holdsInFlight(gw)).toBe(0);
    expect(received()).toBe("");
    // One row, the first's: the client left, nothing was charged. The others never ran.
    const all = (await logged(gw)) as Row[];
    const rows = all.slice(0, all.length - rowsBefore);
    expect(rows.map((r) => [r.state, r.error_code, r.status, r.cost_micro])).toEqual([
      ["failed", "client_closed", 499, 0],
    ]);
    expect(upstream.requests.length - sentBefore).toBe(1);
  });

  it("a request whose body is too large to wait for its turn runs at once, and stops when the client hangs up: neither is charged", async () => {
    const before = await money(gw);
    const rowsBefore = (await logged(gw)).length;
    const sentBefore = upstream.requests.length;
    const abortedBefore = upstream.aborted;
    const { socket } = await connection(gw);
    socket.write(
      wireRequest(chat("first", "slow-chat")) +
        wireRequest(chat(`second ${"long ".repeat(40_000)}`, "slow-chat")),
    );
    await eventually(
      async () => upstream.requests.length - sentBefore,
      (sent) => sent === 2,
      5_000,
      "both requests at the provider",
    );
    socket.destroy();

    await eventually(
      async () => upstream.aborted - abortedBefore,
      (aborted) => aborted === 2,
      5_000,
      "both provider calls stopped",
    );
    expect(await idleMoney(gw)).toEqual(before);
    expect(await holdsInFlight(gw)).toBe(0);
    const all = (await logged(gw)) as Row[];
    expect(
      all.slice(0, all.length - rowsBefore).map((r) => [r.state, r.error_code, r.cost_micro]),
    ).toEqual([
      ["failed", "client_closed", 0],
      ["failed", "client_closed", 0],
    ]);
  });

  it("answers pipelined requests in order, each settled, and serves on", async () => {
    const before = await money(gw);
    const rowsBefore = (await logged(gw)).length;
    const { socket, received } = await connection(gw);
    socket.write(
      wireRequest(chat("one [[mock:words=3]]")) +
        wireRequest(chat("two [[mock:words=6000]]", "mock-gpt", { stream: true })) +
        wireRequest(chat("three [[mock:words=3]]")),
    );
    const statuses = await eventually(
      async () => received().match(/HTTP\/1\.1 \d{3}/g) ?? [],
      (seen) => seen.length === 3 && received().endsWith("}"),
      10_000,
      "three answers",
    );
    expect(statuses).toEqual(["HTTP/1.1 200", "HTTP/1.1 200", "HTTP/1.1 200"]);
    const text = received();
    expect(text.indexOf('"object":"chat.completion"')).toBeLessThan(text.indexOf("[DONE]"));
    expect(text.lastIndexOf('"object":"chat.completion"')).toBeGreaterThan(text.indexOf("[DONE]"));
    socket.destroy();
    const after = await idleMoney(gw);
    const all = (await logged(gw)) as Row[];
    const rows = all.slice(0, all.length - rowsBefore);
    expect(rows.map((r) => r.state)).toEqual(["settled", "settled", "settled"]);
    expect(before.balance - after.balance).toBe(rows.reduce((sum, r) => sum + r.cost_micro, 0));
    expect(after.held).toBe(before.held);
  });
});

describe.each(backends)("a whole answer of another modality, its client gone (%s)", (backend) => {
  let gw: TestGateway;
  let openai: OpenAI;
  beforeAll(async () => {
    gw = await gatewayOn(backend, { config: config() });
    openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
  });
  afterAll(async () => {
    await gw?.close();
  });

  const twoSeconds = encodeWav(new Int16Array(16_000), 8_000);
  const calls: [string, string, (signal: AbortSignal) => Promise<unknown>][] = [
    [
      "an image",
      "images.generations",
      (signal) => openai.images.generate({ model: "slow-image", prompt: "a kite" }, { signal }),
    ],
    [
      "an embedding",
      "embeddings",
      (signal) => openai.embeddings.create({ model: "slow-embed", input: "a kite" }, { signal }),
    ],
    [
      "speech",
      "audio.speech",
      (signal) =>
        openai.audio.speech.create(
          { model: "slow-tts", input: "a kite", voice: "alloy" },
          { signal },
        ),
    ],
    [
      "a transcription",
      "audio.transcriptions",
      async (signal) =>
        openai.audio.transcriptions.create(
          { model: "slow-stt", file: await toFile(twoSeconds, "kite.wav") },
          { signal },
        ),
    ],
  ];

  it.each(calls)(
    "%s: logged client_closed (499), charged nothing, its provider call stopped",
    async (_what, endpoint, call) => {
      const before = await money(gw);
      const sentBefore = upstream.requests.length;
      const abortedBefore = upstream.aborted;
      const leaving = new AbortController();
      const answer = call(leaving.signal).catch((err: unknown) => err);
      await eventually(
        async () => upstream.requests.length - sentBefore,
        (sent) => sent === 1,
        5_000,
        "the request at the provider",
      );
      // Held while the provider works.
      expect((await money(gw)).held).toBeGreaterThan(0);
      leaving.abort();
      expect(await answer).toBeInstanceOf(OpenAI.APIUserAbortError);

      await eventually(
        async () => upstream.aborted - abortedBefore,
        (aborted) => aborted === 1,
        5_000,
        "the provider call stopped",
      );
      expect(await idleMoney(gw)).toEqual(before);
      expect(await holdsInFlight(gw)).toBe(0);
      const row = (await eventually(
        async () => ((await logged(gw)) as Row[]).find((r) => r.endpoint === endpoint),
        (found) => found !== undefined,
        5_000,
        "the request's row",
      )) as Row;
      expect([row.state, row.error_code, row.status, row.cost_micro]).toEqual([
        "failed",
        "client_closed",
        499,
        0,
      ]);
      // The gateway serves the next one.
      const next = await fetch(`${gw.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
        body: JSON.stringify(chat("still there?")),
      });
      expect(next.status).toBe(200);
    },
  );
});
