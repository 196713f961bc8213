import Anthropic from "@anthropic-ai/sdk";
import { afterEach, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { admin, burst, errorOf, quota } from "./support/api.js";
import {
  backends,
  baseConfig,
  baseConfigWith,
  chat,
  gatewayOn,
  KEY,
  post,
  type TestGateway,
} from "./support/gateway.js";
import { streamData } from "./support/sse.js";

let gw: TestGateway | undefined;
afterEach(async () => {
  await gw?.close();
  gw = undefined;
});

function withAccount(
  account: Partial<NonNullable<ConfigInput["accounts"]>[number]>,
  extra: Partial<ConfigInput> = {},
): ConfigInput {
  return baseConfigWith({
    models: [...(extra.models ?? [])],
    accounts: (accounts) => [
      { ...accounts[0], ...account } as NonNullable<ConfigInput["accounts"]>[number],
      accounts[1],
    ],
  });
}

const messagesBody = (content = "hi", model = "mock-gpt", extra: object = {}) => ({
  model,
  max_tokens: 100,
  messages: [{ role: "user", content }],
  ...extra,
});

const micro = (idr: number) => Math.round(idr * 1_000_000);
const PAYG_KEY = "kn-test-payg-account-key-0000000";

// One suite, two backends: the payment decision exists for SQLite (billing/payment.ts) and in
// PL/pgSQL for Postgres, and both must decide alike.
describe.each(backends)("billing on %s", (backend) => {
  describe("paid models", () => {
    it("charges exactly the token prices from usage, in integer IDR micro-units", async () => {
      gw = await gatewayOn(backend, { config: withAccount({ balance_idr: 1_000 }) });
      const before = await quota(gw);
      const res = await post(gw, "/v1/chat/completions", chat("price me"));
      const body = (await res.json()) as {
        usage: { prompt_tokens: number; completion_tokens: number };
      };
      const after = await quota(gw);
      // mock-gpt: 10,000 IDR per million input tokens, 20,000 per million output tokens.
      const expectedMicro =
        body.usage.prompt_tokens * 10_000 + body.usage.completion_tokens * 20_000;
      expect(Math.round((before.balance_idr - after.balance_idr) * 1_000_000)).toBe(expectedMicro);
      const log = await gw.services.store.requestLog("acct", 100);
      expect(log).toHaveLength(1);
      expect(log[0]).toMatchObject({ state: "settled", cost_micro: expectedMicro });
      expect(log[0].reserved_micro).toBeGreaterThanOrEqual(expectedMicro);
      const [listed] = await gw.listRequests({ limit: 1 });
      expect(listed).toMatchObject({
        endpoint: "chat.completions",
        account: "acct",
        state: "settled",
        cost_micro: expectedMicro,
      });
    });

    it("charges a streamed request from its final usage", async () => {
      gw = await gatewayOn(backend, { config: withAccount({ balance_idr: 1_000 }) });
      const before = await quota(gw);
      const res = await post(
        gw,
        "/v1/chat/completions",
        chat("stream me", "mock-gpt", { stream: true, stream_options: { include_usage: true } }),
      );
      type Chunk = { usage?: { prompt_tokens: number; completion_tokens: number } | null };
      const usage = (await streamData<Chunk>(res)).filter((chunk) => chunk.usage).at(-1)!.usage!;
      const expected = usage.prompt_tokens * 10_000 + usage.completion_tokens * 20_000;
      expect(micro(before.balance_idr) - micro((await quota(gw)).balance_idr)).toBe(expected);
      const [{ cost_micro, input_tokens, output_tokens }] = await gw.services.store.requestLog(
        "acct",
        1,
      );
      expect({ cost_micro, input_tokens, output_tokens }).toEqual({
        cost_micro: expected,
        input_tokens: usage.prompt_tokens,
        output_tokens: usage.completion_tokens,
      });
      const [{ stream }] = await gw.listRequests({ limit: 1 });
      expect(stream).toBe(true);
    });

    it("charges a messages-style answer and a messages-style stream from their usage", async () => {
      gw = await gatewayOn(backend);
      const before = await quota(gw);
      const res = await post(gw, "/v1/messages", messagesBody("price my message"));
      expect(res.status).toBe(200);
      const plain = (await res.json()) as {
        type: string;
        usage: { input_tokens: number; output_tokens: number };
      };
      expect(plain.type).toBe("message");
      const plainCost = plain.usage.input_tokens * 10_000 + plain.usage.output_tokens * 20_000;
      const middle = await quota(gw);
      expect(micro(before.balance_idr) - micro(middle.balance_idr)).toBe(plainCost);

      const streamed = await post(
        gw,
        "/v1/messages",
        messagesBody("stream my message", "mock-gpt", { stream: true }),
      );
      expect(streamed.headers.get("content-type")).toMatch(/^text\/event-stream/);
      const events = await streamData<{
        type: string;
        usage?: { input_tokens: number; output_tokens: number };
      }>(streamed);
      expect(events.at(-1)?.type).toBe("message_stop");
      // The final message_delta carries the whole usage, input tokens included.
      const { input_tokens: input, output_tokens: output } = events
        .filter((event) => event.type === "message_delta")
        .at(-1)!.usage!;
      const streamCost = input * 10_000 + output * 20_000;
      expect(micro(middle.balance_idr) - micro((await quota(gw)).balance_idr)).toBe(streamCost);
      const [last, first] = await gw.listRequests({ limit: 2 });
      expect(
        [first, last].map(({ endpoint, state, stream, cost_micro }) => ({
          endpoint,
          state,
          stream,
          cost_micro,
        })),
      ).toEqual([
        { endpoint: "messages", state: "settled", stream: false, cost_micro: plainCost },
        { endpoint: "messages", state: "settled", stream: true, cost_micro: streamCost },
      ]);
    });

    it("answers 402 insufficient_balance on an empty balance, in both styles, and charges nothing", async () => {
      gw = await gatewayOn(backend, { config: withAccount({ balance_idr: 0 }) });
      const a = await errorOf(await post(gw, "/v1/chat/completions", chat()));
      expect(a).toMatchObject({
        status: 402,
        code: "insufficient_balance",
        type: "insufficient_balance",
        retryAfter: null,
      });
      const res = await post(gw, "/v1/messages", messagesBody());
      expect(res.status).toBe(402);
      expect(await res.json()).toMatchObject({
        type: "error",
        error: { type: "payment_required" },
      });
      expect((await quota(gw)).balance_idr).toBe(0);
    });

    it("never lets parallel requests overspend: a balance for exactly N requests admits N", async () => {
      const config = withAccount(
        { balance_idr: 5_000 },
        {
          models: [{ name: "flat", provider: "mock", price_per_request: 1_000 }],
        },
      );
      gw = await gatewayOn(backend, { config });
      const results = await burst(30, () => post(gw!, "/v1/chat/completions", chat("x", "flat")));
      const statuses = results.map((r) => r.status);
      expect(statuses.filter((s) => s === 200)).toHaveLength(5);
      expect(statuses.filter((s) => s === 402)).toHaveLength(25);
      expect((await quota(gw)).balance_idr).toBe(0);
      const balances = (await gw.services.store.readAccounts()).map(
        (account) => account.balance_micro,
      );
      expect(Math.min(...balances)).toBeGreaterThanOrEqual(0);
    });

    it("uses PAYG up to its limit and then answers 402 payg_limit_reached", async () => {
      const config = withAccount(
        { balance_idr: 0, payg: { enabled: true, limit_idr: 3_000, window_seconds: 3600 } },
        {
          models: [{ name: "flat", provider: "mock", price_per_request: 1_000 }],
        },
      );
      gw = await gatewayOn(backend, { config });
      const statuses = (
        await burst(6, () => post(gw!, "/v1/chat/completions", chat("x", "flat")))
      ).map((r) => r.status);
      expect(statuses.filter((s) => s === 200)).toHaveLength(3);
      const err = await errorOf(await post(gw, "/v1/chat/completions", chat("x", "flat")));
      expect(err).toMatchObject({ status: 402, code: "payg_limit_reached" });
      const q = await quota(gw);
      expect(q.payg).toMatchObject({ enabled: true, limit_idr: 3_000, spent_idr: 3_000 });
    });

    it("resets PAYG spending when its window rolls", async () => {
      let now = Date.parse("2026-11-22T10:00:00Z");
      const config = withAccount(
        { balance_idr: 0, payg: { enabled: true, limit_idr: 1_000, window_seconds: 60 } },
        {
          models: [{ name: "flat", provider: "mock", price_per_request: 1_000 }],
        },
      );
      gw = await gatewayOn(backend, { config, now: () => now });
      expect((await post(gw, "/v1/chat/completions", chat("x", "flat"))).status).toBe(200);
      expect((await post(gw, "/v1/chat/completions", chat("x", "flat"))).status).toBe(402);
      now += 61_000;
      expect((await post(gw, "/v1/chat/completions", chat("x", "flat"))).status).toBe(200);
    });

    it("answers 403 subscribers_only for a subscribers-only model without a subscription", async () => {
      gw = await gatewayOn(backend);
      expect(
        await errorOf(await post(gw, "/v1/chat/completions", chat("x", "mock-pro"))),
      ).toMatchObject({ status: 403, code: "subscribers_only" });
      const res = await post(gw, "/v1/messages", messagesBody("x", "mock-pro"));
      expect(res.status).toBe(403);
      expect(((await res.json()) as { error: { type: string } }).error.type).toBe(
        "permission_error",
      );
    });

    it("refunds the whole hold when the upstream fails", async () => {
      gw = await gatewayOn(backend);
      const before = await quota(gw);
      expect((await post(gw, "/v1/chat/completions", chat("[[mock:fail=500]]"))).status).toBe(503);
      expect((await quota(gw)).balance_idr).toBe(before.balance_idr);
      const [{ state, cost_micro, status, error_code }] = await gw.services.store.requestLog(
        "acct",
        1,
      );
      expect({ state, cost_micro, status, error_code }).toEqual({
        state: "failed",
        cost_micro: 0,
        status: 503,
        error_code: "upstream_error",
      });
    });
  });

  describe("subscriptions", () => {
    const subscription = (extra: object = {}) => ({
      plan: "pro",
      windows: [
        { name: "5h", seconds: 18_000, quota: 2 },
        { name: "week", seconds: 604_800, quota: 10 },
      ],
      payg_fallback: false,
      free_fallback: false,
      ...extra,
    });

    it("counts requests in every window and answers 429 plan_limit_reached in Indonesian, without Retry-After", async () => {
      gw = await gatewayOn(backend, { config: withAccount({ subscription: subscription() }) });
      const before = await quota(gw);
      expect((await post(gw, "/v1/chat/completions", chat("1", "mock-pro"))).status).toBe(200);
      expect((await post(gw, "/v1/chat/completions", chat("2", "mock-gpt"))).status).toBe(200);
      const err = await errorOf(await post(gw, "/v1/chat/completions", chat("3")));
      expect(err).toMatchObject({ status: 429, code: "plan_limit_reached", retryAfter: null });
      expect(err.message).toMatch(/Kuota paket langganan/);
      const res = await post(gw, "/v1/messages", messagesBody());
      expect(res.status).toBe(429);
      expect(res.headers.get("retry-after")).toBeNull();
      expect(((await res.json()) as { error: { type: string } }).error.type).toBe(
        "rate_limit_error",
      );
      const q = (await quota(gw)) as {
        balance_idr: number;
        subscription: { windows: { name: string; used: number; remaining: number }[] };
      };
      expect(q.balance_idr).toBe(before.balance_idr);
      expect(q.subscription.windows.map((w) => [w.name, w.used, w.remaining])).toEqual([
        ["5h", 2, 0],
        ["week", 2, 8],
      ]);
    });

    it("falls back to the balance when payg_fallback is on", async () => {
      gw = await gatewayOn(backend, {
        config: withAccount({ subscription: subscription({ payg_fallback: true }) }),
      });
      const before = await quota(gw);
      for (let i = 0; i < 3; i++)
        expect((await post(gw, "/v1/chat/completions", chat(`${i}`))).status).toBe(200);
      expect((await quota(gw)).balance_idr).toBeLessThan(before.balance_idr);
    });

    it("falls back to the free allowance when free_fallback is on", async () => {
      // The free allowance counts in the clock's day: on a manual clock the request stays in it.
      gw = await gatewayOn(backend, {
        config: withAccount({ subscription: subscription({ free_fallback: true }) }),
        clock: "manual",
      });
      for (let i = 0; i < 3; i++)
        expect((await post(gw, "/v1/chat/completions", chat(`${i}`))).status).toBe(200);
      const q = await quota(gw);
      expect(q.free.daily_used).toBe(1);
    });

    it("opens a new window when the old one ends", async () => {
      let now = Date.parse("2026-11-22T10:00:00Z");
      gw = await gatewayOn(backend, {
        config: withAccount({ subscription: subscription({ started_at: now }) }),
        now: () => now,
      });
      for (let i = 0; i < 2; i++)
        expect((await post(gw, "/v1/chat/completions", chat())).status).toBe(200);
      expect((await post(gw, "/v1/chat/completions", chat())).status).toBe(429);
      now += 18_000_000;
      expect((await post(gw, "/v1/chat/completions", chat())).status).toBe(200);
      expect((await quota(gw)).subscription!.windows[0]).toMatchObject({
        name: "5h",
        used: 1,
        remaining: 1,
      });
    });
  });

  describe("admin API", () => {
    it("refuses amounts and top-ups that would take a balance past what it counts exactly", async () => {
      gw = await gatewayOn(backend);
      const tooMuch = await errorOf(
        await admin(gw, "POST", "/accounts", { id: "rich", balance_idr: 1e12 }),
      );
      expect(tooMuch).toMatchObject({ status: 400, code: "bad_request" });
      expect(tooMuch.message).toMatch(/balance_idr: must be at most 9007199254 IDR/);

      expect(
        (await admin(gw, "POST", "/accounts", { id: "rich", balance_idr: 9_000_000_000 })).status,
      ).toBe(201);
      const over = await errorOf(
        await admin(gw, "POST", "/accounts/rich/topup", { amount_idr: 7_199_255 }),
      );
      expect(over).toMatchObject({ status: 400, code: "bad_request" });
      expect(over.message).toMatch(/would take the balance above 9007199254 IDR/);
      const patched = await errorOf(
        await admin(gw, "PATCH", "/accounts/rich", { balance_idr: 1e10 }),
      );
      expect(patched.status).toBe(400);
      const topped = await admin(gw, "POST", "/accounts/rich/topup", { amount_idr: 7_199_254 });
      expect(((await topped.json()) as { balance_idr: number }).balance_idr).toBe(9_007_199_254);
    });

    it("refuses an amount finer than a micro-IDR, naming the field, where it would have been rounded away", async () => {
      gw = await gatewayOn(backend);
      const created = await admin(gw, "POST", "/accounts", { id: "fine", balance_idr: 0 });
      expect(created.status).toBe(201);
      const finer =
        /must have at most 6 decimals: 0\.000001 IDR \(one micro-IDR\) is the smallest amount the gateway stores/;
      for (const [method, path, body, field] of [
        ["POST", "/accounts/fine/topup", { amount_idr: 0.0000004 }, "amount_idr"],
        ["POST", "/accounts", { id: "finer", balance_idr: 2.0000001 }, "balance_idr"],
        [
          "PATCH",
          "/accounts/fine",
          { payg: { enabled: true, limit_idr: 1.0000005 } },
          "payg.limit_idr",
        ],
      ] as const) {
        const refused = await errorOf(await admin(gw, method, path, body));
        expect(refused, path).toMatchObject({ status: 400, code: "bad_request" });
        expect(refused.message, path).toContain(`${field}: `);
        expect(refused.message, path).toMatch(finer);
      }
      const topped = await admin(gw, "POST", "/accounts/fine/topup", { amount_idr: 0.000001 });
      expect(((await topped.json()) as { balance_idr: number }).balance_idr).toBe(0.000001);
    });

    it("drives every account state: create, top up, PAYG, tier, subscription, suspend, reinstate, revoke", async () => {
      gw = await gatewayOn(backend);
      const created = await admin(gw, "POST", "/accounts", { id: "ci", balance_idr: 0 });
      expect(created.status).toBe(201);
      const { key } = (await created.json()) as { key: { id: string; value: string } };
      expect(key.value).toMatch(/^kn-[A-Za-z0-9_-]{43}$/);
      const auth = { authorization: `Bearer ${key.value}` };
      expect((await post(gw, "/v1/chat/completions", chat(), auth)).status).toBe(402);

      const topped = await (
        await admin(gw, "POST", "/accounts/ci/topup", { amount_idr: 10_000 })
      ).json();
      expect(topped).toMatchObject({ balance_idr: 10_000, tier: "paid" });
      expect(await quota(gw, key.value)).toMatchObject({
        tier: "paid",
        free: { daily_limit: 1000, requests_per_minute: 60 },
      });
      expect((await post(gw, "/v1/chat/completions", chat(), auth)).status).toBe(200);

      await admin(gw, "PATCH", "/accounts/ci", {
        balance_idr: 0,
        payg: { enabled: true, limit_idr: 1 },
      });
      expect((await quota(gw, key.value)).balance_idr).toBe(0);
      expect((await errorOf(await post(gw, "/v1/chat/completions", chat(), auth))).code).toBe(
        "payg_limit_reached",
      );

      await admin(gw, "PATCH", "/accounts/ci", {
        subscription: { windows: [{ name: "d", seconds: 86_400, quota: 0 }] },
      });
      expect((await errorOf(await post(gw, "/v1/chat/completions", chat(), auth))).code).toBe(
        "plan_limit_reached",
      );

      expect((await admin(gw, "POST", "/accounts/ci/suspend")).status).toBe(200);
      const suspended = await post(gw, "/v1/chat/completions", chat(), auth);
      expect(suspended.status).toBe(401);
      expect(await suspended.text()).toBe(
        "account suspended: ask the account's owner (or the gateway's admin) to reinstate it; its keys work again then",
      );
      await admin(gw, "POST", "/accounts/ci/reinstate");
      expect((await post(gw, "/v1/chat/completions", chat(), auth)).status).toBe(429);

      expect((await admin(gw, "DELETE", `/keys/${key.id}`)).status).toBe(200);
      const revoked = await post(gw, "/v1/chat/completions", chat(), auth);
      expect(revoked.status).toBe(401);
      expect(await revoked.text()).toBe(
        "API key revoked: make a new key on the dashboard's Keys page or with `gateway keys create`, and send that one",
      );

      expect((await admin(gw, "PATCH", "/accounts/ci", { tier: "nope" })).status).toBe(400);
      expect((await admin(gw, "PATCH", "/accounts/ci", { rpm_limit: "fast" })).status).toBe(400);
      expect((await admin(gw, "GET", "/accounts/ghost")).status).toBe(404);
    });

    it("refuses requests without the admin key in plain text", async () => {
      gw = await gatewayOn(backend);
      const res = await fetch(`${gw.url}/api/admin/accounts`, {
        headers: { authorization: `Bearer ${KEY}` },
      });
      expect(res.status).toBe(401);
      expect(await res.text()).toBe("admin key required");
      expect((await admin(gw, "GET", "/accounts")).status).toBe(200);
    });

    it("lists accounts with their money as charged, right after an answer", async () => {
      const config = withAccount(
        {},
        { models: [{ name: "flat", provider: "mock", price_per_request: 1_000 }] },
      );
      config.accounts!.push({
        id: "payg",
        balance_idr: 0,
        payg: { enabled: true, limit_idr: 1_000, window_seconds: 3600 },
        keys: [{ id: "payg-key", value: PAYG_KEY }],
      });
      gw = await gatewayOn(backend, { config });
      const payg = { authorization: `Bearer ${PAYG_KEY}` };
      expect((await post(gw, "/v1/chat/completions", chat())).status).toBe(200);
      expect((await post(gw, "/v1/chat/completions", chat("x", "flat"), payg)).status).toBe(200);
      expect((await post(gw, "/v1/chat/completions", chat("x", "flat"), payg)).status).toBe(402);
      const listed = (await (await admin(gw, "GET", "/accounts")).json()) as {
        data: { id: string; balance_idr: number; payg: { spent_idr: number } | null }[];
      };
      const acct = listed.data.find((account) => account.id === "acct")!;
      expect(acct.balance_idr).toBe((await quota(gw)).balance_idr);
      expect(acct.balance_idr).toBeLessThan(1_000_000);
      const spent = listed.data.find((account) => account.id === "payg")!.payg!.spent_idr;
      expect(spent).toBe(1_000);
      expect(spent).toBe((await quota(gw, PAYG_KEY)).payg!.spent_idr);
    });
  });

  describe("read endpoints", () => {
    it("reports quota: balance, PAYG, subscription windows, free allowance and per-minute limit", async () => {
      gw = await gatewayOn(backend);
      const q = await quota(gw);
      expect(q).toMatchObject({
        object: "account.quota",
        account_id: "acct",
        balance_idr: 1_000_000,
        payg: null,
        subscription: null,
        free: { daily_limit: 50, daily_used: 0, requests_per_minute: 20 },
        rate_limit: { requests_per_minute: 1000 },
      });
      expect((q.free as { resets_at: string }).resets_at).toMatch(/T00:00:00\.000Z$/);
    });

    it("serves usage summary, daily and recent requests, 60 per minute together", async () => {
      // The 60 count in a window of the wall clock's minutes: held at a minute's start, the
      // clock cannot end the window halfway through the burst, as a loaded machine's could.
      gw = await gatewayOn(backend, {
        clock: "manual",
        now: () => Date.parse("2030-01-01T10:00:00Z"),
      });
      await post(gw, "/v1/chat/completions", chat());
      await post(gw, "/v1/chat/completions", chat("[[mock:fail=503]]"));
      const get = (path: string) =>
        fetch(`${gw!.url}${path}`, { headers: { authorization: `Bearer ${KEY}` } });
      const summary = (await (await get("/v1/usage/summary")).json()) as Record<string, number>;
      expect(summary).toMatchObject({ requests: 2, succeeded: 1, failed: 1 });
      const daily = (await (await get("/v1/usage/daily")).json()) as {
        data: { requests: number }[];
      };
      expect(daily.data[0].requests).toBe(2);
      const recent = (await (await get("/v1/usage/requests?limit=1")).json()) as {
        data: { error_code: string }[];
      };
      expect(recent.data).toHaveLength(1);
      expect(recent.data[0].error_code).toBe("upstream_error");
      const rest = await burst(60, (i) =>
        get(["/v1/usage/summary", "/v1/usage/daily", "/v1/usage/requests"][i % 3]),
      );
      const limited = rest.filter((r) => r.status === 429);
      expect(limited).toHaveLength(3);
      expect(limited[0].headers.get("retry-after")).toBeNull();
      expect((await errorOf(limited[0])).code).toBe("rate_limit_exceeded");
      expect((await quota(gw)).object).toBe("account.quota"); // quota is not a usage endpoint
    });

    it("serves public pricing with the current free limits", async () => {
      gw = await gatewayOn(backend, {
        config: baseConfig({ tiers: { free: { free_rpm: 7, free_daily: 70 } } }),
      });
      const res = await fetch(`${gw.url}/api/public/pricing`);
      expect(res.status).toBe(200);
      const body = (await res.json()) as {
        free_limits: Record<string, object>;
        models: { id: string }[];
      };
      expect(body.free_limits.free).toMatchObject({ requests_per_minute: 7, requests_per_day: 70 });
      expect(body.models.find((m) => m.id === "mock-gpt")).toMatchObject({
        input_per_mtok_idr: 10_000,
        output_per_mtok_idr: 20_000,
      });
    });
  });

  describe("both SDKs see billing errors", () => {
    it("raises the Anthropic SDK's error with status 402", async () => {
      gw = await gatewayOn(backend, { config: withAccount({ balance_idr: 0 }) });
      const client = new Anthropic({ apiKey: KEY, baseURL: gw.url, maxRetries: 0 });
      const err = await client.messages
        .create(messagesBody() as Anthropic.MessageCreateParamsNonStreaming)
        .catch((e: unknown) => e);
      expect((err as { status: number }).status).toBe(402);
    });
  });
});
