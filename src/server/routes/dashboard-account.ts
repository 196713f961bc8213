import { idrToMicro } from "../../store/money.js";
import type { Services } from "../compose/services.js";
import { paygSchema } from "../config/schema.js";
import { byokView } from "../dispatch/byok-view.js";
import { GatewayError } from "../errors.js";
import { readJson } from "../http/body.js";
import type { Handler } from "../http/context.js";
import type { UsageView } from "./account.js";
import { accountView, addByok, byokBody } from "./admin.js";

/**
 * The owner's own settings under the dashboard session (access `owner`: writes need the
 * session's CSRF token in `x-csrf-token`): BYOK credentials, PAYG and usage.
 */
export function dashboardAccountHandlers(services: Services) {
  return {
    account: (async (c) => {
      // Money as committed: the cached row's balance is not current where gateways share a database.
      const account = await services.store.readAccount(c.get("owner").accountId);
      if (!account) throw new GatewayError(404, "not_found", "No such account.");
      return c.json(accountView(account));
    }) satisfies Handler,

    byok: ((c) =>
      c.json({
        object: "list",
        data: services.store.listByok(c.get("owner").accountId).map(byokView),
      })) satisfies Handler,

    addByok: (async (c) => {
      const { accountId } = c.get("owner");
      const body = await readJson(c, byokBody);
      return c.json(byokView(await addByok(services, accountId, body)), 201);
    }) satisfies Handler,

    deleteByok: (async (c) => {
      const id = c.req.param("id") ?? "";
      if (!(await services.store.deleteByok(c.get("owner").accountId, id))) {
        throw new GatewayError(404, "not_found", "No such BYOK credential.");
      }
      return c.json({ id, deleted: true });
    }) satisfies Handler,

    payg: (async (c) => {
      const { accountId } = c.get("owner");
      const payg = await readJson(c, paygSchema);
      await services.ledger.updateAccount(accountId, {
        payg_enabled: payg.enabled ? 1 : 0,
        payg_limit_micro: idrToMicro(payg.limit_idr),
        payg_window_seconds: payg.window_seconds,
      });
      return c.json(accountView((await services.store.readAccount(accountId))!));
    }) satisfies Handler,

    /** GET /api/dashboard/usage/{name}: one of the usage reports, for the owner's account. */
    usage:
      (view: UsageView): Handler =>
      async (c) =>
        c.json(await view(c.get("owner").accountId, c)),
  };
}
