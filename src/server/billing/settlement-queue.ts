import { clearImmediate, clearTimeout, setImmediate, setTimeout } from "../../host-timers.js";
import { journalFileOf, SettlementJournal } from "../../store/sqlite/settlement-journal.js";
import type { LedgerRepository, LedgerWrite, SettleWrite } from "../../store/types.js";
import { GatewayError } from "../errors.js";
import type { StorageWatch } from "./storage-watch.js";

/**
 * Writes already durable in the journal wait for a transaction until this many are queued ...
 * (a request's commit is four pages and six locks: at one connection, most of what the gateway
 * does that a bare proxy does not; one commit for many rows writes a page per thirteen of them)
 */
const journaledBatch = 256;
/** ... or this long (bounds what a start must apply from the journal, and what an OS crash may take). */
export const defaultJournaledWaitMs = 250;

/**
 * The Ledger's writes on their way to the database. They commit together in one transaction per
 * event-loop turn (`committed()` waits for it), so concurrent requests share a commit; balance,
 * allowance counts and the request_log row of a request always land in the same transaction.
 *
 * When no other request is in flight there is nothing to batch with: `committed()` then makes
 * the queued writes durable by appending them to the settlement journal (one `write`) and the
 * answer leaves before the transaction. Writes in the journal then wait for the next batch: one
 * with writes not in the journal (a request that was not alone), `journaledBatch` of them, or
 * `defaultJournaledWaitMs`, whichever comes first; anything that reads the database past the caches
 * (the request log, a reload) lands them first (`Store.onQueuedWrites`). A start applies journal
 * lines the database does not hold yet, exactly once. The journal also keeps the delivery marks of
 * streams in flight (`mark`), written again whenever the file starts over, until they settle; a
 * stream whose settlement the database refused has its marks withdrawn (`unmark`).
 */
export class SettlementQueue {
  private queue: LedgerWrite[] = [];
  /** How many writes at the head of the queue are already in the journal. */
  private journaled = 0;
  /** Cached rows were read again while answered writes were still queued. */
  private stale = false;
  private seq: number;
  private readonly journal: SettlementJournal | undefined;
  private waiters: { resolve: () => void; reject: (err: unknown) => void }[] = [];
  private flushTimer: NodeJS.Immediate | undefined;
  /** The one timer that lands writes waiting in the journal. */
  private journaledTimer: NodeJS.Timeout | undefined;
  /** The journal lines of the delivery marks of streams not yet settled, by request id. */
  private readonly marks = new Map<string, string>();
  /** Streams with a mark in the journal whose settlement is queued and not yet committed. */
  private readonly settling = new Set<string>();
  /** Withdrawals of marks the journal could not take (a full disk): written after the next commit. */
  private withdrawals = "";

  constructor(
    private readonly book: LedgerRepository,
    private readonly storage: StorageWatch,
    databasePath: string,
    openJournal: (path: string) => SettlementJournal,
    private readonly journaledWaitMs = defaultJournaledWaitMs,
  ) {
    this.seq = book.appliedSeq();
    if (databasePath !== ":memory:") {
      const path = journalFileOf(databasePath);
      this.recover(path);
      this.journal = openJournal(path);
      this.journal.clear();
    }
  }

  /**
   * Settlements a crash left in the journal only: applied now, in order, each once. Then the
   * streams the crash cut off: each is settled as its last delivery mark says, unless its
   * settlement is in the journal or the database already.
   */
  private recover(path: string): void {
    const writes: LedgerWrite[] = [];
    const marks = new Map<string, SettleWrite>();
    const settled = new Set<string>();
    for (const line of SettlementJournal.read(path)) {
      if (line.kind === "mark") {
        marks.set(line.settle.log[0], line.settle);
        continue;
      }
      if (line.kind === "unmark") {
        marks.delete(line.id);
        continue;
      }
      if (line.kind === "settle") settled.add(line.log[0]);
      if (line.seq > this.seq) writes.push(line);
    }
    if (writes.length > 0) this.seq = writes[writes.length - 1].seq;
    for (const [id, settle] of marks) {
      if (settled.has(id) || this.book.isLogged(settle.log)) continue;
      writes.push({ ...settle, seq: ++this.seq });
    }
    if (writes.length === 0) return;
    this.book.commit(writes);
    this.book.reload();
  }

  /**
   * Makes a stream's delivery mark durable (it replaces the stream's earlier one), or throws. A
   * database in memory has nothing to outlive.
   */
  mark(settle: SettleWrite): void {
    if (!this.journal) return;
    const line = `${JSON.stringify({ kind: "mark", settle })}\n`;
    this.journal.append(line);
    this.marks.set(settle.log[0], line);
  }

  /**
   * The stream settled: its mark need not outlive the journal's next start over, and is withdrawn
   * should its settlement fail to commit.
   */
  unmark(id: string): void {
    if (this.marks.delete(id)) this.settling.add(id);
  }

  /**
   * Settlements the database refused, whose requests are told nothing was charged: the marks of
   * those that were streams must not charge them at the next start.
   */
  private withdrawMarks(refused: readonly LedgerWrite[]): void {
    if (this.settling.size === 0) return;
    let lines = this.withdrawals;
    for (const write of refused) {
      if (write.kind !== "settle" || !this.settling.delete(write.log[0])) continue;
      lines += `${JSON.stringify({ kind: "unmark", id: write.log[0] })}\n`;
    }
    this.appendWithdrawals(lines);
  }

  private appendWithdrawals(lines: string): void {
    this.withdrawals = "";
    if (lines === "" || !this.journal) return;
    try {
      this.journal.append(lines);
    } catch {
      this.withdrawals = lines;
    }
  }

  /** The sequence number of the next write. */
  nextSeq(): number {
    return ++this.seq;
  }

  /**
   * Queues a write the repository already remembers; it commits at the end of this turn, or
   * later once it is in the journal.
   */
  enqueue(write: LedgerWrite): void {
    this.queue.push(write);
    this.flushTimer ??= setImmediate(() => this.flushQueued());
  }

  /**
   * Commits what is queued now, for a reader of the database: a batch that fails is reported as
   * any batch is (a storage fault, or a log line) and stays queued where it was answered, and the
   * read shows what is committed.
   */
  land(): void {
    this.flushQueued(true);
  }

  /** `waited`: the journaled writes' timer ran out, or someone reads the database. */
  private flushQueued(waited = false): void {
    this.flushTimer = undefined;
    if (this.queue.length === 0) return;
    // Every queued write is durable in the journal: it waits for company, within bounds.
    if (!waited && this.queue.length === this.journaled && this.journaled < journaledBatch) {
      this.journaledTimer ??= setTimeout(() => {
        this.journaledTimer = undefined;
        this.flushQueued(true);
      }, this.journaledWaitMs).unref();
      return;
    }
    try {
      this.flush();
    } catch (err) {
      if (err instanceof GatewayError) return;
      console.error(`ledger: a settlement batch failed to commit: ${(err as Error).message}`);
    }
  }

  /** Commits what is queued, or else a write that changes nothing: the storage probe. */
  flushOrProbe(): void {
    if (this.queue.length > 0) this.flush();
    else this.book.probe();
  }

  /** Commits every queued write now, in one transaction. */
  flush(): void {
    if (this.flushTimer) clearImmediate(this.flushTimer);
    this.flushTimer = undefined;
    if (this.journaledTimer) clearTimeout(this.journaledTimer);
    this.journaledTimer = undefined;
    const writes = this.queue;
    const journaled = this.journaled;
    const waiters = this.waiters;
    this.queue = [];
    this.journaled = 0;
    this.waiters = [];
    try {
      if (writes.length > 0) {
        // A database file deleted or replaced under the gateway takes no more charges.
        if (!this.storage.writable()) throw this.storage.unavailable();
        this.book.commit(writes);
      }
    } catch (failure) {
      // A disk that refused the writes: the requests waiting on this batch get the
      // storage_unavailable answer.
      const err = this.storage.note(failure) ? this.storage.unavailable() : failure;
      // The cached rows may now be ahead of the database: read them again from the truth.
      this.book.reload();
      // Writes already in the journal were answered: they stay queued and land with the next
      // batch (or at the next start). The others fail with their requests.
      this.queue = writes.slice(0, journaled);
      this.journaled = journaled;
      this.stale = journaled > 0;
      this.withdrawMarks(writes.slice(journaled));
      for (const waiter of waiters) waiter.reject(err);
      throw err;
    }
    if (this.settling.size > 0) {
      for (const write of writes) if (write.kind === "settle") this.settling.delete(write.log[0]);
    }
    // A journal started over holds no withdrawn mark; otherwise they are written now.
    if (this.journal?.applied(() => [...this.marks.values()].join(""))) this.withdrawals = "";
    else if (this.withdrawals !== "") this.appendWithdrawals(this.withdrawals);
    // Writes that failed once were missing from the rows read again meanwhile.
    if (this.stale) {
      this.stale = false;
      this.book.reload();
    }
    for (const waiter of waiters) waiter.resolve();
  }

  /**
   * Resolves when everything queued so far is durable. `alone`: no other request is between
   * admission and settlement, so none would join this batch.
   */
  committed(alone: boolean): Promise<void> {
    if (this.queue.length === this.journaled) return Promise.resolve();
    // Durable in the journal now, and the answer may leave; the transaction follows with a batch.
    if (alone) {
      if (!this.storage.writable()) return Promise.reject(this.storage.unavailable());
      if (this.journal) {
        try {
          const lines = this.queue
            .slice(this.journaled)
            .map((write) => `${JSON.stringify(write)}\n`);
          this.journal.append(lines.join(""));
          this.journaled = this.queue.length;
          // Requests waiting for this turn's batch had their writes in those lines: durable now,
          // they are answered too. A batch that then fails keeps the writes for the next one, as
          // it keeps any journaled write, so no request is refused whose charge later lands.
          const waiters = this.waiters;
          this.waiters = [];
          for (const waiter of waiters) waiter.resolve();
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
