import { crc32, inflateSync } from "node:zlib";
import { describe, expect, it } from "vitest";
import { decodeRgbaPng, encodePng, parseSize, readPngSize } from "./png.js";

interface Chunk {
  type: string;
  data: Buffer;
  crcOk: boolean;
}

/** An independent chunk walker, so the tests do not trust the module's own reader. */
function chunksOf(png: Buffer): Chunk[] {
  const chunks: Chunk[] = [];
  let offset = 8;
  while (offset < png.length) {
    const length = png.readUInt32BE(offset);
    const type = png.toString("latin1", offset + 4, offset + 8);
    const data = png.subarray(offset + 8, offset + 8 + length);
    const crc = png.readUInt32BE(offset + 8 + length);
    chunks.push({
      type,
      data,
      crcOk: crc32(png.subarray(offset + 4, offset + 8 + length)) === crc,
    });
    offset += 12 + length;
  }
  return chunks;
}

describe("encodePng", () => {
  it("writes signature, IHDR, IDAT and IEND with valid CRCs", () => {
    const width = 3;
    const height = 2;
    const rgba = new Uint8Array(width * height * 4).map((_, i) => (i * 37) & 0xff);
    const png = encodePng(width, height, rgba);
    expect([...png.subarray(0, 8)]).toEqual([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
    const chunks = chunksOf(png);
    expect(chunks.map((chunk) => chunk.type)).toEqual(["IHDR", "IDAT", "IEND"]);
    expect(chunks.every((chunk) => chunk.crcOk)).toBe(true);
    const ihdr = chunks[0].data;
    expect(ihdr.readUInt32BE(0)).toBe(width);
    expect(ihdr.readUInt32BE(4)).toBe(height);
    expect([...ihdr.subarray(8)]).toEqual([8, 6, 0, 0, 0]);
    expect(inflateSync(chunks[1].data).length).toBe(height * (1 + width * 4));
    expect(decodeRgbaPng(png)?.rgba).toEqual(rgba);
  });

  it("rejects pixel buffers of the wrong length and impossible sizes", () => {
    expect(() => encodePng(2, 2, new Uint8Array(15))).toThrow(RangeError);
    expect(() => encodePng(0, 2, new Uint8Array(0))).toThrow(RangeError);
    expect(() => encodePng(1.5, 2, new Uint8Array(12))).toThrow(RangeError);
  });
});

describe("parseSize", () => {
  it("accepts WxH and auto", () => {
    expect(parseSize("256x256")).toEqual({ width: 256, height: 256 });
    expect(parseSize("1792x1024")).toEqual({ width: 1792, height: 1024 });
    expect(parseSize("auto")).toEqual({ width: 1024, height: 1024 });
  });

  it("returns null for malformed or out-of-range sizes", () => {
    for (const bad of [
      "",
      "1024",
      "0x10",
      "10x0",
      "01x10",
      "-5x5",
      "10X10",
      " 8x8",
      "8x8 ",
      "5000x10",
      "1e3x5",
      "axb",
      "99999999x1",
    ]) {
      expect(parseSize(bad), bad).toBeNull();
    }
  });
});

describe("readPngSize", () => {
  it("reads what encodePng wrote and refuses other data", () => {
    const png = encodePng(5, 7, new Uint8Array(5 * 7 * 4));
    expect(readPngSize(png)).toEqual({ width: 5, height: 7 });
    expect(readPngSize(new Uint8Array(png))).toEqual({ width: 5, height: 7 });
    expect(readPngSize(Buffer.from("not a png at all, just some text here"))).toBeNull();
    const corrupted = Buffer.from(png);
    corrupted[17] ^= 1;
    expect(readPngSize(corrupted)).toBeNull();
    expect(readPngSize(png.subarray(0, 20))).toBeNull();
  });
});
