import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase } from "../../../test/support/postgres.js";
import { openPostgresPool } from "../../store/postgres/connect.js";
import { PostgresKeyRows } from "../../store/postgres/key-rows.js";
import { PostgresCounters } from "../../store/postgres/limit-counters.js";
import { migratePostgres } from "../../store/postgres/migrations.js";
import { openPostgresRepositories } from "../../store/postgres/repositories.js";
import { SecretBox } from "../../store/secret-box.js";
import { RequestLimits } from "../limits/request-limits.js";
import { DeviceCodes, maxCodesPerAddressPerMinute } from "./device-codes.js";

// Two gateways on one database, each with its own pool and its own limits over the shared counts.
let pools: pg.Pool[] = [];
let gateways: DeviceCodes[] = [];

beforeAll(async () => {
  const url = await createTestDatabase();
  pools = [0, 1].map(() => openPostgresPool({ url, max: 4 }));
  await migratePostgres(pools[0]);
  const secrets = SecretBox.random();
  gateways = pools.map(
    (pool, index) =>
      new DeviceCodes(
        openPostgresRepositories(pool, new PostgresKeyRows(), {
          instanceId: `gateway-${index}`,
          secrets,
        }).deviceCodes,
        { ttlSeconds: 600, intervalSeconds: 5 },
        new RequestLimits(new PostgresCounters(pool)),
      ),
  );
});

afterAll(async () => {
  await Promise.all(pools.map((pool) => pool.end()));
});

describe("device codes on several gateways", () => {
  it("one address gets its per-minute codes once across gateways, and a code refused for another reason does not count", async () => {
    // Inside one minute window, far from its end.
    const now = Date.UTC(2026, 0, 5, 10, 30, 5);
    const address = "198.51.100.7";
    let issued = 0;
    for (let attempt = 0; attempt < 3 * maxCodesPerAddressPerMinute; attempt++) {
      const gateway = gateways[attempt % 2]!;
      const answer = await gateway.issue("flood", address, now);
      if (!answer.ok) {
        expect(answer.reason).toBe("address_rate");
        expect(answer.retryAfterSeconds).toBe(55);
        break;
      }
      issued++;
      // Finished at once, so the pending cap is never what refuses.
      expect((await gateways[(attempt + 1) % 2]!.deny(answer.userCode, "acct", now)).ok).toBe(true);
    }
    expect(issued).toBe(maxCodesPerAddressPerMinute);

    // Another address at its pending cap: those refusals give their counts back.
    const other = "198.51.100.8";
    const pending: string[] = [];
    for (let attempt = 0; attempt < 8; attempt++) {
      const answer = await gateways[attempt % 2]!.issue("pending", other, now);
      if (answer.ok) pending.push(answer.userCode);
      else expect(answer.reason).toBe("address_pending");
    }
    for (const userCode of pending)
      expect((await gateways[0]!.deny(userCode, "acct", now)).ok).toBe(true);
    let after = 0;
    for (let attempt = 0; attempt < maxCodesPerAddressPerMinute; attempt++) {
      const answer = await gateways[attempt % 2]!.issue("after", other, now);
      if (!answer.ok) break;
      after++;
      await gateways[0]!.deny(answer.userCode, "acct", now);
    }
    expect(pending.length + after).toBe(maxCodesPerAddressPerMinute);
  });
});
