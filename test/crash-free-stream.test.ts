import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { type Quota, quota } from "./support/api.js";
import { backends, baseConfigWith, chat, KEY, post } from "./support/gateway.js";
import {
  eventually,
  type GatewaysOnPostgres,
  gatewaysOnPostgres,
  killByPid,
} from "./support/gateways-on-postgres.js";
import { type ServeProcess, serveProcess } from "./support/serve-process.js";

/**
 * A `:free` stream whose `gateway serve` is SIGKILLed midway is settled by its delivery mark (at
 * the next start on SQLite, by the survivor's reaper on Postgres) as `interrupted`, and counts as
 * a delivered request would: one request of the account's free day, and its tokens in its model's
 * free token budget (docs/metering.md).
 */

const dir = mkdtempSync(join(tmpdir(), "gateway-crash-free-"));
const running: ServeProcess[] = [];
let cluster: GatewaysOnPostgres | undefined;
afterAll(async () => {
  for (const p of running) await p.stop("SIGKILL");
  await cluster?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** The budget's tokens: a stream that delivered this many output tokens has used it up alone. */
const BUDGET = 40;

function config(): ConfigInput {
  return baseConfigWith({
    providers: [{ id: "paced", wire: "mock", mock: { chunk_interval_ms: 20 } }],
    models: [
      {
        name: "budget:free",
        provider: "paced",
        upstream_model: "mock-gpt",
        free_token_budget: { tokens: BUDGET, window_seconds: 86_400 },
      },
    ],
    tiers: { free: { free_rpm: 100, free_daily: 5, burst_spacing_ms: 0 } },
  });
}

/**
 * Opens a long stream of the budgeted free model on `url` and reads it until it delivered more
 * than the budget; returns its request id and the deltas read, and the reading that ends when the
 * gateway dies.
 */
async function streamPastBudget(url: string) {
  const res = await post(
    { url },
    "/v1/chat/completions",
    chat("count [[mock:words=3000]]", "budget:free", { stream: true }),
  );
  expect(res.status).toBe(200);
  const requestId = res.headers.get("x-request-id");
  let deltas = 0;
  let text = "";
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  const ended = (async () => {
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return;
        text += decoder.decode(value, { stream: true });
        deltas = text.match(/"content":"[^"]+"/g)?.length ?? 0;
      }
    } catch {
      // The gateway died under the stream.
    }
  })();
  await eventually(
    async () => deltas,
    (n) => n > BUDGET,
    20_000,
    "the stream delivering past the budget",
  );
  return { requestId: requestId!, delivered: () => deltas, ended, text: () => text };
}

/** What the account sees after the crash, on the gateway that serves it now. */
async function afterTheCrash(url: string, requestId: string) {
  const listed = await fetch(`${url}/v1/usage/requests?limit=10`, {
    headers: { authorization: `Bearer ${KEY}` },
  });
  expect(listed.status).toBe(200);
  const rows = ((await listed.json()) as { data: Record<string, unknown>[] }).data;
  const free = ((await quota({ url })) as Quota).free;
  const budgeted = await post({ url }, "/v1/chat/completions", chat("hi", "budget:free"));
  return {
    row: rows.find((r) => r.id === requestId),
    free,
    budgeted: { status: budgeted.status, body: await budgeted.json() },
  };
}

function expectCounted(
  seen: Awaited<ReturnType<typeof afterTheCrash>>,
  delivered: number,
  text: string,
) {
  const context = JSON.stringify({ ...seen, delivered, text: text.slice(-300) });
  expect(seen.row, context).toMatchObject({ state: "interrupted", payment: "free", cost_idr: 0 });
  expect(seen.row!.output_tokens as number, context).toBeGreaterThanOrEqual(delivered);
  // One request of the free day ...
  expect(seen.free, context).toMatchObject({ daily_used: 1, daily_remaining: 4 });
  // ... and its tokens in the model's budget, which they used up.
  expect(seen.budgeted.status, context).toBe(429);
  expect(seen.budgeted.body, context).toMatchObject({ error: { code: "rate_limit_exceeded" } });
}

describe.each(backends)("a free stream its gateway dies under (%s)", (backend) => {
  it("is settled by its delivery mark as interrupted and counts in the free day and the model's token budget", async () => {
    if (backend === "sqlite") {
      const dbPath = join(dir, "gateway.db");
      const configPath = join(dir, "config.json");
      writeFileSync(configPath, JSON.stringify(config()));
      const args = ["--db", dbPath, "--config", configPath, "--quiet"];
      const first = await serveProcess(args);
      running.push(first);
      const stream = await streamPastBudget(first.url);
      await killByPid(first);
      await stream.ended;
      const second = await serveProcess(args);
      running.push(second);
      expectCounted(
        await afterTheCrash(second.url, stream.requestId),
        stream.delivered(),
        stream.text(),
      );
      return;
    }
    cluster = await gatewaysOnPostgres(2, config());
    const db = cluster;
    const [doomed, survivor] = db.gateways;
    const stream = await streamPastBudget(doomed.url);
    await killByPid(doomed);
    await stream.ended;
    // Once the dead gateway's lease ran out, the survivor's reaper settles the stream by its mark.
    await eventually(
      () =>
        db.sql<{ state: string }>("SELECT state FROM request_log WHERE id = $1", [
          stream.requestId,
        ]),
      (rows) => rows.length === 1,
      40_000,
      "the cut-off stream's row",
    );
    expectCounted(
      await afterTheCrash(survivor.url, stream.requestId),
      stream.delivered(),
      stream.text(),
    );
  }, 90_000);
});
