import type { JobKind } from "../../store/jobs.js";
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

/** Priced per started second, so money stays integer for fractional lengths. */
export function billedSeconds(request: JobRequest): number {
  return Math.ceil(request.seconds);
}
