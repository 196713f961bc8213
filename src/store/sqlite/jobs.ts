import type { Statement } from "better-sqlite3";
import {
  type JobError,
  type JobKind,
  type JobOutput,
  type JobPage,
  type JobResult,
  type JobRow,
  type JobsRepository,
  jobColumns,
  type NewJob,
  queuedJobRow,
} from "../jobs.js";
import type { PageQuery } from "../types.js";
import type { DB } from "./db.js";
import { immediateTransactions } from "./immediate.js";

export class SqliteJobs implements JobsRepository<undefined> {
  private readonly insertRow: Statement;
  private readonly unfinishedOfKind: Statement;
  private readonly byId: Statement;
  private readonly outputOf: Statement;
  private readonly nextClaimable: Statement;
  private readonly leaseRow: Statement;
  private readonly renewRow: Statement;
  private readonly releaseRow: Statement;
  private readonly progressRow: Statement;
  private readonly leasedBy: Statement;
  private readonly completeRow: Statement;
  private readonly failRow: Statement;
  private readonly requeueRunning: Statement;
  private readonly unfinished: Statement;
  private readonly unfinishedById: Statement;
  private readonly removeRow: Statement;
  private readonly expireRows: Statement;
  private readonly position: Statement;
  private readonly page: Record<"asc" | "desc", ReturnType<typeof pageStatements>>;
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
    this.byId = db.prepare(
      `SELECT ${jobColumns} FROM jobs WHERE id = ? AND account_id = ? AND deleted_at IS NULL`,
    );
    this.outputOf = db.prepare(
      `SELECT media, media_type FROM jobs
        WHERE id = ? AND account_id = ? AND status = 'completed' AND deleted_at IS NULL`,
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
    this.progressRow = db.prepare(
      `UPDATE jobs SET progress = max(progress, ?)
        WHERE id = ? AND status = 'running' AND lease_owner = ?`,
    );
    this.leasedBy = db.prepare(
      "SELECT 1 FROM jobs WHERE id = ? AND status = 'running' AND lease_owner = ?",
    );
    this.completeRow = db.prepare(
      `UPDATE jobs SET status = 'completed', result_json = ?, media = ?, media_type = ?, finished_at = ?,
         progress = 100
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
    this.unfinishedById = db.prepare(
      "SELECT 1 FROM jobs WHERE id = ? AND status IN ('queued', 'running')",
    );
    this.removeRow = db.prepare(
      `UPDATE jobs SET media = NULL, result_json = NULL, input_json = '{}', deleted_at = ?
        WHERE id = ? AND account_id = ? AND status IN ('completed', 'failed') AND deleted_at IS NULL`,
    );
    this.expireRows = db.prepare(
      `UPDATE jobs SET media = NULL, result_json = NULL, input_json = '{}', deleted_at = ?
        WHERE status IN ('completed', 'failed') AND deleted_at IS NULL AND finished_at <= ?`,
    );
    this.position = db.prepare(
      `SELECT created_at, rowid AS position FROM jobs
        WHERE id = @id AND account_id = @account AND deleted_at IS NULL
          AND kind IN (SELECT value FROM json_each(@kinds))`,
    );
    this.page = { desc: pageStatements(db, "desc"), asc: pageStatements(db, "asc") };
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

  async output(id: string, accountId: string): Promise<JobOutput | undefined> {
    return this.outputOf.get(id, accountId) as JobOutput | undefined;
  }

  async list(
    accountId: string,
    kinds: readonly JobKind[],
    page: PageQuery,
  ): Promise<JobPage | undefined> {
    const where = { account: accountId, kinds: JSON.stringify(kinds) };
    let from: { created_at: number; position: number } | undefined;
    if (page.after !== undefined) {
      from = this.position.get({ ...where, id: page.after }) as typeof from;
      if (!from) return undefined;
    }
    const statements = this.page[page.order];
    // One row past the page says whether there is more.
    const limit = page.limit + 1;
    const rows = (
      from
        ? statements.after.all({ ...where, ...from, limit })
        : statements.first.all({ ...where, limit })
    ) as (JobRow & { position?: number })[];
    const hasMore = rows.length > page.limit;
    if (hasMore) rows.length = page.limit;
    for (const row of rows) delete row.position;
    return { jobs: rows, hasMore };
  }

  async cancel(id: string, now: number, refund: (money: undefined) => JobError): Promise<boolean> {
    return this.immediate(() => {
      if (!this.unfinishedById.get(id)) return false;
      const error = refund(undefined);
      this.failRow.run(JSON.stringify(error), now, id);
      return true;
    });
  }

  async remove(id: string, accountId: string, now: number): Promise<boolean> {
    return this.removeRow.run(now, id, accountId).changes > 0;
  }

  async expireFinished(finishedBefore: number, now: number): Promise<number> {
    return this.expireRows.run(now, finishedBefore).changes;
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

  async reportProgress(id: string, instanceId: string, percent: number): Promise<boolean> {
    return this.progressRow.run(percent, id, instanceId).changes > 0;
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

/**
 * A page of an account's jobs of some kinds in `order`, from its first job or after one: a range
 * of the (account_id, created_at) index, in the order the rows were written within a millisecond.
 */
function pageStatements(db: DB, order: "asc" | "desc") {
  const [beyond, direction] = order === "desc" ? ["<", "DESC"] : [">", "ASC"];
  const select = (where: string) =>
    db.prepare(
      `SELECT rowid AS position, ${jobColumns} FROM jobs
        WHERE account_id = @account AND deleted_at IS NULL
          AND kind IN (SELECT value FROM json_each(@kinds))${where}
        ORDER BY created_at ${direction}, rowid ${direction} LIMIT @limit`,
    );
  return {
    first: select(""),
    after: select(
      ` AND created_at ${beyond}= @created_at
        AND (created_at ${beyond} @created_at OR rowid ${beyond} @position)`,
    ),
  };
}
