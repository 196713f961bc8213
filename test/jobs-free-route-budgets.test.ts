import Database from "better-sqlite3";
import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import {
  type BackendName,
  backends,
  baseConfigWith,
  gatewayOn,
  KEY,
  post,
  type TestGateway,
} from "./support/gateway.js";

/**
 * A free media route's steps each have their own token budget, checked when the job runner tries
 * the step as the chat path checks it (routes-free-budgets.test.ts): a step whose budget is used
 * up is skipped, and a job none of whose steps has budget left when it runs fails as its budget
 * is refused (429 rate_limit_exceeded), charged nothing.
 */

// Ten minutes into an hour: every budget below is in the window that began on the hour.
const W0 = Date.parse("2030-01-01T00:00:00Z");
const T0 = W0 + 10 * 60_000;
const BUDGET = 10;

function config(): ConfigInput {
  // Jobs that take none of the clock's time: the clock stands still at T0.
  const provider = (id: string) => ({ id, wire: "mock" as const, mock: { job_seconds: 0 } });
  const music = (name: string, providerId: string) => ({
    name,
    provider: providerId,
    modality: "music" as const,
    free_token_budget: { tokens: BUDGET, window_seconds: 3600 },
  });
  return baseConfigWith({
    providers: [provider("ma"), provider("mb")],
    models: [music("tune-a:free", "ma"), music("tune-b:free", "mb")],
    routes: () => [{ name: "tunes", steps: ["tune-a:free", "tune-b:free"] }],
    tiers: { free: { free_rpm: 100, free_daily: 100, burst_spacing_ms: 0 } },
  });
}

/**
 * `model`'s budget used up in the running window, as the database holds it once other answers
 * spent it (a job spends a unit a second: the one-second jobs here would take ten to).
 */
async function spend(backend: BackendName, gw: TestGateway, model: string): Promise<void> {
  const sql = (p: (n: number) => string) =>
    `INSERT INTO free_token_usage (model, window_start, tokens) VALUES (${p(1)}, ${p(2)}, ${p(3)})
     ON CONFLICT (model) DO UPDATE SET window_start = excluded.window_start, tokens = excluded.tokens`;
  if (backend === "sqlite") {
    const db = new Database(gw.dbPath);
    try {
      db.prepare(sql(() => "?")).run(model, W0, BUDGET);
    } finally {
      db.close();
    }
    return;
  }
  const client = new pg.Client({ connectionString: gw.dbPath });
  await client.connect();
  try {
    await client.query(
      sql((n) => `$${n}`),
      [model, W0, BUDGET],
    );
  } finally {
    await client.end();
  }
}

interface JobView {
  id: string;
  status: string;
  error?: { code: string; message: string };
}

const auth = { authorization: `Bearer ${KEY}` };

async function submit(gw: TestGateway): Promise<JobView> {
  const res = await post(
    gw,
    "/v1/music/generations",
    { model: "tunes", prompt: "rain", duration: 1 },
    auth,
  );
  expect(res.status, await res.clone().text()).toBe(202);
  return (await res.json()) as JobView;
}

/** Polls until the job ends; bounded so a stuck runner fails the test instead of hanging it. */
async function finished(gw: TestGateway, id: string): Promise<JobView> {
  const deadline = Date.now() + 5_000;
  for (;;) {
    const res = await fetch(`${gw.url}/v1/music/generations/${id}`, { headers: auth });
    const job = (await res.json()) as JobView;
    if (job.status === "completed" || job.status === "failed") return job;
    if (Date.now() > deadline) throw new Error(`job ${id} still ${job.status}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const open: TestGateway[] = [];
afterEach(async () => {
  for (const gw of open.splice(0)) await gw.close();
});

describe.each(backends)("a free music route's step budgets when its job runs (%s)", (backend) => {
  const start = async () => {
    const gw = await gatewayOn(backend, { config: config(), now: () => T0 });
    open.push(gw);
    return gw;
  };

  it("a job whose route's first step has used up its budget is served by the next step", async () => {
    const gw = await start();
    await spend(backend, gw, "tune-a:free");
    const job = await submit(gw);
    expect(await finished(gw, job.id)).toMatchObject({ status: "completed" });
    const [row] = await gw.listRequests({ limit: 1 });
    expect(row).toMatchObject({
      model: "tunes",
      provider: "mb",
      served_model: "tune-b:free",
      error_code: null,
    });
  });

  it("a job whose every step used up its budget while it waited fails 429 rate_limit_exceeded, charged nothing", async () => {
    const gw = await start();
    // Admitted while the first step has budget; by the time the runner takes it, none has.
    gw.jobRunner.pause();
    const job = await submit(gw);
    await spend(backend, gw, "tune-a:free");
    await spend(backend, gw, "tune-b:free");
    gw.jobRunner.resume();
    const done = await finished(gw, job.id);
    expect(done).toMatchObject({ status: "failed", error: { code: "rate_limit_exceeded" } });
    expect(done.error?.message).toMatch(/token budget/);
    const [row] = await gw.listRequests({ limit: 1 });
    expect(row).toMatchObject({
      model: "tunes",
      error_code: "rate_limit_exceeded",
      cost_micro: 0,
    });
  });
});
