import {
  copyFileSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterAll, describe, expect, it, vi } from "vitest";
import { fileIdentity } from "../storage-fault.js";
import { startCheckpointer } from "./checkpointer.js";
import { openDatabase } from "./db.js";

/** While set, the checkpointer's fsyncs wait here (a slow disk) until a test lets each one go. */
let heldSyncs: (() => void)[] | undefined;
vi.mock("node:fs", async (importOriginal) => {
  const fs = await importOriginal<typeof import("node:fs")>();
  const fsync = (fd: number, done: (err: NodeJS.ErrnoException | null) => void) =>
    heldSyncs ? heldSyncs.push(() => fs.fsync(fd, done)) : fs.fsync(fd, done);
  return { ...fs, fsync, default: { ...fs, fsync } };
});

const dir = mkdtempSync(join(tmpdir(), "gateway-checkpoint-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("the checkpointer", () => {
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

  it("checkpoints what was committed before it started", async () => {
    const path = join(dir, "before.db");
    const db = openDatabase(path);
    db.exec("CREATE TABLE filler (v TEXT)");
    const insert = db.prepare("INSERT INTO filler (v) VALUES (?)");
    const before = statSync(path).size;
    for (let i = 0; i < 100; i++) insert.run("x".repeat(2000));
    const checkpointer = startCheckpointer(db, path, 20);
    let size = statSync(path).size;
    for (let i = 0; i < 100 && size < before + 180_000; i++) {
      await new Promise((r) => setTimeout(r, 20));
      size = statSync(path).size;
    }
    expect(size).toBeGreaterThan(before + 180_000);
    await checkpointer.stop();
    db.close();
  });

  it("leaves every commit in the database file, commits made between its checkpoints included", async () => {
    const path = join(dir, "interleaved.db");
    const db = openDatabase(path);
    db.exec("CREATE TABLE filler (v TEXT)");
    const checkpointer = startCheckpointer(db, path, 5);
    const insert = db.prepare("INSERT INTO filler (v) VALUES (?)");
    // Commits in many event-loop turns, so checkpoints run (and sync) between and among them.
    for (let turn = 0; turn < 40; turn++) {
      for (let i = 0; i < 10; i++) insert.run("x".repeat(1500));
      await new Promise((r) => setTimeout(r, 3));
    }
    await checkpointer.stop();
    // The file alone, without its WAL: what a checkpoint copied is all it has.
    const copy = join(dir, "interleaved-copy.db");
    copyFileSync(path, copy);
    const alone = new Database(copy, { readonly: true });
    expect(alone.pragma("integrity_check", { simple: true })).toBe("ok");
    expect((alone.prepare("SELECT count(*) AS n FROM filler").get() as { n: number }).n).toBe(400);
    alone.close();
    db.close();
  });

  it.runIf(existsSync("/proc/self/task"))("runs without a thread of its own", async () => {
    const path = join(dir, "threads.db");
    const db = openDatabase(path);
    db.exec("CREATE TABLE filler (v TEXT)");
    // libuv's thread pool, where the syncs run, starts with the process's first file operation.
    await readFile(path);
    const threads = () => readdirSync("/proc/self/task").length;
    const before = threads();
    const checkpointer = startCheckpointer(db, path, 5);
    const insert = db.prepare("INSERT INTO filler (v) VALUES (?)");
    let most = before;
    for (let turn = 0; turn < 20; turn++) {
      insert.run("x".repeat(1500));
      await new Promise((r) => setTimeout(r, 5));
      most = Math.max(most, threads());
    }
    await checkpointer.stop();
    // A thread (a worker's V8 isolate) costs about 9 MB resident; the timer and the pool cost none.
    expect(most).toBe(before);
    expect(statSync(path).size).toBeGreaterThan(20 * 1500);
    db.close();
  });

  it("copies nothing before the WAL is on disk, and no writer restarts the WAL over the copy before the file is synced", async () => {
    const path = join(dir, "ordered.db");
    const db = openDatabase(path);
    db.exec("CREATE TABLE filler (v TEXT)");
    const insert = db.prepare("INSERT INTO filler (v) VALUES (?)");
    const held: (() => void)[] = [];
    heldSyncs = held;
    const checkpointer = startCheckpointer(db, path, 5);
    try {
      for (let i = 0; i < 50; i++) insert.run("x".repeat(2000));
      const next = async (count: number) => {
        for (let i = 0; i < 500 && held.length < count; i++)
          await new Promise((r) => setTimeout(r, 5));
        expect(held.length).toBe(count);
      };
      const fileBefore = readFileSync(path);
      await next(1);
      // Nothing is copied into the database file before the WAL is on disk.
      expect(readFileSync(path).equals(fileBefore)).toBe(true);
      // The WAL's sync goes; the frames are copied and the database file's sync waits.
      held[0]!();
      await next(2);
      expect(readFileSync(path).equals(fileBefore)).toBe(false);
      const framesBefore = (db.pragma("wal_checkpoint(PASSIVE)") as { log: number }[])[0]!.log;
      insert.run("after the copy");
      // A restarted WAL would hold this commit's frames alone, written over the copied ones.
      const framesAfter = (db.pragma("wal_checkpoint(PASSIVE)") as { log: number }[])[0]!.log;
      expect(framesAfter).toBeGreaterThan(framesBefore);
      heldSyncs = undefined;
      held[1]!();
    } finally {
      heldSyncs = undefined;
      for (const go of held.splice(0)) go();
    }
    await checkpointer.stop();
    expect((db.prepare("SELECT count(*) AS n FROM filler").get() as { n: number }).n).toBe(51);
    db.close();
  });
});
