import { describe, expect, it } from "vitest";
import { dibFrameBytes, dibStride, encodeAvi, readAvi, readAviInfo } from "./avi.js";

function solidFrames(width: number, height: number, count: number): Buffer[] {
  return Array.from({ length: count }, (_, i) => Buffer.alloc(dibFrameBytes(width, height), i));
}

/** Finds a chunk by walking the file independently of the module's own reader. */
function offsetOf(avi: Buffer, text: string): number {
  return avi.indexOf(Buffer.from(text, "latin1"));
}

describe("encodeAvi", () => {
  it("lays out RIFF AVI with hdrl/avih/strl/strh/strf, movi and idx1", () => {
    const width = 5;
    const height = 3;
    const avi = encodeAvi({ width, height, fps: 10, frames: solidFrames(width, height, 4) });
    expect(avi.toString("latin1", 0, 4)).toBe("RIFF");
    expect(avi.readUInt32LE(4)).toBe(avi.length - 8);
    expect(avi.toString("latin1", 8, 12)).toBe("AVI ");
    expect(avi.toString("latin1", 12, 16)).toBe("LIST");
    expect(avi.toString("latin1", 20, 28)).toBe("hdrlavih");

    const avih = offsetOf(avi, "avih") + 8;
    expect(avi.readUInt32LE(avih)).toBe(100_000); // microseconds per frame
    expect(avi.readUInt32LE(avih + 12) & 0x10).toBe(0x10); // has index
    expect(avi.readUInt32LE(avih + 16)).toBe(4); // total frames
    expect(avi.readUInt32LE(avih + 24)).toBe(1); // streams
    expect(avi.readUInt32LE(avih + 32)).toBe(width);
    expect(avi.readUInt32LE(avih + 36)).toBe(height);

    const strh = offsetOf(avi, "strh") + 8;
    expect(avi.toString("latin1", strh, strh + 8)).toBe("vidsDIB ");
    expect(avi.readUInt32LE(strh + 24) / avi.readUInt32LE(strh + 20)).toBe(10);
    expect(avi.readUInt32LE(strh + 32)).toBe(4);

    const strf = offsetOf(avi, "strf") + 8;
    expect(avi.readUInt32LE(strf)).toBe(40);
    expect(avi.readInt32LE(strf + 4)).toBe(width);
    expect(avi.readInt32LE(strf + 8)).toBe(height);
    expect(avi.readUInt16LE(strf + 14)).toBe(24);
    expect(avi.readUInt32LE(strf + 16)).toBe(0);
    expect(avi.readUInt32LE(strf + 20)).toBe(dibStride(width) * height);

    const movi = offsetOf(avi, "movi");
    const idx1 = offsetOf(avi, "idx1");
    expect(avi.readUInt32LE(idx1 + 4)).toBe(4 * 16);
    for (let i = 0; i < 4; i++) {
      const entry = idx1 + 8 + i * 16;
      expect(avi.toString("latin1", entry, entry + 4)).toBe("00db");
      expect(avi.readUInt32LE(entry + 4)).toBe(0x10);
      const chunk = movi + avi.readUInt32LE(entry + 8);
      expect(avi.toString("latin1", chunk, chunk + 4)).toBe("00db");
      expect(avi.readUInt32LE(chunk + 4)).toBe(avi.readUInt32LE(entry + 12));
      expect(avi[chunk + 8]).toBe(i);
    }
  });

  it("pads rows to four bytes and refuses frames of the wrong size", () => {
    expect(dibStride(5)).toBe(16);
    expect(dibStride(4)).toBe(12);
    expect(() => encodeAvi({ width: 2, height: 2, fps: 1, frames: [Buffer.alloc(12)] })).toThrow(
      RangeError,
    );
  });
});

describe("readAviInfo", () => {
  const avi = encodeAvi({ width: 8, height: 6, fps: 12, frames: solidFrames(8, 6, 30) });

  it("reads geometry, frame count and duration", () => {
    expect(readAviInfo(avi)).toEqual({
      width: 8,
      height: 6,
      frames: 30,
      fps: 12,
      durationSeconds: 2.5,
    });
    expect(readAvi(avi)?.frames[7][0]).toBe(7);
  });

  it("returns null for other data, truncation and a disagreeing index", () => {
    expect(readAviInfo(Buffer.from("RIFF....WAVEfmt "))).toBeNull();
    expect(readAviInfo(avi.subarray(0, avi.length - 10))).toBeNull();
    const badIndex = Buffer.from(avi);
    badIndex.write("01wb", offsetOf(badIndex, "idx1") + 8, "latin1");
    expect(readAviInfo(badIndex)).toBeNull();
    const notVideo = Buffer.from(avi);
    notVideo.write("auds", offsetOf(notVideo, "strh") + 8, "latin1");
    expect(readAviInfo(notVideo)).toBeNull();
  });
});
