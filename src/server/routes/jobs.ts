import type { Context, Hono } from "hono";
import { z } from "zod";
import { newId } from "../../store/secrets.js";
import { parseSubscription } from "../../store/types.js";
import type { AppEnv } from "../app-env.js";
import { admit } from "../billing/admission.js";
import { costMicro } from "../billing/pricing.js";
import { forModality, resolveTarget } from "../dispatch/resolve.js";
import { badRequest, GatewayError } from "../errors.js";
import { clientSignal } from "../http/client-signal.js";
import { readJsonWithSize } from "../http/json-body.js";
import { nodeIncoming } from "../http/node-bindings.js";
import { traceOf } from "../http/request-trace.js";
import { jobHold } from "../jobs/job-billing.js";
import { billedSeconds, type JobKindSpec, jobKinds } from "../jobs/job-kinds.js";
import {
  type JobError,
  type JobKind,
  type JobRequest,
  type JobResult,
  type JobRow,
  jobInput,
  jobStoreFor,
  musicConcurrencyLimit,
  musicLimitReached,
} from "../jobs/job-store.js";
import { wakeJobRunner } from "../jobs/runner.js";
import { MAX_MUSIC_SECONDS } from "../media/index.js";
import { forMediaWire } from "../providers/media-wires.js";
import type { Services } from "../services.js";
import { failAdmission } from "./completions.js";
import { fileNotFound, mediaResponse } from "./files.js";
import { gatewayUrl } from "./media.js";

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

const musicBody = z.looseObject({
  model: z.string().min(1),
  prompt: z.string().min(1),
  duration: seconds(MAX_MUSIC_SECONDS).optional(),
});
const videoBody = z.looseObject({
  model: z.string().min(1),
  prompt: z.string().min(1),
  seconds: seconds(maxVideoSeconds).optional(),
});
const extensionBody = z.looseObject({
  video_id: z.string().min(1),
  prompt: z.string().min(1),
  seconds: seconds(maxVideoSeconds).optional(),
  /** Defaults to the model of the video being extended. */
  model: z.string().min(1).optional(),
});

const defaultMusicSeconds = 10;
const defaultVideoSeconds = 4;

/** Submit, poll and download for music, video and video-extension jobs. */
export function installJobRoutes(app: Hono<AppEnv>, s: Services): void {
  const jobs = jobStoreFor(s.store.database);

  app.post(jobKinds.music.path, async (c) => {
    const { data } = await readJsonWithSize(c, musicBody);
    const request = { prompt: data.prompt, seconds: data.duration ?? defaultMusicSeconds };
    return submit(s, c, jobKinds.music, data.model, request);
  });
  app.post(jobKinds.video.path, async (c) => {
    const { data } = await readJsonWithSize(c, videoBody);
    const request = { prompt: data.prompt, seconds: data.seconds ?? defaultVideoSeconds };
    return submit(s, c, jobKinds.video, data.model, request);
  });
  app.post(jobKinds.video_extension.path, async (c) => {
    const { data } = await readJsonWithSize(c, extensionBody);
    const source = jobs.get(data.video_id, c.get("auth").key.account_id);
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
    return submit(s, c, jobKinds.video_extension, data.model ?? source.model, request);
  });

  for (const spec of Object.values(jobKinds)) {
    const find = (c: Context<AppEnv>): JobRow => {
      const id = c.req.param("id") ?? "";
      const job = jobs.get(id, c.get("auth").key.account_id);
      if (!job || job.kind !== spec.kind) throw fileNotFound(spec.object.replace(".", " "), id);
      return job;
    };
    app.get(`${spec.path}/:id`, (c) => c.json(jobView(c, find(c))));
    app.get(`${spec.path}/:id/content`, (c) => {
      const job = find(c);
      const media = jobs.media(job.id, job.account_id);
      if (!media) {
        throw new GatewayError(
          404,
          "not_found",
          `Job "${job.id}" is ${job.status}; it has no media to download.`,
        );
      }
      return mediaResponse(c, media.media_type, media.media);
    });
  }
}

/** Holds the worst case (requested seconds x price_per_unit), then queues the job row. */
async function submit(
  s: Services,
  c: Context<AppEnv>,
  spec: JobKindSpec,
  model: string,
  request: JobRequest,
): Promise<Response> {
  const key = c.get("auth").key;
  const jobs = jobStoreFor(s.store.database);
  const target = forMediaWire(
    s,
    forModality(resolveTarget(s.store.getCatalog(), model), spec.modality),
    spec.modality,
  );
  if (spec.kind === "music" && jobs.unfinishedMusic(key.account_id) >= musicConcurrencyLimit) {
    // Cheap early answer; the insert below re-checks inside its transaction.
    throw musicLimitReached();
  }
  const units = { inputTokens: 0, outputTokens: 0, units: billedSeconds(request) };
  const admission = await admit(s, {
    key,
    target,
    endpoint: spec.endpoint,
    accountRpm: false,
    worstCase: () => units,
    stream: false,
    signal: clientSignal(c),
    trace: traceOf(nodeIncoming(c)),
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
  try {
    jobs.insert({
      id,
      accountId: key.account_id,
      kind: spec.kind,
      model,
      input: { request, hold },
      now: s.options.now(),
    });
  } catch (err) {
    throw failAdmission(s, admission, err);
  }
  wakeJobRunner(s);
  const job = jobs.get(id, key.account_id);
  if (!job) throw new GatewayError(500, "internal_error", "job vanished after insert");
  return c.json(jobView(c, job), 202);
}

const unixSeconds = (ms: number | null) => (ms === null ? null : Math.floor(ms / 1000));

/** The job as the API shows it; `result` once completed, `error` once failed. */
function jobView(c: Context, job: JobRow): Record<string, unknown> {
  const spec = jobKinds[job.kind as JobKind];
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
    view.result = { url: gatewayUrl(c, `${spec.path}/${job.id}/content`), ...result };
  }
  if (job.status === "failed" && job.error) view.error = JSON.parse(job.error) as JobError;
  return view;
}
