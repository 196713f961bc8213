import type pg from "pg";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase } from "../../../test/support/postgres.js";
import { KeyPools, keyFingerprint } from "../../server/dispatch/key-pool.js";
import { ManualClock } from "../../server/time/clock.js";
import { UpstreamFailure } from "../../server/wire/upstream-failure.js";
import type { ProviderRow } from "../types.js";
import { openPostgresPool } from "./connect.js";
import { PostgresKeyPoolSync } from "./key-cooldowns.js";
import { migratePostgres } from "./migrations.js";
import { PostgresMoney } from "./money.js";

// Two gateways on one database: each has its own pool, its own listener and its own key pools.
let url: string;
let poolA: pg.Pool;
let poolB: pg.Pool;
const started: PostgresKeyPoolSync[] = [];
let sequence = 0;

beforeAll(async () => {
  url = await createTestDatabase();
  poolA = openPostgresPool({ url, max: 5 });
  poolB = openPostgresPool({ url, max: 5 });
  await migratePostgres(poolA);
});

afterEach(async () => {
  await Promise.all(started.splice(0).map((sync) => sync.close()));
  await poolA.query("DELETE FROM instances");
});

afterAll(async () => {
  await poolA?.end();
  await poolB?.end();
});

async function syncOn(pool: pg.Pool, instanceId?: string): Promise<PostgresKeyPoolSync> {
  const sync = new PostgresKeyPoolSync(pool, {
    url,
    reconnectMinMs: 20,
    reconnectMaxMs: 200,
    instanceId,
  });
  started.push(sync);
  await sync.start();
  return sync;
}

/** One gateway's key pools, on a clock of its own that the test never moves. */
async function gateway(pool: pg.Pool, instanceId?: string) {
  const sync = await syncOn(pool, instanceId);
  return { sync, pools: new KeyPools(new ManualClock(1_000_000).now, sync) };
}

/** A provider of its own for each test, so no cooldown of another test reaches it. */
function provider(fields: Partial<ProviderRow> = {}): ProviderRow {
  const api_keys = fields.api_keys ?? ["key-a", "key-b"];
  return {
    id: `upstream-${++sequence}`,
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

/** The keys a few acquires hand out, each released at once as a success. */
function keysHandedOut(pools: KeyPools, row: ProviderRow, count = 4): (string | undefined)[] {
  return Array.from({ length: count }, () => {
    const credential = pools.acquire(row);
    credential.release("ok");
    return credential.secret;
  });
}

function refusal(pools: KeyPools, row: ProviderRow): UpstreamFailure {
  try {
    pools.acquire(row);
  } catch (err) {
    if (err instanceof UpstreamFailure) return err;
    throw err;
  }
  throw new Error("a key was handed out");
}

/** Cools key-a on `pools` as a 429 from the upstream does. */
function rateLimitKeyA(pools: KeyPools, row: ProviderRow, retryAfterMs: number): void {
  const credential = pools.acquire(row);
  expect(credential.secret).toBe("key-a");
  credential.release("rate_limited", retryAfterMs);
}

const deadline = { timeout: 5_000, interval: 20 };

describe("provider key cooldowns across gateways", () => {
  it("a key that got 429 on one gateway is skipped by the other within moments", async () => {
    const a = await gateway(poolA);
    const b = await gateway(poolB);
    const row = provider();
    expect(keysHandedOut(b.pools, row)).toEqual(["key-a", "key-b", "key-a", "key-b"]);
    rateLimitKeyA(a.pools, row, 60_000);
    await expect.poll(() => keysHandedOut(b.pools, row), deadline).toEqual(Array(4).fill("key-b"));
    // A key cooled on a second gateway stops the first one too: none is left.
    const credential = b.pools.acquire(row);
    credential.release("rate_limited", 30_000);
    await expect.poll(() => refusal(a.pools, row).retryAfterMs, deadline).toBeGreaterThan(25_000);
    expect(refusal(a.pools, row).retryAfterMs).toBeLessThanOrEqual(30_000);
  });

  it("names a key by a short hash in the database, never by its secret", async () => {
    const a = await gateway(poolA);
    const row = provider({ api_keys: ["sk-a-secret-value"] });
    a.pools.acquire(row).release("rate_limited", 60_000);
    await expect
      .poll(async () => (await poolA.query("SELECT * FROM provider_key_cooldowns")).rows, deadline)
      .toContainEqual(
        expect.objectContaining({
          provider_id: row.id,
          fingerprint: keyFingerprint("sk-a-secret-value"),
        }),
      );
    const stored = JSON.stringify((await poolA.query("SELECT * FROM provider_key_cooldowns")).rows);
    expect(stored).not.toContain("sk-a-secret-value");
    expect(keyFingerprint("sk-a-secret-value")).toMatch(/^[0-9a-f]{16}$/);
  });

  it("a gateway that starts later learns the cooldowns still running", async () => {
    const a = await gateway(poolA);
    const row = provider();
    rateLimitKeyA(a.pools, row, 60_000);
    await expect
      .poll(
        async () =>
          (
            await poolA.query("SELECT 1 FROM provider_key_cooldowns WHERE provider_id = $1", [
              row.id,
            ])
          ).rowCount,
        deadline,
      )
      .toBe(1);
    const b = await gateway(poolB);
    expect(keysHandedOut(b.pools, row)).toEqual(Array(4).fill("key-b"));
  });

  it("hears cooldowns again after its listener's connection is killed, those sent meanwhile too", async () => {
    const a = await gateway(poolA);
    const b = await gateway(poolB);
    const row = provider({ api_keys: ["key-a", "key-b", "key-c"] });
    const pid = b.sync.listenerPid;
    expect(pid).toBeDefined();
    await poolA.query("SELECT pg_terminate_backend($1)", [pid]);
    // Sent while the listener may be down: the table read on reconnecting brings it.
    rateLimitKeyA(a.pools, row, 60_000);
    await expect
      .poll(() => b.sync.listenerPid !== undefined && b.sync.listenerPid !== pid, deadline)
      .toBe(true);
    await expect
      .poll(() => [...new Set(keysHandedOut(b.pools, row))].sort(), deadline)
      .toEqual(["key-b", "key-c"]);
    // Sent after the reconnect: heard as it happens.
    const second = a.pools.acquire(row);
    expect(second.secret).toBe("key-b");
    second.release("rate_limited", 60_000);
    await expect.poll(() => keysHandedOut(b.pools, row), deadline).toEqual(Array(4).fill("key-c"));
  });

  it("splits max_concurrency between the live gateways, the shares adding up to it", async () => {
    const moneyA = new PostgresMoney(poolA, { instanceId: "gateway-a" });
    const moneyB = new PostgresMoney(poolB, { instanceId: "gateway-b" });
    await moneyA.register();
    const a = await gateway(poolA, "gateway-a");
    const row = provider({ api_keys: ["key-a"], max_concurrency: 4 });
    // Alone, the gateway has the whole limit.
    const alone = Array.from({ length: 4 }, () => a.pools.acquire(row));
    expect(refusal(a.pools, row).kind).toBe("busy");
    for (const credential of alone) credential.release("ok");

    await moneyB.register();
    expect(await a.sync.refreshInstances()).toBe(2);
    const b = await gateway(poolB, "gateway-b");
    expect(b.sync.liveInstances()).toBe(2);
    for (const pools of [a.pools, b.pools]) {
      const held = [pools.acquire(row), pools.acquire(row)];
      expect(refusal(pools, row)).toMatchObject({ kind: "busy", retryAfterMs: 1_000 });
      held[0].release("ok");
      expect(pools.acquire(row).secret).toBe("key-a");
    }

    // A limit of one is the first gateway's; the other's share is none.
    const single = provider({ api_keys: ["key-a"], max_concurrency: 1 });
    a.pools.acquire(single);
    expect(refusal(a.pools, single).kind).toBe("busy");
    expect(refusal(b.pools, single).kind).toBe("busy");
    // An odd limit: the first gateway runs the one left over.
    const odd = provider({ api_keys: ["key-a"], max_concurrency: 3 });
    a.pools.acquire(odd);
    a.pools.acquire(odd);
    expect(refusal(a.pools, odd).kind).toBe("busy");
    b.pools.acquire(odd);
    expect(refusal(b.pools, odd).kind).toBe("busy");

    // A gateway whose lease ran out no longer counts.
    await poolA.query("UPDATE instances SET lease_until = 0 WHERE id = 'gateway-b'");
    expect(await a.sync.refreshInstances()).toBe(1);
  });

  it("counts at least itself when no gateway has registered", async () => {
    const a = await gateway(poolA);
    expect(a.sync.liveInstances()).toBe(1);
    const row = provider({ api_keys: ["key-a"], max_concurrency: 3 });
    Array.from({ length: 3 }, () => a.pools.acquire(row));
    expect(refusal(a.pools, row).kind).toBe("busy");
  });
});
