import { type StorageFaultKind, storageFaultKind } from "../store/storage-fault.js";

/**
 * One error model for the whole gateway, rendered in the style of the route that was called.
 * Raise a GatewayError where the problem is found; `errorResponse` turns it into the response.
 */
export type ErrorStyle = "chat" | "messages" | "jsonrpc";

export type ErrorCode =
  | "bad_request"
  | "model_not_found"
  | "upstream_error"
  | "insufficient_balance"
  | "payg_limit_reached"
  | "subscribers_only"
  | "shared_key_not_allowed"
  | "rate_limit_exceeded"
  | "free_quota_daily"
  | "free_quota_rpm"
  | "plan_limit_reached"
  | "all_providers_failed"
  | "no_wire_for_modality"
  | "internal_error"
  | "storage_unavailable"
  | "not_found"
  | "forbidden"
  | "client_closed"
  | "account_suspended"
  // upstream rejection reasons (error.type is then invalid_request_error)
  | "invalid_request_error"
  | "context_length_exceeded"
  | "content_policy_violation"
  | "upstream_rejected";

export class GatewayError extends Error {
  constructor(
    readonly status: number,
    readonly code: ErrorCode,
    message: string,
    readonly options: {
      retryAfter?: number;
      upstreamRejection?: boolean;
      /** Machine-readable detail a client acts on (Anthropic's `error.details.error_code`). */
      details?: Record<string, string>;
    } = {},
  ) {
    super(message);
    this.name = "GatewayError";
  }
}

/**
 * A request no row serves: a path, or a method its path does not take, whose message names the
 * methods it does take. A handler whose row turns out not to serve the request (a WebSocket-only
 * GET without its upgrade) throws it without them; the registration fills them in, as it does for
 * every path no row serves.
 */
export class NoRoute extends GatewayError {
  constructor(
    readonly method: string,
    readonly path: string,
    readonly takes: readonly string[] = [],
    /** The path the client most likely meant, and why it did not send it (a base URL's slip). */
    readonly meant?: { path: string; why: string },
  ) {
    super(
      404,
      "not_found",
      `No route ${method} ${path}${takes.length > 0 ? `; this path takes ${takes.join(", ")}` : ""}${
        meant ? `; send it to ${method} ${meant.path} (${meant.why})` : ""
      }.`,
    );
  }
}

/** Rejections that happen before the API layer: plain text, neither JSON style. */
export class PlainTextError extends Error {
  constructor(
    readonly status: number,
    message: string,
    /** Why, for the request's log line only (`key_revoked`); the body says no more than `message`. */
    readonly reason?: string,
  ) {
    super(message);
    this.name = "PlainTextError";
  }
}

export const badRequest = (message: string) => new GatewayError(400, "bad_request", message);

/**
 * Fixed service text for upstream rejections: what happened, then what the caller can do. The
 * provider's own body is never passed on, so each says where to look instead.
 */
const upstreamRejectionText: Record<string, string> = {
  context_length_exceeded:
    "The request exceeds the model's maximum context window. Send a shorter conversation (or ask for less output), or choose a model with a larger context window from GET /v1/models.",
  model_not_found:
    "The provider does not recognise the requested model. Choose another model from GET /v1/models; if this one is listed there, ask the gateway's admin to check its upstream model name.",
  content_policy_violation:
    "The provider blocked the request for content policy. Change the flagged content before sending it again: the same request is blocked again.",
  invalid_request_error:
    "The provider rejected the request as invalid. Check its fields and values against this route's API (the provider's own message is not passed on), then send it corrected.",
  upstream_rejected:
    "The provider rejected the request without a reason the gateway can pass on. Check the request, or choose another model from GET /v1/models; if every request to this model is rejected, tell the gateway's admin.",
};

const keptRejectionStatuses = new Set([400, 403, 404, 413, 422, 429]);

export function upstreamRejection(status: number, reason: ErrorCode): GatewayError {
  return new GatewayError(
    keptRejectionStatuses.has(status) ? status : 400,
    reason,
    upstreamRejectionText[reason] ?? upstreamRejectionText.upstream_rejected,
    { upstreamRejection: true },
  );
}

function messagesType(status: number, code: ErrorCode): string {
  if (code === "model_not_found" && status === 400) return "not_found_error";
  if (status === 401) return "authentication_error";
  if (status === 402) return "payment_required";
  if (status === 403) return "permission_error";
  if (status === 404) return "not_found_error";
  if (status === 429) return "rate_limit_error";
  if (status >= 500) return "api_error";
  return "invalid_request_error";
}

/**
 * The JSON-RPC code of a refusal at /mcp's HTTP layer (the body limit, a fault): the server-error
 * code the MCP SDK's transport answers its own such refusals with, the HTTP status saying which.
 */
const jsonRpcServerError = -32000;

export function errorBody(err: GatewayError, style: ErrorStyle): object {
  // An MCP client reads a JSON-RPC error object; a refusal of the whole POST answers no request,
  // so its id is null, as in the SDK transport's own refusals (a body over its limit).
  if (style === "jsonrpc")
    return { jsonrpc: "2.0", error: { code: jsonRpcServerError, message: err.message }, id: null };
  if (style === "messages") {
    return {
      type: "error",
      error: {
        type: messagesType(err.status, err.code),
        message: err.message,
        ...(err.options.details ? { details: err.options.details } : {}),
      },
    };
  }
  return {
    error: {
      message: err.message,
      type: err.options.upstreamRejection ? "invalid_request_error" : err.code,
      param: null,
      code: err.code,
    },
  };
}

/**
 * The 429s the spec tells clients not to retry (they clear at a window's end, hours away). The
 * official SDKs retry every 429 unless the answer says `x-should-retry: false`.
 */
const notToRetry: ReadonlySet<ErrorCode> = new Set(["free_quota_daily", "plan_limit_reached"]);

export function errorHeaders(err: GatewayError): Record<string, string> {
  const headers: Record<string, string> =
    err.options.retryAfter === undefined
      ? {}
      : { "Retry-After": String(Math.max(0, Math.ceil(err.options.retryAfter))) };
  if (notToRetry.has(err.code)) headers["x-should-retry"] = "false";
  return headers;
}

/** Who can lift a suspension: nothing the caller sends will. */
const reinstateText =
  "ask the account's owner (or the gateway's admin) to reinstate it; its keys work again then";

/** A stream's end when its account was suspended while it was open; the next request gets the plain 401. */
export const accountSuspended = () =>
  new GatewayError(
    401,
    "account_suspended",
    `This account was suspended; its keys stopped working: ${reinstateText}.`,
  );

/** The plain-text 401 of every key of a suspended account (the spec: before the API layer). */
export const suspendedAccountRefusal = () =>
  new PlainTextError(401, `account suspended: ${reinstateText}`, "account_suspended");

/**
 * A stream a stopping `gateway serve` cut before its answer finished (a second signal, or the
 * drain bound passing): a 503, which clients may retry elsewhere.
 */
export const gatewayStopping = () =>
  new GatewayError(
    503,
    "upstream_error",
    "The gateway is shutting down: this stream was cut before its answer finished. Send the request again.",
  );

/**
 * The longest provider wait a 503 passes on: the official OpenAI SDKs honour a Retry-After up to a
 * minute and fall back to their own backoff past it, and a client's retry past it would only meet
 * the same refusal sooner or later.
 */
const longestProviderWaitSeconds = 60;

/**
 * A provider that failed or did not answer in time; a route with fallback steps would have tried
 * the next. A provider that said how long to wait (a 503's Retry-After) has that wait passed on,
 * in whole seconds within a minute (a 429's wait is its pool key's cooldown, never the client's).
 */
export const providerFailed = (retryAfterMs?: number) => {
  if (retryAfterMs === undefined)
    return new GatewayError(
      503,
      "upstream_error",
      "The provider failed or timed out: send the request again in a few seconds.",
    );
  const seconds = Math.min(longestProviderWaitSeconds, Math.max(1, Math.ceil(retryAfterMs / 1000)));
  return new GatewayError(
    503,
    "upstream_error",
    "The provider is unavailable for now and said how long to wait: send the request again after the Retry-After seconds.",
    { retryAfter: seconds },
  );
};

/** Recorded in the request log when the client left first; nobody receives it. */
export const clientClosed = () =>
  new GatewayError(499, "client_closed", "The client closed the connection before the answer.");

export function internalError(): GatewayError {
  return new GatewayError(
    500,
    "internal_error",
    "The gateway hit an unexpected error: send the request again, and if it recurs, report it with this answer's x-request-id.",
  );
}

/** Seconds a client is asked to wait while the gateway's disk is full. */
const storageRetryAfterSeconds = 30;

const storageReasons: Record<StorageFaultKind, string> = {
  full: "its disk is full",
  failing: "its disk refuses writes",
  lost: "its database file was removed",
  unreachable: "its database cannot be reached",
};

/**
 * A write the request needs (its charge, above all) failed: no disk space, a disk that refuses
 * writes, or a database file taken away. Nothing was delivered and nothing was charged, so the
 * same request may simply be sent again.
 */
export function storageUnavailable(kind: StorageFaultKind = "full"): GatewayError {
  return new GatewayError(
    503,
    "storage_unavailable",
    `The gateway cannot record requests right now (${storageReasons[kind]}), so this one was not served and nothing was charged. Retry later.`,
    { retryAfter: storageRetryAfterSeconds },
  );
}

/**
 * A settlement the database refused because its answer came late: this gateway was taken as dead
 * (frozen past its lease) while the provider worked, its hold was released, and the account can no
 * longer pay. The answer is not handed over; a stream ends here, charged what its delivery mark
 * had paid for (`charged`: the usage the reaper charged by the mark, which a stream's error event
 * reports as every other one reports what its stream is charged; nothing for a whole answer). Sent
 * again, the request is admitted (or refused) as any new one.
 */
export class LateAnswerRefusal extends GatewayError {
  constructor(
    stream: boolean,
    // The wire's Usage, by its shape: errors import nothing of the wire (one way between folders).
    readonly charged: { input_tokens: number; output_tokens: number },
  ) {
    super(
      503,
      "storage_unavailable",
      stream
        ? "This gateway was taken as stopped while it streamed this answer, and the account can no longer pay for the rest of it, so the stream ends here, charged only what it had delivered before. Retry later."
        : "This gateway was taken as stopped while it worked on this request, and the account can no longer pay for the answer, so it was not served and nothing was charged. Retry later.",
      { retryAfter: storageRetryAfterSeconds },
    );
  }
}

/**
 * The one rendering of whatever a route throws: plain text before the API layer, the route's
 * JSON style for a GatewayError, and for anything else an internal error whose one log line
 * names the route and the exception but never a stack, a request body or a secret.
 */
export function errorResponse(err: unknown, style: ErrorStyle, route: string): Response {
  if (err instanceof PlainTextError) {
    return new Response(err.message, {
      status: err.status,
      headers: { "content-type": "text/plain; charset=UTF-8" },
    });
  }
  let known: GatewayError;
  if (err instanceof GatewayError) known = err;
  // The ledger logs the fault once, naming the database; a line per request would flood.
  else if (storageFaultKind(err)) known = storageUnavailable(storageFaultKind(err));
  else {
    const { name, message } = err instanceof Error ? err : { name: "Error", message: String(err) };
    console.error(`internal error on ${route}: ${name}: ${message}`);
    known = internalError();
  }
  return new Response(JSON.stringify(errorBody(known, style)), {
    status: known.status,
    headers: { "content-type": "application/json", ...errorHeaders(known) },
  });
}
