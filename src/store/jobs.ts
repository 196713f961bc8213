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

export interface JobMedia {
  media: Buffer;
  media_type: string;
}

/**
 * The job queue. Each method is one transaction; a job's end and its charge (or refund) commit
 * together because the charge runs inside `complete` and `fail`.
 */
export interface JobsRepository {
  /**
   * Queues the job unless its account already has `unfinishedLimit` unfinished jobs of its kind
   * (counted in the same transaction as the insert, so parallel submissions cannot pass it).
   */
  insert(job: NewJob, unfinishedLimit?: number): Promise<boolean>;
  unfinishedCount(accountId: string, kind: JobKind): Promise<number>;
  /** A job of this account; another account's id reads as unknown. */
  get(id: string, accountId: string): Promise<JobRow | undefined>;
  /** The media of a completed job of this account. */
  media(id: string, accountId: string): Promise<JobMedia | undefined>;
  /** Moves the oldest queued job to running; the claim is exclusive. */
  claimNext(now: number): Promise<JobRow | undefined>;
  /**
   * Marks a running job completed and runs `charge` in the same transaction; false (nothing
   * charged) when the job was not running.
   */
  complete(
    id: string,
    result: JobResult,
    media: Uint8Array,
    now: number,
    charge: () => void,
  ): Promise<boolean>;
  /**
   * Runs `refund` and marks the job failed with the error it returns, in one transaction; false
   * when the job was already finished.
   */
  fail(id: string, now: number, refund: () => JobError): Promise<boolean>;
  /**
   * At start-up: work that was running when the process stopped goes back to the queue; returns
   * every unfinished job, so their holds can be taken back.
   */
  requeueInterrupted(): Promise<JobRow[]>;
}

const columns =
  "id, account_id, kind, model, status, input_json, result_json, media_type, error, request_id, created_at, started_at, finished_at";

export class SqliteJobs implements JobsRepository {
  private readonly insertRow: Statement;
  private readonly unfinishedOfKind: Statement;
  private readonly byId: Statement;
  private readonly mediaOf: Statement;
  private readonly nextQueued: Statement;
  private readonly start: Statement;
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
    this.byId = db.prepare(`SELECT ${columns} FROM jobs WHERE id = ? AND account_id = ?`);
    this.mediaOf = db.prepare(
      "SELECT media, media_type FROM jobs WHERE id = ? AND account_id = ? AND status = 'completed'",
    );
    this.nextQueued = db.prepare(
      `SELECT ${columns} FROM jobs WHERE status = 'queued' ORDER BY created_at, rowid LIMIT 1`,
    );
    this.start = db.prepare(
      "UPDATE jobs SET status = 'running', started_at = ? WHERE id = ? AND status = 'queued'",
    );
    this.completeRow = db.prepare(
      `UPDATE jobs SET status = 'completed', result_json = ?, media = ?, media_type = ?, finished_at = ?
       WHERE id = ? AND status = 'running'`,
    );
    this.failRow = db.prepare(
      "UPDATE jobs SET status = 'failed', error = ?, finished_at = ? WHERE id = ? AND status IN ('queued', 'running')",
    );
    this.requeueRunning = db.prepare(
      "UPDATE jobs SET status = 'queued', started_at = NULL WHERE status = 'running'",
    );
    this.unfinished = db.prepare(
      `SELECT ${columns} FROM jobs WHERE status IN ('queued', 'running') ORDER BY created_at`,
    );
  }

  async insert(job: NewJob, unfinishedLimit?: number): Promise<boolean> {
    // IMMEDIATE: the count and the insert hold the write lock together, even across processes.
    return this.immediate(() => {
      if (
        unfinishedLimit !== undefined &&
        this.countUnfinished(job.accountId, job.kind) >= unfinishedLimit
      )
        return false;
      this.insertRow.run({
        id: job.id,
        account_id: job.accountId,
        kind: job.kind,
        model: job.model,
        input_json: JSON.stringify(job.input),
        request_id: job.requestId,
        created_at: job.now,
      });
      return true;
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

  async claimNext(now: number): Promise<JobRow | undefined> {
    return this.immediate(() => {
      const job = this.nextQueued.get() as JobRow | undefined;
      if (!job || this.start.run(now, job.id).changes === 0) return undefined;
      return { ...job, status: "running" as const, started_at: now };
    });
  }

  async complete(
    id: string,
    result: JobResult,
    media: Uint8Array,
    now: number,
    charge: () => void,
  ): Promise<boolean> {
    return this.immediate(() => {
      const done =
        this.completeRow.run(
          JSON.stringify(result),
          Buffer.from(media),
          result.content_type,
          now,
          id,
        ).changes > 0;
      if (done) charge();
      return done;
    });
  }

  async fail(id: string, now: number, refund: () => JobError): Promise<boolean> {
    return this.immediate(() => {
      const error = refund();
      return this.failRow.run(JSON.stringify(error), now, id).changes > 0;
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
