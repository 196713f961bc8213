import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { mockImage } from "../src/server/providers/mock/media/index.js";
import { money } from "./support/api.js";
import { requestLogOnDisk } from "./support/database-file.js";
import { deferred, type FakeUpstream, fakeUpstream, openaiJson } from "./support/fake-upstream.js";
import { baseConfigWith, chat, post } from "./support/gateway.js";
import {
  eventually,
  type GatewaysOnPostgres,
  gatewaysOnPostgres,
  killByPid,
} from "./support/gateways-on-postgres.js";
import { type ServeProcess, serveProcess } from "./support/serve-process.js";

/**
 * The operator's gateway dies (SIGKILL by its pid) while it holds part of a free media model's
 * budget, or money leased from an account: what it held comes back (on Postgres when the others
 * reap it, docs/scaling-out.md; on SQLite at the next start), nothing is counted twice, and the
 * balance, the budget's count and the request log agree.
 */

let images: FakeUpstream;
/** Until released, the provider holds every image answer ("slow" prompts only). */
let answer = deferred();
let chats: FakeUpstream;
let chatGate = deferred();

beforeAll(async () => {
  images = await fakeUpstream("openai", async (req) => {
    if (req.body.prompt === "slow") await answer.promise;
    const n = typeof req.body.n === "number" ? req.body.n : 1;
    const png = mockImage("a fox", "64x64").toString("base64");
    return {
      kind: "json",
      body: { created: 1_700_000_000, data: Array.from({ length: n }, () => ({ b64_json: png })) },
    };
  });
  chats = await fakeUpstream("openai", async (req) => {
    const messages = req.body.messages as { content: string }[];
    if (messages[0]?.content === "in flight") await chatGate.promise;
    return openaiJson("ok", { usage: [1, 1] });
  });
});

let cluster: GatewaysOnPostgres | undefined;
const processes: ServeProcess[] = [];
const dirs: string[] = [];
afterEach(async () => {
  answer.resolve();
  chatGate.resolve();
  await cluster?.stop();
  cluster = undefined;
  for (const p of processes.splice(0)) await p.stop("SIGKILL");
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  images.requests.length = 0;
  chats.requests.length = 0;
  answer = deferred();
  chatGate = deferred();
});
afterAll(async () => {
  await images?.close();
  await chats?.close();
});

const keyOf = (i: number) => `kn-test-fan-${String(i).padStart(2, "0")}-000000000000000000`;

function config(): ConfigInput {
  return baseConfigWith({
    providers: [
      { id: "pics", wire: "openai", base_url: images.baseUrl, api_keys: ["sk-pics"] },
      { id: "talk", wire: "openai", base_url: chats.baseUrl, api_keys: ["sk-talk"] },
      { id: "tunes", wire: "mock", mock: { job_seconds: 3 } },
    ],
    models: [
      {
        name: "pic:free",
        provider: "pics",
        upstream_model: "pic-up",
        modality: "image",
        free_token_budget: { tokens: 1, window_seconds: 86_400 },
      },
      {
        name: "five:free",
        provider: "pics",
        upstream_model: "five-up",
        modality: "image",
        free_token_budget: { tokens: 5, window_seconds: 86_400 },
      },
      { name: "rest:free", provider: "pics", upstream_model: "rest-up", modality: "image" },
      {
        name: "tune:free",
        provider: "tunes",
        modality: "music",
        free_token_budget: { tokens: 2, window_seconds: 86_400 },
      },
      {
        name: "dear",
        provider: "talk",
        upstream_model: "dear-up",
        price_output_per_mtok: 1_000_000,
        max_output_tokens: 1_000,
      },
    ],
    routes: [{ name: "pics-free", steps: ["five:free", "rest:free"] }],
    accounts: (accounts) => [
      ...accounts.map((account) =>
        account.id === "acct" ? { ...account, balance_idr: 100 } : account,
      ),
      ...Array.from({ length: 10 }, (_, i) => ({
        id: `fan-${i}`,
        tier: "free",
        keys: [{ id: `kf-${i}`, value: keyOf(i) }],
      })),
    ],
    tiers: { free: { free_rpm: 1000, free_daily: 1000, burst_spacing_ms: 0 } },
  });
}

const sdk = (gw: { url: string }, key: string) =>
  new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 60_000 });

/** `images.generate` as a client sees it: the status, and the refusal's code. */
async function generate(
  gw: { url: string },
  key: string,
  model: string,
  prompt = "a fox",
): Promise<{ status: number | "dropped"; code?: string | null }> {
  try {
    await sdk(gw, key).images.generate({ model, prompt, n: 1 });
    return { status: 200 };
  } catch (err) {
    if (err instanceof OpenAI.APIError && err.status !== undefined)
      return { status: err.status, code: err.code };
    return { status: "dropped" };
  }
}

const spent = { status: 429, code: "rate_limit_exceeded" };

describe("a gateway killed while it holds budget units (postgres)", () => {
  it("an image request in flight on the killed gateway: the other refuses while its hold stands, serves once it is reaped, and the count is what the log says", async () => {
    cluster = await gatewaysOnPostgres(2, config());
    const [doomed, survivor] = cluster.gateways;
    const inFlight = generate(doomed, keyOf(0), "pic:free", "slow");
    await expect.poll(() => images.requests.length, { timeout: 10_000 }).toBe(1);
    await killByPid(doomed);
    expect((await inFlight).status).toBe("dropped");
    // Held by the dead gateway until its lease runs out: the budget of one is not passed.
    expect(await generate(survivor, keyOf(1), "pic:free")).toEqual(spent);
    await eventually(
      () => cluster!.sql<{ n: number }>("SELECT count(*)::int AS n FROM holds"),
      ([left]) => left.n === 0,
      40_000,
      "the dead gateway's holds",
    );
    expect(await generate(survivor, keyOf(1), "pic:free")).toEqual({ status: 200 });
    expect(await generate(survivor, keyOf(2), "pic:free")).toEqual(spent);
    const [{ tokens }] = await cluster.sql<{ tokens: number }>(
      "SELECT tokens FROM free_token_usage WHERE model = 'pic:free'",
    );
    const [{ served }] = await cluster.sql<{ served: number }>(
      `SELECT count(*)::int AS served FROM request_log
        WHERE model = 'pic:free' AND state = 'settled' AND status = 200`,
    );
    expect({ tokens, served }).toEqual({ tokens: 1, served: 1 });
  }, 90_000);

  it("a music job running on the killed gateway: taken over and completed once, its seconds counted once", async () => {
    cluster = await gatewaysOnPostgres(2, config(), { env: { GATEWAY_JOB_LEASE_MS: "1500" } });
    const [doomed, survivor] = cluster.gateways;
    const submitted = await post(
      doomed,
      "/v1/music/generations",
      { model: "tune:free", prompt: "rain", duration: 2 },
      { authorization: `Bearer ${keyOf(0)}` },
    );
    expect(submitted.status, await submitted.clone().text()).toBe(202);
    const { id } = (await submitted.json()) as { id: string };
    const status = async () => {
      const res = await fetch(`${survivor.url}/v1/music/generations/${id}`, {
        headers: { authorization: `Bearer ${keyOf(0)}` },
      });
      return ((await res.json()) as { status: string }).status;
    };
    await eventually(status, (s) => s === "running", 10_000, "the job running");
    const [{ budget_units: units }] = await cluster.sql<{ budget_units: number }>(
      "SELECT budget_units FROM holds WHERE budget_model = 'tune:free'",
    );
    expect(units).toBe(2);
    await killByPid(doomed);
    const another = await post(
      survivor,
      "/v1/music/generations",
      { model: "tune:free", prompt: "sun", duration: 1 },
      { authorization: `Bearer ${keyOf(1)}` },
    );
    expect(another.status).toBe(202);
    const anotherId = ((await another.json()) as { id: string }).id;
    await eventually(status, (s) => s === "completed" || s === "failed", 40_000, "the job");
    expect(await status()).toBe("completed");
    // The job held its two seconds on the dead gateway and again where it was taken over, never
    // both: the one after it finds the budget spent.
    const other = await fetch(`${survivor.url}/v1/music/generations/${anotherId}`, {
      headers: { authorization: `Bearer ${keyOf(1)}` },
    });
    expect(await other.json()).toMatchObject({
      status: "failed",
      error: { code: "rate_limit_exceeded" },
    });
    await eventually(
      () => cluster!.sql<{ n: number }>("SELECT count(*)::int AS n FROM holds"),
      ([left]) => left.n === 0,
      20_000,
      "holds",
    );
    const [{ tokens }] = await cluster.sql<{ tokens: number }>(
      "SELECT tokens FROM free_token_usage WHERE model = 'tune:free'",
    );
    const rows = await cluster.sql<{ state: string; status: number; n: number }>(
      `SELECT state, status, count(*)::int AS n FROM request_log WHERE model = 'tune:free'
        GROUP BY state, status ORDER BY state`,
    );
    expect({ tokens, rows }).toEqual({
      tokens: 2,
      rows: [
        { state: "failed", status: 429, n: 1 },
        { state: "settled", status: 200, n: 1 },
      ],
    });
  }, 90_000);
});

describe("a gateway taken as dead while its image request is in flight (postgres)", () => {
  it("frozen past its lease, its answer still served once it runs again: recorded and counted once, charged nothing; the budget refuses the next", async () => {
    cluster = await gatewaysOnPostgres(2, config());
    const [frozen, survivor] = cluster.gateways;
    const inFlight = generate(frozen, keyOf(0), "pic:free", "slow");
    await expect.poll(() => images.requests.length, { timeout: 10_000 }).toBe(1);
    process.kill(frozen.child.pid!, "SIGSTOP");
    try {
      await eventually(
        () => cluster!.sql<{ n: number }>("SELECT count(*)::int AS n FROM holds"),
        ([left]) => left.n === 0,
        40_000,
        "the frozen gateway's holds",
      );
      // Its units came back with its hold: the budget of one serves here.
      expect(await generate(survivor, keyOf(1), "pic:free")).toEqual({ status: 200 });
    } finally {
      process.kill(frozen.child.pid!, "SIGCONT");
    }
    answer.resolve();
    // The provider's image reaches its client after all: two images were served.
    expect(await inFlight, cluster.stderr()).toEqual({ status: 200 });
    await eventually(
      () =>
        cluster!.sql<{ n: number }>(
          "SELECT count(*)::int AS n FROM request_log WHERE model = 'pic:free'",
        ),
      ([rows]) => rows.n >= 2,
      10_000,
      "both answers in the request log",
    );
    for (const gw of [survivor, frozen])
      expect(await generate(gw, keyOf(2), "pic:free")).toEqual(spent);
    const log = await cluster.sql<{ account_id: string; cost_micro: number; state: string }>(
      `SELECT account_id, cost_micro, state FROM request_log WHERE model = 'pic:free'
        AND status = 200 ORDER BY account_id`,
    );
    expect(log).toEqual([
      { account_id: "fan-0", cost_micro: 0, state: "settled" },
      { account_id: "fan-1", cost_micro: 0, state: "settled" },
    ]);
    const [{ tokens }] = await cluster.sql<{ tokens: number }>(
      "SELECT tokens FROM free_token_usage WHERE model = 'pic:free'",
    );
    expect(tokens).toBe(2);
    const days = await cluster.sql<{ account_id: string; used: number; held: number }>(
      `SELECT account_id, used, held FROM free_usage WHERE account_id IN ('fan-0', 'fan-1')
        ORDER BY account_id`,
    );
    expect(days.map(({ account_id, used, held }) => ({ account_id, used, held }))).toEqual([
      { account_id: "fan-0", used: 1, held: 0 },
      { account_id: "fan-1", used: 1, held: 0 },
    ]);
  }, 90_000);
});

describe("a gateway killed with money leased (postgres)", () => {
  it("the other gateway's quota and admission come back to the balance once the lease is reaped; nothing lost", async () => {
    cluster = await gatewaysOnPostgres(2, config());
    const [doomed, survivor] = cluster.gateways;
    const ask = (gw: { url: string }, content: string, maxTokens: number) =>
      post(gw, "/v1/chat/completions", chat(content, "dear", { max_tokens: maxTokens }));
    expect((await ask(doomed, "first", 3)).status).toBe(200);
    const inFlight = ask(doomed, "in flight", 3).then(
      (res) => res.status,
      () => "dropped",
    );
    await expect.poll(() => chats.requests.length, { timeout: 10_000 }).toBe(2);
    const [{ leased }] = await cluster.sql<{ leased: number }>(
      "SELECT leased_micro AS leased FROM accounts WHERE id = 'acct'",
    );
    expect(leased).toBeGreaterThan(0);
    await killByPid(doomed);
    expect(await inFlight).toBe("dropped");
    await eventually(
      () => cluster!.sql<{ n: number }>("SELECT count(*)::int AS n FROM leases"),
      ([left]) => left.n === 0,
      40_000,
      "the dead gateway's lease",
    );
    const shown = await money(survivor);
    const [account] = await cluster.sql<{ balance: number; held: number }>(
      "SELECT balance_micro AS balance, held_micro AS held FROM accounts WHERE id = 'acct'",
    );
    const [{ cost }] = await cluster.sql<{ cost: number }>(
      "SELECT coalesce(sum(cost_micro), 0)::bigint AS cost FROM request_log WHERE account_id = 'acct'",
    );
    expect(account.held).toBe(0);
    expect(account.balance + cost).toBe(100_000_000);
    expect(shown).toEqual({ balance: account.balance, held: 0 });
    const all = Math.floor(account.balance / 1e6);
    const probe = await ask(survivor, "all of it", all);
    expect(probe.status, await probe.clone().text()).toBe(200);
  }, 90_000);
});

describe("fifty requests at once on two gateways, a route whose first step has a budget of five (postgres)", () => {
  it("five are served by the first step, the rest by the second; every row names its step; no hold left", async () => {
    cluster = await gatewaysOnPostgres(2, config());
    const { gateways } = cluster;
    const outcomes = await Promise.all(
      Array.from({ length: 50 }, (_, i) => generate(gateways[i % 2], keyOf(i % 10), "pics-free")),
    );
    expect(
      outcomes.filter((o) => o.status === 200),
      JSON.stringify(outcomes),
    ).toHaveLength(50);
    const rows = await cluster.sql<{ served_model: string; n: number }>(
      `SELECT served_model, count(*)::int AS n FROM request_log WHERE model = 'pics-free'
        AND state = 'settled' GROUP BY served_model ORDER BY served_model`,
    );
    expect(rows).toEqual([
      { served_model: "five:free", n: 5 },
      { served_model: "rest:free", n: 45 },
    ]);
    const upstreamModels = images.requests.map((r) => r.body.model);
    expect(upstreamModels.filter((m) => m === "five-up")).toHaveLength(5);
    const [{ n }] = await cluster.sql<{ n: number }>("SELECT count(*)::int AS n FROM holds");
    expect(n).toBe(0);
  }, 90_000);
});

describe("a gateway killed while it holds budget units (sqlite)", () => {
  it("after a restart the budget is what the settled rows say", async () => {
    const dir = mkdtempSync(join(tmpdir(), "gateway-crash-budget-"));
    dirs.push(dir);
    const dbPath = join(dir, "gateway.db");
    const configPath = join(dir, "config.json");
    writeFileSync(configPath, JSON.stringify(config()));
    const first = await serveProcess(["--db", dbPath, "--config", configPath, "--quiet"]);
    processes.push(first);
    const inFlight = generate(first, keyOf(0), "pic:free", "slow");
    await expect.poll(() => images.requests.length, { timeout: 10_000 }).toBe(1);
    expect(await generate(first, keyOf(1), "pic:free")).toEqual(spent);
    await killByPid(first);
    expect((await inFlight).status).toBe("dropped");
    const second = await serveProcess(["--db", dbPath, "--config", configPath, "--quiet"]);
    processes.push(second);
    expect(await generate(second, keyOf(1), "pic:free")).toEqual({ status: 200 });
    expect(await generate(second, keyOf(2), "pic:free")).toEqual(spent);
    await second.stop();
    const settled = requestLogOnDisk(dbPath).filter(
      (row) => row.model === "pic:free" && row.state === "settled",
    );
    expect(settled).toHaveLength(1);
  }, 60_000);
});
