import type { ConfigApplyRepository } from "./config-apply.js";
import type { DeviceCodesRepository } from "./device-codes.js";
import type { FilesRepository } from "./files.js";
import type { JobsRepository } from "./jobs.js";
import type { RequestLogReadsRepository } from "./request-log-reads.js";
import type { ResponsesStateRepository } from "./responses-state.js";
import type { ServeRecordRepository } from "./serve-record.js";
import type { SessionsRepository } from "./sessions.js";
import type { ThreadsRepository } from "./threads.js";

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
