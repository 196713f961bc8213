import type { MiddlewareHandler } from "hono";

const allowMethods = "GET, POST, DELETE, OPTIONS";

/** On every /v1 answer; a handler that writes to the socket itself (SSE) sends them too. */
export const corsResponseHeaders = {
  "Access-Control-Allow-Origin": "*",
  "Access-Control-Expose-Headers":
    "Retry-After, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset",
};

/**
 * The spec's CORS for /v1: any origin, any request headers, never credentials. Headers are added
 * to the finished response in place; Hono's own middleware touches the response before the
 * handler runs, which makes every answer be rebuilt and copied.
 */
export function openCors(): MiddlewareHandler {
  return async (c, next) => {
    if (c.req.method === "OPTIONS") {
      const requested = c.req.header("access-control-request-headers");
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
