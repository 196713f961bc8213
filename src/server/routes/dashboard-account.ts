import type { Hono } from "hono";
import { idrToMicro } from "../../store/money.js";
import type { AppEnv } from "../app-env.js";
import { paygSchema } from "../config/schema.js";
import { type OwnerSessions, requireOwnerSession } from "../dashboard/owner-session.js";
import { GatewayError } from "../errors.js";
import { readJson } from "../http/json-body.js";
import type { Services } from "../services.js";
import { usageViews } from "./account.js";
import { accountView, addByok, byokBody, byokView } from "./admin.js";

/**
 * The owner's own settings under the dashboard session: BYOK credentials, PAYG and usage.
 * Writes need the session's CSRF token in `x-csrf-token`.
 */
export function installDashboardAccountRoutes(
  app: Hono<AppEnv>,
  s: Services,
  sessions: OwnerSessions,
): void {
  const owner = (c: Parameters<typeof requireOwnerSession>[0], write: boolean) =>
    requireOwnerSession(c, sessions, s.options.now(), write);

  app.get("/api/dashboard/account", async (c) => {
    const account = s.store.getAccount((await owner(c, false)).accountId);
    if (!account) throw new GatewayError(404, "not_found", "No such account.");
    return c.json(accountView(account));
  });

  app.get("/api/dashboard/byok", async (c) =>
    c.json({
      object: "list",
      data: s.store.listByok((await owner(c, false)).accountId).map(byokView),
    }),
  );
  app.post("/api/dashboard/byok", async (c) => {
    const { accountId } = await owner(c, true);
    return c.json(byokView(addByok(s, accountId, await readJson(c, byokBody))), 201);
  });
  app.delete("/api/dashboard/byok/:id", async (c) => {
    const { accountId } = await owner(c, true);
    if (!s.store.deleteByok(accountId, c.req.param("id"))) {
      throw new GatewayError(404, "not_found", "No such BYOK credential.");
    }
    return c.json({ id: c.req.param("id"), deleted: true });
  });

  app.put("/api/dashboard/payg", async (c) => {
    const { accountId } = await owner(c, true);
    const payg = await readJson(c, paygSchema);
    s.ledger.updateAccount(accountId, {
      payg_enabled: payg.enabled ? 1 : 0,
      payg_limit_micro: idrToMicro(payg.limit_idr),
      payg_window_seconds: payg.window_seconds,
    });
    return c.json(accountView(s.store.getAccount(accountId)!));
  });

  for (const [name, view] of Object.entries(usageViews(s))) {
    app.get(`/api/dashboard/usage/${name}`, async (c) =>
      c.json(view((await owner(c, false)).accountId, c)),
    );
  }
}
