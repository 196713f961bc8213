import type { JobRow } from "../../store/jobs.js";
import type { Reservation } from "../billing/ledger.js";
import { GatewayError } from "../errors.js";

/** What a job row's input holds: the request to generate and the money held for it. */
export interface JobRequest {
  prompt: string;
  /** Seconds to generate: the music's duration, the video's length, or the extension's. */
  seconds: number;
  /** For an extension: the finished video job it continues. */
  video_id?: string;
  /** For an extension: the length of the video it continues, so it shows the stitched total. */
  source_seconds?: number;
  /** For a remix (OpenAI's `videos.remix`): the finished video job whose prompt it replaced. */
  remixed_from?: string;
  /** A video's frame size, `WIDTHxHEIGHT`, decided at submission (`Provider.videoSize`). */
  size?: string;
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

export function jobInput(job: JobRow): JobInput {
  return JSON.parse(job.input_json) as JobInput;
}
