import type { Context, Hono } from "hono";
import { z } from "zod";
import type { AppEnv } from "../app-env.js";
import { type DeviceCodes, formatUserCode } from "../dashboard/device-codes.js";
import { GatewayError } from "../errors.js";
import type { Services } from "../services.js";

/**
 * The device-authorization grant, RFC 8628 shape, as JSON:
 *   POST /api/auth/device/code   {client_name?} -> device_code, user_code, verification URIs, timing
 *   POST /api/auth/device/token  {device_code}  -> the login key once, or an RFC error
 *   POST /api/auth/device/cancel {device_code}  -> the CLI gave up; the code cannot be approved
 * Errors here use the OAuth shape `{error, error_description}` the RFC defines, not the chat style.
 */

const codeRequest = z.object({ client_name: z.string().trim().max(100).optional() });
const tokenRequest = z.object({ device_code: z.string().min(1).max(200) });

const errorDescriptions: Record<string, string> = {
  authorization_pending: "The owner has not approved or denied this request yet.",
  slow_down: "Polling too fast; the interval is now longer.",
  access_denied: "The owner denied this login request.",
  expired_token: "The device code expired; start a new login.",
  invalid_grant: "The device code is unknown, cancelled or was already used.",
  invalid_request: "Send a JSON body with device_code.",
};

function oauthError(c: Context, error: string, extra: Record<string, unknown> = {}) {
  return c.json({ error, error_description: errorDescriptions[error] ?? error, ...extra }, 400, {
    "cache-control": "no-store",
  });
}

/** JSON per the brief, or form-encoded as RFC 8628 clients send it; anything unreadable is `{}`. */
async function readBody(c: Context): Promise<unknown> {
  const type = c.req.header("content-type") ?? "";
  try {
    if (type.startsWith("application/x-www-form-urlencoded")) return await c.req.parseBody();
    const text = await c.req.text();
    return text.trim() === "" ? {} : JSON.parse(text);
  } catch {
    return undefined;
  }
}

export function installDeviceAuthRoutes(
  app: Hono<AppEnv>,
  s: Services,
  devices: DeviceCodes,
): void {
  app.post("/api/auth/device/code", async (c) => {
    const body = codeRequest.safeParse(await readBody(c));
    if (!body.success)
      return oauthError(c, "invalid_request", {
        error_description: "client_name must be a short string.",
      });
    const issued = devices.issue(body.data.client_name ?? "", s.options.now());
    if (!issued) {
      throw new GatewayError(
        429,
        "rate_limit_exceeded",
        "Too many login requests are waiting; try again later.",
      );
    }
    const origin = new URL(c.req.url).origin;
    const userCode = formatUserCode(issued.userCode);
    const verificationUri = `${origin}/dashboard/device`;
    return c.json(
      {
        device_code: issued.deviceCode,
        user_code: userCode,
        verification_uri: verificationUri,
        verification_uri_complete: `${verificationUri}?user_code=${userCode}`,
        expires_in: issued.expiresInSeconds,
        interval: issued.intervalSeconds,
      },
      200,
      { "cache-control": "no-store" },
    );
  });

  app.post("/api/auth/device/token", async (c) => {
    const body = tokenRequest.safeParse(await readBody(c));
    if (!body.success) return oauthError(c, "invalid_request");
    const outcome = devices.poll(body.data.device_code, s.options.now());
    if (!outcome.ok) {
      const extra =
        outcome.intervalSeconds === undefined ? {} : { interval: outcome.intervalSeconds };
      return oauthError(c, outcome.error, extra);
    }
    return c.json(
      {
        access_token: outcome.keyValue,
        token_type: "bearer",
        key_id: outcome.keyId,
        account_id: outcome.accountId,
      },
      200,
      { "cache-control": "no-store" },
    );
  });

  app.post("/api/auth/device/cancel", async (c) => {
    const body = tokenRequest.safeParse(await readBody(c));
    if (!body.success) return oauthError(c, "invalid_request");
    if (!devices.cancel(body.data.device_code, s.options.now()))
      return oauthError(c, "invalid_grant");
    return c.json({ cancelled: true }, 200, { "cache-control": "no-store" });
  });
}
