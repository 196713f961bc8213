import type { MiddlewareHandler } from "hono";

const allowMethods = "GET, POST, DELETE, OPTIONS";
const exposeHeaders = "Retry-After, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset";

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
    const headers = c.res.headers;
    headers.set("Access-Control-Allow-Origin", "*");
    headers.set("Access-Control-Expose-Headers", exposeHeaders);
  };
}
