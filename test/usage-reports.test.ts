import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { admin, quota } from "./support/api.js";
import { ownerSession } from "./support/cli.js";
import { type FakeUpstream, fakeUpstream } from "./support/fake-upstream.js";
import {
  ADMIN_KEY,
  backends,
  baseConfigWith,
  chat,
  gatewayOn,
  KEY,
  KEY2,
  POOR_KEY,
  post,
  type TestGateway,
  wallPaceFromNoon,
} from "./support/gateway.js";

/**
 * A client and owner checking the numbers: what every listing, report and counter says against
 * what the ledger charged, after a mixed workload, across UTC midnight, on both backends.
 */

const MUSIC_PRICE = 30;
const bearer = (key: string) => ({ authorization: `Bearer ${key}` });
const micro = (idr: number) => Math.round(idr * 1e6);

// biome-ignore lint/suspicious/noExplicitAny: JSON read back from the gateway
type Json = any;
async function getJson(
  gw: { url: string },
  path: string,
  headers: Record<string, string> = bearer(KEY),
): Promise<Json> {
  const res = await fetch(`${gw.url}${path}`, { headers });
  expect(res.status, path).toBe(200);
  return res.json();
}

let upstream: FakeUpstream;
beforeAll(async () => {
  upstream = await fakeUpstream("openai");
});
afterAll(() => upstream?.close());

function config(): ConfigInput {
  return baseConfigWith({
    providers: [
      { id: "mock-fast", wire: "mock", mock: { job_seconds: 0.05 } },
      {
        id: "byok-prov",
        wire: "openai",
        base_url: upstream.baseUrl,
        api_keys: ["sk-pool-usage-0000"],
        timeout_ms: 3_000,
      },
    ],
    models: [
      { name: "mock-music", provider: "mock-fast", modality: "music", price_per_unit: MUSIC_PRICE },
      {
        name: "byok-model",
        provider: "byok-prov",
        price_input_per_mtok: 1_000_000,
        price_output_per_mtok: 2_000_000,
        max_output_tokens: 100,
      },
    ],
  });
}

/** Polls a job until it ends; bounded. */
async function jobDone(gw: { url: string }, id: string): Promise<Json> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const job = await getJson(gw, `/v1/music/generations/${id}`);
    if (job.status === "completed" || job.status === "failed") return job;
    if (Date.now() > deadline) throw new Error(`job ${id} still ${job.status}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Waits (bounded) until nothing of the account is held: every request and job settled. */
async function settled(gw: TestGateway): Promise<void> {
  await expect.poll(async () => (await quota(gw)).held_idr, { timeout: 10_000 }).toBe(0);
  await gw.services.ledger.committed();
}

async function musicJob(gw: TestGateway): Promise<string> {
  const res = await post(gw, "/v1/music/generations", {
    model: "mock-music",
    prompt: "a tune",
    duration: 3,
  });
  expect(res.status).toBe(202);
  const { id } = (await res.json()) as { id: string };
  expect((await jobDone(gw, id)).status).toBe("completed");
  return id;
}

describe.each(backends)("usage reports against the ledger, on %s", (backend) => {
  let gw: TestGateway | undefined;
  afterEach(async () => {
    await gw?.close();
    gw = undefined;
  });

  it("lists every admitted request once, in every listing, summing to what the balance lost", async () => {
    // The free allowance counts in the clock's day; the music job needs the clock to run.
    gw = await gatewayOn(backend, { config: config(), now: wallPaceFromNoon() });
    const before = await quota(gw);
    const answered = async (p: Promise<Response>) => {
      const res = await p;
      await res.text();
      return res.status;
    };
    expect(await answered(post(gw, "/v1/chat/completions", chat("paid")))).toBe(200);
    expect(await answered(post(gw, "/v1/chat/completions", chat("free", "mock-gpt:free")))).toBe(
      200,
    );
    expect(await answered(post(gw, "/v1/chat/completions", chat("fallback", "auto")))).toBe(200);
    expect(
      await answered(
        post(gw, "/v1/chat/completions", chat("three", "mock-gpt", { n: 3, max_tokens: 50 })),
      ),
    ).toBe(200);
    expect(await answered(post(gw, "/v1/chat/completions", chat("down", "mock-down")))).toBe(503);
    // Refused before admission: in no listing.
    expect(await answered(post(gw, "/v1/chat/completions", chat("poor"), bearer(POOR_KEY)))).toBe(
      402,
    );
    expect(await answered(post(gw, "/v1/chat/completions", chat("k2"), bearer(KEY2)))).toBe(200);
    expect(
      (
        await admin(gw, "POST", "/accounts/acct/byok", {
          provider: "byok-prov",
          key: "sk-own-1111",
        })
      ).status,
    ).toBe(201);
    upstream.reset();
    expect(
      await answered(
        post(gw, "/v1/chat/completions", {
          model: "byok-model",
          max_tokens: 20,
          messages: [{ role: "user", content: "own key" }],
        }),
      ),
    ).toBe(200);
    // A stream the client leaves after its first piece.
    const left = new AbortController();
    const stream = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { ...bearer(KEY), "content-type": "application/json" },
      body: JSON.stringify(chat("walk away [[mock:words=400]]", "mock-gpt", { stream: true })),
      signal: left.signal,
    });
    await stream.body!.getReader().read();
    left.abort();
    await musicJob(gw);
    const mcp = await fetch(`${gw.url}/mcp`, {
      method: "POST",
      headers: {
        ...bearer(KEY),
        "content-type": "application/json",
        accept: "application/json, text/event-stream",
      },
      body: JSON.stringify({
        jsonrpc: "2.0",
        id: 1,
        method: "tools/call",
        params: {
          name: "chat",
          arguments: { model: "mock-gpt", messages: [{ role: "user", content: "via mcp" }] },
        },
      }),
    });
    expect(mcp.status).toBe(200);
    await mcp.text();
    await settled(gw);
    // A revoked key's history stays listed under its label.
    expect((await admin(gw, "DELETE", "/keys/k2")).status).toBeLessThan(300);

    const spent = micro(before.balance_idr) - micro((await quota(gw)).balance_idr);
    const kit = (await gw.listRequests({ limit: 1000 })).filter((r) => r.account === "acct");
    const adminList = (
      (await getJson(gw, "/api/admin/requests?limit=1000", bearer(ADMIN_KEY))).data as Json[]
    ).filter((r) => r.account === "acct");
    const recent = (await getJson(gw, "/v1/usage/requests?limit=500")).data as Json[];
    const summary = await getJson(gw, "/v1/usage/summary");
    const daily = (await getJson(gw, "/v1/usage/daily")).data as Json[];
    const owner = await ownerSession(gw);
    const cookie = { cookie: owner.cookie };
    const dashSummary = await getJson(gw, "/api/dashboard/usage/summary", cookie);
    const dashRecent = (await getJson(gw, "/api/dashboard/usage/requests?limit=500", cookie))
      .data as Json[];

    // 10 admitted: paid, free, route, n=3, failure, second key, BYOK, stream, job, MCP.
    for (const list of [kit, adminList, recent, dashRecent]) {
      expect(list).toHaveLength(10);
      expect(new Set(list.map((r: Json) => r.id)).size).toBe(10);
    }
    const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
    expect(sum(kit.map((r) => r.cost_micro))).toBe(spent);
    expect(sum(adminList.map((r) => r.cost_micro))).toBe(spent);
    expect(sum(recent.map((r) => micro(r.cost_idr)))).toBe(spent);
    expect(micro(summary.cost_idr)).toBe(spent);
    expect(micro(dashSummary.cost_idr)).toBe(spent);
    expect(sum(daily.map((d) => micro(d.cost_idr)))).toBe(spent);
    expect(summary).toMatchObject({ requests: 10, succeeded: 9, failed: 1 });
    expect(kit.find((r) => r.via === "mcp")).toMatchObject({ endpoint: "chat.completions" });
    expect(kit.find((r) => r.endpoint === "music.generations")?.cost_micro).toBe(
      micro(3 * MUSIC_PRICE),
    );
    expect(kit.find((r) => r.key.id === "k2")?.key.label).toBe("second");
    // Each listing names the model that served a request as the admin's does: a route's step,
    // none for a request no model served.
    const servedBy = new Map(adminList.map((r) => [r.id, r.served_model]));
    for (const list of [recent, dashRecent])
      for (const r of list) expect(r.served_model, `${r.id} (${r.model})`).toBe(servedBy.get(r.id));
    expect(recent.find((r) => r.model === "auto")?.served_model).toBe("mock-gpt");
    expect(recent.find((r) => r.model === "mock-down")?.served_model).toBeNull();
    expect(recent.filter((r) => r.key_id === "k2")).toHaveLength(1);
    expect((await quota(gw)).free.daily_used).toBe(1);
  });

  it("reports every day of /v1/usage/daily whole: a day the period starts in is not cut at the clock's time of day", async () => {
    gw = await gatewayOn(backend, {
      config: config(),
      clock: "manual",
      now: () => Date.parse("2030-01-01T05:00:00Z"),
    });
    const ask = async (content: string, extra: object = {}) => {
      const res = await post(gw!, "/v1/chat/completions", chat(content, "mock-gpt", extra));
      expect(res.status).toBe(200);
      await res.text();
    };
    await ask("early on the first");
    gw.clock.set(new Date("2030-01-01T15:00:00Z"));
    await ask("late on the first");
    // Admitted 5 ms before midnight, finished after it: one request, on the day it began.
    gw.clock.set(new Date("2030-01-02T23:59:59.995Z"));
    const straddles = ask("straddles midnight [[mock:delay=300]]");
    await expect
      .poll(async () => (await quota(gw!)).held_idr, { timeout: 5_000 })
      .toBeGreaterThan(0);
    gw.clock.set(new Date("2030-01-03T00:00:00.000Z"));
    await straddles;
    await ask("first of the third");
    gw.clock.set(new Date("2030-01-03T10:00:00Z"));
    await gw.services.ledger.committed();

    const rows = await gw.listRequests({ limit: 100 });
    expect(rows).toHaveLength(4);
    const straddling = rows.find((r) => r.time === "2030-01-02T23:59:59.995Z");
    expect(straddling?.finished_at ?? "").toMatch(/^2030-01-03T/);
    const perDay = new Map<string, number>();
    for (const r of rows)
      perDay.set(r.time.slice(0, 10), (perDay.get(r.time.slice(0, 10)) ?? 0) + 1);
    const costPerDay = new Map<string, number>();
    for (const r of rows) {
      const day = r.time.slice(0, 10);
      costPerDay.set(day, (costPerDay.get(day) ?? 0) + r.cost_micro);
    }

    const owner = await ownerSession(gw);
    for (const days of [1, 2, 3]) {
      for (const [path, headers] of [
        [`/v1/usage/daily?days=${days}`, bearer(KEY)],
        [`/api/dashboard/usage/daily?days=${days}`, { cookie: owner.cookie }],
      ] as const) {
        const buckets = (await getJson(gw, path, headers)).data as Json[];
        // Each bucket is the whole UTC day it names, as the request log has it.
        for (const b of buckets) {
          expect({ path, date: b.date, requests: b.requests, cost: micro(b.cost_idr) }).toEqual({
            path,
            date: b.date,
            requests: perDay.get(b.date),
            cost: costPerDay.get(b.date),
          });
        }
        expect(buckets.map((b) => b.date)).toContain("2030-01-03");
        const summary = await getJson(gw, `/v1/usage/summary?days=${days}`);
        expect(summary.requests).toBe(buckets.reduce((a, b) => a + b.requests, 0));
      }
    }
  });
});

describe("GET /metrics against the ledger", () => {
  let gw: TestGateway | undefined;
  afterEach(async () => {
    await gw?.close();
    gw = undefined;
  });

  it("counts a music job's charge in gateway_charged_micro_idr_total, as the balance moved", async () => {
    gw = await gatewayOn("sqlite", { config: config(), metrics: "public" });
    const before = await quota(gw);
    const res = await post(gw, "/v1/chat/completions", chat("paid"));
    expect(res.status).toBe(200);
    await res.text();
    await musicJob(gw);
    await settled(gw);
    const spent = micro(before.balance_idr) - micro((await quota(gw)).balance_idr);
    const text = await (await fetch(`${gw.url}/metrics`)).text();
    const charged = text
      .split("\n")
      .filter((line) => line.startsWith("gateway_charged_micro_idr_total{"))
      .map((line) => Number(line.slice(line.lastIndexOf(" ") + 1)));
    const byModel = (model: string) =>
      Number(
        text
          .split("\n")
          .find((l) => l.startsWith(`gateway_charged_micro_idr_total{model="${model}"} `))
          ?.split(" ")[1] ?? 0,
      );
    expect(byModel("mock-music")).toBe(micro(3 * MUSIC_PRICE));
    expect(charged.reduce((a, b) => a + b, 0)).toBe(spent);
  });
});
