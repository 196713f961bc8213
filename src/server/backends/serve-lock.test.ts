import { fork } from "node:child_process";
import { once } from "node:events";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { lockFile } from "../../store/sqlite/file-lock.js";
import { GatewayAlreadyRunning } from "./already-running.js";
import { lockDatabase } from "./serve-lock.js";

const dir = mkdtempSync(join(tmpdir(), "gateway-serve-lock-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/**
 * Another process holding `<db>-lock` for `holdMs` once it says so (a serve still starting, or one
 * that lost); with `remove`, it removes the file before it lets go (a start it gave up).
 */
async function heldElsewhere(db: string, holdMs: number, remove = false) {
  const script = join(dir, "hold.mjs");
  writeFileSync(
    script,
    `import { createRequire } from "node:module";
    import { rmSync } from "node:fs";
    const Database = createRequire(${JSON.stringify(join(process.cwd(), "package.json"))})("better-sqlite3");
    const lock = new Database(process.argv[2]);
    lock.pragma("journal_mode = MEMORY");
    lock.pragma("locking_mode = EXCLUSIVE");
    lock.exec("BEGIN EXCLUSIVE");
    lock.exec("COMMIT");
    process.send("held");
    setTimeout(() => {
      if (process.argv[4] === "remove") rmSync(process.argv[2]);
      lock.close();
      process.send("released");
    }, Number(process.argv[3]));
    process.on("disconnect", () => process.exit(0));`,
  );
  const child = fork(script, [`${db}-lock`, String(holdMs), remove ? "remove" : "keep"], {
    cwd: process.cwd(),
    stdio: ["ignore", "ignore", "inherit", "ipc"],
  });
  const exited = once(child, "exit").then(([code]) => {
    throw new Error(`the lock holder exited ${code} before holding the lock`);
  });
  await Promise.race([once(child, "message"), exited]);
  return child;
}

describe("lockDatabase", () => {
  it("takes the file once a holder that lets go within its tries has let go", async () => {
    const db = join(dir, "released.db");
    // One try waits 250 ms; the holder lets go after 350, within the second try.
    const holder = await heldElsewhere(db, 350);
    const lock = await lockDatabase(db);
    expect(lock).toBeDefined();
    expect(lockFile(`${db}-lock`, 0)).toBeUndefined();
    lock?.release();
    holder.kill();
  });

  it("holds the file at the path when the holder it waited for removed its own", async () => {
    const db = join(dir, "removed.db");
    const holder = await heldElsewhere(db, 300, true);
    // Waiting on the holder's file when it goes.
    const lock = lockFile(`${db}-lock`, 10_000);
    expect(lock).toBeDefined();
    // Not the removed file, which no third process would find: the one the path names.
    expect(existsSync(`${db}-lock`)).toBe(true);
    expect(lockFile(`${db}-lock`, 0)).toBeUndefined();
    lock?.release();
    holder.kill();
  });

  it("refuses a file held for longer than its tries", async () => {
    const db = join(dir, "held.db");
    const holder = await heldElsewhere(db, 10_000);
    await expect(lockDatabase(db)).rejects.toBeInstanceOf(GatewayAlreadyRunning);
    holder.kill();
  });
});
