import type { IncomingMessage, ServerResponse } from "node:http";
import type { Context } from "hono";

/**
 * The Node request and response under a Hono context, when the app runs on the Node server
 * (`@hono/node-server` passes them as the env). Off it (Hono's `app.request` in tests) both are
 * undefined and callers use Hono's own objects.
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
