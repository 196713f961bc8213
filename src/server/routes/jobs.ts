import type { Context } from "hono";
import { z } from "zod";
import type { JobError, JobResult, JobRow } from "../../store/jobs.js";
import { newId } from "../../store/secrets.js";
import { parseSubscription } from "../../store/types.js";
import { settleFailed } from "../billing/admission.js";
import { costMicro } from "../billing/pricing.js";
import type { Services } from "../compose/services.js";
import { forMediaWire, forModality, resolveTarget } from "../dispatch/resolve.js";
import { badRequest, GatewayError } from "../errors.js";
import { readJson } from "../http/body.js";
import { clientGone } from "../http/client-signal.js";
import type { AppEnv, Handler } from "../http/context.js";
import { type ForwardingOptions, gatewayUrl } from "../http/request.js";
import { jobHold } from "../jobs/job-billing.js";
import {
  type JobRequest,
  jobInput,
  musicConcurrencyLimit,
  musicLimitReached,
} from "../jobs/job-input.js";
import { billedSeconds, type JobKindSpec, jobKinds } from "../jobs/job-kinds.js";
import { wakeJobRunner } from "../jobs/runner.js";
import { MAX_MUSIC_SECONDS } from "../media/limits.js";
import { admitWhole } from "./admitted.js";
import { fileNotFound, privateBytesResponse } from "./files.js";

/** Uncompressed mock video grows fast; a minute is plenty for tests and demos. */
const maxVideoSeconds = 60;

/** Seconds as a number or, as OpenAI's video API sends them, a numeric string. */
const seconds = (max: number) =>
  z
    .union([
      z.number(),
      z
        .string()
        .regex(/^\d+(\.\d+)?$/, "must be a number of seconds")
        .transform(Number),
    ])
    .pipe(z.number().positive().max(max));

export const musicBody = z.looseObject({
  model: z.string().min(1),
  prompt: z.string().min(1),
  duration: seconds(MAX_MUSIC_SECONDS).optional(),
});
export const videoBody = z.looseObject({
  model: z.string().min(1),
  prompt: z.string().min(1),
  seconds: seconds(maxVideoSeconds).optional(),
});
export const extensionBody = z.looseObject({
  video_id: z.string().min(1),
  prompt: z.string().min(1),
  seconds: seconds(maxVideoSeconds).optional(),
  /** Defaults to the model of the video being extended. */
  model: z.string().min(1).optional(),
});

const defaultMusicSeconds = 10;
const defaultVideoSeconds = 4;

/** Submit, poll and download for music, video and video-extension jobs. */
export function jobHandlers(services: Services) {
  const jobs = services.repos.jobs;

  /** The caller's job of `spec`'s kind named by the path, else 404. */
  const find = async (c: Context<AppEnv>, spec: JobKindSpec): Promise<JobRow> => {
    const id = c.req.param("id") ?? "";
    const job = await jobs.get(id, c.get("auth").key.account_id);
    if (!job || job.kind !== spec.kind) throw fileNotFound(spec.object.replace(".", " "), id);
    return job;
  };

  return {
    submitMusic: (async (c) => {
      const data = await readJson(c, musicBody);
      const request = { prompt: data.prompt, seconds: data.duration ?? defaultMusicSeconds };
      return submit(services, c, jobKinds.music, data.model, request);
    }) satisfies Handler,
    submitVideo: (async (c) => {
      const data = await readJson(c, videoBody);
      const request = { prompt: data.prompt, seconds: data.seconds ?? defaultVideoSeconds };
      return submit(services, c, jobKinds.video, data.model, request);
    }) satisfies Handler,
    submitExtension: (async (c) => {
      const data = await readJson(c, extensionBody);
      const source = await jobs.get(data.video_id, c.get("auth").key.account_id);
      if (!source || source.kind === "music") throw fileNotFound("video", data.video_id);
      if (source.status !== "completed") {
        throw badRequest(
          `Invalid request: video_id: video "${data.video_id}" is ${source.status}; only a completed video can be extended.`,
        );
      }
      const request = {
        prompt: data.prompt,
        seconds: data.seconds ?? defaultVideoSeconds,
        video_id: data.video_id,
      };
      return submit(services, c, jobKinds.video_extension, data.model ?? source.model, request);
    }) satisfies Handler,
    /** GET `{path}/{id}`: the job as it is now. */
    poll:
      (spec: JobKindSpec): Handler =>
      async (c) =>
        c.json(jobView(c, services.options, await find(c, spec))),
    /** GET `{path}/{id}/content`: the finished job's media. */
    content:
      (spec: JobKindSpec): Handler =>
      async (c) => {
        const job = await find(c, spec);
        const media = await jobs.output(job.id, job.account_id);
        if (!media) {
          throw new GatewayError(
            404,
            "not_found",
            `Job "${job.id}" is ${job.status}; it has no media to download.`,
          );
        }
        return privateBytesResponse(c, media.media_type, media.media);
      },
  };
}

/** Holds the worst case (requested seconds x price_per_unit), then queues the job row. */
async function submit(
  services: Services,
  c: Context<AppEnv>,
  spec: JobKindSpec,
  model: string,
  request: JobRequest,
): Promise<Response> {
  const key = c.get("auth").key;
  const jobs = services.repos.jobs;
  const target = forMediaWire(
    services,
    forModality(resolveTarget(services.store.getCatalog(), model), spec.modality),
    spec.modality,
  );
  if (
    spec.kind === "music" &&
    (await jobs.unfinishedCount(key.account_id, "music")) >= musicConcurrencyLimit
  ) {
    // Cheap early answer; the insert below re-checks inside its transaction.
    throw musicLimitReached();
  }
  const units = { inputTokens: 0, outputTokens: 0, units: billedSeconds(request) };
  const admission = await admitWhole(services, c, {
    target,
    endpoint: spec.endpoint,
    worstCase: () => units,
    signal: clientGone(c),
    outlivesRequest: true,
  });
  const subscription = parseSubscription(admission.account);
  const hold = jobHold(admission, {
    keyId: key.id,
    endpoint: spec.endpoint,
    worstCaseMicro: Math.max(...target.models.map((m) => costMicro(m, units))),
    subscriptionModel:
      subscription !== null && (!subscription.models || subscription.models.includes(model)),
  });
  const id = newId(spec.kind === "music" ? "music" : "video");
  let queued: JobRow | undefined;
  try {
    queued = await jobs.insert(
      {
        id,
        accountId: key.account_id,
        kind: spec.kind,
        model,
        input: { request, hold },
        requestId: hold.reservation.id,
        now: services.options.now(),
      },
      spec.kind === "music" ? musicConcurrencyLimit : undefined,
    );
    if (!queued) throw musicLimitReached();
  } catch (err) {
    throw await settleFailed(services, admission, err);
  }
  wakeJobRunner(services);
  return c.json(jobView(c, services.options, queued), 202);
}

const unixSeconds = (ms: number | null) => (ms === null ? null : Math.floor(ms / 1000));

/** The job as the API shows it; `result` once completed, `error` once failed. */
function jobView(c: Context, options: ForwardingOptions, job: JobRow): Record<string, unknown> {
  const spec = jobKinds[job.kind];
  const { request } = jobInput(job);
  const view: Record<string, unknown> = {
    id: job.id,
    object: spec.object,
    status: job.status,
    model: job.model,
    prompt: request.prompt,
    ...(job.kind === "music" ? { duration: request.seconds } : { seconds: request.seconds }),
    ...(request.video_id ? { video_id: request.video_id } : {}),
    created_at: unixSeconds(job.created_at),
    started_at: unixSeconds(job.started_at),
    finished_at: unixSeconds(job.finished_at),
  };
  if (job.status === "completed" && job.result_json) {
    const result = JSON.parse(job.result_json) as JobResult;
    view.result = {
      url: gatewayUrl(c, options, `${spec.path}/${job.id}/content`),
      ...result,
    };
  }
  if (job.status === "failed" && job.error) view.error = JSON.parse(job.error) as JobError;
  return view;
}
