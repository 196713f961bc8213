import type { Context, MiddlewareHandler } from "hono";
import type { Store } from "../store/store.js";
import type { KeyWithAccount } from "../store/types.js";
import { PlainTextError } from "./errors.js";
import { nodeIncoming } from "./http/node-bindings.js";
import { requestHeader } from "./http/request-header.js";
import { markStage } from "./http/stages.js";
import type { SharedKeyLimiter } from "./limits/shared-key.js";

export interface AuthInfo {
  key: KeyWithAccount;
  accountId: string;
}

/** `Authorization: Bearer <key>` or `x-api-key: <key>`; nothing else authenticates on /v1. */
export function presentedKey(c: Context): string | undefined {
  const header = requestHeader(c, "authorization");
  if (header) {
    const match = /^Bearer\s+(.+)$/i.exec(header.trim());
    if (match) return match[1].trim();
  }
  return requestHeader(c, "x-api-key")?.trim() || undefined;
}

/** Only write last_used_at when it moved by this much, so a busy key is not a write per request. */
const touchEveryMs = 1000;

export function authenticate(store: Store, value: string | undefined, now: number): KeyWithAccount {
  if (!value)
    throw new PlainTextError(
      401,
      "missing API key: send Authorization: Bearer kn-... or x-api-key",
    );
  const key = store.findKeyByValue(value);
  if (!key) throw new PlainTextError(401, "invalid API key");
  if (key.revoked_at !== null) throw new PlainTextError(401, "API key revoked");
  if (key.account_status !== "active") throw new PlainTextError(401, "account suspended");
  if (key.last_used_at === null || now - key.last_used_at >= touchEveryMs)
    store.touchKey(key.id, now);
  return key;
}

export function clientIp(c: Context): string {
  return nodeIncoming(c)?.socket?.remoteAddress ?? "unknown";
}

/** Gateway-key authentication for /v1, with the shared-key per-IP limit (plain text, like 401). */
export function requireKey(
  store: Store,
  sharedKeys: SharedKeyLimiter,
  now: () => number,
): MiddlewareHandler<{ Variables: { auth: AuthInfo } }> {
  // Not async: nothing to do after the handler, so no extra promise per request.
  return (c, next) => {
    const t = now();
    const key = authenticate(store, presentedKey(c), t);
    if (key.kind === "shared" && !sharedKeys.admitIp(key.id, clientIp(c), t)) {
      throw new PlainTextError(429, "too many requests, try again shortly");
    }
    c.set("auth", { key, accountId: key.account_id });
    markStage(c, "authenticated");
    return next();
  };
}
