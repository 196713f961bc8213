import { describe, expect, it } from "vitest";
import { hslToRgb, mixRgb } from "./color.js";

describe("hslToRgb", () => {
  it("converts primaries, greys and wrapped hues", () => {
    expect(hslToRgb(0, 1, 0.5)).toEqual([255, 0, 0]);
    expect(hslToRgb(120, 1, 0.5)).toEqual([0, 255, 0]);
    expect(hslToRgb(240, 1, 0.5)).toEqual([0, 0, 255]);
    expect(hslToRgb(-120, 1, 0.5)).toEqual([0, 0, 255]);
    expect(hslToRgb(42, 0, 0.5)).toEqual([128, 128, 128]);
  });
});

describe("mixRgb", () => {
  it("interpolates each channel", () => {
    expect(mixRgb([0, 100, 200], [100, 100, 0], 0.5)).toEqual([50, 100, 100]);
  });
});
