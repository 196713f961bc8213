import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterAll, describe, expect, it } from "vitest";
import { checkWires, openDatabase, walSizeLimitBytes } from "./db.js";
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

  it("keep a page cache of SQLite's default 2 MB, not the 16 MB better-sqlite3 builds in", () => {
    const db = openDatabase(join(dir, "cache.db"));
    const plain = new Database(":memory:");
    expect(plain.pragma("cache_size", { simple: true })).toBe(-16000);
    plain.close();
    expect(db.pragma("cache_size", { simple: true })).toBe(-2000);
    db.close();
  });

  it("give the WAL file back once SQLite starts it over after a burst that grew it", () => {
    const path = join(dir, "wal.db");
    const db = openDatabase(path);
    db.pragma("wal_autocheckpoint = 0");
    db.exec("CREATE TABLE burst (data BLOB)");
    const insert = db.prepare("INSERT INTO burst (data) VALUES (randomblob(?))");
    // Each commit its own frames: the WAL grows to several times the limit before a checkpoint.
    for (let i = 0; i < 12; i++) insert.run(1024 * 1024);
    const wal = `${path}-wal`;
    expect(statSync(wal).size).toBeGreaterThan(3 * walSizeLimitBytes);
    // A checkpoint that copies every frame, then a commit: the commit starts the WAL over.
    db.pragma("wal_checkpoint(PASSIVE)");
    db.exec("DELETE FROM burst");
    expect(statSync(wal).size).toBeLessThanOrEqual(walSizeLimitBytes);
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

  it("insert a request log row without building a temporary table, and still check its state", () => {
    const path = join(dir, "v13.db");
    const old = new Database(path);
    for (const step of migrations.slice(0, 13)) old.exec(step);
    old.pragma("user_version = 13");
    old.exec(`INSERT INTO request_log (id, account_id, endpoint, state, created_at, tools_omitted)
      VALUES ('req_1', 'a', 'chat', 'settled', 1, '["web_search"]')`);
    old.close();

    const db = openDatabase(path);
    const insert = (state: string) =>
      `INSERT INTO request_log (id, account_id, endpoint, state, created_at) VALUES ('req_2', 'a', 'chat', '${state}', 2)`;
    // An IN list of constants in a CHECK becomes an ephemeral index filled at every insert.
    const program = db.prepare(`EXPLAIN ${insert("failed")}`).all() as { opcode: string }[];
    expect(program.map((op) => op.opcode)).not.toContain("OpenEphemeral");
    expect(() => db.exec(insert("bogus"))).toThrow(/CHECK constraint failed/);
    for (const state of ["reserved", "settled", "failed", "interrupted"]) {
      db.exec(insert(state));
      db.exec("DELETE FROM request_log WHERE id = 'req_2'");
    }
    expect(db.prepare("SELECT id, state, tools_omitted FROM request_log").all()).toEqual([
      { id: "req_1", state: "settled", tools_omitted: '["web_search"]' },
    ]);
    db.close();
  });

  it("upgrade a version-16 file: a message thread stays its account's, and a native response knows its server's id", () => {
    const path = join(dir, "v16.db");
    const old = new Database(path);
    for (const step of migrations.slice(0, 16)) old.exec(step);
    old.pragma("user_version = 16");
    old.exec(`INSERT INTO message_threads (message_id, account_id, conversation_json, expires_at)
      VALUES ('msg_1', 'acct', '{"messages":[]}', 10);
      INSERT INTO stored_responses (account_id, id, previous_response_id, native_provider_id,
        response_json, input_items_json, created_at, expires_at)
      VALUES ('acct', 'resp_native', NULL, 'native key', '{}', '[]', 1, 10),
        ('acct', 'resp_translated', NULL, NULL, '{}', '[]', 1, 10);`);
    // Keyed on the message id alone: another account's row under it replaced this one.
    expect(() =>
      old.exec(`INSERT INTO message_threads VALUES ('msg_1', 'other', '{"messages":[]}', 10)`),
    ).toThrow(/UNIQUE/);
    old.close();

    const db = openDatabase(path);
    db.exec(`INSERT INTO message_threads VALUES ('msg_1', 'other', '{"messages":[1]}', 10)`);
    expect(
      db.prepare("SELECT account_id, conversation_json FROM message_threads ORDER BY 1").all(),
    ).toEqual([
      { account_id: "acct", conversation_json: '{"messages":[]}' },
      { account_id: "other", conversation_json: '{"messages":[1]}' },
    ]);
    expect(
      db.prepare("SELECT id, native_id, signed_reasoning FROM stored_responses ORDER BY id").all(),
    ).toEqual([
      { id: "resp_native", native_id: "resp_native", signed_reasoning: null },
      { id: "resp_translated", native_id: null, signed_reasoning: null },
    ]);
    db.close();
  });

  it("take the wires a provider may speak from the list given at each open", () => {
    const db = openDatabase(join(dir, "wires.db"));
    checkWires(db, ["openai", "mock"]);
    const insert = db.prepare("INSERT INTO providers (id, wire) VALUES (?, ?)");
    insert.run("m", "mock");
    expect(() => insert.run("g", "gemini")).toThrow(/not a wire this gateway speaks/);
    expect(() => db.exec("UPDATE providers SET wire = 'nope'")).toThrow(/not a wire/);
    checkWires(db, ["openai", "mock", "gemini"]);
    insert.run("g", "gemini");
    expect(db.prepare("SELECT wire FROM providers ORDER BY id").pluck().all()).toEqual([
      "gemini",
      "mock",
    ]);
    db.close();
  });

  it("rebuild the providers table without its old CHECK, keeping the models that refer to it", () => {
    const path = join(dir, "v12.db");
    const old = new Database(path);
    for (const step of migrations.slice(0, 12)) old.exec(step);
    old.pragma("user_version = 12");
    old.exec(`INSERT INTO providers (id, wire) VALUES ('p', 'openai');
      INSERT INTO models (name, provider_id, upstream_model, modality, created_at)
      VALUES ('m', 'p', 'gpt', 'chat', 1);`);
    expect(() => old.exec("INSERT INTO providers (id, wire) VALUES ('g', 'gemini')")).toThrow(
      /CHECK/,
    );
    old.close();

    const db = openDatabase(path);
    db.exec("INSERT INTO providers (id, wire) VALUES ('g', 'gemini')");
    expect(db.prepare("SELECT name, provider_id FROM models").all()).toEqual([
      { name: "m", provider_id: "p" },
    ]);
    // References still hold after the rebuild.
    expect(() =>
      db.exec(
        "INSERT INTO models (name, provider_id, upstream_model, modality, created_at) VALUES ('x', 'none', 'x', 'chat', 1)",
      ),
    ).toThrow(/FOREIGN KEY/);
    db.close();
  });
});
