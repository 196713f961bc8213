import { describe, expect, it } from "vitest";
import { GatewayError } from "../errors.js";
import { ManualClock } from "./clock.js";

describe("ManualClock", () => {
  it("stands still until moved; a wait ends when the clock passes its deadline, in deadline order", async () => {
    const clock = new ManualClock(1_000);
    const woke: string[] = [];
    const late = clock.sleep(500).then(() => woke.push("late"));
    const early = clock.sleep(200).then(() => woke.push("early"));
    clock.advance(199);
    await Promise.resolve();
    expect(woke).toEqual([]);
    expect(clock.now()).toBe(1_199);
    clock.advance(400);
    await Promise.all([late, early]);
    expect(woke).toEqual(["early", "late"]);
  });

  it("set moves it back as well as on; moving back wakes nothing", async () => {
    const clock = new ManualClock(10_000);
    let woke = false;
    const wait = clock.sleep(100).then(() => {
      woke = true;
    });
    clock.set(0);
    await Promise.resolve();
    expect(woke).toBe(false);
    clock.set(new Date(10_100));
    await wait;
    expect(woke).toBe(true);
  });

  it("set back, a wait keeps what it had left: it ends once the clock moves that much on from there", async () => {
    const clock = new ManualClock(10_000);
    let woke = false;
    const wait = clock.sleep(100).then(() => {
      woke = true;
    });
    clock.advance(40);
    clock.set(0);
    clock.advance(59);
    await Promise.resolve();
    expect(woke).toBe(false);
    clock.advance(1);
    // Woken within the move: one turn of the event loop runs what it woke.
    await Promise.race([wait, new Promise((resolve) => setImmediate(resolve))]);
    expect(woke).toBe(true);
    expect(clock.now()).toBe(60);
  });

  it("a wait whose client left before it began ends at once with client_closed, as the real clock's", async () => {
    const clock = new ManualClock(0);
    const abort = new AbortController();
    abort.abort();
    const wait = clock.sleep(1_000, abort.signal);
    const bound = new Promise((resolve) => setTimeout(() => resolve("still waiting"), 1_000));
    await expect(Promise.race([wait, bound])).rejects.toMatchObject({ code: "client_closed" });
  });

  it("a wait whose client leaves ends with client_closed and is forgotten", async () => {
    const clock = new ManualClock(0);
    const abort = new AbortController();
    const wait = clock.sleep(1_000, abort.signal);
    abort.abort();
    await expect(wait).rejects.toBeInstanceOf(GatewayError);
    clock.advance(2_000);
  });

  it("refuses a negative or non-finite move", () => {
    const clock = new ManualClock(0);
    expect(() => clock.advance(-1)).toThrow(RangeError);
    expect(() => clock.set(Number.NaN)).toThrow(RangeError);
    expect(clock.now()).toBe(0);
  });
});
