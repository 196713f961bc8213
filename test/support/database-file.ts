import { copyFileSync, existsSync } from "node:fs";
import Database from "better-sqlite3";
import { keyFileOf } from "../../src/store/sqlite/byok-sealing.js";
import { journalFileOf } from "../../src/store/sqlite/settlement-journal.js";
import type { Store } from "../../src/store/sqlite/store.js";
import type { RequestLogRow } from "../../src/store/types.js";

/**
 * The one place tests reach SQLite past the store's API, for tests whose point is the file
 * itself: what a crashed process left on disk, which secrets rest in it, a file an older gateway
 * wrote, a database that cannot grow. Everything else asserts through the Store and the Ledger.
 */

/** Reads the database file through a read-only connection of its own. */
function readFile<T>(path: string, read: (db: Database.Database) => T): T {
  const db = new Database(path, { readonly: true });
  try {
    return read(db);
  } finally {
    db.close();
  }
}

/** The account's balance as committed to the file. */
export function balanceOnDisk(path: string, accountId: string): number {
  return readFile(
    path,
    (db) =>
      (
        db.prepare("SELECT balance_micro FROM accounts WHERE id = ?").get(accountId) as {
          balance_micro: number;
        }
      ).balance_micro,
  );
}

/** The request log as committed to the file, in the order it was written. */
export function requestLogOnDisk(path: string): RequestLogRow[] {
  return readFile(
    path,
    (db) => db.prepare("SELECT * FROM request_log ORDER BY rowid").all() as RequestLogRow[],
  );
}

/** Every column of every API key row, as the file holds it. */
export function apiKeysOnDisk(path: string): Record<string, unknown>[] {
  return readFile(
    path,
    (db) => db.prepare("SELECT * FROM api_keys").all() as Record<string, unknown>[],
  );
}

/** BYOK credentials in the form the file holds them. */
export function byokSecretsOnDisk(path: string): string[] {
  return readFile(path, (db) =>
    (db.prepare("SELECT secret FROM byok_credentials").all() as { secret: string }[]).map(
      (row) => row.secret,
    ),
  );
}

/** A connection of its own to a file as an older gateway (or another program) would write it. */
export function foreignConnection(path: string): Database.Database {
  return new Database(path);
}

/**
 * Fills the store's own database until SQLite refuses another page (SQLITE_FULL, as a full disk
 * gives): its connection may grow the file no further, and filler rows take the room left.
 * `makeRoom` undoes it.
 */
export function fillDatabase(store: Store): void {
  const db = store.database;
  db.pragma(`max_page_count = ${db.pragma("page_count", { simple: true })}`);
  const filler = db.prepare(
    "INSERT INTO request_log (id, account_id, endpoint, state, created_at) VALUES (?, 'acct', 'filler', 'failed', ?)",
  );
  // Large rows take the free pages, then small ones the room left in the last pages.
  for (const size of [1500, 100, 10]) {
    let full = false;
    try {
      for (let i = 0; i < 100_000; i++) {
        filler.run(`filler_${size}_${i}_${"x".repeat(size)}`, 1_800_000_000_000);
      }
    } catch (err) {
      if (!/database or disk is full/.test((err as Error).message)) throw err;
      full = true;
    }
    if (!full) throw new Error(`fillDatabase: rows of ${size} bytes never filled it`);
  }
}

/** Lets the store's database grow again and removes what `fillDatabase` wrote. */
export function makeRoom(store: Store): void {
  const db = store.database;
  db.pragma("max_page_count = 1073741823");
  db.prepare("DELETE FROM request_log WHERE endpoint = 'filler'").run();
}

/**
 * What a gateway killed at this very moment would leave of `store`'s files, at `to`: what its
 * database has committed (one consistent copy), its settlement journal as written so far, and its
 * sealing key. Called from inside the gateway's own turn (a patched write), it is the kill at that
 * point of the turn; a gateway started on `to` recovers as the restart after that kill would.
 */
export function crashImage(store: Store, to: string): void {
  store.database.prepare("VACUUM INTO ?").run(to);
  const journal = journalFileOf(store.path);
  if (existsSync(journal)) copyFileSync(journal, journalFileOf(to));
  if (existsSync(keyFileOf(store.path))) copyFileSync(keyFileOf(store.path), keyFileOf(to));
}

/** The tokens counted in a free model's token budget, and the window they count in. */
export function freeTokensOnDisk(
  path: string,
  model: string,
): { window_start: number; tokens: number } | undefined {
  return readFile(
    path,
    (db) =>
      db.prepare("SELECT window_start, tokens FROM free_token_usage WHERE model = ?").get(model) as
        | { window_start: number; tokens: number }
        | undefined,
  );
}
