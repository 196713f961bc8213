import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ownerSession } from "./support/cli.js";
import { testGateway } from "./support/gateway.js";

/**
 * A slice of scripts/fuzz.mjs (`npm run fuzz` sends 10,000+): hostile requests over every route
 * get answers, none a 5xx other than 503, and the gateway logs no internal error.
 */

interface FuzzResult {
  requests: number;
  statuses: Record<string, number>;
  internalErrors: number;
  failures: string[];
}

describe("fuzz", () => {
  it("300 hostile requests from a fixed seed: no 5xx but 503, no request left unanswered", {
    timeout: 120_000,
  }, async () => {
    const script = join(import.meta.dirname, "..", "scripts", "fuzz.mjs");
    const { runFuzz } = (await import(script)) as {
      runFuzz(o: { count: number; seed: number; concurrency: number }): Promise<FuzzResult>;
    };
    const result = await runFuzz({ count: 300, seed: 3, concurrency: 4 });
    expect(result.failures).toEqual([]);
    expect(result.internalErrors).toBe(0);
    const answered = Object.entries(result.statuses)
      .filter(([status]) => /^\d{3}$/.test(status))
      .reduce((n, [, count]) => n + count, 0);
    expect(answered).toBeGreaterThan(result.requests * 0.9);
    for (const status of Object.keys(result.statuses))
      if (/^5/.test(status)) expect(status).toBe("503");
  });

  it("a dashboard form whose body is not a readable form is a 400 page, not a 500", async () => {
    const gw = await testGateway();
    try {
      const owner = await ownerSession(gw);
      const res = await fetch(`${gw.url}/dashboard/keys`, {
        method: "POST",
        headers: {
          cookie: owner.cookie,
          origin: gw.url,
          "content-type": "multipart/form-data; boundary=z",
        },
        body: "not a multipart body",
      });
      expect(res.status).toBe(400);
      expect(await res.text()).toContain("The form could not be read");
    } finally {
      await gw.close();
    }
  });
});
