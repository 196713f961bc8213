import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { readAvi, readAviInfo } from "../../../media/avi.js";
import { extendMockVideo, mockVideo, mockVideoSize } from "./video.js";

const hasFfprobe = spawnSync("ffprobe", ["-version"]).status === 0;

describe("mockVideoSize", () => {
  it("keeps a size asked within 64 pixels, scales a larger one down with its aspect ratio", () => {
    expect(mockVideoSize(undefined)).toEqual({ width: 64, height: 36 });
    expect(mockVideoSize("30x20")).toEqual({ width: 30, height: 20 });
    expect(mockVideoSize("1280x720")).toEqual({ width: 64, height: 36 });
    expect(mockVideoSize("720x1280")).toEqual({ width: 36, height: 64 });
    expect(mockVideoSize("1792x1024")).toEqual({ width: 64, height: 37 });
    expect(mockVideoSize("4000x1")).toEqual({ width: 64, height: 1 });
  });
});

describe("mockVideo", () => {
  it("writes a small valid AVI of the requested length", () => {
    const video = mockVideo("a paper boat on a river", { seconds: 4 });
    expect(readAviInfo(video)).toEqual({
      width: 64,
      height: 36,
      frames: 24,
      fps: 6,
      durationSeconds: 4,
    });
    expect(video.length).toBeLessThan(200_000);
  });

  it("honours width, height and fps, including widths that need row padding", () => {
    const video = mockVideo("custom", { seconds: 1.5, width: 30, height: 20, fps: 10 });
    expect(readAviInfo(video)).toEqual({
      width: 30,
      height: 20,
      frames: 15,
      fps: 10,
      durationSeconds: 1.5,
    });
  });

  it("moves: consecutive frames differ", () => {
    const frames = readAvi(mockVideo("motion", { seconds: 2 }))!.frames;
    for (let i = 1; i < frames.length; i++) expect(frames[i].equals(frames[i - 1])).toBe(false);
  });

  it("is deterministic per prompt and differs between prompts", () => {
    const video = mockVideo("a comet", { seconds: 1 });
    expect(mockVideo("a comet", { seconds: 1 }).equals(video)).toBe(true);
    expect(mockVideo("a planet", { seconds: 1 }).equals(video)).toBe(false);
  });

  it("rejects impossible requests", () => {
    expect(() => mockVideo("x", { seconds: 0 })).toThrow(RangeError);
    expect(() => mockVideo("x", { seconds: Number.NaN })).toThrow(RangeError);
    expect(() => mockVideo("x", { seconds: 1, width: 0 })).toThrow(RangeError);
    expect(() => mockVideo("x", { seconds: 1, fps: 2.5 })).toThrow(RangeError);
    expect(() => mockVideo("x", { seconds: 600, width: 1920, height: 1080, fps: 60 })).toThrow(
      RangeError,
    );
  });
});

describe("extendMockVideo", () => {
  it("keeps the original frames and appends the extra seconds", () => {
    const original = mockVideo("a kite", { seconds: 4 });
    const extended = extendMockVideo(original, "the kite flies higher", 2);
    expect(readAviInfo(extended)).toEqual({
      width: 64,
      height: 36,
      frames: 36,
      fps: 6,
      durationSeconds: 6,
    });
    const before = readAvi(original)!.frames;
    const after = readAvi(extended)!.frames;
    expect(before.every((frame, i) => after[i].equals(frame))).toBe(true);
    expect(after[24].equals(after[23])).toBe(false);
    expect(extendMockVideo(original, "the kite flies higher", 2).equals(extended)).toBe(true);
  });

  it("extends an extension and keeps custom geometry", () => {
    const small = mockVideo("dots", { seconds: 1, width: 10, height: 10, fps: 4 });
    const twice = extendMockVideo(extendMockVideo(small, "more", 1), "again", 0.5);
    expect(readAviInfo(twice)).toEqual({
      width: 10,
      height: 10,
      frames: 10,
      fps: 4,
      durationSeconds: 2.5,
    });
  });

  it("refuses what it cannot extend", () => {
    expect(() => extendMockVideo(Buffer.from("not a video"), "x", 1)).toThrow(RangeError);
    expect(() => extendMockVideo(mockVideo("x", { seconds: 1 }), "x", -1)).toThrow(RangeError);
  });
});

describe.skipIf(!hasFfprobe)("ffprobe agrees", () => {
  it("reads the mock video's stream", () => {
    const dir = mkdtempSync(join(tmpdir(), "mock-video-"));
    try {
      const file = join(dir, "mock.avi");
      writeFileSync(file, extendMockVideo(mockVideo("probe me", { seconds: 2 }), "more", 1));
      const probe = spawnSync(
        "ffprobe",
        [
          "-v",
          "error",
          "-count_frames",
          "-select_streams",
          "v:0",
          "-show_entries",
          "stream=codec_name,width,height,nb_read_frames,r_frame_rate",
          "-of",
          "json",
          file,
        ],
        { encoding: "utf8" },
      );
      expect(probe.status, probe.stderr).toBe(0);
      const stream = JSON.parse(probe.stdout).streams[0];
      expect(stream).toMatchObject({
        codec_name: "rawvideo",
        width: 64,
        height: 36,
        r_frame_rate: "6/1",
      });
      expect(Number(stream.nb_read_frames)).toBe(18);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
