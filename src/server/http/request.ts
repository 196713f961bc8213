import type { IncomingMessage, ServerResponse } from "node:http";
import type { Context } from "hono";
import { type RequestTrace, traceOf } from "./request-trace.js";

/**
 * What a handler reads of its request besides the body. The app runs on the Node server, which
 * passes the Node request and response as the env (`@hono/node-server`); off it (Hono's
 * `app.request` in tests) both are undefined and these read Hono's own objects.
 */
interface NodeBindings {
  incoming?: IncomingMessage;
  outgoing?: ServerResponse;
}

export function nodeIncoming(c: Context): IncomingMessage | undefined {
  return (c.env as NodeBindings | undefined)?.incoming;
}

export function nodeOutgoing(c: Context): ServerResponse | undefined {
  return (c.env as NodeBindings | undefined)?.outgoing;
}

/**
 * A request header (`name` in lower case), repeated values joined. Read from Node's own parsed
 * header object: `c.req.header()` builds a web Headers object from every header on its first
 * call, which costs more on the request path than everything else the registration does.
 */
export function requestHeader(c: Context, name: string): string | undefined {
  const incoming = nodeIncoming(c);
  if (!incoming) return c.req.header(name);
  const value = incoming.headers[name];
  return Array.isArray(value) ? value.join(", ") : value;
}

export function clientIp(c: Context): string {
  return nodeIncoming(c)?.socket?.remoteAddress ?? "unknown";
}

/** The request's trace while someone listens (`http/request-trace.ts`), else undefined. */
export function requestTrace(c: Context): RequestTrace | undefined {
  return traceOf(nodeIncoming(c));
}

/** An absolute URL on this gateway, as the client reached it. */
export function gatewayUrl(c: Context, path: string): string {
  return `${new URL(c.req.url).origin}${path}`;
}

/**
 * The origin this gateway's own pages are served from: the configured public URL or the
 * listening address. Not the request's Host header, which any page can make a browser send
 * (DNS rebinding).
 */
export function ownOrigin(publicOrigin: string | undefined, c: Context): string {
  return publicOrigin ?? new URL(c.req.url).origin;
}
