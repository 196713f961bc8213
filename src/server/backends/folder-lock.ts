import { createHash } from "node:crypto";
import { realpathSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type FileLock, lockFile } from "../../store/sqlite/file-lock.js";

export type FolderLock = FileLock;

/** Long enough for the winner of two starts at once to take the lock the loser let go of. */
const lockWaitMs = 250;

/** The lock file of the folder `dir`, in the system's temporary directory. */
export function folderLockFile(dir: string): string {
  const named = createHash("sha256").update(realpathSync(dir)).digest("hex").slice(0, 32);
  return join(tmpdir(), `model-gateway-folder-${named}.lock`);
}

/**
 * Takes a lock on the folder `dir` for this process (see lockFile): `shared` with any number of
 * holders, or `exclusive`, alone; undefined when it is held the other way. The lock's file is in
 * the system's temporary directory, named by the folder's real path, so that the folder (a test
 * kit's cassettes, committed with the project) holds nothing of it. It goes with its last
 * holder; one a killed gateway left is taken over, and stderr says so.
 */
export function lockFolder(dir: string, mode: "exclusive" | "shared"): FolderLock | undefined {
  const file = folderLockFile(dir);
  return lockFile(file, lockWaitMs, mode, {
    takenOver: (pid) =>
      console.error(
        `cassettes: ${dir}: the lock of a gateway that is gone (pid ${pid}, stopped without letting go of it) was taken over: ${file}`,
      ),
  });
}
