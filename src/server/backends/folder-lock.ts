import { createHash, randomBytes } from "node:crypto";
import {
  mkdirSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmdirSync,
  unlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { performanceNow } from "../../host-timers.js";
import { processAlive } from "../../store/serve-record.js";

/** A hold on a folder, for as long as a gateway records into it. */
export interface FolderLock {
  /** Lets go: this holder's lock goes, and the folder's lock directory with its last holder. */
  release(): void;
}

/** Long enough for the winner of two starts at once to take the lock the loser let go of. */
const lockWaitMs = 250;
/** How long a start that found the lock held waits before it looks again. */
const retryMs = 10;

/**
 * The lock of the folder `dir`: a directory in the system's temporary directory, named by the
 * folder's real path, holding one file per holder.
 */
export function folderLockFile(dir: string): string {
  const named = createHash("sha256").update(realpathSync(dir)).digest("hex").slice(0, 32);
  return join(tmpdir(), `model-gateway-folder-${named}.locks`);
}

type Mode = "exclusive" | "shared";

/**
 * A holder's file: its name says which process holds the folder and how (`4242-<token>.shared`),
 * its content is the holder's own (its pid, token and mode), which only it writes.
 */
const holderName = /^(\d+)-[0-9a-f]+\.(exclusive|shared)$/;

/**
 * Takes a lock on the folder `dir` for this gateway: `shared` with any number of holders, or
 * `exclusive`, alone; undefined when it is held the other way (by another gateway of this process
 * too). The lock is in the system's temporary directory, never in the folder (a test kit's
 * cassettes, committed with the project). Each holder adds a file of its own, named by its pid,
 * then looks at the others: one of another way makes it take its file back and try again, until
 * `lockWaitMs` runs out. Of two starts at once, at least one sees the other: never both hold it.
 * A holder's release removes its own file only, as its content says it is its own, and the
 * directory when no one else holds the folder, so nothing is left behind. A file whose process
 * is gone was left by a gateway that did not let go (killed, crashed): it is taken over, and the
 * taker says so once on stderr.
 */
export function lockFolder(dir: string, mode: Mode): FolderLock | undefined {
  const locks = folderLockFile(dir);
  const token = randomBytes(8).toString("hex");
  const own = join(locks, `${process.pid}-${token}.${mode}`);
  const content = `${process.pid} ${token} ${mode}\n`;
  const deadline = performanceNow() + lockWaitMs;
  const takenOver = (pid: number) =>
    console.error(
      `cassettes: ${dir}: the lock of a gateway that is gone (pid ${pid}, stopped without letting go of it) was taken over: ${locks}`,
    );
  for (;;) {
    if (enter(locks, own, content)) {
      if (!heldOtherwise(locks, own, mode, takenOver))
        return { release: () => leave(locks, own, content) };
      leave(locks, own, content);
      if (performanceNow() >= deadline) return undefined;
      pause(retryMs);
    }
  }
}

/**
 * Adds the holder's file, the directory first if it is not there. False when the directory went
 * in between (its last holder let go): the caller tries again.
 */
function enter(locks: string, own: string, content: string): boolean {
  try {
    mkdirSync(locks, { mode: 0o700 });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
  }
  try {
    writeFileSync(own, content, { flag: "wx", mode: 0o600 });
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return false;
    throw err;
  }
}

/**
 * Whether a live holder beside `own` holds the folder the other way (any holder, for an
 * exclusive lock; an exclusive one, for a shared lock). A holder whose process is gone is taken
 * over: its file removed, and `takenOver` told its pid by whoever removed it.
 */
function heldOtherwise(
  locks: string,
  own: string,
  mode: Mode,
  takenOver: (pid: number) => void,
): boolean {
  let other = false;
  for (const name of readdirSync(locks)) {
    const holder = holderName.exec(name);
    if (!holder || join(locks, name) === own) continue;
    const pid = Number(holder[1]);
    if (!processAlive(pid)) {
      if (removed(join(locks, name))) takenOver(pid);
    } else if (mode === "exclusive" || holder[2] === "exclusive") other = true;
  }
  return other;
}

/** Removes the holder's file when it is still its own, then the directory if no one else is in it. */
function leave(locks: string, own: string, content: string): void {
  let mine = false;
  try {
    mine = readFileSync(own, "utf8") === content;
  } catch {
    // Gone already: nothing of this holder's is left.
  }
  if (mine) removed(own);
  try {
    rmdirSync(locks);
  } catch {
    // Another holder is in it (it removes the directory when it lets go), or it is gone.
  }
}

/** Removes `path`; false when it was gone already (another process removed it first). */
function removed(path: string): boolean {
  try {
    unlinkSync(path);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return false;
    throw err;
  }
}

/** Waits `ms` without returning to the event loop: a start takes its lock synchronously. */
function pause(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}
