import { describe, expect, it } from "vitest";
import {
  decodeWav,
  encodeWav,
  int16ToLe,
  leToInt16,
  readWavInfo,
  readWavPcm16Mono,
} from "./wav.js";

describe("encodeWav", () => {
  it("writes a canonical PCM 16-bit mono header with consistent sizes", () => {
    const samples = Int16Array.from([0, 1000, -1000, 32767, -32768]);
    const wav = encodeWav(samples, 8000);
    expect(wav.length).toBe(44 + samples.length * 2);
    expect(wav.toString("latin1", 0, 4)).toBe("RIFF");
    expect(wav.readUInt32LE(4)).toBe(wav.length - 8);
    expect(wav.toString("latin1", 8, 16)).toBe("WAVEfmt ");
    expect(wav.readUInt32LE(16)).toBe(16);
    expect(wav.readUInt16LE(20)).toBe(1); // PCM
    expect(wav.readUInt16LE(22)).toBe(1); // mono
    expect(wav.readUInt32LE(24)).toBe(8000);
    expect(wav.readUInt32LE(28)).toBe(16000); // byte rate
    expect(wav.readUInt16LE(32)).toBe(2); // block align
    expect(wav.readUInt16LE(34)).toBe(16);
    expect(wav.toString("latin1", 36, 40)).toBe("data");
    expect(wav.readUInt32LE(40)).toBe(samples.length * 2);
    expect(wav.readInt16LE(44 + 2 * 3)).toBe(32767);
    expect(readWavPcm16Mono(wav)?.samples).toEqual(samples);
  });

  it("keeps the file length even", () => {
    expect(encodeWav(new Int16Array(3), 8000).length % 2).toBe(0);
  });

  it("rejects impossible sample rates", () => {
    expect(() => encodeWav(new Int16Array(1), 0)).toThrow(RangeError);
    expect(() => encodeWav(new Int16Array(1), 44100.5)).toThrow(RangeError);
  });
});

describe("readWavInfo", () => {
  it("reports format and duration", () => {
    expect(readWavInfo(encodeWav(new Int16Array(24000 * 2), 24000))).toEqual({
      sampleRate: 24000,
      channels: 1,
      bitsPerSample: 16,
      durationSeconds: 2,
    });
  });

  it("skips unknown chunks and reads other PCM layouts", () => {
    const wav = encodeWav(new Int16Array(4), 16000);
    const junk = Buffer.concat([
      Buffer.from("JUNK", "latin1"),
      Buffer.from([3, 0, 0, 0, 1, 2, 3, 0]),
    ]);
    const withJunk = Buffer.concat([wav.subarray(0, 12), junk, wav.subarray(12)]);
    withJunk.writeUInt32LE(withJunk.length - 8, 4);
    expect(readWavInfo(withJunk)?.durationSeconds).toBe(4 / 16000);

    const stereo = Buffer.from(wav);
    stereo.writeUInt16LE(2, 22);
    stereo.writeUInt32LE(16000 * 4, 28);
    stereo.writeUInt16LE(4, 32);
    expect(readWavInfo(stereo)).toMatchObject({ channels: 2, durationSeconds: 2 / 16000 });
    expect(readWavPcm16Mono(stereo)).toBeNull();
  });

  it("returns null for non-WAV data and inconsistent headers", () => {
    const wav = encodeWav(new Int16Array(10), 8000);
    expect(readWavInfo(Buffer.from("definitely not audio"))).toBeNull();
    expect(readWavInfo(wav.subarray(0, 30))).toBeNull();
    const wrongForm = Buffer.from(wav);
    wrongForm.write("AVI ", 8, "latin1");
    expect(readWavInfo(wrongForm)).toBeNull();
    const wrongAlign = Buffer.from(wav);
    wrongAlign.writeUInt16LE(3, 32);
    expect(readWavInfo(wrongAlign)).toBeNull();
    const noData = Buffer.from(wav.subarray(0, 36));
    noData.writeUInt32LE(28, 4);
    expect(readWavInfo(noData)).toBeNull();
  });

  it("plays what is there when a streamed WAV declares more data than arrived", () => {
    const streamed = Buffer.from(encodeWav(new Int16Array(100), 8000));
    streamed.writeUInt32LE(0xffffffff, 4);
    streamed.writeUInt32LE(0xffffffff, 40);
    expect(readWavInfo(streamed)?.durationSeconds).toBe(100 / 8000);
  });
});

describe("int16ToLe / leToInt16", () => {
  it("round-trips samples as little-endian bytes", () => {
    const samples = Int16Array.from([1, -2, 300, -32768]);
    const bytes = int16ToLe(samples);
    expect([...bytes.subarray(0, 4)]).toEqual([1, 0, 0xfe, 0xff]);
    expect(leToInt16(bytes)).toEqual(samples);
  });
});

describe("decodeWav", () => {
  /** A stereo WAV in `fmt` (16 or 40 bytes) with `data`, headers consistent. */
  function wavWith(fmt: Buffer, data: Buffer): Buffer {
    const chunk = (id: string, body: Buffer) => {
      const head = Buffer.alloc(8);
      head.write(id, 0, "latin1");
      head.writeUInt32LE(body.length, 4);
      return Buffer.concat([head, body]);
    };
    return chunk(
      "RIFF",
      Buffer.concat([Buffer.from("WAVE"), chunk("fmt ", fmt), chunk("data", data)]),
    );
  }
  function fmt(tag: number, bits: number, subFormat?: number): Buffer {
    const out = Buffer.alloc(subFormat === undefined ? 16 : 40);
    out.writeUInt16LE(tag, 0);
    out.writeUInt16LE(2, 2);
    out.writeUInt32LE(8000, 4);
    out.writeUInt32LE(8000 * 2 * (bits / 8), 8);
    out.writeUInt16LE(2 * (bits / 8), 12);
    out.writeUInt16LE(bits, 14);
    if (subFormat !== undefined) out.writeUInt16LE(subFormat, 24);
    return out;
  }

  it("averages channels and scales every sample format to 16 bits", () => {
    const u8 = Buffer.from([128, 128, 255, 1, 0, 0]);
    expect([...(decodeWav(wavWith(fmt(1, 8), u8))?.samples ?? [])]).toEqual([0, 0, -32767]);
    const f32 = Buffer.alloc(16);
    f32.writeFloatLE(0.5, 0);
    f32.writeFloatLE(0.5, 4);
    f32.writeFloatLE(2, 8); // out of range: clamped
    f32.writeFloatLE(Number.NaN, 12); // silence
    expect([...(decodeWav(wavWith(fmt(3, 32), f32))?.samples ?? [])]).toEqual([16384, 16384]);
    const s24 = Buffer.alloc(6);
    s24.writeIntLE(-8388608, 0, 3);
    s24.writeIntLE(-8388608, 3, 3);
    expect([...(decodeWav(wavWith(fmt(0xfffe, 24, 1), s24))?.samples ?? [])]).toEqual([-32767]);
    expect(decodeWav(wavWith(fmt(0xfffe, 32, 3), f32))?.encoding).toBe("float");
  });

  it("returns null for an EXTENSIBLE sub-format it cannot read, which readWavInfo still describes", () => {
    const alaw = wavWith(fmt(0xfffe, 16, 6), Buffer.alloc(8));
    expect(readWavInfo(alaw)).toMatchObject({ channels: 2 });
    expect(decodeWav(alaw)).toBeNull();
  });
});
