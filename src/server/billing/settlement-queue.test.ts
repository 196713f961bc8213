import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { SettlementJournal } from "../../store/sqlite/settlement-journal.js";
import type {
  LedgerRepository,
  LedgerWrite,
  RequestLogValues,
  SettleWrite,
} from "../../store/types.js";
import { SettlementQueue } from "./settlement-queue.js";
import { StorageWatch } from "./storage-watch.js";

/** A database that takes commits until told its disk is full. */
class Book {
  full = false;
  committed: number[] = [];
  /** The request log's ids of the settlements committed. */
  logged: string[] = [];
  commit(writes: readonly LedgerWrite[]): void {
    if (this.full) {
      throw Object.assign(new Error("database or disk is full"), { code: "SQLITE_FULL" });
    }
    this.committed.push(...writes.map((w) => w.seq));
    for (const w of writes) if (w.kind === "settle") this.logged.push(w.log[0]);
  }
  appliedSeq(): number {
    return 0;
  }
  isLogged(log: RequestLogValues): boolean {
    return this.logged.includes(log[0]);
  }
  reload(): void {}
  probe(): void {}
}

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function queueOn(book: Book, dir?: string): { queue: SettlementQueue; journal: string } {
  if (!dir) {
    dir = mkdtempSync(join(tmpdir(), "settlement-queue-"));
    dirs.push(dir);
  }
  const db = join(dir, "gateway.db");
  writeFileSync(db, "", { flag: "a" });
  const storage = new StorageWatch(db, () => {});
  const queue = new SettlementQueue(
    book as unknown as LedgerRepository,
    storage,
    db,
    (path) => new SettlementJournal(path),
  );
  return { queue, journal: `${db}-settlements` };
}

const write = (seq: number): LedgerWrite => ({
  kind: "resetPayg",
  seq,
  accountId: "acct",
  start: 0,
});

/** A stream's delivery mark: the settlement it gets should the process die first. */
const mark = (id: string, toolsOmitted: string | null = null): SettleWrite => ({
  kind: "settle",
  seq: 0,
  accountId: "acct",
  payment: "balance",
  charge: 5,
  paygWindow: null,
  freeDay: null,
  windows: [],
  log: [
    id,
    "acct",
    null,
    "chat.completions",
    "m",
    "interrupted",
    "balance",
    null,
    10,
    5,
    1,
    16,
    200,
    null,
    "p",
    1,
    0,
    0,
    toolsOmitted,
  ],
});

describe("the settlement queue", () => {
  it("keeps the marks of streams in flight when the journal starts over, and a start applies them once", () => {
    const book = new Book();
    const dir = mkdtempSync(join(tmpdir(), "settlement-queue-"));
    dirs.push(dir);
    const { queue, journal } = queueOn(book, dir);
    // A settled stream's mark large enough that the next commit starts the journal over.
    queue.mark(mark("req_settled", "x".repeat(1024 * 1024)));
    queue.mark(mark("req_open"));
    queue.unmark("req_settled");
    queue.enqueue(write(queue.nextSeq()));
    queue.flush();
    expect(SettlementJournal.read(journal)).toEqual([{ kind: "mark", settle: mark("req_open") }]);

    // The process dies: the next start settles the open stream as its mark says, once.
    const restarted = new Book();
    queueOn(restarted, dir);
    expect(restarted.logged).toEqual(["req_open"]);
    queueOn(restarted, dir);
    expect(restarted.logged).toEqual(["req_open"]);
  });

  it("withdraws the mark of a stream whose settlement a failed batch dropped: a start applies the open stream's mark only", () => {
    const book = new Book();
    const dir = mkdtempSync(join(tmpdir(), "settlement-queue-"));
    dirs.push(dir);
    const { queue } = queueOn(book, dir);
    queue.mark(mark("req_refused"));
    queue.mark(mark("req_open"));
    // The stream settles, and the database refuses its settlement: its client is told nothing
    // was charged.
    queue.unmark("req_refused");
    queue.enqueue({ ...mark("req_refused"), seq: queue.nextSeq() });
    book.full = true;
    expect(() => queue.flush()).toThrow();

    const restarted = new Book();
    queueOn(restarted, dir);
    expect(restarted.logged).toEqual(["req_open"]);
  });

  it("answers a request waiting for the batch once a request alone journals its write, and keeps that write when the batch fails", async () => {
    const book = new Book();
    const { queue, journal } = queueOn(book);
    // One request waits for this turn's shared commit ...
    queue.enqueue(write(queue.nextSeq()));
    const waiting = queue.committed(false);
    // ... when another settles alone in the same turn: its journal line holds both writes.
    queue.enqueue(write(queue.nextSeq()));
    await expect(queue.committed(true)).resolves.toBeUndefined();
    expect(SettlementJournal.read(journal).map((w) => "seq" in w && w.seq)).toEqual([1, 2]);
    // The disk fills before the batch commits: the waiting request was answered from the
    // journal, so its charge must land later, not be refused now and charged anyway.
    book.full = true;
    expect(() => queue.flush()).toThrow();
    await expect(waiting).resolves.toBeUndefined();
    book.full = false;
    queue.flush();
    expect(book.committed).toEqual([1, 2]);
  });

  it("refuses the requests of a failed batch whose writes no journal holds, and drops their writes", async () => {
    const book = new Book();
    const { queue } = queueOn(book);
    queue.enqueue(write(queue.nextSeq()));
    const waiting = queue.committed(false);
    book.full = true;
    expect(() => queue.flush()).toThrow();
    await expect(waiting).rejects.toMatchObject({ code: "storage_unavailable" });
    book.full = false;
    queue.flush();
    expect(book.committed).toEqual([]);
  });
});
