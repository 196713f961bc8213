import type { RequestListener, ServerResponse } from "node:http";
import { newId } from "../../store/secrets.js";
import { targetPath } from "./target.js";

/**
 * One id per request, on every answer: `x-request-id` (what OpenAI sends and its SDK reads as
 * `_request_id`), and on the messages style also `request-id` (Anthropic's). The request log's
 * row of an admitted request has the same id (`admit` takes it), so a client's id finds its row
 * in `/v1/usage/requests`, `/api/admin/requests`, the dashboard and serve's lines. Set before any
 * handler runs, so a request refused before admission (a 401, an unknown model) has one too.
 */
export function withRequestIds(inner: RequestListener): RequestListener {
  return (incoming, outgoing) => {
    const id = newId("req");
    outgoing.setHeader("x-request-id", id);
    if (targetPath(incoming.url ?? "").startsWith("/v1/messages"))
      outgoing.setHeader("request-id", id);
    inner(incoming, outgoing);
  };
}

/** The id `withRequestIds` gave the request answered on `outgoing`. */
export function requestIdOf(outgoing: ServerResponse | undefined): string | undefined {
  const id = outgoing?.getHeader("x-request-id");
  return typeof id === "string" ? id : undefined;
}
