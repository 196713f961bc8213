import { afterAll, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { baseConfigWith, chat, KEY } from "./support/gateway.js";
import {
  eventually,
  type GatewaysOnPostgres,
  gatewaysOnPostgres,
  killByPid,
} from "./support/gateways-on-postgres.js";
import type { ServeProcess } from "./support/serve-process.js";

/**
 * crash.test.ts on Postgres: three gateways share one database under steady load and one of them
 * is SIGKILLed. The others go on serving, and afterwards the balance, the request log and what the
 * clients saw agree; the dead gateway's holds are released once its lease has run out.
 */

const initialMicro = 1_000_000 * 1_000_000;
/** Each gateway's load asks for its own model, so the log tells whose requests a row records. */
const models = ["crash-a", "crash-b", "crash-c"];

function config(): ConfigInput {
  return baseConfigWith({
    models: [
      ...models.map((name) => ({
        name,
        provider: "mock",
        upstream_model: "mock-gpt",
        price_input_per_mtok: 10_000,
        price_output_per_mtok: 20_000,
      })),
    ],
    // A per-minute limit the load cannot reach: every refusal here would be a fault.
    accounts: (accounts) => [{ ...accounts[0], rpm_limit: 1_000_000 }, ...accounts.slice(1)],
  });
}

let cluster: GatewaysOnPostgres | undefined;
afterAll(async () => {
  await cluster?.stop();
});

type Outcome = number | "dropped";

/** What one gateway's clients saw. */
interface Seen {
  answered: number;
  streamed: number;
  /** Every status other than 200, and every dropped connection. */
  failures: Outcome[];
}

function client(gateway: ServeProcess, model: string) {
  const send = (path: string, body: object) =>
    fetch(`${gateway.url}${path}`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
  return {
    complete: (content: string): Promise<Outcome> =>
      send("/v1/chat/completions", chat(content, model)).then(
        async (res) => {
          // The whole body read: an answer counts once the client has all of it.
          await res.arrayBuffer();
          return res.status;
        },
        () => "dropped",
      ),
    // A stream counts as finished for its client when its closing event arrived.
    stream: (path: string, body: object, closing: string): Promise<Outcome> =>
      send(path, { ...body, stream: true }).then(
        async (res) => {
          const text = await res.text().catch(() => "");
          return res.status === 200 && !text.includes(closing) ? "dropped" : res.status;
        },
        () => "dropped",
      ),
  };
}

/** Rows of the request log by model and state: count and cost. */
async function logByModel(db: GatewaysOnPostgres) {
  const rows = await db.sql<{ model: string; state: string; stream: number; n: number }>(
    `SELECT model, state, stream, count(*)::int AS n FROM request_log
      GROUP BY model, state, stream ORDER BY model, state, stream`,
  );
  const settled = (model: string, stream: number) =>
    rows.find((row) => row.model === model && row.state === "settled" && row.stream === stream)
      ?.n ?? 0;
  return { rows, settled };
}

describe("a gateway killed in the middle of load on a shared database", () => {
  it("the others go on serving; balances and the request log agree with what clients saw; the dead one's holds are released", async () => {
    cluster = await gatewaysOnPostgres(3, config());
    const db = cluster;
    const [doomed, ...survivors] = db.gateways;
    const seen: Seen[] = db.gateways.map(() => ({ answered: 0, streamed: 0, failures: [] }));
    const clients = db.gateways.map((gateway, index) => client(gateway, models[index]));

    // Slow requests hold money on the doomed gateway when it dies.
    const slow = Array.from({ length: 10 }, (_, i) =>
      clients[0].complete(`slow ${i} [[mock:delay=20000]]`),
    );
    let stopped = false;
    const loop = async (gateway: number, one: (i: number) => Promise<Outcome>, stream: boolean) => {
      for (let i = 0; !stopped; i++) {
        const outcome = await one(i);
        if (outcome === 200) {
          if (stream) seen[gateway].streamed++;
          else seen[gateway].answered++;
          continue;
        }
        seen[gateway].failures.push(outcome);
        if (outcome === "dropped") return;
      }
    };
    const loops = clients.flatMap((one, gateway) => [
      ...[0, 1].map((n) => loop(gateway, (i) => one.complete(`fast ${n}.${i}`), false)),
      loop(
        gateway,
        (i) =>
          one.stream("/v1/chat/completions", chat(`stream ${i}`, models[gateway]), "data: [DONE]"),
        true,
      ),
      loop(
        gateway,
        (i) =>
          one.stream(
            "/v1/messages",
            { ...chat(`messages ${i}`, models[gateway]), max_tokens: 64 },
            "event: message_stop",
          ),
        true,
      ),
    ]);
    // Killed under way: once every gateway has answered and streamed a good number.
    await eventually(
      async () => seen,
      (counts) => counts.every((one) => one.answered >= 10 && one.streamed >= 10),
      15_000,
      "every gateway answering and streaming under load",
    );

    const [{ id: doomedInstance }] = await db.sql<{ id: string }>(
      "SELECT id FROM instances WHERE pid = $1",
      [doomed.child.pid],
    );
    await killByPid(doomed);
    const atKill = seen.map((counts) => ({ ...counts }));
    // What was held on the dead gateway stays held until its lease runs out: a slow request's
    // hold is a row of its own, or part of the gateway's lease of the account, and holds at least
    // what a shorter request of the same model held.
    const [{ orphaned }] = await db.sql<{ orphaned: number }>(
      `SELECT ((SELECT coalesce(sum(amount_micro), 0) FROM holds WHERE instance_id = $1)
        + (SELECT coalesce(sum(money_micro), 0) FROM leases WHERE instance_id = $1))::bigint AS orphaned`,
      [doomedInstance],
    );
    const [{ least }] = await db.sql<{ least: number }>(
      "SELECT min(reserved_micro) AS least FROM request_log WHERE model = $1 AND stream = 0",
      [models[0]],
    );
    expect(least).toBeGreaterThan(0);
    expect(orphaned).toBeGreaterThanOrEqual(slow.length * least);

    // The survivors keep answering and streaming after the kill.
    await eventually(
      async () => seen,
      (counts) =>
        [1, 2].every(
          (gateway) =>
            counts[gateway].answered >= atKill[gateway].answered + 10 &&
            counts[gateway].streamed >= atKill[gateway].streamed + 10,
        ),
      15_000,
      "the survivors serving after the kill",
    );
    stopped = true;
    await Promise.all(loops);
    expect(await Promise.all(slow)).toEqual(slow.map(() => "dropped"));
    for (const gateway of [1, 2]) expect(seen[gateway].failures, db.stderr()).toEqual([]);
    expect(seen[0].failures).toEqual(["dropped", "dropped", "dropped", "dropped"]);

    // No hold of the dead gateway outlives its lease: the survivors' reapers release them all,
    // its leases too; the survivors give theirs back once unused.
    await eventually(
      () =>
        db.sql<{ holds: number; leased: number }>(
          `SELECT (SELECT count(*) FROM holds)::int AS holds,
            (SELECT coalesce(sum(leased_micro), 0) FROM accounts)::bigint AS leased`,
        ),
      ([left]) => left.holds === 0 && left.leased === 0,
      30_000,
      "holds and leases after the dead gateway's lease",
    );
    const [account] = await db.sql<{ balance: number; held: number; payg_held: number }>(
      "SELECT balance_micro AS balance, held_micro AS held, payg_held_micro AS payg_held FROM accounts WHERE id = 'acct'",
    );
    expect(account.held).toBe(0);
    expect(account.payg_held).toBe(0);
    expect(await db.sql("SELECT id FROM instances WHERE id = $1", [doomedInstance])).toEqual([]);

    // Every charge is in the log, and only settled requests are charged (a stream the dead
    // gateway cut off midway is settled by its delivery mark, as interrupted).
    const [{ cost }] = await db.sql<{ cost: number }>(
      "SELECT coalesce(sum(cost_micro), 0)::bigint AS cost FROM request_log WHERE account_id = 'acct'",
    );
    expect(account.balance + cost).toBe(initialMicro);
    const log = await logByModel(db);
    expect(
      log.rows.every(
        (row) =>
          row.state === "settled" ||
          (row.state === "interrupted" && row.model === models[0] && row.stream === 1),
      ),
    ).toBe(true);
    // The survivors' clients saw every answer they were sent: exactly their rows. The dead
    // gateway's clients saw fewer than it settled (answers lost with it), never more.
    for (const gateway of [1, 2]) {
      expect(log.settled(models[gateway], 0)).toBe(seen[gateway].answered);
      expect(log.settled(models[gateway], 1)).toBe(seen[gateway].streamed);
    }
    expect(log.settled(models[0], 0)).toBeGreaterThanOrEqual(seen[0].answered);
    expect(log.settled(models[0], 1)).toBeGreaterThanOrEqual(seen[0].streamed);
    expect(survivors.every((gateway) => gateway.child.exitCode === null)).toBe(true);
    // Load, then the dead gateway's lease (money.ts) and a reaper's round.
  }, 90_000);
});
