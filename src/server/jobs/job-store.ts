import type { Statement } from "better-sqlite3";
import type { DB } from "../../store/db.js";
import type { Reservation } from "../billing/ledger.js";
import { GatewayError } from "../errors.js";

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
  input_json: string;
  result_json: string | null;
  media_type: string | null;
  error: string | null;
  request_id: string | null;
  created_at: number;
  started_at: number | null;
  finished_at: number | null;
}

export interface JobRequest {
  prompt: string;
  /** Seconds to generate: the music's duration, the video's length, or the extension's. */
  seconds: number;
  /** For an extension: the finished video job it continues. */
  video_id?: string;
}

/**
 * The job's money hold, kept with the job so the runner (or the runner after a restart) can
 * settle it when the job ends. `reservation` is the admission's, kept here so a restart can restore the hold.
 */
export interface JobHold {
  reservation: Reservation;
  free: boolean;
  byokOnly: boolean;
  keyId: string;
  endpoint: string;
  worstCaseMicro: number;
  subscriptionModel: boolean;
}

export interface JobInput {
  request: JobRequest;
  hold: JobHold;
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

/** The spec's limit of unfinished music generations per account. */
export const musicConcurrencyLimit = 2;

/** The spec's answer to a third concurrent music generation: 429 with Retry-After 60. */
export function musicLimitReached(): GatewayError {
  return new GatewayError(
    429,
    "rate_limit_exceeded",
    `At most ${musicConcurrencyLimit} music generations may run at once per account; wait for one to finish.`,
    { retryAfter: 60 },
  );
}

const columns =
  "id, account_id, kind, model, status, input_json, result_json, media_type, error, request_id, created_at, started_at, finished_at";

export class JobStore {
  private readonly q: Record<string, Statement>;

  constructor(private readonly db: DB) {
    this.q = {
      insert: db.prepare(
        `INSERT INTO jobs (id, account_id, kind, model, status, input_json, request_id, created_at)
         VALUES (@id, @account_id, @kind, @model, 'queued', @input_json, @request_id, @created_at)`,
      ),
      unfinishedOfKind: db.prepare(
        "SELECT count(*) AS n FROM jobs WHERE account_id = ? AND kind = ? AND status IN ('queued', 'running')",
      ),
      byId: db.prepare(`SELECT ${columns} FROM jobs WHERE id = ? AND account_id = ?`),
      media: db.prepare(
        "SELECT media, media_type FROM jobs WHERE id = ? AND account_id = ? AND status = 'completed'",
      ),
      nextQueued: db.prepare(
        `SELECT ${columns} FROM jobs WHERE status = 'queued' ORDER BY created_at, rowid LIMIT 1`,
      ),
      start: db.prepare(
        "UPDATE jobs SET status = 'running', started_at = ? WHERE id = ? AND status = 'queued'",
      ),
      complete: db.prepare(
        `UPDATE jobs SET status = 'completed', result_json = ?, media = ?, media_type = ?, finished_at = ?
         WHERE id = ? AND status = 'running'`,
      ),
      fail: db.prepare(
        "UPDATE jobs SET status = 'failed', error = ?, finished_at = ? WHERE id = ? AND status IN ('queued', 'running')",
      ),
      requeueRunning: db.prepare(
        "UPDATE jobs SET status = 'queued', started_at = NULL WHERE status = 'running'",
      ),
      unfinished: db.prepare(
        `SELECT ${columns} FROM jobs WHERE status IN ('queued', 'running') ORDER BY created_at`,
      ),
    };
  }

  /**
   * Inserts a queued job. For music the count of unfinished ones is read in the same IMMEDIATE
   * transaction as the insert, so parallel submissions (even from two processes) cannot pass 2.
   */
  insert(job: {
    id: string;
    accountId: string;
    kind: JobKind;
    model: string;
    input: JobInput;
    now: number;
  }): void {
    this.transaction(() => {
      if (job.kind === "music") {
        const { n } = this.q.unfinishedOfKind.get(job.accountId, "music") as { n: number };
        if (n >= musicConcurrencyLimit) throw musicLimitReached();
      }
      this.q.insert.run({
        id: job.id,
        account_id: job.accountId,
        kind: job.kind,
        model: job.model,
        input_json: JSON.stringify(job.input),
        request_id: job.input.hold.reservation.id,
        created_at: job.now,
      });
    });
  }

  unfinishedMusic(accountId: string): number {
    return (this.q.unfinishedOfKind.get(accountId, "music") as { n: number }).n;
  }

  /** A job of this account; another account's id reads as unknown. */
  get(id: string, accountId: string): JobRow | undefined {
    return this.q.byId.get(id, accountId) as JobRow | undefined;
  }

  media(id: string, accountId: string): { media: Buffer; media_type: string } | undefined {
    return this.q.media.get(id, accountId) as { media: Buffer; media_type: string } | undefined;
  }

  /** Moves the oldest queued job to running; the conditional update makes a claim exclusive. */
  claimNext(now: number): JobRow | undefined {
    return this.transaction(() => {
      const job = this.q.nextQueued.get() as JobRow | undefined;
      if (!job || this.q.start.run(now, job.id).changes === 0) return undefined;
      return { ...job, status: "running" as const, started_at: now };
    });
  }

  complete(id: string, result: JobResult, media: Uint8Array, now: number): boolean {
    return (
      this.q.complete.run(JSON.stringify(result), Buffer.from(media), result.content_type, now, id)
        .changes > 0
    );
  }

  fail(id: string, error: JobError, now: number): boolean {
    return this.q.fail.run(JSON.stringify(error), now, id).changes > 0;
  }

  /** At start-up: work that was running when the process stopped starts again from the queue. */
  requeueRunning(): number {
    return this.q.requeueRunning.run().changes;
  }

  unfinished(): JobRow[] {
    return this.q.unfinished.all() as JobRow[];
  }

  transaction<T>(fn: () => T): T {
    return this.db.transaction(fn).immediate();
  }
}

export function jobInput(job: JobRow): JobInput {
  return JSON.parse(job.input_json) as JobInput;
}

const stores = new WeakMap<DB, JobStore>();

/** One JobStore per database, shared by the routes and the runner. */
export function jobStoreFor(db: DB): JobStore {
  let store = stores.get(db);
  if (!store) {
    store = new JobStore(db);
    stores.set(db, store);
  }
  return store;
}
