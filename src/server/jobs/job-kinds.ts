import type { JobKind, JobStatus } from "../../store/jobs.js";
import type { JobRequest } from "./job-input.js";

/** How each kind of job appears on the API and which modality its models must serve. */
export interface JobKindSpec {
  kind: JobKind;
  object: string;
  /** POST here submits; GET `{path}/{id}` polls; GET `{path}/{id}/content` downloads. */
  path: string;
  modality: "music" | "video";
  /** The request_log endpoint name. */
  endpoint: string;
}

export const jobKinds: Record<JobKind, JobKindSpec> = {
  music: {
    kind: "music",
    object: "music.generation",
    path: "/v1/music/generations",
    modality: "music",
    endpoint: "music.generations",
  },
  video: {
    kind: "video",
    object: "video.generation",
    path: "/v1/videos/generations",
    modality: "video",
    endpoint: "videos.generations",
  },
  video_extension: {
    kind: "video_extension",
    object: "video.extension",
    path: "/v1/videos/extensions",
    modality: "video",
    endpoint: "videos.extensions",
  },
};

/**
 * Where an account reads its jobs: each kind's own path, and OpenAI's `/v1/videos` for every
 * video (generations and extensions alike). GET on the path lists them, newest first; GET
 * `{path}/{id}` reads one, GET `{path}/{id}/content` downloads it, DELETE `{path}/{id}` removes a
 * finished one.
 */
export interface JobCollection {
  path: string;
  kinds: readonly JobKind[];
  /** What one of its jobs is called in an answer (`No video with id ...`). */
  noun: string;
  /** The `object` of the answer to a DELETE. */
  deleted: string;
  /**
   * Its jobs are shown as the openai SDK's `Video` (`openaiVideoView`): OpenAI's own video API.
   * A kind's own path shows the job as docs/http-api.md has it (`status: "running"`).
   */
  openaiVideo?: true;
}

export const jobCollections = {
  music: {
    path: jobKinds.music.path,
    kinds: ["music"],
    noun: "music generation",
    deleted: "music.generation.deleted",
  },
  video: {
    path: jobKinds.video.path,
    kinds: ["video"],
    noun: "video generation",
    deleted: "video.generation.deleted",
  },
  extension: {
    path: jobKinds.video_extension.path,
    kinds: ["video_extension"],
    noun: "video extension",
    deleted: "video.extension.deleted",
  },
  // OpenAI's video API (the SDKs' `videos.list`, `retrieve`, `downloadContent`, `delete`).
  videos: {
    path: "/v1/videos",
    kinds: ["video", "video_extension"],
    noun: "video",
    deleted: "video.deleted",
    openaiVideo: true,
  },
} as const satisfies Record<string, JobCollection>;

/** The statuses of OpenAI's Video: a job `running` in our rows is `in_progress` there. */
export type OpenAIVideoStatus = "queued" | "in_progress" | "completed" | "failed";

export function openaiVideoStatus(status: JobStatus): OpenAIVideoStatus {
  return status === "running" ? "in_progress" : status;
}

/** Priced per started second, so money stays integer for fractional lengths. */
export function billedSeconds(request: JobRequest): number {
  return Math.ceil(request.seconds);
}
