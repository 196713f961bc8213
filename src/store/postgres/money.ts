import { hostname } from "node:os";
import type pg from "pg";
import { clearInterval, performanceNow, setInterval, setTimeout } from "../../host-timers.js";
import {
  type AccountPatch,
  type BudgetHold,
  moneyColumns,
  type Payment,
  type PaymentRefusal,
  pickColumns,
  profileColumns,
  type Reservation,
  type ReserveInput,
  reservationOf,
  type SettleInput,
} from "../types.js";
import { freeTokenWindowStart } from "../usage-rows.js";
import { secondsToUtcMidnight, utcDay } from "../utc-windows.js";
import { isDatabaseUnavailable, isRolledBackConflict } from "./faults.js";
import {
  type LeasedSettlement,
  type LeaseOptions,
  Leases,
  type LeaseWant,
  recallPauses,
} from "./leases.js";
import { countColumns } from "./limit-counters.js";
import type { Queryable } from "./transaction.js";

/**
 * How long an instance's lease lasts without a renewal. It is renewed several times per lease, so
 * one slow round trip does not cost a live gateway its holds.
 */
const defaultLeaseMs = 15_000;
/**
 * The backstop for a hold whose gateway is alive but never settled it (a bug): longer than any
 * request or stream the gateway serves, so it never releases the hold of a request still running.
 */
const defaultHoldTtlMs = 6 * 60 * 60 * 1000;
/** Holds or settlements sent in one statement at most: a long batch keeps an account locked long. */
const batchLimit = 100;
/** Times a call is sent in all when the database breaks it off as a deadlock's victim. */
const conflictAttempts = 3;
/** Statements of one kind a gateway has in flight at once before the next calls wait and batch. */
const defaultParallelBatches = 2;

export interface PostgresMoneyOptions {
  /** This gateway's id in `instances`; its holds are released when its lease runs out. */
  instanceId: string;
  leaseMs?: number;
  /** null: holds never expire on their own, only with their instance. */
  holdTtlMs?: number | null;
  /**
   * Hold statements, and settlement statements, in flight at once; the calls made meanwhile wait
   * and batch.
   */
  parallelBatches?: number;
  /** false: every hold goes to the database; otherwise how leases behave (see leases.ts). */
  leases?: LeaseOptions | false;
}

interface HoldAnswer {
  position: number;
  payment: Payment | null;
  reserved_micro: number;
  payment_ref: string | null;
  refusal: string | null;
  lease_micro: number;
  lease_count: number;
  recalled: boolean;
}

/** The account cannot pay for the request: billing answers with the spec's error for `refusal`. */
export class HoldRefused extends Error {
  constructor(
    readonly refusal: PaymentRefusal,
    readonly retryAfter?: number,
  ) {
    super(refusal);
  }
}

/** The request's per-minute count (`ReserveInput.count`) was full: nothing was held. */
export class CountRefused extends Error {
  constructor(readonly limit: number) {
    super("rate_limited");
  }
}

function refused(refusal: string | null, input: ReserveInput): Error {
  const now = input.now;
  switch (refusal) {
    case "rate_limited":
      return new CountRefused(input.count?.limit ?? 0);
    case "free_quota_daily":
      return new HoldRefused(refusal, secondsToUtcMidnight(now));
    case "plan_limit_reached":
    case "payg_limit_reached":
    case "insufficient_balance":
      return new HoldRefused(refusal);
    default:
      return new Error("account missing");
  }
}

/**
 * `gateway_settle_all`'s charge for a delivered answer whose hold (or lease) the reaper released
 * while its gateway was frozen, and which the account can no longer pay (`gateway_settle_late`).
 */
export const unpaidLate = -1;

/**
 * A settlement the database refused: the answer came too late (its gateway was taken as dead and
 * its hold released) for an account that can no longer pay for it. Recorded as failed, charged
 * nothing: the answer must not reach its client.
 */
export class LateAnswerUnpaid extends Error {
  constructor(
    /**
     * The tokens its request stays charged: a stream's, those of the delivery mark the reaper
     * charged it by; a whole answer's, none.
     */
    readonly charged: { inputTokens: number; outputTokens: number },
  ) {
    super("a late answer the account can no longer pay");
  }
}

const holdAllStatement = `SELECT position, payment, reserved_micro, payment_ref, refusal, lease_micro,
  lease_count, recalled FROM gateway_hold_all($1::jsonb)`;
const settleAllStatement = "SELECT position, charge FROM gateway_settle_all($1::jsonb)";
const markStatement = `INSERT INTO deliveries (id, instance_id, account_id, settlement)
  VALUES ($1, $2, $3, $4::jsonb) ON CONFLICT (id) DO UPDATE SET settlement = excluded.settlement`;
const markAllStatement = `INSERT INTO deliveries (id, instance_id, account_id, settlement)
  SELECT m.id, $1, m.account_id, m.settlement
  FROM jsonb_to_recordset($2::jsonb) AS m(id text, account_id text, settlement jsonb)
  ON CONFLICT (id) DO UPDATE SET settlement = excluded.settlement`;

interface Queued<Result> {
  resolve(result: Result): void;
  reject(err: unknown): void;
}

interface QueuedHold extends Queued<HoldAnswer> {
  input: ReserveInput;
  want: LeaseWant;
}

interface QueuedMark extends Queued<true> {
  id: string;
  accountId: string;
  settlement: MarkRow;
}

/** A mark's settlement row: the settlement it stands for. */
type MarkRow = ReturnType<typeof settlementRow>;

interface QueuedSettlement extends Queued<number | null> {
  reservation: Reservation;
  input: SettleInput;
  lease?: LeasedSettlement;
}

/**
 * Calls sent to the database as they come while fewer than `parallel` statements are in flight;
 * the calls that come meanwhile wait, and the next statement sends them all: one round trip and
 * one transaction for the lot, each call whole or not at all as when alone. So a lone request pays
 * no wait, and under load the round trips and commits per request fall as the batches grow (the
 * group commit SQLite's settlements get once per event-loop turn). `sendOne` sends a call by
 * itself: a batch of one, and each call of a batch the database refused for anything but being
 * unreachable, so that one call it refuses never takes the others with it.
 */
class Batches<Item extends Queued<Result>, Result> {
  private queued: Item[] = [];
  private inFlight = 0;
  private readonly drained = new Set<() => void>();

  constructor(
    private readonly sendOne: (item: Item) => Promise<Result>,
    /** Sends several at once: each item's result by its position in `items`. */
    private readonly sendAll: (items: Item[]) => Promise<Map<number, Result>>,
    private readonly parallel: number,
  ) {}

  add(item: Item): void {
    this.queued.push(item);
    if (this.inFlight < this.parallel) this.sendQueued();
  }

  /** Resolves once every call added so far has its answer. */
  flush(): Promise<void> {
    if (this.inFlight === 0 && this.queued.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.drained.add(resolve));
  }

  private sendQueued(): void {
    const batch = this.queued.splice(0, batchLimit);
    this.inFlight++;
    void this.send(batch).finally(() => {
      this.inFlight--;
      if (this.queued.length > 0) this.sendQueued();
      else if (this.inFlight === 0) {
        for (const resolve of this.drained) resolve();
        this.drained.clear();
      }
    });
  }

  private async send(batch: Item[]): Promise<void> {
    if (batch.length === 1) {
      await this.sendAlone(batch[0]);
      return;
    }
    let results: Map<number, Result>;
    try {
      results = await this.sendAll(batch);
    } catch (err) {
      if (isDatabaseUnavailable(err)) {
        for (const item of batch) item.reject(err);
        return;
      }
      await Promise.all(batch.map((item) => this.send([item])));
      return;
    }
    for (const [position, item] of batch.entries()) {
      const result = results.get(position);
      if (result === undefined) item.reject(new Error("the database gave no answer for this call"));
      else item.resolve(result);
    }
  }

  /** One call; sent again when the database chose it as a deadlock's victim, as Postgres advises. */
  private async sendAlone(item: Item): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        item.resolve(await this.sendOne(item));
        return;
      } catch (err) {
        if (attempt < conflictAttempts && isRolledBackConflict(err)) continue;
        item.reject(err);
        return;
      }
    }
  }
}

/**
 * The money core on Postgres, exact across every gateway on the database: a hold is one
 * conditional update in the database, with the request's per-minute count in the same round trip
 * (`gateway_hold_all`, with the holds asked for meanwhile), a settlement one transaction
 * (`gateway_settle`, one round trip, or with others in `gateway_settle_all`), and the
 * holds of a gateway that died are released by any other one's reaper once its lease has run out.
 * The decisions and refusals are Ledger's (src/server/billing/ledger.ts): subscription windows,
 * then the balance, then PAYG.
 */
export class PostgresMoney {
  private readonly leaseMs: number;
  private readonly holdTtlMs: number | null;
  private timer: NodeJS.Timeout | undefined;
  private ticking = false;
  private readonly holds: Batches<QueuedHold, HoldAnswer>;
  private readonly settlements: Batches<QueuedSettlement, number | null>;
  private readonly marks: Batches<QueuedMark, true>;
  private readonly leases: Leases | undefined;

  /** One round trip to the database: resolves once it answers. */
  async ping(): Promise<void> {
    await this.pool.query("SELECT 1");
  }

  constructor(
    private readonly pool: pg.Pool,
    private readonly options: PostgresMoneyOptions,
  ) {
    this.leaseMs = options.leaseMs ?? defaultLeaseMs;
    this.holdTtlMs = options.holdTtlMs === undefined ? defaultHoldTtlMs : options.holdTtlMs;
    const parallel = options.parallelBatches ?? defaultParallelBatches;
    this.holds = new Batches(
      async (queued) => {
        const answer = (await this.holdAll([queued])).get(0);
        if (!answer) throw new Error("the database gave no answer for this hold");
        return answer;
      },
      (batch) => this.holdAll(batch),
      parallel,
    );
    this.settlements = new Batches(
      async (queued) => (await settleRows(this.pool, [settlementRow(queued, 0)])).get(0) ?? null,
      (batch) => this.settleAll(batch),
      parallel,
    );
    // Marks go apart from holds and settlements: a stream's next piece waits for its mark, and
    // should not wait behind other requests' money as well.
    this.marks = new Batches<QueuedMark, true>(
      async (queued) => {
        await this.pool.query({
          name: "gateway_mark_delivery",
          text: markStatement,
          values: [queued.id, this.instanceId, queued.accountId, JSON.stringify(queued.settlement)],
        });
        return true;
      },
      (batch) => this.markAll(batch),
      parallel,
    );
    this.leases =
      options.leases === false
        ? undefined
        : new Leases(pool, options.instanceId, options.leases ?? {});
  }

  get instanceId(): string {
    return this.options.instanceId;
  }

  // ---- the instance's lease -------------------------------------------------

  /** Records this gateway with a fresh lease (again, after it lost one). */
  async register(): Promise<void> {
    const sent = performanceNow();
    await this.pool.query(
      `INSERT INTO instances (id, host, pid, started_at, lease_until)
       VALUES ($1, $2, $3, gateway_now_ms(), gateway_now_ms() + $4)
       ON CONFLICT (id) DO UPDATE SET lease_until = excluded.lease_until`,
      [this.instanceId, hostname(), process.pid, this.leaseMs],
    );
    this.leases?.renewed(sent, this.leaseMs);
  }

  /**
   * Renews the lease. False when it had already been taken as dead: the reaper released this
   * gateway's holds and leases, so requests admitted before now settle without them (a delivered
   * answer is charged while its account can pay, else refused: `gateway_settle_late`).
   */
  async heartbeat(): Promise<boolean> {
    const sent = performanceNow();
    const result = await this.pool.query({
      name: "gateway_heartbeat",
      text: "UPDATE instances SET lease_until = gateway_now_ms() + $2 WHERE id = $1",
      values: [this.instanceId, this.leaseMs],
    });
    if (result.rowCount === 1) this.leases?.renewed(sent, this.leaseMs);
    else this.leases?.lost();
    return result.rowCount === 1;
  }

  /** Registers, then renews the lease and reaps dead gateways' holds on a timer until close. */
  async start(): Promise<void> {
    await this.register();
    this.timer = setInterval(() => void this.tick(), Math.max(1, Math.floor(this.leaseMs / 3)));
    this.timer.unref();
    this.leases?.start();
  }

  private async tick(): Promise<void> {
    // A round trip slower than the interval must not start a second renewal beside it.
    if (this.ticking) return;
    this.ticking = true;
    try {
      if (!(await this.heartbeat())) {
        console.error(
          `gateway: instance ${this.instanceId} missed its lease and was taken as dead; its holds were released`,
        );
        await this.register();
      }
      await this.reap();
    } catch (err) {
      console.error(`gateway: lease renewal failed: ${(err as Error).message}`);
    } finally {
      this.ticking = false;
    }
  }

  /** Leaves the database: the lease ends now and whatever this gateway still held is released. */
  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    // The reaping below gives back whatever the leases have.
    await this.leases?.close();
    // Before the lease ends: the reaper would release what they hold and settle.
    await this.holds.flush();
    await this.settlements.flush();
    await this.pool.query("DELETE FROM instances WHERE id = $1", [this.instanceId]);
    await this.reap();
  }

  /**
   * Releases the holds of every gateway whose lease ran out (and any hold past its expiry, but a
   * live job's). Each hold is released in its own short transaction, so reaping never locks
   * several accounts at once, and one released twice (two reapers, or a late settlement) is
   * released once.
   */
  async reap(): Promise<number> {
    await this.pool.query({
      name: "gateway_reap_instances",
      text: "DELETE FROM instances WHERE lease_until < gateway_now_ms()",
    });
    // First the streams a dead gateway cut off: each is charged what its delivery mark says
    // before its hold or its gateway's lease goes back.
    const marked = await this.pool.query<{ id: string }>({
      name: "gateway_reap_deliveries",
      text: `SELECT id FROM deliveries
        WHERE NOT EXISTS (SELECT 1 FROM instances WHERE instances.id = deliveries.instance_id)`,
    });
    for (const { id } of marked.rows) {
      await this.pool.query({
        name: "gateway_settle_interrupted",
        text: "SELECT gateway_settle_interrupted($1)",
        values: [id],
      });
    }
    // A job's hold has no instance: it lives as long as its job does, queued or running under a
    // lease its runner renews (past its expiry too: a job may wait or run for longer). Once the
    // job is dead (its lease ran out unrenewed, or it ended), the expiry releases it.
    const orphans = await this.pool.query<{ id: string }>({
      name: "gateway_reap_holds",
      text: `SELECT id FROM holds
        WHERE (instance_id IS NOT NULL
            AND NOT EXISTS (SELECT 1 FROM instances WHERE instances.id = holds.instance_id))
          OR (expires_at < gateway_now_ms() AND NOT EXISTS (SELECT 1 FROM jobs
            WHERE jobs.request_id = holds.id AND (jobs.status = 'queued'
              OR (jobs.status = 'running' AND jobs.lease_expires_at >= gateway_now_ms()))))`,
    });
    let released = 0;
    for (const { id } of orphans.rows) {
      if (await this.releaseHold(id)) released++;
    }
    const leases = await this.pool.query<{ instance_id: string; account_id: string }>({
      name: "gateway_reap_leases",
      text: `SELECT instance_id, account_id FROM leases
        WHERE NOT EXISTS (SELECT 1 FROM instances WHERE instances.id = leases.instance_id)`,
    });
    for (const lease of leases.rows) {
      if (await this.reapLease(lease.instance_id, lease.account_id)) released++;
    }
    return released;
  }

  // ---- admission ------------------------------------------------------------

  /**
   * Places the hold for one request, after taking its per-minute count when it names one, or
   * throws why it cannot (`HoldRefused`, `CountRefused`). Holds asked for while others are in
   * flight share a round trip (see Batches); each is decided as when alone.
   */
  async reserve(input: ReserveInput): Promise<Reservation> {
    // The account's own provider key: nothing is held, and nothing counted.
    if (input.payment === "byok") {
      return reservationOf(input, { payment: "byok", reservedMicro: 0, paymentRef: null });
    }
    const leased = this.leases?.take(input);
    if (leased) return leased;
    let attempt = input;
    const pauses = recallPauses();
    for (;;) {
      const answer = await this.hold(attempt);
      if (answer.refusal === null && answer.payment !== null) {
        return reservationOf(input, {
          payment: answer.payment,
          reservedMicro: answer.reserved_micro,
          paymentRef: answer.payment_ref,
        });
      }
      // A lease of the account may hold what this request lacks: its owner was asked to give it
      // back, so the refusal stands only once that has had time to happen.
      const pause = answer.recalled ? pauses.next() : undefined;
      if (!pause || pause.done) throw refused(answer.refusal, input);
      this.leases?.stop(input.accountId);
      await new Promise((resolve) => setTimeout(resolve, pause.value));
      // Refused for money, the request kept its count: it is not counted again.
      if (answer.refusal !== "rate_limited") attempt = { ...attempt, count: undefined };
    }
  }

  private async hold(input: ReserveInput): Promise<HoldAnswer> {
    const want = this.leases?.want(input) ?? {};
    const asked = want.want_micro !== undefined;
    try {
      const answer = await new Promise<HoldAnswer>((resolve, reject) =>
        this.holds.add({ input, want, resolve, reject }),
      );
      if (asked) this.leases?.granted(input, answer.lease_micro, answer.lease_count);
      return answer;
    } catch (err) {
      if (asked) this.leases?.notGranted(input);
      throw err;
    }
  }

  private async holdAll(batch: QueuedHold[]): Promise<Map<number, HoldAnswer>> {
    const result = await this.pool.query<HoldAnswer>({
      name: "gateway_hold_all",
      text: holdAllStatement,
      values: [
        JSON.stringify(
          batch.map(({ input, want }, position) => this.holdRow(input, want, position)),
        ),
      ],
    });
    return new Map(result.rows.map((row) => [row.position, row]));
  }

  /** One hold as `gateway_hold_all` reads it; `position` names its answer. */
  private holdRow(input: ReserveInput, want: LeaseWant, position: number) {
    return {
      position,
      id: input.id,
      account_id: input.accountId,
      // A job's hold outlives this gateway: whoever takes the job over settles it.
      instance_id: input.outlivesRequest ? null : this.instanceId,
      amount: input.worstCaseMicro,
      free: input.payment === "free",
      subscription_model: input.subscriptionModel,
      free_day: utcDay(input.now),
      free_limit: input.freeDailyLimit ?? 0,
      now: input.now,
      ttl_ms: this.holdTtlMs,
      ...countColumns(input.count, input.now),
      ...want,
    };
  }

  /**
   * Holds `budget.units` of a free model's budget in the request's hold row, when the model's
   * window leaves some (`gateway_hold_budget`, which decides one hold of a budget at a time on
   * every gateway). A reservation without a row of its own (the account's own key) holds nothing
   * of the gateway's budget.
   */
  async holdBudget(r: Reservation, budget: BudgetHold): Promise<boolean> {
    const result = await this.pool.query<{ held: boolean }>({
      name: "gateway_hold_budget",
      text: "SELECT gateway_hold_budget($1, $2, $3, $4, $5) AS held",
      values: [
        r.id,
        budget.model,
        freeTokenWindowStart(budget.windowSeconds, budget.now),
        budget.tokens,
        budget.units,
      ],
    });
    return result.rows[0].held;
  }

  // ---- settlement -----------------------------------------------------------

  /**
   * Ends a reservation in one transaction: charges the real cost (never more than was held),
   * releases the rest and writes the request_log row. Only a request that delivered output counts
   * against allowances. Returns the charge; a request already settled charges nothing. One whose
   * hold or lease the reaper released (this gateway was taken as dead) is charged while its
   * account can pay, and otherwise throws `LateAnswerUnpaid`: recorded, charged nothing.
   * Settlements made while others are in flight share a round trip and a transaction (see
   * Batches).
   */
  async settle(r: Reservation, input: SettleInput): Promise<number> {
    if (r.settled) return 0;
    r.settled = true;
    const leases = this.leases;
    const lease = leases?.isLeased(r) ? leases.settling(r) : undefined;
    let charge: number | null;
    try {
      charge = await new Promise<number | null>((resolve, reject) =>
        this.settlements.add({ reservation: r, input, lease, resolve, reject }),
      );
    } catch (err) {
      if (lease) leases?.settled(r, err as Error);
      throw err;
    }
    if (charge === unpaidLate) {
      if (lease) leases?.settled(r, null);
      // Refused all the same where the row cannot be read back: its client is told it charged none.
      const charged = await this.loggedTokens(r).catch(() => ({ inputTokens: 0, outputTokens: 0 }));
      throw new LateAnswerUnpaid(charged);
    }
    if (lease) leases?.settled(r, charge);
    return charge ?? 0;
  }

  /** The tokens the request log's row of `r` is charged for (none while it has no row). */
  private async loggedTokens(
    r: Reservation,
  ): Promise<{ inputTokens: number; outputTokens: number }> {
    const result = await this.pool.query<{ input_tokens: number; output_tokens: number }>({
      name: "gateway_logged_tokens",
      text: `SELECT input_tokens, output_tokens FROM request_log
        WHERE account_id = $1 AND created_at = $2 AND id = $3`,
      values: [r.accountId, r.createdAt, r.id],
    });
    const row = result.rows[0];
    return { inputTokens: row?.input_tokens ?? 0, outputTokens: row?.output_tokens ?? 0 };
  }

  /**
   * A stream's delivery mark (see `Ledger.markDelivery`): the settlement `input` describes, kept
   * in the database until the stream settles, for a reaper to apply should this gateway die first.
   * One admitted from this gateway's lease is charged from the lease, as its settlement would be.
   */
  async markDelivery(r: Reservation, input: SettleInput): Promise<void> {
    const lease = this.leases?.marking(r);
    // Its free tokens count in their model's budget only if the mark is applied
    // (gateway_settle_interrupted).
    const settlement = settlementRow({ reservation: r, input, lease }, 0);
    await new Promise<true>((resolve, reject) => {
      this.marks.add({ id: r.id, accountId: r.accountId, settlement, resolve, reject });
    });
  }

  /**
   * The marks of several streams in one statement. A stream waits for its mark before it marks
   * again, but a batch keeps only each stream's last all the same: Postgres refuses a statement
   * that updates one row twice.
   */
  private async markAll(batch: QueuedMark[]): Promise<Map<number, true>> {
    const last = new Map<string, QueuedMark>();
    for (const queued of batch) last.set(queued.id, queued);
    await this.pool.query({
      name: "gateway_mark_all",
      text: markAllStatement,
      values: [
        this.instanceId,
        JSON.stringify(
          [...last.values()].map((m) => ({
            id: m.id,
            account_id: m.accountId,
            settlement: m.settlement,
          })),
        ),
      ],
    });
    return new Map(batch.map((_, position) => [position, true as const]));
  }

  /**
   * Deletes the delivery marks of streams whose settlement never reached the database: their
   * clients were told nothing was charged, so no reaper may charge them.
   */
  async withdrawMarks(ids: readonly string[]): Promise<void> {
    await this.pool.query({
      name: "gateway_withdraw_marks",
      text: "DELETE FROM deliveries WHERE id = ANY($1::text[])",
      values: [ids],
    });
  }

  private settleAll(batch: QueuedSettlement[]): Promise<Map<number, number | null>> {
    return settleRows(this.pool, batch.map(settlementRow));
  }

  /**
   * Gives a hold back with nothing charged and nothing recorded: a request refused after its
   * admission. False when the hold was already gone.
   */
  async release(r: Reservation): Promise<boolean> {
    if (r.settled) return false;
    r.settled = true;
    if (r.payment === "byok" || r.payment === "none") return false;
    if (this.leases?.isLeased(r)) {
      this.leases.released(r);
      return true;
    }
    return this.releaseHold(r.id);
  }

  private async reapLease(instanceId: string, accountId: string): Promise<boolean> {
    const result = await this.pool.query<{ reaped: boolean }>({
      name: "gateway_lease_reap",
      text: "SELECT gateway_lease_reap($1, $2) AS reaped",
      values: [instanceId, accountId],
    });
    return result.rows[0].reaped;
  }

  /** Stops using the account's lease (its limits or money changed) and gives back what is unused. */
  stopLease(accountId: string): void {
    this.leases?.stop(accountId);
  }

  stopLeases(): void {
    this.leases?.stopAll();
  }

  /** Whether the lease tick runs: only while this gateway has a lease. */
  get leaseTickRunning(): boolean {
    return this.leases?.armed ?? false;
  }

  private async releaseHold(id: string): Promise<boolean> {
    const result = await this.pool.query<{ released: boolean }>({
      name: "gateway_release",
      text: "SELECT gateway_release($1) AS released",
      values: [id],
    });
    return result.rows[0].released;
  }

  /** Delivered free-model requests of the account on a UTC day, on every gateway. */
  async freeUsed(accountId: string, day: string): Promise<number> {
    const result = await this.pool.query<{ used: number }>({
      name: "gateway_free_used",
      text: "SELECT used FROM free_usage WHERE account_id = $1 AND day = $2",
      values: [accountId, day],
    });
    return result.rows[0]?.used ?? 0;
  }

  /** Requests counted in the subscription window that started at `start`, on every gateway. */
  async subscriptionUsed(accountId: string, window: string, start: number): Promise<number> {
    const result = await this.pool.query<{ used: number }>({
      name: "gateway_window_used",
      text: `SELECT used FROM subscription_usage
        WHERE account_id = $1 AND window_name = $2 AND window_start = $3`,
      values: [accountId, window, start],
    });
    return result.rows[0]?.used ?? 0;
  }

  /** Requests admitted in the subscription window that started at `start` and not yet settled. */
  async subscriptionHeld(accountId: string, window: string, start: number): Promise<number> {
    const result = await this.pool.query<{ held: number }>({
      name: "gateway_window_held",
      text: `SELECT held FROM subscription_usage
        WHERE account_id = $1 AND window_name = $2 AND window_start = $3`,
      values: [accountId, window, start],
    });
    return Number(result.rows[0]?.held ?? 0);
  }

  /** Adds money and, when `tier` is given, moves the account to it. False: no such account. */
  async topUp(
    accountId: string,
    amountMicro: number,
    tier: string | null,
    db: Queryable = this.pool,
  ): Promise<boolean> {
    const result = await db.query({
      name: "gateway_top_up",
      text: `UPDATE accounts SET balance_micro = balance_micro + $2, tier = coalesce($3, tier)
        WHERE id = $1`,
      values: [accountId, amountMicro, tier],
    });
    return result.rowCount === 1;
  }

  /** Sets money columns, and the profile columns given with them, in one statement. */
  async updateAccount(
    accountId: string,
    patch: AccountPatch,
    db: Queryable = this.pool,
  ): Promise<boolean> {
    const columns = {
      ...pickColumns(patch, profileColumns),
      ...pickColumns(patch, moneyColumns),
    };
    const names = Object.keys(columns);
    if (names.length === 0) return this.accountExists(accountId, db);
    const result = await db.query(
      `UPDATE accounts SET ${names.map((name, i) => `${name} = $${i + 2}`).join(", ")} WHERE id = $1`,
      [accountId, ...Object.values(columns)],
    );
    return result.rowCount === 1;
  }

  private async accountExists(accountId: string, db: Queryable): Promise<boolean> {
    const result = await db.query("SELECT 1 FROM accounts WHERE id = $1", [accountId]);
    return result.rowCount === 1;
  }

  /**
   * Money held by the account's admitted, unsettled requests on every gateway, and the whole of
   * another gateway's lease: which part of it that gateway's requests hold is known only there, and
   * a quota that counted the lease as spendable would promise that part, which admission grants to
   * no one. This gateway's own lease is held only as far as its requests hold it.
   */
  async heldMicro(accountId: string): Promise<number> {
    const result = await this.pool.query<{ held: number }>({
      name: "gateway_held_micro",
      text: "SELECT held_micro + payg_held_micro AS held FROM accounts WHERE id = $1",
      values: [accountId],
    });
    const held = (result.rows[0]?.held ?? 0) - (this.leases?.unusedMicro(accountId) ?? 0);
    return Math.max(0, held);
  }
}

/** One settlement as `gateway_settle_all` reads it; `position` names its answer. */
function settlementRow(
  { reservation: r, input, lease }: Pick<QueuedSettlement, "reservation" | "input" | "lease">,
  position: number,
) {
  return {
    position,
    id: r.id,
    account_id: r.accountId,
    payment: r.payment,
    payment_ref: r.paymentRef,
    created_at: r.createdAt,
    delivered: input.delivered,
    cost: input.costMicro,
    key_id: r.keyId,
    endpoint: r.endpoint,
    model: r.model,
    input_tokens: input.inputTokens,
    output_tokens: input.outputTokens,
    status: input.status,
    error_code: input.errorCode ?? null,
    provider_id: input.providerId,
    stream: r.stream ? 1 : 0,
    now: input.now,
    tools_omitted: input.toolsOmitted ? JSON.stringify(input.toolsOmitted) : null,
    logged_payment: loggedPayment(input),
    served_model: input.servedModel ?? null,
    // What a late answer is charged at most, its hold (or lease) gone (gateway_settle_late).
    reserved: r.reservedMicro,
    ...lease,
    ...freeTokenColumns(input),
  };
}

/**
 * A delivered free answer's tokens, which `gateway_settle_all` counts in their model's budget in
 * the settlement's transaction: once, whether the settlement or the stream's delivery mark lands.
 */
function freeTokenColumns(
  input: SettleInput,
): { free_model: string; free_window_start: number; free_tokens: number } | undefined {
  const free = input.delivered && !input.byokServed ? input.freeTokens : undefined;
  return (
    free && {
      free_model: free.model,
      free_window_start: freeTokenWindowStart(free.windowSeconds, input.now),
      free_tokens: free.tokens,
    }
  );
}

/** The payment the request log names when it is not the hold's: the account's own key paid. */
function loggedPayment(input: SettleInput): "byok" | null {
  return input.byokServed ? "byok" : null;
}

/** Settlements in one statement (`gateway_settle_all`): each one's charge by its position. */
async function settleRows(
  db: Queryable,
  rows: ReturnType<typeof settlementRow>[],
): Promise<Map<number, number | null>> {
  const result = await db.query<{ position: number; charge: number | null }>({
    name: "gateway_settle_all",
    text: settleAllStatement,
    values: [JSON.stringify(rows)],
  });
  return new Map(result.rows.map((row) => [row.position, row.charge]));
}

/**
 * A reservation's settlement on `db`: the pool, or the connection of a transaction it belongs to
 * (a job's end, which charges in the transaction that marks the job done). See `PostgresMoney.settle`.
 * One statement whatever the settlement finds (its hold, its lease, or neither: its gateway was
 * taken as dead meanwhile). Returns the charge; null when it was settled already; `unpaidLate`
 * for a late answer the account can no longer pay.
 */
export async function settleReservation(
  db: Queryable,
  r: Reservation,
  input: SettleInput,
): Promise<number | null> {
  return (await settleRows(db, [settlementRow({ reservation: r, input }, 0)])).get(0) ?? null;
}
