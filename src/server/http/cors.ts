import type { MiddlewareHandler } from "hono";
import { requestHeader } from "./request-header.js";

const allowMethods = "GET, POST, DELETE, OPTIONS";

/** On every /v1 answer; a handler that writes to the socket itself (SSE) sends them too. */
export const corsResponseHeaders = {
  "Access-Control-Allow-Origin": "*",
  "Access-Control-Expose-Headers":
    "Retry-After, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset",
};

/** Answers that carry the CORS headers from the start; the middleware leaves them alone. */
const withCors = new WeakSet<Response>();

/**
 * A /v1 JSON answer with its CORS headers in one plain header object, which the Node server
 * writes as it is. Headers added to a finished answer make it build a web Headers object and
 * copy it, a cost the completion routes pay on every request otherwise.
 */
export function corsJson(body: unknown, status: number, headers?: Record<string, string>) {
  const res = new Response(JSON.stringify(body), {
    status,
    headers: { "content-type": "application/json", ...corsResponseHeaders, ...headers },
  });
  withCors.add(res);
  return res;
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
    if (withCors.has(c.res)) return;
    // Already written to the socket (and a shared object): its headers carried these.
    if (c.res.headers.has("x-hono-already-sent")) return;
    const headers = c.res.headers;
    for (const [name, value] of Object.entries(corsResponseHeaders)) headers.set(name, value);
  };
}
