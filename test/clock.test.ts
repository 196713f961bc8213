import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { admin, errorOf } from "./support/api.js";
import { cliHome, spawnCli } from "./support/cli.js";
import {
  type FakeUpstream,
  fakeUpstream,
  openaiError,
  openaiJson,
} from "./support/fake-upstream.js";
import {
  ADMIN_KEY,
  baseConfig,
  baseConfigWith,
  chat,
  KEY,
  KEY2,
  post,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";
import { serveProcess } from "./support/serve-process.js";

/** A test's own time: every window reset is reached by moving the gateway's clock, not by waiting. */

let gw: TestGateway | undefined;
let upstream: FakeUpstream | undefined;
afterEach(async () => {
  await gw?.close();
  await upstream?.close();
  gw = undefined;
  upstream = undefined;
});

const at = (iso: string) => () => Date.parse(iso);

function withTier(tier: object, extra: Partial<ConfigInput> = {}): ConfigInput {
  return baseConfig({
    tiers: { free: { free_rpm: 100, free_daily: 100, burst_spacing_ms: 0, ...tier } },
    ...extra,
  });
}

const free = () => chat("hi", "mock-gpt:free");

describe("a manual clock", () => {
  it("free daily quota: used up, then at 00:00 UTC admitted again", async () => {
    gw = await testGateway({
      config: withTier({ free_daily: 2 }),
      clock: "manual",
      now: at("2030-01-01T23:59:00Z"),
    });
    expect((await post(gw, "/v1/chat/completions", free())).status).toBe(200);
    expect((await post(gw, "/v1/chat/completions", free())).status).toBe(200);
    const refused = await errorOf(await post(gw, "/v1/chat/completions", free()));
    expect(refused).toMatchObject({ status: 429, code: "free_quota_daily", retryAfter: "60" });
    gw.clock.advance(59_000);
    expect(await errorOf(await post(gw, "/v1/chat/completions", free()))).toMatchObject({
      code: "free_quota_daily",
      retryAfter: "1",
    });
    gw.clock.set(new Date("2030-01-02T00:00:00Z"));
    expect((await post(gw, "/v1/chat/completions", free())).status).toBe(200);
  });

  it("Retry-After and X-RateLimit-Reset are computed from the manual clock", async () => {
    gw = await testGateway({
      config: withTier({ free_rpm: 1 }),
      clock: "manual",
      now: at("2030-01-01T00:00:10Z"),
    });
    const ok = await post(gw, "/v1/chat/completions", free());
    expect(ok.status).toBe(200);
    expect(ok.headers.get("x-ratelimit-reset")).toBe(
      String(Date.parse("2030-01-01T00:01:00Z") / 1000),
    );
    expect(ok.headers.get("x-ratelimit-remaining")).toBe("0");
    const limited = await errorOf(await post(gw, "/v1/chat/completions", free()));
    expect(limited).toMatchObject({ status: 429, code: "free_quota_rpm", retryAfter: "50" });
    gw.clock.advance(30_000);
    expect((await errorOf(await post(gw, "/v1/chat/completions", free()))).retryAfter).toBe("20");
    gw.clock.advance(20_000);
    expect((await post(gw, "/v1/chat/completions", free())).status).toBe(200);
  });

  it("subscription windows roll when the clock passes them", async () => {
    gw = await testGateway({
      config: baseConfigWith({
        accounts: (accounts) => [
          {
            ...accounts[0],
            subscription: {
              windows: [{ name: "5h", seconds: 5 * 3600, quota: 1 }],
              started_at: Date.parse("2030-01-01T00:00:00Z"),
            },
          },
        ],
      }),
      clock: "manual",
      now: at("2030-01-01T01:00:00Z"),
    });
    expect((await post(gw, "/v1/chat/completions", chat())).status).toBe(200);
    expect(await errorOf(await post(gw, "/v1/chat/completions", chat()))).toMatchObject({
      status: 429,
      code: "plan_limit_reached",
      retryAfter: null,
    });
    gw.clock.set(new Date("2030-01-01T05:00:00Z"));
    expect((await post(gw, "/v1/chat/completions", chat())).status).toBe(200);
  });

  it("the PAYG window resets when the clock passes it", async () => {
    gw = await testGateway({
      config: baseConfigWith({
        models: [{ name: "per-call", provider: "mock", price_per_request: 1 }],
        accounts: (accounts) => [
          { ...accounts[0], balance_idr: 0, payg: { limit_idr: 1, window_seconds: 3600 } },
        ],
      }),
      clock: "manual",
    });
    expect((await post(gw, "/v1/chat/completions", chat("hi", "per-call"))).status).toBe(200);
    expect(
      await errorOf(await post(gw, "/v1/chat/completions", chat("hi", "per-call"))),
    ).toMatchObject({
      status: 402,
      code: "payg_limit_reached",
    });
    gw.clock.advance(3600_000);
    expect((await post(gw, "/v1/chat/completions", chat("hi", "per-call"))).status).toBe(200);
  });

  it("a burst wait under a held manual clock (autoAdvance: false) ends when the clock passes its slot", async () => {
    gw = await testGateway({
      config: withTier({ burst_spacing_ms: 10_000 }),
      clock: "manual",
      autoAdvance: false,
    });
    expect((await post(gw, "/v1/chat/completions", free())).status).toBe(200);
    const second = post(gw, "/v1/chat/completions", free());
    const early = await Promise.race([
      second.then(() => "answered"),
      new Promise((resolve) => setTimeout(() => resolve("waiting"), 300)),
    ]);
    expect(early).toBe("waiting");
    gw.clock.advance(10_000);
    expect((await second).status).toBe(200);
  });

  it("two awaited free requests on the default tier: the clock jumps the burst spacing, and says so", async () => {
    gw = await testGateway({
      config: baseConfig({ tiers: { free: { free_rpm: 20, free_daily: 50 } } }),
      clock: "manual",
      now: at("2030-01-01T10:00:00Z"),
    });
    const first = await post(gw, "/v1/chat/completions", free());
    expect(first.status).toBe(200);
    expect(first.headers.get("x-gateway-burst-wait-ms")).toBeNull();
    const second = await post(gw, "/v1/chat/completions", free());
    expect(second.status).toBe(200);
    // burst_spacing_ms defaults to 200: the second waited exactly one slot of the gateway's clock.
    expect(second.headers.get("x-gateway-burst-wait-ms")).toBe("200");
    expect(gw.clock.now()).toBe(Date.parse("2030-01-01T10:00:00.200Z"));
  });

  it("the free_quota_daily pattern: used up one by one, then admitted after set()", async () => {
    gw = await testGateway({
      config: baseConfig({ tiers: { free: { free_rpm: 20, free_daily: 2 } } }),
      clock: "manual",
      now: at("2030-01-01T23:59:00Z"),
    });
    expect((await post(gw, "/v1/chat/completions", free())).status).toBe(200);
    expect((await post(gw, "/v1/chat/completions", free())).status).toBe(200);
    expect(await errorOf(await post(gw, "/v1/chat/completions", free()))).toMatchObject({
      status: 429,
      code: "free_quota_daily",
    });
    gw.clock.set(new Date("2030-01-02T00:00:00Z"));
    expect((await post(gw, "/v1/chat/completions", free())).status).toBe(200);
  });

  it("auto-advance waits while another request is in flight (not on the clock), then jumps", async () => {
    gw = await testGateway({
      config: withTier({ burst_spacing_ms: 10_000 }),
      clock: "manual",
      now: at("2030-01-01T10:00:00Z"),
    });
    // A stream the test holds open: a request in flight that does not wait on the clock.
    gw.mock.reply({ user_text: "hold" }, { text: "held", delay_ms: 60_000 });
    const held = new AbortController();
    const holding = fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY2}`, "content-type": "application/json" },
      body: JSON.stringify(chat("hold", "mock-gpt")),
      signal: held.signal,
    }).catch(() => undefined);
    expect((await post(gw, "/v1/chat/completions", free())).status).toBe(200);
    const second = post(gw, "/v1/chat/completions", free());
    const early = await Promise.race([
      second.then(() => "answered"),
      new Promise((resolve) => setTimeout(() => resolve("waiting"), 300)),
    ]);
    expect(early).toBe("waiting");
    expect(gw.clock.now()).toBe(Date.parse("2030-01-01T10:00:00Z"));
    held.abort();
    await holding;
    const answered = await second;
    expect(answered.status).toBe(200);
    expect(answered.headers.get("x-gateway-burst-wait-ms")).toBe("10000");
  });

  it("a music job completes when the clock passes its duration", async () => {
    gw = await testGateway({
      config: baseConfigWith({
        providers: [{ id: "mock-hour", wire: "mock", mock: { job_seconds: 3600 } }],
        models: [
          { name: "hour-music", provider: "mock-hour", modality: "music", price_per_unit: 10 },
        ],
      }),
      clock: "manual",
    });
    const res = await post(gw, "/v1/music/generations", {
      model: "hour-music",
      prompt: "a song",
      seconds: 2,
    });
    expect(res.status).toBe(202);
    const { id } = (await res.json()) as { id: string };
    const poll = async () =>
      (
        (await (
          await fetch(`${gw!.url}/v1/music/generations/${id}`, {
            headers: { authorization: `Bearer ${KEY}` },
          })
        ).json()) as {
          status: string;
        }
      ).status;
    const until = async (want: string) => {
      for (let i = 0; i < 100; i++) {
        if ((await poll()) === want) return;
        await new Promise((r) => setTimeout(r, 20));
      }
      throw new Error(`job never reached ${want}`);
    };
    await until("running");
    gw.clock.advance(3_599_000);
    await new Promise((r) => setTimeout(r, 100));
    expect(await poll()).toBe("running");
    gw.clock.advance(1_000);
    await until("completed");
  });

  it("a provider key's cooldown ends when the clock passes it", async () => {
    upstream = await fakeUpstream("openai");
    gw = await testGateway({
      config: baseConfig({
        providers: [
          {
            id: "pool",
            wire: "openai",
            base_url: upstream.baseUrl,
            api_keys: ["sk-only-key"],
            cooldown_ms: 60_000,
          },
        ],
        models: [{ name: "pooled", provider: "pool", price_input_per_mtok: 1000 }],
        routes: [],
      }),
      clock: "manual",
    });
    upstream.queue(openaiError(429, "slow down", "rate_limit_exceeded"));
    expect(
      (await errorOf(await post(gw, "/v1/chat/completions", chat("hi", "pooled")))).status,
    ).toBe(429);
    expect(
      await errorOf(await post(gw, "/v1/chat/completions", chat("hi", "pooled"))),
    ).toMatchObject({
      status: 503,
      code: "all_providers_failed",
      retryAfter: "60",
    });
    gw.clock.advance(45_000);
    expect(
      (await errorOf(await post(gw, "/v1/chat/completions", chat("hi", "pooled")))).retryAfter,
    ).toBe("15");
    gw.clock.advance(15_000);
    upstream.handle(() => openaiJson("back"));
    expect((await post(gw, "/v1/chat/completions", chat("hi", "pooled"))).status).toBe(200);
    expect(upstream.requests).toHaveLength(2);
  });

  it("a message thread the gateway holds lasts 30 days of the manual clock", async () => {
    gw = await testGateway({ clock: "manual", now: at("2030-01-01T00:00:00Z") });
    const threads = {
      authorization: `Bearer ${KEY}`,
      "anthropic-beta": "message-threads-2026-08-12",
    };
    const turn = (thread: object) =>
      post(
        gw as TestGateway,
        "/v1/messages",
        {
          model: "mock-gpt",
          max_tokens: 50,
          thread,
          messages: [{ role: "user", content: "Weather in Jakarta?" }],
        },
        threads,
      );
    const created = await turn({ type: "create" });
    expect(created.status).toBe(200);
    const { id } = (await created.json()) as { id: string };
    gw.clock.advance(29 * 24 * 3600_000);
    const continued = await turn({ type: "continue", previous_message_id: id });
    expect(continued.status).toBe(200);
    const { id: next } = (await continued.json()) as { id: string };
    gw.clock.advance(30 * 24 * 3600_000);
    const expired = await errorOf(await turn({ type: "continue", previous_message_id: next }));
    expect(expired.status).toBe(404);
  });
});

describe("POST /api/admin/clock", () => {
  it("advances and sets a manual clock, with the admin key", async () => {
    gw = await testGateway({ clock: "manual", now: at("2030-01-01T00:00:00Z") });
    const advanced = await admin(gw, "POST", "/clock", { advance_ms: 90_000 });
    expect(await advanced.json()).toMatchObject({ now: "2030-01-01T00:01:30.000Z" });
    const set = await admin(gw, "POST", "/clock", { set: "2030-06-01T12:00:00Z" });
    expect(await set.json()).toMatchObject({ now: "2030-06-01T12:00:00.000Z" });
    expect(gw.clock.now()).toBe(Date.parse("2030-06-01T12:00:00Z"));
    expect((await admin(gw, "POST", "/clock", { advance_ms: -1 })).status).toBe(400);
    expect((await admin(gw, "POST", "/clock", { set: "tomorrow" })).status).toBe(400);
    const noAdmin = await post(
      gw,
      "/api/admin/clock",
      { advance_ms: 1 },
      { authorization: `Bearer ${KEY}` },
    );
    expect(noAdmin.status).toBe(401);
  });

  it("is 404 when the clock is real, and the programmatic clock refuses to move", async () => {
    gw = await testGateway();
    const res = await admin(gw, "POST", "/clock", { advance_ms: 1000 });
    expect(await errorOf(res)).toMatchObject({ status: 404, code: "not_found" });
    expect(() => gw!.clock.advance(1000)).toThrow(/not manual/);
  });

  it("gateway serve --manual-clock on the demo setup prints a curl that moves its clock, and jumps burst spacing", async () => {
    const home = cliHome();
    const serve = spawnCli(
      ["serve", "--port", "0", "--db", ":memory:", "--manual-clock"],
      home.env,
    );
    try {
      const [curl] = await serve.waitFor(
        /curl -X POST \S+\/api\/admin\/clock .*'\{"advance_ms":60000\}'/,
      );
      const [, url] = await serve.waitFor(/gateway listening on (\S+)/);
      const [, key] = await serve.waitFor(/demo key \(shown once, store it now\): (\S+)/);
      const [, start] = await serve.waitFor(/manual clock at (\S+):/);
      // The command exactly as printed, in a shell.
      const moved = JSON.parse(execFileSync("sh", ["-c", `${curl} --silent`]).toString());
      expect(moved.now_ms).toBe(Date.parse(start) + 60_000);
      const free = () =>
        fetch(`${url}/v1/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
          body: JSON.stringify(chat("hi", "mock-gpt:free")),
        });
      expect((await free()).status).toBe(200);
      const second = await free();
      expect(second.status).toBe(200);
      expect(second.headers.get("x-gateway-burst-wait-ms")).toBe("200");
      await serve.waitFor(
        /200 {2}POST \/v1\/chat\/completions {2}mock-gpt:free .*spaced 200 ms \(burst\)/,
      );
    } finally {
      serve.child.kill("SIGTERM");
      await serve.exit();
      home.remove();
    }
  });

  it("gateway serve --manual-clock enables it", async () => {
    const dir = mkdtempSync(join(tmpdir(), "gateway-clock-"));
    const config = join(dir, "gateway.json");
    writeFileSync(config, JSON.stringify(baseConfig()));
    const served = await serveProcess([
      "--db",
      join(dir, "g.db"),
      "--config",
      config,
      "--manual-clock",
    ]);
    try {
      const res = await fetch(`${served.url}/api/admin/clock`, {
        method: "POST",
        headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json" },
        body: JSON.stringify({ set: "2031-01-01T00:00:00Z" }),
      });
      expect(await res.json()).toMatchObject({ now: "2031-01-01T00:00:00.000Z" });
    } finally {
      await served.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("time going backwards never hands out what was spent", () => {
  const subscribed = (startedAt: string, balance = 1_000_000) => {
    return baseConfigWith({
      accounts: (accounts) => [
        {
          ...accounts[0],
          balance_idr: balance,
          subscription: {
            windows: [{ name: "5h", seconds: 5 * 3600, quota: 1 }],
            started_at: Date.parse(startedAt),
          },
        },
      ],
    });
  };

  it("a manual clock set a day back: the free daily allowance used stays used", async () => {
    gw = await testGateway({
      config: withTier({ free_daily: 2 }),
      clock: "manual",
      now: at("2030-01-02T10:00:00Z"),
    });
    for (let i = 0; i < 2; i++)
      expect((await post(gw, "/v1/chat/completions", free())).status).toBe(200);
    expect(await errorOf(await post(gw, "/v1/chat/completions", free()))).toMatchObject({
      code: "free_quota_daily",
    });
    gw.clock.set(new Date("2030-01-01T10:00:00Z"));
    expect(await errorOf(await post(gw, "/v1/chat/completions", free()))).toMatchObject({
      status: 429,
      code: "free_quota_daily",
    });
  });

  it("a manual clock set two hours back: the subscription window used stays used", async () => {
    gw = await testGateway({
      config: subscribed("2030-01-01T00:00:00Z", 0),
      clock: "manual",
      now: at("2030-01-01T06:00:00Z"),
    });
    expect((await post(gw, "/v1/chat/completions", chat())).status).toBe(200);
    expect(await errorOf(await post(gw, "/v1/chat/completions", chat()))).toMatchObject({
      code: "plan_limit_reached",
    });
    gw.clock.set(new Date("2030-01-01T04:00:00Z"));
    expect(await errorOf(await post(gw, "/v1/chat/completions", chat()))).toMatchObject({
      status: 429,
      code: "plan_limit_reached",
    });
  });

  it("a subscription pays for nothing before its start", async () => {
    gw = await testGateway({
      config: subscribed("2030-01-01T12:00:00Z", 0),
      clock: "manual",
      now: at("2030-01-01T10:00:00Z"),
    });
    expect(await errorOf(await post(gw, "/v1/chat/completions", chat()))).toMatchObject({
      status: 402,
      code: "insufficient_balance",
    });
    gw.clock.set(new Date("2030-01-01T12:00:00Z"));
    expect((await post(gw, "/v1/chat/completions", chat())).status).toBe(200);
  });

  it("a gateway restarted on a wall clock a day behind its log re-grants no daily allowance", async () => {
    const dir = mkdtempSync(join(tmpdir(), "gateway-clock-"));
    const db = join(dir, "gateway.db");
    try {
      gw = await testGateway({
        db,
        config: withTier({ free_daily: 2 }),
        now: at("2030-01-02T10:00:00Z"),
      });
      for (let i = 0; i < 2; i++)
        expect((await post(gw, "/v1/chat/completions", free())).status).toBe(200);
      await gw.close();
      gw = await testGateway({
        db,
        config: withTier({ free_daily: 2 }),
        now: at("2030-01-01T10:00:00Z"),
      });
      expect(await errorOf(await post(gw, "/v1/chat/completions", free()))).toMatchObject({
        status: 429,
        code: "free_quota_daily",
      });
    } finally {
      await gw?.close();
      gw = undefined;
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("a wall clock stepped back (NTP) re-grants neither per-minute nor daily allowances", async () => {
    let wall = Date.parse("2030-01-02T00:00:30Z");
    gw = await testGateway({
      config: withTier({ free_daily: 3, free_rpm: 2 }),
      now: () => wall,
    });
    for (let i = 0; i < 2; i++)
      expect((await post(gw, "/v1/chat/completions", free())).status).toBe(200);
    expect(await errorOf(await post(gw, "/v1/chat/completions", free()))).toMatchObject({
      code: "free_quota_rpm",
    });
    // Stepped back past the minute and the day.
    wall = Date.parse("2030-01-01T23:58:00Z");
    expect(await errorOf(await post(gw, "/v1/chat/completions", free()))).toMatchObject({
      status: 429,
      code: "free_quota_rpm",
    });
    wall = Date.parse("2030-01-02T00:01:00Z");
    expect((await post(gw, "/v1/chat/completions", free())).status).toBe(200);
    // The day's three are spent; a day back does not make them new.
    wall = Date.parse("2030-01-01T12:00:00Z");
    expect(await errorOf(await post(gw, "/v1/chat/completions", free()))).toMatchObject({
      status: 429,
      code: "free_quota_daily",
    });
  });
});
