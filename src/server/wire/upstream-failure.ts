import type { ErrorCode } from "../errors.js";

export type FailureKind =
  | "rejected"
  | "rate_limited"
  | "unauthorized"
  | "unavailable"
  | "busy"
  | "unsupported";

/** How one upstream attempt failed; mapped to the spec's errors by the dispatcher. */
export class UpstreamFailure extends Error {
  constructor(
    readonly kind: FailureKind,
    readonly status: number,
    readonly reason: ErrorCode = "upstream_rejected",
    readonly retryAfterMs?: number,
    /**
     * A rejection's own codes, from the provider's error body (`errorCodes` in
     * providers/classify.ts), for its provider's `classify`; never shown to a client.
     */
    readonly codes: readonly string[] = [],
  ) {
    super(`upstream ${kind} (${status})`);
    this.name = "UpstreamFailure";
  }

  /**
   * Why no connection to the provider was made (`connection refused`, `host not found`), for the
   * serve line's steps only: a base URL or a network to fix, where sending again does nothing.
   */
  unreachable?: string;
}

/**
 * The request asks for something this provider's wire cannot carry (`detail` says what); nothing
 * was sent. Inside a route the next backend may carry it.
 */
export class UnsupportedRequest extends UpstreamFailure {
  constructor(readonly detail: string) {
    super("unsupported", 400, "invalid_request_error");
    this.name = "UnsupportedRequest";
  }
}

/**
 * A request its client's own API refuses (a `tool_choice` naming a tool it does not declare),
 * answered as that API answers it, `invalid_request_error`; nothing was sent, and no backend of a
 * route carries it either.
 */
export class InvalidRequest extends UnsupportedRequest {
  constructor(detail: string) {
    super(detail);
    this.name = "InvalidRequest";
  }
}

/**
 * A provider refused a request, and the gateway can tell the client the likely reason (`detail`)
 * without passing the provider's own words on: an output limit above the model's configured
 * maximum, `system` items inside `messages`, or an input over the context window that the client
 * asked to have cut or compacted.
 */
export class ExplainedRejection extends UpstreamFailure {
  constructor(
    status: number,
    readonly detail: string,
    reason: ErrorCode = "invalid_request_error",
  ) {
    super("rejected", status, reason);
    this.name = "ExplainedRejection";
  }
}
