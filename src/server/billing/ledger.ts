import type { Statement } from "better-sqlite3";
import { SettlementJournal } from "../../store/settlement-journal.js";
import { hasFreeSpace, isStorageFull, type StorageFault } from "../../store/storage-fault.js";
import type { Store } from "../../store/store.js";
import { type AccountRow, parseSubscription, type Subscription } from "../../store/types.js";
import { GatewayError, storageUnavailable } from "../errors.js";

export type Payment = "balance" | "payg" | "subscription" | "free" | "byok" | "none";

/**
 * A request's hold on its account, from admission until settlement. Holds live in memory: a
 * request that dies with the process was never answered, so forgetting its hold is releasing it.
 * (A job keeps its Reservation in its row and restores the hold at start-up.)
 */
export interface Reservation {
  id: string;
  accountId: string;
  keyId: string | null;
  endpoint: string;
  model: string;
  stream: boolean;
  createdAt: number;
  payment: Payment;
  reservedMicro: number;
  /** free: the UTC day counted; subscription: JSON of the window starts counted. */
  paymentRef: string | null;
  /**
   * Set by the first settlement. A route that settled a delivered request and then failed to make
   * it durable (a full disk) settles it again as failed: that second one must not release the
   * hold twice.
   */
  settled?: boolean;
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

export interface SettleOptions {
  /** Write now, inside the caller's transaction (a job row and its charge commit together). */
  writeNow?: boolean;
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
  /** Tools the backend could not run, left out of the request it was sent. */
  toolsOmitted?: string[];
  now: number;
}

/** A row of request_log, in the column order of the insert. */
type LogRow = (string | number | null)[];

const logColumns = 19;

/** One queued database write, as data: it is also a line of the settlement journal. */
type LedgerWrite =
  | {
      kind: "settle";
      seq: number;
      accountId: string;
      payment: Payment;
      charge: number;
      /** The PAYG window a PAYG charge counts in. */
      paygWindow: number | null;
      /** The UTC day a delivered free request counts on. */
      freeDay: string | null;
      /** Subscription windows a delivered request counts in: [name, start]. */
      windows: [string, number][];
      log: LogRow;
    }
  | { kind: "resetPayg"; seq: number; accountId: string; start: number };

/** While the disk is full: how often space is looked for, and how much counts as space again. */
const probeEveryMs = 1000;
const recoveryFreeBytes = 1024 * 1024;

const planLimitMessage =
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

/** What admitted, unsettled requests of one account hold. */
interface Pending {
  balance: number;
  payg: number;
  /** By UTC day. */
  free: Map<string, number>;
  /** By `${window}@${start}`. */
  windows: Map<string, number>;
}

const add = (map: Map<string, number>, key: string, n: number) => {
  const next = (map.get(key) ?? 0) + n;
  if (next === 0) map.delete(key);
  else map.set(key, next);
};

/**
 * Money and allowance bookkeeping. Admission checks settled state plus in-memory holds, so it
 * needs no write; settlement updates the cached account at once and queues its writes, which
 * commit together in one transaction per event-loop turn (`committed()` waits for it). Balance,
 * allowance counts and the request_log row of a request always land in the same transaction.
 *
 * When no other request is in flight there is nothing to batch with: `committed()` then makes the
 * queued writes durable by appending them to the settlement journal (one `write`) and the answer
 * leaves before the SQLite transaction, which follows within the same event-loop turn. A restart
 * applies journal lines the database does not hold yet, exactly once.
 */
export class Ledger {
  private readonly s: Record<string, Statement>;
  private readonly pending = new Map<string, Pending>();
  /** Holds placed and not yet released, across every account. */
  private open = 0;
  private readonly freeUsedCache = new Map<string, number>();
  private readonly windowUsedCache = new Map<string, { start: number; used: number }>();
  private queue: LedgerWrite[] = [];
  /** How many writes at the head of the queue are already in the journal. */
  private journaled = 0;
  /** Cached rows were read again while answered writes were still queued. */
  private stale = false;
  private seq: number;
  private readonly journal: SettlementJournal | undefined;
  private waiters: { resolve: () => void; reject: (err: unknown) => void }[] = [];
  private flushTimer: NodeJS.Immediate | undefined;
  /** Set while writes fail for want of disk space; cleared when a probe's commit lands. */
  private fault: StorageFault | null = null;
  private lastProbe = 0;

  constructor(
    private readonly store: Store,
    openJournal: (path: string) => SettlementJournal = (path) => new SettlementJournal(path),
  ) {
    const db = store.db;
    this.s = {
      charge: db.prepare("UPDATE accounts SET balance_micro = balance_micro - ? WHERE id = ?"),
      // Both PAYG writes name their window and never move it back, so they land right in any
      // order: a job's charge written at once inside its own transaction may overtake a window
      // reset still queued, and a charge for a window already closed no longer counts.
      chargePayg: db.prepare(
        `UPDATE accounts SET
           payg_spent_micro = CASE WHEN payg_window_start < ? THEN ?
             WHEN payg_window_start = ? THEN payg_spent_micro + ? ELSE payg_spent_micro END,
           payg_window_start = MAX(payg_window_start, ?)
         WHERE id = ?`,
      ),
      resetPayg: db.prepare(
        `UPDATE accounts SET
           payg_spent_micro = CASE WHEN payg_window_start < ? THEN 0 ELSE payg_spent_micro END,
           payg_window_start = MAX(payg_window_start, ?)
         WHERE id = ?`,
      ),
      freeUsed: db.prepare("SELECT used FROM free_usage WHERE account_id = ? AND day = ?"),
      countFree: db.prepare(
        `INSERT INTO free_usage (account_id, day, used) VALUES (?, ?, 1)
         ON CONFLICT(account_id, day) DO UPDATE SET used = used + 1`,
      ),
      windowUsed: db.prepare(
        "SELECT window_start, used FROM subscription_usage WHERE account_id = ? AND window_name = ?",
      ),
      countWindow: db.prepare(
        `INSERT INTO subscription_usage (account_id, window_name, window_start, used) VALUES (?, ?, ?, 1)
         ON CONFLICT(account_id, window_name) DO UPDATE SET
           used = CASE WHEN window_start = excluded.window_start THEN used + 1 ELSE 1 END,
           window_start = excluded.window_start`,
      ),
      log: db.prepare(
        `INSERT INTO request_log (id, account_id, key_id, endpoint, model, state, payment, payment_ref,
           reserved_micro, cost_micro, input_tokens, output_tokens, status, error_code, provider_id,
           stream, created_at, finished_at, tools_omitted)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      ),
      appliedSeq: db.prepare("SELECT applied_seq FROM ledger_journal WHERE id = 1"),
      setAppliedSeq: db.prepare("UPDATE ledger_journal SET applied_seq = ? WHERE id = 1"),
      // Rewrites one row as it is: a commit that needs room in the WAL, and changes nothing.
      probe: db.prepare("UPDATE ledger_journal SET applied_seq = applied_seq WHERE id = 1"),
    };
    this.seq = (this.s.appliedSeq.get() as { applied_seq: number }).applied_seq;
    if (store.path !== ":memory:") {
      const path = `${store.path}-settlements`;
      this.recoverJournal(path);
      this.journal = openJournal(path);
      this.journal.clear();
    }
    store.onBeforeAccountWrite(() => this.flush());
  }

  /** Settlements a crash left in the journal only: applied now, in order, each once. */
  private recoverJournal(path: string): void {
    const pending = (SettlementJournal.read(path) as LedgerWrite[]).filter((w) => w.seq > this.seq);
    if (pending.length === 0) return;
    // A journal written before the log had its last column names no omitted tools.
    for (const w of pending) if (w.kind === "settle" && w.log.length < logColumns) w.log.push(null);
    this.commit(pending);
    this.seq = pending[pending.length - 1].seq;
    this.store.invalidateAll();
  }

  // ---- admission ------------------------------------------------------------

  /** Places the hold for one request or throws the spec's error for why it cannot. */
  reserve(input: ReserveInput): Reservation {
    // A request that could not be charged is refused before it costs an upstream call.
    if (this.fault !== null && !this.recovered()) throw storageUnavailable();
    const account = this.store.getAccount(input.accountId);
    if (!account) throw new GatewayError(500, "internal_error", "account missing");
    const decided = this.decidePayment(account, input);
    const reservation: Reservation = {
      id: input.id,
      accountId: input.accountId,
      keyId: input.keyId,
      endpoint: input.endpoint,
      model: input.model,
      stream: input.stream,
      createdAt: input.now,
      ...decided,
      settled: false,
    };
    this.hold(reservation, 1);
    return reservation;
  }

  /** A job that outlived a restart takes its hold again (its Reservation was kept in its row). */
  restoreHold(r: Reservation): void {
    this.hold(r, 1);
  }

  private decidePayment(
    account: AccountRow,
    input: ReserveInput,
  ): Pick<Reservation, "payment" | "reservedMicro" | "paymentRef"> {
    if (input.payment === "byok") return { payment: "byok", reservedMicro: 0, paymentRef: null };
    if (input.payment === "free") return this.takeFree(account, input);

    const subscription = parseSubscription(account);
    if (subscription && input.subscriptionModel) {
      const starts = this.windowsWithRoom(account, subscription, input.now);
      if (starts) {
        return { payment: "subscription", reservedMicro: 0, paymentRef: JSON.stringify(starts) };
      }
      if (!subscription.payg_fallback) {
        if (subscription.free_fallback) return this.takeFree(account, input);
        throw new GatewayError(429, "plan_limit_reached", planLimitMessage);
      }
    }
    return this.holdMoney(account, input.worstCaseMicro, input.now);
  }

  private holdMoney(account: AccountRow, amount: number, now: number) {
    const pending = this.pendingOf(account.id);
    if (account.balance_micro - pending.balance >= amount) {
      return { payment: "balance" as const, reservedMicro: amount, paymentRef: null };
    }
    if (account.payg_enabled) {
      this.rollPaygWindow(account, now);
      if (account.payg_spent_micro + pending.payg + amount > account.payg_limit_micro) {
        throw new GatewayError(
          402,
          "payg_limit_reached",
          "PAYG spending limit reached; raise it in settings or wait for the reset window.",
        );
      }
      return { payment: "payg" as const, reservedMicro: amount, paymentRef: null };
    }
    throw new GatewayError(
      402,
      "insufficient_balance",
      "Your IDR balance is too low for this request. Top up first, then retry.",
    );
  }

  private rollPaygWindow(account: AccountRow, now: number): void {
    if (now < account.payg_window_start + account.payg_window_seconds * 1000) return;
    const start = subscriptionWindowStart(
      account.payg_window_start,
      account.payg_window_seconds,
      now,
    );
    account.payg_window_start = start;
    account.payg_spent_micro = 0;
    this.enqueue({ kind: "resetPayg", seq: ++this.seq, accountId: account.id, start });
  }

  private windowsWithRoom(
    account: AccountRow,
    sub: Subscription,
    now: number,
  ): Record<string, number> | null {
    const startedAt = account.subscription_started_at ?? account.created_at;
    const pending = this.pendingOf(account.id);
    const starts: Record<string, number> = {};
    for (const w of sub.windows) {
      const start = subscriptionWindowStart(startedAt, w.seconds, now);
      const used = this.subscriptionUsed(account.id, w.name, start);
      if (used + (pending.windows.get(`${w.name}@${start}`) ?? 0) >= w.quota) return null;
      starts[w.name] = start;
    }
    return starts;
  }

  private takeFree(account: AccountRow, input: ReserveInput) {
    const day = utcDay(input.now);
    const used = this.freeUsed(account.id, day) + (this.pendingOf(account.id).free.get(day) ?? 0);
    if (used >= (input.freeDailyLimit ?? 0)) {
      throw new GatewayError(
        429,
        "free_quota_daily",
        "Free-model daily allowance used up; it resets at 00:00 UTC. A top-up or subscription raises it.",
        { retryAfter: secondsToUtcMidnight(input.now) },
      );
    }
    return { payment: "free" as const, reservedMicro: 0, paymentRef: day };
  }

  // ---- settlement -----------------------------------------------------------

  /**
   * Ends a reservation: charges the real cost (never more than was held) and releases the hold.
   * Only a request that delivered output counts against allowances. Returns the charge.
   */
  settle(r: Reservation, input: SettleInput, options: SettleOptions = {}): number {
    if (r.settled) return 0;
    r.settled = true;
    this.hold(r, -1);
    const account = this.store.getAccount(r.accountId);
    const charge = input.delivered ? Math.min(input.costMicro, r.reservedMicro) : 0;
    if (account && charge > 0) {
      if (r.payment === "balance") account.balance_micro -= charge;
      if (r.payment === "payg") account.payg_spent_micro += charge;
    }
    if (input.delivered && r.payment === "free" && r.paymentRef) {
      this.freeUsedCache.set(
        `${r.accountId}|${r.paymentRef}`,
        this.freeUsed(r.accountId, r.paymentRef) + 1,
      );
    }
    const windows = input.delivered && r.payment === "subscription" ? windowStarts(r) : [];
    for (const [name, start] of windows) {
      this.windowUsedCache.set(`${r.accountId}|${name}`, {
        start,
        used: this.subscriptionUsed(r.accountId, name, start) + 1,
      });
    }
    const write: LedgerWrite = {
      kind: "settle",
      seq: ++this.seq,
      accountId: r.accountId,
      payment: r.payment,
      charge,
      paygWindow: r.payment === "payg" ? (account?.payg_window_start ?? null) : null,
      freeDay: input.delivered && r.payment === "free" ? r.paymentRef : null,
      windows,
      log: [
        r.id,
        r.accountId,
        r.keyId,
        r.endpoint,
        r.model,
        input.delivered ? "settled" : "failed",
        r.payment,
        r.paymentRef,
        r.reservedMicro,
        charge,
        input.inputTokens,
        input.outputTokens,
        input.status,
        input.errorCode ?? null,
        input.providerId,
        r.stream ? 1 : 0,
        r.createdAt,
        input.now,
        input.toolsOmitted ? JSON.stringify(input.toolsOmitted) : null,
      ],
    };
    if (options.writeNow) this.apply(write);
    else this.enqueue(write);
    return charge;
  }

  private hold(r: Reservation, sign: 1 | -1): void {
    this.open += sign;
    const pending = this.pendingOf(r.accountId);
    if (r.payment === "balance") pending.balance += sign * r.reservedMicro;
    if (r.payment === "payg") pending.payg += sign * r.reservedMicro;
    if (r.payment === "free" && r.paymentRef) add(pending.free, r.paymentRef, sign);
    if (r.payment === "subscription") {
      for (const [name, start] of windowStarts(r)) add(pending.windows, `${name}@${start}`, sign);
    }
  }

  private pendingOf(accountId: string): Pending {
    let pending = this.pending.get(accountId);
    if (!pending) {
      pending = { balance: 0, payg: 0, free: new Map(), windows: new Map() };
      this.pending.set(accountId, pending);
    }
    return pending;
  }

  /** Every hold not yet released and the money they hold, across accounts (read by /metrics). */
  holdsInFlight(): { count: number; micro: number } {
    let micro = 0;
    for (const pending of this.pending.values()) micro += pending.balance + pending.payg;
    return { count: this.open, micro };
  }

  /** Money held by the account's admitted, unsettled requests and jobs. */
  heldMicro(accountId: string): number {
    const pending = this.pending.get(accountId);
    return pending ? pending.balance + pending.payg : 0;
  }

  // ---- settled allowance counts -------------------------------------------

  /** Successful free-model requests of the account on a UTC day. */
  freeUsed(accountId: string, day: string): number {
    const key = `${accountId}|${day}`;
    let used = this.freeUsedCache.get(key);
    if (used === undefined) {
      used = (this.s.freeUsed.get(accountId, day) as { used: number } | undefined)?.used ?? 0;
      this.freeUsedCache.set(key, used);
    }
    return used;
  }

  /** Requests counted in a subscription window that started at `start`. */
  subscriptionUsed(accountId: string, window: string, start: number): number {
    const key = `${accountId}|${window}`;
    let entry = this.windowUsedCache.get(key);
    if (!entry) {
      const row = this.s.windowUsed.get(accountId, window) as
        | { window_start: number; used: number }
        | undefined;
      entry = { start: row?.window_start ?? start, used: row?.used ?? 0 };
      this.windowUsedCache.set(key, entry);
    }
    return entry.start === start ? entry.used : 0;
  }

  // ---- the write queue ------------------------------------------------------

  private apply(w: LedgerWrite): void {
    if (w.kind === "resetPayg") {
      this.s.resetPayg.run(w.start, w.start, w.accountId);
      return;
    }
    if (w.charge > 0 && w.payment === "balance") this.s.charge.run(w.charge, w.accountId);
    if (w.charge > 0 && w.payment === "payg") {
      const start = w.paygWindow ?? 0;
      this.s.chargePayg.run(start, w.charge, start, w.charge, start, w.accountId);
    }
    if (w.freeDay) this.s.countFree.run(w.accountId, w.freeDay);
    for (const [name, start] of w.windows) this.s.countWindow.run(w.accountId, name, start);
    // Positional parameters: binding a named-parameter object costs more on every request.
    this.s.log.run(...w.log);
  }

  /** Applies `writes` in one transaction that also records the last journal sequence it holds. */
  private commit(writes: LedgerWrite[]): void {
    this.store.transaction(() => {
      for (const write of writes) this.apply(write);
      this.s.setAppliedSeq.run(writes[writes.length - 1].seq);
    });
  }

  private enqueue(write: LedgerWrite): void {
    this.queue.push(write);
    this.flushTimer ??= setImmediate(() => this.flushQueued());
  }

  private flushQueued(): void {
    try {
      this.flush();
    } catch (err) {
      if (err instanceof GatewayError) return;
      console.error(`ledger: a settlement batch failed to commit: ${(err as Error).message}`);
    }
  }

  // ---- storage faults -------------------------------------------------------

  /**
   * Records a write that failed for want of disk space (from here or from any other writer) and
   * logs it once, naming the database. Returns false for any other error.
   */
  noteStorageFailure(err: unknown): boolean {
    if (!isStorageFull(err)) return false;
    if (!this.fault) {
      const message = err instanceof Error ? err.message : String(err);
      this.fault = { path: this.store.path, message, since: Date.now() };
      // The first probe waits its turn too: one just after the failure would tell nothing new.
      this.lastProbe = this.fault.since;
      console.error(
        `gateway: cannot write ${this.store.path}: ${message}; requests get 503 storage_unavailable until space is freed`,
      );
    }
    return true;
  }

  private storageRecovered(): void {
    if (!this.fault) return;
    console.error(`gateway: ${this.store.path} is writable again`);
    this.fault = null;
  }

  /** Why requests cannot be recorded right now, or null: for readiness. */
  storageFault(): StorageFault | null {
    this.recovered();
    return this.fault;
  }

  /**
   * While faulted, whether space is back: tried at most once a second, by asking the filesystem
   * for room and then committing what is queued (or a write that changes nothing).
   */
  private recovered(): boolean {
    if (!this.fault) return true;
    const now = Date.now();
    if (now - this.lastProbe < probeEveryMs) return false;
    this.lastProbe = now;
    if (!hasFreeSpace(this.store.path, recoveryFreeBytes)) return false;
    try {
      if (this.queue.length > 0) this.flush();
      else this.store.transaction(() => this.s.probe.run());
      this.storageRecovered();
    } catch (err) {
      // Room for the write, and a failure of another kind: that one is not about space.
      if (!this.noteStorageFailure(err)) this.storageRecovered();
    }
    return this.fault === null;
  }

  /** Commits every queued write now, in one transaction. */
  flush(): void {
    if (this.flushTimer) clearImmediate(this.flushTimer);
    this.flushTimer = undefined;
    const writes = this.queue;
    const journaled = this.journaled;
    const waiters = this.waiters;
    this.queue = [];
    this.journaled = 0;
    this.waiters = [];
    try {
      if (writes.length > 0) this.commit(writes);
    } catch (failure) {
      // Out of space: the requests waiting on this batch get the 503 that says so.
      const err = this.noteStorageFailure(failure) ? storageUnavailable() : failure;
      // The cached rows may now be ahead of the database: read them again from the truth.
      this.store.invalidateAll();
      // Writes already in the journal were answered: they stay queued and land with the next
      // batch (or at the next start). The others fail with their requests.
      this.queue = writes.slice(0, journaled);
      this.journaled = journaled;
      this.stale = journaled > 0;
      for (const w of waiters) w.reject(err);
      throw err;
    }
    this.journal?.applied();
    // Writes that failed once were missing from the rows read again meanwhile.
    if (this.stale) {
      this.stale = false;
      this.store.invalidateAll();
    }
    for (const w of waiters) w.resolve();
  }

  /** Resolves when everything settled so far is durable. */
  committed(): Promise<void> {
    if (this.queue.length === this.journaled) return Promise.resolve();
    // No other request is between admission and settlement, so none would join this batch: make
    // it durable in the journal now and let the answer leave; the transaction follows this turn.
    if (this.open === 0) {
      if (this.journal) {
        try {
          const lines = this.queue.slice(this.journaled).map((w) => `${JSON.stringify(w)}\n`);
          this.journal.append(lines.join(""));
          this.journaled = this.queue.length;
          return Promise.resolve();
        } catch {
          // The journal cannot take them (a full disk): commit them now, or fail with them.
        }
      }
      try {
        this.flush();
        return Promise.resolve();
      } catch (err) {
        return Promise.reject(err);
      }
    }
    return new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
  }

  close(): void {
    this.flush();
    this.journal?.close();
  }
}

function windowStarts(r: Reservation): [string, number][] {
  return r.paymentRef ? Object.entries(JSON.parse(r.paymentRef) as Record<string, number>) : [];
}
