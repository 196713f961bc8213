/**
 * The last SSE text of a stream that broke midway, in each client style, so the
 * client's SDK raises an error instead of silently accepting a truncated answer.
 */

import type { ChatErrorBody } from "../openai-types.js";
import { encodeSSE } from "../sse.js";
import { randomId } from "./shared.js";

export type ClientStyle = "chat" | "messages" | "responses";

export type StreamErrorContext = {
  /** Responses style: continue the stream's numbering and name its response. */
  sequenceNumber?: number;
  responseId?: string;
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
  let sequence = context.sequenceNumber ?? 0;
  const error = {
    type: "error",
    code: context.code ?? "upstream_error",
    message,
    param: null,
    sequence_number: sequence++,
  };
  const failed = {
    type: "response.failed",
    response: {
      id: context.responseId ?? randomId("resp_"),
      object: "response",
      created_at: Math.floor(Date.now() / 1000),
      status: "failed",
      error: { code: "server_error", message },
      incomplete_details: null,
      model: context.model ?? "",
      output: [],
      usage: null,
    },
    sequence_number: sequence,
  };
  return encodeSSE(error, "error") + encodeSSE(failed, "response.failed");
}
