import type { IncomingMessage, RequestListener, ServerResponse } from "node:http";
import { type TraceSource, traceRequest, tracingRequests } from "./request-trace.js";

export type NodeRoute = (incoming: IncomingMessage, outgoing: ServerResponse) => void;

/**
 * The server's request listener: POSTs to one of `posts` go straight to their route, everything
 * else to `fallback` (the Hono app). Every request is traced while someone listens (`source` names
 * this gateway in the trace).
 */
export function nodeListener(
  posts: Map<string, NodeRoute>,
  fallback: RequestListener,
  source: TraceSource = { url: "" },
): RequestListener {
  return (incoming, outgoing) => {
    if (tracingRequests()) traceRequest(source, incoming, outgoing);
    const route = incoming.method === "POST" ? posts.get(pathOf(incoming.url)) : undefined;
    if (route) route(incoming, outgoing);
    else fallback(incoming, outgoing);
  };
}

function pathOf(url: string | undefined): string {
  if (!url) return "";
  const query = url.indexOf("?");
  const path = query === -1 ? url : url.slice(0, query);
  if (path.startsWith("/")) return path;
  // Absolute form ("http://host/path"), as a proxy would send it.
  try {
    return new URL(path).pathname;
  } catch {
    return "";
  }
}
