import { type ConfigApplyRepository, SqliteConfigApply } from "./config-apply.js";
import type { DB } from "./db.js";
import { type DeviceCodesRepository, SqliteDeviceCodes } from "./device-codes.js";
import { type FilesRepository, SqliteFiles } from "./files.js";
import { type JobsRepository, SqliteJobs } from "./jobs.js";
import { type RequestLogReadsRepository, SqliteRequestLogReads } from "./request-log-reads.js";
import { type ResponsesStateRepository, SqliteResponsesState } from "./responses-state.js";
import { type ServeRecordRepository, SqliteServeRecord } from "./serve-record.js";
import { type SessionsRepository, SqliteSessions } from "./sessions.js";
import type { KeyRowWriter } from "./sqlite-accounts.js";
import { SqliteThreads, type ThreadsRepository } from "./threads.js";

/**
 * The gateway's data outside money and accounts, one repository per part of the domain. Each is
 * an interface a second backend can implement; each method is one transaction. Every method
 * returns a promise, as a backend across the network answers later.
 */
export interface Repositories {
  jobs: JobsRepository;
  deviceCodes: DeviceCodesRepository;
  sessions: SessionsRepository;
  serveRecord: ServeRecordRepository;
  files: FilesRepository;
  configApply: ConfigApplyRepository;
  requestLog: RequestLogReadsRepository;
  threads: ThreadsRepository;
  responsesState: ResponsesStateRepository;
}

/** SQLite's, whose request listing also answers synchronously (for the kit's `requests()`). */
export interface SqliteRepositories extends Repositories {
  requestLog: SqliteRequestLogReads;
}

/** The SQLite repositories over one open database; every statement is prepared here, once. */
export function openRepositories(db: DB, keys: KeyRowWriter): SqliteRepositories {
  return {
    jobs: new SqliteJobs(db),
    deviceCodes: new SqliteDeviceCodes(db, keys),
    sessions: new SqliteSessions(db),
    serveRecord: new SqliteServeRecord(db),
    files: new SqliteFiles(db),
    configApply: new SqliteConfigApply(db),
    requestLog: new SqliteRequestLogReads(db),
    threads: new SqliteThreads(db),
    responsesState: new SqliteResponsesState(db),
  };
}
