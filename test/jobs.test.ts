import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { readAviInfo } from "../src/server/media/avi.js";
import { readWavInfo } from "../src/server/media/wav.js";
import {
  baseConfigWith,
  KEY,
  KEY2,
  POOR_KEY,
  post,
  type TestGateway,
  testGateway,
} from "./support/gateway.js";

const MUSIC_PRICE = 100;
const VIDEO_PRICE = 50;

/** Mock providers whose jobs take 50 ms, half a second, or far longer than any test. */
function jobsConfig(slowJobSeconds = 60): ConfigInput {
  return baseConfigWith({
    providers: [
      { id: "mock-fast", wire: "mock", mock: { job_seconds: 0.05 } },
      { id: "mock-steady", wire: "mock", mock: { job_seconds: 0.5 } },
      { id: "mock-paced", wire: "mock", mock: { job_seconds: 2 } },
      { id: "mock-slow", wire: "mock", mock: { job_seconds: slowJobSeconds } },
      { id: "mock-fast-down", wire: "mock", mock: { job_seconds: 0.05, fail_status: 503 } },
    ],
    models: [
      { name: "mock-music", provider: "mock-fast", modality: "music", price_per_unit: MUSIC_PRICE },
      {
        name: "steady-music",
        provider: "mock-steady",
        modality: "music",
        price_per_unit: MUSIC_PRICE,
      },
      { name: "slow-music", provider: "mock-slow", modality: "music", price_per_unit: MUSIC_PRICE },
      { name: "mock-video", provider: "mock-fast", modality: "video", price_per_unit: VIDEO_PRICE },
      {
        name: "steady-video",
        provider: "mock-steady",
        modality: "video",
        price_per_unit: VIDEO_PRICE,
      },
      {
        name: "paced-video",
        provider: "mock-paced",
        modality: "video",
        price_per_unit: VIDEO_PRICE,
      },
      {
        name: "down-video",
        provider: "mock-fast-down",
        modality: "video",
        price_per_unit: VIDEO_PRICE,
      },
    ],
  });
}

interface JobView {
  id: string;
  object: string;
  status: "queued" | "running" | "completed" | "failed";
  model: string;
  created_at: number;
  started_at: number | null;
  finished_at: number | null;
  result?: { url: string; content_type: string; duration: number; bytes: number };
  error?: { code: string; message: string };
}

const auth = (key = KEY) => ({ authorization: `Bearer ${key}` });

async function submit(
  gw: { url: string },
  path: string,
  body: object,
  key = KEY,
): Promise<JobView> {
  const res = await post(gw, path, body, auth(key));
  expect(res.status, await res.clone().text()).toBe(202);
  return (await res.json()) as JobView;
}

async function poll(gw: { url: string }, path: string, id: string, key = KEY): Promise<JobView> {
  const res = await fetch(`${gw.url}${path}/${id}`, { headers: auth(key) });
  expect(res.status).toBe(200);
  return (await res.json()) as JobView;
}

/** Polls until the job ends; bounded so a stuck runner fails the test instead of hanging it. */
async function finished(
  gw: { url: string },
  path: string,
  id: string,
  timeoutMs = 5_000,
): Promise<JobView> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const job = await poll(gw, path, id);
    if (job.status === "completed" || job.status === "failed") return job;
    if (Date.now() > deadline)
      throw new Error(`job ${id} still ${job.status} after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The music generations in the account's request log, oldest first. */
function musicLog(gw: Pick<TestGateway, "services">) {
  return gw.services.store
    .requestLog("acct", 1_000)
    .filter((row) => row.endpoint === "music.generations")
    .reverse()
    .map(({ state, cost_micro }) => ({ state, cost_micro }));
}

async function download(
  url: string,
  key = KEY,
): Promise<{ status: number; type: string | null; bytes: Buffer }> {
  const res = await fetch(url, { headers: auth(key) });
  return {
    status: res.status,
    type: res.headers.get("content-type"),
    bytes: Buffer.from(await res.arrayBuffer()),
  };
}

describe("asynchronous jobs", () => {
  let gw: TestGateway;
  /** The balance minus what in-flight jobs hold. */
  const balanceMicro = (account = "acct") =>
    gw.services.store.getAccount(account)!.balance_micro - gw.services.ledger.heldMicro(account);

  beforeAll(async () => {
    gw = await testGateway({ config: jobsConfig() });
  });
  afterAll(() => gw?.close());

  it("generates music: queued at once, then a WAV of the requested length, charged seconds x price", async () => {
    const before = balanceMicro();
    // Other tests of this gateway log music too, in whatever order they ran.
    const logged = musicLog(gw).length;
    const job = await submit(gw, "/v1/music/generations", {
      model: "mock-music",
      prompt: "lofi rain",
      duration: 3,
    });
    expect(job).toMatchObject({
      object: "music.generation",
      status: "queued",
      model: "mock-music",
    });
    expect(job.id).toMatch(/^music_/);
    expect(job.created_at).toBeCloseTo(Date.now() / 1000, -1);
    // The worst case is held while the job runs.
    expect(before - balanceMicro()).toBe(3 * MUSIC_PRICE * 1_000_000);

    const done = await finished(gw, "/v1/music/generations", job.id);
    expect(done.status).toBe("completed");
    expect(done.result).toMatchObject({ content_type: "audio/wav", duration: 3 });
    expect(done.result!.url).toBe(`${gw.url}/v1/music/generations/${job.id}/content`);
    const file = await download(done.result!.url);
    expect(file.status).toBe(200);
    expect(file.type).toBe("audio/wav");
    expect(file.bytes.length).toBe(done.result!.bytes);
    expect(readWavInfo(file.bytes)?.durationSeconds).toBe(3);
    expect(before - balanceMicro()).toBe(3 * MUSIC_PRICE * 1_000_000);
    const log = musicLog(gw).slice(logged);
    expect(log).toEqual([{ state: "settled", cost_micro: 3 * MUSIC_PRICE * 1_000_000 }]);
  });

  it("moves queued -> running -> completed, with timestamps", async () => {
    const job = await submit(gw, "/v1/videos/generations", {
      model: "paced-video",
      prompt: "waves",
      seconds: 1,
    });
    expect(job.status).toBe("queued");
    // Seen as soon as it leaves the queue (a fixed wait could come after a loaded machine ran it
    // to its end): a two-second job is still running then.
    let running = await poll(gw, "/v1/videos/generations", job.id);
    for (let i = 0; i < 250 && running.status === "queued"; i++) {
      await new Promise((r) => setTimeout(r, 20));
      running = await poll(gw, "/v1/videos/generations", job.id);
    }
    expect(running.status).toBe("running");
    expect(running.started_at).not.toBeNull();
    expect(running.result).toBeUndefined();
    const notYet = await fetch(`${gw.url}/v1/videos/generations/${job.id}/content`, {
      headers: auth(),
    });
    expect(notYet.status).toBe(404);
    const done = await finished(gw, "/v1/videos/generations", job.id);
    expect(done.status).toBe("completed");
    expect(done.finished_at).toBeGreaterThanOrEqual(done.started_at!);
  });

  it("generates a video and extends it: real AVIs whose lengths add up, each charged its seconds", async () => {
    const before = balanceMicro();
    const video = await submit(gw, "/v1/videos/generations", {
      model: "mock-video",
      prompt: "a red ball",
      seconds: "2",
    });
    expect(video.object).toBe("video.generation");
    const done = await finished(gw, "/v1/videos/generations", video.id);
    expect(done.result).toMatchObject({ content_type: "video/x-msvideo", duration: 2 });
    const clip = await download(done.result!.url);
    expect(readAviInfo(clip.bytes)).toMatchObject({ durationSeconds: 2 });

    const extension = await submit(gw, "/v1/videos/extensions", {
      video_id: video.id,
      prompt: "it bounces away",
      seconds: 1,
    });
    expect(extension).toMatchObject({
      object: "video.extension",
      status: "queued",
      model: "mock-video",
    });
    const extended = await finished(gw, "/v1/videos/extensions", extension.id);
    expect(extended.result?.duration).toBe(3);
    const longer = await download(extended.result!.url);
    const info = readAviInfo(longer.bytes)!;
    expect(info.durationSeconds).toBe(3);
    expect(info.frames).toBe(readAviInfo(clip.bytes)!.frames * 1.5);
    expect(before - balanceMicro()).toBe(3 * VIDEO_PRICE * 1_000_000);
  });

  it("bills a fractional length per started second", async () => {
    const before = balanceMicro();
    const job = await submit(gw, "/v1/videos/generations", {
      model: "mock-video",
      prompt: "short",
      seconds: 1.5,
    });
    const done = await finished(gw, "/v1/videos/generations", job.id);
    expect(done.result?.duration).toBe(1.5);
    expect(before - balanceMicro()).toBe(2 * VIDEO_PRICE * 1_000_000);
  });

  it("fails a job whose provider fails, with an error, and refunds its hold", async () => {
    const before = balanceMicro();
    const job = await submit(gw, "/v1/videos/generations", {
      model: "down-video",
      prompt: "x",
      seconds: 4,
    });
    expect(balanceMicro()).toBe(before - 4 * VIDEO_PRICE * 1_000_000);
    const done = await finished(gw, "/v1/videos/generations", job.id);
    expect(done.status).toBe("failed");
    expect(done.error).toEqual({
      code: "upstream_error",
      message: "The provider failed or timed out: send the request again in a few seconds.",
    });
    expect(done.result).toBeUndefined();
    expect(balanceMicro()).toBe(before);

    const forced = await submit(gw, "/v1/music/generations", {
      model: "mock-music",
      prompt: "[[mock:fail=500]]",
      duration: 1,
    });
    expect((await finished(gw, "/v1/music/generations", forced.id)).status).toBe("failed");
    expect(balanceMicro()).toBe(before);
  });

  it("shows a job only to its own account: another account's id is 404 like an unknown one", async () => {
    const job = await submit(gw, "/v1/music/generations", {
      model: "mock-music",
      prompt: "private",
      duration: 1,
    });
    const done = await finished(gw, "/v1/music/generations", job.id);
    expect((await poll(gw, "/v1/music/generations", job.id, KEY2)).status).toBe("completed");

    for (const url of [`${gw.url}/v1/music/generations/${job.id}`, done.result!.url]) {
      const res = await fetch(url, { headers: auth(POOR_KEY) });
      expect(res.status).toBe(404);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe("not_found");
    }
    const unknown = await fetch(`${gw.url}/v1/music/generations/music_unknown`, {
      headers: auth(),
    });
    expect(unknown.status).toBe(404);
    expect(((await unknown.json()) as { error: { code: string } }).error.code).toBe("not_found");
    // A music id is not a video.
    expect(
      (await fetch(`${gw.url}/v1/videos/generations/${job.id}`, { headers: auth() })).status,
    ).toBe(404);
    // Nor can another account extend this account's video.
    const video = await submit(gw, "/v1/videos/generations", {
      model: "mock-video",
      prompt: "mine",
      seconds: 1,
    });
    await finished(gw, "/v1/videos/generations", video.id);
    const stolen = await post(
      gw,
      "/v1/videos/extensions",
      { video_id: video.id, prompt: "x" },
      auth(POOR_KEY),
    );
    expect(stolen.status).toBe(404);
  });

  it("refuses to extend a video that has not finished", async () => {
    const video = await submit(gw, "/v1/videos/generations", {
      model: "steady-video",
      prompt: "slow",
      seconds: 1,
    });
    const res = await post(gw, "/v1/videos/extensions", { video_id: video.id, prompt: "more" });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(
      /video_id.*only a completed video/,
    );
    await finished(gw, "/v1/videos/generations", video.id);
  });

  const invalid: [string, string, object, number, string, RegExp][] = [
    [
      "music without a prompt",
      "/v1/music/generations",
      { model: "mock-music" },
      400,
      "bad_request",
      /prompt/,
    ],
    [
      "music with a negative duration",
      "/v1/music/generations",
      { model: "mock-music", prompt: "x", duration: -1 },
      400,
      "bad_request",
      /duration/,
    ],
    [
      "music of a chat model",
      "/v1/music/generations",
      { model: "mock-gpt", prompt: "x" },
      503,
      "no_wire_for_modality",
      /music/,
    ],
    [
      "video with seconds that are not a number",
      "/v1/videos/generations",
      { model: "mock-video", prompt: "x", seconds: "soon" },
      400,
      "bad_request",
      /seconds/,
    ],
    [
      "video longer than a minute",
      "/v1/videos/generations",
      { model: "mock-video", prompt: "x", seconds: 61 },
      400,
      "bad_request",
      /seconds/,
    ],
    [
      "video of an unknown model",
      "/v1/videos/generations",
      { model: "nope", prompt: "x" },
      400,
      "model_not_found",
      /nope/,
    ],
    [
      "video of a music model",
      "/v1/videos/generations",
      { model: "mock-music", prompt: "x" },
      503,
      "no_wire_for_modality",
      /video/,
    ],
    [
      "an extension without video_id",
      "/v1/videos/extensions",
      { prompt: "x" },
      400,
      "bad_request",
      /video_id/,
    ],
    [
      "an extension of an unknown video",
      "/v1/videos/extensions",
      { video_id: "video_nope", prompt: "x" },
      404,
      "not_found",
      /video_nope/,
    ],
  ];
  for (const [what, path, body, status, code, message] of invalid) {
    it(`answers ${status} ${code} for ${what}`, async () => {
      const before = balanceMicro();
      const res = await post(gw, path, body);
      expect(res.status).toBe(status);
      const { error } = (await res.json()) as { error: { code: string; message: string } };
      expect(error.code).toBe(code);
      expect(error.message).toMatch(message);
      expect(balanceMicro()).toBe(before);
    });
  }

  it("answers 402 when the account cannot hold the job's worst case", async () => {
    const res = await post(
      gw,
      "/v1/music/generations",
      { model: "mock-music", prompt: "x" },
      auth(POOR_KEY),
    );
    expect(res.status).toBe(402);
  });

  it("allows 2 unfinished music generations per account; a third in parallel gets 429 with Retry-After 60", async () => {
    // A gateway of its own: its two slow jobs stay unfinished until it closes, which would refuse
    // the music of any test run after it on a shared one.
    const shared = gw;
    gw = await testGateway({ config: jobsConfig() });
    try {
      await twoMusicAtOnce();
    } finally {
      await gw.close();
      gw = shared;
    }
  });

  async function twoMusicAtOnce(): Promise<void> {
    const before = balanceMicro();
    const responses = await Promise.all(
      [1, 2, 3].map((i) =>
        post(gw, "/v1/music/generations", {
          model: "slow-music",
          prompt: `tune ${i}`,
          duration: 5,
        }),
      ),
    );
    const statuses = responses.map((r) => r.status).sort();
    expect(statuses).toEqual([202, 202, 429]);
    const rejected = responses.find((r) => r.status === 429)!;
    expect(rejected.headers.get("retry-after")).toBe("60");
    const { error } = (await rejected.json()) as { error: { code: string; type: string } };
    expect(error).toMatchObject({ code: "rate_limit_exceeded", type: "rate_limit_exceeded" });
    // Only the two accepted jobs hold money.
    expect(before - balanceMicro()).toBe(2 * 5 * MUSIC_PRICE * 1_000_000);

    const again = await post(gw, "/v1/music/generations", {
      model: "mock-music",
      prompt: "one more",
      duration: 1,
    });
    expect(again.status).toBe(429);
    expect(again.headers.get("retry-after")).toBe("60");
    // Other kinds and other accounts are not limited by it.
    expect(
      (await post(gw, "/v1/videos/generations", { model: "mock-video", prompt: "x", seconds: 1 }))
        .status,
    ).toBe(202);
  }
});

describe("jobs across a restart", () => {
  it("resumes a job that was running when the gateway stopped, and charges it exactly once", async () => {
    const dir = mkdtempSync(join(tmpdir(), "gateway-jobs-restart-"));
    const db = join(dir, "gateway.db");
    try {
      const first = await testGateway({ db, config: jobsConfig(60) });
      const before = first.services.store.getAccount("acct")!.balance_micro;
      const job = await submit(first, "/v1/music/generations", {
        model: "slow-music",
        prompt: "survivor",
        duration: 2,
      });
      await new Promise((r) => setTimeout(r, 100));
      expect((await poll(first, "/v1/music/generations", job.id)).status).toBe("running");
      await first.close();

      // Same file; the slow provider is now quick, so the resumed job finishes promptly.
      const second = await testGateway({ db, config: jobsConfig(0.05) });
      try {
        const done = await finished(second, "/v1/music/generations", job.id);
        expect(done.status).toBe("completed");
        expect(readWavInfo((await download(done.result!.url)).bytes)?.durationSeconds).toBe(2);
        const after = second.services.store.getAccount("acct")!.balance_micro;
        expect(before - after).toBe(2 * MUSIC_PRICE * 1_000_000);
        const log = musicLog(second);
        // The hold survived the restart with its job and was settled once.
        expect(log).toEqual([{ state: "settled", cost_micro: 2 * MUSIC_PRICE * 1_000_000 }]);
      } finally {
        await second.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
