import type { ServerResponse } from "node:http";
import type { Context } from "hono";
import { nodeOutgoing } from "./node-bindings.js";

/**
 * Aborts when the client goes away before its response is complete. On the Node server this
 * listens to the response's socket; touching `c.req.raw.signal` instead would make Hono build a
 * full Request object for every call, which costs more than the rest of the routing.
 */
export function clientSignal(c: Context): AbortSignal {
  const outgoing = nodeOutgoing(c);
  if (outgoing) return responseSignal(outgoing);
  const abort = new AbortController();
  c.req.raw.signal.addEventListener("abort", () => abort.abort(), { once: true });
  return abort.signal;
}

/** Aborts when the response's connection closes before the response is complete. */
export function responseSignal(outgoing: ServerResponse): AbortSignal {
  const abort = new AbortController();
  outgoing.once("close", () => {
    if (!outgoing.writableFinished) abort.abort();
  });
  return abort.signal;
}
