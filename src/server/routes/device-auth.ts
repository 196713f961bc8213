import type { Context } from "hono";
import { z } from "zod";
import {
  type DeviceCodes,
  formatUserCode,
  type IssueRefusal,
  maxCodesPerAddressPerMinute,
  maxPendingCodesPerAddress,
} from "../auth/device-codes.js";
import { isTooLarge, readBody, readFormFields, tooDeepMessage } from "../http/body.js";
import type { AppEnv, Handler } from "../http/context.js";
import {
  clientIp,
  type ForwardingOptions,
  gatewayUrl,
  requestHeader,
  requestTrace,
} from "../http/request.js";
import { maxJsonDepth, nestedDeeperThan } from "../wire/json-depth.js";

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

/**
 * A refused code request: 429 with Retry-After and the RFC's error shape. `slow_down` is the RFC's
 * word for "ask less often", which device-flow clients already know how to show.
 */
const refusalText: Record<IssueRefusal["reason"], string> = {
  address_rate: `Too many login requests from your address; at most ${maxCodesPerAddressPerMinute} a minute.`,
  address_pending: `Your address already has ${maxPendingCodesPerAddress} login requests waiting for approval; finish or let one expire first.`,
  all_pending: "Too many login requests are waiting for approval; try again later.",
};

function oauthError(c: Context, error: string, extra: Record<string, unknown> = {}) {
  const trace = requestTrace(c);
  if (trace) trace.errorCode = error;
  return c.json({ error, error_description: errorDescriptions[error] ?? error, ...extra }, 400, {
    "cache-control": "no-store",
  });
}

/** A JSON body nested past the bound: refused before it is parsed. */
const tooDeep = Symbol("too deep");

/**
 * JSON per the brief, or form-encoded as RFC 8628 clients send it; an empty body is `{}`, anything
 * unreadable undefined. A body over the limit is refused (413) as on every other route.
 */
async function readGrantBody(c: Context<AppEnv>): Promise<unknown> {
  const type = requestHeader(c, "content-type") ?? "";
  try {
    if (type.startsWith("application/x-www-form-urlencoded")) return await readFormFields(c);
    const text = (await readBody(c)).toString("utf8");
    if (nestedDeeperThan(text, maxJsonDepth)) return tooDeep;
    return text.trim() === "" ? {} : JSON.parse(text);
  } catch (err) {
    if (isTooLarge(err)) throw err;
    return undefined;
  }
}

/** The device flow's handlers (access `public`); `options.now` is the gateway's clock. */
export function deviceAuthHandlers(
  devices: DeviceCodes,
  options: { now: () => number } & ForwardingOptions,
) {
  const { now } = options;
  const code: Handler = async (c) => {
    const raw = await readGrantBody(c);
    if (raw === tooDeep)
      return oauthError(c, "invalid_request", { error_description: tooDeepMessage });
    const body = codeRequest.safeParse(raw);
    if (!body.success)
      return oauthError(c, "invalid_request", {
        error_description: "client_name must be a short string.",
      });
    const issued = await devices.issue(
      body.data.client_name ?? "",
      clientIp(c, options.trustedProxies),
      now(),
    );
    if (!issued.ok) {
      const trace = requestTrace(c);
      if (trace) trace.errorCode = "slow_down";
      return c.json({ error: "slow_down", error_description: refusalText[issued.reason] }, 429, {
        "cache-control": "no-store",
        "retry-after": String(issued.retryAfterSeconds),
      });
    }
    const userCode = formatUserCode(issued.userCode);
    const verificationUri = gatewayUrl(c, options, "/dashboard/device");
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
  };

  const token: Handler = async (c) => {
    const raw = await readGrantBody(c);
    if (raw === tooDeep)
      return oauthError(c, "invalid_request", { error_description: tooDeepMessage });
    const body = tokenRequest.safeParse(raw);
    if (!body.success) return oauthError(c, "invalid_request");
    const outcome = await devices.poll(body.data.device_code, now());
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
  };

  const cancel: Handler = async (c) => {
    const body = tokenRequest.safeParse(await readGrantBody(c));
    if (!body.success) return oauthError(c, "invalid_request");
    if (!(await devices.cancel(body.data.device_code, now())))
      return oauthError(c, "invalid_grant");
    return c.json({ cancelled: true }, 200, { "cache-control": "no-store" });
  };

  return { code, token, cancel };
}
