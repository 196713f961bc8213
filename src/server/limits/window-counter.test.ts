import { describe, expect, it } from "vitest";
import { MemoryCounters, WindowCounter } from "./window-counter.js";

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

  it("restores counts of admitted requests past the limit, adds those of the same window, and keeps a later window's", () => {
    const counter = new WindowCounter(minute);
    counter.restore("account", 2 * minute + 5, 3);
    counter.restore("account", 2 * minute + 50, 2);
    expect(counter.used("account", 2 * minute + 59_000)).toBe(5);
    expect(counter.tryTake("account", 5, 2 * minute + 59_000)).toBe(false);
    counter.restore("account", minute, 9);
    expect(counter.used("account", 2 * minute)).toBe(5);
    counter.restore("account", 3 * minute, 1);
    expect(counter.used("account", 3 * minute)).toBe(1);
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

describe("MemoryCounters", () => {
  it("answers at once, never with a promise: the request path takes none for its limits", () => {
    const counters = new MemoryCounters();
    expect(counters.take("account", 2, minute, 0)).toBe(1);
    expect(counters.used("account", minute, 0)).toBe(1);
    expect(counters.claimSlot("account", 100, 1, 0)).toBe(0);
    expect(counters.giveBack("account", minute, 0)).toBeUndefined();
    expect(counters.leaveSlot("account")).toBeUndefined();
  });

  it("counts up to the limit in a window, answering the count after each take, then null", () => {
    const counters = new MemoryCounters();
    expect([1, 2, 3, 4].map(() => counters.take("account", 3, minute, 1_000))).toEqual([
      1,
      2,
      3,
      null,
    ]);
    expect(counters.used("account", minute, 2_000)).toBe(3);
    expect(counters.take("account", 3, minute, minute)).toBe(1);
    expect(counters.used("account", minute, minute)).toBe(1);
  });

  it("refuses everything under a limit of zero without counting it", () => {
    const counters = new MemoryCounters();
    expect(counters.take("account", 0, minute, 0)).toBeNull();
    expect(counters.used("account", minute, 0)).toBe(0);
  });

  it("keeps each window length's counts apart, and each key's", () => {
    const counters = new MemoryCounters();
    counters.take("account", 5, minute, 0);
    counters.take("account", 5, 1_000, 0);
    counters.take("account", 5, 1_000, 0);
    counters.take("other", 5, minute, 0);
    expect(counters.used("account", minute, 0)).toBe(1);
    expect(counters.used("account", 1_000, 0)).toBe(2);
    expect(counters.used("account", 1_000, 1_000)).toBe(0);
    expect(counters.used("never seen", 30_000, 0)).toBe(0);
  });

  it("takes a count given back in the same window off, never below zero, and ignores a later window's", () => {
    const counters = new MemoryCounters();
    counters.take("account", 1, minute, 0);
    counters.giveBack("account", minute, minute + 1);
    expect(counters.used("account", minute, 0)).toBe(1);
    counters.giveBack("account", minute, 10);
    counters.giveBack("account", minute, 10);
    counters.giveBack("never seen", 1_234, 10);
    expect(counters.used("account", minute, 10)).toBe(0);
    expect(counters.take("account", 1, minute, 20)).toBe(1);
  });

  it("hands out slots one spacing apart, queues up to the limit, then refuses", () => {
    const counters = new MemoryCounters();
    expect(counters.claimSlot("account", 100, 2, 1_000)).toBe(0);
    expect(counters.claimSlot("account", 100, 2, 1_010)).toBe(90);
    expect(counters.claimSlot("account", 100, 2, 1_020)).toBe(180);
    expect(counters.claimSlot("account", 100, 2, 1_030)).toBeNull();
    counters.leaveSlot("account");
    expect(counters.claimSlot("account", 100, 2, 1_040)).toBe(260);
  });

  it("starts over when the last slot is further ahead than a full queue reaches: the clock went back", () => {
    const counters = new MemoryCounters();
    counters.claimSlot("account", 100, 2, 10_000);
    expect(counters.claimSlot("account", 100, 2, 10_000)).toBe(100);
    // A full queue reaches 300 ahead: seen from 9_950 the next slot, 10_200, is still in reach.
    expect(counters.claimSlot("account", 100, 2, 9_950)).toBe(250);
    expect(counters.claimSlot("account", 100, 2, 1_000)).toBe(0);
    expect(counters.claimSlot("account", 100, 2, 1_000)).toBe(100);
  });

  it("starts over once the last slot handed out has passed, whoever still had to leave", () => {
    const counters = new MemoryCounters();
    counters.claimSlot("account", 100, 1, 0);
    expect(counters.claimSlot("account", 100, 1, 50)).toBe(50);
    expect(counters.claimSlot("account", 100, 1, 60)).toBeNull();
    expect(counters.claimSlot("account", 100, 1, 200)).toBe(0);
    counters.leaveSlot("account");
    expect(counters.claimSlot("account", 100, 1, 210)).toBe(90);
    expect(counters.claimSlot("account", 100, 1, 220)).toBeNull();
    expect(counters.claimSlot("other", 100, 0, 220)).toBe(0);
    expect(counters.claimSlot("other", 100, 0, 230)).toBeNull();
  });
});
