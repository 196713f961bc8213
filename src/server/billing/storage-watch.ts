import { hasFreeSpace, isStorageFull, type StorageFault } from "../../store/storage-fault.js";

/** While the disk is full: how often space is looked for, and how much counts as space again. */
const probeEveryMs = 1000;
const recoveryFreeBytes = 1024 * 1024;

/**
 * Whether the database takes writes. A write that failed for want of space sets the fault (one
 * log line naming the database); a probe, at most once a second, clears it once the filesystem
 * has room and a commit lands.
 */
export class StorageWatch {
  private fault: StorageFault | null = null;
  private lastProbe = 0;

  /** `probe` commits what is queued, or a write that changes nothing; it throws if that fails. */
  constructor(
    private readonly path: string,
    private readonly probe: () => void,
  ) {}

  /**
   * Records a write that failed for want of disk space (from the ledger or from any other writer)
   * and logs it once. Returns false for any other error.
   */
  note(err: unknown): boolean {
    if (!isStorageFull(err)) return false;
    if (!this.fault) {
      const message = err instanceof Error ? err.message : String(err);
      this.fault = { path: this.path, message, since: Date.now() };
      // The first probe waits its turn too: one just after the failure would tell nothing new.
      this.lastProbe = this.fault.since;
      console.error(
        `gateway: cannot write ${this.path}: ${message}; requests get 503 storage_unavailable until space is freed`,
      );
    }
    return true;
  }

  /** Why requests cannot be recorded right now, or null: for readiness. */
  current(): StorageFault | null {
    this.recovered();
    return this.fault;
  }

  /** Whether writes can be recorded: true at once without a fault, else after a probe that lands. */
  recovered(): boolean {
    if (!this.fault) return true;
    const now = Date.now();
    if (now - this.lastProbe < probeEveryMs) return false;
    this.lastProbe = now;
    if (!hasFreeSpace(this.path, recoveryFreeBytes)) return false;
    try {
      this.probe();
      this.clear();
    } catch (err) {
      // Room for the write, and a failure of another kind: that one is not about space.
      if (!this.note(err)) this.clear();
    }
    return this.fault === null;
  }

  private clear(): void {
    if (!this.fault) return;
    console.error(`gateway: ${this.path} is writable again`);
    this.fault = null;
  }
}
