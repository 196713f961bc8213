import { microToIdr } from "../../store/money.js";
import type { GatewayStore } from "../../store/types.js";
import { parseSubscription } from "../../store/types.js";
import { nextUtcMidnight, subscriptionWindowStart, utcDay } from "../../store/utc-windows.js";
import { GatewayError } from "../errors.js";
import type { Ledger } from "./ledger.js";

/** What an account's quota is read from (the gateway's services are one). */
export interface QuotaSources {
  store: GatewayStore;
  ledger: Ledger;
  options: { now: () => number };
}

/** What the account can spend now: the quota endpoint's body, also shown on the dashboard. */
export async function quota(services: QuotaSources, accountId: string) {
  // The held money is read before the balance: a settlement that commits between the two reads
  // (on Postgres they are two queries) then shows its charge twice, never as money neither held
  // nor charged, which would overstate what the account can spend.
  const heldMicro = await services.ledger.heldMicro(accountId);
  const account = await services.store.readAccount(accountId);
  if (!account) throw new GatewayError(500, "internal_error", "account missing");
  const now = services.options.now();
  const catalog = services.store.getCatalog();
  const tier = catalog.tiers.get(account.tier) ?? catalog.tiers.get("free");
  const subscription = parseSubscription(account);
  const startedAt = account.subscription_started_at ?? account.created_at;
  const windows = (subscription?.windows ?? []).map((w) => ({
    ...w,
    start: subscriptionWindowStart(startedAt, w.seconds, now),
  }));
  const [freeUsed, windowsUsed, windowsHeld] = await Promise.all([
    services.ledger.freeUsed(account.id, utcDay(now)),
    Promise.all(windows.map((w) => services.ledger.subscriptionUsed(account.id, w.name, w.start))),
    // Requests in flight count against a window as admission counts them: what remains is what
    // the next request may take.
    Promise.all(windows.map((w) => services.ledger.subscriptionHeld(account.id, w.name, w.start))),
  ]);
  const paygResetsAt = account.payg_window_start + account.payg_window_seconds * 1000;
  return {
    object: "account.quota",
    account_id: account.id,
    status: account.status,
    tier: account.tier,
    balance_idr: microToIdr(account.balance_micro),
    /** Held by requests and jobs in flight: charged (in part) or released when they end. */
    held_idr: microToIdr(heldMicro),
    payg: account.payg_enabled
      ? {
          enabled: true,
          limit_idr: microToIdr(account.payg_limit_micro),
          spent_idr: now >= paygResetsAt ? 0 : microToIdr(account.payg_spent_micro),
          resets_at: iso(
            now >= paygResetsAt
              ? subscriptionWindowStart(
                  account.payg_window_start,
                  account.payg_window_seconds,
                  now,
                ) +
                  account.payg_window_seconds * 1000
              : paygResetsAt,
          ),
        }
      : null,
    subscription: subscription
      ? {
          plan: subscription.plan,
          payg_fallback: subscription.payg_fallback,
          free_fallback: subscription.free_fallback,
          windows: windows.map(({ start, ...w }, index) => {
            const used = windowsUsed[index];
            return {
              name: w.name,
              seconds: w.seconds,
              quota: w.quota,
              used,
              remaining: Math.max(0, w.quota - used - windowsHeld[index]),
              resets_at: iso(start + w.seconds * 1000),
            };
          }),
        }
      : null,
    free: {
      daily_limit: tier?.free_daily ?? 0,
      daily_used: freeUsed,
      daily_remaining: Math.max(0, (tier?.free_daily ?? 0) - freeUsed),
      resets_at: iso(nextUtcMidnight(now)),
      requests_per_minute: tier?.free_rpm ?? 0,
    },
    rate_limit: { requests_per_minute: account.rpm_limit },
  };
}

const iso = (ms: number) => new Date(ms).toISOString();
