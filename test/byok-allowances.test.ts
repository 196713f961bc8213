import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { errorOf, type Quota, quota } from "./support/api.js";
import { ownerSession } from "./support/cli.js";
import {
  credentialSeen,
  type FakeUpstream,
  fakeUpstream,
  openaiError,
  openaiJson,
  openaiStreamSteps,
} from "./support/fake-upstream.js";
import {
  ADMIN_KEY,
  backends,
  baseConfigWith,
  chat,
  gatewayOn,
  KEY,
  post,
  SHARED_KEY,
  type TestGateway,
} from "./support/gateway.js";
import { type ServeProcess, serveProcess } from "./support/serve-process.js";

/**
 * A request the account's own provider key (BYOK) serves is not charged (DECISIONS: BYOK), and
 * so counts in no subscription window, free allowance or free token budget: admission cannot know
 * which key will serve and holds as usual, and the settlement gives it all back. One the gateway's
 * pool serves (the own key failed) pays and counts as any other.
 */

const START = Date.parse("2030-03-01T00:00:00Z");
const OWN = "sk-own-provider-key-1234";
const POOL = "sk-gateway-pool-key-5678";
const ROOMY_KEY = "kn-test-roomy-account-key-000000";

/** The fake's usage (11 in, 7 out) at these prices: 25 IDR an answer. */
const price = { price_input_per_mtok: 1_000_000, price_output_per_mtok: 2_000_000 };

describe.each(backends)("what the account's own key serves counts nothing on %s", (backend) => {
  let upstream: FakeUpstream;
  let gw: TestGateway;

  beforeAll(async () => {
    upstream = await fakeUpstream("openai");
    gw = await gatewayOn(backend, {
      config: baseConfigWith({
        providers: [
          {
            id: "own",
            wire: "openai",
            base_url: upstream.baseUrl,
            api_keys: [POOL],
            timeout_ms: 5_000,
          },
          // The same API, whose key the account does not have: only the gateway's pool serves it.
          { id: "pool-only", wire: "openai", base_url: upstream.baseUrl, api_keys: [POOL] },
        ],
        models: [
          { name: "own-gpt", provider: "own", upstream_model: "gpt-up", ...price },
          { name: "own-gpt:free", provider: "own", upstream_model: "gpt-up" },
          { name: "pool-gpt", provider: "pool-only", upstream_model: "gpt-up", ...price },
          {
            name: "budget:free",
            provider: "own",
            upstream_model: "gpt-up",
            free_token_budget: { tokens: 30, window_seconds: 3600 },
          },
        ],
        tiers: {
          free: { free_rpm: 100, free_daily: 2, burst_spacing_ms: 0 },
          roomy: { free_rpm: 100, free_daily: 100, burst_spacing_ms: 0 },
        },
        accounts: () => [
          {
            id: "acct",
            balance_idr: 1_000,
            rpm_limit: 1_000,
            subscription: {
              windows: [{ name: "1h", seconds: 3600, quota: 2 }],
              started_at: START,
              payg_fallback: false,
              free_fallback: false,
            },
            byok: [{ provider: "own", key: OWN }],
            keys: [{ id: "k1", label: "main", value: KEY }],
          },
          {
            id: "roomy",
            tier: "roomy",
            rpm_limit: 1_000,
            byok: [{ provider: "own", key: OWN }],
            keys: [{ id: "kr", value: ROOMY_KEY }],
          },
        ],
      }),
      // Every window stays where it is for the whole test.
      clock: "manual",
      now: () => START + 10 * 60_000,
    });
  });
  afterAll(async () => {
    await gw?.close();
    await upstream?.close();
  });
  beforeEach(() => upstream.reset());

  const ask = (model: string, key = KEY) =>
    post(gw, "/v1/chat/completions", chat("hi", model, { max_tokens: 20 }), {
      authorization: `Bearer ${key}`,
    });
  /** From now on the own key is refused, so the gateway's pool serves (requests seen start over). */
  const poolServes = () =>
    upstream.reset((req) =>
      credentialSeen(req) === OWN
        ? openaiError(401, "Incorrect API key provided", "invalid_api_key")
        : openaiJson("pool"),
    );
  const usage = async (path: string) => {
    const res = await fetch(`${gw.url}/v1/usage/${path}`, {
      headers: { authorization: `Bearer ${KEY}` },
    });
    expect(res.status).toBe(200);
    return res.json();
  };
  const dashboard = async () => {
    const owner = await ownerSession(gw);
    const res = await fetch(`${gw.url}/dashboard`, { headers: { cookie: owner.cookie } });
    expect(res.status).toBe(200);
    return res.text();
  };
  const window = (q: Quota) => q.subscription!.windows[0];

  it("three requests its own key serves pass a subscription window of two and leave it unused; one the pool serves counts", async () => {
    for (let i = 0; i < 3; i++) {
      const res = await ask("own-gpt");
      expect(res.status, await res.clone().text()).toBe(200);
    }
    expect(upstream.requests.map(credentialSeen)).toEqual([OWN, OWN, OWN]);

    const afterOwn = await quota(gw);
    expect(window(afterOwn)).toMatchObject({ used: 0, remaining: 2 });
    expect(afterOwn).toMatchObject({ balance_idr: 1_000, held_idr: 0 });
    const listed = (await usage("requests?limit=10")) as {
      data: { payment: string; cost_idr: number; state: string }[];
    };
    expect(listed.data.map((r) => [r.payment, r.cost_idr, r.state])).toEqual(
      Array(3).fill(["byok", 0, "settled"]),
    );
    expect(await usage("summary")).toMatchObject({ requests: 3, succeeded: 3, cost_idr: 0 });
    expect(await dashboard()).toContain("2 <small>of 2 left</small>");

    poolServes();
    expect((await ask("own-gpt")).status).toBe(200);
    expect(upstream.requests.map(credentialSeen)).toEqual([OWN, POOL]);
    const afterPool = await quota(gw);
    expect(window(afterPool)).toMatchObject({ used: 1, remaining: 1 });
    expect(afterPool).toMatchObject({ balance_idr: 1_000, held_idr: 0 });
    const last = (await usage("requests?limit=1")) as { data: { payment: string }[] };
    expect(last.data[0].payment).toBe("subscription");
    expect(await dashboard()).toContain("1 <small>of 2 left</small>");
  });

  it("three free-model requests its own key serves pass a daily allowance of two and leave it unused; one the pool serves counts", async () => {
    for (let i = 0; i < 3; i++) {
      const res = await ask("own-gpt:free");
      expect(res.status, await res.clone().text()).toBe(200);
    }
    expect(upstream.requests.map(credentialSeen)).toEqual([OWN, OWN, OWN]);
    expect((await quota(gw)).free).toMatchObject({ daily_used: 0, daily_remaining: 2 });
    expect(await dashboard()).toContain('<span id="free-left">2</span>');

    poolServes();
    expect((await ask("own-gpt:free")).status).toBe(200);
    expect((await quota(gw)).free).toMatchObject({ daily_used: 1, daily_remaining: 1 });
    expect(await dashboard()).toContain('<span id="free-left">1</span>');
  });

  it("answers its own key serves spend none of a free model's token budget; the pool's do", async () => {
    // 18 tokens an answer against a budget of 30: two answers the pool serves use it up.
    for (let i = 0; i < 3; i++) {
      const res = await ask("budget:free", ROOMY_KEY);
      expect(res.status, await res.clone().text()).toBe(200);
    }
    poolServes();
    for (let i = 0; i < 2; i++) expect((await ask("budget:free", ROOMY_KEY)).status).toBe(200);
    const refused = await ask("budget:free", ROOMY_KEY);
    expect(await errorOf(refused)).toMatchObject({ status: 429, code: "rate_limit_exceeded" });
    expect(upstream.requests.map(credentialSeen)).toEqual([OWN, POOL, OWN, POOL]);
  });

  it("a used-up window refuses 429 plan_limit_reached only what no own key can serve: its own key serves the rest, as byok, counting in no window", async () => {
    // The pool's answers use the window up.
    for (let left = window(await quota(gw)).remaining; left > 0; left--)
      expect((await ask("pool-gpt")).status).toBe(200);
    const before = await quota(gw);
    expect(window(before)).toMatchObject({ used: 2, remaining: 0 });
    const refused = await ask("pool-gpt");
    expect(await errorOf(refused)).toMatchObject({ status: 429, code: "plan_limit_reached" });
    upstream.reset((req) =>
      req.body.stream === true
        ? { kind: "sse", steps: openaiStreamSteps(["ok"]) }
        : openaiJson("ok"),
    );

    const whole = await ask("own-gpt");
    expect(whole.status, await whole.clone().text()).toBe(200);
    const streamed = await post(
      gw,
      "/v1/chat/completions",
      chat("hi", "own-gpt", { max_tokens: 20, stream: true }),
      { authorization: `Bearer ${KEY}` },
    );
    expect(streamed.status).toBe(200);
    expect(await streamed.text()).toContain("data: [DONE]");
    expect(upstream.requests.map(credentialSeen)).toEqual([OWN, OWN]);
    const last = (await usage("requests?limit=2")) as {
      data: { model: string; payment: string; cost_idr: number; state: string }[];
    };
    expect(last.data.map((r) => [r.model, r.payment, r.cost_idr, r.state])).toEqual(
      Array(2).fill(["own-gpt", "byok", 0, "settled"]),
    );
    const after = await quota(gw);
    expect(window(after)).toMatchObject({ used: 2, remaining: 0 });
    expect(after).toMatchObject({ balance_idr: before.balance_idr, held_idr: 0 });
  });
});

/**
 * On SQLite the per-minute counts live in the gateway's memory: a start takes them again from the
 * request log's requests of the minute, so a restart, clean or a crash, grants no new minute (as
 * on Postgres, where they live in the database). Each start runs the real `gateway serve` on one
 * file, on a manual clock set to the same minute.
 */
describe("per-minute limits of gateway serve on SQLite across a restart", () => {
  let dir: string;
  let serve: ServeProcess | undefined;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "gateway-rpm-restart-"));
  });
  afterEach(async () => {
    await serve?.stop("SIGKILL");
    serve = undefined;
    rmSync(dir, { recursive: true, force: true });
  });

  const start = async (config: object, at: string) => {
    const configPath = join(dir, "config.json");
    writeFileSync(configPath, JSON.stringify(config));
    serve = await serveProcess([
      "--db",
      join(dir, "gateway.db"),
      "--config",
      configPath,
      "--manual-clock",
    ]);
    await setClock(at);
  };
  const setClock = async (at: string) => {
    const res = await fetch(`${serve!.url}/api/admin/clock`, {
      method: "POST",
      headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ set: at }),
    });
    expect(res.status).toBe(200);
  };
  const send = async (model: string, key = KEY) => {
    const res = await post(serve!, "/v1/chat/completions", chat("hi", model), {
      authorization: `Bearer ${key}`,
    });
    if (res.status === 200) return 200;
    return `${res.status} ${(await errorOf(res)).code}`;
  };
  const statuses = async (n: number, model: string, key = KEY) => {
    const seen: (number | string)[] = [];
    for (let i = 0; i < n; i++) seen.push(await send(model, key));
    return seen;
  };

  it("rpm_limit 2: 200, 200, 429; killed and started again in the same minute, still 429; the next minute 200", async () => {
    const config = baseConfigWith({ accounts: (accounts) => [{ ...accounts[0], rpm_limit: 2 }] });
    await start(config, "2031-01-01T00:00:10Z");
    expect(await statuses(3, "mock-gpt")).toEqual([200, 200, "429 rate_limit_exceeded"]);

    await serve!.stop("SIGKILL");
    await start(config, "2031-01-01T00:00:20Z");
    expect(await statuses(2, "mock-gpt")).toEqual([
      "429 rate_limit_exceeded",
      "429 rate_limit_exceeded",
    ]);

    await setClock("2031-01-01T00:01:00Z");
    expect(await statuses(3, "mock-gpt")).toEqual([200, 200, "429 rate_limit_exceeded"]);
  }, 60_000);

  it("a clean stop and start keeps a shared key's share and the free per-minute limit too", async () => {
    const config = baseConfigWith({
      tiers: { free: { free_rpm: 2, free_daily: 100, burst_spacing_ms: 0 } },
      // A shared key may use half of the account's 4.
      accounts: (accounts) => [{ ...accounts[0], rpm_limit: 4 }],
    });
    await start(config, "2031-01-01T00:00:10Z");
    expect(await statuses(3, "mock-gpt", SHARED_KEY)).toEqual([
      200,
      200,
      "429 rate_limit_exceeded",
    ]);
    expect(await statuses(3, "mock-gpt:free")).toEqual([200, 200, "429 free_quota_rpm"]);

    expect(await serve!.stop("SIGTERM")).toBe(0);
    await start(config, "2031-01-01T00:00:30Z");
    expect(await statuses(1, "mock-gpt", SHARED_KEY)).toEqual(["429 rate_limit_exceeded"]);
    expect(await statuses(1, "mock-gpt:free")).toEqual(["429 free_quota_rpm"]);
    // The shared key's two count in the account's four: two more, then the account's limit.
    expect(await statuses(3, "mock-gpt")).toEqual([200, 200, "429 rate_limit_exceeded"]);

    await setClock("2031-01-01T00:01:00Z");
    expect(await statuses(1, "mock-gpt", SHARED_KEY)).toEqual([200]);
    expect(await statuses(1, "mock-gpt:free")).toEqual([200]);
  }, 60_000);
});
