import { describe, expect, it } from "vitest";
import { readWavInfo, readWavPcm16Mono } from "../../../media/wav.js";
import { mockMusic } from "./music.js";
import { transcribeMockWav } from "./speech.js";

describe("mockMusic", () => {
  it("writes a WAV of exactly the requested length", () => {
    for (const seconds of [0.25, 3, 10.5]) {
      const info = readWavInfo(mockMusic("lofi beats", seconds))!;
      expect(info).toMatchObject({ sampleRate: 24000, channels: 1, bitsPerSample: 16 });
      expect(info.durationSeconds).toBeCloseTo(seconds, 4);
    }
    expect(readWavInfo(mockMusic("hi-fi", 1, { sampleRate: 44100 }))!.sampleRate).toBe(44100);
  });

  it("is deterministic per prompt and differs between prompts", () => {
    const song = mockMusic("sea shanty", 2);
    expect(mockMusic("sea shanty", 2).equals(song)).toBe(true);
    expect(mockMusic("space opera", 2).equals(song)).toBe(false);
  });

  it("is audible, never clips and fades to silence at the end", () => {
    const { samples } = readWavPcm16Mono(mockMusic("anthem", 5))!;
    let peak = 0;
    let energy = 0;
    for (const sample of samples) {
      peak = Math.max(peak, Math.abs(sample));
      energy += sample * sample;
    }
    expect(peak).toBeLessThan(32767);
    expect(Math.sqrt(energy / samples.length)).toBeGreaterThan(1000);
    expect(Math.abs(samples[samples.length - 1])).toBeLessThan(100);
  });

  it("is not mistaken for mock speech", () => {
    expect(transcribeMockWav(mockMusic("anything", 1))).toBeNull();
  });

  it("rejects impossible lengths", () => {
    for (const seconds of [0, -1, Number.NaN, Number.POSITIVE_INFINITY, 601]) {
      expect(() => mockMusic("x", seconds)).toThrow(RangeError);
    }
  });
});
