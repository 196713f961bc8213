import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { admin, errorOf } from "./support/api.js";
import { baseConfigWith, chat, post } from "./support/gateway.js";
import {
  eventually,
  type GatewaysOnPostgres,
  gatewaysOnPostgres,
} from "./support/gateways-on-postgres.js";
import type { ServeProcess } from "./support/serve-process.js";
import { streamEvents } from "./support/sse.js";

/**
 * Two real `gateway serve` processes on one Postgres database, a client's requests spread over
 * both: the state a client builds on one (stored responses, conversations, message threads, jobs,
 * per-tool keys) and the limits it runs into hold on the other.
 */

const STATE_KEY = "kn-pg2-state-key-000000000000000";
const THREAD_KEY = "kn-pg2-thread-key-00000000000000";
const FREE_KEY = "kn-pg2-free-day-key-000000000000";
const MUSIC_KEY = "kn-pg2-music-key-000000000000000";
const TOOLS_LOGIN = "kn-pg2-login-key-000000000000000";
const USAGE_KEY = "kn-pg2-usage-key-000000000000000";
const STREAM_KEY = "kn-pg2-stream-key-00000000000000";
const FREE_DAILY = 3;
const SUB_KEY = "kn-pg2-sub-key-00000000000000000";
const RPM_KEY = "kn-pg2-rpm-key-00000000000000000";
const PAYG_KEY = "kn-pg2-payg-key-0000000000000000";
const TIER_KEY = "kn-pg2-tier-key-0000000000000000";
const RPM = 60;
const BURST_KEY = "kn-pg2-burst-key-000000000000000";
const SHARED_HUNT_KEY = "kn-pg2-shared-key-00000000000000";

const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

function config(): ConfigInput {
  return baseConfigWith({
    providers: [
      { id: "slow", wire: "mock", mock: { chunk_interval_ms: 100 } },
      { id: "slow-jobs", wire: "mock", mock: { job_seconds: 4 } },
    ],
    models: [
      {
        name: "slow-mock",
        provider: "slow",
        price_input_per_mtok: 1_000,
        price_output_per_mtok: 2_000,
      },
      { name: "per-request", provider: "mock", price_per_request: 7 },
      { name: "slow-music", provider: "slow-jobs", modality: "music", price_per_unit: 10 },
    ],
    tiers: {
      free: { free_rpm: 100, free_daily: 100, burst_spacing_ms: 0 },
      spaced: { free_rpm: 100, free_daily: 100, burst_spacing_ms: 1_500, burst_queue: 2 },
      tiny: { free_rpm: 100, free_daily: FREE_DAILY, burst_spacing_ms: 0 },
    },
    accounts: [
      {
        id: "state",
        balance_idr: 1_000_000,
        rpm_limit: 1_000,
        keys: [{ id: "h-state", value: STATE_KEY }],
      },
      {
        id: "thread",
        balance_idr: 1_000_000,
        rpm_limit: 1_000,
        keys: [{ id: "h-thread", value: THREAD_KEY }],
      },
      { id: "freeday", balance_idr: 0, tier: "tiny", keys: [{ id: "h-free", value: FREE_KEY }] },
      {
        id: "music",
        balance_idr: 1_000_000,
        rpm_limit: 1_000,
        keys: [{ id: "h-music", value: MUSIC_KEY }],
      },
      {
        id: "tools",
        balance_idr: 1_000_000,
        rpm_limit: 1_000,
        keys: [{ id: "h-login", kind: "login", value: TOOLS_LOGIN }],
      },
      {
        id: "usage",
        balance_idr: 1_000_000,
        rpm_limit: 1_000,
        keys: [{ id: "h-usage", value: USAGE_KEY }],
      },
      {
        id: "sub",
        balance_idr: 0,
        rpm_limit: 1_000,
        subscription: {
          plan: "pro",
          windows: [{ name: "5h", seconds: 18_000, quota: 5 }],
          payg_fallback: false,
          free_fallback: false,
        },
        keys: [{ id: "h-sub", value: SUB_KEY }],
      },
      {
        id: "rpm",
        balance_idr: 1_000_000,
        rpm_limit: RPM,
        keys: [{ id: "h-rpm", value: RPM_KEY }],
      },
      {
        id: "payg",
        balance_idr: 0,
        rpm_limit: 1_000,
        payg: { enabled: true, limit_idr: 7 * 5, window_seconds: 86_400 },
        keys: [{ id: "h-payg", value: PAYG_KEY }],
      },
      { id: "tierchange", balance_idr: 0, keys: [{ id: "h-tier", value: TIER_KEY }] },
      { id: "burst", balance_idr: 0, tier: "spaced", keys: [{ id: "h-burst", value: BURST_KEY }] },
      {
        id: "sharer",
        balance_idr: 1_000_000,
        rpm_limit: 1_000,
        keys: [{ id: "h-shared", kind: "shared", value: SHARED_HUNT_KEY }],
      },
      {
        id: "streamer",
        balance_idr: 1_000_000,
        rpm_limit: 1_000,
        keys: [{ id: "h-stream", value: STREAM_KEY }],
      },
    ],
  });
}

let cluster: GatewaysOnPostgres;
let a: ServeProcess;
let b: ServeProcess;

beforeAll(async () => {
  cluster = await gatewaysOnPostgres(2, config());
  [a, b] = cluster.gateways;
}, 60_000);
afterAll(async () => {
  await cluster?.stop();
});

const get = (gw: ServeProcess, path: string, key: string) =>
  fetch(`${gw.url}${path}`, { headers: bearer(key) });

// biome-ignore lint/suspicious/noExplicitAny: response bodies read loosely
type Json = any;

describe("Responses state across gateways", () => {
  it("a response stored on one gateway is continued, retrieved and listed on the other, with the same chain", async () => {
    const first = await post(
      a,
      "/v1/responses",
      { model: "mock-gpt", input: "My name is Ada." },
      bearer(STATE_KEY),
    );
    expect(first.status, await first.clone().text()).toBe(200);
    const one = (await first.json()) as Json;
    const onB = await post(
      b,
      "/v1/responses",
      { model: "mock-gpt", previous_response_id: one.id, input: "What is my name?" },
      bearer(STATE_KEY),
    );
    expect(onB.status, await onB.clone().text()).toBe(200);
    const two = (await onB.json()) as Json;
    const onA = await post(
      a,
      "/v1/responses",
      { model: "mock-gpt", previous_response_id: one.id, input: "What is my name?" },
      bearer(STATE_KEY),
    );
    const twoA = (await onA.json()) as Json;
    // The same chain was replayed on either gateway.
    expect(two.usage.input_tokens).toBe(twoA.usage.input_tokens);
    expect(two.usage.input_tokens).toBeGreaterThan(one.usage.input_tokens);
    const retrieved = await get(a, `/v1/responses/${two.id}`, STATE_KEY);
    expect(retrieved.status).toBe(200);
    expect(((await retrieved.json()) as Json).id).toBe(two.id);
    const items = await get(a, `/v1/responses/${two.id}/input_items`, STATE_KEY);
    expect(items.status).toBe(200);
    // Deleted on B: unknown on A at once.
    const deleted = await fetch(`${b.url}/v1/responses/${one.id}`, {
      method: "DELETE",
      headers: bearer(STATE_KEY),
    });
    expect(deleted.status).toBe(200);
    expect((await get(a, `/v1/responses/${one.id}`, STATE_KEY)).status).toBe(404);
    const gone = await post(
      a,
      "/v1/responses",
      { model: "mock-gpt", previous_response_id: one.id, input: "again" },
      bearer(STATE_KEY),
    );
    expect(await errorOf(gone)).toMatchObject({ status: 400, code: "bad_request" });
  });

  it("a streamed response stored on one gateway is continued at once on the other", async () => {
    for (let i = 0; i < 5; i++) {
      const res = await post(
        a,
        "/v1/responses",
        { model: "mock-gpt", input: `stream ${i}`, stream: true },
        bearer(STATE_KEY),
      );
      let id: string | undefined;
      let next: Response | undefined;
      for await (const { event, data } of streamEvents(res)) {
        if (event === "response.completed") {
          id = (data as Json).response.id;
          // The client sends its next turn as soon as it reads the completion.
          next = await post(
            b,
            "/v1/responses",
            { model: "mock-gpt", previous_response_id: id, input: "next" },
            bearer(STATE_KEY),
          );
        }
      }
      expect(next!.status, await next!.clone().text()).toBe(200);
    }
  });

  it("a conversation created on one gateway is continued on the other and lists every item on both", async () => {
    const created = await post(
      a,
      "/v1/conversations",
      { items: [{ type: "message", role: "user", content: "My name is Ada." }] },
      bearer(STATE_KEY),
    );
    expect(created.status).toBe(200);
    const conv = (await created.json()) as Json;
    const turn = await post(
      b,
      "/v1/responses",
      { model: "mock-gpt", conversation: conv.id, input: "Name?" },
      bearer(STATE_KEY),
    );
    expect(turn.status, await turn.clone().text()).toBe(200);
    const turn2 = await post(
      a,
      "/v1/responses",
      { model: "mock-gpt", conversation: conv.id, input: "Again?" },
      bearer(STATE_KEY),
    );
    expect(turn2.status).toBe(200);
    const listA = (await (
      await get(a, `/v1/conversations/${conv.id}/items?order=asc`, STATE_KEY)
    ).json()) as Json;
    const listB = (await (
      await get(b, `/v1/conversations/${conv.id}/items?order=asc`, STATE_KEY)
    ).json()) as Json;
    expect(listA.data.length).toBe(5);
    expect(listB).toEqual(listA);
  });

  it("an item_reference to an item stored on one gateway resolves on the other", async () => {
    const first = await post(
      a,
      "/v1/responses",
      { model: "mock-gpt", input: "remember me" },
      bearer(STATE_KEY),
    );
    const one = (await first.json()) as Json;
    const itemId = one.output[0].id as string;
    const ref = await post(
      b,
      "/v1/responses",
      {
        model: "mock-gpt",
        store: false,
        input: [
          { type: "item_reference", id: itemId },
          { role: "user", content: "and?" },
        ],
      },
      bearer(STATE_KEY),
    );
    expect(ref.status, await ref.clone().text()).toBe(200);
  });
});

describe("Anthropic message threads across gateways", () => {
  const threads = { ...bearer(THREAD_KEY), "anthropic-beta": "message-threads-2026-08-12" };
  const turn = (gw: ServeProcess, thread: object, content: string) =>
    post(
      gw,
      "/v1/messages",
      { model: "mock-gpt", max_tokens: 50, thread, messages: [{ role: "user", content }] },
      threads,
    );

  it("a thread created on one gateway is continued on the other, turn after turn", async () => {
    const created = await turn(a, { type: "create" }, "Weather in Jakarta?");
    expect(created.status).toBe(200);
    let id = ((await created.json()) as Json).id as string;
    const tokens: number[] = [];
    for (const gw of [b, a, b]) {
      const res = await turn(gw, { type: "continue", previous_message_id: id }, "and tomorrow?");
      expect(res.status, await res.clone().text()).toBe(200);
      const body = (await res.json()) as Json;
      id = body.id;
      tokens.push(body.usage.input_tokens);
    }
    // Every turn is sent the whole thread: it grows.
    expect(tokens[1]).toBeGreaterThan(tokens[0]);
    expect(tokens[2]).toBeGreaterThan(tokens[1]);
  });

  it("a streamed thread turn on one gateway is continued at once on the other", async () => {
    const created = await turn(a, { type: "create" }, "stream start");
    let id = ((await created.json()) as Json).id as string;
    for (const [from, to] of [
      [a, b],
      [b, a],
      [a, b],
    ] as const) {
      const res = await post(
        from,
        "/v1/messages",
        {
          model: "mock-gpt",
          max_tokens: 50,
          stream: true,
          thread: { type: "continue", previous_message_id: id },
          messages: [{ role: "user", content: "go" }],
        },
        threads,
      );
      expect(res.status).toBe(200);
      let next: Response | undefined;
      for await (const { event, data } of streamEvents(res)) {
        if (event === "message_start") id = (data as Json).message.id;
        if (event === "message_stop")
          next = await turn(to, { type: "continue", previous_message_id: id }, "next");
      }
      expect(next!.status, await next!.clone().text()).toBe(200);
      id = ((await next!.json()) as Json).id;
    }
  });
});

describe("limits across gateways", () => {
  it("the free daily allowance admits exactly its number of requests spread over both gateways", async () => {
    const results = await Promise.all(
      Array.from({ length: 4 * FREE_DAILY }, (_, i) =>
        post(
          i % 2 ? a : b,
          "/v1/chat/completions",
          chat(`free ${i}`, "mock-gpt:free"),
          bearer(FREE_KEY),
        ).then(async (res) => (res.status === 200 ? { status: 200 } : errorOf(res))),
      ),
    );
    expect(results.filter((r) => r.status === 200)).toHaveLength(FREE_DAILY);
    for (const r of results.filter((r) => r.status !== 200))
      expect(r).toMatchObject({ status: 429, code: "free_quota_daily" });
  });

  it("at most 2 music generations of an account run at once, whichever gateways they reach", async () => {
    const results = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        post(
          i % 2 ? a : b,
          "/v1/music/generations",
          { model: "slow-music", prompt: `m${i}`, duration: 1 },
          bearer(MUSIC_KEY),
        ),
      ),
    );
    const statuses = results.map((r) => r.status);
    expect(statuses.filter((s) => s === 202)).toHaveLength(2);
    expect(statuses.filter((s) => s === 429)).toHaveLength(4);
    // A job submitted on one is polled on the other to its end.
    const accepted = results.filter((r) => r.status === 202);
    const ids = await Promise.all(
      accepted.map(async (r) => ((await r.json()) as Json).id as string),
    );
    for (const id of ids) {
      const done = await eventually(
        async () =>
          ((await (await get(a, `/v1/music/generations/${id}`, MUSIC_KEY)).json()) as Json).status,
        (status) => status === "completed" || status === "failed",
        20_000,
        "music job",
      );
      expect(done).toBe("completed");
      const other = (await (await get(b, `/v1/music/generations/${id}`, MUSIC_KEY)).json()) as Json;
      expect(other.status).toBe("completed");
    }
    const [row] = await cluster.sql<{ n: number; cost: number }>(
      "SELECT count(*)::int AS n, sum(cost_micro)::bigint AS cost FROM request_log WHERE account_id = 'music' AND state = 'settled'",
    );
    expect(row.n).toBe(2);
  }, 40_000);

  it("a login key mints at most 20 per-tool keys a minute, whichever gateways it asks", async () => {
    const intoMinute = Date.now() % 60_000;
    if (intoMinute > 45_000) await new Promise((r) => setTimeout(r, 60_000 - intoMinute + 50));
    const results = await Promise.all(
      Array.from({ length: 30 }, (_, i) =>
        post(i % 2 ? a : b, "/api/keys", { label: `tool ${i}` }, bearer(TOOLS_LOGIN)),
      ),
    );
    const statuses = results.map((r) => r.status);
    expect(statuses.filter((s) => s === 201)).toHaveLength(20);
    expect(statuses.filter((s) => s === 429)).toHaveLength(10);
    const listA = (await (await get(a, "/api/keys", TOOLS_LOGIN)).json()) as Json;
    const listB = (await (await get(b, "/api/keys", TOOLS_LOGIN)).json()) as Json;
    expect(listB).toEqual(listA);
  }, 70_000);
});

describe("usage reports across gateways", () => {
  it("read on either gateway, the summary, daily and recent requests are the same", async () => {
    for (let i = 0; i < 6; i++)
      expect(
        (await post(i % 2 ? a : b, "/v1/chat/completions", chat(`u${i}`), bearer(USAGE_KEY)))
          .status,
      ).toBe(200);
    for (const path of ["/v1/usage/summary", "/v1/usage/daily", "/v1/usage/requests?limit=100"]) {
      const onA = (await (await get(a, path, USAGE_KEY)).json()) as Json;
      const onB = (await (await get(b, path, USAGE_KEY)).json()) as Json;
      expect(onB, path).toEqual(onA);
    }
    const recent = (await (await get(a, "/v1/usage/requests?limit=100", USAGE_KEY)).json()) as Json;
    expect(recent.data).toHaveLength(6);
  });
});

describe("suspension across gateways", () => {
  it("an account suspended on one gateway ends its open stream on the other with an error event", async () => {
    const res = await post(
      b,
      "/v1/chat/completions",
      {
        model: "slow-mock",
        stream: true,
        messages: [{ role: "user", content: "long [[mock:words=300]]" }],
      },
      bearer(STREAM_KEY),
    );
    expect(res.status).toBe(200);
    const deltas: string[] = [];
    const events: Json[] = [];
    let acted = false;
    for await (const { data } of streamEvents(res)) {
      if (data === "[DONE]") continue;
      events.push(data);
      const text = (data as Json).choices?.[0]?.delta?.content;
      if (text) deltas.push(text);
      if (!acted && deltas.length >= 3) {
        acted = true;
        expect((await admin(a, "POST", "/accounts/streamer/suspend")).status).toBe(200);
      }
    }
    expect(deltas.length).toBeLessThan(150);
    expect(events.at(-1).error).toMatchObject({ code: "account_suspended" });
  }, 60_000);
});

describe("more money and limits across gateways", () => {
  it("a subscription window's quota admits exactly its number over both gateways, and both report it used", async () => {
    const results = await Promise.all(
      Array.from({ length: 15 }, (_, i) =>
        post(i % 2 ? a : b, "/v1/chat/completions", chat(`s${i}`), bearer(SUB_KEY)),
      ),
    );
    const statuses = results.map((r) => r.status);
    expect(statuses.filter((s) => s === 200)).toHaveLength(5);
    const qa = (await (await get(a, "/v1/account/quota", SUB_KEY)).json()) as Json;
    const qb = (await (await get(b, "/v1/account/quota", SUB_KEY)).json()) as Json;
    expect(qa.subscription.windows[0]).toMatchObject({ used: 5, remaining: 0 });
    expect(qb).toEqual(qa);
  });

  it("a PAYG limit admits exactly its number of requests over both gateways", async () => {
    const results = await Promise.all(
      Array.from({ length: 15 }, (_, i) =>
        post(i % 2 ? a : b, "/v1/chat/completions", chat(`p${i}`, "per-request"), bearer(PAYG_KEY)),
      ),
    );
    const statuses = results.map((r) => r.status);
    expect(
      statuses.filter((s) => s === 200),
      JSON.stringify(statuses),
    ).toHaveLength(5);
    const qa = (await (await get(a, "/v1/account/quota", PAYG_KEY)).json()) as Json;
    const qb = (await (await get(b, "/v1/account/quota", PAYG_KEY)).json()) as Json;
    expect(qb).toEqual(qa);
  });

  it("the per-minute limit admits exactly its number of sequential requests alternating between gateways", async () => {
    const intoMinute = Date.now() % 60_000;
    if (intoMinute > 40_000) await new Promise((r) => setTimeout(r, 60_000 - intoMinute + 50));
    const statuses: number[] = [];
    for (let i = 0; i < RPM + 10; i++)
      statuses.push(
        (
          await post(
            i % 2 ? a : b,
            "/v1/chat/completions",
            chat(`r${i}`, "per-request"),
            bearer(RPM_KEY),
          )
        ).status,
      );
    expect(
      statuses.filter((s) => s === 200),
      JSON.stringify(statuses),
    ).toHaveLength(RPM);
  }, 70_000);

  it("a tier changed on one gateway is the free allowance the other applies at its next request", async () => {
    for (let i = 0; i < FREE_DAILY; i++)
      expect(
        (await post(b, "/v1/chat/completions", chat(`t${i}`, "mock-gpt:free"), bearer(TIER_KEY)))
          .status,
      ).toBe(200);
    expect((await admin(a, "PATCH", "/accounts/tierchange", { tier: "tiny" })).status).toBe(200);
    const err = await errorOf(
      await post(b, "/v1/chat/completions", chat("over", "mock-gpt:free"), bearer(TIER_KEY)),
    );
    expect(err).toMatchObject({ status: 429, code: "free_quota_daily" });
    const qa = (await (await get(a, "/v1/account/quota", TIER_KEY)).json()) as Json;
    const qb = (await (await get(b, "/v1/account/quota", TIER_KEY)).json()) as Json;
    expect(qb).toEqual(qa);
  });
});

describe("pacing across gateways", () => {
  it("a free-model burst spread over both gateways queues up to its bound and refuses the rest", async () => {
    const results = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        post(
          i % 2 ? a : b,
          "/v1/chat/completions",
          chat(`b${i}`, "mock-gpt:free"),
          bearer(BURST_KEY),
        ).then(async (res) => (res.status === 200 ? { status: 200 } : errorOf(res))),
      ),
    );
    expect(
      results.filter((r) => r.status === 200),
      JSON.stringify(results),
    ).toHaveLength(3);
    for (const r of results.filter((r) => r.status !== 200))
      expect(r).toMatchObject({ status: 429, code: "rate_limit_exceeded" });
  }, 30_000);

  it("a shared key's per-IP limit counts both gateways' requests as one", async () => {
    const intoMinute = Date.now() % 60_000;
    if (intoMinute > 45_000) await new Promise((r) => setTimeout(r, 60_000 - intoMinute + 50));
    const results = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        post(i % 2 ? a : b, "/v1/chat/completions", chat(`sh${i}`), bearer(SHARED_HUNT_KEY)),
      ),
    );
    const statuses = results.map((r) => r.status);
    expect(
      statuses.filter((s) => s === 200),
      JSON.stringify(statuses),
    ).toHaveLength(30);
  }, 70_000);
});
