import { execFileSync } from "node:child_process";
import OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { readAviInfo } from "../src/server/media/avi.js";
import { idleMoney, money } from "./support/api.js";
import { ownerSession } from "./support/cli.js";
import { backends, KEY, post, type TestGateway } from "./support/gateway.js";
import { eventually } from "./support/gateways-on-postgres.js";
import { type ConfigAdditions, useJobsGateway } from "./support/jobs-gateway.js";

/**
 * A music or video job is worth only what its client can fetch. A client finds its jobs again in
 * a listing per endpoint (and in OpenAI's `GET /v1/videos`, as the openai SDK's `videos.list`
 * reads it), and the request log row of a submission names the job it queued. A client that hung
 * up as it submitted was never told its job's id: the job is cancelled and costs nothing.
 */

const MUSIC_PRICE = 100;
const VIDEO_PRICE = 50;
/** An account of its own, so that the listings hold only what its test submitted. */
const LISTER_KEY = "kn-test-lister-key-00000000000000";

/** Models whose jobs end at once or outlast every test, and the lister's account. */
const jobs: ConfigAdditions = {
  providers: [
    { id: "mock-fast", wire: "mock", mock: { job_seconds: 0.05 } },
    { id: "mock-slow", wire: "mock", mock: { job_seconds: 600 } },
  ],
  models: [
    { name: "fast-music", provider: "mock-fast", modality: "music", price_per_unit: MUSIC_PRICE },
    { name: "fast-video", provider: "mock-fast", modality: "video", price_per_unit: VIDEO_PRICE },
    { name: "slow-video", provider: "mock-slow", modality: "video", price_per_unit: VIDEO_PRICE },
  ],
  accounts: [
    {
      id: "lister",
      balance_idr: 1_000_000,
      rpm_limit: 1000,
      keys: [{ id: "kls", value: LISTER_KEY }],
    },
  ],
};

interface Job {
  id: string;
  object: string;
  status: string;
  model: string;
  error?: { code: string; message: string };
}

interface Page<T> {
  object: string;
  data: T[];
  first_id: string | null;
  last_id: string | null;
  has_more: boolean;
}

interface UsageRow {
  id: string;
  endpoint: string;
  state: string;
  status: number | null;
  error_code: string | null;
  cost_idr: number;
  job_id?: string;
}

const auth = (key = KEY) => ({ authorization: `Bearer ${key}` });

async function submit(gw: { url: string }, path: string, body: object, key = KEY): Promise<Job> {
  const res = await post(gw, path, body, auth(key));
  expect(res.status, await res.clone().text()).toBe(202);
  return (await res.json()) as Job;
}

async function listed(gw: { url: string }, path: string, key = KEY): Promise<Page<Job>> {
  const res = await fetch(`${gw.url}${path}`, { headers: auth(key) });
  expect(res.status, await res.clone().text()).toBe(200);
  return (await res.json()) as Page<Job>;
}

async function usage(gw: { url: string }, key = KEY): Promise<UsageRow[]> {
  const res = await fetch(`${gw.url}/v1/usage/requests?limit=500`, { headers: auth(key) });
  expect(res.status).toBe(200);
  return ((await res.json()) as Page<UsageRow>).data;
}

/** The job once it has ended, as its poll shows it; bounded, so a stuck job fails the test. */
function ended(gw: { url: string }, path: string, id: string, key = KEY): Promise<Job> {
  return eventually(
    async () => {
      const res = await fetch(`${gw.url}${path}/${id}`, { headers: auth(key) });
      return (await res.json()) as Job;
    },
    (job) => job.status === "completed" || job.status === "failed",
    10_000,
    `job ${id} ended`,
  );
}

/**
 * A client in another process that sends a whole request and hangs up at once: the request's
 * bytes and its end are in the gateway's socket before the gateway reads any of it, because this
 * process (the gateway's) waits, blocked, until the client has sent both and exited.
 */
function submitAndHangUp(gw: { url: string }, path: string, body: object): void {
  const text = JSON.stringify(body);
  const request = [
    `POST ${path} HTTP/1.1`,
    "host: 127.0.0.1",
    `authorization: Bearer ${KEY}`,
    "content-type: application/json",
    `content-length: ${Buffer.byteLength(text)}`,
    "",
    text,
  ].join("\r\n");
  const client = `
    const socket = require("node:net").connect(Number(process.argv[1]), "127.0.0.1", () => {
      socket.end(process.argv[2]);
    });
    socket.on("finish", () => process.exit(0));`;
  execFileSync(process.execPath, ["-e", client, new URL(gw.url).port, request], {
    timeout: 10_000,
  });
}

describe.each(backends)("jobs their account can find (%s)", (backend) => {
  let gw: TestGateway;
  let openai: OpenAI;
  useJobsGateway(backend, jobs, {}, (started) => {
    ({ gw, openai } = started);
  });

  it.each([
    ["music", "/v1/music/generations", { model: "fast-music", prompt: "rain", duration: 2 }],
    ["a video", "/v1/videos/generations", { model: "fast-video", prompt: "kite", seconds: 2 }],
  ])(
    "%s submitted by a client that hangs up as it sends is cancelled: charged nothing, nothing held, listed and logged client_closed",
    async (_what, path, body) => {
      const before = await money(gw);
      submitAndHangUp(gw, path, body);

      // The job is still found: the newest of its endpoint's listing, failed as the client left.
      const newest = await eventually(
        async () => (await listed(gw, `${path}?limit=1`)).data[0],
        (job) => job !== undefined && (job.status === "completed" || job.status === "failed"),
        10_000,
        "the job in its listing",
      );
      expect(newest).toMatchObject({ status: "failed", model: body.model });
      expect(newest.error?.code).toBe("client_closed");
      // Nothing charged, nothing left held.
      expect(await idleMoney(gw)).toEqual(before);
      // Its request's row in the usage listing names it.
      const row = (await usage(gw)).find((r) => r.job_id === newest.id);
      expect(row).toMatchObject({
        state: "failed",
        status: 499,
        error_code: "client_closed",
        cost_idr: 0,
      });
      // The gateway serves the next submission, which runs to its end.
      const next = await submit(gw, path, body);
      expect((await ended(gw, path, next.id)).status).toBe("completed");
    },
  );

  it("videos.list (openai SDK) pages the account's videos newest first, generations and extensions together; each endpoint lists its own kind", async () => {
    const lister = new OpenAI({
      apiKey: LISTER_KEY,
      baseURL: `${gw.url}/v1`,
      maxRetries: 0,
      timeout: 10_000,
    });
    const videos: Job[] = [];
    for (const prompt of ["one", "two", "three"]) {
      const video = await submit(
        gw,
        "/v1/videos/generations",
        { model: "fast-video", prompt, seconds: 1 },
        LISTER_KEY,
      );
      videos.push(await ended(gw, "/v1/videos/generations", video.id, LISTER_KEY));
    }
    const extension = await submit(
      gw,
      "/v1/videos/extensions",
      { video_id: videos[0].id, prompt: "more", seconds: 1 },
      LISTER_KEY,
    );
    await ended(gw, "/v1/videos/extensions", extension.id, LISTER_KEY);
    const music = await submit(
      gw,
      "/v1/music/generations",
      { model: "fast-music", prompt: "hum", duration: 1 },
      LISTER_KEY,
    );
    const newestFirst = [extension.id, videos[2].id, videos[1].id, videos[0].id];

    const first = await lister.videos.list({ limit: 2 });
    expect(first.data.map((v) => v.id)).toEqual(newestFirst.slice(0, 2));
    expect(first.has_more).toBe(true);
    expect(first.hasNextPage()).toBe(true);
    const second = await first.getNextPage();
    expect(second.data.map((v) => v.id)).toEqual(newestFirst.slice(2));
    expect(second.has_more).toBe(false);
    // Every page, walked by the SDK.
    const all: string[] = [];
    for await (const video of lister.videos.list({ limit: 3 })) all.push(video.id);
    expect(all).toEqual(newestFirst);
    const oldestFirst = await lister.videos.list({ order: "asc" });
    expect(oldestFirst.data.map((v) => v.id)).toEqual([...newestFirst].reverse());
    // A listed video is the video as `videos.retrieve` shows it: the job as its own path polls
    // it, in the SDK's Video shape.
    const retrieved = await lister.videos.retrieve(videos[1].id);
    expect(first.data.concat(second.data).find((v) => v.id === videos[1].id)).toEqual(retrieved);
    const polled = (await (
      await fetch(`${gw.url}/v1/videos/generations/${videos[1].id}`, {
        headers: auth(LISTER_KEY),
      })
    ).json()) as Job & { seconds: number };
    expect(retrieved).toMatchObject({
      ...polled,
      object: "video",
      seconds: String(polled.seconds),
    });

    // Each endpoint lists its own kind of job.
    const generations = await listed(gw, "/v1/videos/generations", LISTER_KEY);
    expect(generations.data.map((j) => j.id)).toEqual(newestFirst.slice(1));
    expect(generations).toMatchObject({
      object: "list",
      first_id: videos[2].id,
      last_id: videos[0].id,
      has_more: false,
    });
    const extensions = await listed(gw, "/v1/videos/extensions", LISTER_KEY);
    expect(extensions.data.map((j) => [j.id, j.object])).toEqual([
      [extension.id, "video.extension"],
    ]);
    const musicPage = await listed(gw, "/v1/music/generations?limit=5", LISTER_KEY);
    expect(musicPage.data.map((j) => [j.id, j.object])).toEqual([[music.id, "music.generation"]]);
    const afterTwo = await listed(
      gw,
      `/v1/videos/generations?limit=1&after=${videos[1].id}`,
      LISTER_KEY,
    );
    expect(afterTwo.data.map((j) => j.id)).toEqual([videos[0].id]);

    // Another account's jobs are not listed, and not a cursor either.
    expect((await openai.videos.list()).data.map((v) => v.id)).not.toContain(videos[0].id);
    const foreign = await openai.videos.list({ after: videos[0].id }).catch((err: unknown) => err);
    expect(foreign).toBeInstanceOf(OpenAI.BadRequestError);
    expect((foreign as InstanceType<typeof OpenAI.BadRequestError>).message).toContain(
      "query parameter after",
    );
    const tooMany = await fetch(`${gw.url}/v1/videos?limit=101`, { headers: auth(LISTER_KEY) });
    expect(tooMany.status).toBe(400);
    expect(((await tooMany.json()) as { error: { code: string } }).error.code).toBe("bad_request");
  });

  it("retrieves, downloads and deletes a video with the openai SDK; a deleted video's charge stays in the log, which names it", async () => {
    const submitted = await submit(gw, "/v1/videos/generations", {
      model: "fast-video",
      prompt: "waves",
      seconds: 2,
    });
    await ended(gw, "/v1/videos/generations", submitted.id);
    const video = await openai.videos.retrieve(submitted.id);
    expect(video).toMatchObject({ id: submitted.id, status: "completed" });
    const content = await openai.videos.downloadContent(submitted.id);
    expect(readAviInfo(Buffer.from(await content.arrayBuffer()))?.durationSeconds).toBe(2);
    const charged = (await usage(gw)).find((r) => r.job_id === submitted.id);
    expect(charged).toMatchObject({ state: "settled", cost_idr: 2 * VIDEO_PRICE });

    expect(await openai.videos.delete(submitted.id)).toEqual({
      id: submitted.id,
      object: "video.deleted",
      deleted: true,
    });
    await expect(openai.videos.retrieve(submitted.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(openai.videos.downloadContent(submitted.id)).rejects.toBeInstanceOf(
      OpenAI.NotFoundError,
    );
    await expect(openai.videos.delete(submitted.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    const gone = await fetch(`${gw.url}/v1/videos/generations/${submitted.id}`, {
      headers: auth(),
    });
    expect(gone.status).toBe(404);
    expect((await openai.videos.list({ limit: 100 })).data.map((v) => v.id)).not.toContain(
      submitted.id,
    );
    // The charge stays, and still names the job.
    expect((await usage(gw)).find((r) => r.job_id === submitted.id)).toEqual(charged);

    // A video still being made cannot be deleted; a finished music generation can, on its path.
    const running = await submit(gw, "/v1/videos/generations", {
      model: "slow-video",
      prompt: "slow",
      seconds: 1,
    });
    const refused = await openai.videos.delete(running.id).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
    expect((await fetch(`${gw.url}/v1/videos/${running.id}`, { headers: auth() })).status).toBe(
      200,
    );
    const tune = await submit(gw, "/v1/music/generations", {
      model: "fast-music",
      prompt: "tune",
      duration: 1,
    });
    await ended(gw, "/v1/music/generations", tune.id);
    const removed = await fetch(`${gw.url}/v1/music/generations/${tune.id}`, {
      method: "DELETE",
      headers: auth(),
    });
    expect(await removed.json()).toEqual({
      id: tune.id,
      object: "music.generation.deleted",
      deleted: true,
    });
    // A music id is no video.
    await expect(openai.videos.retrieve(tune.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
  });

  it("names the job on its request's row: the usage listing, the dashboard's recent requests and the request's page", async () => {
    const job = await submit(gw, "/v1/music/generations", {
      model: "fast-music",
      prompt: "birdsong",
      duration: 1,
    });
    await ended(gw, "/v1/music/generations", job.id);
    await openai.chat.completions.create({
      model: "mock-gpt",
      messages: [{ role: "user", content: "hi" }],
    });
    const rows = await usage(gw);
    const row = rows.find((r) => r.job_id === job.id);
    expect(row).toMatchObject({
      endpoint: "music.generations",
      state: "settled",
      cost_idr: MUSIC_PRICE,
    });
    const chatRow = rows.find((r) => r.endpoint === "chat.completions");
    expect(chatRow).toBeDefined();
    expect(chatRow).not.toHaveProperty("job_id");

    const owner = await ownerSession(gw);
    const page = async (path: string) => {
      const res = await fetch(`${gw.url}${path}`, { headers: { cookie: owner.cookie } });
      expect(res.status).toBe(200);
      return res.text();
    };
    const detail = await page(`/dashboard/requests/${encodeURIComponent(row!.id)}`);
    expect(detail).toContain(`<dd id="request-job"><code>${job.id}</code></dd>`);
    const home = await page("/dashboard");
    const recent = new RegExp(`<tr id="request-${row!.id}">[\\s\\S]*?</tr>`).exec(home);
    expect(recent?.[0]).toContain(job.id);
  });
});
