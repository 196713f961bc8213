import { hostname } from "node:os";
import type pg from "pg";
import {
  type Payment,
  type PaymentRefusal,
  type Reservation,
  type ReserveInput,
  reservationOf,
  type SettleInput,
} from "../types.js";
import { secondsToUtcMidnight, utcDay } from "../utc-windows.js";
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

export interface PostgresMoneyOptions {
  /** This gateway's id in `instances`; its holds are released when its lease runs out. */
  instanceId: string;
  leaseMs?: number;
  /** null: holds never expire on their own, only with their instance. */
  holdTtlMs?: number | null;
}

interface HoldAnswer {
  payment: Payment | null;
  reserved_micro: number;
  payment_ref: string | null;
  refusal: string | null;
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

function refused(refusal: string | null, now: number): Error {
  switch (refusal) {
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

const holdStatement = "SELECT * FROM gateway_hold($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)";
const settleStatement =
  "SELECT gateway_settle($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) AS charge";
const logStatement = `INSERT INTO request_log (id, account_id, key_id, endpoint, model, state,
  payment, payment_ref, reserved_micro, cost_micro, input_tokens, output_tokens, status,
  error_code, provider_id, stream, created_at, finished_at, tools_omitted)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0, 0, $9, $10, $11, $12, $13, $14, $15, $16, $17)`;

/**
 * The money core on Postgres, exact across every gateway on the database: a hold is one
 * conditional update in the database (`gateway_hold`, one round trip), a settlement one
 * transaction (`gateway_settle`, one round trip), and the holds of a gateway that died are
 * released by any other one's reaper once its lease has run out. The decisions and refusals are
 * Ledger's (src/server/billing/ledger.ts): subscription windows, then the balance, then PAYG.
 */
export class PostgresMoney {
  private readonly leaseMs: number;
  private readonly holdTtlMs: number | null;
  private timer: NodeJS.Timeout | undefined;
  private ticking = false;

  constructor(
    private readonly pool: pg.Pool,
    private readonly options: PostgresMoneyOptions,
  ) {
    this.leaseMs = options.leaseMs ?? defaultLeaseMs;
    this.holdTtlMs = options.holdTtlMs === undefined ? defaultHoldTtlMs : options.holdTtlMs;
  }

  get instanceId(): string {
    return this.options.instanceId;
  }

  // ---- the instance's lease -------------------------------------------------

  /** Records this gateway with a fresh lease (again, after it lost one). */
  async register(): Promise<void> {
    await this.pool.query(
      `INSERT INTO instances (id, host, pid, started_at, lease_until)
       VALUES ($1, $2, $3, gateway_now_ms(), gateway_now_ms() + $4)
       ON CONFLICT (id) DO UPDATE SET lease_until = excluded.lease_until`,
      [this.instanceId, hostname(), process.pid, this.leaseMs],
    );
  }

  /**
   * Renews the lease. False when it had already been taken as dead: the reaper released this
   * gateway's holds, so requests admitted before now settle as nothing charged.
   */
  async heartbeat(): Promise<boolean> {
    const result = await this.pool.query({
      name: "gateway_heartbeat",
      text: "UPDATE instances SET lease_until = gateway_now_ms() + $2 WHERE id = $1",
      values: [this.instanceId, this.leaseMs],
    });
    return result.rowCount === 1;
  }

  /** Registers, then renews the lease and reaps dead gateways' holds on a timer until close. */
  async start(): Promise<void> {
    await this.register();
    this.timer = setInterval(() => void this.tick(), Math.max(1, Math.floor(this.leaseMs / 3)));
    this.timer.unref();
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
    await this.pool.query("DELETE FROM instances WHERE id = $1", [this.instanceId]);
    await this.reap();
  }

  /**
   * Releases the holds of every gateway whose lease ran out (and any hold past its expiry). Each
   * hold is released in its own short transaction, so reaping never locks several accounts at
   * once, and one released twice (two reapers, or a late settlement) is released once.
   */
  async reap(): Promise<number> {
    await this.pool.query({
      name: "gateway_reap_instances",
      text: "DELETE FROM instances WHERE lease_until < gateway_now_ms()",
    });
    const orphans = await this.pool.query<{ id: string }>({
      name: "gateway_reap_holds",
      text: `SELECT id FROM holds
        WHERE (instance_id IS NOT NULL
            AND NOT EXISTS (SELECT 1 FROM instances WHERE instances.id = holds.instance_id))
          OR expires_at < gateway_now_ms()`,
    });
    let released = 0;
    for (const { id } of orphans.rows) {
      if (await this.releaseHold(id)) released++;
    }
    return released;
  }

  // ---- admission ------------------------------------------------------------

  /** Places the hold for one request or throws the spec's error for why it cannot. */
  async reserve(input: ReserveInput): Promise<Reservation> {
    // The account's own provider key: nothing is held, and nothing counted.
    if (input.payment === "byok") {
      return reservationOf(input, { payment: "byok", reservedMicro: 0, paymentRef: null });
    }
    const result = await this.pool.query<HoldAnswer>({
      name: "gateway_hold",
      text: holdStatement,
      values: [
        input.id,
        input.accountId,
        this.instanceId,
        input.worstCaseMicro,
        input.payment === "free",
        input.subscriptionModel,
        utcDay(input.now),
        input.freeDailyLimit ?? 0,
        input.now,
        this.holdTtlMs,
      ],
    });
    const answer = result.rows[0];
    if (answer.refusal !== null || answer.payment === null) {
      throw refused(answer.refusal, input.now);
    }
    return reservationOf(input, {
      payment: answer.payment,
      reservedMicro: answer.reserved_micro,
      paymentRef: answer.payment_ref,
    });
  }

  // ---- settlement -----------------------------------------------------------

  /**
   * Ends a reservation in one transaction: charges the real cost (never more than was held),
   * releases the rest and writes the request_log row. Only a request that delivered output counts
   * against allowances. Returns the charge; a hold already settled or reaped charges nothing.
   */
  async settle(r: Reservation, input: SettleInput): Promise<number> {
    if (r.settled) return 0;
    r.settled = true;
    return settleReservation(this.pool, r, input);
  }

  /**
   * Gives a hold back with nothing charged and nothing recorded: a request refused after its
   * admission. False when the hold was already gone.
   */
  async release(r: Reservation): Promise<boolean> {
    if (r.settled) return false;
    r.settled = true;
    if (r.payment === "byok" || r.payment === "none") return false;
    return this.releaseHold(r.id);
  }

  private async releaseHold(id: string): Promise<boolean> {
    const result = await this.pool.query<{ released: boolean }>({
      name: "gateway_release",
      text: "SELECT gateway_release($1) AS released",
      values: [id],
    });
    return result.rows[0].released;
  }

  /** Money held by the account's admitted, unsettled requests, on every gateway. */
  async heldMicro(accountId: string): Promise<number> {
    const result = await this.pool.query<{ held: number }>({
      name: "gateway_held_micro",
      text: "SELECT held_micro + payg_held_micro AS held FROM accounts WHERE id = $1",
      values: [accountId],
    });
    return result.rows[0]?.held ?? 0;
  }
}

/**
 * A reservation's settlement on `db`: the pool, or the connection of a transaction it belongs to
 * (a job's end, which charges in the transaction that marks the job done). See `PostgresMoney.settle`.
 */
export async function settleReservation(
  db: Queryable,
  r: Reservation,
  input: SettleInput,
): Promise<number> {
  const toolsOmitted = input.toolsOmitted ? JSON.stringify(input.toolsOmitted) : null;
  if (r.payment === "byok" || r.payment === "none") {
    await db.query({
      name: "gateway_log_unheld",
      text: logStatement,
      values: [
        r.id,
        r.accountId,
        r.keyId,
        r.endpoint,
        r.model,
        input.delivered ? "settled" : "failed",
        r.payment,
        r.paymentRef,
        input.inputTokens,
        input.outputTokens,
        input.status,
        input.errorCode ?? null,
        input.providerId,
        r.stream ? 1 : 0,
        r.createdAt,
        input.now,
        toolsOmitted,
      ],
    });
    return 0;
  }
  const result = await db.query<{ charge: number | null }>({
    name: "gateway_settle",
    text: settleStatement,
    values: [
      r.id,
      input.delivered,
      input.costMicro,
      r.keyId,
      r.endpoint,
      r.model,
      input.inputTokens,
      input.outputTokens,
      input.status,
      input.errorCode ?? null,
      input.providerId,
      r.stream ? 1 : 0,
      input.now,
      toolsOmitted,
    ],
  });
  return result.rows[0].charge ?? 0;
}
