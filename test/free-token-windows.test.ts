import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { secretKeyEnv } from "../src/store/secret-box.js";
import { SettlementJournal } from "../src/store/sqlite/settlement-journal.js";
import { errorOf } from "./support/api.js";
import { crashImage, freeTokensOnDisk } from "./support/database-file.js";
import {
  deferred,
  type FakeUpstream,
  fakeUpstream,
  openaiJson,
  openaiStreamSteps,
} from "./support/fake-upstream.js";
import {
  ADMIN_KEY,
  baseConfigWith,
  chat,
  KEY,
  post,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";
import {
  eventually,
  type GatewaysOnPostgres,
  gatewaysOnPostgres,
  killByPid,
} from "./support/gateways-on-postgres.js";
import { createTestDatabase } from "./support/postgres.js";

/**
 * A free model's token budget (`free_token_budget: {tokens, window_seconds}`) counts what its
 * answers used in fixed windows, and its count never goes backwards: a stream's delivery mark
 * applied after the window rolled over (the next start on SQLite, a survivor's reaper on
 * Postgres) or a gateway whose clock is behind another's counts in the newest window, so no
 * clock hands out more than the budget; and a free stream's tokens count once across a crash at
 * any point of its settlement (docs/metering.md).
 */

const MODEL = "budget:free";
const HOUR = 3_600_000;
const W0 = Date.parse("2030-01-01T00:00:00Z");

const dirs: string[] = [];
const open: TestGateway[] = [];
let cluster: GatewaysOnPostgres | undefined;
let upstream: FakeUpstream | undefined;
afterEach(async () => {
  for (const gw of open.splice(0)) await gw.close().catch(() => {});
  await cluster?.stop();
  cluster = undefined;
  await upstream?.close();
  upstream = undefined;
});
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

function freshDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "free-token-windows-"));
  dirs.push(dir);
  return dir;
}

function config(budget: number, windowSeconds = 3600): ConfigInput {
  return baseConfigWith({
    providers: [{ id: "paced", wire: "mock", mock: { chunk_interval_ms: 20 } }],
    models: [
      {
        name: MODEL,
        provider: "mock",
        upstream_model: "mock-gpt",
        free_token_budget: { tokens: budget, window_seconds: windowSeconds },
      },
      {
        name: "paced:free",
        provider: "paced",
        upstream_model: "mock-gpt",
        free_token_budget: { tokens: budget, window_seconds: windowSeconds },
      },
    ],
    tiers: { free: { free_rpm: 100, free_daily: 50, burst_spacing_ms: 0 } },
  });
}

/** `cfg` with a free model `fake:free` of the same budget on the OpenAI-compatible `baseUrl`. */
function withFake(cfg: ConfigInput, baseUrl: string, budget: number): ConfigInput {
  return {
    ...cfg,
    providers: [
      ...cfg.providers!,
      { id: "fake", wire: "openai", base_url: baseUrl, api_keys: ["sk-x"] },
    ],
    models: [
      ...cfg.models!,
      {
        name: "fake:free",
        provider: "fake",
        upstream_model: "upstream-model",
        free_token_budget: { tokens: budget, window_seconds: 3600 },
      },
    ],
  };
}

async function start(db: string, cfg: ConfigInput, now: () => number): Promise<TestGateway> {
  const gw = await testGateway({ db, config: cfg, now });
  open.push(gw);
  return gw;
}

/** A whole answer of the budgeted model; its status and the tokens it used. */
async function ask(gw: { url: string }, content: string, model = MODEL) {
  const res = await post(gw, "/v1/chat/completions", chat(content, model));
  if (res.status !== 200) return { status: res.status, error: await errorOf(res), tokens: 0 };
  const body = (await res.json()) as { usage: { total_tokens: number } };
  return { status: 200, error: undefined, tokens: body.usage.total_tokens };
}

/**
 * A long stream of `model` on `url`, read until it delivered `deltas` pieces (its delivery mark
 * is written by then); `stop` leaves it.
 */
async function midwayStream(
  url: string,
  model: string,
  deltas: number,
  piece = /"content":"[^"]+"/g,
) {
  const leaving = new AbortController();
  const res = await post(
    { url },
    "/v1/chat/completions",
    chat("count [[mock:words=3000]]", model, { stream: true }),
    undefined,
    leaving.signal,
  );
  expect(res.status).toBe(200);
  const id = res.headers.get("x-request-id")!;
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = "";
  while ((text.match(piece)?.length ?? 0) < deltas) {
    const { done, value } = await reader.read();
    if (done) throw new Error(`the stream ended early: ${text.slice(-300)}`);
    text += decoder.decode(value, { stream: true });
  }
  return {
    id,
    stop: () => {
      leaving.abort();
      reader.cancel().catch(() => {});
    },
  };
}

/** A request of the account's log, as its usage listing shows it. */
async function listed(url: string, id: string): Promise<Record<string, unknown> | undefined> {
  const res = await fetch(`${url}/v1/usage/requests?limit=20`, {
    headers: { authorization: `Bearer ${KEY}` },
  });
  expect(res.status).toBe(200);
  return ((await res.json()) as { data: Record<string, unknown>[] }).data.find((r) => r.id === id);
}

describe("a free stream's delivery mark applied after the budget's window rolled over (SQLite, at the next start)", () => {
  it("counts in the newer window and does not start it over: the budget used there stays used", async () => {
    // An OpenAI-compatible provider whose stream waits after its 20th word until the test is done:
    // the stream's last mark (it covers 32 tokens) is written before the window rolls over.
    const gate = deferred();
    upstream = await fakeUpstream("openai", (req) => {
      if (req.body.stream !== true) return openaiJson("ok", { usage: [11, 7] });
      const steps = openaiStreamSteps(
        Array.from({ length: 40 }, () => "zq "),
        { usage: [11, 40] },
      );
      steps[21] = { ...steps[21], gate: gate.promise };
      return { kind: "sse", steps };
    });
    const db = join(freshDir(), "gateway.db");
    let wall = W0 + 30 * 60_000;
    // A budget one answer uses up.
    const cfg = withFake(config(10), upstream.baseUrl, 10);
    const gw = await start(db, cfg, () => wall);
    const stream = await midwayStream(gw.url, "fake:free", 20, /"content":"zq "/g);
    // The next window: a whole answer uses its budget up.
    wall = W0 + HOUR + 10 * 60_000;
    expect((await ask(gw, "hi", "fake:free")).status).toBe(200);
    expect((await ask(gw, "hi", "fake:free")).error).toMatchObject({
      status: 429,
      code: "rate_limit_exceeded",
    });
    // Killed here, the stream still running: its mark, of the window before, is in the journal.
    const image = join(freshDir(), "gateway.db");
    crashImage(gw.services.store, image);
    stream.stop();
    gate.resolve();

    const again = await start(image, cfg, () => wall);
    expect(await listed(again.url, stream.id)).toMatchObject({
      state: "interrupted",
      payment: "free",
    });
    expect((await ask(again, "hi", "fake:free")).error).toMatchObject({
      status: 429,
      code: "rate_limit_exceeded",
    });
    expect(freeTokensOnDisk(image, "fake:free")?.window_start).toBe(W0 + HOUR);
  }, 30_000);
});

describe("a free stream whose gateway dies after its settlement counted, before the settlement is durable (SQLite)", () => {
  it("counts its tokens once, by its delivery mark, at the next start", async () => {
    const db = join(freshDir(), "gateway.db");
    const image = join(freshDir(), "gateway.db");
    const gw = await start(db, config(1_000_000, 86_400), () => W0);
    // The kill: in the very turn the stream settles, before its settlement reaches the journal
    // (the stream is alone, so its settlement is made durable there).
    const append = SettlementJournal.prototype.append;
    let killed = false;
    SettlementJournal.prototype.append = function (this: SettlementJournal, lines: string) {
      if (!killed && lines.startsWith('{"kind":"settle"') && lines.includes(MODEL)) {
        killed = true;
        crashImage(gw.services.store, image);
      }
      append.call(this, lines);
    };
    let id = "";
    try {
      const res = await post(
        gw,
        "/v1/chat/completions",
        chat("[[mock:words=40]]", MODEL, { stream: true }),
      );
      id = res.headers.get("x-request-id")!;
      expect(await res.text()).toContain("[DONE]");
    } finally {
      SettlementJournal.prototype.append = append;
    }
    expect(killed).toBe(true);

    // The next start settles the stream by its last mark, and counts the mark's tokens.
    const again = await start(image, config(1_000_000, 86_400), () => W0);
    const row = await listed(again.url, id);
    expect(row).toMatchObject({ state: "interrupted", payment: "free" });
    const tokens = (row!.input_tokens as number) + (row!.output_tokens as number);
    expect(freeTokensOnDisk(image, MODEL)).toEqual({ window_start: W0, tokens });
    await again.close();
    // A budget one token above them: the model still answers (counted twice, it would not).
    const budgeted = await start(image, config(tokens + 1, 86_400), () => W0);
    expect((await ask(budgeted, "hi")).status).toBe(200);
    expect((await ask(budgeted, "hi")).error).toMatchObject({ code: "rate_limit_exceeded" });
  }, 30_000);
});

describe("two gateways on Postgres whose clocks straddle the budget's window", () => {
  it("the one behind reads the newer window's count, and its answers count there: neither hands out more than the budget", async () => {
    // Both open the BYOK credentials the other sealed, as gateways on one database must.
    process.env[secretKeyEnv] ??= randomBytes(32).toString("base64");
    const db = await createTestDatabase();
    const BUDGET = 1000;
    // Its clock twenty minutes behind the other's, across the hour.
    const ahead = await testGateway({ db, config: config(BUDGET), now: () => W0 + HOUR + 600_000 });
    open.push(ahead);
    const behind = await testGateway({
      db,
      config: config(BUDGET),
      now: () => W0 + HOUR - 600_000,
    });
    open.push(behind);
    const first = await ask(ahead, "[[mock:words=400]]");
    expect(first.status).toBe(200);
    expect(first.tokens).toBeLessThan(BUDGET);
    // Admitted by the count of the newer window, which it adds to.
    const second = await ask(behind, "[[mock:words=400]]");
    expect(second.status).toBe(200);
    expect(first.tokens + second.tokens).toBeGreaterThanOrEqual(BUDGET);
    for (const gw of [ahead, behind]) {
      expect((await ask(gw, "hi")).error).toMatchObject({
        status: 429,
        code: "rate_limit_exceeded",
      });
    }
  }, 30_000);

  it("a stream's delivery mark that a survivor's reaper applies after the window rolled over counts in the newer window", async () => {
    const BUDGET = 10;
    cluster = await gatewaysOnPostgres(2, config(BUDGET), { args: ["--manual-clock"] });
    const db = cluster;
    const [doomed, survivor] = db.gateways;
    const setClock = async (url: string, at: number) => {
      const res = await fetch(`${url}/api/admin/clock`, {
        method: "POST",
        headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json" },
        body: JSON.stringify({ set: new Date(at).toISOString() }),
      });
      expect(res.status, await res.clone().text()).toBe(200);
    };
    await setClock(doomed.url, W0 + 30 * 60_000);
    const stream = await midwayStream(doomed.url, "paced:free", 20);
    await setClock(survivor.url, W0 + HOUR + 10 * 60_000);
    expect((await ask(survivor, "hi", "paced:free")).status).toBe(200);
    expect((await ask(survivor, "hi", "paced:free")).error).toMatchObject({
      code: "rate_limit_exceeded",
    });
    await killByPid(doomed);
    stream.stop();
    // Once the dead gateway's lease ran out, the survivor's reaper settles the stream by its mark.
    await eventually(
      () => db.sql("SELECT state FROM request_log WHERE id = $1", [stream.id]),
      (rows) => rows.length === 1,
      40_000,
      "the cut-off stream's row",
    );
    expect(await listed(survivor.url, stream.id)).toMatchObject({ state: "interrupted" });
    expect((await ask(survivor, "hi", "paced:free")).error).toMatchObject({
      status: 429,
      code: "rate_limit_exceeded",
    });
    expect(
      await db.sql("SELECT window_start FROM free_token_usage WHERE model = $1", ["paced:free"]),
    ).toEqual([{ window_start: W0 + HOUR }]);
  }, 90_000);
});
