import type pg from "pg";
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
import type { PageQuery, Reservation, SettleInput } from "../types.js";
import { settleReservation, unpaidLate } from "./money.js";
import { inTransaction, lockFor, type Queryable } from "./transaction.js";

/**
 * What a job's end hands its charge callback on Postgres, where a hold is a row: the job's hold
 * settled (charged up to its amount, the rest released, the request logged, as
 * `PostgresMoney.settle` does) in the transaction that ends the job.
 */
export interface PostgresJobMoney {
  settle(reservation: Reservation, outcome: SettleInput): void;
}

/** A job that is nobody's: queued, or running under a lease that ran out (or none at all). */
const claimable = `status = 'queued'
  OR (status = 'running' AND (lease_expires_at IS NULL OR lease_expires_at < gateway_now_ms()))`;

const failJob = "UPDATE jobs SET status = 'failed', error = $2, finished_at = $3 WHERE id = $1";

// A page of an account's jobs of some kinds in either order, from its first job or after one (its
// submission time, then `seq`): one range of the (account_id, created_at, seq) index.
const listed = `SELECT ${jobColumns}, seq AS position FROM jobs
  WHERE account_id = $1 AND kind = ANY($2::text[]) AND deleted_at IS NULL`;
const pages = {
  desc: {
    first: `${listed} ORDER BY created_at DESC, seq DESC LIMIT $3`,
    after: `${listed} AND (created_at, seq) < ($4, $5) ORDER BY created_at DESC, seq DESC LIMIT $3`,
  },
  asc: {
    first: `${listed} ORDER BY created_at ASC, seq ASC LIMIT $3`,
    after: `${listed} AND (created_at, seq) > ($4, $5) ORDER BY created_at ASC, seq ASC LIMIT $3`,
  },
};

/**
 * The job queue on Postgres (see JobsRepository). A claim locks the row it takes and skips rows
 * another claim holds (`FOR UPDATE SKIP LOCKED`), so gateways claiming at once never wait on
 * each other or get the same job. Leases run on the database's clock.
 */
export class PostgresJobs implements JobsRepository<PostgresJobMoney> {
  constructor(private readonly pool: pg.Pool) {}

  async insert(job: NewJob, unfinishedLimit?: number): Promise<JobRow | undefined> {
    return inTransaction(this.pool, async (client) => {
      if (unfinishedLimit !== undefined) {
        // Parallel submissions of the account, on any gateway, count one after the other.
        await lockFor(client, "jobSubmissions", `${job.accountId}\n${job.kind}`);
        if ((await this.countUnfinished(client, job.accountId, job.kind)) >= unfinishedLimit)
          return undefined;
      }
      const row = queuedJobRow(job);
      await client.query({
        name: "jobs_insert",
        text: `INSERT INTO jobs (id, account_id, kind, model, status, input_json, request_id, created_at)
          VALUES ($1, $2, $3, $4, 'queued', $5, $6, $7)`,
        values: [
          row.id,
          row.account_id,
          row.kind,
          row.model,
          row.input_json,
          row.request_id,
          row.created_at,
        ],
      });
      return row;
    });
  }

  async unfinishedCount(accountId: string, kind: JobKind): Promise<number> {
    return this.countUnfinished(this.pool, accountId, kind);
  }

  async get(id: string, accountId: string): Promise<JobRow | undefined> {
    const result = await this.pool.query<JobRow>({
      name: "jobs_get",
      text: `SELECT ${jobColumns} FROM jobs WHERE id = $1 AND account_id = $2 AND deleted_at IS NULL`,
      values: [id, accountId],
    });
    return result.rows[0];
  }

  async output(id: string, accountId: string): Promise<JobOutput | undefined> {
    const result = await this.pool.query<JobOutput>({
      name: "jobs_media",
      text: `SELECT media, media_type FROM jobs
        WHERE id = $1 AND account_id = $2 AND status = 'completed' AND deleted_at IS NULL`,
      values: [id, accountId],
    });
    return result.rows[0];
  }

  async list(
    accountId: string,
    kinds: readonly JobKind[],
    page: PageQuery,
  ): Promise<JobPage | undefined> {
    // One row past the page says whether there is more.
    const values: unknown[] = [accountId, kinds, page.limit + 1];
    if (page.after !== undefined) {
      const from = await this.pool.query<{ created_at: number; position: number }>({
        name: "jobs_list_position",
        text: `SELECT created_at, seq AS position FROM jobs
          WHERE id = $1 AND account_id = $2 AND kind = ANY($3::text[]) AND deleted_at IS NULL`,
        values: [page.after, accountId, kinds],
      });
      if (from.rowCount !== 1) return undefined;
      values.push(from.rows[0].created_at, from.rows[0].position);
    }
    const start = page.after === undefined ? "first" : "after";
    const result = await this.pool.query<JobRow & { position?: number }>({
      name: `jobs_list_${page.order}_${start}`,
      text: pages[page.order][start],
      values,
    });
    const rows = result.rows;
    const hasMore = rows.length > page.limit;
    if (hasMore) rows.length = page.limit;
    for (const row of rows) delete row.position;
    return { jobs: rows, hasMore };
  }

  async cancel(
    id: string,
    now: number,
    refund: (money: PostgresJobMoney) => JobError,
  ): Promise<boolean> {
    return inTransaction(this.pool, async (client) => {
      // Locked first: a runner's `complete` or `fail` waits, then finds the job no longer running.
      const open = await client.query({
        name: "jobs_lock_unfinished",
        text: "SELECT 1 FROM jobs WHERE id = $1 AND status IN ('queued', 'running') FOR UPDATE",
        values: [id],
      });
      if (open.rowCount !== 1) return false;
      const { answer: error } = await settleIn(client, refund);
      await client.query({
        name: "jobs_fail",
        text: failJob,
        values: [id, JSON.stringify(error), now],
      });
      return true;
    });
  }

  async remove(id: string, accountId: string, now: number): Promise<boolean> {
    const result = await this.pool.query({
      name: "jobs_remove",
      text: `UPDATE jobs SET media = NULL, result_json = NULL, input_json = '{}', deleted_at = $3
        WHERE id = $1 AND account_id = $2 AND status IN ('completed', 'failed')
          AND deleted_at IS NULL`,
      values: [id, accountId, now],
    });
    return result.rowCount === 1;
  }

  async expireFinished(finishedBefore: number, now: number): Promise<number> {
    const result = await this.pool.query({
      name: "jobs_expire",
      text: `UPDATE jobs SET media = NULL, result_json = NULL, input_json = '{}', deleted_at = $2
        WHERE status IN ('completed', 'failed') AND deleted_at IS NULL AND finished_at <= $1`,
      values: [finishedBefore, now],
    });
    return result.rowCount ?? 0;
  }

  async claimNext(instanceId: string, leaseMs: number, now: number): Promise<JobRow | undefined> {
    const result = await this.pool.query<JobRow>({
      name: "jobs_claim",
      text: `UPDATE jobs SET status = 'running', started_at = $3, lease_owner = $1,
          lease_expires_at = gateway_now_ms() + $2
        WHERE id = (SELECT id FROM jobs WHERE ${claimable}
          ORDER BY created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
        RETURNING ${jobColumns}`,
      values: [instanceId, leaseMs, now],
    });
    return result.rows[0];
  }

  async renewLease(id: string, instanceId: string, leaseMs: number): Promise<boolean> {
    const result = await this.pool.query({
      name: "jobs_renew",
      text: `UPDATE jobs SET lease_expires_at = gateway_now_ms() + $3
        WHERE id = $1 AND status = 'running' AND lease_owner = $2`,
      values: [id, instanceId, leaseMs],
    });
    return result.rowCount === 1;
  }

  async releaseLease(id: string, instanceId: string): Promise<boolean> {
    const result = await this.pool.query({
      name: "jobs_release",
      text: `UPDATE jobs SET status = 'queued', started_at = NULL, lease_owner = NULL,
          lease_expires_at = NULL
        WHERE id = $1 AND status = 'running' AND lease_owner = $2`,
      values: [id, instanceId],
    });
    return result.rowCount === 1;
  }

  async reportProgress(id: string, instanceId: string, percent: number): Promise<boolean> {
    const result = await this.pool.query({
      name: "jobs_progress",
      text: `UPDATE jobs SET progress = GREATEST(progress, $3)
        WHERE id = $1 AND status = 'running' AND lease_owner = $2`,
      values: [id, instanceId, percent],
    });
    return result.rowCount === 1;
  }

  async complete(
    id: string,
    instanceId: string,
    result: JobResult,
    media: Uint8Array,
    now: number,
    charge: (money: PostgresJobMoney) => void,
  ): Promise<boolean> {
    return inTransaction(this.pool, async (client) => {
      const done = await client.query({
        name: "jobs_complete",
        text: `UPDATE jobs SET status = 'completed', result_json = $3, media = $4, media_type = $5,
            finished_at = $6, progress = 100
          WHERE id = $1 AND status = 'running' AND lease_owner = $2`,
        values: [
          id,
          instanceId,
          JSON.stringify(result),
          Buffer.from(media),
          result.content_type,
          now,
        ],
      });
      if (done.rowCount !== 1) return false;
      if (await settleIn(client, charge).then(({ unpaid }) => unpaid)) {
        // Its hold ran out before it ended and the account can no longer pay: the job fails
        // (its media goes with it), as a late answer is not handed over (gateway_settle_late).
        await client.query({
          name: "jobs_fail_unpaid",
          text: "UPDATE jobs SET status = 'failed', error = $2, media = NULL WHERE id = $1",
          values: [id, JSON.stringify(lateJobUnpaid)],
        });
        return false;
      }
      return true;
    });
  }

  async fail(
    id: string,
    instanceId: string,
    now: number,
    refund: (money: PostgresJobMoney) => JobError,
  ): Promise<boolean> {
    return inTransaction(this.pool, async (client) => {
      const held = await client.query({
        name: "jobs_lock_leased",
        text: "SELECT 1 FROM jobs WHERE id = $1 AND status = 'running' AND lease_owner = $2 FOR UPDATE",
        values: [id, instanceId],
      });
      if (held.rowCount !== 1) return false;
      const { answer: error } = await settleIn(client, refund);
      await client.query({
        name: "jobs_fail",
        text: failJob,
        values: [id, JSON.stringify(error), now],
      });
      return true;
    });
  }

  async requeueInterrupted(): Promise<JobRow[]> {
    return inTransaction(this.pool, async (client) => {
      // Other gateways' jobs under live leases are theirs: only the work of the dead goes back.
      await client.query({
        name: "jobs_requeue_orphans",
        text: `UPDATE jobs SET status = 'queued', started_at = NULL, lease_owner = NULL,
            lease_expires_at = NULL
          WHERE status = 'running' AND (lease_expires_at IS NULL OR lease_expires_at < gateway_now_ms())`,
      });
      const unfinished = await client.query<JobRow>({
        name: "jobs_unfinished",
        text: `SELECT ${jobColumns} FROM jobs WHERE status IN ('queued', 'running') ORDER BY created_at, id`,
      });
      return unfinished.rows;
    });
  }

  private async countUnfinished(db: Queryable, accountId: string, kind: JobKind): Promise<number> {
    const result = await db.query<{ n: number }>({
      name: "jobs_unfinished_count",
      text: "SELECT count(*) AS n FROM jobs WHERE account_id = $1 AND kind = $2 AND status IN ('queued', 'running')",
      values: [accountId, kind],
    });
    return result.rows[0].n;
  }
}

/** What a job whose hold ran out before it ended fails with (see `LateAnswerRefusal`). */
const lateJobUnpaid: JobError = {
  code: "storage_unavailable",
  message:
    "The job's hold ran out before it ended, and the account can no longer pay for it, so its result was not kept and nothing was charged. Retry later.",
};

/**
 * Runs a charge or refund callback and writes the settlements it asked for on the transaction's
 * connection; returns what the callback returned, and whether the database refused a settlement
 * as a late answer the account can no longer pay.
 */
async function settleIn<T>(
  client: pg.PoolClient,
  callback: (money: PostgresJobMoney) => T,
): Promise<{ answer: T; unpaid: boolean }> {
  const settlements: { reservation: Reservation; outcome: SettleInput }[] = [];
  const answer = callback({
    settle: (reservation, outcome) => {
      settlements.push({ reservation, outcome });
    },
  });
  let unpaid = false;
  for (const { reservation, outcome } of settlements)
    if ((await settleReservation(client, reservation, outcome)) === unpaidLate) unpaid = true;
  return { answer, unpaid };
}
