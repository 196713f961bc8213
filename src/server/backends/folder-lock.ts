import { createHash } from "node:crypto";
import { realpathSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type FileLock, lockFile } from "../../store/sqlite/file-lock.js";

export type FolderLock = FileLock;

/** Long enough for the winner of two starts at once to take the lock the loser let go of. */
const lockWaitMs = 250;

/**
 * Takes a lock on the folder `dir` for this process (see lockFile): `shared` with any number of
 * holders, or `exclusive`, alone; undefined when it is held the other way. The lock's file is in
 * the system's temporary directory, named by the folder's real path, so that the folder (a test
 * kit's cassettes, committed with the project) holds nothing of it.
 */
export function lockFolder(dir: string, mode: "exclusive" | "shared"): FolderLock | undefined {
  const named = createHash("sha256").update(realpathSync(dir)).digest("hex").slice(0, 32);
  return lockFile(join(tmpdir(), `model-gateway-folder-${named}.lock`), lockWaitMs, mode);
}
