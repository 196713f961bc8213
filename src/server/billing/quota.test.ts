import { describe, expect, it } from "vitest";
import type { AccountRow, GatewayStore } from "../../store/types.js";
import type { Ledger } from "./ledger.js";
import { type QuotaSources, quota } from "./quota.js";

/**
 * The quota reads an account's balance and its held money in two steps (on Postgres, two
 * queries). A settlement may commit between them: the quota must never show its amount as
 * neither held nor charged, which would tell a client it can spend money that is already spent.
 */
describe("quota with a settlement committing between its reads", () => {
  const balance = 1_000_000;
  const hold = 454_000;
  const charge = 19_000;

  /** An account with one hold open, whose settlement commits right after the quota's first read. */
  function settlingBetweenReads(): QuotaSources {
    const state = { balance, held: hold, reads: 0 };
    const read = <T>(value: () => T): T => {
      const got = value();
      if (++state.reads === 1) {
        state.balance -= charge;
        state.held = 0;
      }
      return got;
    };
    const account: Omit<AccountRow, "balance_micro"> = {
      id: "acct",
      name: "acct",
      status: "active",
      rpm_limit: 60,
      tier: "free",
      payg_enabled: 0,
      payg_limit_micro: 0,
      payg_window_seconds: 2_592_000,
      payg_window_start: 0,
      payg_spent_micro: 0,
      subscription_json: null,
      subscription_started_at: null,
      created_at: 0,
    };
    const store = {
      readAccount: async () => read(() => ({ ...account, balance_micro: state.balance })),
      getCatalog: () => ({ tiers: new Map() }),
    } as unknown as GatewayStore;
    const ledger = {
      heldMicro: async () => read(() => state.held),
      freeUsed: async () => 0,
      subscriptionUsed: async () => 0,
      subscriptionHeld: async () => 0,
    } as unknown as Ledger;
    return { store, ledger, options: { now: () => 0 } };
  }

  it("never shows more to spend than before or after the settlement", async () => {
    const shown = await quota(settlingBetweenReads(), "acct");
    const spendable = Math.round((shown.balance_idr - shown.held_idr) * 1_000_000);
    // Before: balance - hold; after: balance - charge. Either, or less, is honest.
    expect(spendable).toBeLessThanOrEqual(balance - charge);
  });
});
