import type { Context } from "hono";
import { z } from "zod";
import type { AccountRow } from "../../store/types.js";
import { nextUtcMidnight } from "../../store/utc-windows.js";
import { quota } from "../billing/quota.js";
import type { Services } from "../compose/services.js";
import { badRequest, GatewayError } from "../errors.js";
import type { AppEnv, Handler } from "../http/context.js";
import { listPage, listQuery, parseQuery } from "./list-page.js";

/** GET /v1/account/quota: what the key's account can spend now. Shared keys may not read it. */
export function quotaHandler(services: Services): Handler {
  return async (c) => {
    notShared(c, "the account quota");
    return c.json(await quota(services, accountOf(services, c).id));
  };
}

/**
 * GET /v1/usage/{name}: one of the usage reports, for the key's account. A shared key (one
 * handed to others) may not read them, as it may not read the quota: they list every key's
 * requests, labels and costs.
 */
export function usageHandler(view: UsageView, services: Services): Handler {
  return async (c) => {
    notShared(c, "the account's usage");
    return c.json(await view(accountOf(services, c).id, c));
  };
}

function notShared(c: Context<AppEnv>, what: string): void {
  if (c.get("auth").key.kind === "shared")
    throw new GatewayError(403, "shared_key_not_allowed", `Shared keys cannot read ${what}.`);
}

export type UsageView = (accountId: string, c: Context) => Promise<object>;

/**
 * `/v1/usage/requests` pages the request log as OpenAI pages its lists (`limit` 1-500, default
 * 50, `order`, `after` a request id), newest first unless asked otherwise.
 */
const requestsPage = listQuery(500, 50);
export const requestsQuery = requestsPage.schema;

/**
 * The three usage reports, keyed by the last path segment. Each counts against the account's
 * one budget of 60 reads per minute, whichever route (key or dashboard) serves it.
 */
export function usageViews(
  services: Services,
): Record<"summary" | "daily" | "requests", UsageView> {
  const limited =
    (view: UsageView): UsageView =>
    async (accountId, c) => {
      await services.limits.takeUsageRead(accountId, services.options.now());
      return view(accountId, c);
    };
  return {
    summary: limited(async (accountId, c) => ({
      object: "usage.summary",
      account_id: accountId,
      ...(await services.store.usageSummary(accountId, sinceDays(c, services))),
    })),
    daily: limited(async (accountId, c) => ({
      object: "list",
      data: await services.store.usageDaily(accountId, sinceDays(c, services)),
    })),
    requests: limited(async (accountId, c) => {
      const query = requestsPage.parse(c);
      const page = await services.store.requestPage(accountId, query);
      // Another account's request is as unknown as one that never was.
      if (!page)
        throw badRequest(
          `Invalid query parameter after: no request '${query.after}' in this account's request log.`,
        );
      return listPage(page.requests, (request) => request.id, page.hasMore);
    }),
  };
}

function accountOf(services: Pick<Services, "store">, c: Context<AppEnv>): AccountRow {
  const account = services.store.getAccount(c.get("auth").accountId);
  if (!account) throw new GatewayError(500, "internal_error", "account missing");
  return account;
}

/**
 * The summary's and the daily report's `days`: 1 to 366 (a year, leap day included), default 30.
 * One out of range is refused, not answered for other days than the client asked for.
 */
export const usageDaysQuery = z.looseObject({
  days: z.coerce.number().int().min(1).max(366).default(30),
});

/**
 * The start of the last `days` UTC days, today included: whole days, as the daily report's
 * buckets and the dashboard count them, so no bucket stands for part of its date.
 */
function sinceDays(c: Context, services: Pick<Services, "options">): number {
  const { days } = parseQuery(usageDaysQuery, c);
  const now = services.options.now();
  return nextUtcMidnight(now) - days * 86_400_000;
}
