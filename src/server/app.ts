import type { IncomingMessage, RequestListener } from "node:http";
import { getRequestListener, RequestError } from "@hono/node-server";
import { RESPONSE_ALREADY_SENT } from "@hono/node-server/utils/response";
import type { Context } from "hono";
import { Hono } from "hono";
import { storageFaultKind } from "../store/storage-fault.js";
import { accessGuards, type Guard } from "./auth/guards.js";
import type { Services } from "./compose/services.js";
import { ownerPageGuard, sendPage } from "./dashboard/http.js";
import { noSuchPage } from "./dashboard/pages.js";
import {
  errorResponse,
  GatewayError,
  NoRoute,
  PlainTextError,
  storageUnavailable,
} from "./errors.js";
import { isTooLarge, refuseDeclaredLength } from "./http/body.js";
import type { AppEnv, Handler } from "./http/context.js";
import { allowAnyOrigin, withCors } from "./http/cors.js";
import { directRouter } from "./http/direct-router.js";
import {
  nodeIncoming,
  nodeOutgoing,
  ownOrigin,
  requestHeader,
  requestTrace,
} from "./http/request.js";
import { statusCode, traceOf } from "./http/request-trace.js";
import { type MethodsTaken, type Route, routeMethods, type Surface } from "./http/route-row.js";
import { nearest } from "./nearest.js";
import { surfaces, unmatched } from "./routes/index.js";
import { notServedApis, notServedRefusal } from "./routes/not-served.js";

/**
 * The server's request listener for the route table. Each row becomes a single handler that does,
 * in order, what the row's fields ask:
 *   1. its part of the surface (`surfaces` in routes/index.ts): /v1's CORS headers, /api's
 *      same-origin check, and the part's body limit (a declared length over it is refused here;
 *      the body reader enforces it on a body without one);
 *   2. the check of its access (`accessGuards` in auth/guards.ts);
 *   3. the handler;
 * and renders whatever any of them throws in the row's error style (`errorResponse`). Every row
 * is registered on one Hono app as the single handler of its path (Hono's fast path: one match,
 * no middleware chain); the rows of /v1 with a static path are also found by an exact-match
 * router in front of Hono (`http/direct-router.ts`), which runs the same handler on Node's own
 * objects. A path no row serves goes through the same steps for its part of the surface
 * (`unmatched`) and ends in a 404.
 */
export function gatewayListener(
  services: Services,
  routes: readonly Route[],
  hostname: string,
): { listener: RequestListener; methodsTaken: MethodsTaken } {
  const app = new Hono<AppEnv>();
  const parts = surfaces(services.options.bodyLimitBytes);
  const guardOf = accessGuards(services, ownerPageGuard);
  const refusing = new WeakSet<object>();
  const methodsTaken: MethodsTaken = (path) => {
    const serving = (method: string) =>
      app.router.match(method, path)[0].some(([[handler]]) => !refusing.has(handler));
    const takes = routeMethods.filter((method) => method !== "OPTIONS" && serving(method));
    const allow = takes.flatMap((method) => (method === "GET" ? ["GET", "HEAD"] : [method]));
    if (serving("OPTIONS")) allow.push("OPTIONS");
    return { takes, allow: allow.join(", ") };
  };
  /** The model API's path a request's path is a typo of (`/v1/model`, `/v1/chat/completion`). */
  const apiPaths = routes.filter(
    (route) => underPrefix(route.path, "/v1") && !/[:*]/.test(route.path) && !route.refusesOnly,
  );
  const typoOf = (method: string, path: string) => {
    const near = nearest(
      path,
      apiPaths.filter((route) => route.method === method).map((route) => route.path),
    );
    return near ? { path: near, why: "the nearest path the gateway serves" } : undefined;
  };
  /**
   * The 404 of a request no row serves, naming the methods its path takes, and the path it was
   * meant for when an SDK's base URL has the usual slip (the OpenAI SDKs' base URL ends in /v1,
   * the Anthropic SDKs add /v1 themselves) or the path is a typo of the model API's.
   */
  const noRoute = (c: Context): NoRoute => {
    const path = pathOf(c);
    const method = c.req.method === "HEAD" ? "GET" : c.req.method;
    const takes = methodsTaken(path).takes.filter((taken) => taken !== c.req.method);
    const meant = path.startsWith("/v1/v1/")
      ? { path: path.slice(3), why: anthropicBaseUrl }
      : underPrefix(path, "/v1")
        ? takes.length === 0
          ? typoOf(method, path)
          : undefined
        : { path: `/v1${path}`, why: openaiBaseUrl };
    const served = meant && methodsTaken(meant.path).takes.includes(method);
    return new NoRoute(c.req.method, path, takes, served ? meant : undefined);
  };
  /**
   * What a request no row serves is told: which provider API it called that the gateway does not
   * serve (`routes/not-served.ts`), else the 404 of `noRoute`.
   */
  const unserved = (c: Context): GatewayError => {
    const path = pathOf(c);
    const method = c.req.method === "HEAD" ? "GET" : c.req.method;
    const api = notServedApis.find(
      (entry) => underPrefix(path, entry.prefix) && (entry.methods?.includes(method) ?? true),
    );
    return api ? notServedRefusal(api, method, path) : noRoute(c);
  };
  const register = (route: Route): Handler => {
    // A preflight is answered before its part's checks, as browsers send it without credentials.
    const surface =
      route.method === "OPTIONS"
        ? undefined
        : parts.find((part) => underPrefix(route.path, part.prefix));
    return registered(
      services,
      route,
      surface,
      guardOf(route.access, route.method),
      unserved,
      methodsTaken,
    );
  };

  const direct: { method: string; path: string; handler: Handler }[] = [];
  for (const route of routes) {
    const handler = register(route);
    if (route.refusesOnly) refusing.add(handler);
    app.on(route.method, route.path, handler);
    if (underPrefix(route.path, "/v1") && !/[:*]/.test(route.path)) {
      direct.push({ method: route.method, path: route.path, handler });
    }
  }

  const fallbacks = unmatched.map((fallback) => ({
    prefix: fallback.prefix,
    handler: register({
      method: "GET",
      path: fallback.prefix,
      access: fallback.access,
      errors: fallback.errors,
      handler: (c) => {
        if (!fallback.page) throw unserved(c);
        const refusal = noRoute(c);
        const trace = requestTrace(c);
        if (trace) trace.errorCode = refusal.code;
        const page = sendPage(c, noSuchPage(refusal.path, refusal.takes));
        const { allow } = methodsTaken(refusal.path);
        if (allow !== "") page.headers.set("allow", allow);
        return page;
      },
    }),
  }));
  app.notFound((c) => {
    const path = pathOf(c);
    // The Anthropic SDKs send anthropic-version on every call (their beta resources too) and read
    // an error in the messages style, wherever under /v1 it comes from.
    const asked =
      underPrefix(path, "/v1") && requestHeader(c, "anthropic-version") !== undefined
        ? "/v1/messages"
        : path;
    // The last row's empty prefix takes every path the others leave.
    const fallback =
      fallbacks.find((f) => underPrefix(asked, f.prefix)) ?? fallbacks[fallbacks.length - 1];
    return fallback.handler(c as Context<AppEnv>);
  });
  // Every route renders its own errors; this catches only a fault of the app itself.
  app.onError((err, c) =>
    errorResponse(storageNoted(services, err), "chat", `${c.req.method} ${pathOf(c)}`),
  );
  // The body reader reads Node's request itself and Node's server discards a body no handler
  // read, so node-server's own clean-up would only add timers to each request.
  // The request the adapter is making a Request of: it refuses one it cannot (its errorHandler
  // below) before it awaits anything, so the refusal is of the request handed to it last.
  let adapting: IncomingMessage | undefined;
  const hono = getRequestListener(app.fetch, {
    hostname,
    autoCleanupIncoming: false,
    // node-server's own answer to a request it cannot make a URL of is an empty 400.
    errorHandler: (err) =>
      err instanceof RequestError
        ? errorResponse(unadaptable(err, adapting), "chat", "request")
        : errorResponse(storageNoted(services, err), "chat", "request"),
  });
  const adapted: RequestListener = (incoming, outgoing) => {
    // The adapter takes an absolute-form target only with its scheme in lower case, and refuses
    // `HTTP://...` as no URL, which the direct router serves: the scheme is case-insensitive.
    const target = incoming.url;
    if (target !== undefined && !target.startsWith("/") && !/^https?:/.test(target))
      incoming.url = target.replace(/^https?(?=:\/\/)/i, (scheme) => scheme.toLowerCase());
    adapting = incoming;
    try {
      return hono(incoming, outgoing);
    } finally {
      adapting = undefined;
    }
  };
  return { listener: directRouter(direct, adapted, hostname), methodsTaken };
}

/**
 * The 400 of a request node-server cannot make a URL of, and the code its line in serve's log
 * names: `malformed_host` for a Host it cannot read, else `malformed_request`. Neither is expected
 * to come: the server refuses an unreadable target and Host before the adapter sees them
 * (`refuseUnservable`), so this answers what the adapter may refuse that they do not.
 */
function unadaptable(err: RequestError, incoming: IncomingMessage | undefined): PlainTextError {
  const badHost = /host/i.test(err.message);
  const trace = traceOf(incoming);
  if (trace) trace.errorCode = badHost ? "malformed_host" : "malformed_request";
  return new PlainTextError(
    400,
    badHost
      ? `The Host header cannot be read (${err.message.toLowerCase()}): send the gateway's address as Host, such as 127.0.0.1:8787.`
      : `The request cannot be served (${err.message.toLowerCase()}): send a path such as /v1/models, with the gateway's address as Host.`,
  );
}

const openaiBaseUrl =
  "the API is under /v1: an OpenAI SDK's base URL ends in /v1, an Anthropic SDK's is the gateway's address alone";
const anthropicBaseUrl =
  "an Anthropic SDK adds /v1 itself: its base URL is the gateway's address alone";

function registered(
  services: Services,
  route: Route,
  surface: Surface | undefined,
  guard: Guard | undefined,
  unserved: (c: Context) => GatewayError,
  methodsTaken: MethodsTaken,
): Handler {
  const { handler, errors } = route;
  const name = `${route.method} ${route.path}`;
  const cors = surface?.cors === true;
  const sameOrigin = surface?.sameOrigin === true;
  const open = route.access === "public";
  const limit = (open && surface?.publicBodyLimit) || surface?.bodyLimit;
  /**
   * Whether a refusal before the body came in closes the connection after the answer rather than
   * reading, and dropping, the rest: yes for a caller without a key (a public route's body too
   * large, a key refused). A body too large for a caller who sent a key, maybe a real client
   * that misjudged, is drained so that its client reads the 413.
   */
  const cutOff = (c: Context<AppEnv>, err: unknown): boolean =>
    !c.get("auth") && (open || !isTooLarge(err) || !sendsKey(c));

  const fail = (c: Context<AppEnv>, err: unknown): Response => {
    const outgoing = nodeOutgoing(c);
    // A handler that writes its own answer (a stream under way) has said all it can.
    if (outgoing?.headersSent) {
      outgoing.destroy();
      return RESPONSE_ALREADY_SENT;
    }
    const incoming = nodeIncoming(c);
    if (outgoing && incoming && cutOff(c, err) && bodyStillComing(incoming))
      outgoing.setHeader("connection", "close");
    const answered = err instanceof NoRoute ? unserved(c) : storageNoted(services, err);
    const trace = requestTrace(c);
    // A refusal's line in serve's log says why; a settled request already said so.
    if (trace && trace.errorCode === undefined) trace.errorCode = refusalCode(answered);
    const style =
      errors !== "client"
        ? errors
        : requestHeader(c, "anthropic-version") === undefined
          ? "chat"
          : "messages";
    const answer = errorResponse(answered, style, name);
    if (answered instanceof NoRoute || answer.status === 405) {
      const { allow } = methodsTaken(pathOf(c));
      if (allow !== "") answer.headers.set("allow", allow);
    }
    return answer;
  };
  const run = (c: Context<AppEnv>): Response | Promise<Response> => {
    if (sameOrigin) refuseCrossOrigin(c, ownOrigin(services.options.publicOrigin, c));
    if (limit) {
      refuseDeclaredLength(c, limit);
      c.set("bodyLimit", limit);
    }
    const refused = guard?.(c);
    if (refused instanceof Promise) return refused.then((page) => page ?? handler(c));
    return refused ?? handler(c);
  };

  return (c) => {
    // Off the Node server (Hono's `app.request`) the CORS headers go on the finished answer.
    const corsAfter = cors && !allowAnyOrigin(c);
    let answer: Response | Promise<Response>;
    try {
      answer = run(c);
    } catch (err) {
      answer = fail(c, err);
    }
    if (answer instanceof Promise) answer = answer.catch((err: unknown) => fail(c, err));
    if (!corsAfter) return answer;
    return answer instanceof Promise ? answer.then(withCors) : withCors(answer);
  };
}

/**
 * A fault of the database is the ledger's to note (logged once, and readiness fails). The disk's
 * own faults `errorResponse` tells by their codes; a Postgres server out of reach (a read found
 * the pool's connection lost or refused, as after a restart under load) is the same storage 503,
 * on any route and for reads as for writes, never a 500.
 */
function storageNoted(services: Services, err: unknown): unknown {
  if (!services.ledger.noteStorageFailure(err)) return err;
  if (err instanceof GatewayError || err instanceof PlainTextError || storageFaultKind(err))
    return err;
  return storageUnavailable("unreachable");
}

function sendsKey(c: Context): boolean {
  return (
    requestHeader(c, "authorization") !== undefined || requestHeader(c, "x-api-key") !== undefined
  );
}

/** Bodies up to this are read and dropped after a refusal; the connection stays for the next. */
const drainedBodyBytes = 64 * 1024;

/** A body, chunked or larger than is worth draining, that has not all arrived. */
function bodyStillComing(incoming: IncomingMessage): boolean {
  if (incoming.complete) return false;
  const { "content-length": length, "transfer-encoding": chunked } = incoming.headers;
  return chunked !== undefined || Number(length) > drainedBodyBytes;
}

/** Same-origin and browser-less requests pass; a page on another origin does not. */
function refuseCrossOrigin(c: Context, own: string): void {
  const fetchSite = requestHeader(c, "sec-fetch-site");
  const origin = requestHeader(c, "origin");
  if (fetchSite === "cross-site" || fetchSite === "same-site" || (origin && origin !== own)) {
    throw new PlainTextError(403, "cross-origin requests are not allowed on /api", "cross_origin");
  }
}

function pathOf(c: Context): string {
  return new URL(c.req.url).pathname;
}

/** The prefix itself and every path below it. */
function underPrefix(path: string, prefix: string): boolean {
  return (
    prefix === "" || path === prefix || (path.startsWith(prefix) && path[prefix.length] === "/")
  );
}

/** The spec's code of a refusal, or for a plain-text one (401, 403, 429) its logged reason. */
function refusalCode(err: unknown): string {
  if (err instanceof GatewayError) return err.code;
  if (err instanceof PlainTextError) return err.reason ?? statusCode(err.status);
  return "internal_error";
}
