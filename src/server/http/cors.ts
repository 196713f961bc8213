import { RESPONSE_ALREADY_SENT } from "@hono/node-server/utils/response";
import type { Context, MiddlewareHandler } from "hono";
import { nodeOutgoing } from "./node-bindings.js";
import { requestHeader } from "./request-header.js";

const allowMethods = "GET, POST, DELETE, OPTIONS";

/** On every /v1 answer; a handler that writes to the socket itself (SSE) sends them too. */
export const corsResponseHeaders = {
  "Access-Control-Allow-Origin": "*",
  "Access-Control-Expose-Headers":
    "Retry-After, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset",
};

/**
 * A /v1 JSON answer with its CORS headers, written straight to the Node response: it leaves as
 * soon as it is ready, before the middlewares unwind, and never becomes a web Response whose
 * headers would be copied into a web Headers object and out again (the completion routes' hot
 * path). Off the Node server it is an ordinary Response.
 */
export function corsJson(
  c: Context,
  body: unknown,
  status: number,
  headers?: Record<string, string>,
): Response {
  const text = JSON.stringify(body);
  const all = { "content-type": "application/json", ...corsResponseHeaders, ...headers };
  const outgoing = nodeOutgoing(c);
  if (!outgoing) return new Response(text, { status, headers: all });
  outgoing.writeHead(status, { ...all, "content-length": Buffer.byteLength(text) });
  outgoing.end(text);
  return RESPONSE_ALREADY_SENT;
}

/**
 * The spec's CORS for /v1: any origin, any request headers, never credentials. Headers are added
 * to the finished response in place; Hono's own middleware touches the response before the
 * handler runs, which makes every answer be rebuilt and copied.
 */
export function openCors(): MiddlewareHandler {
  return async (c, next) => {
    if (c.req.method === "OPTIONS") {
      const requested = requestHeader(c, "access-control-request-headers");
      return c.body(null, 204, {
        "Access-Control-Allow-Origin": "*",
        "Access-Control-Allow-Methods": allowMethods,
        "Access-Control-Allow-Headers": requested ?? "*",
        "Access-Control-Max-Age": "600",
        Vary: "Access-Control-Request-Headers",
      });
    }
    await next();
    // Already written to the socket (and a shared object): its headers carried these.
    if (c.res.headers.has("x-hono-already-sent")) return;
    const headers = c.res.headers;
    for (const [name, value] of Object.entries(corsResponseHeaders)) headers.set(name, value);
  };
}
