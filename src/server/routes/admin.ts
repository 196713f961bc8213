import type { Context } from "hono";
import { z } from "zod";
import { byokLabel, keyLabel } from "../../store/key-rows.js";
import { idrToMicro, MAX_IDR, MAX_MICRO, microToIdr } from "../../store/money.js";
import type { AccountColumn } from "../../store/types.js";
import {
  type AccountRow,
  type ByokRow,
  type MaybeAsync,
  parseSubscription,
} from "../../store/types.js";
import type { Services } from "../compose/services.js";
import { idr, paygSchema, providerKey, rpmLimit, subscriptionSchema } from "../config/schema.js";
import { byokView } from "../dispatch/byok-view.js";
import { badRequest, GatewayError } from "../errors.js";
import { readJson } from "../http/body.js";
import type { Handler } from "../http/context.js";
import { isBuiltIn } from "../providers/registry.js";

const accountPatch = z
  .object({
    name: z.string().min(1).optional(),
    status: z.enum(["active", "suspended"]).optional(),
    rpm_limit: rpmLimit.optional(),
    tier: z.string().min(1).optional(),
    balance_idr: idr.optional(),
    payg: paygSchema.nullable().optional(),
    subscription: subscriptionSchema.nullable().optional(),
  })
  .strict();

const createAccount = z
  .object({
    id: z
      .string()
      .regex(/^[A-Za-z0-9_.-]{1,64}$/)
      .optional(),
    name: z.string().optional(),
    balance_idr: idr.default(0),
    rpm_limit: rpmLimit.default(60),
    tier: z.string().default("free"),
    key_label: keyLabel.default("default"),
  })
  .strict();

const keyBody = z
  .object({
    label: keyLabel,
    kind: z.enum(["standard", "login", "shared"]).default("standard"),
  })
  .strict();
const requestsQuery = z.object({
  limit: z.coerce.number().int().min(1).max(1000).optional(),
  model: z.string().min(1).optional(),
  status: z.coerce.number().int().optional(),
});
const topUpBody = z.object({ amount_idr: idr.positive() }).strict();
export const byokBody = z
  .object({
    provider: z.string().min(1),
    key: providerKey,
    label: byokLabel.optional(),
  })
  .strict();

/**
 * The admin API's handlers (access `admin`): every account state of the spec can be reached, so a
 * CI suite can test each error.
 */
export function adminHandlers(services: Services) {
  const accountParam = (c: Context): AccountRow => {
    const account = services.store.getAccount(c.req.param("id") ?? "");
    if (!account) throw new GatewayError(404, "not_found", "No such account.");
    return account;
  };
  const setStatus =
    (status: "active" | "suspended"): Handler =>
    async (c) => {
      const account = accountParam(c);
      await services.store.setAccountStatus(account.id, status);
      return c.json(accountView((await services.store.readAccount(account.id))!));
    };

  return {
    /** Recent requests for a test to assert on (with bodies when the gateway captures them). */
    requests: (async (c) => {
      const query = requestsQuery.safeParse(c.req.query());
      if (!query.success) {
        const issue = query.error.issues[0];
        throw new GatewayError(
          400,
          "bad_request",
          `Invalid query: ${issue.path.join(".")}: ${issue.message}`,
        );
      }
      return c.json({
        object: "list",
        capture_bodies: services.inspector.capturing,
        data: await services.inspector.requests(query.data),
      });
    }) satisfies Handler,

    accounts: (async (c) => {
      // Money as committed: the cached rows' balances are not current where gateways share a database.
      const accounts = await services.store.readAccounts();
      return c.json({ object: "list", data: accounts.map(accountView) });
    }) satisfies Handler,

    createAccount: (async (c) => {
      const body = await readJson(c, createAccount);
      const id = body.id ?? `acct_${crypto.randomUUID().slice(0, 8)}`;
      if (services.store.getAccount(id))
        throw new GatewayError(409, "bad_request", `Account "${id}" already exists.`);
      requireTier(services, body.tier);
      const now = services.options.now();
      const account = await services.store.createAccount({
        id,
        name: body.name ?? id,
        balanceMicro: idrToMicro(body.balance_idr),
        rpmLimit: body.rpm_limit,
        tier: body.tier,
        now,
      });
      const { key, value } = await services.store.createKey({
        accountId: id,
        label: body.key_label,
        kind: "standard",
        now,
      });
      return c.json(
        {
          account: accountView(account),
          key: { id: key.id, label: key.label, kind: key.kind, value },
        },
        201,
      );
    }) satisfies Handler,

    account: (async (c) => {
      const account = (await services.store.readAccount(accountParam(c).id))!;
      return c.json({
        ...accountView(account),
        keys: (await services.store.listKeys(account.id)).map(({ account_id: _, ...k }) => k),
        byok: services.store.listByok(account.id).map(byokView),
      });
    }) satisfies Handler,

    patchAccount: (async (c) => {
      const account = accountParam(c);
      const body = await readJson(c, accountPatch);
      const patch: Partial<Record<AccountColumn, string | number | null>> = {};
      const now = services.options.now();
      if (body.name !== undefined) patch.name = body.name;
      if (body.status !== undefined) patch.status = body.status;
      if (body.rpm_limit !== undefined) patch.rpm_limit = body.rpm_limit;
      if (body.tier !== undefined) patch.tier = requireTier(services, body.tier);
      if (body.balance_idr !== undefined) patch.balance_micro = idrToMicro(body.balance_idr);
      if (body.payg !== undefined) {
        patch.payg_enabled = body.payg?.enabled ? 1 : 0;
        patch.payg_limit_micro = body.payg ? idrToMicro(body.payg.limit_idr) : 0;
        if (body.payg) patch.payg_window_seconds = body.payg.window_seconds;
        patch.payg_window_start = now;
        patch.payg_spent_micro = 0;
      }
      if (body.subscription !== undefined) {
        patch.subscription_json = body.subscription ? JSON.stringify(body.subscription) : null;
        patch.subscription_started_at = body.subscription
          ? (body.subscription.started_at ?? now)
          : null;
        if (body.subscription?.tier) patch.tier = requireTier(services, body.subscription.tier);
        for (const name of body.subscription?.models ?? []) requireModelOrRoute(services, name);
      }
      await services.ledger.updateAccount(account.id, patch);
      return c.json(accountView((await services.store.readAccount(account.id))!));
    }) satisfies Handler,

    topUp: (async (c) => {
      const account = accountParam(c);
      const { amount_idr } = await readJson(c, topUpBody);
      const { balance_micro: balance } = (await services.store.readAccount(account.id)) ?? account;
      if (balance + idrToMicro(amount_idr) > MAX_MICRO) {
        throw badRequest(
          `This top-up would take the balance above ${MAX_IDR} IDR, the most the gateway counts to the micro-IDR.`,
        );
      }
      return c.json(
        accountView((await services.ledger.topUp(account.id, idrToMicro(amount_idr)))!),
      );
    }) satisfies Handler,

    suspend: setStatus("suspended"),
    reinstate: setStatus("active"),

    createKey: (async (c) => {
      const account = accountParam(c);
      const body = await readJson(c, keyBody);
      const { key, value } = await services.store.createKey({
        accountId: account.id,
        label: body.label,
        kind: body.kind,
      });
      return c.json(
        {
          id: key.id,
          label: key.label,
          kind: key.kind,
          prefix: key.prefix,
          created_at: key.created_at,
          value,
        },
        201,
      );
    }) satisfies Handler,

    revokeKey: (async (c) => {
      const id = c.req.param("keyId") ?? "";
      if (!services.store.getKey(id)) throw new GatewayError(404, "not_found", "No such key.");
      await services.store.revokeKey(id, services.options.now());
      return c.json({ id, revoked: true });
    }) satisfies Handler,

    byok: ((c) =>
      c.json({
        object: "list",
        data: services.store.listByok(accountParam(c).id).map(byokView),
      })) satisfies Handler,

    addByok: (async (c) => {
      const account = accountParam(c);
      const body = await readJson(c, byokBody);
      return c.json(byokView(await addByok(services, account.id, body)), 201);
    }) satisfies Handler,

    deleteByok: (async (c) => {
      const account = accountParam(c);
      const id = c.req.param("byokId") ?? "";
      if (!(await services.store.deleteByok(account.id, id)))
        throw new GatewayError(404, "not_found", "No such BYOK credential.");
      return c.json({ id, deleted: true });
    }) satisfies Handler,
  };
}

export function addByok(
  services: Pick<Services, "options" | "store">,
  accountId: string,
  body: { provider: string; key: string; label?: string },
): MaybeAsync<ByokRow> {
  const provider = services.store.getCatalog().providers.get(body.provider);
  if (!provider || isBuiltIn(provider)) {
    throw new GatewayError(400, "bad_request", `Unknown provider "${body.provider}" for BYOK.`);
  }
  return services.store.addByok(
    accountId,
    provider.id,
    body.key,
    // A blank label is none: the provider names the key.
    body.label || provider.id,
    services.options.now(),
  );
}

function requireTier(services: Pick<Services, "store">, tier: string): string {
  if (!services.store.getCatalog().tiers.has(tier))
    throw new GatewayError(400, "bad_request", `Unknown tier "${tier}".`);
  return tier;
}

/** A subscription covers the names clients ask for: a typo would cover nothing, silently. */
function requireModelOrRoute(services: Pick<Services, "store">, name: string): void {
  const catalog = services.store.getCatalog();
  if (!catalog.models.has(name) && !catalog.routes.has(name))
    throw new GatewayError(
      400,
      "bad_request",
      `Unknown model or route "${name}" in subscription.models.`,
    );
}

export function accountView(a: AccountRow) {
  return {
    id: a.id,
    name: a.name,
    status: a.status,
    balance_idr: microToIdr(a.balance_micro),
    rpm_limit: a.rpm_limit,
    tier: a.tier,
    payg: a.payg_enabled
      ? {
          enabled: true,
          limit_idr: microToIdr(a.payg_limit_micro),
          spent_idr: microToIdr(a.payg_spent_micro),
          window_seconds: a.payg_window_seconds,
        }
      : null,
    subscription: parseSubscription(a),
    created_at: a.created_at,
  };
}
