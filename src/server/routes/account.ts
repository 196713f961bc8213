import type { Context } from "hono";
import { microToIdr } from "../../store/money.js";
import { type AccountRow, parseSubscription } from "../../store/types.js";
import type { AppEnv, Handler } from "../app-env.js";
import { nextUtcMidnight, subscriptionWindowStart, utcDay } from "../billing/ledger.js";
import { GatewayError } from "../errors.js";
import type { Services } from "../services.js";

/** GET /v1/account/quota: what the key's account can spend now. Shared keys may not read it. */
export function quotaHandler(s: Services): Handler {
  return (c) => {
    const { key } = c.get("auth");
    if (key.kind === "shared") {
      throw new GatewayError(
        403,
        "shared_key_not_allowed",
        "Shared keys cannot read the account quota.",
      );
    }
    return c.json(quota(s, accountOf(s, c)));
  };
}

/** GET /v1/usage/{name}: one of the usage reports, for the key's account. */
export function usageHandler(view: UsageView, s: Services): Handler {
  return (c) => c.json(view(accountOf(s, c).id, c));
}

export type UsageView = (accountId: string, c: Context) => object;

/**
 * The three usage reports, keyed by the last path segment. Each counts against the account's
 * one budget of 60 reads per minute, whichever route (key or dashboard) serves it.
 */
export function usageViews(s: Services): Record<"summary" | "daily" | "requests", UsageView> {
  const limited =
    (view: UsageView): UsageView =>
    (accountId, c) => {
      s.limits.takeUsageRead(accountId, s.options.now());
      return view(accountId, c);
    };
  return {
    summary: limited((accountId, c) => ({
      object: "usage.summary",
      account_id: accountId,
      ...s.store.usageSummary(accountId, sinceDays(c, s)),
    })),
    daily: limited((accountId, c) => ({
      object: "list",
      data: s.store.usageDaily(accountId, sinceDays(c, s)),
    })),
    requests: limited((accountId, c) => {
      const limit = Math.min(500, Math.max(1, Number(c.req.query("limit") ?? 50) || 50));
      return { object: "list", data: s.store.recentRequests(accountId, limit) };
    }),
  };
}

function accountOf(s: Services, c: Context<AppEnv>): AccountRow {
  const account = s.store.getAccount(c.get("auth").accountId);
  if (!account) throw new GatewayError(500, "internal_error", "account missing");
  return account;
}

function sinceDays(c: Context, s: Services): number {
  const days = Math.min(366, Math.max(1, Number(c.req.query("days") ?? 30) || 30));
  return s.options.now() - days * 86_400_000;
}

/** What the account can spend now: the quota endpoint's body, also shown on the dashboard. */
export function quota(s: Services, account: AccountRow) {
  const now = s.options.now();
  const catalog = s.store.getCatalog();
  const tier = catalog.tiers.get(account.tier) ?? catalog.tiers.get("free");
  const freeUsed = s.ledger.freeUsed(account.id, utcDay(now));
  const subscription = parseSubscription(account);
  const startedAt = account.subscription_started_at ?? account.created_at;
  const paygResetsAt = account.payg_window_start + account.payg_window_seconds * 1000;
  return {
    object: "account.quota",
    account_id: account.id,
    status: account.status,
    tier: account.tier,
    balance_idr: microToIdr(account.balance_micro),
    /** Held by requests and jobs in flight: charged (in part) or released when they end. */
    held_idr: microToIdr(s.ledger.heldMicro(account.id)),
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
          windows: subscription.windows.map((w) => {
            const start = subscriptionWindowStart(startedAt, w.seconds, now);
            const used = s.ledger.subscriptionUsed(account.id, w.name, start);
            return {
              name: w.name,
              seconds: w.seconds,
              quota: w.quota,
              used,
              remaining: Math.max(0, w.quota - used),
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
