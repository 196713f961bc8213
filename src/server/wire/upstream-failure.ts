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
  ) {
    super(`upstream ${kind} (${status})`);
    this.name = "UpstreamFailure";
  }
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
 * A provider refused a body forwarded as the client wrote it, whose output limit is above the
 * model's configured maximum: that is most likely why, so the client is told so.
 */
export class OutputLimitRejected extends UpstreamFailure {
  constructor(
    status: number,
    readonly detail: string,
  ) {
    super("rejected", status, "invalid_request_error");
    this.name = "OutputLimitRejected";
  }
}
