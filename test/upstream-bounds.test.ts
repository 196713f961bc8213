import { type IncomingMessage, request } from "node:http";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { errorOf, lastLogged, quota } from "./support/api.js";
import {
  credentialSeen,
  type FakeUpstream,
  fakeUpstream,
  openaiJson,
  openaiStreamSteps,
  type RecordedRequest,
  type Reply,
} from "./support/fake-upstream.js";
import {
  baseConfigWith,
  chat,
  KEY,
  post,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";
import { streamDataInText } from "./support/sse.js";

/**
 * Issue 29, point 4: upstreams that never finish are cut by the provider's bounds (a total time
 * for whole answers, an idle gap, a longest stream, a largest event), each as the spec's
 * upstream_error (503 before the stream's 200, its error event after), with nothing left held.
 * Before, a trickling stream was relayed until the client gave up, a dripped JSON answer was
 * read to its end whatever timeout_ms said, and an endless SSE line was buffered whole.
 */

const POOL_KEY = "sk-bounds-pool-0000";
const OWN_KEY = "sk-bounds-own-key-1111";
const BYOK_KEY = "kn-test-byok-bounds-key-00000000";
const limitBytes = 1024 * 1024;

/** What the route's next step answers. */
const nextStep = (req: RecordedRequest): Reply =>
  req.body.stream
    ? { kind: "sse", steps: openaiStreamSteps(["from", " the next step"]) }
    : openaiJson("from the next step");

let upstream: FakeUpstream;
let good: FakeUpstream;
let gw: TestGateway;

function provider(id: string, bounds: Partial<ProviderInput>): ProviderInput {
  return { id, wire: "openai", base_url: upstream.baseUrl, api_keys: [POOL_KEY], ...bounds };
}

type ProviderInput = NonNullable<ConfigInput["providers"]>[number];

const paid = { price_input_per_mtok: 10_000, price_output_per_mtok: 20_000 };

beforeAll(async () => {
  upstream = await fakeUpstream("openai");
  good = await fakeUpstream("openai", nextStep);
  gw = await testGateway({
    // Every cut here but the trickle's comes long before keepalives would commit the 200.
    keepaliveMs: 10_000,
    config: baseConfigWith({
      providers: () => [
        // Only the total bound can cut a dripped answer here: its gaps are far inside the idle one.
        provider("drip", { timeout_ms: 1_000, idle_timeout_ms: 10_000 }),
        // Only the stream's longest run can cut a trickle: its gaps are far inside the idle one.
        provider("trickle", { timeout_ms: 5_000, idle_timeout_ms: 10_000, max_stream_ms: 3_000 }),
        // Only the idle bound can cut a silence within the test's time.
        provider("silent", { timeout_ms: 10_000, idle_timeout_ms: 300 }),
        provider("endless", { max_event_bytes: limitBytes }),
        { id: "good", wire: "openai", base_url: good.baseUrl, api_keys: [POOL_KEY] },
      ],
      models: () => [
        { name: "drip-model", provider: "drip", ...paid },
        { name: "trickle-model", provider: "trickle", ...paid },
        { name: "silent-model", provider: "silent", ...paid },
        { name: "endless-model", provider: "endless", ...paid },
        { name: "good-model", provider: "good", ...paid },
      ],
      routes: () => [
        { name: "trickle-then-good", steps: ["trickle-model", "good-model"] },
        { name: "endless-then-good", steps: ["endless-model", "good-model"] },
        { name: "drip-then-good", steps: ["drip-model", "good-model"] },
      ],
      accounts: [
        {
          id: "own",
          balance_idr: 1_000_000,
          byok: [{ provider: "drip", key: OWN_KEY }],
          keys: [{ id: "kb", value: BYOK_KEY }],
        },
      ],
    }),
  });
});
afterAll(async () => {
  await gw?.close();
  await upstream?.close();
  await good?.close();
});
beforeEach(() => {
  upstream.reset();
  good.reset(nextStep);
});

const balance = (account = "acct") => gw.services.store.getAccount(account)!.balance_micro;

/** What the account's quota shows held by requests in flight. */
async function heldIdr(key = KEY): Promise<number> {
  return (await quota(gw, key)).held_idr;
}

/** A JSON answer dripped a byte at a time, `everyMs` apart: it would take minutes to arrive. */
function drippedJson(everyMs: number): Reply {
  const text = JSON.stringify(openaiJson("a".repeat(600)).body);
  return {
    kind: "drip",
    contentType: "application/json",
    everyMs,
    piece: (i) => text[i],
  };
}

/** A stream that starts with some content and then sends more every `everyMs`, forever. */
function trickle(everyMs: number): Reply {
  const [role, content] = openaiStreamSteps(["drop"]);
  const event = (step: { data: unknown }) => `data: ${JSON.stringify(step.data)}\n\n`;
  return {
    kind: "drip",
    contentType: "text/event-stream",
    everyMs,
    piece: (i) => (i === 0 ? event(role) + event(content) : event(content)),
  };
}

/** A stream whose only event is one line that never ends: 100 MB of it, as fast as it goes. */
function endlessLine(): Reply {
  const piece = "x".repeat(64 * 1024);
  const pieces = (100 * 1024 * 1024) / piece.length;
  return {
    kind: "drip",
    contentType: "text/event-stream",
    everyMs: 0,
    piece: (i) =>
      i === 0 ? 'data: {"choices":[{"delta":{"content":"' : i <= pieces ? piece : undefined,
  };
}

const streamed = (model: string, key = KEY) =>
  post(gw, "/v1/chat/completions", chat("hi", model, { stream: true }), {
    authorization: `Bearer ${key}`,
  });

/** The fake saw the gateway close the connection (bounded wait: the close is on its way). */
async function upstreamCut(fake: FakeUpstream = upstream): Promise<number> {
  for (let i = 0; i < 250 && fake.aborted === 0; i++) await new Promise((r) => setTimeout(r, 20));
  return fake.aborted;
}

describe("a whole answer's total time (timeout_ms)", () => {
  it("cuts a JSON answer dripped a byte every 200 ms: 503 upstream_error, nothing charged or held", async () => {
    upstream.queue(drippedJson(200));
    const before = balance();
    const res = await post(gw, "/v1/chat/completions", chat("hi", "drip-model"));
    expect(await errorOf(res)).toMatchObject({ status: 503, code: "upstream_error" });
    expect(await upstreamCut()).toBe(1);
    // Well short of the answer: cut as it dripped, not read to its end.
    expect(upstream.dripped).toBeLessThan(100);
    expect(balance()).toBe(before);
    expect(await heldIdr()).toBe(0);
  });

  it("the messages style hears it in its own shape", async () => {
    upstream.queue(drippedJson(200));
    const res = await post(gw, "/v1/messages", { ...chat("hi", "drip-model"), max_tokens: 50 });
    expect(res.status).toBe(503);
    expect(await res.json()).toMatchObject({ type: "error", error: { type: "api_error" } });
  });

  it("inside a route the next step answers", async () => {
    upstream.queue(drippedJson(200));
    const res = await post(gw, "/v1/chat/completions", chat("hi", "drip-then-good"));
    expect(res.status).toBe(200);
    const body = (await res.json()) as { choices: { message: { content: string } }[] };
    expect(body.choices[0].message.content).toBe("from the next step");
    expect(good.requests).toHaveLength(1);
  });

  it("in a BYOK chain the account's own key is cut and the gateway's pool key answers", async () => {
    upstream.queue(drippedJson(200), openaiJson("from the pool"));
    const res = await post(gw, "/v1/chat/completions", chat("hi", "drip-model"), {
      authorization: `Bearer ${BYOK_KEY}`,
    });
    expect(res.status).toBe(200);
    expect(upstream.requests.map(credentialSeen)).toEqual([OWN_KEY, POOL_KEY]);
    expect(await heldIdr(BYOK_KEY)).toBe(0);
  });
});

describe("a stream's longest run (max_stream_ms)", () => {
  it("ends a stream that trickles forever with the error event, charged for what was delivered, nothing held", async () => {
    upstream.queue(trickle(100));
    const before = balance();
    const res = await streamed("trickle-model");
    expect(res.status).toBe(200);
    const text = await res.text();
    const chunks = await streamDataInText(text);
    expect(chunks).not.toContain("[DONE]");
    expect(chunks.at(-1)).toMatchObject({ error: { code: "upstream_error" } });
    const delivered = chunks.slice(0, -1).map((c) => c.choices[0].delta.content);
    expect(delivered.filter((text) => text === "drop").length).toBeGreaterThan(0);
    expect(await upstreamCut()).toBe(1);
    expect(await heldIdr()).toBe(0);
    // What reached the client is paid for, as for any stream that broke.
    expect(balance()).toBeLessThan(before);
    expect((await lastLogged(gw)).output_tokens).toBeGreaterThan(0);
  });

  it("inside a route, a stream cut before it sent anything moves on to the next step", async () => {
    // Comments only: the client has been sent nothing of it.
    upstream.queue({
      kind: "drip",
      contentType: "text/event-stream",
      everyMs: 100,
      piece: () => ": still thinking\n\n",
    });
    const res = await streamed("trickle-then-good");
    expect(res.status).toBe(200);
    const text = await res.text();
    const content = (await streamDataInText(text))
      .filter((c) => c !== "[DONE]")
      .map((c) => c.choices?.[0]?.delta?.content ?? "")
      .join("");
    expect(content).toBe("from the next step");
    expect(text).toContain("data: [DONE]");
    expect(await heldIdr()).toBe(0);
  });
});

describe("the idle gap between upstream bytes (idle_timeout_ms)", () => {
  it("cuts a stream that goes silent after its headers: 503 upstream_error before the 200", async () => {
    upstream.queue({ kind: "sse", steps: [{ data: "never", delayMs: 5_000 }] });
    const res = await streamed("silent-model");
    expect(await errorOf(res)).toMatchObject({ status: 503, code: "upstream_error" });
    expect(await heldIdr()).toBe(0);
  });
});

describe("the largest event (max_event_bytes)", () => {
  it("cuts an endless SSE line once it passes the bound, having read little more than the bound", async () => {
    upstream.queue(endlessLine());
    const before = balance();
    const res = await streamed("endless-model");
    expect(await errorOf(res)).toMatchObject({ status: 503, code: "upstream_error" });
    expect(await upstreamCut()).toBe(1);
    // The 100 MB were never read: the fake wrote only what the bound and the socket buffers took.
    expect(upstream.dripped, `${upstream.dripped} bytes written`).toBeLessThan(16 * limitBytes);
    expect(balance()).toBe(before);
    expect(await heldIdr()).toBe(0);
  });

  it("inside a route the next step answers", async () => {
    upstream.queue(endlessLine());
    const res = await streamed("endless-then-good");
    expect(res.status).toBe(200);
    expect(await res.text()).toContain("the next step");
  });
});

/** A stream of 1 KB chat chunks, 200 MB of them, written as fast as the connection takes them. */
function flood(): Reply {
  const [role, content] = openaiStreamSteps(["x".repeat(1024)]);
  const event = (step: { data: unknown }) => `data: ${JSON.stringify(step.data)}\n\n`;
  const first = event(role);
  const next = event(content);
  return {
    kind: "drip",
    contentType: "text/event-stream",
    everyMs: 0,
    piece: (i) => (i === 0 ? first : i < (200 * 1024 * 1024) / next.length ? next : undefined),
  };
}

/** What the fake has written once it stops writing (it did not move for a few polls), bounded. */
async function settledDrip(): Promise<number> {
  let last = -1;
  for (let still = 0, i = 0; still < 4 && i < 400; i++) {
    await new Promise((r) => setTimeout(r, 50));
    still = upstream.dripped === last ? still + 1 : 0;
    last = upstream.dripped;
  }
  return last;
}

describe("a client that stops reading a stream", () => {
  it("holds the provider back (its connection paused) and lets it go on once the client reads again", async () => {
    upstream.queue(flood());
    const body = JSON.stringify(chat("hi", "endless-model", { stream: true }));
    const client = request(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      agent: false,
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
    });
    const res = await new Promise<IncomingMessage>((resolve) => {
      client.once("response", resolve);
      client.end(body);
    });
    expect(res.statusCode).toBe(200);
    let received = 0;
    res.on("data", (part: Buffer) => {
      received += part.length;
    });
    res.pause();
    // Held back by the socket buffers on the way and the gateway's bounded queue, not 200 MB.
    const held = await settledDrip();
    expect(held, `${held} bytes written while the client read nothing`).toBeLessThan(48 << 20);
    res.resume();
    // Read again: the gateway resumes its upstream connection, and the fake writes on.
    for (let i = 0; i < 250 && upstream.dripped < held + (4 << 20); i++)
      await new Promise((r) => setTimeout(r, 20));
    expect(upstream.dripped).toBeGreaterThan(held + (4 << 20));
    expect(received).toBeGreaterThan(4 << 20);
    client.destroy();
    expect(await upstreamCut()).toBe(1);
  });
});
