import { describe, expect, it } from "vitest";
import { speechContentType } from "../../../media/audio-formats.js";
import { encodeWav, readWavInfo } from "../../../media/wav.js";
import {
  isMockSpeechFormat,
  mockSpeech,
  speechSeconds,
  supportedMockSpeechFormats,
  transcribeMockPcm,
  transcribeMockWav,
} from "./speech.js";

const SAMPLES = [
  "Hello, world!",
  "",
  " ",
  "a",
  "Grüße aus Köln – naïve café, señor.",
  "你好，世界。今天天气很好。",
  "こんにちは世界",
  "Emoji 👋🏽 family 👨‍👩‍👧‍👦 flags 🇫🇷 done 🎉",
  "line one\nline two\ttabbed  double  spaced ",
  "Ελληνικά και русский текст и עברית ומספרים 12345",
];

describe("mockSpeech + transcribeMockWav", () => {
  it.each(SAMPLES)("round-trips %j through the audio signal", (text) => {
    const wav = mockSpeech(text);
    expect(transcribeMockWav(wav)).toBe(text);
  });

  it("round-trips at other sample rates and through raw PCM", () => {
    const text = "Sample rates 🎚️ vary";
    for (const sampleRate of [8000, 16000, 22050, 44100, 48000]) {
      expect(transcribeMockWav(mockSpeech(text, { sampleRate })), String(sampleRate)).toBe(text);
    }
    const pcm = mockSpeech(text, { format: "pcm" });
    expect(pcm.toString("latin1", 0, 4)).not.toBe("RIFF");
    expect(transcribeMockPcm(pcm)).toBe(text);
    expect(transcribeMockPcm(mockSpeech(text, { format: "pcm", sampleRate: 16000 }), 16000)).toBe(
      text,
    );
  });

  it("writes a valid 24 kHz 16-bit mono WAV by default, raw PCM of the same samples on request", () => {
    const wav = mockSpeech("The quick brown fox jumps over the lazy dog.");
    const info = readWavInfo(wav)!;
    expect(info).toMatchObject({ sampleRate: 24000, channels: 1, bitsPerSample: 16 });
    const pcm = mockSpeech("The quick brown fox jumps over the lazy dog.", { format: "pcm" });
    expect(pcm.equals(wav.subarray(44))).toBe(true);
  });

  it("lasts about as long as speaking the text at 150 words per minute", () => {
    const words = Array.from({ length: 150 }, (_, i) => `word${i % 10}`).join(" ");
    expect(readWavInfo(mockSpeech(words))!.durationSeconds).toBeCloseTo(60, 0);
    const nineWords = "The quick brown fox jumps over the lazy dog.";
    expect(speechSeconds(nineWords)).toBeCloseTo(3.6);
    expect(readWavInfo(mockSpeech(nineWords))!.durationSeconds).toBeCloseTo(3.6, 1);
    expect(readWavInfo(mockSpeech(""))!.durationSeconds).toBeCloseTo(0.5, 1);
    expect(readWavInfo(mockSpeech("Hi"))!.durationSeconds).toBeCloseTo(0.5, 1);
  });

  it("stretches only when the text carries more bytes than its speaking time holds", () => {
    const unbroken = "x".repeat(300);
    const seconds = readWavInfo(mockSpeech(unbroken))!.durationSeconds;
    expect(seconds).toBeGreaterThan(3);
    expect(seconds).toBeLessThan(3.5);
    expect(transcribeMockWav(mockSpeech(unbroken))).toBe(unbroken);
  });

  it("has pauses between words, like speech", () => {
    const wav = mockSpeech("one two three four");
    const samples = new Int16Array(
      wav.buffer.slice(wav.byteOffset + 44, wav.byteOffset + wav.length),
    );
    const windowLength = 240;
    let silentRuns = 0;
    let previousSilent = false;
    for (let offset = 0; offset + windowLength <= samples.length; offset += windowLength) {
      const silent = samples.subarray(offset, offset + windowLength).every((s) => s === 0);
      if (silent && !previousSilent) silentRuns++;
      previousSilent = silent;
    }
    expect(silentRuns).toBeGreaterThanOrEqual(4);
  });

  it("is deterministic", () => {
    expect(mockSpeech("same words").equals(mockSpeech("same words"))).toBe(true);
    expect(mockSpeech("same words").equals(mockSpeech("other words"))).toBe(false);
  });

  it("rejects sample rates the modem cannot use", () => {
    expect(() => mockSpeech("x", { sampleRate: 4000 })).toThrow(RangeError);
    expect(() => mockSpeech("x", { sampleRate: 22050.5 })).toThrow(RangeError);
  });
});

describe("transcribeMockWav on foreign audio", () => {
  it("returns null for WAVs the mock did not make", () => {
    const rate = 24000;
    const tone = new Int16Array(rate).map((_, i) =>
      Math.round(8000 * Math.sin((2 * Math.PI * 440 * i) / rate)),
    );
    expect(transcribeMockWav(encodeWav(tone, rate))).toBeNull();
    expect(transcribeMockWav(encodeWav(new Int16Array(rate), rate))).toBeNull();
    const noise = new Int16Array(rate);
    let state = 7;
    for (let i = 0; i < noise.length; i++) {
      state = (state * 1103515245 + 12345) & 0x7fffffff;
      noise[i] = (state % 16000) - 8000;
    }
    expect(transcribeMockWav(encodeWav(noise, rate))).toBeNull();
    expect(transcribeMockWav(Buffer.from("not even a wav"))).toBeNull();
  });

  it("returns null when the signal is damaged or cut short", () => {
    const wav = Buffer.from(mockSpeech("checksums catch damage"));
    const cut = Buffer.from(wav.subarray(0, 44 + 2 * 24000 * 0.3));
    cut.writeUInt32LE(cut.length - 8, 4);
    cut.writeUInt32LE(cut.length - 44, 40);
    expect(transcribeMockWav(cut)).toBeNull();
    const louder = Buffer.from(wav);
    for (let offset = 44; offset < louder.length; offset += 2) {
      louder.writeInt16LE(Math.trunc(louder.readInt16LE(offset) * 0.5), offset);
    }
    expect(transcribeMockWav(louder)).toBe("checksums catch damage");
  });
});

describe("speech formats", () => {
  it("maps every OpenAI response_format to a content type", () => {
    expect(speechContentType("mp3")).toBe("audio/mpeg");
    expect(speechContentType("opus")).toBe("audio/ogg");
    expect(speechContentType("aac")).toBe("audio/aac");
    expect(speechContentType("flac")).toBe("audio/flac");
    expect(speechContentType("wav")).toBe("audio/wav");
    expect(speechContentType("pcm")).toBe("audio/pcm");
    expect(speechContentType("toString")).toBe("application/octet-stream");
  });

  it("lists what the mock can really produce", () => {
    expect(supportedMockSpeechFormats).toEqual(["wav", "pcm"]);
    expect(isMockSpeechFormat("wav")).toBe(true);
    expect(isMockSpeechFormat("mp3")).toBe(false);
  });
});
