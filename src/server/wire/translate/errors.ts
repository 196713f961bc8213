/**
 * The last SSE text of a stream that broke midway, in each client style, so the
 * client's SDK raises an error instead of silently accepting a truncated answer.
 */

import type { ChatErrorBody } from "../openai-types.js";
import type { ResponsesRequest, ResponsesSSEEvent } from "../responses-types.js";
import { encodeSSE } from "../sse.js";
import { baseResponse, failedEvents } from "./responses.js";
import { nowSeconds, randomId } from "./shared.js";

export type ClientStyle = "chat" | "messages" | "responses";

export type StreamErrorContext = {
  /**
   * Responses style, a stream that failed before its first event (a break midway ends with the
   * stream's own events, `StreamCompletion.errorEvent`): the client's body and model, which the
   * Response in `response.failed` echoes as every Response does.
   */
  request?: ResponsesRequest;
  model?: string;
  /** The gateway's own reason (the stream could not be recorded, say); else upstream_error. */
  code?: string;
};

export function streamErrorEvent(
  style: ClientStyle,
  message: string,
  context: StreamErrorContext = {},
): string {
  if (style === "chat") {
    // The openai SDK throws an APIError for any data chunk carrying `error`.
    const body: ChatErrorBody = {
      error: {
        message,
        type: context.code ?? "upstream_error",
        code: context.code ?? "upstream_error",
        param: null,
      },
    };
    return encodeSSE(body);
  }
  if (style === "messages") {
    return encodeSSE({ type: "error", error: { type: "api_error", message } }, "error");
  }
  const response = baseResponse(
    context.request,
    context.model ?? context.request?.model ?? "",
    randomId("resp_"),
    nowSeconds(),
  );
  // Every Responses stream starts with response.created: the openai SDKs' stream helpers refuse
  // any other first event with an error of their own, and the client would never read this one.
  const created: ResponsesSSEEvent = {
    event: "response.created",
    data: { type: "response.created", response, sequence_number: 0 },
  };
  return encodeResponsesEvents([
    created,
    ...failedEvents(response, 1, message, context.code ?? "upstream_error"),
  ]);
}

/** Responses events as SSE text, each under its own event name. */
export function encodeResponsesEvents(events: ResponsesSSEEvent[]): string {
  let text = "";
  for (const ev of events) text += encodeSSE(ev.data, ev.event);
  return text;
}
