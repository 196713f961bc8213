import { createHash } from "node:crypto";

/**
 * Turns a prompt into a reproducible stream of numbers. Math.random cannot be seeded, and the
 * mock provider promises the same bytes for the same prompt on every machine and Node version.
 */
export class SeededRandom {
  private a: number;
  private b: number;
  private c: number;
  private counter: number;

  /** `domain` keeps the image, video and music drawn from one prompt independent of each other. */
  constructor(domain: string, text: string) {
    const digest = createHash("sha256").update(`${domain}\u0000${text}`, "utf8").digest();
    this.a = digest.readUInt32LE(0);
    this.b = digest.readUInt32LE(4);
    this.c = digest.readUInt32LE(8);
    this.counter = digest.readUInt32LE(12);
    // sfc32 needs a few rounds before its output stops resembling the seed.
    for (let i = 0; i < 12; i++) this.nextUint32();
  }

  /** sfc32: tiny, fast and statistically good enough for pictures and melodies. */
  nextUint32(): number {
    const t = (((this.a + this.b) | 0) + this.counter) | 0;
    this.counter = (this.counter + 1) | 0;
    this.a = this.b ^ (this.b >>> 9);
    this.b = (this.c + (this.c << 3)) | 0;
    this.c = (this.c << 21) | (this.c >>> 11);
    this.c = (this.c + t) | 0;
    return t >>> 0;
  }

  /** Uniform in [0, 1). */
  next(): number {
    return this.nextUint32() / 4294967296;
  }

  /** Uniform in [min, max). */
  range(min: number, max: number): number {
    return min + (max - min) * this.next();
  }

  /** Uniform integer in [min, max], both ends included. */
  int(min: number, max: number): number {
    return min + Math.floor(this.next() * (max - min + 1));
  }

  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new RangeError("cannot pick from an empty list");
    return items[this.int(0, items.length - 1)];
  }
}
