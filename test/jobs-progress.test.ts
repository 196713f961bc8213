import type OpenAI from "openai";
import type { Video } from "openai/resources/videos";
import { afterEach, describe, expect, it } from "vitest";
import { backends, KEY, type TestGateway } from "./support/gateway.js";
import { eventually } from "./support/gateways-on-postgres.js";
import { type ConfigAdditions, useJobsGateway } from "./support/jobs-gateway.js";

/**
 * A video a user watches being made: its `progress` rises with the provider's time (the mock's
 * configured job time, on the gateway's clock), never falls, and is 100 only once completed, on
 * the openai SDK's `Video` and on the job's own path alike. A job row from before the frame size
 * was kept shows the size it was made in, never null where the SDK's type says string.
 */

const START = Date.parse("2030-04-01T00:00:00Z");
const JOB_MS = 60_000;

/** A video model whose jobs take JOB_MS of the gateway's clock. */
const jobs: ConfigAdditions = {
  providers: [{ id: "mock-minute", wire: "mock", mock: { job_seconds: JOB_MS / 1000 } }],
  models: [
    { name: "minute-video", provider: "mock-minute", modality: "video", price_per_unit: 50 },
  ],
};

interface OwnJob {
  id: string;
  status: string;
  progress: number;
  size?: string;
}

describe.each(backends)("a video job's progress and size (%s)", (backend) => {
  let gw: TestGateway;
  let openai: OpenAI;
  useJobsGateway(backend, jobs, { clock: "manual", now: () => START }, (started) => {
    ({ gw, openai } = started);
  });
  // A test that failed while the runner was paused leaves the next one a runner that runs.
  afterEach(() => gw.jobRunner.resume());

  async function ownView(id: string): Promise<OwnJob> {
    const res = await fetch(`${gw.url}/v1/videos/generations/${id}`, {
      headers: { authorization: `Bearer ${KEY}` },
    });
    expect(res.status).toBe(200);
    return (await res.json()) as OwnJob;
  }

  /** Every progress the SDK read, in order. */
  const seen: number[] = [];
  const retrieveUntil = (id: string, done: (video: Video) => boolean, what: string) =>
    eventually(
      async () => {
        const video = await openai.videos.retrieve(id);
        seen.push(video.progress);
        return video;
      },
      done,
      10_000,
      what,
    );

  it("rises with the provider's time, never falls, and is 100 only once completed", async () => {
    seen.length = 0;
    gw.jobRunner.pause();
    const created = await openai.videos.create({
      model: "minute-video",
      prompt: "tide",
      seconds: "4",
    });
    expect(created).toMatchObject({ status: "queued", progress: 0 });
    gw.jobRunner.resume();
    await retrieveUntil(created.id, (v) => v.status === "in_progress", "in_progress");

    gw.clock.advance(JOB_MS / 4);
    const quarter = await retrieveUntil(created.id, (v) => v.progress > 0, "a quarter made");
    expect(quarter).toMatchObject({ status: "in_progress", progress: 25 });
    expect(await ownView(created.id)).toMatchObject({ status: "running", progress: 25 });

    gw.clock.advance(JOB_MS / 2);
    const most = await retrieveUntil(created.id, (v) => v.progress > 25, "three quarters made");
    expect(most).toMatchObject({ status: "in_progress", progress: 75 });

    gw.clock.advance(JOB_MS / 4);
    const done = await retrieveUntil(created.id, (v) => v.status === "completed", "completed");
    expect(done.progress).toBe(100);
    expect(await ownView(created.id)).toMatchObject({ status: "completed", progress: 100 });
    // What a user watching saw: never a step back, and 100 only once completed.
    expect(seen).toEqual([...seen].sort((a, b) => a - b));
    expect(seen.filter((p) => p === 100)).toHaveLength(1);
  });

  it("a job kept from before sizes were shows the size it was made in, queued and failed", async () => {
    gw.jobRunner.pause();
    // The mock draws 64x36 when asked no size (docs/http-api.md), as it drew this job's video.
    const made = await openai.videos.create({ model: "minute-video", prompt: "fog" });
    expect(made.size).toBe("64x36");
    const jobs = gw.services.repos.jobs;
    const old = await jobs.insert({
      id: `video_old_${backend}`,
      accountId: "acct",
      kind: "video",
      model: "minute-video",
      input: { request: { prompt: "an old fog", seconds: 4 }, hold: {} },
      requestId: `req_old_${backend}`,
      now: START,
    });
    expect(old).toBeDefined();
    const queued = await openai.videos.retrieve(old!.id);
    expect(queued).toMatchObject({ status: "queued", size: "64x36", progress: 0 });
    expect(await ownView(old!.id)).toMatchObject({ size: "64x36" });
    const listed = (await openai.videos.list({ limit: 100 })).data;
    expect(listed.find((video) => video.id === old!.id)?.size).toBe("64x36");

    await jobs.cancel(old!.id, START, () => ({ code: "cancelled", message: "cancelled" }));
    const failed = await openai.videos.retrieve(old!.id);
    expect(failed).toMatchObject({ status: "failed", size: "64x36" });
  });
});
