import { describe, expect, it } from "vitest";
import { SeededRandom } from "./seed.js";

function draw(random: SeededRandom, count: number): number[] {
  return Array.from({ length: count }, () => random.nextUint32());
}

describe("SeededRandom", () => {
  it("repeats for the same domain and text", () => {
    expect(draw(new SeededRandom("image", "a cat"), 8)).toEqual(
      draw(new SeededRandom("image", "a cat"), 8),
    );
  });

  it("differs across texts and across domains", () => {
    const base = draw(new SeededRandom("image", "a cat"), 8);
    expect(draw(new SeededRandom("image", "a dog"), 8)).not.toEqual(base);
    expect(draw(new SeededRandom("video", "a cat"), 8)).not.toEqual(base);
  });

  it("keeps helpers inside their bounds", () => {
    const random = new SeededRandom("test", "bounds");
    for (let i = 0; i < 1000; i++) {
      const unit = random.next();
      expect(unit).toBeGreaterThanOrEqual(0);
      expect(unit).toBeLessThan(1);
      const die = random.int(1, 6);
      expect(die).toBeGreaterThanOrEqual(1);
      expect(die).toBeLessThanOrEqual(6);
      expect(Number.isInteger(die)).toBe(true);
    }
    expect(() => random.pick([])).toThrow(RangeError);
  });
});
