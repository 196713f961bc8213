import type pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { startJobRunner } from "../src/server/jobs/runner.js";
import { openPostgresPool } from "../src/store/postgres/connect.js";
import { PostgresMoney } from "../src/store/postgres/money.js";
import { errorOf, money } from "./support/api.js";
import {
  type BackendName,
  backends,
  baseConfigWith,
  gatewayOn,
  post,
  type TestGateway,
} from "./support/gateway.js";
import { eventually } from "./support/gateways-on-postgres.js";

/**
 * A music job holds its worst-case cost from its submission until it ends, however long it waits
 * in the queue or runs: holds expire after 6 h (on Postgres, on the database's clock), but a job's
 * lives as long as its job is queued or running under a lease its runner renews, so the account
 * cannot spend the same money twice meanwhile. A job whose runner died (its lease ran out
 * unrenewed) no longer keeps it. A free job's seconds count in its model's budget once, whatever
 * became of its hold (docs/metering.md).
 */

const HOUR = 3_600_000;
/** Ten minutes into a day: every clock step below stays in the day's budget window. */
const T0 = Date.parse("2030-01-01T00:10:00Z");
/** The provider's time for a job, on the gateway's manual clock: longer than a hold's 6 h. */
const JOB_HOURS = 8;
const PRICE = 100;
const SECONDS = 2;
const TIGHT_KEY = "kn-test-hold-tight-0000000000000000";
const FREE_KEY = "kn-test-hold-free-00000000000000000";
const FREE_BUDGET = 5;

function config(): ConfigInput {
  return baseConfigWith({
    providers: [
      { id: "mock-slow", wire: "mock", mock: { job_seconds: (JOB_HOURS * HOUR) / 1000 } },
    ],
    models: [
      { name: "slow-music", provider: "mock-slow", modality: "music", price_per_unit: PRICE },
      {
        name: "slow-music:free",
        provider: "mock-slow",
        upstream_model: "slow-music",
        modality: "music",
        free_token_budget: { tokens: FREE_BUDGET, window_seconds: 86_400 },
      },
    ],
    accounts: [
      // Enough for one job: a second is refused while the first holds its money.
      { id: "tight", balance_idr: PRICE * SECONDS, keys: [{ id: "k-tight", value: TIGHT_KEY }] },
      { id: "freebie", balance_idr: 0, keys: [{ id: "k-free", value: FREE_KEY }] },
    ],
    tiers: { free: { free_rpm: 100, free_daily: 100, burst_spacing_ms: 0 } },
  });
}

const open: { gw: TestGateway; pool?: pg.Pool }[] = [];
afterEach(async () => {
  for (const { gw, pool } of open.splice(0)) {
    await pool?.end();
    await gw.close();
  }
});

interface Submitted {
  status: number;
  id?: string;
  code?: string;
}

async function submit(
  gw: TestGateway,
  key: string,
  model: string,
  duration: number,
): Promise<Submitted> {
  const res = await post(
    gw,
    "/v1/music/generations",
    { model, prompt: "a long song", duration },
    { authorization: `Bearer ${key}` },
  );
  if (res.status === 202) return { status: 202, id: ((await res.json()) as { id: string }).id };
  return { status: res.status, code: (await errorOf(res)).code };
}

describe.each(backends)("a job's hold lives as long as its job (%s)", (backend: BackendName) => {
  const start = async () => {
    const gw = await gatewayOn(backend, {
      config: config(),
      clock: "manual",
      now: () => T0,
      jobPollMs: 20,
    });
    const pool = backend === "postgres" ? openPostgresPool({ url: gw.dbPath, max: 2 }) : undefined;
    open.push({ gw, pool });
    return { gw, pool };
  };

  const status = async (gw: TestGateway, id: string, account: string) =>
    (await gw.services.repos.jobs.get(id, account))?.status;
  const until = (gw: TestGateway, id: string, account: string, want: string) =>
    eventually(
      () => status(gw, id, account),
      (s) => s === want,
      10_000,
      `job ${id} ${want}`,
    );

  /**
   * The database's clock 6 h on, as far as holds go, and another gateway's reaper run then: every
   * hold is past its expiry, and what the reaper releases is released. SQLite's holds live in the
   * gateway's process and have no expiry: nothing to move there.
   */
  async function holdsExpire(pool: pg.Pool | undefined): Promise<number> {
    if (!pool) return 0;
    await pool.query("UPDATE holds SET expires_at = gateway_now_ms() - 1");
    const reaper = new PostgresMoney(pool, { instanceId: "another-gateway", leases: false });
    return reaper.reap();
  }

  it("a job running past 6 h keeps its money held: the account cannot spend it again, and the job is charged once when it completes", async () => {
    const { gw, pool } = await start();
    const first = await submit(gw, TIGHT_KEY, "slow-music", SECONDS);
    expect(first.status).toBe(202);
    await until(gw, first.id!, "tight", "running");
    gw.clock.advance(7 * HOUR);
    await holdsExpire(pool);
    expect(await submit(gw, TIGHT_KEY, "slow-music", SECONDS)).toEqual({
      status: 402,
      code: "insufficient_balance",
    });
    gw.clock.advance((JOB_HOURS - 7) * HOUR);
    await until(gw, first.id!, "tight", "completed");
    const rows = (await gw.listRequests({ limit: 10 })).filter((row) => row.account === "tight");
    expect(rows.map((row) => [row.status, row.cost_micro])).toEqual([
      [200, PRICE * SECONDS * 1_000_000],
    ]);
    expect(await money(gw, TIGHT_KEY)).toEqual({ balance: 0, held: 0 });
  });

  it("a job queued past 6 h keeps its money held until it runs", async () => {
    const { gw, pool } = await start();
    gw.jobRunner.pause();
    const first = await submit(gw, TIGHT_KEY, "slow-music", SECONDS);
    expect(first.status).toBe(202);
    gw.clock.advance(7 * HOUR);
    await holdsExpire(pool);
    expect(await submit(gw, TIGHT_KEY, "slow-music", SECONDS)).toEqual({
      status: 402,
      code: "insufficient_balance",
    });
    gw.jobRunner.resume();
    await until(gw, first.id!, "tight", "running");
    gw.clock.advance(JOB_HOURS * HOUR);
    await until(gw, first.id!, "tight", "completed");
    expect(await money(gw, TIGHT_KEY)).toEqual({ balance: 0, held: 0 });
  });

  it("a free job running past 6 h keeps its seconds of the budget held: another that would pass the budget fails 429 when it runs", async () => {
    const { gw, pool } = await start();
    const first = await submit(gw, FREE_KEY, "slow-music:free", FREE_BUDGET);
    expect(first.status).toBe(202);
    await until(gw, first.id!, "freebie", "running");
    gw.clock.advance(7 * HOUR);
    await holdsExpire(pool);
    // Admitted, as nothing is counted yet; refused when it runs, as the first holds the budget.
    const second = await submit(gw, FREE_KEY, "slow-music:free", 1);
    expect(second.status).toBe(202);
    await until(gw, second.id!, "freebie", "failed");
    const refused = await gw.services.repos.jobs.get(second.id!, "freebie");
    expect(JSON.parse(refused!.error!)).toMatchObject({ code: "rate_limit_exceeded" });
    gw.clock.advance((JOB_HOURS - 7) * HOUR);
    await until(gw, first.id!, "freebie", "completed");
    const served = (await gw.listRequests({ limit: 10 })).filter(
      (row) => row.account === "freebie",
    );
    expect(served.map((row) => row.status).sort()).toEqual([200, 429]);
  });

  it.runIf(backend === "postgres")(
    "a job whose runner died (its lease ran out unrenewed) no longer keeps its hold past 6 h",
    async () => {
      const { gw, pool } = await start();
      const first = await submit(gw, TIGHT_KEY, "slow-music", SECONDS);
      expect(first.status).toBe(202);
      await until(gw, first.id!, "tight", "running");
      // As a gateway that died: the row stays running under a lease nobody renews.
      await gw.jobRunner.stop({ keepLeases: true });
      await pool!.query("UPDATE jobs SET lease_expires_at = gateway_now_ms() - 1 WHERE id = $1", [
        first.id,
      ]);
      expect(await holdsExpire(pool)).toBe(1);
      expect((await submit(gw, TIGHT_KEY, "slow-music", SECONDS)).status).toBe(202);
    },
  );

  it.runIf(backend === "postgres")(
    "a free job whose runner died, taken over after its hold was released, counts its seconds in the budget once",
    async () => {
      const { gw, pool } = await start();
      const first = await submit(gw, FREE_KEY, "slow-music:free", FREE_BUDGET - 1);
      expect(first.status).toBe(202);
      await until(gw, first.id!, "freebie", "running");
      await gw.jobRunner.stop({ keepLeases: true });
      await pool!.query("UPDATE jobs SET lease_expires_at = gateway_now_ms() - 1 WHERE id = $1", [
        first.id,
      ]);
      expect(await holdsExpire(pool)).toBe(1);
      // Another gateway's runner takes the job over and finishes it.
      const other = await startJobRunner(gw.services, { pollMs: 20 });
      try {
        await until(gw, first.id!, "freebie", "running");
        gw.clock.advance(JOB_HOURS * HOUR);
        await until(gw, first.id!, "freebie", "completed");
        // Four of the five seconds are spent: one more job is admitted, and served whole.
        const next = await submit(gw, FREE_KEY, "slow-music:free", FREE_BUDGET - 1);
        expect(next.status).toBe(202);
        await until(gw, next.id!, "freebie", "running");
        gw.clock.advance(JOB_HOURS * HOUR);
        await until(gw, next.id!, "freebie", "completed");
        expect(await submit(gw, FREE_KEY, "slow-music:free", 1)).toMatchObject({
          status: 429,
          code: "rate_limit_exceeded",
        });
      } finally {
        await other.stop();
      }
    },
  );
});
