import {
  chmodSync,
  closeSync,
  fchmodSync,
  fsyncSync,
  linkSync,
  mkdirSync,
  openSync,
  renameSync,
  rmSync,
  writeSync,
} from "node:fs";

/**
 * Every file the gateway writes holds secrets or money (keys, BYOK credentials, settlements,
 * media, cassettes), so each is readable by its owner only, whatever the umask. Writers of new
 * files go through these helpers.
 */
const privateFileMode = 0o600;
const privateDirMode = 0o700;

/**
 * Opens `path` with `flags` (as `fs.openSync`), creating it owner-only; a file that already
 * existed with wider permissions is tightened. Returns the descriptor.
 */
export function openPrivateFile(path: string, flags: string): number {
  const fd = openSync(path, flags, privateFileMode);
  try {
    // The mode given to open is filtered by the umask and ignored for an existing file.
    fchmodSync(fd, privateFileMode);
  } catch (err) {
    closeSync(fd);
    throw err;
  }
  return fd;
}

/** Creates `path` empty and owner-only if it is missing; tightens it if it exists. */
export function ensurePrivateFile(path: string): void {
  closeSync(openPrivateFile(path, "a"));
}

/** Tightens a file some other code created (SQLite's WAL, say); a missing file is fine. */
export function tightenPrivateFile(path: string): void {
  try {
    chmodSync(path, privateFileMode);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
  }
}

/** A directory only its owner can list and enter, created with its parents when missing. */
export function makePrivateDir(path: string): void {
  mkdirSync(path, { recursive: true, mode: privateDirMode });
  chmodSync(path, privateDirMode);
}

/**
 * Writes a whole owner-only file through a temporary file and a rename, so a crash leaves the old
 * file or the new one, never half of one, and the content is never readable by others.
 */
export function writePrivateFile(path: string, data: string | Uint8Array): void {
  const temp = `${path}.${process.pid}.tmp`;
  try {
    writeWhole(temp, data);
    renameSync(temp, path);
  } catch (err) {
    rmSync(temp, { force: true });
    throw err;
  }
}

/**
 * Writes a whole owner-only file at `path` only if there is none: false, and nothing written, when
 * one is there already. Of writers that race for one path, the first to finish keeps it whole
 * (a hard link of a finished temporary file: the kernel refuses a link onto a name that exists).
 */
export function createPrivateFile(path: string, data: string | Uint8Array): boolean {
  const temp = `${path}.${process.pid}.tmp`;
  try {
    writeWhole(temp, data);
    linkSync(temp, path);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "EEXIST") return false;
    throw err;
  } finally {
    rmSync(temp, { force: true });
  }
}

function writeWhole(path: string, data: string | Uint8Array): void {
  const fd = openPrivateFile(path, "w");
  try {
    const bytes = typeof data === "string" ? Buffer.from(data) : data;
    let written = 0;
    while (written < bytes.length) written += writeSync(fd, bytes, written);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}
