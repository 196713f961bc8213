import { mkdtempSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { fileIdentity } from "../storage-fault.js";
import { startCheckpointer } from "./checkpointer.js";
import { openDatabase } from "./db.js";

const dir = mkdtempSync(join(tmpdir(), "gateway-checkpoint-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("the checkpoint worker", () => {
  it("copies the WAL into the database file while the main connection only commits", async () => {
    const path = join(dir, "g.db");
    const db = openDatabase(path);
    const checkpointer = startCheckpointer(db, path, 20);
    db.exec("CREATE TABLE filler (v TEXT)");
    const insert = db.prepare("INSERT INTO filler (v) VALUES (?)");
    const before = statSync(path).size;
    for (let i = 0; i < 500; i++) insert.run("x".repeat(2000));
    // ~1 MB went to the WAL; the main connection's own threshold (20,000 pages) is far away.
    let size = statSync(path).size;
    for (let i = 0; i < 100 && size < before + 900_000; i++) {
      await new Promise((r) => setTimeout(r, 20));
      size = statSync(path).size;
    }
    expect(size).toBeGreaterThan(before + 900_000);
    await checkpointer.stop();
    expect((db.prepare("SELECT count(*) AS n FROM filler").get() as { n: number }).n).toBe(500);
    db.close();
  });

  it("never checkpoints into another file moved to the database's path (a restore)", async () => {
    const path = join(dir, "restore.db");
    const db = openDatabase(path);
    const opened = fileIdentity(path);
    db.exec("CREATE TABLE filler (v TEXT)");
    const backup = readFileSync(path);
    const insert = db.prepare("INSERT INTO filler (v) VALUES (?)");
    for (let i = 0; i < 200; i++) insert.run("x".repeat(2000));
    // An older copy moved over the path, as a restore does; the WAL at the path is still the
    // opened file's. The worker starts after the move, as it may on a busy machine.
    writeFileSync(join(dir, "restored.db"), backup);
    renameSync(join(dir, "restored.db"), path);
    const checkpointer = startCheckpointer(db, path, 20, opened);
    await new Promise((r) => setTimeout(r, 400));
    await checkpointer.stop();
    expect(readFileSync(path).equals(backup)).toBe(true);
    db.close();
  });
});
