import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { money } from "./support/api.js";
import { type FakeUpstream, fakeUpstream } from "./support/fake-upstream.js";
import { baseConfigWith, chat, gatewayOn, KEY, post, type TestGateway } from "./support/gateway.js";
import { eventually } from "./support/gateways-on-postgres.js";
import { logged } from "./support/metering.js";

/**
 * A client that hangs up while the gateway waits on the database for its request (the hold, the
 * stored chain a Responses turn continues): what follows runs for a connection already closed.
 * The owner must see the request settled as client_closed, charged nothing, nothing left held, and
 * no provider called for it, not a hold that stays until its expiry hours later or an answer
 * nobody received charged in full.
 */

const QUIET_KEY = "kn-test-quiet-account-key-000000";

let upstream: FakeUpstream;
let gw: TestGateway;
let db: pg.Client;

beforeAll(async () => {
  upstream = await fakeUpstream("openai");
  gw = await gatewayOn("postgres", {
    config: baseConfigWith({
      providers: [
        { id: "up", wire: "openai", base_url: upstream.baseUrl, api_keys: ["sk-up-0000"] },
      ],
      models: [{ name: "up-gpt", provider: "up", price_input_per_mtok: 10_000 }],
      // An account of its own for each hang-up during a hold: an account admitted before holds
      // part of its balance on lease, and its next request waits on no database.
      accounts: [{ id: "quiet", balance_idr: 1_000, keys: [{ id: "kq", value: QUIET_KEY }] }],
    }),
  });
  db = new pg.Client({ connectionString: gw.dbPath });
  await db.connect();
});
afterAll(async () => {
  await db?.end();
  await gw?.close();
  await upstream?.close();
});

/**
 * Sends `body` to `path` while `lock` keeps the database from answering the gateway, hangs up
 * once the gateway waits on it, and lets the database go on only after the gateway has read the
 * hang-up.
 */
async function hangUpWhileWaiting(
  path: string,
  body: object,
  lock: string,
  key = KEY,
): Promise<void> {
  await db.query("BEGIN");
  await db.query(lock);
  const client = new AbortController();
  const answer = post(gw, path, body, { authorization: `Bearer ${key}` }, client.signal).catch(
    () => "gone" as const,
  );
  await eventually(
    async () =>
      (
        await db.query<{ waiting: number }>(
          "SELECT count(*)::int AS waiting FROM pg_locks WHERE NOT granted",
        )
      ).rows[0].waiting,
    (waiting) => waiting > 0,
    10_000,
    "the gateway waiting on the database",
  );
  client.abort();
  expect(await answer).toBe("gone");
  // A round trip on a new connection after the hang-up: the gateway has read the first
  // connection's close by the time it answers this one.
  expect((await fetch(`${gw.url}/health`)).status).toBe(200);
  await db.query("ROLLBACK");
}

describe("a client that left while the gateway waited on Postgres", () => {
  it("a stream whose hold was waiting is settled as client_closed and charged nothing; nothing stays held", async () => {
    const before = await money(gw);
    const requests = (await logged(gw)).length;
    // Another writer holds the account's row: the hold waits for it.
    await hangUpWhileWaiting(
      "/v1/chat/completions",
      chat("left early", "mock-gpt", { stream: true }),
      "SELECT 1 FROM accounts WHERE id = 'acct' FOR UPDATE",
    );
    const after = await eventually(
      () => money(gw),
      (now) => now.held === 0,
      10_000,
      "the stream's hold released",
    );
    expect(after).toEqual(before);
    // The hold is given back in memory first; the row lands with the settlement's batch.
    const rows = await eventually(
      () => logged(gw),
      (now) => now.length > requests,
      10_000,
      "the stream's row",
    );
    expect(rows).toHaveLength(requests + 1);
    expect(rows[0]).toMatchObject({ state: "failed", error_code: "client_closed", cost_micro: 0 });
    expect(
      (await db.query("SELECT id FROM holds UNION ALL SELECT id FROM deliveries")).rows,
    ).toEqual([]);
  });

  it("a whole answer of the built-in mock, whose hold was waiting, is not made for nobody, nor charged", async () => {
    const before = await money(gw, QUIET_KEY);
    const requests = (await logged(gw)).length;
    await hangUpWhileWaiting(
      "/v1/chat/completions",
      chat("left early", "mock-gpt"),
      "SELECT 1 FROM accounts WHERE id = 'quiet' FOR UPDATE",
      QUIET_KEY,
    );
    const rows = await eventually(
      () => logged(gw),
      (now) => now.length > requests,
      10_000,
      "the request's row",
    );
    expect(rows[0]).toMatchObject({ state: "failed", error_code: "client_closed", cost_micro: 0 });
    expect(await money(gw, QUIET_KEY)).toEqual(before);
  });

  it("a Responses turn whose stored chain was being read is never sent to its provider, nor charged", async () => {
    const first = await post(gw, "/v1/responses", { model: "up-gpt", input: "first" });
    expect(first.status).toBe(200);
    const { id } = (await first.json()) as { id: string };
    upstream.reset();
    const before = await money(gw);
    const requests = (await logged(gw)).length;
    await hangUpWhileWaiting(
      "/v1/responses",
      { model: "up-gpt", previous_response_id: id, input: "second" },
      "LOCK TABLE stored_responses IN ACCESS EXCLUSIVE MODE",
    );
    const rows = await eventually(
      () => logged(gw),
      (now) => now.length > requests,
      10_000,
      "the turn's row",
    );
    expect(rows[0]).toMatchObject({ state: "failed", error_code: "client_closed", cost_micro: 0 });
    expect(upstream.requests).toEqual([]);
    expect(await money(gw)).toEqual(before);
  });
});
