import { type FSWatcher, watch } from "node:fs";
import {
  type FileIdentity,
  fileIdentity,
  fileMoved,
  hasFreeSpace,
  type StorageFault,
  type StorageFaultKind,
  storageFaultKind,
} from "../../store/storage-fault.js";
import { GatewayError, storageUnavailable } from "../errors.js";

/** While the disk is full or failing: how often a write is tried again, and what counts as space. */
const probeEveryMs = 1000;
const recoveryFreeBytes = 1024 * 1024;
/** How often, at most, the database's path is compared with the file the gateway opened. */
const fileCheckEveryMs = 1000;

const afterFault: Record<StorageFaultKind, string> = {
  full: "until space is freed",
  failing: "until the disk takes writes again",
  lost: "",
  unreachable: "until the database is back",
};

/**
 * Whether the database takes writes. A write the disk refused (no space, read-only, I/O errors)
 * sets the fault (one log line naming the database); a probe, at most once a second, clears it
 * once a commit lands (on a full disk, once the filesystem also has room). The file itself is
 * watched: once the file the gateway opened is no longer the one at its path (deleted, or
 * replaced), nothing more is written and the fault stays until a restart opens the file now there.
 */
export class StorageWatch {
  private fault: StorageFault | null = null;
  private lastProbe = 0;
  private lastFileCheck = 0;
  private readonly opened: FileIdentity | undefined;
  private watcher: FSWatcher | undefined;

  /**
   * `probe` commits what is queued, or a write that changes nothing; it throws if that fails.
   * `stopWrites` makes the database connection refuse every write (its file is lost).
   */
  constructor(
    private readonly path: string,
    private readonly probe: () => void,
    private readonly stopWrites: () => void = () => {},
  ) {
    if (path === ":memory:" || path === "") return;
    this.opened = fileIdentity(path);
    try {
      // An unlink or a rename over the file is told at once where the OS can (inotify); the
      // check at most once a second covers the rest. The file changes on checkpoints too, and
      // each of those costs one stat.
      this.watcher = watch(path, { persistent: false }, () => this.checkFile(Date.now()));
      this.watcher.on("error", () => this.stopWatching());
    } catch {
      this.watcher = undefined;
    }
  }

  /**
   * Records a write the disk refused (from the ledger or from any other writer) and logs it once.
   * Returns false for any other error.
   */
  note(err: unknown): boolean {
    const kind = storageFaultKind(err);
    if (!kind) return false;
    if (!this.fault) {
      const message = err instanceof Error ? err.message : String(err);
      this.fault = { path: this.path, message, since: Date.now(), kind };
      // The first probe waits its turn too: one just after the failure would tell nothing new.
      this.lastProbe = this.fault.since;
      console.error(
        `gateway: cannot write ${this.path}: ${message}; requests get 503 storage_unavailable ${afterFault[kind]}`,
      );
    }
    return true;
  }

  /** The refusal for a request while writes cannot be recorded, saying why. */
  unavailable(): GatewayError {
    return storageUnavailable(this.fault?.kind ?? "full");
  }

  /** Why requests cannot be recorded right now, or null: for readiness. */
  current(): StorageFault | null {
    this.recovered();
    return this.fault;
  }

  /**
   * Whether writes can be recorded: true at once without a fault (the file is looked at once a
   * second at most), else after a probe that lands.
   */
  recovered(): boolean {
    const now = Date.now();
    if (!this.fault) {
      if (now - this.lastFileCheck >= fileCheckEveryMs) this.checkFile(now);
      return this.fault === null;
    }
    if (this.fault.kind === "lost") return false;
    if (now - this.lastProbe < probeEveryMs) return false;
    this.lastProbe = now;
    if (this.fault.kind === "full" && !hasFreeSpace(this.path, recoveryFreeBytes)) return false;
    try {
      this.probe();
      this.clear();
    } catch (err) {
      // Still refused (a queued batch's failure comes as its requests' answer), or a failure of
      // another kind, which is not about the disk.
      const refused = err instanceof GatewayError && err.code === "storage_unavailable";
      if (!this.note(err) && !refused) this.clear();
    }
    return this.fault === null;
  }

  /** Before a commit or a journal line: false once the file is lost (looked at once a second). */
  writable(): boolean {
    const now = Date.now();
    if (now - this.lastFileCheck >= fileCheckEveryMs) this.checkFile(now);
    return this.fault?.kind !== "lost";
  }

  close(): void {
    this.stopWatching();
  }

  private checkFile(now: number): void {
    this.lastFileCheck = now;
    if (!this.opened || this.fault?.kind === "lost") return;
    const moved = fileMoved(this.path, this.opened);
    if (!moved) return;
    this.fault = {
      path: this.path,
      message: `the database file was ${moved} while the gateway was serving`,
      since: now,
      kind: "lost",
    };
    this.stopWrites();
    this.stopWatching();
    console.error(
      `gateway: ${this.path} was ${moved} while the gateway was serving (the file it opened is no longer the one at that path); requests get 503 storage_unavailable and nothing more is written to it; restart the gateway to open the file now at that path`,
    );
  }

  private stopWatching(): void {
    this.watcher?.close();
    this.watcher = undefined;
  }

  private clear(): void {
    if (!this.fault) return;
    console.error(`gateway: ${this.path} is writable again`);
    this.fault = null;
  }
}
