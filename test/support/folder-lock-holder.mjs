// A process that holds a cassette folder's lock as a gateway does, through the built module
// (`npm run build` first), for tests of the lock between processes:
//
//   node folder-lock-holder.mjs hold DIR MODE
//     takes the lock (MODE: shared or exclusive), prints {"pid","held"} as one line, and holds it
//     until SIGTERM, when it lets go and exits
//   node folder-lock-holder.mjs rounds DIR SYNC ME OTHER ROUNDS
//     ROUNDS times: takes a shared lock, waits until OTHER holds it too, and lets go at the same
//     moment as OTHER (both wait on files in SYNC); then prints {"pid","refused","left"}: the
//     takes refused, and the rounds after which the lock was still there once both had let go
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { folderLockFile, lockFolder } from "../../dist/server/backends/folder-lock.js";

const [command, dir, ...rest] = process.argv.slice(2);

/** Waits, without the event loop, until `path` exists; throws after 10 s (the other side died). */
function awaitFile(path) {
  const cell = new Int32Array(new SharedArrayBuffer(4));
  for (let waited = 0; !existsSync(path); waited++) {
    if (waited > 100_000) throw new Error(`${path} did not come`);
    Atomics.wait(cell, 0, 0, 0.1);
  }
}

if (command === "hold") {
  const lock = lockFolder(dir, rest[0]);
  // Listening before the line that tells the test it may stop this holder.
  if (lock) {
    process.on("SIGTERM", () => {
      lock.release();
      process.exit(0);
    });
    setInterval(() => {}, 60_000);
  }
  process.stdout.write(`${JSON.stringify({ pid: process.pid, held: lock !== undefined })}\n`);
} else if (command === "rounds") {
  const [sync, me, other, rounds] = rest;
  let refused = 0;
  const left = [];
  for (let round = 0; round < Number(rounds); round++) {
    const lock = lockFolder(dir, "shared");
    if (!lock) refused++;
    const step = (name) => {
      writeFileSync(join(sync, `${me}-${round}-${name}`), "");
      awaitFile(join(sync, `${other}-${round}-${name}`));
    };
    step("held");
    lock?.release();
    step("released");
    if (existsSync(folderLockFile(dir))) left.push(round);
    step("looked");
  }
  process.stdout.write(`${JSON.stringify({ pid: process.pid, refused, left })}\n`);
}
