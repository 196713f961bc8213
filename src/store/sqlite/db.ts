import Database from "better-sqlite3";
import { ensurePrivateFile, tightenPrivateFile } from "../private-files.js";
import { migrations } from "./migrations.js";

export type DB = Database.Database;

/** Files SQLite keeps beside a database, holding the same data. */
const sqliteSidecars = ["-wal", "-shm", "-journal"];

/**
 * Opens (or creates) the SQLite file, owner-only, applies pending migrations and returns the
 * handle. SQLite creates its WAL and shared-memory files later with the database file's own
 * permissions, so a private database keeps them private too.
 */
export function openDatabase(path: string): DB {
  if (path !== ":memory:" && path !== "") {
    ensurePrivateFile(path);
    for (const suffix of sqliteSidecars) tightenPrivateFile(`${path}${suffix}`);
  }
  const db = new Database(path);
  if (path !== ":memory:") db.pragma("journal_mode = WAL");
  // NORMAL in WAL mode survives a process crash (only an OS crash can lose the last commits).
  db.pragma("synchronous = NORMAL");
  db.pragma("foreign_keys = ON");
  db.pragma("busy_timeout = 5000");
  migrate(db);
  return db;
}

function migrate(db: DB): void {
  const current = db.pragma("user_version", { simple: true }) as number;
  for (let version = current; version < migrations.length; version++) {
    db.transaction(() => {
      db.exec(migrations[version]);
      db.pragma(`user_version = ${version + 1}`);
    })();
  }
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
