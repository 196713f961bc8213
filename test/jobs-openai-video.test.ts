import OpenAI from "openai";
import type { Video } from "openai/resources/videos";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { baseConfigWith, KEY, post, type TestGateway, testGateway } from "./support/gateway.js";
import { eventually } from "./support/gateways-on-postgres.js";

/**
 * OpenAI's video API (`/v1/videos`, the openai SDK's `videos.retrieve` and `videos.list`) shows a
 * job as the SDK's `Video`: `object: "video"` and OpenAI's statuses, `queued | in_progress |
 * completed | failed`, so an app that switches on them meets no status it does not know. A
 * kind's own path keeps the job shape of docs/http-api.md (`running` while it runs), which
 * DECISIONS.md fixes for the spec's job routes.
 */

const VIDEO_PRICE = 50;
const TTL_SECONDS = 86_400;
const START = Date.parse("2030-03-01T00:00:00Z");
/** Every status the SDK's Video type allows. */
const sdkStatuses: readonly Video["status"][] = ["queued", "in_progress", "completed", "failed"];

function config(): ConfigInput {
  return baseConfigWith({
    providers: [
      { id: "mock-minute", wire: "mock", mock: { job_seconds: 60 } },
      { id: "mock-broken", wire: "mock", mock: { job_seconds: 1, fail_status: 503 } },
    ],
    models: [
      {
        name: "minute-video",
        provider: "mock-minute",
        modality: "video",
        price_per_unit: VIDEO_PRICE,
      },
      {
        name: "broken-video",
        provider: "mock-broken",
        modality: "video",
        price_per_unit: VIDEO_PRICE,
      },
    ],
  });
}

let gw: TestGateway;
let openai: OpenAI;

beforeAll(async () => {
  gw = await testGateway({
    config: config(),
    clock: "manual",
    now: () => START,
    jobsTtlSeconds: TTL_SECONDS,
  });
  openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 10_000 });
});
afterAll(async () => {
  await gw?.close();
});
// A test that failed while the runner was paused leaves the next one a runner that runs.
afterEach(() => gw.jobRunner.resume());

interface OwnJob {
  id: string;
  object: string;
  status: string;
  seconds: number;
  finished_at: number | null;
}

async function submitVideo(model: string, seconds: number): Promise<OwnJob> {
  const res = await post(gw, "/v1/videos/generations", { model, prompt: "waves", seconds });
  expect(res.status, await res.clone().text()).toBe(202);
  return (await res.json()) as OwnJob;
}

async function ownView(id: string): Promise<OwnJob> {
  const res = await fetch(`${gw.url}/v1/videos/generations/${id}`, {
    headers: { authorization: `Bearer ${KEY}` },
  });
  expect(res.status).toBe(200);
  return (await res.json()) as OwnJob;
}

const ownStatus = (id: string, want: string) =>
  eventually(
    () => ownView(id),
    (job) => job.status === want,
    10_000,
    `job ${id} ${want}`,
  );

describe("OpenAI's video API", () => {
  it("retrieve and list show a video job as the SDK's Video, from queued through in_progress to completed", async () => {
    gw.jobRunner.pause();
    const submitted = await submitVideo("minute-video", 2);
    const queued = await openai.videos.retrieve(submitted.id);
    expect(queued).toMatchObject({
      id: submitted.id,
      object: "video",
      status: "queued",
      progress: 0,
      seconds: "2",
      completed_at: null,
      expires_at: null,
      error: null,
      remixed_from_video_id: null,
      prompt: "waves",
      model: "minute-video",
    });
    gw.jobRunner.resume();

    const running = await ownStatus(submitted.id, "running");
    // The kind's own path keeps its shape.
    expect(running).toMatchObject({ object: "video.generation", status: "running", seconds: 2 });
    const inProgress = await openai.videos.retrieve(submitted.id);
    expect(inProgress).toMatchObject({ object: "video", status: "in_progress", progress: 0 });
    const listed = (await openai.videos.list({ limit: 100 })).data;
    expect(listed.find((video) => video.id === submitted.id)).toMatchObject({
      object: "video",
      status: "in_progress",
    });
    // A video still being made cannot be deleted; the refusal says so in OpenAI's words.
    const refused = await openai.videos.delete(submitted.id).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
    expect((refused as InstanceType<typeof OpenAI.BadRequestError>).message).toMatch(
      /is in_progress; only a completed or failed job can be deleted/,
    );

    gw.clock.advance(60_000);
    const finished = await ownStatus(submitted.id, "completed");
    const completed = await openai.videos.retrieve(submitted.id);
    expect(completed).toMatchObject({
      object: "video",
      status: "completed",
      progress: 100,
      seconds: "2",
      completed_at: finished.finished_at,
      expires_at: finished.finished_at! + TTL_SECONDS,
      error: null,
    });
    const content = await openai.videos.downloadContent(submitted.id);
    expect(content.headers.get("content-type")).toBe("video/x-msvideo");
  });

  it("a failed video says failed with its error, and no listed video has a status the SDK does not know", async () => {
    const submitted = await submitVideo("broken-video", 1);
    await ownStatus(submitted.id, "running");
    gw.clock.advance(1_000);
    await ownStatus(submitted.id, "failed");
    const failed = await openai.videos.retrieve(submitted.id);
    expect(failed).toMatchObject({ object: "video", status: "failed", completed_at: null });
    expect(failed.error).toMatchObject({ code: "upstream_error" });
    expect(failed.error!.message).toEqual(expect.any(String));
    // The gateway's own field beside the SDK's: when the job ended.
    const { finished_at } = failed as Video & { finished_at: number };
    expect(failed.expires_at).toBe(finished_at + TTL_SECONDS);

    const all: Video[] = [];
    for await (const video of openai.videos.list({ limit: 2 })) all.push(video);
    expect(all.length).toBeGreaterThanOrEqual(2);
    for (const video of all) {
      expect(video.object).toBe("video");
      expect(sdkStatuses).toContain(video.status);
      expect(typeof video.seconds).toBe("string");
    }
  });
});
