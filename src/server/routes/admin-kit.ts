import type { Hono } from "hono";
import { z } from "zod";
import type { AppEnv } from "../app-env.js";
import { ManualClock } from "../clock.js";
import { GatewayError } from "../errors.js";
import { readJson } from "../http/json-body.js";
import { mockScriptSchema } from "../providers/mock/mock-script.js";
import type { Services } from "../services.js";

const scriptBody = z
  .object({ rules: mockScriptSchema.min(1), replace: z.boolean().default(false) })
  .strict();

const clockBody = z.union([
  z.object({ advance_ms: z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER) }).strict(),
  z.object({ set: z.iso.datetime({ offset: true }) }).strict(),
]);

/** The test kit's admin endpoints (behind the admin key, installed with the admin API). */
export function installKitRoutes(app: Hono<AppEnv>, s: Services): void {
  const scriptView = () => ({
    object: "mock.script",
    rules: s.mockScript.list().map(({ rule, remaining }) => ({ ...rule, remaining })),
  });

  app.get("/api/admin/mock/script", (c) => c.json(scriptView()));

  /** Appends the rules, or with `replace: true` puts them in place of every current rule. */
  app.post("/api/admin/mock/script", async (c) => {
    const body = await readJson(c, scriptBody);
    if (body.replace) s.mockScript.replace(body.rules);
    else s.mockScript.add(body.rules);
    return c.json(scriptView());
  });

  /** Back to the config's `mock.script` (no rules without one). */
  app.delete("/api/admin/mock/script", (c) => {
    s.mockScript.reset();
    return c.json(scriptView());
  });

  app.post("/api/admin/clock", async (c) => {
    const clock = s.options.clock;
    if (!(clock instanceof ManualClock)) {
      throw new GatewayError(
        404,
        "not_found",
        "The clock is not manual: start the gateway with --manual-clock to set it.",
      );
    }
    const body = await readJson(c, clockBody);
    const now =
      "advance_ms" in body ? clock.advance(body.advance_ms) : clock.set(new Date(body.set));
    return c.json({ object: "clock", now: new Date(now).toISOString(), now_ms: now });
  });
}
