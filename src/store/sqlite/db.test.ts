import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterAll, describe, expect, it } from "vitest";
import { openDatabase } from "./db.js";
import { migrations } from "./migrations.js";

const dir = mkdtempSync(join(tmpdir(), "gateway-db-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("migrations", () => {
  it("bring a new file to the latest version", () => {
    const db = openDatabase(join(dir, "new.db"));
    expect(db.pragma("user_version", { simple: true })).toBe(migrations.length);
    expect(db.pragma("journal_mode", { simple: true })).toBe("wal");
    db.close();
  });

  it("upgrade a version-1 file in place, keeping its request log", () => {
    const path = join(dir, "v1.db");
    const old = new Database(path);
    old.exec(migrations[0]);
    old.pragma("user_version = 1");
    old
      .prepare(
        "INSERT INTO request_log (id, account_id, endpoint, state, created_at) VALUES ('req_1', 'a', 'chat', 'settled', 1)",
      )
      .run();
    old.close();

    const db = openDatabase(path);
    expect(db.pragma("user_version", { simple: true })).toBe(migrations.length);
    expect(db.prepare("SELECT id, state FROM request_log").all()).toEqual([
      { id: "req_1", state: "settled" },
    ]);
    const indexes = (db.prepare("PRAGMA index_list(request_log)").all() as { name: string }[]).map(
      (i) => i.name,
    );
    expect(indexes).toEqual(["request_log_account_time"]);
    db.close();
  });
});
