import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { describeStore, logRow } from "../../../test/support/store-contract.js";
import type { GatewayStore, LedgerWrite } from "../types.js";
import { freeTokenWindowStart } from "../usage-rows.js";
import { Store } from "./store.js";

const dir = mkdtempSync(join(tmpdir(), "gateway-store-contract-"));
let count = 0;
let freeSettled = 0;
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

describeStore("SQLite", async () => {
  const sqlite = new Store(join(dir, `${count++}.db`), { secretKey: undefined });
  const store: GatewayStore = sqlite;
  return {
    store,
    applyConfig: async (rows) => {
      await sqlite.repos.configApply.apply(rows);
      await store.invalidateAll();
    },
    // Settlement's own write, charging nothing: only the request_log rows matter here.
    recordRequests: async (rows) => {
      sqlite.ledgerRepository.commit(
        rows.map((log, index) => ({
          kind: "settle" as const,
          seq: index + 1,
          accountId: log[1],
          payment: log[6],
          charge: 0,
          paygWindow: null,
          freeDay: null,
          windows: [],
          log,
        })),
      );
    },
    // A delivered free request's settlement, written at once as a job's is: its tokens count in
    // its model's budget.
    addFreeTokens: async (model, windowSeconds, tokens, now) => {
      const write: LedgerWrite = {
        kind: "settle",
        seq: 0,
        accountId: "acct",
        payment: "free",
        charge: 0,
        paygWindow: null,
        freeDay: null,
        windows: [],
        log: logRow({ id: `req_free_${freeSettled++}`, payment: "free", model, createdAt: now }),
        freeTokens: [model, freeTokenWindowStart(windowSeconds, now), tokens],
      };
      sqlite.ledgerRepository.remember(write);
      sqlite.ledgerRepository.write(write);
    },
    storedByokSecret: async (id) =>
      (
        sqlite.database.prepare("SELECT secret FROM byok_credentials WHERE id = ?").get(id) as
          | { secret: string }
          | undefined
      )?.secret,
    storedProvider: async (id) =>
      sqlite.database.prepare("SELECT * FROM providers WHERE id = ?").get(id) as
        | Record<string, unknown>
        | undefined,
    close: async () => {
      await store.close();
    },
  };
});

describe("SQLite settlement batches", () => {
  const settle = (seq: number, accountId: string, charge: number): LedgerWrite => ({
    kind: "settle",
    seq,
    accountId,
    payment: "balance",
    charge,
    paygWindow: null,
    freeDay: null,
    windows: [],
    log: [
      `req_${seq}`,
      accountId,
      null,
      "chat.completions",
      "m",
      "settled",
      "balance",
      null,
      charge,
      charge,
      1,
      1,
      200,
      null,
      "p",
      0,
      seq,
      seq,
      null,
    ],
  });
  const open = () => {
    const sqlite = new Store(join(dir, `batch-${count++}.db`), { secretKey: undefined });
    sqlite.database.exec(`INSERT INTO accounts (id, balance_micro, created_at) VALUES
      ('a', 1000, 0), ('b', 1000, 0)`);
    const balances = () =>
      sqlite.database.prepare("SELECT id, balance_micro FROM accounts ORDER BY id").all();
    const changes = () => sqlite.database.prepare("SELECT total_changes()").pluck().get() as number;
    return { sqlite, balances, changes };
  };

  it("charges each account once per batch, by the sum of its settlements", async () => {
    const { sqlite, balances, changes } = open();
    const before = changes();
    sqlite.ledgerRepository.commit([
      settle(1, "a", 100),
      settle(2, "a", 200),
      settle(3, "b", 50),
      settle(4, "a", 300),
      settle(5, "b", 25),
    ]);
    expect(balances()).toEqual([
      { id: "a", balance_micro: 400 },
      { id: "b", balance_micro: 925 },
    ]);
    // Five log rows, one UPDATE per account, the journal mark: not one UPDATE per settlement.
    expect(changes() - before).toBe(5 + 2 + 1);
    expect(sqlite.database.prepare("SELECT count(*) FROM request_log").pluck().get()).toBe(5);
    await sqlite.close();
  });

  it("commits nothing of a batch whose charges together pass a balance", async () => {
    const { sqlite, balances } = open();
    expect(() =>
      sqlite.ledgerRepository.commit([
        settle(1, "a", 600),
        settle(2, "b", 10),
        settle(3, "a", 600),
      ]),
    ).toThrow(/CHECK constraint failed/);
    expect(balances()).toEqual([
      { id: "a", balance_micro: 1000 },
      { id: "b", balance_micro: 1000 },
    ]);
    expect(sqlite.database.prepare("SELECT count(*) FROM request_log").pluck().get()).toBe(0);
    await sqlite.close();
  });
});
