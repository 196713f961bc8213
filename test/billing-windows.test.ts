import { afterEach, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { errorOf, quota } from "./support/api.js";
import {
  deferred,
  type FakeUpstream,
  fakeUpstream,
  openaiStreamSteps,
} from "./support/fake-upstream.js";
import {
  backends,
  baseConfig,
  baseConfigWith,
  chat,
  gatewayOn,
  post,
  type TestGateway,
} from "./support/gateway.js";

/** Paying over time: holds taken in one window and settled in the next, on a manual clock. */

let gw: TestGateway | undefined;
let upstream: FakeUpstream | undefined;
afterEach(async () => {
  await gw?.close();
  await upstream?.close();
  gw = undefined;
  upstream = undefined;
});

const START = Date.parse("2030-01-01T00:00:00Z");

function subscribedOn(baseUrl: string, quotaPerHour: number, extra: object = {}): ConfigInput {
  return baseConfigWith({
    providers: [{ id: "fake", wire: "openai", base_url: baseUrl, api_keys: ["sk-x"] }],
    models: [
      { name: "slow", provider: "fake", price_input_per_mtok: 1000, price_output_per_mtok: 1000 },
    ],
    accounts: (accounts) => [
      {
        ...accounts[0],
        balance_idr: 0,
        subscription: {
          windows: [{ name: "1h", seconds: 3600, quota: quotaPerHour }],
          started_at: START,
          payg_fallback: false,
          free_fallback: false,
          ...extra,
        },
      },
    ],
  });
}

/** Opens a stream on `slow` whose end waits for `release`; resolves once its first piece arrived. */
async function openGatedStream(gw: TestGateway, up: FakeUpstream) {
  const gate = deferred();
  const steps = openaiStreamSteps(["one", "two"]);
  steps[2] = { ...steps[2], gate: gate.promise };
  up.queue({ kind: "sse", steps });
  const res = await post(gw, "/v1/chat/completions", chat("long", "slow", { stream: true }));
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = "";
  while (!text.includes("one")) {
    const { value, done } = await reader.read();
    if (done) break;
    text += decoder.decode(value);
  }
  return {
    finish: async () => {
      gate.resolve();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        text += decoder.decode(value);
      }
      return text;
    },
  };
}

describe.each(backends)("subscription windows over time on %s", (backend) => {
  it("a stream held in one window and settled in the next counts once, in its own window, and the next window's count stays", async () => {
    upstream = await fakeUpstream("openai");
    gw = await gatewayOn(backend, {
      config: subscribedOn(upstream.baseUrl, 1),
      clock: "manual",
      now: () => START + 30 * 60_000,
    });
    const long = await openGatedStream(gw, upstream);
    // The next window: the held stream belongs to the one before.
    gw.clock.set(new Date(START + 70 * 60_000));
    expect((await post(gw, "/v1/chat/completions", chat("b", "mock-gpt"))).status).toBe(200);
    expect(await long.finish()).toContain("[DONE]");
    // The new window's one request is used: the next is refused, and the quota says so.
    const next = await post(gw, "/v1/chat/completions", chat("c", "mock-gpt"));
    expect(next.status).toBe(429);
    expect(await errorOf(next)).toMatchObject({ code: "plan_limit_reached" });
    expect((await quota(gw)).subscription!.windows[0]).toMatchObject({ used: 1, remaining: 0 });
  });

  it("the quota's remaining window count agrees with the refusal while a request holds", async () => {
    upstream = await fakeUpstream("openai");
    gw = await gatewayOn(backend, {
      config: subscribedOn(upstream.baseUrl, 1),
      clock: "manual",
      now: () => START + 10 * 60_000,
    });
    const long = await openGatedStream(gw, upstream);
    const refused = await errorOf(await post(gw, "/v1/chat/completions", chat("c", "mock-gpt")));
    expect(refused).toMatchObject({ status: 429, code: "plan_limit_reached" });
    const shown = (await quota(gw)).subscription!.windows[0];
    await long.finish();
    expect(shown.remaining).toBe(0);
  });

  it("n answers count one request in a window that counts requests", async () => {
    upstream = await fakeUpstream("openai");
    gw = await gatewayOn(backend, {
      config: subscribedOn(upstream.baseUrl, 2),
      clock: "manual",
      now: () => START + 10 * 60_000,
    });
    expect(
      (await post(gw, "/v1/chat/completions", chat("n", "mock-gpt", { n: 3, max_tokens: 5 })))
        .status,
    ).toBe(200);
    expect((await quota(gw)).subscription!.windows[0]).toMatchObject({ used: 1, remaining: 1 });
  });
});

describe.each(backends)("the free day's edges on %s", (backend) => {
  it("at 23:59:59.999 the refusal waits 1 s, and at 00:00:00 the next day is admitted", async () => {
    gw = await gatewayOn(backend, {
      config: baseConfig({
        tiers: { free: { free_rpm: 100, free_daily: 1, burst_spacing_ms: 0 } },
      }),
      clock: "manual",
      now: () => Date.parse("2030-01-01T23:59:59.000Z"),
    });
    expect((await post(gw, "/v1/chat/completions", chat("a", "mock-gpt:free"))).status).toBe(200);
    gw.clock.set(new Date("2030-01-01T23:59:59.999Z"));
    const refused = await errorOf(
      await post(gw, "/v1/chat/completions", chat("b", "mock-gpt:free")),
    );
    expect(refused).toMatchObject({ status: 429, code: "free_quota_daily", retryAfter: "1" });
    gw.clock.set(new Date("2030-01-02T00:00:00.000Z"));
    expect((await post(gw, "/v1/chat/completions", chat("c", "mock-gpt:free"))).status).toBe(200);
    const q = await quota(gw);
    expect(q.free).toMatchObject({
      daily_used: 1,
      daily_remaining: 0,
      resets_at: "2030-01-03T00:00:00.000Z",
    });
  });
});
