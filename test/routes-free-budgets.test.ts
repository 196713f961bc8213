import OpenAI from "openai";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { errorOf } from "./support/api.js";
import {
  type FakeUpstream,
  fakeUpstream,
  openaiError,
  openaiJson,
} from "./support/fake-upstream.js";
import {
  ADMIN_KEY,
  backends,
  baseConfigWith,
  chat,
  gatewayOn,
  KEY,
  post,
  type TestGateway,
} from "./support/gateway.js";

/**
 * A free route's steps each spend their own token budget, checked when the step is tried (a spent
 * one is skipped, and a request none can serve is refused with the soonest refill); and the
 * request log names the model that served a route, beside its provider.
 */

// Ten minutes into an hour: a budget of an hour refills in 50 minutes, one of 30 in 20.
const T0 = Date.parse("2030-01-01T00:10:00Z");

let one: FakeUpstream;
let two: FakeUpstream;
beforeAll(async () => {
  [one, two] = await Promise.all([fakeUpstream("openai"), fakeUpstream("openai")]);
});
afterAll(async () => {
  await Promise.all([one?.close(), two?.close()]);
});

const open: TestGateway[] = [];
afterEach(async () => {
  for (const gw of open.splice(0)) await gw.close();
  one.reset();
  two.reset();
});

/**
 * `a:free` on provider `pa` (upstream `one`), `b:free` on `pb` (upstream `two`), each with a
 * budget of 10 tokens (one answer of the fake's 18 spends it): a's window is an hour, b's half
 * that. `m1` and `m2` are paid models on one provider (upstream `one`).
 */
function config(): ConfigInput {
  const provider = (id: string, fake: FakeUpstream) => ({
    id,
    wire: "openai" as const,
    base_url: fake.baseUrl,
    api_keys: [`sk-${id}`],
    timeout_ms: 3_000,
    cooldown_ms: 1,
  });
  return baseConfigWith({
    providers: [provider("pa", one), provider("pb", two)],
    models: [
      {
        name: "a:free",
        provider: "pa",
        upstream_model: "a-up",
        free_token_budget: { tokens: 10, window_seconds: 3600 },
      },
      {
        name: "b:free",
        provider: "pb",
        upstream_model: "b-up",
        free_token_budget: { tokens: 10, window_seconds: 1800 },
      },
      { name: "m1", provider: "pa", upstream_model: "m1-up", price_input_per_mtok: 1_000 },
      { name: "m2", provider: "pa", upstream_model: "m2-up", price_input_per_mtok: 1_000 },
    ],
    routes: () => [
      { name: "a-then-b", steps: ["a:free", "b:free"] },
      { name: "b-then-a", steps: ["b:free", "a:free"] },
      { name: "one-provider", steps: ["m1", "m2"] },
    ],
    tiers: { free: { free_rpm: 100, free_daily: 100, burst_spacing_ms: 0 } },
  });
}

const upstreamModels = (fake: FakeUpstream) => fake.requests.map((r) => r.body.model);

describe.each(backends)("free route budgets and the served model (%s)", (backend) => {
  let gw: TestGateway;
  let now = T0;
  const start = async () => {
    now = T0;
    gw = await gatewayOn(backend, { config: config(), now: () => now });
    open.push(gw);
  };
  /** Spends a free model's budget with one direct request. */
  const spend = async (model: string) => {
    expect((await post(gw, "/v1/chat/completions", chat("spend", model))).status).toBe(200);
  };

  it("a route whose first step's budget is used up is served by the next step", async () => {
    await start();
    await spend("a:free");
    one.reset();
    const answer = await post(gw, "/v1/chat/completions", chat("hi", "a-then-b"));
    expect(answer.status, await answer.clone().text()).toBe(200);
    expect(((await answer.json()) as { model: string }).model).toBe("a-then-b");
    // a was skipped without a call; b answered.
    expect(one.requests).toHaveLength(0);
    expect(upstreamModels(two)).toEqual(["b-up"]);
    const [row] = await gw.listRequests({ limit: 1 });
    expect(row).toMatchObject({ model: "a-then-b", provider: "pb", served_model: "b:free" });
  });

  it("a step whose budget is used up does not serve when the step before it fails", async () => {
    await start();
    await spend("a:free");
    one.reset();
    two.queue(openaiError(500, "down", null, "server_error"));
    const refused = await post(gw, "/v1/chat/completions", chat("hi", "b-then-a"));
    expect(await errorOf(refused)).toMatchObject({ status: 503, code: "all_providers_failed" });
    expect(one.requests).toHaveLength(0);
  });

  it("a route none of whose steps has budget left is 429 rate_limit_exceeded with the soonest refill", async () => {
    await start();
    await spend("a:free");
    await spend("b:free");
    one.reset();
    two.reset();
    for (const route of ["a-then-b", "b-then-a"]) {
      const refused = await post(gw, "/v1/chat/completions", chat("hi", route));
      // b's half-hour window rolls over in 20 minutes, a's hour in 50.
      expect(await errorOf(refused)).toMatchObject({
        status: 429,
        code: "rate_limit_exceeded",
        retryAfter: String(20 * 60),
      });
    }
    expect(one.requests).toHaveLength(0);
    expect(two.requests).toHaveLength(0);
    // Once b's window rolls over, b serves again.
    now = T0 + 20 * 60_000;
    expect((await post(gw, "/v1/chat/completions", chat("hi", "a-then-b"))).status).toBe(200);
    expect(upstreamModels(two)).toEqual(["b-up"]);
  });

  it("the request log, the kit and the admin listing name the step of a route that served", async () => {
    await start();
    one.queue(openaiError(500, "down", null, "server_error"), openaiJson("from m2"));
    const openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    const completion = await openai.chat.completions.create({
      model: "one-provider",
      messages: [{ role: "user", content: "hi" }],
    });
    expect(completion.choices[0].message.content).toBe("from m2");
    // The answer keeps the name the client asked for (spec).
    expect(completion.model).toBe("one-provider");
    expect(upstreamModels(one)).toEqual(["m1-up", "m2-up"]);
    const [row] = await gw.listRequests({ limit: 1 });
    expect(row).toMatchObject({ model: "one-provider", provider: "pa", served_model: "m2" });
    const listed = await fetch(`${gw.url}/api/admin/requests?limit=1`, {
      headers: { authorization: `Bearer ${ADMIN_KEY}` },
    });
    const { data } = (await listed.json()) as { data: unknown[] };
    expect(data[0]).toMatchObject({ id: row.id, provider: "pa", served_model: "m2" });
  });
});
