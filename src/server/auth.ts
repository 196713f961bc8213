import type { IncomingMessage } from "node:http";
import type { Context, MiddlewareHandler } from "hono";
import type { Store } from "../store/store.js";
import type { KeyWithAccount } from "../store/types.js";
import { PlainTextError } from "./errors.js";
import { nodeIncoming } from "./http/node-bindings.js";
import { requestHeader } from "./http/request-header.js";
import { traceOf } from "./http/request-trace.js";
import type { SharedKeyLimiter } from "./limits/shared-key.js";

export interface AuthInfo {
  key: KeyWithAccount;
  accountId: string;
}

/** `Authorization: Bearer <key>` or `x-api-key: <key>`; nothing else authenticates on /v1. */
export function presentedKey(c: Context): string | undefined {
  return keyFromHeaders(requestHeader(c, "authorization"), requestHeader(c, "x-api-key"));
}

export function keyFromHeaders(
  authorization: string | undefined,
  apiKey: string | undefined,
): string | undefined {
  if (authorization) {
    const match = /^Bearer\s+(.+)$/i.exec(authorization.trim());
    if (match) return match[1].trim();
  }
  return apiKey?.trim() || undefined;
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
  const incoming = nodeIncoming(c);
  return incoming ? nodeClientIp(incoming) : "unknown";
}

export function nodeClientIp(incoming: IncomingMessage): string {
  return incoming.socket?.remoteAddress ?? "unknown";
}

/** A /v1 caller's key, with the shared-key per-IP limit (plain text errors, like 401). */
export function admitCaller(
  store: Store,
  sharedKeys: SharedKeyLimiter,
  value: string | undefined,
  ip: string,
  now: number,
): KeyWithAccount {
  const key = authenticate(store, value, now);
  if (key.kind === "shared" && !sharedKeys.admitIp(key.id, ip, now)) {
    throw new PlainTextError(429, "too many requests, try again shortly");
  }
  return key;
}

/** Gateway-key authentication for the /v1 routes on Hono. */
export function requireKey(
  store: Store,
  sharedKeys: SharedKeyLimiter,
  now: () => number,
): MiddlewareHandler<{ Variables: { auth: AuthInfo } }> {
  // Not async: nothing to do after the handler, so no extra promise per request.
  return (c, next) => {
    const key = admitCaller(store, sharedKeys, presentedKey(c), clientIp(c), now());
    const trace = traceOf(nodeIncoming(c));
    if (trace) trace.keyLabel = key.label;
    c.set("auth", { key, accountId: key.account_id });
    return next();
  };
}
