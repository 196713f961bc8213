import { isDatabaseUnavailable } from "../../store/postgres/faults.js";
import type { PostgresJobMoney } from "../../store/postgres/jobs.js";
import {
  CountRefused,
  HoldRefused,
  LateAnswerUnpaid,
  type PostgresMoney,
} from "../../store/postgres/money.js";
import type { PostgresStore } from "../../store/postgres/store.js";
import type { StorageFault } from "../../store/storage-fault.js";
import type {
  AccountPatch,
  AccountRow,
  BudgetHold,
  Reservation,
  ReserveInput,
  SettleInput,
} from "../../store/types.js";
import { GatewayError, LateAnswerRefusal, storageUnavailable } from "../errors.js";
import { paidRpmRefused } from "../limits/request-limits.js";
import type { Usage } from "../wire/usage.js";
import { checkedSettlement, checkHold } from "./bookable.js";
import type { Ledger, SettleOptions } from "./ledger.js";
import { refusalError, topUpTier } from "./payment.js";

/**
 * The Ledger on a Postgres database shared by several gateways. A hold is placed by the database
 * (one conditional update, `PostgresMoney.reserve`), so an account's balance, PAYG limit,
 * subscription windows and free allowance admit exactly what they cover across every gateway.
 * A settlement is one transaction; the answer waits for it (`committed`), as on SQLite.
 */
/** While the database is out of reach, how often readiness asks it again. */
const probeEveryMs = 1000;

export class PostgresLedger implements Ledger {
  /** A count in the database costs a round trip of its own unless it goes with the hold. */
  readonly countsInHold = true;
  /** Settlements sent and not yet committed: `committed()` waits for these. */
  private readonly pending = new Set<Promise<void>>();
  /** This gateway's open holds, for /metrics: the database has every gateway's. */
  private open = 0;
  private heldHere = 0;
  private fault: StorageFault | null = null;
  /** While the database is out of reach: when it was last asked whether it is back. */
  private lastProbe = 0;
  private probing = false;
  /** Streams with a delivery mark sent to the database and no settlement yet, by request id. */
  private readonly marked = new Set<string>();
  /**
   * Streams whose settlement did not reach the database: their clients were told nothing was
   * charged, so their marks are deleted once it is back, before any reaper applies them.
   */
  private readonly withdrawals = new Set<string>();
  private withdrawing: Promise<void> | undefined;
  /**
   * Delivered answers whose settlement the database refused (LateAnswerUnpaid): their own
   * `committed` rejects, not every request's that waits with them.
   */
  private readonly unpaid = new WeakMap<Reservation, Usage>();

  constructor(
    private readonly money: PostgresMoney,
    private readonly store: PostgresStore,
    /** The database as messages name it (without its password). */
    private readonly where: string,
  ) {}

  async reserve(input: ReserveInput): Promise<Reservation> {
    checkHold(input.id, input.worstCaseMicro);
    try {
      const reservation = await this.money.reserve(input);
      this.reachable();
      this.open++;
      this.heldHere += reservation.reservedMicro;
      return reservation;
    } catch (err) {
      if (err instanceof HoldRefused) throw refusalError(err.refusal, err.retryAfter);
      if (err instanceof CountRefused) throw paidRpmRefused(err.limit);
      if (err instanceof Error && err.message === "account missing")
        throw new GatewayError(500, "internal_error", "account missing");
      if (this.noteStorageFailure(err)) throw storageUnavailable("unreachable");
      throw err;
    }
  }

  /** A job's hold is a row of the database already: nothing to take back in memory. */
  restoreHold(): void {}

  async holdBudget(reservation: Reservation, budget: BudgetHold): Promise<boolean> {
    try {
      const held = await this.money.holdBudget(reservation, budget);
      this.reachable();
      return held;
    } catch (err) {
      if (this.noteStorageFailure(err)) throw storageUnavailable("unreachable");
      throw err;
    }
  }

  settle(reservation: Reservation, given: SettleInput, options: SettleOptions = {}): number {
    if (reservation.settled) return 0;
    const input = checkedSettlement(reservation, given);
    const charge = input.delivered ? Math.min(input.costMicro, reservation.reservedMicro) : 0;
    this.forget(reservation);
    if (options.writeNow) {
      // A job's end: the charge is written in the transaction that marks the job finished.
      reservation.settled = true;
      (options.jobMoney as PostgresJobMoney).settle(reservation, input);
      return charge;
    }
    const marked = this.marked.delete(reservation.id);
    const write = this.money.settle(reservation, input).then(
      () => this.reachable(),
      (err: unknown) => {
        if (err instanceof LateAnswerUnpaid) {
          this.reachable();
          this.unpaid.set(reservation, {
            input_tokens: err.charged.inputTokens,
            output_tokens: err.charged.outputTokens,
          });
          return;
        }
        if (marked) this.withdrawals.add(reservation.id);
        this.noteStorageFailure(err);
        throw err;
      },
    );
    const tracked = write.finally(() => this.pending.delete(tracked));
    this.pending.add(tracked);
    // Awaited by `committed()`; a failure is reported there, not as an unhandled rejection.
    tracked.catch(() => {});
    return charge;
  }

  async release(reservation: Reservation): Promise<void> {
    if (reservation.settled) return;
    this.forget(reservation);
    try {
      await this.money.release(reservation);
      this.reachable();
    } catch (err) {
      // Its hold stays until it expires, or the reaper releases it once this gateway is gone.
      if (this.noteStorageFailure(err)) throw storageUnavailable("unreachable");
      throw err;
    }
  }

  async markDelivery(reservation: Reservation, given: SettleInput): Promise<void> {
    if (reservation.settled) return;
    const input = checkedSettlement(reservation, given);
    // Before it is sent: a mark whose answer was lost may have been written all the same.
    this.marked.add(reservation.id);
    try {
      await this.money.markDelivery(reservation, input);
    } catch (err) {
      // Out of reach: the output it would pay for does not go out.
      if (this.noteStorageFailure(err)) throw storageUnavailable("unreachable");
      throw err;
    }
  }

  private forget(reservation: Reservation): void {
    if (reservation.payment === "byok" || reservation.payment === "none") return;
    if (!this.open) return;
    this.open--;
    this.heldHere -= reservation.reservedMicro;
  }

  async committed(reservation?: Reservation): Promise<void> {
    try {
      await Promise.all(this.pending);
    } catch {
      throw storageUnavailable("unreachable");
    }
    const charged = reservation && this.unpaid.get(reservation);
    if (charged) throw new LateAnswerRefusal(reservation.stream, charged);
  }

  holdsInFlight(): { count: number; micro: number } {
    return { count: this.open, micro: this.heldHere };
  }

  heldMicro(accountId: string): Promise<number> {
    return this.money.heldMicro(accountId);
  }

  freeUsed(accountId: string, day: string): Promise<number> {
    return this.money.freeUsed(accountId, day);
  }

  subscriptionUsed(accountId: string, window: string, start: number): Promise<number> {
    return this.money.subscriptionUsed(accountId, window, start);
  }

  subscriptionHeld(accountId: string, window: string, start: number): Promise<number> {
    return this.money.subscriptionHeld(accountId, window, start);
  }

  async topUp(accountId: string, amountMicro: number): Promise<AccountRow | undefined> {
    await this.committed();
    const account = this.store.getAccount(accountId);
    if (!account) return undefined;
    const tier = topUpTier(this.store.getCatalog().tiers, account.tier, amountMicro);
    const added = await this.store.announceAccount(
      accountId,
      (db) => this.money.topUp(accountId, amountMicro, tier, db),
      (changed) => changed,
    );
    return added ? this.store.readAccount(accountId) : undefined;
  }

  async updateAccount(accountId: string, patch: AccountPatch): Promise<boolean> {
    await this.committed();
    return this.store.announceAccount(
      accountId,
      (db) => this.money.updateAccount(accountId, patch, db),
      (changed) => changed,
    );
  }

  noteStorageFailure(err: unknown): boolean {
    if (!isDatabaseUnavailable(err)) return false;
    const message = err instanceof Error ? err.message : String(err);
    if (!this.fault) {
      console.error(`gateway: ${this.where} did not take a write: ${message}`);
      this.fault = { path: this.where, message, since: Date.now(), kind: "unreachable" };
    }
    return true;
  }

  /**
   * Why requests cannot be recorded, or null. While the database is out of reach, each call asks
   * it again (at most once a second, in the background): a gateway that reads not ready gets no
   * traffic from a balancer, so no request would ever show that the database is back.
   */
  storageFault(): StorageFault | null {
    const now = Date.now();
    if (this.fault && !this.probing && now - this.lastProbe >= probeEveryMs) {
      this.lastProbe = now;
      this.probing = true;
      this.money
        .ping()
        .then(
          () => this.reachable(),
          () => {},
        )
        .finally(() => {
          this.probing = false;
        });
    }
    return this.fault;
  }

  /** A round trip landed: the database is reachable again. */
  private reachable(): void {
    if (this.withdrawals.size > 0) void this.withdrawMarks();
    if (!this.fault) return;
    console.error(`gateway: ${this.where} is reachable again`);
    this.fault = null;
  }

  flush(): void {}

  /** Deletes the marks in `withdrawals` (those that fail stay, for the next round trip that lands). */
  private withdrawMarks(): Promise<void> {
    this.withdrawing ??= (async () => {
      const ids = [...this.withdrawals];
      try {
        await this.money.withdrawMarks(ids);
        for (const id of ids) this.withdrawals.delete(id);
      } catch (err) {
        this.noteStorageFailure(err);
      } finally {
        this.withdrawing = undefined;
      }
    })();
    return this.withdrawing;
  }

  async close(): Promise<void> {
    await Promise.allSettled(this.pending);
    // Before this gateway's lease ends and its own reaping would apply them.
    if (this.withdrawals.size > 0) await this.withdrawMarks();
  }
}
