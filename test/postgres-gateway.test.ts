import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { type GatewayOptions, type RunningGateway, startGateway } from "../src/server/gateway.js";
import { startJobRunner } from "../src/server/jobs/runner.js";
import { readPngSize, readWavInfo } from "../src/server/providers/mock/media/index.js";
import { secretKeyEnv } from "../src/store/secret-box.js";
import { admin, burst, errorOf, quota } from "./support/api.js";
import {
  credentialSeen,
  type FakeUpstream,
  fakeUpstream,
  openaiError,
  openaiJson,
} from "./support/fake-upstream.js";
import {
  ADMIN_KEY,
  baseConfig,
  chat,
  KEY,
  LOGIN_KEY,
  POOR_KEY,
  post,
  SHARED_KEY,
} from "./support/gateway.js";
import { createTestDatabase } from "./support/postgres.js";

/**
 * One gateway on Postgres, over real HTTP, giving the answers the SQLite gateway gives: each test
 * here repeats the statuses, codes, headers and amounts of the SQLite test of the same behaviour
 * (named above each). Several processes on one database are multi-instance.test.ts's.
 */

// An account per behaviour whose counts a test asserts exactly, so the tests share one gateway.
const FREE_KEY = "kn-test-pg-free-tier-key-0000000";
const SUBSCRIBER_KEY = "kn-test-pg-subscriber-key-000000";
const PAYG_KEY = "kn-test-pg-payg-account-key-0000";
const RPM_KEY = "kn-test-pg-rpm-limited-key-00000";
const USAGE_KEY = "kn-test-pg-usage-reader-key-0000";
const EXACT_KEY = "kn-test-pg-exact-balance-key-000";
const TEAM_KEY = "kn-test-pg-team-shared-key-00000";
const SPACED_KEY = "kn-test-pg-spaced-bursts-key-000";

const MUSIC_PRICE = 100;
const IMAGE_PRICE = 500;
const BYOK_POOL_KEY = "sk-pool-for-byok-9999";

const bearer = (key: string) => ({ authorization: `Bearer ${key}` });
const micro = (idr: number) => Math.round(idr * 1_000_000);
const messagesBody = (content = "hi", model = "mock-gpt", extra: object = {}) => ({
  model,
  max_tokens: 100,
  messages: [{ role: "user", content }],
  ...extra,
});

type Account = NonNullable<ConfigInput["accounts"]>[number];

function mainConfig(upstreamBaseUrl: string): ConfigInput {
  const base = baseConfig();
  const account = (id: string, key: string, extra: Partial<Account> = {}): Account => ({
    id,
    balance_idr: 1_000_000,
    keys: [{ id: `${id}-key`, value: key }],
    ...extra,
  });
  return {
    ...base,
    providers: [
      ...base.providers!,
      { id: "mock-fast", wire: "mock", mock: { job_seconds: 0.05 } },
      { id: "mock-steady", wire: "mock", mock: { job_seconds: 0.5 } },
      {
        id: "byok-prov",
        wire: "openai",
        base_url: upstreamBaseUrl,
        api_keys: [BYOK_POOL_KEY],
        timeout_ms: 3_000,
      },
    ],
    models: [
      ...base.models!,
      { name: "flat", provider: "mock", price_per_request: 1_000 },
      { name: "mock-music", provider: "mock-fast", modality: "music", price_per_unit: MUSIC_PRICE },
      {
        name: "steady-music",
        provider: "mock-steady",
        modality: "music",
        price_per_unit: MUSIC_PRICE,
      },
      {
        name: "byok-model",
        provider: "byok-prov",
        upstream_model: "byok-model-upstream",
        // Whole IDR per token: a charge reads as the fake's usage.
        price_input_per_mtok: 1_000_000,
        price_output_per_mtok: 2_000_000,
        max_output_tokens: 100,
      },
    ],
    tiers: {
      "three-a-minute": { free_rpm: 3, free_daily: 100, burst_spacing_ms: 0 },
      spaced: { free_rpm: 100, free_daily: 100, burst_spacing_ms: 100, burst_queue: 3 },
    },
    accounts: [
      ...base.accounts!,
      account("freebie", FREE_KEY, { tier: "three-a-minute" }),
      account("subscriber", SUBSCRIBER_KEY, {
        subscription: {
          plan: "pro",
          windows: [
            { name: "5h", seconds: 18_000, quota: 2 },
            { name: "week", seconds: 604_800, quota: 10 },
          ],
          payg_fallback: false,
          free_fallback: false,
        },
      }),
      account("payg", PAYG_KEY, {
        balance_idr: 0,
        payg: { enabled: true, limit_idr: 3_000, window_seconds: 3600 },
      }),
      account("rpm", RPM_KEY, { rpm_limit: 5 }),
      account("usage", USAGE_KEY),
      account("exact", EXACT_KEY, { balance_idr: 5_000 }),
      {
        id: "team",
        balance_idr: 1_000_000,
        rpm_limit: 10,
        keys: [{ id: "team-key", kind: "shared", value: TEAM_KEY }],
      },
      account("spaced", SPACED_KEY, { tier: "spaced" }),
    ],
  };
}

/**
 * Waits out the last seconds of a wall-clock minute, so that the per-minute counts a test asserts
 * fall in one window.
 */
async function clearOfMinuteEdge(): Promise<void> {
  const left = 60_000 - (Date.now() % 60_000);
  if (left < 3_000) await new Promise((resolve) => setTimeout(resolve, left + 50));
}

let savedSecretKey: string | undefined;
beforeAll(() => {
  savedSecretKey = process.env[secretKeyEnv];
  process.env[secretKeyEnv] = randomBytes(32).toString("base64");
});
afterAll(() => {
  if (savedSecretKey === undefined) delete process.env[secretKeyEnv];
  else process.env[secretKeyEnv] = savedSecretKey;
});

async function postgresGateway(options: GatewayOptions & { db: string }): Promise<RunningGateway> {
  return startGateway({ keepaliveMs: 1_000, ...options, port: 0 });
}

describe("a gateway on Postgres", () => {
  let db: string;
  let gw: RunningGateway;
  let upstream: FakeUpstream;

  beforeAll(async () => {
    upstream = await fakeUpstream("openai");
    db = await createTestDatabase();
    gw = await postgresGateway({ db, config: mainConfig(upstream.baseUrl) });
  });
  afterAll(async () => {
    await gw?.close();
    await upstream?.close();
  });

  /** The balance minus what requests and jobs in flight hold, in micro-IDR. */
  const spendable = async (key = KEY) => {
    const shown = (await quota(gw, key)) as Awaited<ReturnType<typeof quota>> & {
      held_idr: number;
    };
    return micro(shown.balance_idr) - micro(shown.held_idr);
  };

  describe("billing (billing.test.ts)", () => {
    it("reports quota: balance, PAYG, subscription windows, free allowance and per-minute limit", async () => {
      const shown = await quota(gw);
      expect(shown).toMatchObject({
        object: "account.quota",
        account_id: "acct",
        balance_idr: 1_000_000,
        payg: null,
        subscription: null,
        free: { daily_limit: 50, daily_used: 0, requests_per_minute: 20 },
        rate_limit: { requests_per_minute: 1000 },
      });
      expect(shown.free.resets_at).toMatch(/T00:00:00\.000Z$/);
    });

    it("charges a chat completion exactly the token prices of its usage", async () => {
      const before = await quota(gw);
      const res = await post(gw, "/v1/chat/completions", chat("price me"));
      expect(res.status).toBe(200);
      const body = (await res.json()) as {
        usage: { prompt_tokens: number; completion_tokens: number };
      };
      const after = await quota(gw);
      const expected = body.usage.prompt_tokens * 10_000 + body.usage.completion_tokens * 20_000;
      expect(micro(before.balance_idr) - micro(after.balance_idr)).toBe(expected);
      const [logged] = await gw.listRequests({ limit: 1 });
      expect(logged).toMatchObject({
        endpoint: "chat.completions",
        account: "acct",
        state: "settled",
        cost_micro: expected,
      });
    });

    it("charges a streamed chat completion from its final usage", async () => {
      const before = await quota(gw);
      const res = await post(
        gw,
        "/v1/chat/completions",
        chat("stream me", "mock-gpt", { stream: true, stream_options: { include_usage: true } }),
      );
      const text = await res.text();
      const usage = JSON.parse(
        text
          .split("\n\n")
          .filter((line) => line.includes('"usage"'))
          .pop()!
          .slice(6),
      ).usage as { prompt_tokens: number; completion_tokens: number };
      const expected = usage.prompt_tokens * 10_000 + usage.completion_tokens * 20_000;
      expect(micro(before.balance_idr) - micro((await quota(gw)).balance_idr)).toBe(expected);
      const [{ cost_micro, usage: logged, stream }] = await gw.listRequests({ limit: 1 });
      expect({ cost_micro, logged, stream }).toEqual({
        cost_micro: expected,
        logged: { input_tokens: usage.prompt_tokens, output_tokens: usage.completion_tokens },
        stream: true,
      });
    });

    it("charges a messages-style answer and a messages-style stream from their usage", async () => {
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
      const events = (await streamed.text())
        .split("\n\n")
        .map((block) => block.split("\n").find((line) => line.startsWith("data: ")))
        .filter((line): line is string => line !== undefined)
        .map(
          (line) =>
            JSON.parse(line.slice(6)) as {
              type: string;
              usage?: { input_tokens: number; output_tokens: number };
            },
        );
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

    it("refunds the whole hold when the upstream fails", async () => {
      const before = await quota(gw);
      expect((await post(gw, "/v1/chat/completions", chat("[[mock:fail=500]]"))).status).toBe(503);
      expect((await quota(gw)).balance_idr).toBe(before.balance_idr);
      const [{ state, cost_micro, status, error_code }] = await gw.listRequests({ limit: 1 });
      expect({ state, cost_micro, status, error_code }).toEqual({
        state: "failed",
        cost_micro: 0,
        status: 503,
        error_code: "upstream_error",
      });
    });

    it("never lets parallel requests overspend: a balance for exactly N requests admits N", async () => {
      const results = await burst(30, () =>
        post(gw, "/v1/chat/completions", chat("x", "flat"), bearer(EXACT_KEY)),
      );
      const statuses = results.map((res) => res.status);
      expect(statuses.filter((status) => status === 200)).toHaveLength(5);
      expect(statuses.filter((status) => status === 402)).toHaveLength(25);
      expect((await quota(gw, EXACT_KEY)).balance_idr).toBe(0);
    });

    it("settles a stream the client abandons midway, and logs a client that left before the answer as client_closed, charging nothing (core.test.ts)", async () => {
      const abandoned = new AbortController();
      const res = await fetch(`${gw.url}/v1/chat/completions`, {
        method: "POST",
        headers: { ...bearer(KEY), "content-type": "application/json" },
        body: JSON.stringify(
          chat("walk away [[mock:words=400]] [[mock:delay=100]]", "mock-gpt", { stream: true }),
        ),
        signal: abandoned.signal,
      });
      await res.body!.getReader().read();
      abandoned.abort();
      const streamed = async () =>
        (await gw.listRequests({ limit: 1 })).find((row) => row.stream && row.account === "acct");
      await expect
        .poll(async () => (await streamed())?.state, { timeout: 5_000 })
        .not.toBe("reserved");
      expect((await post(gw, "/v1/chat/completions", chat())).status).toBe(200);

      const before = await quota(gw);
      const left = new AbortController();
      const pending = fetch(`${gw.url}/v1/chat/completions`, {
        method: "POST",
        headers: { ...bearer(KEY), "content-type": "application/json" },
        body: JSON.stringify(chat("leaving early [[mock:delay=400]]")),
        signal: left.signal,
      }).catch(() => "aborted");
      await new Promise((resolve) => setTimeout(resolve, 100));
      left.abort();
      expect(await pending).toBe("aborted");
      const closed = async () => {
        const [last] = await gw.listRequests({ limit: 1 });
        return { state: last.state, error_code: last.error_code, cost_micro: last.cost_micro };
      };
      await expect
        .poll(closed, { timeout: 5_000 })
        .toEqual({ state: "failed", error_code: "client_closed", cost_micro: 0 });
      expect((await quota(gw)).balance_idr).toBe(before.balance_idr);
    });

    it("answers 402 insufficient_balance on an empty balance, in both styles, and charges nothing", async () => {
      const refused = await errorOf(
        await post(gw, "/v1/chat/completions", chat(), bearer(POOR_KEY)),
      );
      expect(refused).toMatchObject({
        status: 402,
        code: "insufficient_balance",
        type: "insufficient_balance",
        retryAfter: null,
      });
      const res = await post(gw, "/v1/messages", messagesBody(), bearer(POOR_KEY));
      expect(res.status).toBe(402);
      expect(await res.json()).toMatchObject({
        type: "error",
        error: { type: "payment_required" },
      });
      expect((await quota(gw, POOR_KEY)).balance_idr).toBe(0);
    });

    it("uses PAYG up to its limit and then answers 402 payg_limit_reached", async () => {
      const statuses = (
        await burst(6, () => post(gw, "/v1/chat/completions", chat("x", "flat"), bearer(PAYG_KEY)))
      ).map((res) => res.status);
      expect(statuses.filter((status) => status === 200)).toHaveLength(3);
      const err = await errorOf(
        await post(gw, "/v1/chat/completions", chat("x", "flat"), bearer(PAYG_KEY)),
      );
      expect(err).toMatchObject({ status: 402, code: "payg_limit_reached" });
      expect((await quota(gw, PAYG_KEY)).payg).toMatchObject({
        enabled: true,
        limit_idr: 3_000,
        spent_idr: 3_000,
      });
    });

    it("counts a subscription's requests in every window, then 429 plan_limit_reached without Retry-After", async () => {
      const auth = bearer(SUBSCRIBER_KEY);
      const before = await quota(gw, SUBSCRIBER_KEY);
      expect((await post(gw, "/v1/chat/completions", chat("1", "mock-pro"), auth)).status).toBe(
        200,
      );
      expect((await post(gw, "/v1/chat/completions", chat("2", "mock-gpt"), auth)).status).toBe(
        200,
      );
      const err = await errorOf(await post(gw, "/v1/chat/completions", chat("3"), auth));
      expect(err).toMatchObject({ status: 429, code: "plan_limit_reached", retryAfter: null });
      expect(err.message).toMatch(/Kuota paket langganan/);
      const res = await post(gw, "/v1/messages", messagesBody(), auth);
      expect(res.status).toBe(429);
      expect(res.headers.get("retry-after")).toBeNull();
      expect(((await res.json()) as { error: { type: string } }).error.type).toBe(
        "rate_limit_error",
      );
      const shown = await quota(gw, SUBSCRIBER_KEY);
      expect(shown.balance_idr).toBe(before.balance_idr);
      expect(
        shown.subscription!.windows.map((window) => [window.name, window.used, window.remaining]),
      ).toEqual([
        ["5h", 2, 0],
        ["week", 2, 8],
      ]);
    });
  });

  describe("usage reports and the request log (billing.test.ts, inspect.test.ts)", () => {
    it("serves usage summary, daily and recent requests, 60 per minute together", async () => {
      const auth = bearer(USAGE_KEY);
      await clearOfMinuteEdge();
      await post(gw, "/v1/chat/completions", chat(), auth);
      await post(gw, "/v1/chat/completions", chat("[[mock:fail=503]]"), auth);
      const get = (path: string) => fetch(`${gw.url}${path}`, { headers: auth });
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
      const rest = await burst(60, (index) =>
        get(["/v1/usage/summary", "/v1/usage/daily", "/v1/usage/requests"][index % 3]),
      );
      const limited = rest.filter((res) => res.status === 429);
      expect(limited).toHaveLength(3);
      expect(limited[0].headers.get("retry-after")).toBeNull();
      expect((await errorOf(limited[0])).code).toBe("rate_limit_exceeded");
      expect((await quota(gw, USAGE_KEY)).object).toBe("account.quota");
    });

    it("answers a request that failed only once its failure is in the request log", async () => {
      const auth = bearer(USAGE_KEY);
      // Admitted from this gateway's lease from now on: the failure below needs no hold.
      expect((await post(gw, "/v1/chat/completions", chat(), auth)).status).toBe(200);
      // Another transaction holds the account's row: the failure's settlement waits on it.
      const blocker = new pg.Client({ connectionString: db });
      await blocker.connect();
      const logged = async () =>
        (
          await blocker.query<{ n: number }>(
            "SELECT count(*)::int AS n FROM request_log WHERE account_id = 'usage' AND state = 'failed'",
          )
        ).rows[0].n;
      try {
        const failedBefore = await logged();
        await blocker.query("BEGIN");
        await blocker.query("SELECT 1 FROM accounts WHERE id = 'usage' FOR UPDATE");
        const answer = post(gw, "/v1/chat/completions", chat("[[mock:fail=503]]"), auth);
        const early = await Promise.race([
          answer.then(() => "answered"),
          new Promise((resolve) => setTimeout(() => resolve("waiting"), 500)),
        ]);
        expect(early).toBe("waiting");
        await blocker.query("COMMIT");
        expect((await answer).status).toBe(503);
        expect(await logged()).toBe(failedBefore + 1);
      } finally {
        await blocker.end();
      }
    });

    it("lists requests with listRequests(), as on SQLite", async () => {
      const listed = await gw.listRequests({ limit: 2 });
      expect(listed).toHaveLength(2);
      expect(
        listed.map(({ account, status, error_code, state, key }) => ({
          account,
          status,
          error_code,
          state,
          key,
        })),
      ).toEqual([
        {
          account: "usage",
          status: 503,
          error_code: "upstream_error",
          state: "failed",
          key: { id: "usage-key", label: "usage-key" },
        },
        {
          account: "usage",
          status: 200,
          error_code: null,
          state: "settled",
          key: { id: "usage-key", label: "usage-key" },
        },
      ]);
      expect((await gw.listRequests({ status: 503, limit: 1 }))[0].id).toBe(listed[0].id);
    });
  });

  describe("limits (limits.test.ts)", () => {
    it("admits exactly the account's per-minute number under parallel load, then 429 rate_limit_exceeded", async () => {
      await clearOfMinuteEdge();
      const results = await burst(20, () =>
        post(gw, "/v1/chat/completions", chat(), bearer(RPM_KEY)),
      );
      expect(results.filter((res) => res.status === 200)).toHaveLength(5);
      const limited = results.filter((res) => res.status === 429);
      expect(limited).toHaveLength(15);
      expect(await errorOf(limited[0])).toMatchObject({
        code: "rate_limit_exceeded",
        type: "rate_limit_exceeded",
        message: "Rate limit of 5 requests per minute reached for this account.",
        retryAfter: null,
      });
    });

    it("applies a free model's per-minute limit: 429 free_quota_rpm with Retry-After, X-RateLimit-* on success", async () => {
      const auth = bearer(FREE_KEY);
      await clearOfMinuteEdge();
      const ok = await post(gw, "/v1/chat/completions", chat("x", "mock-gpt:free"), auth);
      expect(ok.status).toBe(200);
      expect(ok.headers.get("x-ratelimit-limit")).toBe("3");
      expect(ok.headers.get("x-ratelimit-remaining")).toBe("2");
      const reset = Number(ok.headers.get("x-ratelimit-reset"));
      expect(reset).toBeGreaterThan(Date.now() / 1000);
      expect(reset).toBeLessThanOrEqual(Math.ceil(Date.now() / 1000) + 60);
      const second = await post(gw, "/v1/chat/completions", chat("x", "mock-gpt:free"), auth);
      expect(second.headers.get("x-ratelimit-remaining")).toBe("1");
      await post(gw, "/v1/chat/completions", chat("x", "mock-gpt:free"), auth);
      const err = await errorOf(
        await post(gw, "/v1/chat/completions", chat("x", "mock-gpt:free"), auth),
      );
      expect(err).toMatchObject({ status: 429, code: "free_quota_rpm" });
      expect(Number(err.retryAfter)).toBeGreaterThanOrEqual(1);
      expect(Number(err.retryAfter)).toBeLessThanOrEqual(60);
      const styled = await post(gw, "/v1/messages", messagesBody("hi", "mock-gpt:free"), auth);
      expect(styled.status).toBe(429);
      expect(styled.headers.get("retry-after")).not.toBeNull();
      expect(((await styled.json()) as { error: { type: string } }).error.type).toBe(
        "rate_limit_error",
      );
      expect((await quota(gw, FREE_KEY)).free).toMatchObject({
        daily_limit: 100,
        daily_used: 3,
        daily_remaining: 97,
        requests_per_minute: 3,
      });
    });

    it("limits each client IP of a shared key to 30 per minute with a plain-text 429", async () => {
      await clearOfMinuteEdge();
      const results = await burst(31, () =>
        post(gw, "/v1/chat/completions", chat(), bearer(SHARED_KEY)),
      );
      const limited = results.filter((res) => res.status === 429);
      expect(limited.length).toBeGreaterThanOrEqual(1);
      const plain = limited.find((res) =>
        res.headers.get("content-type")?.startsWith("text/plain"),
      )!;
      expect(await plain.text()).toBe("too many requests, try again shortly");
      expect((await post(gw, "/v1/chat/completions", chat())).status).toBe(200);
    });

    it("paces a shared key as a whole to a share of the account limit", async () => {
      await clearOfMinuteEdge();
      const results = await burst(8, () =>
        post(gw, "/v1/chat/completions", chat(), bearer(TEAM_KEY)),
      );
      expect(results.filter((res) => res.status === 200)).toHaveLength(5);
      expect((await errorOf(results.find((res) => res.status === 429)!)).code).toBe(
        "rate_limit_exceeded",
      );
    });

    it("spaces free bursts out instead of rejecting them, up to a bound, then 429 rate_limit_exceeded", async () => {
      const started = Date.now();
      const finished: number[] = [];
      const results = await burst(6, async () => {
        const res = await post(
          gw,
          "/v1/chat/completions",
          chat("x", "mock-gpt:free"),
          bearer(SPACED_KEY),
        );
        finished.push(Date.now() - started);
        return res;
      });
      expect(results.map((res) => res.status).sort()).toEqual([200, 200, 200, 200, 429, 429]);
      const rejected = results.find((res) => res.status === 429)!;
      expect((await errorOf(rejected)).code).toBe("rate_limit_exceeded");
      // One answered at once and three spaced 100 ms apart: the last one waited about 300 ms.
      expect(Math.max(...finished)).toBeGreaterThanOrEqual(280);
    });
  });

  describe("BYOK (byok-keypool.test.ts)", () => {
    const link = async (account: string, key: string) => {
      const res = await admin(gw, "POST", `/accounts/${account}/byok`, {
        provider: "byok-prov",
        key,
      });
      const text = await res.text();
      expect(res.status).toBe(201);
      expect(text).not.toContain(key);
      return JSON.parse(text) as { id: string; key_hint: string };
    };
    const ask = (key: string) =>
      post(
        gw,
        "/v1/chat/completions",
        { model: "byok-model", max_tokens: 20, messages: [{ role: "user", content: "hi" }] },
        bearer(key),
      );

    it("uses a linked key free of token prices, and the pool, charged, when it fails", async () => {
      const own = "sk-user-byok-one-1111";
      expect((await link("acct", own)).key_hint).toBe("...1111");
      upstream.reset();
      const before = await spendable();
      expect((await ask(KEY)).status).toBe(200);
      expect(upstream.requests.map(credentialSeen)).toEqual([own]);
      expect(await spendable()).toBe(before);

      upstream.reset((req) =>
        credentialSeen(req) === own
          ? openaiError(401, "Incorrect API key provided", "invalid_api_key")
          : openaiJson("ok"),
      );
      expect((await ask(KEY)).status).toBe(200);
      expect(upstream.requests.map(credentialSeen)).toEqual([own, BYOK_POOL_KEY]);
      expect(await spendable()).toBe(before - micro(25));
    });

    it("admits an account that cannot pay when it has its own key, using only that key", async () => {
      upstream.reset();
      expect(await errorOf(await ask(POOR_KEY))).toMatchObject({
        status: 402,
        code: "insufficient_balance",
      });
      expect(upstream.requests).toHaveLength(0);

      const poorKey = "sk-poor-own-key-7777";
      await link("poor", poorKey);
      const res = await ask(POOR_KEY);
      expect(res.status).toBe(200);
      expect(
        ((await res.json()) as { choices: { message: { content: string } }[] }).choices[0].message
          .content,
      ).toBe("ok");
      expect(upstream.requests.map(credentialSeen)).toEqual([poorKey]);
      expect((await quota(gw, POOR_KEY)).balance_idr).toBe(0);

      // Its own key failing never falls through to the pool it cannot pay for.
      upstream.reset(() => openaiError(500, "down", null, "server_error"));
      expect((await ask(POOR_KEY)).status).toBe(503);
      expect(upstream.requests.map(credentialSeen)).toEqual([poorKey]);
    });
  });

  describe("admin API (billing.test.ts, core.test.ts)", () => {
    it("drives every account state: create, top up, PAYG, tier, subscription, suspend, reinstate, revoke", async () => {
      const created = await admin(gw, "POST", "/accounts", { id: "ci", balance_idr: 0 });
      expect(created.status).toBe(201);
      const { key } = (await created.json()) as { key: { id: string; value: string } };
      expect(key.value).toMatch(/^kn-[A-Za-z0-9_-]{43}$/);
      const auth = bearer(key.value);
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
      expect(await suspended.text()).toBe("account suspended");
      await admin(gw, "POST", "/accounts/ci/reinstate");
      expect((await post(gw, "/v1/chat/completions", chat(), auth)).status).toBe(429);

      expect((await admin(gw, "DELETE", `/keys/${key.id}`)).status).toBe(200);
      const revoked = await post(gw, "/v1/chat/completions", chat(), auth);
      expect(revoked.status).toBe(401);
      expect(await revoked.text()).toBe("API key revoked");

      expect((await admin(gw, "PATCH", "/accounts/ci", { tier: "nope" })).status).toBe(400);
      expect((await admin(gw, "PATCH", "/accounts/ci", { rpm_limit: "fast" })).status).toBe(400);
      expect((await admin(gw, "GET", "/accounts/ghost")).status).toBe(404);
    });

    it("lists accounts with their money as charged, right after an answer", async () => {
      const before = (await admin(gw, "GET", "/accounts/payg").then((res) => res.json())) as {
        payg: { spent_idr: number };
      };
      expect((await post(gw, "/v1/chat/completions", chat())).status).toBe(200);
      expect(
        (await post(gw, "/v1/chat/completions", chat("x", "flat"), bearer(PAYG_KEY))).status,
      ).toBe(402);
      const listed = (await (await admin(gw, "GET", "/accounts")).json()) as {
        data: { id: string; balance_idr: number; payg: { spent_idr: number } | null }[];
      };
      const acct = listed.data.find((account) => account.id === "acct")!;
      const payg = listed.data.find((account) => account.id === "payg")!;
      expect(acct.balance_idr).toBe((await quota(gw)).balance_idr);
      expect(payg.payg!.spent_idr).toBe(before.payg.spent_idr);
      expect(payg.payg!.spent_idr).toBe((await quota(gw, PAYG_KEY)).payg!.spent_idr);
    });

    it("refuses requests without the admin key in plain text", async () => {
      const res = await fetch(`${gw.url}/api/admin/accounts`, { headers: bearer(KEY) });
      expect(res.status).toBe(401);
      expect(await res.text()).toBe("admin key required");
      expect(
        (await fetch(`${gw.url}/api/admin/accounts`, { headers: bearer(ADMIN_KEY) })).status,
      ).toBe(200);
    });
  });

  describe("per-tool keys (tool-keys.test.ts)", () => {
    interface Created {
      id: string;
      key: string;
      label: string;
      kind: string;
      created_at: number;
    }
    const api = (method: string, path: string, key: string, body?: unknown) =>
      fetch(`${gw.url}${path}`, {
        method,
        headers: {
          ...bearer(key),
          ...(body === undefined ? {} : { "content-type": "application/json" }),
        },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    const create = async (label: string): Promise<Created> => {
      const res = await api("POST", "/api/keys", LOGIN_KEY, { label });
      expect(res.status).toBe(201);
      expect(res.headers.get("cache-control")).toBe("no-store");
      return (await res.json()) as Created;
    };

    it("mints keys with the login key, lists them without values, and a revoked one gets 401 at once", async () => {
      const first = await create("tool-a");
      const second = await create("tool-b");
      expect(first).toMatchObject({ label: "tool-a", kind: "standard" });
      expect(first.key).toMatch(/^kn-[A-Za-z0-9_-]{43}$/);
      for (const tool of [first, second])
        expect((await post(gw, "/v1/chat/completions", chat(), bearer(tool.key))).status).toBe(200);

      const list = (await (await api("GET", "/api/keys", LOGIN_KEY)).json()) as {
        data: Record<string, unknown>[];
      };
      expect(list.data.map((listed) => listed.id)).toEqual([first.id, second.id]);
      const text = JSON.stringify(list);
      expect(text).not.toContain(first.key);
      expect(text).not.toMatch(/hash/);
      expect(list.data[0]).toMatchObject({ prefix: first.key.slice(0, 7), revoked_at: null });
      expect(list.data[0].last_used_at).not.toBeNull();

      const revoked = await api("DELETE", `/api/keys/${first.id}`, LOGIN_KEY);
      expect(revoked.status).toBe(200);
      expect(await revoked.json()).toMatchObject({
        id: first.id,
        revoked: true,
        already_revoked: false,
      });
      const refused = await post(gw, "/v1/chat/completions", chat(), bearer(first.key));
      expect(refused.status).toBe(401);
      expect(await refused.text()).toBe("API key revoked");
      expect((await post(gw, "/v1/chat/completions", chat(), bearer(second.key))).status).toBe(200);
      expect((await api("POST", "/api/keys", KEY, { label: "nope" })).status).toBe(403);
    });
  });

  describe("media (images.test.ts, jobs.test.ts)", () => {
    it("returns n pictures and charges n x price_per_unit; a URL result downloads for its own account", async () => {
      const before = await spendable();
      const res = await post(gw, "/v1/images/generations", {
        model: "mock-image",
        prompt: "a lighthouse at dusk",
        n: 3,
        size: "256x256",
        response_format: "b64_json",
      });
      expect(res.status).toBe(200);
      const { data } = (await res.json()) as { data: { b64_json: string }[] };
      expect(data).toHaveLength(3);
      for (const picture of data)
        expect(readPngSize(Buffer.from(picture.b64_json, "base64"))).toEqual({
          width: 256,
          height: 256,
        });
      expect(before - (await spendable())).toBe(3 * IMAGE_PRICE * 1_000_000);

      const linked = (await (
        await post(gw, "/v1/images/generations", {
          model: "mock-image",
          prompt: "a red kite",
          size: "512x256",
          response_format: "url",
        })
      ).json()) as { data: { url: string }[] };
      const url = linked.data[0].url;
      expect(url).toMatch(new RegExp(`^${gw.url}/v1/files/file_`));
      const own = await fetch(url, { headers: bearer(KEY) });
      expect(own.status).toBe(200);
      expect(own.headers.get("content-type")).toBe("image/png");
      expect(readPngSize(new Uint8Array(await own.arrayBuffer()))).toEqual({
        width: 512,
        height: 256,
      });
      expect((await fetch(url, { headers: bearer(POOR_KEY) })).status).toBe(404);
      expect(before - (await spendable())).toBe(4 * IMAGE_PRICE * 1_000_000);
    });

    interface Job {
      id: string;
      object: string;
      status: string;
      result?: { url: string; content_type: string; bytes: number };
      error?: { code: string; message: string };
    }
    const submitMusic = async (
      prompt: string,
      duration: number,
      model = "mock-music",
    ): Promise<Job> => {
      const res = await post(gw, "/v1/music/generations", {
        model,
        prompt,
        duration,
      });
      expect(res.status).toBe(202);
      return (await res.json()) as Job;
    };
    /** Polls until the job ends; bounded so a stuck runner fails the test instead of hanging it. */
    const finishedJob = async (id: string): Promise<Job> => {
      const deadline = Date.now() + 5_000;
      for (;;) {
        const res = await fetch(`${gw.url}/v1/music/generations/${id}`, { headers: bearer(KEY) });
        expect(res.status).toBe(200);
        const job = (await res.json()) as Job;
        if (job.status === "completed" || job.status === "failed") return job;
        if (Date.now() > deadline) throw new Error(`job ${id} still ${job.status}`);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    };
    const musicLog = async () =>
      (await gw.listRequests({ limit: 1000 }))
        .filter((row) => row.endpoint === "music.generations")
        .reverse()
        .map(({ state, cost_micro }) => ({ state, cost_micro }));

    it("runs a music job: queued at once, completed, downloadable, charged once", async () => {
      const before = await spendable();
      const job = await submitMusic("lofi rain", 3);
      expect(job).toMatchObject({ object: "music.generation", status: "queued" });
      expect(job.id).toMatch(/^music_/);
      // The worst case is held while the job runs, and charged when it ends.
      expect(before - (await spendable())).toBe(3 * MUSIC_PRICE * 1_000_000);

      const done = await finishedJob(job.id);
      expect(done.status).toBe("completed");
      expect(done.result).toMatchObject({ content_type: "audio/wav", duration: 3 });
      expect(done.result!.url).toBe(`${gw.url}/v1/music/generations/${job.id}/content`);
      const file = await fetch(done.result!.url, { headers: bearer(KEY) });
      expect(file.status).toBe(200);
      expect(file.headers.get("content-type")).toBe("audio/wav");
      const bytes = Buffer.from(await file.arrayBuffer());
      expect(bytes.length).toBe(done.result!.bytes);
      expect(readWavInfo(bytes)?.durationSeconds).toBe(3);
      expect(before - (await spendable())).toBe(3 * MUSIC_PRICE * 1_000_000);
      expect(await musicLog()).toEqual([
        { state: "settled", cost_micro: 3 * MUSIC_PRICE * 1_000_000 },
      ]);
      const other = await fetch(done.result!.url, { headers: bearer(POOR_KEY) });
      expect(other.status).toBe(404);
    });

    it("fails a job whose provider fails, with an error, and refunds its hold", async () => {
      const before = await spendable();
      // A job that takes a while: its hold is still there when the quota is read.
      const job = await submitMusic("[[mock:fail=500]]", 2, "steady-music");
      expect(before - (await spendable())).toBe(2 * MUSIC_PRICE * 1_000_000);
      const done = await finishedJob(job.id);
      expect(done.status).toBe("failed");
      expect(done.error).toEqual({
        code: "upstream_error",
        message: "The provider failed or timed out.",
      });
      expect(done.result).toBeUndefined();
      expect(await spendable()).toBe(before);
      expect((await musicLog()).at(-1)).toEqual({ state: "failed", cost_micro: 0 });
    });

    it("answers a submission queued even when another gateway's runner claims it at once", async () => {
      // A second runner on the database that looks at the queue every millisecond: it claims a
      // job as soon as its insert commits, before this gateway could read the row back.
      const eager = await startJobRunner(gw.services, { pollMs: 1 });
      try {
        for (let i = 0; i < 20; i++) {
          const job = (await submitMusic(`eager ${i}`, 1)) as Job & { started_at: unknown };
          expect(job).toMatchObject({ status: "queued", started_at: null });
          expect((await finishedJob(job.id)).status).toBe("completed");
        }
      } finally {
        await eager.stop();
      }
    });
  });

  describe("the owner dashboard (device-flow.test.ts, dashboard-account.test.ts)", () => {
    it("follows the owner URL to a session whose dashboard shows the account and its usage", async () => {
      expect(gw.ownerUrl).toMatch(
        new RegExp(`^${gw.url}/dashboard/login\\?token=[A-Za-z0-9_-]{43}$`),
      );
      const first = await fetch(gw.ownerUrl!, { redirect: "manual" });
      expect(first.status).toBe(303);
      expect(first.headers.get("location")).toBe("/dashboard");
      const cookie = first.headers.get("set-cookie")!;
      expect(cookie).toMatch(/HttpOnly/);
      const session = { cookie: cookie.split(";")[0] };
      const page = await fetch(`${gw.url}/dashboard`, { headers: session });
      expect(page.status).toBe(200);
      const html = await page.text();
      expect(html).toContain("Dashboard of account acct");
      const summary = (await (
        await fetch(`${gw.url}/v1/usage/summary`, { headers: bearer(KEY) })
      ).json()) as { requests: number };
      expect(summary.requests).toBeGreaterThan(0);
      expect(html).toContain(
        `<p id="usage-total"><strong>${summary.requests.toLocaleString("en-US")}</strong> requests`,
      );
      expect(html).toMatch(/<table id="recent">[\s\S]*<code>mock-music<\/code>/);

      const csrf = /name="csrf-token" content="([^"]+)"/.exec(html)![1];
      const viaApi = (await (
        await fetch(`${gw.url}/api/dashboard/usage/summary`, {
          headers: { ...session, "x-csrf-token": csrf },
        })
      ).json()) as { account_id: string; requests: number };
      expect(viaApi).toMatchObject({ account_id: "acct", requests: summary.requests });

      // The owner's account view shows the balance as charged, right after an answer.
      expect((await post(gw, "/v1/chat/completions", chat())).status).toBe(200);
      const account = (await (
        await fetch(`${gw.url}/api/dashboard/account`, { headers: session })
      ).json()) as { id: string; balance_idr: number };
      expect(account.id).toBe("acct");
      expect(account.balance_idr).toBe((await quota(gw)).balance_idr);

      // A key made under the session shows on the page, never whole; the page's form revokes it.
      const created = await fetch(`${gw.url}/api/dashboard/keys`, {
        method: "POST",
        headers: { ...session, "x-csrf-token": csrf, "content-type": "application/json" },
        body: JSON.stringify({ label: "to-revoke" }),
      });
      expect(created.status).toBe(201);
      const made = (await created.json()) as { id: string; key: string };
      const listing = await (await fetch(`${gw.url}/dashboard`, { headers: session })).text();
      expect(listing).toContain(made.id);
      expect(listing).toContain("to-revoke");
      expect(listing).not.toContain(made.key);
      expect((await post(gw, "/v1/chat/completions", chat(), bearer(made.key))).status).toBe(200);
      const form = await fetch(`${gw.url}/dashboard/keys/${made.id}/revoke`, {
        method: "POST",
        headers: {
          ...session,
          "content-type": "application/x-www-form-urlencoded",
          origin: gw.url,
        },
        body: new URLSearchParams({ csrf_token: csrf }).toString(),
        redirect: "manual",
      });
      expect(form.status).toBe(303);
      const refused = await post(gw, "/v1/chat/completions", chat(), bearer(made.key));
      expect(refused.status).toBe(401);
      expect(await refused.text()).toBe("API key revoked");

      const again = await fetch(gw.ownerUrl!, { redirect: "manual" });
      expect(again.status).toBe(401);
      expect(await again.text()).toContain("already used");
    });
  });

  describe("config", () => {
    it("reaches a running gateway when another gateway applies a changed config (config.test.ts)", async () => {
      const models = async () =>
        (
          (await (await fetch(`${gw.url}/v1/models`)).json()) as { data: { id: string }[] }
        ).data.map((model) => model.id);
      expect(await models()).not.toContain("late-model");
      const before = await quota(gw);
      const changed = mainConfig(upstream.baseUrl);
      changed.models = [
        ...changed.models!,
        { name: "late-model", provider: "mock", price_input_per_mtok: 10_000 },
      ];
      changed.accounts = changed.accounts!.map((account) =>
        account.id === "usage" ? { ...account, balance_idr: 7 } : account,
      );
      const second = await postgresGateway({ db, config: changed });
      try {
        await expect.poll(models, { timeout: 2_000, interval: 20 }).toContain("late-model");
        await expect
          .poll(async () => (await quota(gw, USAGE_KEY)).balance_idr, { timeout: 2_000 })
          .toBe(7);
        // An unchanged account keeps what it spent; a changed one takes the config's values.
        for (const running of [gw, second])
          expect((await quota(running)).balance_idr).toBe(before.balance_idr);
        const res = await post(gw, "/v1/chat/completions", chat("x", "late-model"));
        expect(res.status).toBe(200);
        const { usage } = (await res.json()) as { usage: { prompt_tokens: number } };
        const charged = micro(before.balance_idr) - usage.prompt_tokens * 10_000;
        for (const running of [gw, second])
          expect(micro((await quota(running)).balance_idr)).toBe(charged);
      } finally {
        await second.close();
      }
      expect((await post(gw, "/v1/chat/completions", chat())).status).toBe(200);
    });
  });
});

describe("a gateway on Postgres with a manual clock (clock.test.ts, limits.test.ts, billing.test.ts)", () => {
  const start = Date.parse("2030-01-01T23:00:00Z");
  let gw: RunningGateway;

  beforeAll(async () => {
    const base = baseConfig();
    gw = await postgresGateway({
      db: await createTestDatabase(),
      clock: "manual",
      now: () => start,
      config: {
        ...base,
        models: [...base.models!, { name: "flat", provider: "mock", price_per_request: 1_000 }],
        tiers: { free: { free_rpm: 100, free_daily: 2, burst_spacing_ms: 0 } },
        accounts: [
          { ...base.accounts![0], rpm_limit: 2 },
          {
            id: "payg",
            balance_idr: 0,
            payg: { enabled: true, limit_idr: 1_000, window_seconds: 60 },
            keys: [{ id: "payg-key", value: PAYG_KEY }],
          },
          {
            id: "subscriber",
            balance_idr: 1_000_000,
            subscription: {
              plan: "pro",
              windows: [{ name: "5h", seconds: 18_000, quota: 2 }],
              started_at: start,
            },
            keys: [{ id: "subscriber-key", value: SUBSCRIBER_KEY }],
          },
        ],
      },
    });
  });
  afterAll(() => gw?.close());

  const free = () => chat("hi", "mock-gpt:free");

  it("counts only successful free requests against the daily allowance: 429 free_quota_daily until 00:00 UTC", async () => {
    expect(
      (await post(gw, "/v1/chat/completions", chat("[[mock:fail=503]]", "mock-gpt:free"))).status,
    ).toBe(503);
    expect((await post(gw, "/v1/chat/completions", free())).status).toBe(200);
    expect((await post(gw, "/v1/chat/completions", free())).status).toBe(200);
    expect(await errorOf(await post(gw, "/v1/chat/completions", free()))).toMatchObject({
      status: 429,
      code: "free_quota_daily",
      retryAfter: "3600",
    });
  });

  it("moves the account's per-minute window: 429, then admitted once the clock is 60 s on", async () => {
    expect((await post(gw, "/v1/chat/completions", chat())).status).toBe(200);
    expect((await post(gw, "/v1/chat/completions", chat())).status).toBe(200);
    expect(await errorOf(await post(gw, "/v1/chat/completions", chat()))).toMatchObject({
      status: 429,
      code: "rate_limit_exceeded",
      retryAfter: null,
    });
    gw.clock.advance(60_000);
    expect((await post(gw, "/v1/chat/completions", chat())).status).toBe(200);
    expect(await errorOf(await post(gw, "/v1/chat/completions", free()))).toMatchObject({
      code: "free_quota_daily",
      retryAfter: "3540",
    });
  });

  it("resets PAYG spending when its window rolls", async () => {
    const auth = bearer(PAYG_KEY);
    expect((await post(gw, "/v1/chat/completions", chat("x", "flat"), auth)).status).toBe(200);
    expect(
      await errorOf(await post(gw, "/v1/chat/completions", chat("x", "flat"), auth)),
    ).toMatchObject({ status: 402, code: "payg_limit_reached" });
    gw.clock.advance(61_000);
    expect((await post(gw, "/v1/chat/completions", chat("x", "flat"), auth)).status).toBe(200);
  });

  it("opens a new subscription window when the old one ends, and a new free day at midnight", async () => {
    const auth = bearer(SUBSCRIBER_KEY);
    for (const _ of [1, 2])
      expect((await post(gw, "/v1/chat/completions", chat(), auth)).status).toBe(200);
    expect((await post(gw, "/v1/chat/completions", chat(), auth)).status).toBe(429);
    gw.clock.advance(18_000_000);
    expect((await post(gw, "/v1/chat/completions", chat(), auth)).status).toBe(200);
    expect((await quota(gw, SUBSCRIBER_KEY)).subscription!.windows[0]).toMatchObject({
      used: 1,
      remaining: 1,
    });
    expect((await post(gw, "/v1/chat/completions", free())).status).toBe(200);
    expect((await quota(gw)).free).toMatchObject({ daily_used: 1, daily_remaining: 1 });
  });
});
