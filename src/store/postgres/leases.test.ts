import type pg from "pg";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { moneyInputs } from "../../../test/support/money-inputs.js";
import {
  countQueries,
  createTestDatabase,
  loseAnswerOnce,
} from "../../../test/support/postgres.js";
import type { Reservation, ReserveInput } from "../types.js";
import { openPostgresPool } from "./connect.js";
import type { LeaseOptions } from "./leases.js";
import { PostgresCounters } from "./limit-counters.js";
import { migratePostgres } from "./migrations.js";
import { CountRefused, HoldRefused, PostgresMoney } from "./money.js";

let url: string;
let admin: pg.Pool;
const opened: { money: PostgresMoney; pool: pg.Pool }[] = [];

const now = Date.UTC(2025, 5, 15, 12, 0, 0);
let sequence = 0;

beforeAll(async () => {
  url = await createTestDatabase();
  admin = openPostgresPool({ url, max: 4 });
  await migratePostgres(admin);
});

afterEach(async () => {
  for (const { money, pool } of opened.splice(0)) {
    await money.close().catch(() => {});
    await pool.end().catch(() => {});
  }
});

afterAll(async () => {
  await admin?.end();
});

/** A gateway's money on its own pool, started (leases are taken only by a started one). */
async function gateway(
  leases: LeaseOptions = {},
  extra: { leaseMs?: number } = {},
): Promise<{ money: PostgresMoney; pool: pg.Pool; queries: (name?: string) => number }> {
  const pool = openPostgresPool({ url, max: 5 });
  const slow = pool.query.bind(pool);
  pool.query = (async (...args: Parameters<typeof slow>) => {
    const answer = await slow(...args);
    const config = args[0] as { name?: string };
    if (typeof config === "object" && config.name === "gateway_lease_top_up")
      await new Promise((r) => setTimeout(r, 300));
    return answer;
  }) as typeof pool.query;
  const queries = countQueries(pool);
  const money = new PostgresMoney(pool, {
    instanceId: `leasing-${++sequence}`,
    leases,
    ...extra,
  });
  await money.start();
  opened.push({ money, pool });
  return { money, pool, queries };
}

async function account(fields: Record<string, number>): Promise<string> {
  const id = `acct-${++sequence}`;
  const columns = ["id", "created_at", ...Object.keys(fields)];
  await admin.query(
    `INSERT INTO accounts (${columns.join(", ")}) VALUES (${columns.map((_, i) => `$${i + 1}`).join(", ")})`,
    [id, now, ...Object.values(fields)],
  );
  return id;
}

async function row(id: string) {
  const result = await admin.query(
    `SELECT balance_micro, held_micro, leased_micro,
      (SELECT coalesce(sum(money_micro), 0)::bigint FROM leases WHERE account_id = $1) AS in_leases,
      (SELECT count(*)::int FROM holds WHERE account_id = $1) AS holds
     FROM accounts WHERE id = $1`,
    [id],
  );
  return result.rows[0] as {
    balance_micro: number;
    held_micro: number;
    leased_micro: number;
    in_leases: number;
    holds: number;
  };
}

const perMinute = (id: string, limit: number) => ({
  key: `paid-rpm|${id}`,
  limit,
  windowMs: 60_000,
});

const { request, outcome } = moneyInputs(now);

/**
 * The answers to the statements named `name` sent through `pool`: `answered` resolves once every
 * one sent so far has its answer, and the gateway has taken it (its continuation ran first).
 */
function answersTo(pool: pg.Pool, name: string): { answered(): Promise<void> } {
  const pending = new Set<Promise<unknown>>();
  const query = pool.query.bind(pool);
  pool.query = ((...args: Parameters<typeof query>) => {
    const answer = query(...args) as unknown as Promise<unknown>;
    const config = args[0] as { name?: string } | string;
    if (typeof config === "object" && config.name === name) {
      const settled: Promise<boolean> = answer.then(
        () => pending.delete(settled),
        () => pending.delete(settled),
      );
      pending.add(settled);
    }
    return answer;
  }) as typeof pool.query;
  return { answered: async () => void (await Promise.all(pending)) };
}

async function until(check: () => Promise<boolean>, ms = 3_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error("timed out waiting");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

describe("leases: requests admitted without a round trip", () => {
  it("a hold that leaves the account far from its limits leases more; the next requests ask nothing", async () => {
    const { money, queries } = await gateway();
    const id = await account({ balance_micro: 1_000_000, rpm_limit: 1_000 });
    const first = await money.reserve(request(id, { count: perMinute(id, 1_000) }));
    expect(first.payment).toBe("balance");
    // The first hold asked for four requests' worth beside its own: 1,000 held, 4,000 leased,
    // and a twentieth of the limit (50 slots) beside its own count.
    expect(await row(id)).toMatchObject({ held_micro: 5_000, leased_micro: 4_000, holds: 1 });
    const before = queries();
    const next: Reservation[] = [];
    for (let i = 0; i < 3; i++) {
      next.push(await money.reserve(request(id, { count: perMinute(id, 1_000) })));
    }
    // No hold; the one statement sent is the lease's own top-up, which nobody waits on.
    expect(queries("gateway_hold_all")).toBe(1);
    expect(queries() - before).toBe(queries("gateway_lease_top_up"));
    expect(next.every((r) => r.payment === "balance" && r.reservedMicro === 1_000)).toBe(true);
    const counted = await admin.query<{ count: number }>(
      "SELECT count FROM limit_counts WHERE key = $1",
      [`paid-rpm|${id}`],
    );
    expect(counted.rows[0].count).toBe(1 + 50);
  });

  it("a lease takes at most 256 per-minute slots at once, however large the limit", async () => {
    const { money } = await gateway();
    const id = await account({ balance_micro: 1_000_000, rpm_limit: 10_000_000 });
    await money.reserve(request(id, { count: perMinute(id, 10_000_000) }));
    const counted = await admin.query<{ count: number }>(
      "SELECT count FROM limit_counts WHERE key = $1",
      [`paid-rpm|${id}`],
    );
    expect(counted.rows[0].count).toBe(1 + 256);
  });

  it("a lease in use grows before it runs out: a steady stream of requests waits on no hold", async () => {
    const { money, pool, queries } = await gateway();
    const id = await account({ balance_micro: 1_000_000, rpm_limit: 1_000 });
    const count = perMinute(id, 1_000);
    await money.settle(await money.reserve(request(id, { count })), outcome());
    const holds = queries("gateway_hold_all");
    expect(holds).toBe(1);
    // Each charged 300 of the 1,000 it held: the first lease (4,000) covers about a dozen, its
    // 50 slots fifty; a hundred requests need both to grow, each more than once.
    const topUps = answersTo(pool, "gateway_lease_top_up");
    let sent = 0;
    for (let i = 0; i < 100; i++) {
      const reservation = await money.reserve(request(id, { count }));
      expect(reservation.payment).toBe("balance");
      await money.settle(reservation, outcome());
      // A top-up is asked for while the lease still covers the next requests, so the next one is
      // admitted from it before the answer; a steady stream then gives the answer its round trip
      // (the stream here runs back to back, so it waits for it rather than for a clock).
      if (queries("gateway_lease_top_up") > sent) {
        sent = queries("gateway_lease_top_up");
        if (i < 99) {
          i++;
          const next = await money.reserve(request(id, { count }));
          expect(next.payment).toBe("balance");
          await money.settle(next, outcome());
        }
        await topUps.answered();
      }
    }
    expect(queries("gateway_hold_all")).toBe(holds);
    expect(queries("gateway_lease_top_up")).toBeGreaterThanOrEqual(3);
    // What the database holds is what the leases have, and every request was charged once.
    await until(async () => (await row(id)).held_micro === (await row(id)).leased_micro);
    const after = await row(id);
    expect(after.balance_micro).toBe(1_000_000 - 101 * 300);
    expect(after.leased_micro).toBe(after.in_leases);
    const logged = await admin.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM request_log WHERE account_id = $1 AND state = 'settled'",
      [id],
    );
    expect(logged.rows[0].n).toBe(101);
    const counted = await admin.query<{ count: number }>(
      "SELECT count FROM limit_counts WHERE key = $1",
      [count.key],
    );
    // The first request's own count, and the slots leased: at least the hundred used since.
    expect(counted.rows[0].count).toBeGreaterThanOrEqual(101);
  });

  it("a top-up is granted only far from the limits, and never to a lease stopped or recalled", async () => {
    const id = await account({ balance_micro: 100_000, rpm_limit: 1_000 });
    const instance = `manual-${++sequence}`;
    const key = `paid-rpm|${id}`;
    const windowEnd = now + 60_000;
    await admin.query("INSERT INTO instances (id, started_at, lease_until) VALUES ($1, 0, $2)", [
      instance,
      Date.now() + 600_000,
    ]);
    await admin.query(
      "INSERT INTO leases (instance_id, account_id, money_micro) VALUES ($1, $2, 4000)",
      [instance, id],
    );
    await admin.query("UPDATE accounts SET held_micro = 4000, leased_micro = 4000 WHERE id = $1", [
      id,
    ]);
    await admin.query("INSERT INTO limit_counts (key, window_end, count) VALUES ($1, $2, 100)", [
      key,
      windowEnd,
    ]);
    const topUp = async (micro: number, slots: number) =>
      (
        await admin.query<{ lease_micro: number; lease_count: number }>(
          "SELECT * FROM gateway_lease_top_up($1, $2, $3, $4, $5, 1000, $6)",
          [instance, id, micro, key, windowEnd, slots],
        )
      ).rows[0];
    const state = async () => ({
      ...(await row(id)),
      count: (
        await admin.query<{ count: number }>(
          "SELECT count FROM limit_counts WHERE key = $1 AND window_end = $2",
          [key, windowEnd],
        )
      ).rows[0].count,
    });

    expect(await topUp(4_000, 50)).toEqual({ lease_micro: 4_000, lease_count: 50 });
    expect(await state()).toMatchObject({
      held_micro: 8_000,
      leased_micro: 8_000,
      in_leases: 8_000,
      count: 150,
    });
    // 100,000 - 8,000 - 20,000 leaves less than four times 20,000; 150 + 5 x 200 is over 1,000.
    expect(await topUp(20_000, 200)).toEqual({ lease_micro: 0, lease_count: 0 });
    // Each part on its own: the money is far from its limit, the count is not.
    expect(await topUp(2_000, 200)).toEqual({ lease_micro: 2_000, lease_count: 0 });
    const granted = await state();
    expect(granted).toMatchObject({ held_micro: 10_000, in_leases: 10_000, count: 150 });

    await admin.query("UPDATE leases SET recall = true WHERE instance_id = $1", [instance]);
    expect(await topUp(2_000, 10)).toEqual({ lease_micro: 0, lease_count: 0 });
    await admin.query("UPDATE leases SET recall = false, active = false WHERE instance_id = $1", [
      instance,
    ]);
    expect(await topUp(2_000, 10)).toEqual({ lease_micro: 0, lease_count: 0 });
    await admin.query("DELETE FROM leases WHERE instance_id = $1", [instance]);
    expect(await topUp(2_000, 10)).toEqual({ lease_micro: 0, lease_count: 0 });
    // Nothing was taken for the stopped, recalled or missing lease.
    expect(await state()).toEqual({ ...granted, in_leases: 0 });
    await admin.query("DELETE FROM instances WHERE id = $1", [instance]);
  });

  it("a request from a lease is charged and recorded as any other, and what it held beyond that stays leased", async () => {
    const { money } = await gateway();
    const id = await account({ balance_micro: 1_000_000 });
    const first = await money.reserve(request(id));
    const leased = await money.reserve(request(id));
    expect(await row(id)).toMatchObject({ held_micro: 5_000, leased_micro: 4_000 });
    expect(await money.heldMicro(id)).toBe(2_000);
    expect(await money.settle(leased, outcome({ costMicro: 300 }))).toBe(300);
    expect(await money.settle(first, outcome({ costMicro: 700 }))).toBe(700);
    expect(await row(id)).toMatchObject({
      balance_micro: 1_000_000 - 1_000,
      held_micro: 3_700,
      leased_micro: 3_700,
      in_leases: 3_700,
      holds: 0,
    });
    expect(await money.heldMicro(id)).toBe(0);
    const log = await admin.query(
      "SELECT id, payment, reserved_micro, cost_micro, state FROM request_log WHERE account_id = $1 ORDER BY id",
      [id],
    );
    expect(log.rows).toEqual(
      [
        {
          id: first.id,
          payment: "balance",
          reserved_micro: 1_000,
          cost_micro: 700,
          state: "settled",
        },
        {
          id: leased.id,
          payment: "balance",
          reserved_micro: 1_000,
          cost_micro: 300,
          state: "settled",
        },
      ].sort((a, b) => a.id.localeCompare(b.id)),
    );
  });

  it("an unused lease is given back after its idle time, and a stopped one at once", async () => {
    const { money } = await gateway({ idleMs: 100, tickMs: 20 });
    const idle = await account({ balance_micro: 1_000_000 });
    expect(money.leaseTickRunning).toBe(false);
    const r = await money.reserve(request(idle));
    expect(money.leaseTickRunning).toBe(true);
    expect((await row(idle)).leased_micro).toBe(4_000);
    await until(async () => (await row(idle)).leased_micro === 0);
    expect(await row(idle)).toMatchObject({ held_micro: 1_000, in_leases: 0 });
    await money.settle(r, outcome());
    // Nothing leased any more: the tick stops, and an idle gateway no longer wakes for it.
    await until(async () => !money.leaseTickRunning);
    await money.reserve(request(idle));
    expect(money.leaseTickRunning).toBe(true);

    const { money: other } = await gateway({ idleMs: 60_000 });
    const changed = await account({ balance_micro: 1_000_000 });
    await other.reserve(request(changed));
    other.stopLease(changed);
    await until(async () => (await row(changed)).leased_micro === 0);
    // Stopped: the next request goes to the database again, and may lease anew.
    await other.reserve(request(changed));
    expect(await row(changed)).toMatchObject({ held_micro: 6_000, leased_micro: 4_000, holds: 2 });
  });

  it("no lease for an account with PAYG on: its requests are decided by the database", async () => {
    const { money } = await gateway();
    const id = await account({
      balance_micro: 1_000_000,
      payg_enabled: 1,
      payg_limit_micro: 1_000_000,
      payg_window_start: now,
    });
    await money.reserve(request(id));
    await money.reserve(request(id));
    expect(await row(id)).toMatchObject({ held_micro: 2_000, leased_micro: 0, holds: 2 });
  });

  for (const committed of [true, false]) {
    it(`a settlement whose outcome is unknown (${committed ? "committed" : "not committed"}, its answer lost): all the lease has comes back once nothing is in flight`, async () => {
      const { money, pool } = await gateway();
      const id = await account({ balance_micro: 1_000_000 });
      await money.settle(await money.reserve(request(id)), outcome());
      const leased = await money.reserve(request(id));
      const other = await money.reserve(request(id));
      loseAnswerOnce(pool, "gateway_settle_all", committed);
      await expect(money.settle(leased, outcome())).rejects.toThrow(/Connection terminated/);
      // Another request is still in flight on the lease: what it holds stays held.
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect((await row(id)).in_leases).toBeGreaterThanOrEqual(1_000);
      await money.settle(other, outcome());
      await until(async () => (await row(id)).in_leases === 0);
      const charged = committed ? 3 : 2;
      expect(await row(id)).toMatchObject({
        balance_micro: 1_000_000 - charged * 300,
        held_micro: 0,
        leased_micro: 0,
        holds: 0,
      });
    });
  }

  it("a give-back that failed is tried again, and gives back all the lease has", async () => {
    const { money, pool } = await gateway({ idleMs: 60_000, tickMs: 20 });
    const id = await account({ balance_micro: 1_000_000 });
    await money.settle(await money.reserve(request(id)), outcome());
    expect((await row(id)).in_leases).toBe(4_000);
    const lost = loseAnswerOnce(pool, "gateway_lease_tick", false);
    money.stopLease(id);
    await until(async () => lost());
    expect((await row(id)).in_leases).toBe(4_000);
    await until(async () => (await row(id)).in_leases === 0);
    expect(await row(id)).toMatchObject({ held_micro: 0, leased_micro: 0 });
  });

  it("a request that stops being held (released) gives its money back to the lease", async () => {
    const { money } = await gateway();
    const id = await account({ balance_micro: 1_000_000 });
    await money.reserve(request(id));
    const leased = await money.reserve(request(id));
    expect(await money.release(leased)).toBe(true);
    expect(await money.heldMicro(id)).toBe(1_000);
    // All four again: four more requests without the database.
    for (let i = 0; i < 4; i++) await money.reserve(request(id));
    expect((await row(id)).holds).toBe(1);
  });

  it("the leases of a gateway that died go back to their accounts with the reaper", async () => {
    const doomed = await gateway({}, { leaseMs: 1_000 });
    const { money: live } = await gateway();
    const id = await account({ balance_micro: 1_000_000 });
    const r = await doomed.money.reserve(request(id));
    await doomed.money.reserve(request(id));
    expect((await row(id)).leased_micro).toBe(4_000);
    // Its connections gone, it renews nothing; once its lease has run out it is reaped.
    await doomed.pool.end();
    await new Promise((resolve) => setTimeout(resolve, 1_200));
    // Its hold and its lease (and whatever else a dead gateway left in this database).
    expect(await live.reap()).toBeGreaterThanOrEqual(2);
    expect(await row(id)).toMatchObject({ held_micro: 0, leased_micro: 0, in_leases: 0, holds: 0 });
    // Its request settles as one whose hold was reaped: nothing charged.
    expect(r.payment).toBe("balance");
  });
});

describe("leases: limits stay exact across gateways", () => {
  /** attempts requests, `parallel` at a time on each of the gateways, none settled. */
  async function waves(gateways: PostgresMoney[], make: () => ReserveInput, attempts: number) {
    const parallel = 4;
    const admitted: Reservation[] = [];
    const refused: unknown[] = [];
    let next = 0;
    await Promise.all(
      gateways.flatMap((money) =>
        Array.from({ length: parallel }, async () => {
          while (next < attempts) {
            next++;
            await money.reserve(make()).then(
              (r) => admitted.push(r),
              (err) => refused.push(err),
            );
          }
        }),
      ),
    );
    return { admitted, refused };
  }

  it("a balance for exactly N requests admits exactly N, leases out on both gateways", async () => {
    const a = await gateway({ tickMs: 20 });
    const b = await gateway({ tickMs: 20 });
    const id = await account({ balance_micro: 150 * 1_000 + 999 });
    const { admitted, refused } = await waves([a.money, b.money], () => request(id), 300);
    expect(admitted).toHaveLength(150);
    expect(refused).toHaveLength(150);
    expect(
      refused.every((e) => e instanceof HoldRefused && e.refusal === "insufficient_balance"),
    ).toBe(true);
    // Some were admitted from leases (fewer holds than requests), and what the leases hold now
    // is only what their requests hold: everything unused came back.
    const after = await row(id);
    expect(after.holds).toBeLessThan(150);
    expect(after).toMatchObject({
      held_micro: 150_000,
      leased_micro: 1_000 * (150 - after.holds),
      in_leases: 1_000 * (150 - after.holds),
    });
  });

  it("what an idle gateway's lease holds comes back to a gateway refused without it", async () => {
    const idle = await gateway({ idleMs: 60_000 });
    const busy = await gateway({ tickMs: 20 });
    const id = await account({ balance_micro: 25 * 1_000, rpm_limit: 30 });
    const count = () => ({ count: perMinute(id, 30) });
    await idle.money.reserve(request(id, count()));
    expect(await row(id)).toMatchObject({ held_micro: 5_000, leased_micro: 4_000 });
    const admitted: Reservation[] = [];
    for (;;) {
      const r = await busy.money.reserve(request(id, count())).catch((err) => err);
      if (!(r instanceof Error)) admitted.push(r);
      else {
        expect(r).toBeInstanceOf(HoldRefused);
        break;
      }
    }
    // 24 of the 25: the idle gateway gave back the four its lease held unused.
    const leaseRows = await admin.query("SELECT * FROM leases WHERE account_id = $1", [id]);
    const state = JSON.stringify({ leases: leaseRows.rows, account: await row(id) });
    expect(admitted, state).toHaveLength(24);
    const after = await row(id);
    expect(after.held_micro).toBe(25_000);
    // The rest of what is held is held by requests admitted from leases.
    expect(after.leased_micro).toBe(1_000 * (25 - after.holds));

    const slots = await account({ balance_micro: 100_000_000, rpm_limit: 30 });
    const limited = () => ({ count: perMinute(slots, 30) });
    await idle.money.reserve(request(slots, limited()));
    let taken = 0;
    while (
      await busy.money.reserve(request(slots, limited())).then(
        () => true,
        (err) => {
          expect(err).toBeInstanceOf(CountRefused);
          return false;
        },
      )
    ) {
      taken++;
    }
    // 29 of the 30: the idle gateway's four leased slots came back.
    expect(taken).toBe(29);

    // A count taken apart from a hold (a shared key's) recalls leased slots as a hold does.
    const shared = await account({ balance_micro: 100_000_000, rpm_limit: 30 });
    await idle.money.reserve(request(shared, { count: perMinute(shared, 30) }));
    const counters = new PostgresCounters(busy.pool);
    let counted = 0;
    while ((await counters.take(`paid-rpm|${shared}`, 30, 60_000, now)) !== null) counted++;
    expect(counted).toBe(29);
  });

  it("a hold refused while another gateway's give-back commits is tried again, and admitted", async () => {
    const { money } = await gateway();
    const id = await account({ balance_micro: 2_000, held_micro: 2_000, leased_micro: 2_000 });
    await admin.query("INSERT INTO instances (id, started_at, lease_until) VALUES ($1, 0, 9e15)", [
      `elsewhere-${id}`,
    ]);
    await admin.query(
      "INSERT INTO leases (instance_id, account_id, money_micro) VALUES ($1, $2, 2000)",
      [`elsewhere-${id}`, id],
    );
    // The other gateway's give-back is under way, not yet committed, when the hold is decided.
    const other = await admin.connect();
    try {
      await other.query("BEGIN");
      await other.query("SELECT gateway_lease_give_back($1, $2, 2000, 0, NULL, 0, 0)", [
        `elsewhere-${id}`,
        id,
      ]);
      const reserved = money.reserve(request(id)).then(
        (r) => r.payment,
        (err: Error) => err.message,
      );
      await new Promise((resolve) => setTimeout(resolve, 200));
      await other.query("COMMIT");
      expect(await reserved).toBe("balance");
    } finally {
      other.release();
    }
  });

  it("a per-minute limit of N admits exactly N, leased slots on both gateways", async () => {
    const a = await gateway({ tickMs: 20 });
    const b = await gateway({ tickMs: 20 });
    const id = await account({ balance_micro: 100_000_000 });
    const { admitted, refused } = await waves(
      [a.money, b.money],
      () => request(id, { count: perMinute(id, 120) }),
      240,
    );
    expect(admitted).toHaveLength(120);
    expect(refused).toHaveLength(120);
    expect(refused.every((e) => e instanceof CountRefused && e.limit === 120)).toBe(true);
    expect((await row(id)).holds).toBeLessThan(120);
    const counted = await admin.query<{ count: number }>(
      "SELECT count FROM limit_counts WHERE key = $1",
      [`paid-rpm|${id}`],
    );
    expect(counted.rows[0].count).toBe(120);
  });
});
