import type pg from "pg";
import type { Repositories } from "../repositories.js";
import type { SecretBox } from "../secret-box.js";
import { PostgresConfigApply } from "./config-apply.js";
import { PostgresDeviceCodes } from "./device-codes.js";
import { PostgresFiles } from "./files.js";
import { PostgresJobs } from "./jobs.js";
import type { PostgresKeyRowWriter } from "./key-rows.js";
import { PostgresRequestLogReads } from "./request-log-reads.js";
import { PostgresResponsesState } from "./responses-state.js";
import { PostgresServeRecord } from "./serve-record.js";
import { PostgresSessions } from "./sessions.js";
import { PostgresThreads } from "./threads.js";

/** Postgres's repositories; the job queue's charge callbacks are handed the job's hold to settle. */
export interface PostgresRepositories extends Repositories {
  jobs: PostgresJobs;
}

/** What the repositories know of the gateway that opens them. */
export interface PostgresGateway {
  /** Its registration in `instances`: the owner links it prints are its own. */
  instanceId?: string;
  /** The secret key every gateway on the database is given (PostgresStore.secrets). */
  secrets?: SecretBox;
}

/**
 * The repositories on a migrated Postgres database (migratePostgres), shared by every gateway on
 * it. `keys` writes the key rows device logins mint and revoke, inside their transactions.
 */
export function openPostgresRepositories(
  pool: pg.Pool,
  keys: PostgresKeyRowWriter,
  gateway: PostgresGateway = {},
): PostgresRepositories {
  return {
    jobs: new PostgresJobs(pool),
    deviceCodes: new PostgresDeviceCodes(pool, keys, gateway.secrets),
    sessions: new PostgresSessions(pool, gateway.instanceId),
    serveRecord: new PostgresServeRecord(pool),
    files: new PostgresFiles(pool),
    configApply: new PostgresConfigApply(pool),
    requestLog: new PostgresRequestLogReads(pool),
    threads: new PostgresThreads(pool),
    responsesState: new PostgresResponsesState(pool),
  };
}
