import { RESPONSE_ALREADY_SENT } from "@hono/node-server/utils/response";
import type { Context } from "hono";
import { z } from "zod";
import { type JobError, type JobResult, type JobRow, shownProgress } from "../../store/jobs.js";
import { newId } from "../../store/secrets.js";
import { parseSubscription } from "../../store/types.js";
import { settleFailed } from "../billing/admission.js";
import { costMicro } from "../billing/pricing.js";
import type { ServerOptions, Services } from "../compose/services.js";
import { forMediaWire, forModality, resolveTarget, type Target } from "../dispatch/resolve.js";
import { badRequest, GatewayError } from "../errors.js";
import { readJson, readJsonOrForm } from "../http/body.js";
import { clientGone, sendJsonAnswer } from "../http/client-signal.js";
import type { AppEnv, Handler } from "../http/context.js";
import { gatewayUrl, nodeOutgoing } from "../http/request.js";
import { jobHold } from "../jobs/job-billing.js";
import {
  type JobRequest,
  jobInput,
  musicConcurrencyLimit,
  musicLimitReached,
} from "../jobs/job-input.js";
import {
  billedSeconds,
  type JobCollection,
  type JobKindSpec,
  jobCollections,
  jobKinds,
  openaiVideoStatus,
} from "../jobs/job-kinds.js";
import { cancelUnseenJob, wakeJobRunner } from "../jobs/runner.js";
import { MAX_MUSIC_SECONDS } from "../media/limits.js";
import { providerOf } from "../providers/registry.js";
import { admitWhole } from "./admitted.js";
import { fileNotFound, privateBytesResponse } from "./files.js";
import { listPage, listQuery } from "./list-page.js";

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
/** A frame size as OpenAI's video API takes one: `1280x720`. */
const videoSize = z
  .string()
  .regex(/^[1-9]\d{0,4}x[1-9]\d{0,4}$/, "must be WIDTHxHEIGHT in pixels, as 1280x720");

export const videoBody = z.looseObject({
  model: z.string().min(1),
  prompt: z.string().min(1),
  seconds: seconds(maxVideoSeconds).optional(),
  size: videoSize.optional(),
});
/**
 * The spec's body names the video to extend `video_id`; OpenAI's (`videos.extend`, multipart)
 * sends `video: {id}`, and is answered with OpenAI's `Video`.
 */
export const extensionBody = z.looseObject({
  video_id: z.string().min(1).optional(),
  video: z.unknown().optional(),
  prompt: z.string().min(1),
  seconds: seconds(maxVideoSeconds).optional(),
  /** Defaults to the model of the video being extended. */
  model: z.string().min(1).optional(),
});
/** OpenAI's `POST /v1/videos` (the openai SDK's `videos.create`, multipart or JSON). */
export const openaiVideoBody = z.looseObject({
  prompt: z.string().min(1),
  /** OpenAI's default; a gateway serves it only if its catalog names a model so. */
  model: z.string().min(1).default("sora-2"),
  seconds: seconds(maxVideoSeconds).optional(),
  size: videoSize.optional(),
  input_reference: z.unknown().optional(),
});
/** OpenAI's `POST /v1/videos/{id}/remix` (`videos.remix`). */
export const remixBody = z.looseObject({ prompt: z.string().min(1) });

const defaultMusicSeconds = 10;
const defaultVideoSeconds = 4;

/** Job listings page as OpenAI pages its lists: `limit` 1 to 100 (default 20), `order`, `after`. */
const jobsPage = listQuery(100, 20);
export const jobsQuery = jobsPage.schema;

/** Submit, list, poll, download and remove music, video and video-extension jobs. */
export function jobHandlers(services: Services) {
  const jobs = services.repos.jobs;

  /** The caller's job of one of `collection`'s kinds named by the path, else 404. */
  const find = async (c: Context<AppEnv>, collection: JobCollection): Promise<JobRow> => {
    const id = c.req.param("id") ?? "";
    const job = await jobs.get(id, c.get("auth").key.account_id);
    if (!job || !collection.kinds.includes(job.kind)) throw fileNotFound(collection.noun, id);
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
      return submit(services, c, jobKinds.video, data.model, request, { asked: data.size });
    }) satisfies Handler,
    /** POST /v1/videos: OpenAI's `videos.create`, the same job, answered as OpenAI's `Video`. */
    createVideo: (async (c) => {
      const data = await readJsonOrForm(c, openaiVideoBody);
      if (data.input_reference !== undefined) {
        throw badRequest(
          "Invalid request: input_reference: a reference image or video is not supported by this gateway; describe the scene in prompt.",
        );
      }
      const request = { prompt: data.prompt, seconds: data.seconds ?? defaultVideoSeconds };
      return submit(services, c, jobKinds.video, data.model, request, {
        asked: data.size,
        answer: jobCollections.videos,
      });
    }) satisfies Handler,
    /**
     * POST /v1/videos/{id}/remix: OpenAI's `videos.remix`, a new video job of the source's model,
     * length and size from the new prompt, held and charged as any other.
     */
    remix: (async (c) => {
      const data = await readJsonOrForm(c, remixBody);
      const videos = jobCollections.videos;
      const source = await find(c, videos);
      if (source.status !== "completed") {
        throw badRequest(
          `Invalid request: video "${source.id}" is ${statusIn(videos, source)}; only a completed video can be remixed.`,
        );
      }
      const from = jobInput(source).request;
      const request = {
        prompt: data.prompt,
        seconds: shownSeconds(from),
        remixed_from: source.id,
      };
      return submit(services, c, jobKinds.video, source.model, request, {
        asked: from.size,
        answer: videos,
      });
    }) satisfies Handler,
    submitExtension: (async (c) => {
      const data = await readJsonOrForm(c, extensionBody);
      const openai = data.video_id === undefined && data.video !== undefined;
      const videoId = data.video_id ?? extendedVideoId(data.video);
      const source = await jobs.get(videoId, c.get("auth").key.account_id);
      if (!source || source.kind === "music") throw fileNotFound("video", videoId);
      if (source.status !== "completed") {
        // In the words of the body it came in: OpenAI's names the video `video.id`.
        const named = openai
          ? `video.id: video "${videoId}" is ${openaiVideoStatus(source.status)}`
          : `video_id: video "${videoId}" is ${source.status}`;
        throw badRequest(`Invalid request: ${named}; only a completed video can be extended.`);
      }
      const from = jobInput(source).request;
      const request = {
        prompt: data.prompt,
        seconds: data.seconds ?? defaultVideoSeconds,
        video_id: videoId,
        source_seconds: shownSeconds(from),
        // Its frames continue the source's.
        size: from.size,
      };
      return submit(
        services,
        c,
        jobKinds.video_extension,
        data.model ?? source.model,
        request,
        openai ? { answer: jobCollections.videos } : {},
      );
    }) satisfies Handler,
    /** OpenAI's `videos.edit`: not served, named, with what to use instead. */
    editRefused: (() => {
      throw badRequest(
        "Video edits (POST /v1/videos/edits) are not supported by this gateway; remix a completed video with a new prompt (POST /v1/videos/{id}/remix) or extend it (POST /v1/videos/extensions).",
      );
    }) satisfies Handler,
    /** OpenAI's `videos.createCharacter` and `getCharacter`: not served, named. */
    charactersRefused: (() => {
      throw badRequest(
        "Video characters (/v1/videos/characters) are not supported by this gateway: its video models draw from the prompt alone.",
      );
    }) satisfies Handler,
    /**
     * GET `{path}`: the account's jobs, a page at a time, newest first unless asked otherwise: a
     * client that lost a submission's answer finds its job here.
     */
    list:
      (collection: JobCollection): Handler =>
      async (c) => {
        const query = jobsPage.parse(c);
        const page = await jobs.list(c.get("auth").key.account_id, collection.kinds, query);
        // Another account's job is as unknown as one that never was.
        if (!page)
          throw badRequest(
            `Invalid query parameter after: no ${collection.noun} '${query.after}' exists for this account.`,
          );
        const views = page.jobs.map((job) => jobView(c, services, job, collection));
        return c.json(listPage(views, (view) => String(view.id), page.hasMore));
      },
    /** GET `{path}/{id}`: the job as it is now. */
    poll:
      (collection: JobCollection): Handler =>
      async (c) =>
        c.json(jobView(c, services, await find(c, collection), collection)),
    /**
     * DELETE `{path}/{id}`: a finished job's media is deleted, as OpenAI deletes a completed or
     * failed video; its charge stays in the request log, which still names it.
     */
    remove:
      (collection: JobCollection): Handler =>
      async (c) => {
        const job = await find(c, collection);
        if (job.status === "queued" || job.status === "running") {
          throw badRequest(
            `Invalid request: ${collection.noun} "${job.id}" is ${statusIn(collection, job)}; only a completed or failed job can be deleted.`,
          );
        }
        // Removed meanwhile by another call: as unknown as it is to the next one.
        if (!(await jobs.remove(job.id, job.account_id, services.options.now())))
          throw fileNotFound(collection.noun, job.id);
        return c.json({ id: job.id, object: collection.deleted, deleted: true });
      },
    /** GET `{path}/{id}/content`: the finished job's media. */
    content:
      (collection: JobCollection): Handler =>
      async (c) => {
        // OpenAI's `videos.downloadContent` may ask for a derived asset; the gateway keeps none.
        const variant = c.req.query("variant");
        if (variant !== undefined && variant !== "video" && !collection.kinds.includes("music")) {
          throw badRequest(
            `Invalid query parameter variant: "${variant}" is not available; the gateway serves only the video itself (variant=video), not a thumbnail or spritesheet.`,
          );
        }
        const job = await find(c, collection);
        const media = await jobs.output(job.id, job.account_id);
        if (!media) {
          throw new GatewayError(
            404,
            "not_found",
            `Job "${job.id}" is ${statusIn(collection, job)}; it has no media to download.`,
          );
        }
        return privateBytesResponse(c, media.media_type, media.media);
      },
  };
}

/**
 * Holds the worst case (requested seconds x price_per_unit), then queues the job row. A video
 * generation `asked` a frame size gets the size its provider makes for it; `answer` is the
 * collection whose view the 202 shows (OpenAI's `Video` for OpenAI's video API).
 */
async function submit(
  services: Services,
  c: Context<AppEnv>,
  spec: JobKindSpec,
  model: string,
  asRequested: JobRequest,
  options: { asked?: string; answer?: JobCollection } = {},
): Promise<Response> {
  const key = c.get("auth").key;
  const jobs = services.repos.jobs;
  const target = forMediaWire(
    services,
    forModality(resolveTarget(services.store.getCatalog(), model), spec.modality),
    spec.modality,
  );
  const request =
    spec.kind === "video"
      ? { ...asRequested, size: madeSize(services, target, options.asked) }
      : asRequested;
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
  const view = jobView(c, services, queued, options.answer);
  const outgoing = nodeOutgoing(c);
  if (!outgoing) {
    wakeJobRunner(services);
    return c.json(view, 202);
  }
  // This answer is the only place the client learns the job's id. A job whose answer never
  // reached the connection (its client hung up as it submitted) is nobody's to fetch: it is
  // cancelled, and charged nothing, rather than run for no one.
  if (await sendJsonAnswer(outgoing, 202, view)) wakeJobRunner(services);
  else await cancelUnseenJob(services, queued);
  return RESPONSE_ALREADY_SENT;
}

/**
 * The frame size a video asked at `asked` is made in: what the first provider to be tried makes
 * for it (the mock draws small), else what was asked.
 */
function madeSize(services: Services, target: Target, asked: string | undefined) {
  const row = services.store.getCatalog().providers.get(target.models[0].provider_id);
  return (row && providerOf(row).videoSize?.(asked)) ?? asked;
}

/** The id of OpenAI's `video: {id}`; an uploaded video (or none) is refused by name. */
function extendedVideoId(video: unknown): string {
  if (video instanceof Blob) {
    throw badRequest(
      "Invalid request: video: uploading a video to extend is not supported by this gateway; send video: {id} of a completed video of this account.",
    );
  }
  const id = (video as { id?: unknown } | undefined)?.id;
  if (typeof id !== "string" || id === "") {
    throw badRequest(
      "Invalid request: video_id: required (or video: {id}, as OpenAI's videos.extend sends it).",
    );
  }
  return id;
}

/** A video's length as OpenAI's `Video` gives it: an extension's is the stitched total. */
const shownSeconds = (request: JobRequest): number =>
  request.seconds + (request.source_seconds ?? 0);

/** A job's status in the words of the collection it is read through. */
const statusIn = (collection: JobCollection, job: JobRow): string =>
  collection.openaiVideo ? openaiVideoStatus(job.status) : job.status;

const unixSeconds = (ms: number | null) => (ms === null ? null : Math.floor(ms / 1000));

/**
 * The job as the API shows it; `result` once completed, `error` once failed. In a collection of
 * OpenAI's video API, as the openai SDK's `Video`.
 */
function jobView(
  c: Context,
  services: Services,
  job: JobRow,
  collection?: JobCollection,
): Record<string, unknown> {
  const { options } = services;
  const spec = jobKinds[job.kind];
  const { request } = jobInput(job);
  const size = job.kind === "music" ? undefined : videoSizeOf(services, job.model, request);
  const view: Record<string, unknown> = {
    id: job.id,
    object: spec.object,
    status: job.status,
    model: job.model,
    prompt: request.prompt,
    ...(job.kind === "music" ? { duration: request.seconds } : { seconds: request.seconds }),
    ...(size ? { size } : {}),
    ...(request.video_id ? { video_id: request.video_id } : {}),
    ...(request.remixed_from ? { remixed_from_video_id: request.remixed_from } : {}),
    created_at: unixSeconds(job.created_at),
    started_at: unixSeconds(job.started_at),
    finished_at: unixSeconds(job.finished_at),
    progress: shownProgress(job),
  };
  if (job.status === "completed" && job.result_json) {
    const result = JSON.parse(job.result_json) as JobResult;
    view.result = {
      url: gatewayUrl(c, options, `${spec.path}/${job.id}/content`),
      ...result,
    };
  }
  if (job.status === "failed" && job.error) view.error = JSON.parse(job.error) as JobError;
  return collection?.openaiVideo ? openaiVideoView(view, job, request, options) : view;
}

/** OpenAI's frame size for a video asked none (the openai SDK's `VideoSize`). */
const openaiDefaultVideoSize = "720x1280";

/**
 * A video job's frame size: the one decided at submission. A job submitted before the size was
 * kept was made in the size its model's provider makes when asked none, and shows that; one whose
 * model the catalog no longer names shows OpenAI's default, never nothing.
 */
function videoSizeOf(services: Services, model: string, request: JobRequest): string {
  if (request.size) return request.size;
  let target: Target;
  try {
    target = resolveTarget(services.store.getCatalog(), model);
  } catch (err) {
    if (err instanceof GatewayError) return openaiDefaultVideoSize;
    throw err;
  }
  return madeSize(services, target, undefined) ?? openaiDefaultVideoSize;
}

/**
 * A video job as the openai SDK's `Video` (openai/resources/videos): `object: "video"`, OpenAI's
 * statuses (`in_progress` for a job our rows call `running`), `seconds` as the string OpenAI sends,
 * and the other fields the type declares, null where the gateway has nothing to say. `expires_at`
 * is when the retention (`jobs.ttl_seconds`) removes it. The job's own fields stay beside them.
 */
function openaiVideoView(
  view: Record<string, unknown>,
  job: JobRow,
  request: JobRequest,
  options: ServerOptions,
): Record<string, unknown> {
  const completed = job.status === "completed";
  return {
    ...view,
    object: "video",
    status: openaiVideoStatus(job.status),
    seconds: String(shownSeconds(request)),
    completed_at: completed ? unixSeconds(job.finished_at) : null,
    expires_at: job.finished_at === null ? null : unixSeconds(job.finished_at + options.jobsTtlMs),
    error: view.error ?? null,
    remixed_from_video_id: request.remixed_from ?? null,
  };
}
