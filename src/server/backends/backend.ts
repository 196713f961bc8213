import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import type { Repositories } from "../../store/repositories.js";
import type { SecretBox } from "../../store/secret-box.js";
import type { AdmittedCount, GatewayStore, KeyPoolSync, LimitCounters } from "../../store/types.js";
import type { Ledger } from "../billing/ledger.js";

/**
 * Where a gateway keeps its state, and what only that backend can do: SQLite (one gateway per
 * file, decisions in this process) or Postgres (several gateways, decisions in the database).
 */
export interface Backend {
  kind: "sqlite" | "postgres";
  /** The database as messages name it (a path, or a URL without its password). */
  where: string;
  store: GatewayStore;
  repos: Repositories;
  ledger: Ledger;
  /**
   * The database's secret key, which every gateway on it holds: what one seals (a compaction's
   * summary) any of them opens, after a restart too.
   */
  secrets: SecretBox;
  /** Counters the limits share with every other gateway; undefined: this process's own. */
  counters?: LimitCounters;
  /**
   * Requests the request log has admitted from `since` on, per window of `windowMs`: where the
   * counters are this process's own, they start from these (a restart grants no new minute).
   */
  admittedSince?(since: number, windowMs: number): AdmittedCount[];
  /** Provider key cooldowns and concurrency shared with every other gateway. */
  keyPoolSync?: KeyPoolSync;
  /** This gateway's id among those on the database (job leases, holds). */
  instanceId: string;
  /** Background upkeep that starts once the gateway serves (SQLite's WAL checkpoints). */
  startUpkeep(): void;
  close(): Promise<void>;
  /**
   * Closes a backend whose gateway never served (its start was refused), and removes what
   * opening it made: a refused start leaves no file behind.
   */
  abandon(): Promise<void>;
}

/** Unique among the gateways on one database, and readable in its tables: host, pid, random. */
export function instanceId(): string {
  return `${hostname()}-${process.pid}-${randomBytes(3).toString("hex")}`;
}
