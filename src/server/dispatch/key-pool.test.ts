import { describe, expect, it } from "vitest";
import type { KeyPoolSync, ProviderRow } from "../../store/types.js";
import { ManualClock } from "../time/clock.js";
import { UpstreamFailure } from "../wire/upstream-failure.js";
import { KeyPools, keyFingerprint } from "./key-pool.js";

function provider(fields: Partial<ProviderRow> = {}): ProviderRow {
  const api_keys = fields.api_keys ?? ["key-a", "key-b", "key-c"];
  return {
    id: "upstream",
    wire: "openai",
    base_url: "http://127.0.0.1:1",
    api_key_count: api_keys.length,
    api_keys,
    timeout_ms: 30_000,
    max_concurrency: null,
    options_json: "{}",
    responses_native: 0,
    ...fields,
  };
}

function setup(fields: Partial<ProviderRow> = {}) {
  const clock = new ManualClock(1_000_000);
  return { clock, pools: new KeyPools(clock.now), row: provider(fields) };
}

/** The key one acquire hands out, released at once as a success. */
function nextKey(pools: KeyPools, row: ProviderRow): string | undefined {
  const credential = pools.acquire(row);
  credential.release("ok");
  return credential.secret;
}

/** What an acquire that finds no usable key throws. */
function refusal(pools: KeyPools, row: ProviderRow): UpstreamFailure {
  try {
    pools.acquire(row);
  } catch (err) {
    if (err instanceof UpstreamFailure) return err;
    throw err;
  }
  throw new Error("a key was handed out");
}

describe("KeyPools", () => {
  it("hands out the provider's keys in turn", () => {
    const { pools, row } = setup();
    const keys = [1, 2, 3, 4].map(() => nextKey(pools, row));
    expect(keys).toEqual(["key-a", "key-b", "key-c", "key-a"]);
  });

  it("gives a provider without keys a credential with no secret, never refusing it", () => {
    const { pools, row } = setup({ api_keys: [] });
    const credential = pools.acquire(row);
    expect(credential).toMatchObject({ source: "none", secret: undefined });
    expect(pools.acquire(row).source).toBe("none");
  });

  it("cools a key released after a 429 for the upstream's Retry-After, then uses it again", () => {
    const { clock, pools, row } = setup({ api_keys: ["key-a", "key-b"] });
    const first = pools.acquire(row);
    first.release("rate_limited", 5_000);
    expect([1, 2, 3].map(() => nextKey(pools, row))).toEqual(["key-b", "key-b", "key-b"]);
    clock.advance(5_000);
    expect([1, 2].map(() => nextKey(pools, row)).sort()).toEqual(["key-a", "key-b"]);
  });

  it("cools a rate-limited key for the provider's cooldown_ms when the upstream named no wait", () => {
    const { clock, pools, row } = setup({
      api_keys: ["key-a"],
      options_json: JSON.stringify({ cooldown_ms: 2_000 }),
    });
    pools.acquire(row).release("rate_limited");
    clock.advance(1_999);
    expect(refusal(pools, row).kind).toBe("busy");
    clock.advance(1);
    expect(nextKey(pools, row)).toBe("key-a");
  });

  it("cools a rate-limited key for thirty seconds by default", () => {
    const { clock, pools, row } = setup({ api_keys: ["key-a"] });
    pools.acquire(row).release("rate_limited");
    expect(refusal(pools, row).retryAfterMs).toBe(30_000);
    clock.advance(30_000);
    expect(nextKey(pools, row)).toBe("key-a");
  });

  it("does not cool a key whose attempt failed for another reason", () => {
    const { pools, row } = setup({ api_keys: ["key-a"] });
    pools.acquire(row).release("failed");
    expect(nextKey(pools, row)).toBe("key-a");
  });

  it("refuses as busy, waiting for the shortest cooldown, when every key is cooling", () => {
    const { clock, pools, row } = setup({ api_keys: ["key-a", "key-b"] });
    pools.acquire(row).release("rate_limited", 8_000);
    pools.acquire(row).release("rate_limited", 3_000);
    clock.advance(500);
    const failure = refusal(pools, row);
    expect(failure).toMatchObject({ kind: "busy", status: 503, retryAfterMs: 2_500 });
  });

  it("asks for at least a second's wait, however soon a key cools off", () => {
    const { clock, pools, row } = setup({ api_keys: ["key-a"] });
    pools.acquire(row).release("rate_limited", 1_200);
    clock.advance(1_000);
    expect(refusal(pools, row).retryAfterMs).toBe(1_000);
  });

  it("holds each key to max_concurrency attempts at once, and frees a slot on release", () => {
    const { pools, row } = setup({ api_keys: ["key-a", "key-b"], max_concurrency: 1 });
    const first = pools.acquire(row);
    const second = pools.acquire(row);
    expect([first.secret, second.secret]).toEqual(["key-a", "key-b"]);
    expect(refusal(pools, row)).toMatchObject({ kind: "busy", retryAfterMs: 1_000 });
    second.release("ok");
    expect(pools.acquire(row).secret).toBe("key-b");
  });

  it("counts a credential released twice only once", () => {
    const { pools, row } = setup({ api_keys: ["key-a"], max_concurrency: 2 });
    const first = pools.acquire(row);
    pools.acquire(row);
    first.release("ok");
    first.release("ok");
    pools.acquire(row);
    expect(refusal(pools, row).kind).toBe("busy");
  });

  it("ignores a 429 reported twice for one credential: the first release decides", () => {
    const { pools, row } = setup({ api_keys: ["key-a"] });
    const credential = pools.acquire(row);
    credential.release("ok");
    credential.release("rate_limited", 60_000);
    expect(nextKey(pools, row)).toBe("key-a");
  });

  it("starts afresh when the config gives the provider new keys", () => {
    const { pools, row } = setup({ api_keys: ["key-a"] });
    pools.acquire(row).release("rate_limited", 60_000);
    const reapplied = { ...row, api_keys: ["key-z"], api_key_count: 1 };
    expect(nextKey(pools, reapplied)).toBe("key-z");
  });

  it("keeps each provider's keys apart", () => {
    const { pools, row } = setup({ api_keys: ["key-a"] });
    const other = provider({ id: "other", api_keys: ["key-x"] });
    pools.acquire(row).release("rate_limited", 60_000);
    expect(nextKey(pools, other)).toBe("key-x");
    expect(refusal(pools, row).kind).toBe("busy");
  });
});

/** A sync as another gateway sees it: what this one published, and a way to hear others. */
function fakeSync(live = 1, before = 0) {
  const published: [string, string, number][] = [];
  let listener: ((providerId: string, fingerprint: string, coolMs: number) => void) | undefined;
  const sync: KeyPoolSync = {
    cooled: (providerId, fingerprint, coolMs) => published.push([providerId, fingerprint, coolMs]),
    onCooled: (heard) => {
      listener = heard;
    },
    liveInstances: () => live,
    liveBefore: () => before,
  };
  return {
    sync,
    published,
    hear: (providerId: string, fingerprint: string, coolMs: number) =>
      listener?.(providerId, fingerprint, coolMs),
  };
}

describe("KeyPools shared between gateways", () => {
  it("publishes a 429's cooldown under the key's fingerprint, never its secret", () => {
    const { sync, published } = fakeSync();
    const clock = new ManualClock(1_000_000);
    const pools = new KeyPools(clock.now, sync);
    const row = provider({
      api_keys: ["key-a"],
      options_json: JSON.stringify({ cooldown_ms: 2_000 }),
    });
    pools.acquire(row).release("rate_limited");
    expect(published).toEqual([["upstream", keyFingerprint("key-a"), 2_000]]);
    expect(keyFingerprint("key-a")).not.toBe(keyFingerprint("key-b"));
    pools.acquire(provider({ api_keys: ["key-b"], id: "other" })).release("failed");
    expect(published).toHaveLength(1);
  });

  it("cools a key another gateway reported, in pools built before and after", () => {
    const { sync, hear } = fakeSync();
    const clock = new ManualClock(1_000_000);
    const pools = new KeyPools(clock.now, sync);
    const row = provider({ api_keys: ["key-a", "key-b"] });
    expect(nextKey(pools, row)).toBe("key-a");
    hear("upstream", keyFingerprint("key-b"), 5_000);
    hear("other", keyFingerprint("key-x"), 5_000);
    expect([1, 2].map(() => nextKey(pools, row))).toEqual(["key-a", "key-a"]);
    const other = provider({ id: "other", api_keys: ["key-x"] });
    expect(refusal(pools, other)).toMatchObject({ kind: "busy", retryAfterMs: 5_000 });
    // A shorter cooldown heard later does not shorten the one running.
    hear("upstream", keyFingerprint("key-b"), 1_000);
    clock.advance(4_999);
    expect(nextKey(pools, row)).toBe("key-a");
    clock.advance(1);
    expect([1, 2].map(() => nextKey(pools, row)).sort()).toEqual(["key-a", "key-b"]);
  });

  it("runs its share of max_concurrency: the limit split between the live gateways", () => {
    const clock = new ManualClock(1_000_000);
    const row = provider({ api_keys: ["key-a"], max_concurrency: 7 });
    // 7 between 3: the first runs the one left over (3, 2, 2).
    const first = new KeyPools(clock.now, fakeSync(3, 0).sync);
    for (let index = 0; index < 3; index++) first.acquire(row);
    expect(refusal(first, row).kind).toBe("busy");
    const shared = new KeyPools(clock.now, fakeSync(3, 1).sync);
    shared.acquire(row);
    shared.acquire(row);
    expect(refusal(shared, row).kind).toBe("busy");
    // 2 between 5: the first two run one each, the others none.
    const single = provider({ api_keys: ["key-a"], max_concurrency: 2 });
    const crowded = new KeyPools(clock.now, fakeSync(5, 1).sync);
    crowded.acquire(single);
    expect(refusal(crowded, single).kind).toBe("busy");
    const last = new KeyPools(clock.now, fakeSync(5, 4).sync);
    expect(refusal(last, single)).toMatchObject({ kind: "busy", retryAfterMs: 1_000 });
    const alone = new KeyPools(clock.now, fakeSync(1).sync);
    const unlimited = provider({ api_keys: ["key-a"] });
    for (let index = 0; index < 50; index++) alone.acquire(unlimited);
  });
});
