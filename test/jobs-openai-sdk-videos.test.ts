import OpenAI, { toFile } from "openai";
import { type Video, Videos } from "openai/resources/videos";
import { describe, expect, it } from "vitest";
import { readAviInfo } from "../src/server/media/avi.js";
import { money } from "./support/api.js";
import { backends, KEY, POOR_KEY, type TestGateway } from "./support/gateway.js";
import { eventually } from "./support/gateways-on-postgres.js";
import { type ConfigAdditions, useJobsGateway } from "./support/jobs-gateway.js";

/**
 * A developer who points the openai SDK's `videos` resource at the gateway: `create` makes the
 * same job as the spec's `POST /v1/videos/generations` (held, limited, refused and charged alike)
 * and every other method of the resource either works as the SDK expects or is a 400 naming what
 * the gateway does not serve, never the 404 of a path no route serves. Each `Video` it reads
 * carries every field the SDK's type declares, true to the video the mock made.
 */

const VIDEO_PRICE = 50;
const microIdr = (idr: number) => idr * 1_000_000;

/** Video models whose jobs end at once or outlast every test, and a music model. */
const jobs: ConfigAdditions = {
  providers: [
    { id: "mock-fast", wire: "mock", mock: { job_seconds: 0.05 } },
    { id: "mock-slow", wire: "mock", mock: { job_seconds: 600 } },
  ],
  models: [
    { name: "fast-video", provider: "mock-fast", modality: "video", price_per_unit: VIDEO_PRICE },
    { name: "slow-video", provider: "mock-slow", modality: "video", price_per_unit: VIDEO_PRICE },
    { name: "fast-music", provider: "mock-fast", modality: "music", price_per_unit: 100 },
  ],
};

/** Every field the SDK's `Video` type declares (none of them optional). */
const videoFields: readonly (keyof Video)[] = [
  "id",
  "completed_at",
  "created_at",
  "error",
  "expires_at",
  "model",
  "object",
  "progress",
  "prompt",
  "remixed_from_video_id",
  "seconds",
  "size",
  "status",
];

function expectEveryVideoField(video: Video): void {
  for (const field of videoFields) expect(video, `${video.id} ${field}`).toHaveProperty(field);
  expect(video.object).toBe("video");
  expect(typeof video.seconds).toBe("string");
  expect(video.size).toMatch(/^\d+x\d+$/);
}

interface UsageRow {
  endpoint: string;
  state: string;
  cost_idr: number;
  job_id?: string;
}

describe.each(backends)("the openai SDK's videos resource (%s)", (backend) => {
  let gw: TestGateway;
  let openai: OpenAI;
  useJobsGateway(backend, jobs, {}, (started) => {
    ({ gw, openai } = started);
  });

  /** What the SDK's `createAndPoll` did: retrieve until the video is done; bounded. */
  const untilDone = (id: string) =>
    eventually(
      () => openai.videos.retrieve(id),
      (video) => video.status === "completed" || video.status === "failed",
      10_000,
      `video ${id} done`,
    );

  /** The request log rows that name the job. */
  async function loggedFor(jobId: string): Promise<UsageRow[]> {
    const res = await fetch(`${gw.url}/v1/usage/requests?limit=500`, {
      headers: { authorization: `Bearer ${KEY}` },
    });
    expect(res.status).toBe(200);
    return ((await res.json()) as { data: UsageRow[] }).data.filter((r) => r.job_id === jobId);
  }

  async function downloaded(id: string) {
    const content = await openai.videos.downloadContent(id, { variant: "video" });
    expect(content.headers.get("content-type")).toBe("video/x-msvideo");
    const info = readAviInfo(Buffer.from(await content.arrayBuffer()));
    expect(info).not.toBeNull();
    return { size: `${info!.width}x${info!.height}`, seconds: info!.durationSeconds };
  }

  /** The error of a call that must be refused: a 4xx in the chat-completions style, never a 404. */
  async function refusal(call: Promise<unknown>) {
    const err = await call.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(OpenAI.APIError);
    const { status, error } = err as InstanceType<typeof OpenAI.APIError>;
    expect((error as { message: string }).message).not.toMatch(/^No route/);
    return { status, ...(error as { code: string; type: string; message: string }) };
  }

  it("videos.create makes a job that polls to completed, as createAndPoll did, charged once in the request log", async () => {
    const before = await money(gw);
    const created = await openai.videos.create({
      model: "fast-video",
      prompt: "a red kite",
      seconds: "4",
      size: "1280x720",
    });
    expectEveryVideoField(created);
    expect(created).toMatchObject({
      object: "video",
      status: "queued",
      model: "fast-video",
      prompt: "a red kite",
      seconds: "4",
      progress: 0,
      completed_at: null,
      error: null,
      remixed_from_video_id: null,
    });

    const done = await untilDone(created.id);
    expectEveryVideoField(done);
    expect(done).toMatchObject({
      id: created.id,
      status: "completed",
      progress: 100,
      seconds: "4",
      size: created.size,
    });
    // The size it shows is the size of the video made: the mock draws small, at the aspect asked.
    const made = await downloaded(created.id);
    expect(made).toEqual({ size: done.size, seconds: 4 });
    const [width, height] = done.size.split("x").map(Number);
    expect(width / height).toBeCloseTo(1280 / 720, 1);

    expect(await loggedFor(created.id)).toEqual([
      expect.objectContaining({
        endpoint: "videos.generations",
        state: "settled",
        cost_idr: 4 * VIDEO_PRICE,
      }),
    ]);
    expect((await money(gw)).balance).toBe(before.balance - microIdr(4 * VIDEO_PRICE));
  });

  /** A finished video made on the spec's path (`POST /v1/videos/generations`), as the SDK reads it. */
  async function specVideo(prompt: string, seconds: number): Promise<Video> {
    const res = await fetch(`${gw.url}/v1/videos/generations`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "fast-video", prompt, seconds }),
    });
    expect(res.status).toBe(202);
    return untilDone(((await res.json()) as { id: string }).id);
  }

  it("a video made on the spec's path is read through the SDK with its size", async () => {
    const done = await specVideo("tide", 1);
    expectEveryVideoField(done);
    expect(done).toMatchObject({ status: "completed", seconds: "1", prompt: "tide" });
    expect(await downloaded(done.id)).toEqual({ size: done.size, seconds: 1 });
  });

  it("the resource has no method these tests leave out", () => {
    const covered = [
      "create",
      "retrieve",
      "list",
      "delete",
      "downloadContent",
      "remix",
      "extend",
      "edit",
      "createCharacter",
      "getCharacter",
    ];
    const methods = Object.getOwnPropertyNames(Videos.prototype).filter((m) => m !== "constructor");
    expect(methods.sort()).toEqual(covered.sort());
  });

  it("list pages with its limit and order, each item a whole Video", async () => {
    const first = await specVideo("first", 1);
    const second = await specVideo("second", 1);
    const listed: Video[] = [];
    for await (const video of openai.videos.list({ limit: 1, order: "asc" })) listed.push(video);
    for (const video of listed) expectEveryVideoField(video);
    const ids = listed.map((video) => video.id);
    expect(ids.indexOf(first.id)).toBeGreaterThanOrEqual(0);
    expect(ids.indexOf(second.id)).toBeGreaterThan(ids.indexOf(first.id));
    const newest = await openai.videos.list({ limit: 1 });
    expect(newest.data.map((video) => video.id)).toEqual([ids.at(-1)]);
  });

  it("downloadContent serves the video, and refuses its thumbnail and spritesheet by name", async () => {
    const source = await specVideo("a lighthouse", 1);
    expect((await downloaded(source.id)).seconds).toBe(1);
    for (const variant of ["thumbnail", "spritesheet"] as const) {
      const refused = await refusal(openai.videos.downloadContent(source.id, { variant }));
      expect(refused).toMatchObject({ status: 400, code: "bad_request" });
      expect(refused.message).toContain("variant");
      expect(refused.message).toContain(variant);
    }
  });

  it("remix makes a new video of the source's length and size from the new prompt, charged once", async () => {
    const source = await specVideo("a lighthouse", 2);
    const remix = await openai.videos.remix(source.id, { prompt: "the lighthouse at night" });
    expectEveryVideoField(remix);
    expect(remix).toMatchObject({
      status: "queued",
      model: source.model,
      prompt: "the lighthouse at night",
      seconds: "2",
      size: source.size,
      remixed_from_video_id: source.id,
    });
    const remixed = await untilDone(remix.id);
    expect(remixed).toMatchObject({ status: "completed", remixed_from_video_id: source.id });
    expect(await downloaded(remix.id)).toEqual({ size: source.size, seconds: 2 });
    expect(await loggedFor(remix.id)).toEqual([
      expect.objectContaining({
        endpoint: "videos.generations",
        state: "settled",
        cost_idr: 2 * VIDEO_PRICE,
      }),
    ]);
    // Only a completed video of the account is remixed.
    const unknown = await refusal(openai.videos.remix("video_nope", { prompt: "x" }));
    expect(unknown).toMatchObject({ status: 404, code: "not_found" });
    expect(unknown.message).toContain("video_nope");
  });

  it("extend continues a video: its seconds are the stitched total, and it is charged the new part once", async () => {
    const source = await specVideo("a lighthouse", 2);
    const extension = await openai.videos.extend({
      video: { id: source.id },
      prompt: "the beam sweeps on",
      seconds: "4",
    });
    expectEveryVideoField(extension);
    expect(extension).toMatchObject({
      object: "video",
      status: "queued",
      model: source.model,
      prompt: "the beam sweeps on",
      seconds: "6",
      size: source.size,
    });
    const extended = await untilDone(extension.id);
    expect(extended).toMatchObject({ status: "completed", seconds: "6" });
    expect(await downloaded(extension.id)).toEqual({ size: source.size, seconds: 6 });
    expect(await loggedFor(extension.id)).toEqual([
      expect.objectContaining({
        endpoint: "videos.extensions",
        state: "settled",
        cost_idr: 4 * VIDEO_PRICE,
      }),
    ]);
    // An upload to extend is refused by name.
    const upload = await refusal(
      openai.videos.extend({
        video: await toFile(Buffer.from("not a video"), "clip.mp4"),
        prompt: "more",
        seconds: "4",
      }),
    );
    expect(upload).toMatchObject({ status: 400, code: "bad_request" });
    expect(upload.message).toMatch(/video.*upload/i);
  });

  it("edit, createCharacter and getCharacter are 400s naming what the gateway does not serve", async () => {
    const source = await specVideo("a lighthouse", 1);
    const edit = await refusal(
      openai.videos.edit({ video: { id: source.id }, prompt: "brighter" }),
    );
    expect(edit).toMatchObject({ status: 400, code: "bad_request", type: "bad_request" });
    expect(edit.message).toMatch(/edit/i);
    const characters = [
      await refusal(
        openai.videos.createCharacter({
          name: "Keeper",
          video: await toFile(Buffer.from("not a video"), "keeper.mp4"),
        }),
      ),
      await refusal(openai.videos.getCharacter("char_123")),
    ];
    for (const refused of characters) {
      expect(refused).toMatchObject({ status: 400, code: "bad_request" });
      expect(refused.message).toMatch(/character/i);
    }
    // What is served still is: the source is there, and goes when deleted.
    expect(await openai.videos.delete(source.id)).toEqual({
      id: source.id,
      object: "video.deleted",
      deleted: true,
    });
    await expect(openai.videos.retrieve(source.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
  });

  it("videos.create is held, limited and refused as the spec's video route is", async () => {
    const before = await money(gw);
    const slow = await openai.videos.create({ model: "slow-video", prompt: "slow", seconds: "8" });
    expect(slow.status).toBe("queued");
    expect((await money(gw)).held - before.held).toBe(microIdr(8 * VIDEO_PRICE));
    const held = await money(gw);

    const unknown = await refusal(openai.videos.create({ model: "nope", prompt: "x" }));
    expect(unknown).toMatchObject({ status: 400, code: "model_not_found" });
    expect(unknown.message).toContain('"nope"');
    // Without a model, OpenAI's default: not a model of this gateway.
    const defaulted = await refusal(openai.videos.create({ prompt: "x" }));
    expect(defaulted).toMatchObject({ status: 400, code: "model_not_found" });
    expect(defaulted.message).toContain('"sora-2"');
    const music = await refusal(openai.videos.create({ model: "fast-music", prompt: "x" }));
    expect(music).toMatchObject({ status: 503, code: "no_wire_for_modality" });
    const long = await refusal(
      openai.videos.create({ model: "fast-video", prompt: "x", seconds: "61" as "4" }),
    );
    expect(long).toMatchObject({ status: 400, code: "bad_request" });
    expect(long.message).toContain("seconds");
    const badSize = await refusal(
      openai.videos.create({ model: "fast-video", prompt: "x", size: "huge" as "720x1280" }),
    );
    expect(badSize).toMatchObject({ status: 400, code: "bad_request" });
    expect(badSize.message).toContain("size");
    const reference = await refusal(
      openai.videos.create({
        model: "fast-video",
        prompt: "x",
        input_reference: { image_url: "https://example.com/a.png" },
      }),
    );
    expect(reference).toMatchObject({ status: 400, code: "bad_request" });
    expect(reference.message).toContain("input_reference");
    const poor = new OpenAI({ apiKey: POOR_KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
    const unpaid = await refusal(poor.videos.create({ model: "fast-video", prompt: "x" }));
    expect(unpaid).toMatchObject({ status: 402, code: "insufficient_balance" });
    // None of the refusals held anything.
    expect(await money(gw)).toEqual(held);

    // A video still being made cannot be deleted.
    const busy = await refusal(openai.videos.delete(slow.id));
    expect(busy).toMatchObject({ status: 400, code: "bad_request" });
  });
});
