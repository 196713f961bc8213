import type pg from "pg";
import { setTimeout } from "../../host-timers.js";
import type { CountTake, LimitCounters } from "../types.js";
import { windowEnd } from "../utc-windows.js";
import { recallPauses } from "./leases.js";

/** How often a gateway forgets windows and slots long past; never on the request path itself. */
const defaultSweepIntervalMs = 60_000;
/**
 * How long past its end a window is kept: a gateway whose clock runs behind the sweeping one's may
 * still be counting in it.
 */
const sweepMarginMs = 10 * 60_000;

/**
 * A take as `gateway_hold_all` counts it beside a hold, in the windows `take` counts in; a
 * window's first take there forgets its key's windows past the sweep's margin.
 */
export function countColumns(count: CountTake | undefined, now: number) {
  if (!count) return {};
  const end = windowEnd(now, count.windowMs);
  return {
    limit_key: count.key,
    limit_window_end: end,
    limit_count: count.limit,
    limit_forget_before: end - count.windowMs - sweepMarginMs,
  };
}

export interface PostgresCountersOptions {
  sweepIntervalMs?: number;
}

const takeStatement = `INSERT INTO limit_counts AS counted (key, window_end, count)
  VALUES ($1, $2, 1)
  ON CONFLICT (key, window_end) DO UPDATE SET count = counted.count + 1
    WHERE counted.count < $3
  RETURNING count`;

// A slot that has passed starts the queue over (whoever waited for it is through, or died), and
// so does one further ahead than a full queue reaches: it was handed out on a clock ahead of this
// one (this gateway's before it went back, or another gateway's), and nobody waits for the step.
// Otherwise the request queues behind the last slot handed out, unless queueLimit already wait.
// The wait is the same expression for both: the slot handed out is next_slot - spacing.
const startsOver =
  "(slot.next_slot <= $3::bigint OR slot.next_slot - $3::bigint > ($4::bigint + 1) * $2::bigint)";
const claimStatement = `INSERT INTO limit_slots AS slot (key, next_slot, waiting)
  VALUES ($1, $3::bigint + $2::bigint, 0)
  ON CONFLICT (key) DO UPDATE SET
    next_slot = CASE WHEN ${startsOver} THEN excluded.next_slot
      ELSE slot.next_slot + $2::bigint END,
    waiting = CASE WHEN ${startsOver} THEN 0 ELSE slot.waiting + 1 END
    WHERE ${startsOver} OR slot.waiting < $4::integer
  RETURNING next_slot - $2::bigint - $3::bigint AS wait`;

/**
 * The limits' counters in the database, one count for every gateway on it. Each answer is one
 * round trip: a take is a conditional upsert that counts only while the window's count is under
 * the limit, so concurrent takes on any number of gateways never count past it. Windows are
 * fixed, `floor(now / windowMs)`, on the caller's clock, and a row is keyed by its window's end.
 */
export class PostgresCounters implements LimitCounters {
  private readonly sweepIntervalMs: number;
  private lastSweep = 0;
  private sweeping = false;

  constructor(
    private readonly pool: pg.Pool,
    options: PostgresCountersOptions = {},
  ) {
    this.sweepIntervalMs = options.sweepIntervalMs ?? defaultSweepIntervalMs;
  }

  async take(key: string, limit: number, windowMs: number, now: number): Promise<number | null> {
    // The upsert counts a new window's first request whatever the limit: none may be counted here.
    if (limit <= 0) return null;
    this.sweepNowAndThen(now);
    const end = windowEnd(now, windowMs);
    const pauses = recallPauses();
    for (;;) {
      const result = await this.pool.query<{ count: number }>({
        name: "gateway_limit_take",
        text: takeStatement,
        values: [key, end, limit],
      });
      const count = result.rows[0]?.count ?? null;
      if (count !== null) return count;
      // Slots of the window a gateway leased and has not used may come back (see leases.ts).
      const pause = (await this.recallLeases(key, end, limit)) ? pauses.next() : undefined;
      if (!pause || pause.done) return null;
      await new Promise((resolve) => setTimeout(resolve, pause.value));
    }
  }

  private async recallLeases(key: string, end: number, limit: number): Promise<boolean> {
    const result = await this.pool.query<{ recalled: boolean }>({
      name: "gateway_recall_count",
      text: "SELECT gateway_recall_count($1, $2, $3) AS recalled",
      values: [key, end, limit],
    });
    return result.rows[0].recalled;
  }

  async giveBack(key: string, windowMs: number, now: number): Promise<void> {
    await this.pool.query({
      name: "gateway_limit_give_back",
      text: `UPDATE limit_counts SET count = count - 1
        WHERE key = $1 AND window_end = $2 AND count > 0`,
      values: [key, windowEnd(now, windowMs)],
    });
  }

  async used(key: string, windowMs: number, now: number): Promise<number> {
    const result = await this.pool.query<{ count: number }>({
      name: "gateway_limit_used",
      text: "SELECT count FROM limit_counts WHERE key = $1 AND window_end = $2",
      values: [key, windowEnd(now, windowMs)],
    });
    return result.rows[0]?.count ?? 0;
  }

  async claimSlot(
    key: string,
    spacingMs: number,
    queueLimit: number,
    now: number,
  ): Promise<number | null> {
    this.sweepNowAndThen(now);
    const result = await this.pool.query<{ wait: number | string }>({
      name: "gateway_limit_claim_slot",
      text: claimStatement,
      values: [key, spacingMs, now, queueLimit],
    });
    const row = result.rows[0];
    return row ? Number(row.wait) : null;
  }

  async leaveSlot(key: string): Promise<void> {
    await this.pool.query({
      name: "gateway_limit_leave_slot",
      text: "UPDATE limit_slots SET waiting = waiting - 1 WHERE key = $1 AND waiting > 0",
      values: [key],
    });
  }

  /** Forgets windows and slots long past, beside the request that noticed it was time. */
  async sweep(now: number): Promise<void> {
    const before = now - sweepMarginMs;
    await this.pool.query({
      name: "gateway_limit_sweep_counts",
      text: "DELETE FROM limit_counts WHERE window_end < $1",
      values: [before],
    });
    await this.pool.query({
      name: "gateway_limit_sweep_slots",
      text: "DELETE FROM limit_slots WHERE next_slot < $1",
      values: [before],
    });
  }

  private sweepNowAndThen(now: number): void {
    if (this.sweeping || now - this.lastSweep < this.sweepIntervalMs) return;
    this.sweeping = true;
    this.lastSweep = now;
    this.sweep(now)
      .catch((err: Error) => {
        console.error(`gateway: forgetting past limit windows failed: ${err.message}`);
      })
      .finally(() => {
        this.sweeping = false;
      });
  }
}
