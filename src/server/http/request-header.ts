import type { IncomingMessage } from "node:http";
import type { Context } from "hono";
import { nodeIncoming } from "./node-bindings.js";

/**
 * A request header, read from Node's own parsed header object when the app runs on the Node
 * server. `c.req.header()` builds a web Headers object from every header on its first call,
 * which costs more on the request path than everything else the middlewares do. `name` is lower
 * case. Off the Node server (Hono's `app.request` in tests) it asks Hono.
 */
export function requestHeader(c: Context, name: string): string | undefined {
  const incoming = nodeIncoming(c);
  return incoming ? nodeHeader(incoming, name) : c.req.header(name);
}

/** A header of a Node request, repeated values joined; `name` is lower case. */
export function nodeHeader(incoming: IncomingMessage, name: string): string | undefined {
  const value = incoming.headers[name];
  return Array.isArray(value) ? value.join(", ") : value;
}
