import { afterEach, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { admin, burst, errorOf, quota } from "./support/api.js";
import {
  backends,
  baseConfigWith,
  chat,
  gatewayOn,
  KEY,
  post,
  SHARED_KEY,
  type TestGateway,
} from "./support/gateway.js";

/**
 * Per-minute limits count in windows of the wall clock's minutes: a test on the real clock that
 * straddled a minute's end saw its count start again (now and then, on a loaded machine). These
 * tests hold the gateway's clock at a minute's start; it moves only when every request in flight
 * waits on it (a free request's burst spacing).
 */
const held = { clock: "manual", now: () => Date.parse("2030-01-01T10:00:00Z") } as const;

let gw: TestGateway | undefined;
afterEach(async () => {
  await gw?.close();
  gw = undefined;
});

type Account = NonNullable<ConfigInput["accounts"]>[number];
function config(
  account: Partial<Account> = {},
  tiers: ConfigInput["tiers"] = {},
  models: ConfigInput["models"] = [],
): ConfigInput {
  return baseConfigWith({
    tiers,
    models,
    accounts: (accounts) => [{ ...accounts[0], ...account } as Account, accounts[1]],
  });
}

const messages = (model = "mock-gpt") => ({
  model,
  max_tokens: 50,
  messages: [{ role: "user", content: "hi" }],
});
const responses = (model = "mock-gpt") => ({ model, input: "hi" });

// One suite, two backends: the payment decision exists for SQLite (billing/payment.ts) and in
// PL/pgSQL for Postgres, and both must decide alike.
describe.each(backends)("limits on %s", (backend) => {
  describe("account per-minute limit for paid models", () => {
    it("admits exactly its number under parallel load, then 429 rate_limit_exceeded without Retry-After", async () => {
      gw = await gatewayOn(backend, { ...held, config: config({ rpm_limit: 5 }) });
      const results = await burst(20, () => post(gw!, "/v1/chat/completions", chat()));
      expect(results.filter((r) => r.status === 200)).toHaveLength(5);
      const limited = results.filter((r) => r.status === 429);
      expect(limited).toHaveLength(15);
      const err = await errorOf(limited[0]);
      expect(err).toMatchObject({
        code: "rate_limit_exceeded",
        type: "rate_limit_exceeded",
        message: "Rate limit of 5 requests per minute reached for this account.",
        retryAfter: null,
      });
    });

    it("moves with the gateway's clock: 429, then admitted once the clock is 60 s on", async () => {
      gw = await gatewayOn(backend, {
        config: config(
          { rpm_limit: 2 },
          { free: { free_rpm: 100, free_daily: 1, burst_spacing_ms: 0 } },
        ),
        clock: "manual",
        now: () => Date.parse("2030-01-01T23:00:00Z"),
      });
      expect((await post(gw, "/v1/chat/completions", chat("x", "mock-gpt:free"))).status).toBe(200);
      expect((await post(gw, "/v1/chat/completions", chat())).status).toBe(200);
      expect((await post(gw, "/v1/chat/completions", chat())).status).toBe(200);
      expect(await errorOf(await post(gw, "/v1/chat/completions", chat()))).toMatchObject({
        status: 429,
        code: "rate_limit_exceeded",
        retryAfter: null,
      });
      gw.clock.advance(60_000);
      expect((await post(gw, "/v1/chat/completions", chat())).status).toBe(200);
      // The free day still ends at midnight UTC, now 59 minutes away.
      expect(
        await errorOf(await post(gw, "/v1/chat/completions", chat("x", "mock-gpt:free"))),
      ).toMatchObject({ code: "free_quota_daily", retryAfter: "3540" });
    });

    it("is shared by chat completions, messages and responses, in each route's style", async () => {
      gw = await gatewayOn(backend, { ...held, config: config({ rpm_limit: 3 }) });
      expect((await post(gw, "/v1/chat/completions", chat())).status).toBe(200);
      expect((await post(gw, "/v1/messages", messages())).status).toBe(200);
      expect((await post(gw, "/v1/responses", responses())).status).toBe(200);
      const m = await post(gw, "/v1/messages", messages());
      expect(m.status).toBe(429);
      expect(m.headers.get("retry-after")).toBeNull();
      expect(await m.json()).toMatchObject({ type: "error", error: { type: "rate_limit_error" } });
      expect((await post(gw, "/v1/responses", responses())).status).toBe(429);
    });

    it("does not count :free models, /v1/models or the quota endpoint", async () => {
      gw = await gatewayOn(backend, {
        ...held,
        config: config(
          { rpm_limit: 2 },
          { free: { free_rpm: 100, free_daily: 100, burst_spacing_ms: 0 } },
        ),
      });
      for (let i = 0; i < 3; i++)
        expect((await post(gw, "/v1/chat/completions", chat("x", "mock-gpt:free"))).status).toBe(
          200,
        );
      await fetch(`${gw.url}/v1/models`);
      await quota(gw);
      expect((await post(gw, "/v1/chat/completions", chat())).status).toBe(200);
      expect((await post(gw, "/v1/chat/completions", chat())).status).toBe(200);
      expect((await post(gw, "/v1/chat/completions", chat())).status).toBe(429);
    });
  });

  describe("free models", () => {
    it("applies the tier's per-minute limit: 429 free_quota_rpm with Retry-After, rate headers on success", async () => {
      gw = await gatewayOn(backend, {
        ...held,
        config: config({}, { free: { free_rpm: 3, free_daily: 100, burst_spacing_ms: 0 } }),
      });
      const ok = await post(gw, "/v1/chat/completions", chat("x", "mock-gpt:free"));
      expect(ok.status).toBe(200);
      expect(ok.headers.get("x-ratelimit-limit")).toBe("3");
      expect(ok.headers.get("x-ratelimit-remaining")).toBe("2");
      // The window is the clock's minute: it ends at 10:01.
      expect(ok.headers.get("x-ratelimit-reset")).toBe(
        String(Date.parse("2030-01-01T10:01:00Z") / 1000),
      );
      await post(gw, "/v1/chat/completions", chat("x", "mock-gpt:free"));
      await post(gw, "/v1/chat/completions", chat("x", "mock-gpt:free"));
      const err = await errorOf(await post(gw, "/v1/chat/completions", chat("x", "mock-gpt:free")));
      expect(err).toMatchObject({ status: 429, code: "free_quota_rpm" });
      expect(err.retryAfter).toBe("60");
      const m = await post(gw, "/v1/messages", messages("mock-gpt:free"));
      expect(m.status).toBe(429);
      expect(m.headers.get("retry-after")).not.toBeNull();
      expect(((await m.json()) as { error: { type: string } }).error.type).toBe("rate_limit_error");
      expect((await quota(gw)).free).toMatchObject({
        daily_limit: 100,
        daily_used: 3,
        daily_remaining: 97,
        requests_per_minute: 3,
      });
    });

    it("counts only successful requests against the daily allowance, then 429 free_quota_daily until 00:00 UTC", async () => {
      const now = Date.parse("2026-11-22T23:00:00Z");
      let clock = now;
      gw = await gatewayOn(backend, {
        config: config({}, { free: { free_rpm: 100, free_daily: 2, burst_spacing_ms: 0 } }),
        now: () => clock,
      });
      expect(
        (await post(gw, "/v1/chat/completions", chat("[[mock:fail=503]]", "mock-gpt:free"))).status,
      ).toBe(503);
      expect((await post(gw, "/v1/chat/completions", chat("x", "mock-gpt:free"))).status).toBe(200);
      expect((await post(gw, "/v1/chat/completions", chat("x", "mock-gpt:free"))).status).toBe(200);
      const err = await errorOf(await post(gw, "/v1/chat/completions", chat("x", "mock-gpt:free")));
      expect(err).toMatchObject({ status: 429, code: "free_quota_daily", retryAfter: "3600" });
      clock = Date.parse("2026-11-23T00:00:01Z");
      expect((await post(gw, "/v1/chat/completions", chat("x", "mock-gpt:free"))).status).toBe(200);
    });

    it("spaces bursts out instead of rejecting them, up to a bound, then 429 rate_limit_exceeded", async () => {
      // A held clock: the six arrive at one instant of the gateway's time however slowly a loaded
      // machine sends them, and a spaced one answers only once the clock passes its slot.
      gw = await gatewayOn(backend, {
        config: config(
          {},
          { free: { free_rpm: 100, free_daily: 100, burst_spacing_ms: 100, burst_queue: 3 } },
        ),
        clock: "manual",
        autoAdvance: false,
      });
      const answered: Response[] = [];
      let counted = () => {};
      const sent = Array.from({ length: 6 }, () =>
        post(gw!, "/v1/chat/completions", chat("x", "mock-gpt:free")).then((res) => {
          answered.push(res);
          counted();
        }),
      );
      const answers = (count: number) =>
        new Promise<void>((resolve) => {
          counted = () => {
            if (answered.length >= count) resolve();
          };
          counted();
        });
      // One at once; three wait in the queue, which is full, so the last two are refused.
      await answers(3);
      expect(answered.map((r) => r.status).sort()).toEqual([200, 429, 429]);
      expect(
        answered.find((r) => r.status === 200)!.headers.get("x-gateway-burst-wait-ms"),
      ).toBeNull();
      const rejected = answered.find((r) => r.status === 429)!;
      expect(await errorOf(rejected)).toMatchObject({ code: "rate_limit_exceeded" });
      // Each step of the clock lets exactly the next one through, 100 ms after the one before.
      for (const waited of [100, 200, 300]) {
        gw.clock.advance(100);
        await answers(3 + waited / 100);
        expect(answered).toHaveLength(3 + waited / 100);
        const spaced = answered[answered.length - 1];
        expect(spaced.status).toBe(200);
        expect(spaced.headers.get("x-gateway-burst-wait-ms")).toBe(String(waited));
      }
      await Promise.all(sent);
    });

    it("enforces a model's token budget over its window", async () => {
      gw = await gatewayOn(backend, {
        ...held,
        config: config({}, { free: { free_rpm: 100, free_daily: 100, burst_spacing_ms: 0 } }, [
          {
            name: "budget:free",
            provider: "mock",
            free_token_budget: { tokens: 40, window_seconds: 3600 },
          },
        ]),
      });
      let status = 200;
      let served = 0;
      while (status === 200 && served < 20) {
        status = (await post(gw, "/v1/chat/completions", chat("spend tokens", "budget:free")))
          .status;
        if (status === 200) served++;
      }
      expect(served).toBeGreaterThan(0);
      expect(served).toBeLessThan(20);
      const err = await errorOf(await post(gw, "/v1/chat/completions", chat("x", "budget:free")));
      expect(err).toMatchObject({ status: 429, code: "rate_limit_exceeded" });
    });

    it("moves an account to a higher tier on a top-up, raising its free limits", async () => {
      gw = await gatewayOn(backend, {
        ...held,
        config: config(
          {},
          {
            free: { rank: 0, free_rpm: 1, free_daily: 1, burst_spacing_ms: 0 },
            paid: {
              rank: 1,
              free_rpm: 50,
              free_daily: 500,
              burst_spacing_ms: 0,
              min_topup_idr: 10_000,
            },
          },
        ),
      });
      expect((await post(gw, "/v1/chat/completions", chat("x", "mock-gpt:free"))).status).toBe(200);
      expect((await post(gw, "/v1/chat/completions", chat("x", "mock-gpt:free"))).status).toBe(429);
      await admin(gw, "POST", "/accounts/acct/topup", { amount_idr: 5_000 });
      expect((await quota(gw)).tier).toBe("free");
      await admin(gw, "POST", "/accounts/acct/topup", { amount_idr: 10_000 });
      const q = await quota(gw);
      expect(q.tier).toBe("paid");
      expect(q.free.daily_limit).toBe(500);
      expect((await post(gw, "/v1/chat/completions", chat("x", "mock-gpt:free"))).status).toBe(200);
    });
  });

  describe("subscriptions and tiers", () => {
    it("moves an account to the subscription's tier, raising its free limits", async () => {
      gw = await gatewayOn(backend, {
        ...held,
        config: config(
          {},
          {
            free: { rank: 0, free_rpm: 1, free_daily: 1, burst_spacing_ms: 0 },
            pro: { rank: 2, free_rpm: 100, free_daily: 900, burst_spacing_ms: 0 },
          },
        ),
      });
      const patched = await admin(gw, "PATCH", "/accounts/acct", {
        subscription: {
          plan: "pro",
          tier: "pro",
          windows: [{ name: "day", seconds: 86_400, quota: 10 }],
        },
      });
      expect(patched.status).toBe(200);
      const q = await quota(gw);
      expect(q.tier).toBe("pro");
      expect(q.free).toMatchObject({ daily_limit: 900, requests_per_minute: 100 });
      for (let i = 0; i < 3; i++) {
        expect((await post(gw, "/v1/chat/completions", chat("x", "mock-gpt:free"))).status).toBe(
          200,
        );
      }
    });
  });

  describe("shared keys", () => {
    const shared = { authorization: `Bearer ${SHARED_KEY}` };

    it("limits each client IP to 30 per minute with a plain-text 429", async () => {
      gw = await gatewayOn(backend, held);
      const results = await burst(31, () => post(gw!, "/v1/chat/completions", chat(), shared));
      const limited = results.filter((r) => r.status === 429);
      expect(limited.length).toBeGreaterThanOrEqual(1);
      const plain = limited.find((r) => r.headers.get("content-type")?.startsWith("text/plain"))!;
      expect(await plain.text()).toBe("too many requests, try again shortly");
      expect(
        (await post(gw, "/v1/chat/completions", chat(), { authorization: `Bearer ${KEY}` })).status,
      ).toBe(200);
    });

    it("paces the key as a whole to a share of the account limit", async () => {
      gw = await gatewayOn(backend, { ...held, config: config({ rpm_limit: 10 }) });
      const results = await burst(8, () => post(gw!, "/v1/chat/completions", chat(), shared));
      expect(results.filter((r) => r.status === 200)).toHaveLength(5);
      expect((await errorOf(results.find((r) => r.status === 429)!)).code).toBe(
        "rate_limit_exceeded",
      );
      expect((await post(gw, "/v1/chat/completions", chat())).status).toBe(200);
    });

    it("cannot read the account quota: 403 shared_key_not_allowed", async () => {
      gw = await gatewayOn(backend, held);
      const res = await fetch(`${gw.url}/v1/account/quota`, { headers: shared });
      expect(await errorOf(res)).toMatchObject({
        status: 403,
        code: "shared_key_not_allowed",
        type: "shared_key_not_allowed",
      });
    });

    it("cannot read the account's usage (every key's requests and costs): 403 shared_key_not_allowed", async () => {
      gw = await gatewayOn(backend, held);
      for (const report of ["summary", "daily", "requests"]) {
        const res = await fetch(`${gw.url}/v1/usage/${report}`, { headers: shared });
        expect(await errorOf(res)).toMatchObject({ status: 403, code: "shared_key_not_allowed" });
        const own = { authorization: `Bearer ${KEY}` };
        expect((await fetch(`${gw.url}/v1/usage/${report}`, { headers: own })).status).toBe(200);
      }
    });
  });
});
