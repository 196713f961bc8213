import { SettlementJournal } from "../../store/sqlite/settlement-journal.js";
import type { Store } from "../../store/sqlite/store.js";
import type { StorageFault } from "../../store/storage-fault.js";
import {
  type AccountPatch,
  type AccountRow,
  type BudgetHold,
  type LedgerRepository,
  type LedgerWrite,
  type MaybeAsync,
  parseSubscription,
  type ReserveInput,
  reservationOf,
  type SettleInput,
  type SettleWrite,
} from "../../store/types.js";
import { freeTokenWindowStart } from "../../store/usage-rows.js";
import { GatewayError } from "../errors.js";
import { checkedSettlement, checkHold } from "./bookable.js";
import { Holds, type Reservation, windowStarts } from "./holds.js";
import {
  decidePayment,
  type PaymentSnapshot,
  refusalError,
  subscriptionWindowStart,
  topUpTier,
  utcDay,
} from "./payment.js";
import { SettlementQueue } from "./settlement-queue.js";
import { StorageWatch } from "./storage-watch.js";

export type { Payment, ReserveInput, SettleInput } from "../../store/types.js";
export type { Reservation } from "./holds.js";
export {
  nextUtcMidnight,
  secondsToUtcMidnight,
  subscriptionWindowStart,
  utcDay,
} from "./payment.js";

export interface SettleOptions {
  /** Write now, inside the caller's transaction (a job row and its charge commit together). */
  writeNow?: boolean;
  /**
   * What the job repository handed the transaction's charge callback; a backend whose holds are
   * rows settles through it (`PostgresJobMoney`).
   */
  jobMoney?: unknown;
}

/**
 * Money and allowance bookkeeping, and the one writer of both: `ProcessLedger` decides in this
 * process over SQLite, `PostgresLedger` in the database shared by several gateways.
 */
export interface Ledger {
  /**
   * Takes `ReserveInput.count` in the hold's own round trip. A ledger without it is given no
   * count: the caller takes it from the limits first.
   */
  readonly countsInHold: boolean;
  /** Places the hold for one request or throws the spec's error for why it cannot. */
  reserve(input: ReserveInput): MaybeAsync<Reservation>;
  /** A job that outlived a restart takes its hold again (its Reservation was kept in its row). */
  restoreHold(reservation: Reservation): void;
  /**
   * Before a free media model's provider is called: holds `budget.units` of the model's budget
   * for the request until it settles, when what its window counted and what other requests hold
   * leave some of it (the request that reaches the budget is served whole); else holds nothing and
   * answers false. Decided on every gateway alike, so requests at once, on one gateway or several,
   * spend the budget as requests one after another do. A request holds one model's units at a
   * time: a route's next step takes the place of the one before.
   */
  holdBudget(reservation: Reservation, budget: BudgetHold): MaybeAsync<boolean>;
  /**
   * Ends a reservation: charges the real cost (never more than was held) and releases the hold.
   * Only a request that delivered output counts against allowances, and only when the account's
   * own provider key did not serve it (`byokServed`: nothing charged, nothing counted). Its
   * `freeTokens` count in their model's budget in the same write as the charge, so that a crash
   * counts them once: with the settlement, or with the stream's delivery mark. Returns the charge.
   */
  settle(reservation: Reservation, input: SettleInput, options?: SettleOptions): number;
  /**
   * Gives a hold back with nothing charged, counted or recorded: a request refused after its
   * admission as admission refuses (a free budget's last units taken by requests at once).
   */
  release(reservation: Reservation): MaybeAsync<void>;
  /**
   * A stream is about to hand its client output that `input` pays for (with its input): made
   * durable before that output goes out, so that a gateway that dies before the stream settles
   * has it charged this much, never less than the client received (the next start applies it on
   * SQLite, the reaper of a gateway that outlives it on Postgres). A promise: the output waits.
   */
  markDelivery(reservation: Reservation, input: SettleInput): void | Promise<void>;
  /**
   * Resolves when everything settled so far is durable. Given the request's reservation, rejects
   * when its settlement was refused: on Postgres, an answer whose hold was released while its
   * gateway was frozen, which the account can no longer pay (`LateAnswerRefusal`).
   */
  committed(reservation?: Reservation): Promise<void>;
  /** This gateway's holds not yet released and the money they hold (read by /metrics). */
  holdsInFlight(): { count: number; micro: number };
  /** Money held by the account's admitted, unsettled requests and jobs. */
  heldMicro(accountId: string): MaybeAsync<number>;
  /** Successful free-model requests of the account on a UTC day. */
  freeUsed(accountId: string, day: string): MaybeAsync<number>;
  /** Requests counted in a subscription window that started at `start`. */
  subscriptionUsed(accountId: string, window: string, start: number): MaybeAsync<number>;
  /** Requests admitted in a subscription window that started at `start` and not yet settled. */
  subscriptionHeld(accountId: string, window: string, start: number): MaybeAsync<number>;
  /** Adds money and moves the account up to the tier it qualifies for; undefined: no account. */
  topUp(accountId: string, amountMicro: number): Promise<AccountRow | undefined>;
  /** Sets account columns, money among them, after what was settled before. */
  updateAccount(accountId: string, patch: AccountPatch): Promise<boolean>;
  /** Records a write that failed for want of disk space; false for any other error. */
  noteStorageFailure(err: unknown): boolean;
  /** Why requests cannot be recorded right now, or null: for readiness. */
  storageFault(): StorageFault | null;
  /** Commits every queued write now. */
  flush(): void;
  close(): MaybeAsync<void>;
}

/**
 * Money and allowance bookkeeping in this process, and the one writer of both. Admission decides the payment
 * (`payment.ts`) from settled state plus the holds in memory (`holds.ts`), so it needs no write;
 * settlement shows its charge in the cached account at once and queues its writes, which commit
 * once per event-loop turn or go to the journal first (`settlement-queue.ts`).
 */
export class ProcessLedger implements Ledger {
  /** Counts in memory answer at once: nothing to save by taking them here. */
  readonly countsInHold = false;
  private readonly book: LedgerRepository;
  private readonly holds = new Holds();
  private readonly storage: StorageWatch;
  private readonly queue: SettlementQueue;

  /** `journaledWaitMs`: how long answered writes in the journal may wait for their transaction. */
  constructor(
    private readonly store: Store,
    openJournal: (path: string) => SettlementJournal = (path) => new SettlementJournal(path),
    journaledWaitMs?: number,
  ) {
    this.book = store.ledgerRepository;
    this.storage = new StorageWatch(
      store.path,
      () => this.queue.flushOrProbe(),
      () => store.stopWrites(),
    );
    this.queue = new SettlementQueue(
      this.book,
      this.storage,
      store.path,
      openJournal,
      journaledWaitMs,
    );
    store.onQueuedWrites(() => this.queue.land());
  }

  // ---- admission ------------------------------------------------------------

  /** Places the hold for one request or throws the spec's error for why it cannot. */
  reserve(input: ReserveInput): Reservation {
    checkHold(input.id, input.worstCaseMicro);
    // A request that could not be charged is refused before it costs an upstream call.
    if (!this.storage.recovered()) throw this.storage.unavailable();
    const account = this.store.getAccount(input.accountId);
    if (!account) throw new GatewayError(500, "internal_error", "account missing");
    const decision = decidePayment(this.snapshot(account, input));
    if (decision.paygWindowStart !== undefined) {
      this.queueWrite({
        kind: "resetPayg",
        seq: this.queue.nextSeq(),
        accountId: account.id,
        start: decision.paygWindowStart,
      });
    }
    if ("refused" in decision) throw refusalError(decision.refused, decision.retryAfter);
    const reservation = reservationOf(input, decision);
    this.holds.place(reservation);
    return reservation;
  }

  /** A job that outlived a restart takes its hold again (its Reservation was kept in its row). */
  restoreHold(reservation: Reservation): void {
    this.holds.place(reservation);
  }

  /** See `Ledger.holdBudget`: the settled count and this process's holds, which are every hold. */
  holdBudget(reservation: Reservation, budget: BudgetHold): boolean {
    const used =
      this.book.freeTokensUsed(budget.model, budget.windowSeconds, budget.now) +
      this.holds.budgetHeld(budget.model, reservation.id);
    if (used >= budget.tokens) return false;
    if (!reservation.settled) this.holds.holdBudget(reservation.id, budget.model, budget.units);
    return true;
  }

  /** What the payment decision reads: only the counts the request's path can use. */
  private snapshot(account: AccountRow, input: ReserveInput): PaymentSnapshot {
    const held = this.holds.of(account.id);
    const kind = input.payment ?? "paid";
    const subscription =
      kind === "paid" && input.subscriptionModel ? parseSubscription(account) : null;
    const startedAt = account.subscription_started_at ?? account.created_at;
    return {
      now: input.now,
      kind,
      worstCaseMicro: input.worstCaseMicro,
      balance: { settledMicro: account.balance_micro, heldMicro: held.balance },
      payg: {
        enabled: Boolean(account.payg_enabled),
        limitMicro: account.payg_limit_micro,
        spentMicro: account.payg_spent_micro,
        heldMicro: held.payg,
        windowStart: account.payg_window_start,
        windowSeconds: account.payg_window_seconds,
      },
      subscription: subscription && {
        windows: subscription.windows.map((window) => {
          const start = subscriptionWindowStart(startedAt, window.seconds, input.now);
          return {
            name: window.name,
            start,
            quota: window.quota,
            used: this.book.subscriptionUsed(account.id, window.name, start),
            held: held.windows.get(`${window.name}@${start}`) ?? 0,
          };
        }),
        paygFallback: subscription.payg_fallback,
        freeFallback: subscription.free_fallback,
      },
      free: kind === "free" || subscription?.free_fallback ? this.freeAllowance(input) : null,
    };
  }

  private freeAllowance(input: ReserveInput): PaymentSnapshot["free"] {
    const day = utcDay(input.now);
    return {
      day,
      used: this.book.freeUsed(input.accountId, day),
      held: this.holds.of(input.accountId).free.get(day) ?? 0,
      dailyLimit: input.freeDailyLimit ?? 0,
    };
  }

  // ---- settlement -----------------------------------------------------------

  release(reservation: Reservation): void {
    if (reservation.settled) return;
    reservation.settled = true;
    this.holds.release(reservation);
  }

  /**
   * Ends a reservation: charges the real cost (never more than was held) and releases the hold.
   * Only a request that delivered output counts against allowances. Returns the charge.
   */
  settle(reservation: Reservation, input: SettleInput, options: SettleOptions = {}): number {
    if (reservation.settled) return 0;
    reservation.settled = true;
    this.holds.release(reservation);
    this.queue.unmark(reservation.id);
    const write = this.settleWrite(reservation, input, this.queue.nextSeq());
    if (options.writeNow) {
      this.book.remember(write);
      this.book.write(write);
    } else this.queueWrite(write);
    return write.charge;
  }

  /**
   * A stream's charge should this process die before it settles: a line of the journal, which the
   * next start applies as the stream's settlement (state `interrupted`) unless it settled.
   */
  markDelivery(reservation: Reservation, input: SettleInput): void {
    if (reservation.settled) return;
    const write = this.settleWrite(reservation, input, 0);
    write.log[5] = "interrupted";
    try {
      this.queue.mark(write);
    } catch (err) {
      // A disk that refuses the mark refuses the output it would pay for.
      if (this.storage.note(err)) throw this.storage.unavailable();
      throw err;
    }
  }

  /**
   * The write that settles `reservation` as `input` says: charge, allowance counts (a free model's
   * token budget among them), log row.
   */
  private settleWrite(reservation: Reservation, given: SettleInput, seq: number): SettleWrite {
    const input = checkedSettlement(reservation, given);
    // The account's own provider key served it: whatever the admission held (it could not know
    // which key would serve), it pays nothing and counts in no allowance (DECISIONS: BYOK).
    const counts = input.delivered && !input.byokServed;
    const charge = counts ? Math.min(input.costMicro, reservation.reservedMicro) : 0;
    const free = counts ? input.freeTokens : undefined;
    return {
      kind: "settle",
      seq,
      accountId: reservation.accountId,
      payment: reservation.payment,
      charge,
      paygWindow:
        reservation.payment === "payg"
          ? (this.store.getAccount(reservation.accountId)?.payg_window_start ?? null)
          : null,
      freeDay: counts && reservation.payment === "free" ? reservation.paymentRef : null,
      windows: counts && reservation.payment === "subscription" ? windowStarts(reservation) : [],
      log: [
        reservation.id,
        reservation.accountId,
        reservation.keyId,
        reservation.endpoint,
        reservation.model,
        input.delivered ? "settled" : "failed",
        input.byokServed ? "byok" : reservation.payment,
        reservation.paymentRef,
        reservation.reservedMicro,
        charge,
        input.inputTokens,
        input.outputTokens,
        input.status,
        input.errorCode ?? null,
        input.providerId,
        reservation.stream ? 1 : 0,
        reservation.createdAt,
        input.now,
        input.toolsOmitted ? JSON.stringify(input.toolsOmitted) : null,
        input.servedModel ?? null,
      ],
      ...(free && {
        freeTokens: [free.model, freeTokenWindowStart(free.windowSeconds, input.now), free.tokens],
      }),
    };
  }

  /** Shown in the cached state at once, committed with this turn's batch. */
  private queueWrite(write: LedgerWrite): void {
    this.book.remember(write);
    this.queue.enqueue(write);
  }

  /** Every hold not yet released and the money they hold, across accounts (read by /metrics). */
  holdsInFlight(): { count: number; micro: number } {
    return this.holds.inFlight();
  }

  /** Money held by the account's admitted, unsettled requests and jobs. */
  heldMicro(accountId: string): number {
    return this.holds.heldMicro(accountId);
  }

  /** Successful free-model requests of the account on a UTC day. */
  freeUsed(accountId: string, day: string): number {
    return this.book.freeUsed(accountId, day);
  }

  /** Requests counted in a subscription window that started at `start`. */
  subscriptionUsed(accountId: string, window: string, start: number): number {
    return this.book.subscriptionUsed(accountId, window, start);
  }

  /** Requests admitted in a subscription window that started at `start` and not yet settled. */
  subscriptionHeld(accountId: string, window: string, start: number): number {
    return this.holds.of(accountId).windows.get(`${window}@${start}`) ?? 0;
  }

  // ---- money set by hand ----------------------------------------------------

  /**
   * Adds money and moves the account up to the highest tier this top-up qualifies for. Queued
   * settlements land first. Returns the account, or undefined when there is none.
   */
  async topUp(accountId: string, amountMicro: number): Promise<AccountRow | undefined> {
    this.flush();
    const account = this.store.getAccount(accountId);
    if (!account) return undefined;
    const tier = topUpTier(this.store.getCatalog().tiers, account.tier, amountMicro);
    return this.book.topUp(accountId, amountMicro, tier)
      ? this.store.getAccount(accountId)
      : undefined;
  }

  /**
   * Sets account columns, money among them (an admin's balance, PAYG settings): queued
   * settlements land first, then the change, in one transaction.
   */
  async updateAccount(accountId: string, patch: AccountPatch): Promise<boolean> {
    this.flush();
    return this.book.updateAccount(accountId, patch);
  }

  // ---- storage faults -------------------------------------------------------

  /**
   * Records a write the disk refused (no space, read-only, I/O errors; from here or from any other
   * writer) and logs it once, naming the database. Returns false for any other error.
   */
  noteStorageFailure(err: unknown): boolean {
    return this.storage.note(err);
  }

  /** Why requests cannot be recorded right now, or null: for readiness. */
  storageFault(): StorageFault | null {
    return this.storage.current();
  }

  // ---- durability -----------------------------------------------------------

  /** Commits every queued write now, in one transaction. */
  flush(): void {
    this.queue.flush();
  }

  /** Resolves when everything settled so far is durable. */
  committed(): Promise<void> {
    return this.queue.committed(this.holds.count === 0);
  }

  close(): void {
    this.storage.close();
    this.queue.close();
  }
}
