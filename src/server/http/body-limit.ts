import type { MiddlewareHandler } from "hono";
import { bodyLimit } from "hono/body-limit";
import { payloadTooLarge, refuseDeclaredLength } from "./json-body.js";
import { requestHeader } from "./request-header.js";

/**
 * Refuses bodies over `limit` with 413. A declared Content-Length is checked from the header
 * alone, so the usual request never has its body stream wrapped (which would make Hono build a
 * full Request object); a chunked body without a length is counted as it arrives.
 */
export function bodySizeLimit(limit: number): MiddlewareHandler {
  const counting = bodyLimit({
    maxSize: limit,
    onError: () => {
      throw payloadTooLarge(limit);
    },
  });
  // Not async: nothing to do after the handler, so no extra promise per request.
  return (c, next) => {
    const declared = requestHeader(c, "content-length");
    if (declared !== undefined && requestHeader(c, "transfer-encoding") === undefined) {
      refuseDeclaredLength(declared, limit);
      return next();
    }
    if (c.req.method === "GET" || c.req.method === "HEAD" || c.req.method === "OPTIONS")
      return next();
    return counting(c, next);
  };
}
