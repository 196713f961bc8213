import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { ProcessLedger } from "../src/server/billing/ledger.js";
import { Store } from "../src/store/sqlite/store.js";
import { delivered, holdFor } from "./support/ledger.js";

const dir = mkdtempSync(join(tmpdir(), "gateway-ledger-order-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const windowMs = 60_000;

/** A PAYG account whose window started at 0 with 500 micro-IDR spent, opened at `now`. */
function paygLedger(name: string) {
  const store = new Store(join(dir, `${name}.db`));
  store.createAccount({
    id: "acct",
    name: "",
    balanceMicro: 0,
    rpmLimit: 60,
    tier: "free",
    now: 0,
  });
  const ledger = new ProcessLedger(store);
  void ledger.updateAccount("acct", {
    payg_enabled: 1,
    payg_limit_micro: 1_000_000_000,
    payg_window_seconds: windowMs / 1000,
    payg_window_start: 0,
    payg_spent_micro: 500,
  });
  return { store, ledger };
}

const hold = (ledger: ProcessLedger, id: string, now: number) => holdFor(ledger, id, now, 1_000);

/** The account's PAYG window as the database holds it: the cached row is dropped and read again. */
const paygRow = (store: Store) => {
  store.invalidateAll();
  const account = store.getAccount("acct")!;
  return { start: account.payg_window_start, spent: account.payg_spent_micro };
};

describe("PAYG writes in any order", () => {
  it("keeps a job's charge written at once when a window reset queued before it lands later", () => {
    const { store, ledger } = paygLedger("job-first");
    const now = 2 * windowMs + 5;
    // This admission finds the window over: the reset to 120000 is queued, not yet written.
    const request = hold(ledger, "req_a", now);
    const job = hold(ledger, "job_b", now);
    // A job's charge goes into the transaction that completes the job, ahead of the queue.
    store.transaction(() => ledger.settle(job, delivered(300, now), { writeNow: true }));
    ledger.settle(request, delivered(200, now));
    ledger.flush();
    expect(paygRow(store)).toEqual({ start: 2 * windowMs, spent: 500 });
    store.invalidateAll();
    expect(store.getAccount("acct")?.payg_spent_micro).toBe(500);
    ledger.close();
    store.close();
  });

  it("drops a queued charge of a closed window from the spend, without moving the window back", () => {
    const { store, ledger } = paygLedger("closed-window");
    const early = hold(ledger, "req_early", 10);
    ledger.settle(early, delivered(40, 20)); // queued, counted in the window that started at 0
    const late = hold(ledger, "job_late", windowMs + 10); // rolls the window: reset queued
    store.transaction(() => ledger.settle(late, delivered(70, windowMs + 20), { writeNow: true }));
    ledger.flush();
    expect(paygRow(store)).toEqual({ start: windowMs, spent: 70 });
    store.invalidateAll();
    expect(store.getAccount("acct")?.payg_spent_micro).toBe(70);
    ledger.close();
    store.close();
  });
});
