import type { PageQuery } from "./types.js";

/**
 * Music and video jobs are rows in `jobs`: the row is the queue, the state machine
 * (queued -> running -> completed | failed) and the finished output, so jobs survive a restart.
 * A removed job keeps its row (without its media and submission), so that the request log row of
 * its submission still names it; it is read and listed no more. A finished job is removed so once
 * it is past the retention (`expireFinished`).
 */
export type JobKind = "music" | "video" | "video_extension";
export type JobStatus = "queued" | "running" | "completed" | "failed";

/** Everything but the output's bytes, which only a download reads. */
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
  /**
   * The share of the work done, 0 to 100, as the job's runner last reported it: it only rises
   * (a job run again after its gateway stopped shows the most it reached), and 100 only once
   * completed.
   */
  progress: number;
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
    progress: 0,
  };
}

/** The share of a job's work done as it is shown: 100 once completed, and below it until then. */
export function shownProgress(job: Pick<JobRow, "status" | "progress">): number {
  return job.status === "completed" ? 100 : Math.min(99, job.progress);
}

/** A page of an account's jobs; `hasMore`: more jobs lie beyond it in its order. */
export interface JobPage {
  jobs: JobRow[];
  hasMore: boolean;
}

/** A finished job's file: its bytes (column `media`) and their content type. */
export interface JobOutput {
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
  /** The output (the music or video file) of a completed job of this account. */
  output(id: string, accountId: string): Promise<JobOutput | undefined>;
  /**
   * The account's jobs of `kinds`, a page at a time in the order they were submitted (`desc`:
   * newest first); undefined when `page.after` names none of them.
   */
  list(accountId: string, kinds: readonly JobKind[], page: PageQuery): Promise<JobPage | undefined>;
  /**
   * Ends a queued or running job as failed with the error `refund` returns, in one transaction,
   * whoever's lease it is under: its runner's renewal and `complete` then find it no longer theirs,
   * so it is neither charged nor refunded twice. False (nothing refunded) once the job has ended.
   */
  cancel(id: string, now: number, refund: (money: Money) => JobError): Promise<boolean>;
  /**
   * Removes a finished (completed or failed) job of this account: its media and its submission
   * are dropped and it is neither read nor listed again. False when the account has no such job
   * (unknown, removed already, or not finished).
   */
  remove(id: string, accountId: string, now: number): Promise<boolean>;
  /**
   * The retention: every finished (completed or failed) job, of any account, that finished at or
   * before `finishedBefore` is removed as `remove` removes one (at `now`). A queued or running
   * job is never touched, however old: it holds money and has a client waiting. Returns how many.
   */
  expireFinished(finishedBefore: number, now: number): Promise<number>;
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
   * Raises a running job's progress to `percent` (a whole number below 100; a lower one leaves
   * it); false when the job is not running under `instanceId`'s lease.
   */
  reportProgress(id: string, instanceId: string, percent: number): Promise<boolean>;
  /**
   * Marks a running job completed (progress 100) and runs `charge` in the same transaction; false (nothing
   * charged) when the job was not running under `instanceId`'s lease, or (Postgres) when its hold
   * ran out before it ended and the account can no longer pay: then the job failed instead.
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
  "id, account_id, kind, model, status, input_json, result_json, media_type, error, request_id, created_at, started_at, finished_at, lease_owner, lease_expires_at, progress";
