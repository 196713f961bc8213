import type { Context } from "hono";
import { nodeOutgoing, requestHeader } from "./request.js";

/**
 * The spec's CORS for /v1: any origin, any request headers, never credentials. The registration
 * calls `allowAnyOrigin` before a /v1 handler runs, so every answer carries the headers: a Hono
 * response, one a handler writes to the Node response itself (JSON, SSE), and an error.
 */
const responseHeaders: [string, string][] = [
  ["Access-Control-Allow-Origin", "*"],
  [
    "Access-Control-Expose-Headers",
    "Retry-After, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset, X-Request-Id, Request-Id, X-Gateway-Burst-Wait-Ms",
  ],
];

/**
 * Puts the headers on the Node response, where Node merges them into whatever is written later.
 * Off the Node server it returns false, and the caller adds them to its Response (`withCors`).
 */
export function allowAnyOrigin(c: Context): boolean {
  const outgoing = nodeOutgoing(c);
  if (!outgoing) return false;
  for (const [name, value] of responseHeaders) outgoing.setHeader(name, value);
  return true;
}

/** The headers added to a finished Response in place (off the Node server). */
export function withCors(answer: Response): Response {
  for (const [name, value] of responseHeaders) answer.headers.set(name, value);
  return answer;
}

/** The answer to a /v1 preflight (OPTIONS). */
export function preflight(c: Context): Response {
  return c.body(null, 204, {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "GET, POST, DELETE, OPTIONS",
    "Access-Control-Allow-Headers": requestHeader(c, "access-control-request-headers") ?? "*",
    "Access-Control-Max-Age": "600",
    Vary: "Access-Control-Request-Headers",
  });
}
