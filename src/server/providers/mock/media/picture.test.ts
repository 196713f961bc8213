import { describe, expect, it } from "vitest";
import { decodeRgbaPng, parseSize, readPngSize } from "../../../media/png.js";
import { mockImage } from "./picture.js";

describe("mockImage", () => {
  it.each(["256x256", "512x512", "1024x1024", "1536x1024"])(
    "draws a parseable %s picture",
    (size) => {
      const png = mockImage("a lighthouse at dusk", size);
      const expected = parseSize(size);
      expect(readPngSize(png)).toEqual(expected);
      expect(decodeRgbaPng(png)?.rgba.length).toBe(expected!.height * expected!.width * 4);
    },
  );

  it("is deterministic per prompt and differs between prompts", () => {
    const first = mockImage("a red fox", "256x256");
    expect(mockImage("a red fox", "256x256").equals(first)).toBe(true);
    expect(mockImage("a blue fox", "256x256").equals(first)).toBe(false);
  });

  it("paints more than a flat colour, fully opaque", () => {
    const decoded = decodeRgbaPng(mockImage("shapes please", "256x256"))!;
    const colours = new Set<number>();
    let translucent = 0;
    for (let p = 0; p < decoded.rgba.length; p += 4) {
      if (decoded.rgba[p + 3] !== 255) translucent++;
      colours.add((decoded.rgba[p] << 16) | (decoded.rgba[p + 1] << 8) | decoded.rgba[p + 2]);
    }
    expect(translucent).toBe(0);
    expect(colours.size).toBeGreaterThan(50);
  });

  it("defaults to 1024x1024 and rejects bad sizes", () => {
    expect(readPngSize(mockImage("default"))).toEqual({ width: 1024, height: 1024 });
    expect(() => mockImage("x", "huge")).toThrow(RangeError);
  });
});
