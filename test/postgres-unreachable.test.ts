import { randomBytes } from "node:crypto";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { secretKeyEnv } from "../src/store/secret-box.js";
import { chat, KEY, post, type TestGateway, testGateway } from "./support/gateway.js";
import { createTestDatabase, type Relay, relayTo } from "./support/postgres.js";

/**
 * Issue 29, point 8: a read that finds the database out of reach (a lost or refused connection)
 * is the storage 503 in the route's style, never a 500, and the gateway serves again once the
 * database is back. The gateway reaches the run's Postgres server through a relay the test can
 * cut (every connection dropped, new ones refused, as a server that went away) and mend on the
 * same port.
 */

let gw: TestGateway | undefined;
let relay: Relay | undefined;
// Started in a hook, not in the test: a gateway's first start on a new database (its
// migrations, on a loaded machine) took most of a test's 20 s, and left the readiness poll
// less than its 10 s.
beforeEach(async () => {
  process.env[secretKeyEnv] ??= randomBytes(32).toString("base64");
  relay = await relayTo(await createTestDatabase());
  gw = await testGateway({ db: relay.url });
});
afterEach(async () => {
  // The gateway closes on a database it reaches: its last writes (its serve record) land.
  await relay?.mend();
  await gw?.close();
  await relay?.close();
  gw = undefined;
  relay = undefined;
});

const bearer = { authorization: `Bearer ${KEY}` };

describe("a gateway whose Postgres is out of reach", () => {
  it("answers reads and paid requests with 503 storage_unavailable in each route's style, and serves again once it is back", async () => {
    expect((await fetch(`${gw!.url}/v1/account/quota`, { headers: bearer })).status).toBe(200);

    await relay!.cut();
    for (const path of ["/v1/account/quota", "/v1/usage/summary"]) {
      const res = await fetch(`${gw!.url}${path}`, { headers: bearer });
      const body = await res.text();
      expect(res.status, `${path}: ${body}`).toBe(503);
      expect(res.headers.get("retry-after")).toBe("30");
      expect(JSON.parse(body)).toMatchObject({
        error: {
          code: "storage_unavailable",
          type: "storage_unavailable",
          message: expect.stringContaining("its database cannot be reached"),
        },
      });
    }
    const messages = await post(gw!, "/v1/messages", {
      model: "mock-gpt",
      max_tokens: 20,
      messages: [{ role: "user", content: "hi" }],
    });
    expect(messages.status).toBe(503);
    expect(await messages.json()).toMatchObject({
      type: "error",
      error: { type: "api_error", message: expect.stringContaining("cannot be reached") },
    });
    expect((await fetch(`${gw!.url}/health/ready`)).status).toBe(503);

    await relay!.mend();
    expect((await fetch(`${gw!.url}/v1/account/quota`, { headers: bearer })).status).toBe(200);
    expect((await post(gw!, "/v1/chat/completions", chat())).status).toBe(200);
    expect((await fetch(`${gw!.url}/health/ready`)).status).toBe(200);
  });

  it("is ready again once the database is back, with no request to prove it", async () => {
    // A balancer sends a not-ready gateway nothing: readiness must find the way back itself.
    await relay!.cut();
    expect((await fetch(`${gw!.url}/v1/account/quota`, { headers: bearer })).status).toBe(503);
    expect((await fetch(`${gw!.url}/health/ready`)).status).toBe(503);

    await relay!.mend();
    const ready = gw!.url;
    await expect
      .poll(async () => (await fetch(`${ready}/health/ready`)).status, {
        timeout: 10_000,
        interval: 250,
      })
      .toBe(200);
  });
});
