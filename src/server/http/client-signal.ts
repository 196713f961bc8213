import type { Context } from "hono";
import { nodeOutgoing } from "./node-bindings.js";

/**
 * Aborts when the client goes away before its response is complete. On the Node server this
 * listens to the response's socket; touching `c.req.raw.signal` instead would make Hono build a
 * full Request object for every call, which costs more than the rest of the routing.
 */
export function clientSignal(c: Context): AbortSignal {
  const abort = new AbortController();
  const outgoing = nodeOutgoing(c);
  if (outgoing) {
    outgoing.once("close", () => {
      if (!outgoing.writableFinished) abort.abort();
    });
  } else {
    c.req.raw.signal.addEventListener("abort", () => abort.abort(), { once: true });
  }
  return abort.signal;
}
