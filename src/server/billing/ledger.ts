import type { Statement } from "better-sqlite3";
import type { Store } from "../../store/store.js";
import { type AccountRow, parseSubscription } from "../../store/types.js";
import type { Subscription } from "../config/schema.js";
import { GatewayError } from "../errors.js";

export type Payment = "balance" | "payg" | "subscription" | "free" | "byok" | "none";

/** A request's hold on the account, recorded in request_log so a crash can undo it. */
export interface Reservation {
  id: string;
  accountId: string;
  payment: Payment;
  reservedMicro: number;
  paymentRef: string | null;
}

export interface ReserveInput {
  id: string;
  accountId: string;
  keyId: string | null;
  endpoint: string;
  model: string;
  stream: boolean;
  worstCaseMicro: number;
  /** The model's name is covered by the account's subscription windows. */
  subscriptionModel: boolean;
  /** Free models and BYOK requests hold no money; they only count allowances. */
  payment?: "free" | "byok";
  freeDailyLimit?: number;
  now: number;
}

export interface SettleInput {
  status: number;
  costMicro: number;
  inputTokens: number;
  outputTokens: number;
  providerId: string | null;
  errorCode?: string | null;
  /** The request produced output the client received (a broken stream still counts). */
  delivered: boolean;
  now: number;
}

const plainLimitMessage =
  "Kuota paket langganan Anda untuk periode ini sudah habis. Tunggu hingga periode berikutnya dimulai atau aktifkan PAYG.";

export function utcDay(now: number): string {
  return new Date(now).toISOString().slice(0, 10);
}

export function nextUtcMidnight(now: number): number {
  const next = new Date(now);
  next.setUTCHours(24, 0, 0, 0);
  return next.getTime();
}

export function secondsToUtcMidnight(now: number): number {
  return Math.max(1, Math.ceil((nextUtcMidnight(now) - now) / 1000));
}

export function subscriptionWindowStart(
  startedAt: number,
  windowSeconds: number,
  now: number,
): number {
  const length = windowSeconds * 1000;
  return startedAt + Math.floor((now - startedAt) / length) * length;
}

/**
 * Money and allowance bookkeeping. Every method runs one IMMEDIATE transaction, so a hold and its
 * request_log row commit together: a crash leaves either both or neither.
 */
export class Ledger {
  private readonly s: Record<string, Statement>;

  constructor(private readonly store: Store) {
    const db = store.db;
    this.s = {
      account: db.prepare("SELECT * FROM accounts WHERE id = ?"),
      holdBalance: db.prepare(
        "UPDATE accounts SET balance_micro = balance_micro - ? WHERE id = ? AND balance_micro >= ?",
      ),
      refundBalance: db.prepare(
        "UPDATE accounts SET balance_micro = balance_micro + ? WHERE id = ?",
      ),
      resetPayg: db.prepare(
        "UPDATE accounts SET payg_spent_micro = 0, payg_window_start = ? WHERE id = ?",
      ),
      holdPayg: db.prepare(
        "UPDATE accounts SET payg_spent_micro = payg_spent_micro + ? WHERE id = ? AND payg_window_start = ?",
      ),
      refundPayg: db.prepare(
        "UPDATE accounts SET payg_spent_micro = max(0, payg_spent_micro - ?) WHERE id = ? AND payg_window_start = ?",
      ),
      subUsage: db.prepare(
        "SELECT window_start, used FROM subscription_usage WHERE account_id = ? AND window_name = ?",
      ),
      subUpsert: db.prepare(
        `INSERT INTO subscription_usage (account_id, window_name, window_start, used) VALUES (?, ?, ?, 1)
         ON CONFLICT(account_id, window_name) DO UPDATE SET
           used = CASE WHEN window_start = excluded.window_start THEN used + 1 ELSE 1 END,
           window_start = excluded.window_start`,
      ),
      subRelease: db.prepare(
        "UPDATE subscription_usage SET used = max(0, used - 1) WHERE account_id = ? AND window_name = ? AND window_start = ?",
      ),
      freeUsed: db.prepare("SELECT used FROM free_usage WHERE account_id = ? AND day = ?"),
      freeTake: db.prepare(
        `INSERT INTO free_usage (account_id, day, used) VALUES (?, ?, 1)
         ON CONFLICT(account_id, day) DO UPDATE SET used = used + 1`,
      ),
      freeRelease: db.prepare(
        "UPDATE free_usage SET used = max(0, used - 1) WHERE account_id = ? AND day = ?",
      ),
      insertLog: db.prepare(
        `INSERT INTO request_log (id, account_id, key_id, endpoint, model, state, payment, payment_ref,
           reserved_micro, stream, created_at)
         VALUES (@id, @accountId, @keyId, @endpoint, @model, 'reserved', @payment, @paymentRef,
           @reservedMicro, @stream, @now)`,
      ),
      finishLog: db.prepare(
        `UPDATE request_log SET state = @state, cost_micro = @cost, input_tokens = @inputTokens,
           output_tokens = @outputTokens, status = @status, error_code = @errorCode,
           provider_id = @providerId, finished_at = @now
         WHERE id = @id AND state = 'reserved'`,
      ),
      // A queued or running job keeps its hold across a restart: the job runs again and settles it.
      openReservations: db.prepare(
        `SELECT * FROM request_log WHERE state = 'reserved' AND id NOT IN
           (SELECT request_id FROM jobs WHERE status IN ('queued', 'running') AND request_id IS NOT NULL)`,
      ),
      markInterrupted: db.prepare(
        "UPDATE request_log SET state = 'interrupted', finished_at = ? WHERE id = ?",
      ),
    };
  }

  /** Places the hold for one request or throws the spec's error for why it cannot. */
  reserve(input: ReserveInput): Reservation {
    return this.store.transaction(() => {
      const account = this.s.account.get(input.accountId) as AccountRow | undefined;
      if (!account) throw new GatewayError(401, "bad_request", "account not found");
      const decided = this.decidePayment(account, input);
      this.s.insertLog.run({
        id: input.id,
        accountId: input.accountId,
        keyId: input.keyId,
        endpoint: input.endpoint,
        model: input.model,
        payment: decided.payment,
        paymentRef: decided.paymentRef,
        reservedMicro: decided.reservedMicro,
        stream: input.stream ? 1 : 0,
        now: input.now,
      });
      return { id: input.id, accountId: input.accountId, ...decided };
    });
  }

  private decidePayment(
    account: AccountRow,
    input: ReserveInput,
  ): Omit<Reservation, "id" | "accountId"> {
    if (input.payment === "byok") return { payment: "byok", reservedMicro: 0, paymentRef: null };
    if (input.payment === "free") return this.takeFree(account, input);

    const subscription = parseSubscription(account);
    if (subscription && input.subscriptionModel) {
      const taken = this.takeSubscription(account, subscription, input.now);
      if (taken) return taken;
      if (!subscription.payg_fallback) {
        if (subscription.free_fallback) return this.takeFree(account, input);
        throw new GatewayError(429, "plan_limit_reached", plainLimitMessage);
      }
    }
    return this.holdMoney(account, input.worstCaseMicro, input.now);
  }

  private holdMoney(account: AccountRow, amount: number, now: number) {
    if (amount === 0) return { payment: "balance" as const, reservedMicro: 0, paymentRef: null };
    if (this.s.holdBalance.run(amount, account.id, amount).changes > 0) {
      return { payment: "balance" as const, reservedMicro: amount, paymentRef: null };
    }
    if (account.payg_enabled) {
      let windowStart = account.payg_window_start;
      let spent = account.payg_spent_micro;
      if (now >= windowStart + account.payg_window_seconds * 1000) {
        windowStart = subscriptionWindowStart(windowStart, account.payg_window_seconds, now);
        spent = 0;
        this.s.resetPayg.run(windowStart, account.id);
      }
      if (spent + amount > account.payg_limit_micro) {
        throw new GatewayError(
          402,
          "payg_limit_reached",
          "PAYG spending limit reached; raise it in settings or wait for the reset window.",
        );
      }
      this.s.holdPayg.run(amount, account.id, windowStart);
      return { payment: "payg" as const, reservedMicro: amount, paymentRef: String(windowStart) };
    }
    throw new GatewayError(
      402,
      "insufficient_balance",
      "Your IDR balance is too low for this request. Top up first, then retry.",
    );
  }

  private takeSubscription(account: AccountRow, sub: Subscription, now: number) {
    const startedAt = account.subscription_started_at ?? account.created_at;
    const starts: Record<string, number> = {};
    for (const w of sub.windows) {
      const start = subscriptionWindowStart(startedAt, w.seconds, now);
      const row = this.s.subUsage.get(account.id, w.name) as
        | { window_start: number; used: number }
        | undefined;
      const used = row && row.window_start === start ? row.used : 0;
      if (used >= w.quota) return null;
      starts[w.name] = start;
    }
    for (const w of sub.windows) this.s.subUpsert.run(account.id, w.name, starts[w.name]);
    return {
      payment: "subscription" as const,
      reservedMicro: 0,
      paymentRef: JSON.stringify(starts),
    };
  }

  private takeFree(account: AccountRow, input: ReserveInput) {
    const day = utcDay(input.now);
    const limit = input.freeDailyLimit ?? 0;
    const row = this.s.freeUsed.get(account.id, day) as { used: number } | undefined;
    if ((row?.used ?? 0) >= limit) {
      throw new GatewayError(
        429,
        "free_quota_daily",
        "Free-model daily allowance used up; it resets at 00:00 UTC. A top-up or subscription raises it.",
        { retryAfter: secondsToUtcMidnight(input.now) },
      );
    }
    this.s.freeTake.run(account.id, day);
    return { payment: "free" as const, reservedMicro: 0, paymentRef: day };
  }

  /**
   * Ends a reservation: charges the real cost (never more than was held) and gives back the rest.
   * A failed request with nothing delivered is free and returns its allowance slot.
   */
  settle(r: Reservation, input: SettleInput): number {
    return this.store.transaction(() => {
      const charge = input.delivered ? Math.min(input.costMicro, r.reservedMicro) : 0;
      const changed = this.s.finishLog.run({
        id: r.id,
        state: input.delivered ? "settled" : "failed",
        cost: charge,
        inputTokens: input.inputTokens,
        outputTokens: input.outputTokens,
        status: input.status,
        errorCode: input.errorCode ?? null,
        providerId: input.providerId,
        now: input.now,
      }).changes;
      if (changed === 0) return 0; // already settled: never refund or charge twice
      this.release(r, r.reservedMicro - charge, !input.delivered);
      return charge;
    });
  }

  private release(r: Reservation, refundMicro: number, returnSlot: boolean): void {
    if (r.payment === "balance" && refundMicro > 0)
      this.s.refundBalance.run(refundMicro, r.accountId);
    if (r.payment === "payg" && refundMicro > 0) {
      this.s.refundPayg.run(refundMicro, r.accountId, Number(r.paymentRef));
    }
    if (!returnSlot) return;
    if (r.payment === "free" && r.paymentRef) this.s.freeRelease.run(r.accountId, r.paymentRef);
    if (r.payment === "subscription" && r.paymentRef) {
      for (const [name, start] of Object.entries(
        JSON.parse(r.paymentRef) as Record<string, number>,
      )) {
        this.s.subRelease.run(r.accountId, name, start);
      }
    }
  }

  /**
   * At start-up: requests that were in flight when the process died never completed for their
   * client, so their holds are released in full and they are marked interrupted. Unfinished jobs
   * keep theirs.
   */
  recoverInterrupted(now: number): number {
    return this.store.transaction(() => {
      const open = this.s.openReservations.all() as {
        id: string;
        account_id: string;
        payment: Payment;
        payment_ref: string | null;
        reserved_micro: number;
      }[];
      for (const row of open) {
        this.release(
          {
            id: row.id,
            accountId: row.account_id,
            payment: row.payment,
            paymentRef: row.payment_ref,
            reservedMicro: row.reserved_micro,
          },
          row.reserved_micro,
          true,
        );
      }
      for (const row of open) this.s.markInterrupted.run(now, row.id);
      return open.length;
    });
  }
}
