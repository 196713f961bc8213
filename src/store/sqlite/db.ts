import { closeSync, openSync, readSync, statSync } from "node:fs";
import Database from "better-sqlite3";
import { ensurePrivateFile, tightenPrivateFile } from "../private-files.js";
import { migrations } from "./migrations.js";

export type DB = Database.Database;

/** The main connection's page cache, in KiB. */
const pageCacheKiB = 2000;

/**
 * The WAL file's size once SQLite starts it over, in bytes. Under a burst of commits it grows
 * until a checkpoint catches up (up to the checkpointer's backstop, tens of megabytes); without a
 * limit SQLite reuses the file from its start but keeps it at its largest on disk for good.
 */
export const walSizeLimitBytes = 4 * 1024 * 1024;

/** Files SQLite keeps beside a database, holding the same data. */
export const sqliteSidecars = ["-wal", "-shm", "-journal"];

/**
 * Opens (or creates) the SQLite file, owner-only, applies pending migrations and returns the
 * handle. SQLite creates its WAL and shared-memory files later with the database file's own
 * permissions, so a private database keeps them private too.
 */
export function openDatabase(path: string): DB {
  if (path !== ":memory:" && path !== "") {
    refuseNonDatabase(path);
    ensurePrivateFile(path);
    for (const suffix of sqliteSidecars) tightenPrivateFile(`${path}${suffix}`);
  }
  const db = new Database(path);
  if (path !== ":memory:") {
    db.pragma("journal_mode = WAL");
    db.pragma(`journal_size_limit = ${walSizeLimitBytes}`);
  }
  // NORMAL in WAL mode survives a process crash (only an OS crash can lose the last commits).
  db.pragma("synchronous = NORMAL");
  db.pragma("foreign_keys = ON");
  db.pragma("busy_timeout = 5000");
  // better-sqlite3 builds SQLite with a 16 MB page cache, which the request log's appended pages
  // fill as it grows: the hot pages (each table's and index's last ones, the accounts) are far
  // fewer than SQLite's own default of 2 MB holds, and the rest is in the OS's cache anyway.
  db.pragma(`cache_size = ${-pageCacheKiB}`);
  migrate(db);
  return db;
}

/** Whether `path` is missing, empty, or an SQLite file: a database that may be opened or created. */
export function canBeDatabase(path: string): boolean {
  const stat = statSync(path, { throwIfNoEntry: false });
  if (!stat) return true;
  if (!stat.isFile()) return false;
  if (stat.size === 0) return true;
  const header = Buffer.alloc(16);
  let fd: number | undefined;
  try {
    fd = openSync(path, "r");
    readSync(fd, header, 0, 16, 0);
  } catch {
    return true; // unreadable: opening it says why
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
  return header.toString("latin1") === "SQLite format 3\0";
}

/**
 * Refuses a path that holds something other than a database (a file of notes, a directory)
 * before anything touches it: SQLite would find out only once the file had been opened and made
 * owner-only. The error carries the code SQLite or the system would give (SQLITE_NOTADB, EISDIR).
 */
export function refuseNonDatabase(path: string): void {
  if (canBeDatabase(path)) return;
  const directory = statSync(path, { throwIfNoEntry: false })?.isDirectory() === true;
  throw Object.assign(
    new Error(directory ? `${path} is a directory` : `${path} is not an SQLite database`),
    { code: directory ? "EISDIR" : "SQLITE_NOTADB" },
  );
}

function migrate(db: DB): void {
  const current = db.pragma("user_version", { simple: true }) as number;
  // A step may rebuild a table others refer to (SQLite's way to change a column's constraint):
  // references are checked after each step instead, as SQLite's own procedure for it says.
  if (current < migrations.length) db.pragma("foreign_keys = OFF");
  for (let version = current; version < migrations.length; version++) {
    db.transaction(() => {
      db.exec(migrations[version]);
      const broken = db.pragma("foreign_key_check") as unknown[];
      if (broken.length > 0)
        throw new Error(`migration ${version + 1} broke ${broken.length} references`);
      db.pragma(`user_version = ${version + 1}`);
    })();
  }
  db.pragma("foreign_keys = ON");
  // An upgrade may have moved secrets out of rows (provider keys, plain BYOK keys): rebuild the
  // file so that no freed page or old WAL frame still holds them.
  if (current > 0 && current < migrations.length) scrubFreedPages(db, () => db.exec("VACUUM"));
}

/**
 * Runs `change` with freed space zeroed, then empties the WAL into the file, so that what the
 * change replaced (a plain or an old-key secret) is left in no page and no frame.
 */
export function scrubFreedPages(db: DB, change: () => void): void {
  db.pragma("secure_delete = ON");
  try {
    change();
  } finally {
    db.pragma("secure_delete = OFF");
  }
  if (db.name !== ":memory:") db.pragma("wal_checkpoint(TRUNCATE)");
}

/**
 * The wires a provider row may name, from the gateway's registry: a trigger in place of a CHECK,
 * rewritten at every open, so a new wire needs no table rebuild.
 */
export function checkWires(db: DB, wires: readonly string[]): void {
  const list = wires.map((wire) => `'${wire.replaceAll("'", "''")}'`).join(", ");
  const refuse = "SELECT RAISE(ABORT, 'providers.wire: not a wire this gateway speaks')";
  db.transaction(() => {
    db.exec(`
      DROP TRIGGER IF EXISTS providers_wire_insert;
      DROP TRIGGER IF EXISTS providers_wire_update;
      CREATE TRIGGER providers_wire_insert BEFORE INSERT ON providers
        WHEN NEW.wire NOT IN (${list}) BEGIN ${refuse}; END;
      CREATE TRIGGER providers_wire_update BEFORE UPDATE OF wire ON providers
        WHEN NEW.wire NOT IN (${list}) BEGIN ${refuse}; END;
    `);
  })();
}
