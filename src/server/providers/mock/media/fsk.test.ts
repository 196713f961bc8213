import { describe, expect, it } from "vitest";
import {
  isModemSampleRate,
  isSilentWindow,
  readByteSymbol,
  symbolLength,
  writeByteSymbol,
} from "./fsk.js";

describe("fsk modem", () => {
  it.each([8000, 16000, 22050, 24000, 44100, 48000])(
    "carries every byte value at %i Hz",
    (rate) => {
      const length = symbolLength(rate);
      const samples = new Int16Array(256 * length);
      for (let byte = 0; byte < 256; byte++) writeByteSymbol(samples, byte * length, length, byte);
      for (let byte = 0; byte < 256; byte++) {
        expect(readByteSymbol(samples, byte * length, length)).toBe(byte);
      }
    },
  );

  it("joins symbols without a jump larger than the tones' own steps", () => {
    const length = symbolLength(24000);
    const samples = new Int16Array(2 * length);
    writeByteSymbol(samples, 0, length, 0xa7);
    writeByteSymbol(samples, length, length, 0x3c);
    expect(samples[0]).toBe(0);
    let largestStepInside = 0;
    for (let i = 1; i < samples.length; i++) {
      if (i !== length)
        largestStepInside = Math.max(largestStepInside, Math.abs(samples[i] - samples[i - 1]));
    }
    expect(Math.abs(samples[length] - samples[length - 1])).toBeLessThanOrEqual(largestStepInside);
    expect(Math.max(...samples.map(Math.abs))).toBeLessThan(32767);
  });

  it("refuses windows that are not modem tones", () => {
    const length = symbolLength(24000);
    const noise = new Int16Array(length);
    let state = 1;
    for (let i = 0; i < length; i++) {
      state = (state * 1103515245 + 12345) & 0x7fffffff;
      noise[i] = (state % 20000) - 10000;
    }
    expect(readByteSymbol(noise, 0, length)).toBeNull();
    expect(isSilentWindow(noise, 0, length)).toBe(false);
    expect(isSilentWindow(new Int16Array(length), 0, length)).toBe(true);
  });

  it("knows which sample rates can hold every tone", () => {
    expect(isModemSampleRate(24000)).toBe(true);
    expect(isModemSampleRate(8000)).toBe(true);
    expect(isModemSampleRate(7999)).toBe(false);
    expect(isModemSampleRate(24000.5)).toBe(false);
  });
});
