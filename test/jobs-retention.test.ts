import { afterEach, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import {
  type BackendName,
  backends,
  baseConfigWith,
  gatewayOn,
  KEY,
  post,
  type TestGateway,
} from "./support/gateway.js";
import { eventually } from "./support/gateways-on-postgres.js";

/**
 * Music and video jobs are kept `jobs.ttl_seconds` after they finished, then their media and
 * submission are deleted and they are read, listed and downloaded no more, as a DELETE removes
 * one; the request log keeps its charge and still names the job. A job still queued or running
 * is never removed, however old: it ends and is charged as usual. On both backends.
 */

const TTL_SECONDS = 3_600;
const MUSIC_PRICE = 20;
const VIDEO_PRICE = 50;
const START = Date.parse("2030-04-01T00:00:00Z");

function config(): ConfigInput {
  return baseConfigWith({
    providers: [
      { id: "mock-second", wire: "mock", mock: { job_seconds: 1 } },
      { id: "mock-broken", wire: "mock", mock: { job_seconds: 1, fail_status: 503 } },
      // Runs ten times the retention.
      { id: "mock-long", wire: "mock", mock: { job_seconds: 10 * TTL_SECONDS } },
    ],
    models: [
      {
        name: "quick-music",
        provider: "mock-second",
        modality: "music",
        price_per_unit: MUSIC_PRICE,
      },
      {
        name: "quick-video",
        provider: "mock-second",
        modality: "video",
        price_per_unit: VIDEO_PRICE,
      },
      {
        name: "broken-video",
        provider: "mock-broken",
        modality: "video",
        price_per_unit: VIDEO_PRICE,
      },
      { name: "long-video", provider: "mock-long", modality: "video", price_per_unit: VIDEO_PRICE },
    ],
    jobs: { ttl_seconds: TTL_SECONDS },
  });
}

const auth = { authorization: `Bearer ${KEY}` };

interface Job {
  id: string;
  status: string;
  finished_at: number | null;
  expires_at?: number | null;
}

let gw: TestGateway | undefined;
afterEach(async () => {
  await gw?.close();
  gw = undefined;
});

describe.each(backends)("job retention (%s)", (backend: BackendName) => {
  async function submit(path: string, body: object): Promise<Job> {
    const res = await post(gw!, path, body, auth);
    expect(res.status, await res.clone().text()).toBe(202);
    return (await res.json()) as Job;
  }
  const read = (path: string) => fetch(`${gw!.url}${path}`, { headers: auth });
  const view = async (path: string): Promise<Job> => {
    const res = await read(path);
    expect(res.status, path).toBe(200);
    return (await res.json()) as Job;
  };
  const until = (path: string, want: string) =>
    eventually(
      () => view(path),
      (job) => job.status === want,
      10_000,
      `${path} ${want}`,
    );
  const listedIds = async (path: string) =>
    ((await view(`${path}?limit=100`)) as unknown as { data: { id: string }[] }).data.map(
      (job) => job.id,
    );
  const usageRow = async (jobId: string) => {
    const res = await read("/v1/usage/requests?limit=100");
    const rows = ((await res.json()) as { data: { job_id?: string; cost_idr: number }[] }).data;
    return rows.find((row) => row.job_id === jobId);
  };

  it("removes a finished job once past the retention, keeps its charge, and never one still running", async () => {
    gw = await gatewayOn(backend, { config: config(), clock: "manual", now: () => START });
    const long = await submit("/v1/videos/generations", { model: "long-video", prompt: "slow" });
    const music = await submit("/v1/music/generations", {
      model: "quick-music",
      prompt: "tune",
      duration: 1,
    });
    const video = await submit("/v1/videos/generations", {
      model: "quick-video",
      prompt: "waves",
      seconds: 1,
    });
    const broken = await submit("/v1/videos/generations", {
      model: "broken-video",
      prompt: "fails",
      seconds: 1,
    });
    for (const id of [long.id, video.id, broken.id]) await until(`/v1/videos/${id}`, "in_progress");
    await until(`/v1/music/generations/${music.id}`, "running");
    gw.clock.advance(1_000);
    const done = await until(`/v1/videos/${video.id}`, "completed");
    await until(`/v1/videos/${broken.id}`, "failed");
    await until(`/v1/music/generations/${music.id}`, "completed");
    expect(done.expires_at).toBe(done.finished_at! + TTL_SECONDS);
    const charged = await usageRow(video.id);
    expect(charged).toMatchObject({ cost_idr: VIDEO_PRICE });

    gw.clock.advance(TTL_SECONDS * 1000);
    // Swept by the job runner within its next polls.
    await eventually(
      async () => (await read(`/v1/videos/${video.id}`)).status,
      (status) => status === 404,
      10_000,
      "the expired video gone",
    );
    for (const path of [
      `/v1/videos/${video.id}`,
      `/v1/videos/${video.id}/content`,
      `/v1/videos/generations/${broken.id}`,
      `/v1/music/generations/${music.id}`,
      `/v1/music/generations/${music.id}/content`,
    ]) {
      expect((await read(path)).status, path).toBe(404);
    }
    expect(await listedIds("/v1/videos")).toEqual([long.id]);
    expect(await listedIds("/v1/music/generations")).toEqual([]);
    // The charge stays, and still names the job.
    expect(await usageRow(video.id)).toEqual(charged);

    // Older than the retention, but running: kept, and it ends and is charged as usual.
    expect(await view(`/v1/videos/${long.id}`)).toMatchObject({ status: "in_progress" });
    gw.clock.advance(9 * TTL_SECONDS * 1000);
    const finished = await until(`/v1/videos/${long.id}`, "completed");
    expect(finished.expires_at).toBe(finished.finished_at! + TTL_SECONDS);
    expect((await read(`/v1/videos/${long.id}/content`)).status).toBe(200);
    expect(await usageRow(long.id)).toMatchObject({ cost_idr: 4 * VIDEO_PRICE });
  });
});
