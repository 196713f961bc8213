import type { Context } from "hono";
import { hashSecret } from "../../store/secrets.js";
import type { SessionsRepository } from "../../store/sessions.js";
import {
  andThen,
  type GatewayStore,
  type KeyWithAccount,
  type MaybeAsync,
} from "../../store/types.js";
import { GatewayError, PlainTextError, suspendedAccountRefusal } from "../errors.js";
import type { AppEnv } from "../http/context.js";
import { loopbackSource } from "../http/loopback-socket.js";
import { clientIp, type ForwardingOptions, nodeIncoming, requestHeader } from "../http/request.js";
import { traceOf } from "../http/request-trace.js";
import type { Access, Method } from "../http/route-row.js";
import { markStage } from "../http/stages.js";
import { type SharedKeyLimiter, sharedKeyIpRefusal } from "../limits/shared-key.js";
import { OwnerSessions, requireOwnerSession } from "./owner-session.js";

/**
 * `Authorization: Bearer <key>` or `x-api-key: <key>`; nothing else authenticates on /v1. Two
 * different keys (two Authorization headers, or a Bearer and an x-api-key that differ) are
 * refused rather than one of them guessed; the same key sent twice is that key.
 */
export function presentedKey(c: Context): string | undefined {
  const authorization = requestHeader(c, "authorization");
  const bearer = authorization ? bearerOf(authorization) : undefined;
  let apiKey = requestHeader(c, "x-api-key")?.trim() || undefined;
  // Node joins a repeated x-api-key with commas, which no key contains.
  if (apiKey?.includes(",")) apiKey = sameValues(apiKey.split(","));
  if (bearer !== undefined && apiKey !== undefined && apiKey !== bearer) throw conflictingKeys();
  // Node keeps only the first Authorization header: the others are in its raw list.
  const incoming = nodeIncoming(c);
  if (authorization && incoming && repeatsDiffer(incoming.rawHeaders, authorization)) {
    throw conflictingKeys();
  }
  return bearer ?? apiKey;
}

function bearerOf(authorization: string): string | undefined {
  const match = /^Bearer\s+(.+)$/i.exec(authorization.trim());
  return match ? match[1].trim() : undefined;
}

function conflictingKeys(): PlainTextError {
  return new PlainTextError(
    401,
    "conflicting API keys: send one key, as Authorization: Bearer kn-... or x-api-key",
    "key_conflicting",
  );
}

/** The one value all of `values` are (trimmed), or a refusal when they differ. */
function sameValues(values: string[]): string | undefined {
  const first = values[0].trim();
  for (const value of values) if (value.trim() !== first) throw conflictingKeys();
  return first || undefined;
}

/** Whether an Authorization header other than the first carries another value. */
function repeatsDiffer(raw: string[], first: string): boolean {
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i];
    // The usual request's one Authorization header is its first: no string is made for it.
    if (name.length === 13 && raw[i + 1] !== first && name.toLowerCase() === "authorization") {
      return true;
    }
  }
  return false;
}

/** Only write last_used_at when it moved by this much, so a busy key is not a write per request. */
const touchEveryMs = 1000;

/** A newcomer's key typo: what to check, as the missing key's text says what to send. */
const invalidKeyText =
  "invalid API key: no gateway key has this value; check the kn-... key you sent (each key is shown once, when it is made)";

/**
 * A key that is no gateway key at all (a provider's `sk-...` left in a client's environment): the
 * gateway holds the providers' keys in its config, and takes its own from clients.
 */
const foreignKeyText =
  "invalid API key: this is not a gateway key (those start with kn-); send the kn-... key the gateway made, as a provider's own key goes in the gateway's config, never in a request";

/** An Authorization header whose value is not read as a key: it lacks its scheme. */
const noBearerText =
  "missing API key: the Authorization header has no Bearer scheme, so its value is not read as a key; send Authorization: Bearer kn-... or x-api-key";

/** A revoked key stays revoked: the way on is another key. */
const revokedKeyText =
  "API key revoked: make a new key on the dashboard's Keys page or with `gateway keys create`, and send that one";

/**
 * The key presented, if it is valid, not revoked, and of an active account; else a plain 401.
 * Answered at once for a key the store has in memory (every key, on SQLite).
 */
function authenticate(store: GatewayStore, c: Context): MaybeAsync<KeyWithAccount> {
  const value = presentedKey(c);
  if (!value)
    throw new PlainTextError(
      401,
      requestHeader(c, "authorization")?.trim()
        ? noBearerText
        : "missing API key: send Authorization: Bearer kn-... or x-api-key",
      "key_missing",
    );
  const found = store.findKeyByValue(value);
  return andThen(found, (key) => usableKey(key, value));
}

function usableKey(key: KeyWithAccount | undefined, value: string): KeyWithAccount {
  if (!key)
    throw new PlainTextError(
      401,
      value.startsWith("kn-") ? invalidKeyText : foreignKeyText,
      "key_unknown",
    );
  if (key.revoked_at !== null) throw new PlainTextError(401, revokedKeyText, "key_revoked");
  if (key.account_status !== "active") throw suspendedAccountRefusal();
  return key;
}

/** Records a use of a key the route admitted: a request refused before the API is no use. */
function touchAdmitted(store: GatewayStore, key: KeyWithAccount, now: number): void {
  if (key.last_used_at === null || now - key.last_used_at >= touchEveryMs)
    store.touchKey(key.id, now);
}

/** Whether the caller presents an admin key (a public route may show an admin more). */
export function presentsAdminKey(
  store: GatewayStore,
  c: Context,
  runAdminKeys?: ReadonlySet<string>,
): boolean {
  const value = presentedKey(c);
  if (value === undefined) return false;
  return store.isAdminKey(value) || runAdminKeys?.has(hashSecret(value)) === true;
}

/**
 * A route's check of its caller, run by the registration before the handler: it throws to
 * refuse, returns a Response to answer instead of the handler (the dashboard's pages), or
 * returns undefined to let the handler run, with what it learnt set on the context.
 */
export type Guard = (c: Context<AppEnv>) => Response | undefined | Promise<Response | undefined>;

export interface GuardDeps {
  store: GatewayStore;
  repos: { sessions: SessionsRepository };
  sharedKeys: SharedKeyLimiter;
  /** Read at request time: the public origin is known only once the server listens. */
  options: {
    now: () => number;
    publicOrigin?: string;
    /** Hashes of admin keys of this run only (`startGateway({ adminKeys })`), never stored. */
    runAdminKeys?: ReadonlySet<string>;
  } & ForwardingOptions;
}

/**
 * The check of access `owner-page`: the dashboard's (`dashboard/http.ts`), given by the app, as
 * it answers with pages, which sit above this layer.
 */
export type OwnerPageGuard = (
  sessions: OwnerSessions,
  options: GuardDeps["options"],
  method: Method,
) => Guard;

/** The check for each kind of access (`Access`, `http/route-row.ts`); `public` has none. */
export function accessGuards(
  deps: GuardDeps,
  ownerPageGuard: OwnerPageGuard,
): (access: Access, method: Method) => Guard | undefined {
  const { store, sharedKeys, options } = deps;
  const sessions = new OwnerSessions(deps.repos.sessions);

  const keyCaller = (c: Context<AppEnv>, key: KeyWithAccount): undefined => {
    touchAdmitted(store, key, options.now());
    c.set("auth", { key, accountId: key.account_id });
    const incoming = nodeIncoming(c);
    if (incoming) {
      markStage(incoming, "authenticated");
      const trace = traceOf(incoming);
      if (trace) trace.keyLabel = key.label;
    }
    return undefined;
  };

  const sharedCaller = (c: Context<AppEnv>, key: KeyWithAccount, admitted: boolean): undefined => {
    if (!admitted) throw sharedKeyIpRefusal();
    return keyCaller(c, key);
  };

  const guards: Record<Exclude<Access, "public" | "owner" | "owner-page">, Guard> = {
    // Not async: the check writes nothing after the handler, so no extra promise per request.
    key: (c) => {
      const now = options.now();
      return andThen(authenticate(store, c), (key) => {
        if (key.kind !== "shared") return keyCaller(c, key);
        // A tool call of the MCP server comes over the loopback: its /mcp request already took
        // this address's slot.
        if (loopbackSource(nodeIncoming(c)) !== undefined) return keyCaller(c, key);
        return andThen(sharedKeys.admitIp(key.id, clientIp(c, options.trustedProxies), now), (ok) =>
          sharedCaller(c, key, ok),
        );
      });
    },
    "any-key": (c) => andThen(authenticate(store, c), (key) => keyCaller(c, key)),
    login: (c) =>
      andThen(authenticate(store, c), (key) => {
        if (key.kind !== "login") {
          throw new GatewayError(
            403,
            "forbidden",
            `This endpoint needs a login key (from \`gateway login\`); the presented key is a ${key.kind} key.`,
          );
        }
        return keyCaller(c, key);
      }),
    admin: (c) => {
      if (!presentsAdminKey(store, c, options.runAdminKeys))
        throw new PlainTextError(401, "admin key required", "admin_key_required");
      return undefined;
    },
  };

  return (access, method) => {
    if (access === "public") return undefined;
    if (access === "owner-page") return ownerPageGuard(sessions, options, method);
    if (access === "owner") {
      const write = method !== "GET";
      return async (c) => {
        c.set("owner", await requireOwnerSession(c, sessions, options.now(), write));
        return undefined;
      };
    }
    return guards[access];
  };
}
