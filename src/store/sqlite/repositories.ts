import type { Repositories } from "../repositories.js";
import type { KeyRowWriter } from "./accounts.js";
import { SqliteConfigApply } from "./config-apply.js";
import type { DB } from "./db.js";
import { SqliteDeviceCodes } from "./device-codes.js";
import { SqliteFiles } from "./files.js";
import { SqliteJobs } from "./jobs.js";
import { SqliteRequestLogReads } from "./request-log-reads.js";
import { SqliteResponsesState } from "./responses-state.js";
import { SqliteServeRecord } from "./serve-record.js";
import { SqliteSessions } from "./sessions.js";
import { SqliteThreads } from "./threads.js";

/** The SQLite repositories over one open database; every statement is prepared here, once. */
/** `landQueuedWrites` commits the ledger's queued writes, before the request log is read. */
export function openRepositories(
  db: DB,
  keys: KeyRowWriter,
  landQueuedWrites: () => void = () => {},
): Repositories {
  return {
    jobs: new SqliteJobs(db),
    deviceCodes: new SqliteDeviceCodes(db, keys),
    sessions: new SqliteSessions(db),
    serveRecord: new SqliteServeRecord(db),
    files: new SqliteFiles(db),
    configApply: new SqliteConfigApply(db),
    requestLog: new SqliteRequestLogReads(db, landQueuedWrites),
    threads: new SqliteThreads(db),
    responsesState: new SqliteResponsesState(db),
  };
}
