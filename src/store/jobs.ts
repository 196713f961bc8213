import type { Statement } from "better-sqlite3";
import type { DB } from "./db.js";
import { immediateTransactions } from "./immediate.js";

/**
 * Asynchronous media jobs are rows in `jobs`: the row is the queue, the state machine
 * (queued -> running -> completed | failed) and the finished media, so jobs survive a restart.
 */
export type JobKind = "music" | "video" | "video_extension";
export type JobStatus = "queued" | "running" | "completed" | "failed";

/** Everything but the media bytes, which only a download reads. */
export interface JobRow {
  id: string;
  account_id: string;
  kind: JobKind;
  model: string;
  status: JobStatus;
  /** The submission (request and money hold) as JSON: only the job runner reads into it. */
  input_json: string;
  result_json: string | null;
  media_type: string | null;
  error: string | null;
  request_id: string | null;
  created_at: number;
  started_at: number | null;
  finished_at: number | null;
  /** The gateway whose lease the job is (or was last) under, and until when (wall-clock ms). */
  lease_owner: string | null;
  lease_expires_at: number | null;
}

export interface JobResult {
  content_type: string;
  duration: number;
  bytes: number;
}

export interface JobError {
  code: string;
  message: string;
}

export interface NewJob {
  id: string;
  accountId: string;
  kind: JobKind;
  model: string;
  /** Kept as JSON in `input_json`. */
  input: unknown;
  /** The request log id of the submission's hold. */
  requestId: string;
  now: number;
}

/**
 * The row `insert` writes for `job`. A submission answers with it, not with a read after the
 * insert: another gateway's runner may have claimed the job by then, and the answer must show it
 * queued.
 */
export function queuedJobRow(job: NewJob): JobRow {
  return {
    id: job.id,
    account_id: job.accountId,
    kind: job.kind,
    model: job.model,
    status: "queued",
    input_json: JSON.stringify(job.input),
    result_json: null,
    media_type: null,
    error: null,
    request_id: job.requestId,
    created_at: job.now,
    started_at: null,
    finished_at: null,
    lease_owner: null,
    lease_expires_at: null,
  };
}

export interface JobMedia {
  media: Buffer;
  media_type: string;
}

/**
 * The job queue, shared by every gateway on the database. A gateway claims a job with a lease
 * (`leaseMs` on the wall clock, the database's on Postgres: the gateway's own clock can be moved
 * by the test kit) and renews it while the job runs; a job whose lease ran out is anybody's next
 * claim, so the work of a gateway that died is taken over. Only the lease's holder finishes a
 * job, and its charge (or refund) commits with the row, in one transaction.
 *
 * `Money` is what the charge callbacks are handed: nothing on SQLite, where the Ledger writes the
 * charge synchronously on the same connection; on Postgres, where holds are rows, the hold's
 * settlement to write in the job's transaction (postgres/jobs.ts).
 */
export interface JobsRepository<Money = unknown> {
  /**
   * Queues the job unless its account already has `unfinishedLimit` unfinished jobs of its kind
   * (counted in the same transaction as the insert, so parallel submissions cannot pass it).
   */
  /** The row written (`queuedJobRow`), or undefined when `unfinishedLimit` jobs are unfinished. */
  insert(job: NewJob, unfinishedLimit?: number): Promise<JobRow | undefined>;
  unfinishedCount(accountId: string, kind: JobKind): Promise<number>;
  /** A job of this account; another account's id reads as unknown. */
  get(id: string, accountId: string): Promise<JobRow | undefined>;
  /** The media of a completed job of this account. */
  media(id: string, accountId: string): Promise<JobMedia | undefined>;
  /**
   * Leases the oldest job that is queued, or running under a lease that ran out, to
   * `instanceId` for `leaseMs`, and marks it started at `now`; no two claims get the same job.
   */
  claimNext(instanceId: string, leaseMs: number, now: number): Promise<JobRow | undefined>;
  /** The lease runs `leaseMs` from now again; false when `instanceId` no longer holds it. */
  renewLease(id: string, instanceId: string, leaseMs: number): Promise<boolean>;
  /**
   * A gateway that stops gives its running job back to the queue at once, rather than leaving it
   * leased until the lease runs out; false when the job was not running under its lease.
   */
  releaseLease(id: string, instanceId: string): Promise<boolean>;
  /**
   * Marks a running job completed and runs `charge` in the same transaction; false (nothing
   * charged) when the job was not running under `instanceId`'s lease.
   */
  complete(
    id: string,
    instanceId: string,
    result: JobResult,
    media: Uint8Array,
    now: number,
    charge: (money: Money) => void,
  ): Promise<boolean>;
  /**
   * Runs `refund` and marks the job failed with the error it returns, in one transaction; false
   * (nothing refunded) when the job was not running under `instanceId`'s lease.
   */
  fail(
    id: string,
    instanceId: string,
    now: number,
    refund: (money: Money) => JobError,
  ): Promise<boolean>;
  /**
   * At start-up: running jobs whose gateway is gone go back to the queue (on SQLite every running
   * job, as one process serves a file and this one holds none yet; on Postgres those whose lease
   * ran out); returns every unfinished job, so their holds can be taken back.
   */
  requeueInterrupted(): Promise<JobRow[]>;
}

export const jobColumns =
  "id, account_id, kind, model, status, input_json, result_json, media_type, error, request_id, created_at, started_at, finished_at, lease_owner, lease_expires_at";

export class SqliteJobs implements JobsRepository<undefined> {
  private readonly insertRow: Statement;
  private readonly unfinishedOfKind: Statement;
  private readonly byId: Statement;
  private readonly mediaOf: Statement;
  private readonly nextClaimable: Statement;
  private readonly leaseRow: Statement;
  private readonly renewRow: Statement;
  private readonly releaseRow: Statement;
  private readonly leasedBy: Statement;
  private readonly completeRow: Statement;
  private readonly failRow: Statement;
  private readonly requeueRunning: Statement;
  private readonly unfinished: Statement;
  private readonly immediate: <T>(fn: () => T) => T;

  constructor(db: DB) {
    this.immediate = immediateTransactions(db);
    this.insertRow = db.prepare(
      `INSERT INTO jobs (id, account_id, kind, model, status, input_json, request_id, created_at)
       VALUES (@id, @account_id, @kind, @model, 'queued', @input_json, @request_id, @created_at)`,
    );
    this.unfinishedOfKind = db.prepare(
      "SELECT count(*) AS n FROM jobs WHERE account_id = ? AND kind = ? AND status IN ('queued', 'running')",
    );
    this.byId = db.prepare(`SELECT ${jobColumns} FROM jobs WHERE id = ? AND account_id = ?`);
    this.mediaOf = db.prepare(
      "SELECT media, media_type FROM jobs WHERE id = ? AND account_id = ? AND status = 'completed'",
    );
    // A running job without a lease was started before leases existed: nobody holds it.
    this.nextClaimable = db.prepare(
      `SELECT ${jobColumns} FROM jobs
        WHERE status = 'queued'
           OR (status = 'running' AND (lease_expires_at IS NULL OR lease_expires_at < @wall))
        ORDER BY created_at, rowid LIMIT 1`,
    );
    this.leaseRow = db.prepare(
      `UPDATE jobs SET status = 'running', started_at = @now, lease_owner = @owner,
         lease_expires_at = @wall + @leaseMs
        WHERE id = @id`,
    );
    this.renewRow = db.prepare(
      `UPDATE jobs SET lease_expires_at = ? WHERE id = ? AND status = 'running' AND lease_owner = ?`,
    );
    this.releaseRow = db.prepare(
      `UPDATE jobs SET status = 'queued', started_at = NULL, lease_owner = NULL,
         lease_expires_at = NULL
        WHERE id = ? AND status = 'running' AND lease_owner = ?`,
    );
    this.leasedBy = db.prepare(
      "SELECT 1 FROM jobs WHERE id = ? AND status = 'running' AND lease_owner = ?",
    );
    this.completeRow = db.prepare(
      `UPDATE jobs SET status = 'completed', result_json = ?, media = ?, media_type = ?, finished_at = ?
       WHERE id = ? AND status = 'running' AND lease_owner = ?`,
    );
    this.failRow = db.prepare(
      "UPDATE jobs SET status = 'failed', error = ?, finished_at = ? WHERE id = ?",
    );
    this.requeueRunning = db.prepare(
      `UPDATE jobs SET status = 'queued', started_at = NULL, lease_owner = NULL, lease_expires_at = NULL
        WHERE status = 'running'`,
    );
    this.unfinished = db.prepare(
      `SELECT ${jobColumns} FROM jobs WHERE status IN ('queued', 'running') ORDER BY created_at`,
    );
  }

  async insert(job: NewJob, unfinishedLimit?: number): Promise<JobRow | undefined> {
    // IMMEDIATE: the count and the insert hold the write lock together, even across processes.
    return this.immediate(() => {
      if (
        unfinishedLimit !== undefined &&
        this.countUnfinished(job.accountId, job.kind) >= unfinishedLimit
      )
        return undefined;
      const row = queuedJobRow(job);
      this.insertRow.run({
        id: row.id,
        account_id: row.account_id,
        kind: row.kind,
        model: row.model,
        input_json: row.input_json,
        request_id: row.request_id,
        created_at: row.created_at,
      });
      return row;
    });
  }

  async unfinishedCount(accountId: string, kind: JobKind): Promise<number> {
    return this.countUnfinished(accountId, kind);
  }

  async get(id: string, accountId: string): Promise<JobRow | undefined> {
    return this.byId.get(id, accountId) as JobRow | undefined;
  }

  async media(id: string, accountId: string): Promise<JobMedia | undefined> {
    return this.mediaOf.get(id, accountId) as JobMedia | undefined;
  }

  async claimNext(instanceId: string, leaseMs: number, now: number): Promise<JobRow | undefined> {
    // IMMEDIATE: the pick and the lease hold the write lock together, so no other claim sees the
    // job as free in between.
    return this.immediate(() => {
      const wall = Date.now();
      const job = this.nextClaimable.get({ wall }) as JobRow | undefined;
      if (!job) return undefined;
      this.leaseRow.run({ id: job.id, now, owner: instanceId, wall, leaseMs });
      return {
        ...job,
        status: "running" as const,
        started_at: now,
        lease_owner: instanceId,
        lease_expires_at: wall + leaseMs,
      };
    });
  }

  async renewLease(id: string, instanceId: string, leaseMs: number): Promise<boolean> {
    return this.renewRow.run(Date.now() + leaseMs, id, instanceId).changes > 0;
  }

  async releaseLease(id: string, instanceId: string): Promise<boolean> {
    return this.releaseRow.run(id, instanceId).changes > 0;
  }

  async complete(
    id: string,
    instanceId: string,
    result: JobResult,
    media: Uint8Array,
    now: number,
    charge: (money: undefined) => void,
  ): Promise<boolean> {
    return this.immediate(() => {
      const done =
        this.completeRow.run(
          JSON.stringify(result),
          Buffer.from(media),
          result.content_type,
          now,
          id,
          instanceId,
        ).changes > 0;
      if (done) charge(undefined);
      return done;
    });
  }

  async fail(
    id: string,
    instanceId: string,
    now: number,
    refund: (money: undefined) => JobError,
  ): Promise<boolean> {
    return this.immediate(() => {
      if (!this.leasedBy.get(id, instanceId)) return false;
      const error = refund(undefined);
      this.failRow.run(JSON.stringify(error), now, id);
      return true;
    });
  }

  async requeueInterrupted(): Promise<JobRow[]> {
    return this.immediate(() => {
      this.requeueRunning.run();
      return this.unfinished.all() as JobRow[];
    });
  }

  private countUnfinished(accountId: string, kind: JobKind): number {
    return (this.unfinishedOfKind.get(accountId, kind) as { n: number }).n;
  }
}
