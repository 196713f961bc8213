import { randomBytes } from "node:crypto";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { afterEach, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { secretKeyEnv } from "../src/store/secret-box.js";
import { errorOf, quota } from "./support/api.js";
import {
  credentialSeen,
  type FakeUpstream,
  fakeUpstream,
  openaiError,
  openaiJson,
} from "./support/fake-upstream.js";
import {
  backends,
  baseConfigWith,
  type ConfigAdditions,
  chat,
  gatewayOn,
  KEY,
  post,
  SHARED_KEY,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";
import { createTestDatabase } from "./support/postgres.js";

/** An adversarial client of dispatch and limits: each test is a fault found, named for the spec's behaviour. */

const held = { clock: "manual", now: () => Date.parse("2030-01-01T10:00:00Z") } as const;

let gw: TestGateway | undefined;
afterEach(async () => {
  await gw?.close();
  gw = undefined;
});

type Account = NonNullable<ConfigInput["accounts"]>[number];
function config(account: Partial<Account> = {}, extra: ConfigAdditions = {}): ConfigInput {
  return baseConfigWith({
    accounts: (accounts) => [{ ...accounts[0], ...account } as Account, accounts[1]],
    ...extra,
  });
}

describe.each(backends)("shared keys and the owner's per-minute limit, on %s", (backend) => {
  it("a shared key refused for its share does not use up the owner's per-minute limit", async () => {
    // Spec, Limits: a shared key is "paced as a whole so sharers cannot exhaust the owner's
    // account limit"; DECISIONS: a shared key may use half of its account's per-minute limit.
    gw = await gatewayOn(backend, { ...held, config: config({ rpm_limit: 10 }) });
    const shared = { authorization: `Bearer ${SHARED_KEY}` };
    const statuses: number[] = [];
    for (let i = 0; i < 12; i++)
      statuses.push((await post(gw, "/v1/chat/completions", chat(), shared)).status);
    expect(statuses.filter((s) => s === 200)).toHaveLength(5);
    expect(statuses.filter((s) => s === 429)).toHaveLength(7);
    // The owner still has the other half of the minute: 10 - 5 = 5 requests.
    const owner: number[] = [];
    for (let i = 0; i < 6; i++) owner.push((await post(gw, "/v1/chat/completions", chat())).status);
    expect(owner).toEqual([200, 200, 200, 200, 200, 429]);
    expect(await errorOf(await post(gw, "/v1/chat/completions", chat()))).toMatchObject({
      code: "rate_limit_exceeded",
      retryAfter: null,
    });
  });
});

describe("provider key pools", () => {
  let upstream: FakeUpstream | undefined;
  afterEach(async () => {
    await upstream?.close();
    upstream = undefined;
  });

  it.each([
    { cooldown_ms: 60_000, retryAfter: "0", rests: "its cooldown_ms, a shorter Retry-After aside" },
    { cooldown_ms: 1, retryAfter: "60", rests: "the longer Retry-After the upstream asked for" },
  ])("a key that got 429 rests $rests", async ({ cooldown_ms, retryAfter }) => {
    // docs/configuration.md, providers[]: cooldown_ms is how long a key that got 429 rests at
    // least; DECISIONS: a key that got 429 cools down.
    upstream = await fakeUpstream("openai");
    let limited = false;
    upstream.handle((req) => {
      if (credentialSeen(req) === "sk-pool-A" && !limited) {
        limited = true;
        return {
          ...openaiError(429, "slow down", "rate_limit_exceeded"),
          headers: { "retry-after": retryAfter },
        };
      }
      return openaiJson("ok");
    });
    gw = await testGateway({
      ...held,
      config: baseConfigWith({
        providers: [
          {
            id: "pooled",
            wire: "openai",
            base_url: upstream.baseUrl,
            api_keys: ["sk-pool-A", "sk-pool-B"],
            cooldown_ms,
          },
        ],
        models: [{ name: "pooled", provider: "pooled", price_input_per_mtok: 1 }],
      }),
    });
    expect((await post(gw, "/v1/chat/completions", chat("x", "pooled"))).status).toBe(429);
    for (let i = 0; i < 3; i++) {
      // Past the shorter of the two rests, within the longer.
      gw.clock.advance(10_000);
      expect((await post(gw, "/v1/chat/completions", chat("x", "pooled"))).status).toBe(200);
    }
    // Round robin would give A back at once; A rests the longer time, so B serves every request.
    expect(upstream.requests.map(credentialSeen)).toEqual([
      "sk-pool-A",
      "sk-pool-B",
      "sk-pool-B",
      "sk-pool-B",
    ]);
  });
});

describe.each(backends)("routes to :free models on %s", (backend) => {
  it("a route whose steps are :free models counts against the free daily allowance, then 429 free_quota_daily", async () => {
    // Spec, Limits: ":free models count against free limits instead"; the free daily quota counts
    // successful requests per account and answers 429 free_quota_daily with Retry-After to 00:00 UTC.
    gw = await gatewayOn(backend, {
      ...held,
      config: baseConfigWith({
        tiers: { free: { free_rpm: 100, free_daily: 1, burst_spacing_ms: 0 } },
        routes: [{ name: "free-route", steps: ["mock-gpt:free"] }],
      }),
    });
    expect((await post(gw, "/v1/chat/completions", chat("x", "free-route"))).status).toBe(200);
    expect((await quota(gw)).free.daily_used).toBe(1);
    expect(
      await errorOf(await post(gw, "/v1/chat/completions", chat("x", "free-route"))),
    ).toMatchObject({
      status: 429,
      code: "free_quota_daily",
      retryAfter: String(14 * 3600),
    });
  });
});

describe.each(backends)("refusals the spec says not to retry, on %s", (backend) => {
  /** A fetch that counts what an SDK sends, its retries included. */
  function counting(): { fetch: typeof fetch; sent: () => number } {
    let sent = 0;
    return {
      fetch: (input, init) => {
        sent++;
        return fetch(input, init);
      },
      sent: () => sent,
    };
  }

  it("free_quota_daily and plan_limit_reached carry x-should-retry: false, so both SDKs ask once", async () => {
    // Spec, client retry guidance: do not retry free_quota_daily or plan_limit_reached. The SDKs
    // retry every 429 twice by default unless the answer says x-should-retry: false.
    gw = await gatewayOn(backend, {
      ...held,
      config: config(
        {
          subscription: {
            plan: "pro",
            windows: [{ name: "5h", seconds: 18_000, quota: 1 }],
            payg_fallback: false,
            free_fallback: false,
          },
        },
        { tiers: { free: { free_rpm: 100, free_daily: 1, burst_spacing_ms: 0 } } },
      ),
    });
    expect((await post(gw, "/v1/chat/completions", chat("x", "mock-gpt:free"))).status).toBe(200);
    expect((await post(gw, "/v1/chat/completions", chat("x", "mock-pro"))).status).toBe(200);
    for (const model of ["mock-gpt:free", "mock-pro"]) {
      const code = model === "mock-pro" ? "plan_limit_reached" : "free_quota_daily";
      const viaOpenai = counting();
      const openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, fetch: viaOpenai.fetch });
      await expect(
        openai.chat.completions.create({ model, messages: [{ role: "user", content: "x" }] }),
      ).rejects.toMatchObject({ status: 429, code });
      expect(viaOpenai.sent(), `openai SDK requests for ${code}`).toBe(1);
      const viaAnthropic = counting();
      const anthropic = new Anthropic({ apiKey: KEY, baseURL: gw.url, fetch: viaAnthropic.fetch });
      await expect(
        anthropic.messages.create({
          model,
          max_tokens: 16,
          messages: [{ role: "user", content: "x" }],
        }),
      ).rejects.toMatchObject({ status: 429 });
      expect(viaAnthropic.sent(), `anthropic SDK requests for ${code}`).toBe(1);
    }
  });
});

/**
 * Held up (kept as coverage): two in-process gateways on one Postgres database hold the
 * per-minute limit with leases out (multi-instance.test.ts's limit of 10 is too small for a lease)
 * and a PAYG limit (accounts with PAYG get no leases) exactly under concurrent requests.
 */
describe("two gateways on one Postgres (in process)", () => {
  let a: TestGateway | undefined;
  let b: TestGateway | undefined;
  afterEach(async () => {
    await Promise.all([a?.close(), b?.close()]);
    a = b = undefined;
  });
  async function pair(cfg: ConfigInput) {
    process.env[secretKeyEnv] ??= randomBytes(32).toString("base64");
    const db = await createTestDatabase();
    a = await testGateway({ ...held, config: cfg, db });
    b = await testGateway({ ...held, config: cfg, db });
    return [a, b] as const;
  }

  it("hold the per-minute limit together when leases are out: exactly rpm_limit of 3x as many", async () => {
    const [ga, gb] = await pair(config({ rpm_limit: 80 }));
    // 100 connections a gateway: under its 128 per address.
    const results = await Promise.all(
      Array.from({ length: 200 }, (_, i) =>
        post(i % 2 ? gb : ga, "/v1/chat/completions", chat()).then((r) => r.status),
      ),
    );
    expect(results.filter((s) => s === 200)).toHaveLength(80);
    expect(results.filter((s) => s === 429)).toHaveLength(120);
  });

  it("hold a PAYG limit together: exactly N of 3N", async () => {
    const cfg = config(
      { rpm_limit: 100_000, balance_idr: 0, payg: { enabled: true, limit_idr: 7 * 60 } },
      {
        models: [{ name: "per-request", provider: "mock", price_per_request: 7 }],
      },
    );
    const [ga, gb] = await pair(cfg);
    const results = await Promise.all(
      Array.from({ length: 180 }, (_, i) =>
        post(i % 2 ? gb : ga, "/v1/chat/completions", chat("x", "per-request")).then(
          (r) => r.status,
        ),
      ),
    );
    expect(results.filter((s) => s === 200)).toHaveLength(60);
    expect(results.filter((s) => s === 402)).toHaveLength(120);
  });
});
