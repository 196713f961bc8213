import type { ServerResponse } from "node:http";
import type { Context, MiddlewareHandler } from "hono";
import type { Services } from "../services.js";
import { requestHeader } from "./request-header.js";

const allowMethods = "GET, POST, DELETE, OPTIONS";

/** On every /v1 answer; a handler that writes to the socket itself (SSE) sends them too. */
export const corsResponseHeaders = {
  "Access-Control-Allow-Origin": "*",
  "Access-Control-Expose-Headers":
    "Retry-After, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset",
};

/** A /v1 answer written straight to the Node response, with its CORS headers. */
export function sendWithCors(
  outgoing: ServerResponse,
  status: number,
  contentType: string,
  body: string,
  headers?: Record<string, string>,
): void {
  const all: Record<string, string | number> = {
    "content-type": contentType,
    "content-length": Buffer.byteLength(body),
    ...corsResponseHeaders,
    ...headers,
  };
  outgoing.writeHead(status, all);
  outgoing.end(body);
}

/**
 * The spec's CORS for the /v1 routes on Hono: any origin, any request headers, never credentials.
 * Headers are added to the finished response in place; Hono's own middleware touches the response
 * before the handler runs, which makes every answer be rebuilt and copied. (The completion routes
 * send the same headers themselves: `sendWithCors`.)
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
    const headers = c.res.headers;
    for (const [name, value] of Object.entries(corsResponseHeaders)) headers.set(name, value);
  };
}

/**
 * The origin this gateway's own pages are served from: the configured public URL or the
 * listening address. Not the request's Host header, which any page can make a browser send
 * (DNS rebinding).
 */
export function ownOrigin(s: Services, c: Context): string {
  return s.options.publicOrigin ?? new URL(c.req.url).origin;
}
