import { describe, expect, it } from "vitest";
import { crc32 } from "./crc32.js";

describe("crc32", () => {
  it("matches the published check value", () => {
    expect(crc32(Buffer.from("123456789"))).toBe(0xcbf43926);
    expect(crc32(new Uint8Array(0))).toBe(0);
  });

  it("can be computed in pieces", () => {
    const whole = crc32(Buffer.from("IHDRhello"));
    expect(crc32(Buffer.from("hello"), crc32(Buffer.from("IHDR")))).toBe(whole);
  });
});
