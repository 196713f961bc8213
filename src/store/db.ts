import Database from "better-sqlite3";
import { migrations } from "./migrations.js";

export type DB = Database.Database;

/** Opens (or creates) the SQLite file, applies pending migrations and returns the handle. */
export function openDatabase(path: string): DB {
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
}
