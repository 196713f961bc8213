import { describe, expect, it } from "vitest";
import { WindowCounter } from "./window-counter.js";

const minute = 60_000;

describe("WindowCounter", () => {
  it("counts up to the limit within one window and refuses the next without counting it", () => {
    const counter = new WindowCounter(minute);
    expect([1, 2, 3].map(() => counter.tryTake("account", 3, 1_000))).toEqual([true, true, true]);
    expect(counter.tryTake("account", 3, 2_000)).toBe(false);
    expect(counter.used("account", 2_000)).toBe(3);
  });

  it("starts a new window at zero at the window's boundary, not a minute after the first request", () => {
    const counter = new WindowCounter(minute);
    expect(counter.tryTake("account", 1, minute - 1)).toBe(true);
    expect(counter.tryTake("account", 1, minute - 1)).toBe(false);
    expect(counter.used("account", minute)).toBe(0);
    expect(counter.tryTake("account", 1, minute)).toBe(true);
  });

  it("keeps each key's count apart", () => {
    const counter = new WindowCounter(minute);
    expect(counter.tryTake("first", 1, 0)).toBe(true);
    expect(counter.tryTake("first", 1, 0)).toBe(false);
    expect(counter.tryTake("second", 1, 0)).toBe(true);
    expect(counter.used("second", 0)).toBe(1);
    expect(counter.used("never seen", 0)).toBe(0);
  });

  it("refuses everything under a limit of zero", () => {
    const counter = new WindowCounter(minute);
    expect(counter.tryTake("account", 0, 0)).toBe(false);
    expect(counter.used("account", 0)).toBe(0);
  });

  it("takes a count given back in the same window off the count, so the slot is free again", () => {
    const counter = new WindowCounter(minute);
    counter.tryTake("account", 1, 0);
    counter.giveBack("account", 10);
    expect(counter.used("account", 10)).toBe(0);
    expect(counter.tryTake("account", 1, 20)).toBe(true);
  });

  it("ignores a give-back in a later window and never counts below zero", () => {
    const counter = new WindowCounter(minute);
    counter.tryTake("account", 5, 0);
    counter.giveBack("account", minute + 1);
    expect(counter.used("account", 0)).toBe(1);
    counter.giveBack("account", 0);
    counter.giveBack("account", 0);
    counter.giveBack("never seen", 0);
    expect(counter.used("account", 0)).toBe(0);
  });

  it("names the end of the window a time falls in (the Retry-After's base)", () => {
    const counter = new WindowCounter(minute);
    expect(counter.windowEnd(0)).toBe(minute);
    expect(counter.windowEnd(minute - 1)).toBe(minute);
    expect(counter.windowEnd(minute)).toBe(2 * minute);
  });

  it("forgets past windows' keys once it holds many, and counts the current window exactly", () => {
    const counter = new WindowCounter(minute);
    for (let index = 0; index <= 10_001; index++) counter.tryTake(`old ${index}`, 1, 0);
    counter.tryTake("current", 2, minute);
    expect(counter.used("old 0", 0)).toBe(0);
    expect(counter.used("current", minute)).toBe(1);
    expect(counter.tryTake("current", 2, minute)).toBe(true);
    expect(counter.tryTake("current", 2, minute)).toBe(false);
  });
});
