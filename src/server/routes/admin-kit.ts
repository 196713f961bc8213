import { z } from "zod";
import { GatewayError } from "../errors.js";
import { readJson } from "../http/body.js";
import type { Handler } from "../http/context.js";
import { type MockScript, mockScriptSchema } from "../providers/mock-script.js";
import { type Clock, ManualClock } from "../time/clock.js";

const scriptBody = z
  .object({ rules: mockScriptSchema.min(1), replace: z.boolean().default(false) })
  .strict();

export const clockBody = z.union([
  z.object({ advance_ms: z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER) }).strict(),
  z.object({ set: z.iso.datetime({ offset: true }) }).strict(),
]);

/** The test kit's admin endpoints (access `admin`): the mock's script and the manual clock. */
export function kitHandlers(kit: { mockScript: MockScript; clock: Clock }) {
  const { mockScript } = kit;
  const scriptView = () => ({
    object: "mock.script",
    rules: mockScript.list().map(({ rule, remaining }) => ({ ...rule, remaining })),
  });

  return {
    script: ((c) => c.json(scriptView())) satisfies Handler,

    /** Appends the rules, or with `replace: true` puts them in place of every current rule. */
    addScript: (async (c) => {
      const body = await readJson(c, scriptBody);
      if (body.replace) mockScript.replace(body.rules);
      else mockScript.add(body.rules);
      return c.json(scriptView());
    }) satisfies Handler,

    /** Back to the config's `mock.script` (no rules without one). */
    resetScript: ((c) => {
      mockScript.reset();
      return c.json(scriptView());
    }) satisfies Handler,

    setClock: (async (c) => {
      const { clock } = kit;
      if (!(clock instanceof ManualClock)) {
        throw new GatewayError(
          404,
          "not_found",
          "The clock is not manual: start the gateway with --manual-clock to set it.",
        );
      }
      const body = await readJson(c, clockBody);
      let now: number;
      try {
        now = "advance_ms" in body ? clock.advance(body.advance_ms) : clock.set(new Date(body.set));
      } catch (err) {
        if (!(err instanceof RangeError)) throw err;
        throw new GatewayError(
          400,
          "bad_request",
          "The clock cannot be moved past the last date a JavaScript Date holds (+275760-09-13).",
        );
      }
      return c.json({ object: "clock", now: new Date(now).toISOString(), now_ms: now });
    }) satisfies Handler,
  };
}
