import { closeSync, existsSync, fstatSync, ftruncateSync, readFileSync, writeSync } from "node:fs";
import { openPrivateFile } from "../private-files.js";
import type { JournalLine } from "../types.js";

/** Truncated once everything in it is in SQLite and it has grown past this. */
const truncateAtBytes = 1024 * 1024;

/** Where the settlement journal of the database at `dbPath` is kept. */
export const journalFileOf = (dbPath: string) => `${dbPath}-settlements`;

/**
 * An append-only file of settlements beside the database (`<db>-settlements`), one JSON line each.
 * A settlement is durable once its line is written (a process crash keeps what `write` handed to
 * the kernel, as SQLite's WAL with synchronous=NORMAL does), so an answer can leave before the
 * SQLite transaction that applies it. Each line carries a sequence number; the database records
 * the last one applied in the same transaction as the writes, so a restart applies the rest
 * exactly once.
 */
export class SettlementJournal {
  private readonly fd: number;
  private size: number;

  constructor(readonly path: string) {
    this.fd = openPrivateFile(path, "a");
    this.size = fstatSync(this.fd).size;
  }

  /** The records written before a crash, in order; a torn last line is dropped. */
  static read(path: string): JournalLine[] {
    if (!existsSync(path)) return [];
    const records: JournalLine[] = [];
    for (const line of readFileSync(path, "utf8").split("\n")) {
      if (line === "") continue;
      try {
        records.push(JSON.parse(line) as JournalLine);
      } catch {
        break;
      }
    }
    return records;
  }

  /** Appends whole lines, or nothing: a short write (a full disk) is cut off again and throws. */
  append(lines: string): void {
    const length = Buffer.byteLength(lines);
    let written = 0;
    try {
      written = writeSync(this.fd, lines);
    } finally {
      if (written !== length) ftruncateSync(this.fd, this.size);
    }
    if (written !== length) throw new Error("settlement journal: short write");
    this.size += written;
  }

  /**
   * Everything appended so far has been applied to the database, but for `open`: lines (the
   * delivery marks of streams still running) that are written again when the file starts over.
   * True when it started over.
   */
  applied(open: () => string): boolean {
    if (this.size < truncateAtBytes) return false;
    ftruncateSync(this.fd, 0);
    this.size = 0;
    const lines = open();
    if (lines === "") return true;
    try {
      this.append(lines);
    } catch (err) {
      // A full disk: those streams are charged by their settlements alone, as before any mark.
      console.error(`settlement journal: ${(err as Error).message}`);
    }
    return true;
  }

  /** At start-up, after the records have been applied. */
  clear(): void {
    if (this.size === 0) return;
    ftruncateSync(this.fd, 0);
    this.size = 0;
  }

  close(): void {
    closeSync(this.fd);
  }
}
