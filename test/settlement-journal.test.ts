import { spawn } from "node:child_process";
import { once } from "node:events";
import { appendFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { ProcessLedger } from "../src/server/billing/ledger.js";
import { SettlementJournal } from "../src/store/sqlite/settlement-journal.js";
import { Store } from "../src/store/sqlite/store.js";
import { balanceOnDisk, foreignConnection, requestLogOnDisk } from "./support/database-file.js";
import { chat, KEY, post, type TestGateway, testGateway } from "./support/gateway.js";
import { delivered, holdFor } from "./support/ledger.js";

/** A journal on a disk that is full: every append fails. */
class FullDiskJournal extends SettlementJournal {
  override append(): void {
    throw new Error("ENOSPC: no space left on device, write");
  }
}

/**
 * An answer leaves once its settlement is in the journal, before the SQLite transaction. A process
 * killed in between must still have charged the request, exactly once, after a restart.
 */
const dir = mkdtempSync(join(tmpdir(), "gateway-journal-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const dist = join(import.meta.dirname, "..", "dist");
const balanceMicro = 1_000_000_000;
const committedCost = 1_000;
const costMicro = 12_345;

/** Settles answered one at a time, waiting in the journal for their transaction. */
const crashed = 3;

/**
 * Settles a first request all the way into SQLite (its journal line stays, already applied), then
 * `crashed` more one at a time, each answered from the journal and waiting there for a batch, and
 * is killed before that batch commits.
 */
const crashingSettler = `
import { Store } from ${JSON.stringify(join(dist, "store", "sqlite", "store.js"))};
import { ProcessLedger } from ${JSON.stringify(join(dist, "server", "billing", "ledger.js"))};
const store = new Store(process.argv[2]);
const ledger = new ProcessLedger(store, undefined, 600000);
const now = Date.now();
const settle = (id, cost) => {
  const r = ledger.reserve({ id, accountId: "acct", keyId: null, endpoint: "chat.completions",
    model: "m", stream: false, worstCaseMicro: 100000, subscriptionModel: false, now });
  ledger.settle(r, { status: 200, costMicro: cost, inputTokens: 10, outputTokens: 5,
    providerId: "p", delivered: true, now });
  void ledger.committed();
};
settle("req_committed", ${committedCost});
ledger.flush();
for (let i = 0; i < ${crashed}; i++) {
  settle("req_crash_" + i, ${costMicro});
  await new Promise((resolve) => setImmediate(resolve));
}
process.kill(process.pid, "SIGKILL");
`;

function storeWithAccount(dbPath: string): Store {
  const store = new Store(dbPath);
  store.createAccount({ id: "acct", name: "", balanceMicro, rpmLimit: 60, tier: "free", now: 0 });
  return store;
}

/** Holds and settles one delivered request of `costMicro`; the caller decides when it commits. */
function settleOne(ledger: ProcessLedger, id: string): void {
  const now = Date.now();
  ledger.settle(holdFor(ledger, id, now, 100_000), delivered(costMicro, now));
}

/** Counts the transactions the store runs from now on. */
function countTransactions(store: Store): { count: number } {
  const counted = { count: 0 };
  const run = store.transaction.bind(store);
  store.transaction = <T>(fn: () => T): T => {
    counted.count++;
    return run(fn);
  };
  return counted;
}

/** What the file holds, read by a connection of its own. */
function state(dbPath: string) {
  return {
    balance: balanceOnDisk(dbPath, "acct"),
    logged: requestLogOnDisk(dbPath).map(({ id, state, cost_micro }) => ({
      id,
      state,
      cost_micro,
    })),
  };
}

describe("the settlement journal", () => {
  it("applies a settlement that was answered but not committed, once, after a crash", async () => {
    const dbPath = join(dir, "gateway.db");
    storeWithAccount(dbPath).close();

    const script = join(dir, "settle-and-crash.mjs");
    writeFileSync(script, crashingSettler);
    const child = spawn(process.execPath, [script, dbPath], { stdio: "inherit" });
    const [code, signal] = await once(child, "exit");
    expect([code, signal]).toEqual([null, "SIGKILL"]);

    // The crash came between the last journal lines and their transaction.
    const journal = `${dbPath}-settlements`;
    expect(readFileSync(journal, "utf8").trim().split("\n")).toHaveLength(1 + crashed);
    const committed = { id: "req_committed", state: "settled", cost_micro: committedCost };
    expect(state(dbPath)).toEqual({ balance: balanceMicro - committedCost, logged: [committed] });
    // A line torn by the crash is ignored.
    appendFileSync(journal, '{"kind":"settle","seq":9');

    for (let restart = 0; restart < 2; restart++) {
      const store = new Store(dbPath);
      const ledger = new ProcessLedger(store);
      const charged = balanceMicro - committedCost - crashed * costMicro;
      expect(store.getAccount("acct")?.balance_micro).toBe(charged);
      ledger.close();
      store.close();
      expect(state(dbPath)).toEqual({
        balance: charged,
        logged: [
          committed,
          ...Array.from({ length: crashed }, (_, i) => ({
            id: `req_crash_${i}`,
            state: "settled",
            cost_micro: costMicro,
          })),
        ],
      });
      expect(readFileSync(journal, "utf8")).toBe("");
    }
  });

  it("keeps an answered settlement queued when its transaction fails, and applies it once later", () => {
    const dbPath = join(dir, "retry.db");
    const store = storeWithAccount(dbPath);
    const ledger = new ProcessLedger(store);
    settleOne(ledger, "req_retry");
    void ledger.committed(); // in the journal: the answer may leave
    // Another writer empties the balance behind the ledger's back: the charge would take it below
    // zero, and the CHECK constraint fails the transaction.
    const other = foreignConnection(dbPath);
    const setBalance = other.prepare("UPDATE accounts SET balance_micro = ? WHERE id = 'acct'");
    setBalance.run(0);
    expect(() => ledger.flush()).toThrow(/CHECK/);
    setBalance.run(balanceMicro);
    other.close();
    ledger.flush();
    ledger.flush();
    expect(store.getAccount("acct")?.balance_micro).toBe(balanceMicro - costMicro);
    ledger.close();
    store.close();
    expect(state(dbPath)).toEqual({
      balance: balanceMicro - costMicro,
      logged: [{ id: "req_retry", state: "settled", cost_micro: costMicro }],
    });
  });

  it("commits at once when the journal cannot take a settlement (a full disk)", async () => {
    const dbPath = join(dir, "full.db");
    const store = storeWithAccount(dbPath);
    const ledger = new ProcessLedger(store, (path) => new FullDiskJournal(path));
    settleOne(ledger, "req_full");
    const durable = ledger.committed();
    // Before the event loop turns: the transaction already ran.
    expect(state(dbPath).balance).toBe(balanceMicro - costMicro);
    await durable;
    ledger.close();
    store.close();
  });

  it("lets settlements answered one at a time wait in the journal for one transaction, landed before any read", async () => {
    const dbPath = join(dir, "batched.db");
    const store = storeWithAccount(dbPath);
    // The wait is longer than the test: only the read lands the batch.
    const ledger = new ProcessLedger(store, undefined, 600_000);
    const transactions = countTransactions(store);
    const requests = 20;
    for (let i = 0; i < requests; i++) {
      settleOne(ledger, `req_${i}`);
      await ledger.committed(); // alone: in the journal, and the answer may leave
      // The turn in which a request's own transaction used to follow its answer.
      await new Promise((resolve) => setImmediate(resolve));
    }
    expect(transactions.count).toBe(0);
    expect(state(dbPath)).toEqual({ balance: balanceMicro, logged: [] });
    expect(readFileSync(`${dbPath}-settlements`, "utf8").trim().split("\n")).toHaveLength(requests);
    // What admission decides from already counts every charge.
    const charged = balanceMicro - requests * costMicro;
    expect(store.getAccount("acct")?.balance_micro).toBe(charged);

    // A read of the request log lands the batch first, in one transaction.
    expect(store.requestLog("acct", 100)).toHaveLength(requests);
    expect(transactions.count).toBe(1);
    expect(state(dbPath).balance).toBe(charged);
    expect(state(dbPath).logged).toHaveLength(requests);
    ledger.close();
    store.close();
  });
});

describe("requests answered one at a time over HTTP", () => {
  let gw: TestGateway | undefined;
  afterEach(async () => {
    await gw?.close();
    gw = undefined;
  });

  it("are all in the usage report and the request listing asked for right after the last answer", async () => {
    // Longer than the test: only the reads land the settlements.
    gw = await testGateway({ journaledWaitMs: 600_000 });
    const usage = async () => {
      const res = await fetch(`${gw!.url}/v1/usage/summary`, {
        headers: { authorization: `Bearer ${KEY}` },
      });
      return (await res.json()) as { requests: number; cost_idr: number };
    };
    const before = await usage();
    const requests = 5;
    for (let i = 0; i < requests; i++) {
      const res = await post(gw, "/v1/chat/completions", chat(`one at a time ${i}`));
      expect(res.status).toBe(200);
      await res.json();
    }
    const after = await usage();
    expect(after.requests - before.requests).toBe(requests);
    const listed = await gw.listRequests({ limit: 10 });
    expect(listed.filter((row) => row.state === "settled")).toHaveLength(requests);
    const quota = await (
      await fetch(`${gw.url}/v1/account/quota`, { headers: { authorization: `Bearer ${KEY}` } })
    ).json();
    // The report's cost and the balance's fall agree to the micro-IDR.
    const spent = Math.round(after.cost_idr * 1_000_000) - Math.round(before.cost_idr * 1_000_000);
    expect(spent).toBeGreaterThan(0);
    expect(Math.round((quota as { balance_idr: number }).balance_idr * 1_000_000)).toBe(
      1_000_000 * 1_000_000 - spent,
    );
  });

  it("answers a usage read while the database refuses writes from what is committed, and lands the rest once it takes them", async () => {
    gw = await testGateway({ journaledWaitMs: 600_000 });
    const g = gw;
    const summary = async () => {
      const res = await fetch(`${g.url}/v1/usage/summary`, {
        headers: { authorization: `Bearer ${KEY}` },
      });
      return {
        status: res.status,
        requests: ((await res.json()) as { requests: number }).requests,
      };
    };
    const before = await summary();
    const res = await post(g, "/v1/chat/completions", chat("waits in the journal"));
    expect(res.status).toBe(200);
    await res.json();
    // SQLite refuses every write from here on, as on a filesystem remounted read-only.
    g.services.store.database.pragma("query_only = ON");
    expect(await summary()).toEqual(before);
    g.services.store.database.pragma("query_only = OFF");
    expect(await summary()).toEqual({ status: 200, requests: before.requests + 1 });
  });
});
